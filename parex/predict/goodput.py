"""Time to train and surviving failure: goodput, interruptions, energy and cost of a whole run.

A run of S steps of t seconds does W = S·t seconds of useful work. On n nodes it is interrupted
at a rate λ = n·r_f (r_f: failures per node-day), M = 1/λ apart. It saves a checkpoint every τ
seconds of work, which stalls it δ seconds (the state's bytes / the storage bandwidth); after a
failure it restarts (R0: rescheduling, initialisation) and reads the last checkpoint back
(restore: bytes / bandwidth), R in all, and repeats the work since that checkpoint.

Under exponentially distributed failures, Daly's complete model (Daly 2006, "A higher order
estimate of the optimum checkpoint interval for restart dumps", FGCS 22, eq. 13) gives the wall
time of W:
    T = M · e^(R/M) · (e^((τ+δ)/M) − 1) · W / τ,      goodput = W / T
and its optimum interval (eq. 37), Young's τ = √(2δM) (Young 1974) with higher-order terms:
    τ* = √(2δM) · [1 + ⅓·√(δ/2M) + ⅑·(δ/2M)] − δ     (δ < 2M; else τ* = M)
Interruptions expected: T / M. GPU-hours: n·d·T. Energy: the devices' board power under load
(each chip's with its source below; the hosts, network and cooling are not counted) × T.

Failure rates (FAILURE_RATES) come from Meta's study of its two research clusters (Kokolis et al.
2024, "Revisiting Reliability in Large-Scale Machine Learning Research Clusters", arXiv
2410.21680, HPCA 2025): 11 months, 150M A100 GPU-hours; MTTF ∝ 1/nodes with r_f = 6.50 (RSC-1,
~16k GPUs) and 2.34 (RSC-2, ~8k GPUs) failures per 1000 node-days, which projects 1.8 hours for
a 16,384-GPU job on RSC-1. The default pools both clusters' node-days. The Llama 3 paper's own
count (466 interruptions in 54 days on 16,384 H100s, arXiv 2407.21783) is held out: the gallery
scores this model against it (parex.figures.goodput).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import InputError, unknown

DAY = 86_400.0
HOUR = 3_600.0

# failures per node-day (8-GPU nodes), arXiv 2410.21680 (see the module doc)
RSC1, RSC2 = 6.50e-3, 2.34e-3
RSC1_NODES, RSC2_NODES = 2_000, 1_000  # ~16k and ~8k A100s, 8 per node (the same paper)
FAILURE_RATES = {
    "meta-rsc": (RSC1 * RSC1_NODES + RSC2 * RSC2_NODES) / (RSC1_NODES + RSC2_NODES),
    "meta-rsc1": RSC1,
    "meta-rsc2": RSC2,
}
DEFAULT_FAILURES = "meta-rsc"

# Board power under load, watts: the vendors' maximum thermal design power.
BOARD_POWER_W = {
    "h100-sxm": (700, "NVIDIA H100 Tensor Core GPU datasheet: SXM up to 700 W"),
    "h100-pcie": (350, "NVIDIA H100 Tensor Core GPU datasheet: PCIe 300-350 W"),
    "h100-nvl": (400, "NVIDIA H100 Tensor Core GPU datasheet: H100 NVL 350-400 W"),
    "h100-sxm-500w": (500, "torchtitan docs/performance.md: its H100s' default 500 W limit"),
    "gb200-nvl72": (1200, "NVIDIA GB200 NVL72 specifications: up to 1,200 W per GPU"),
    "h200": (700, "NVIDIA H200 Tensor Core GPU datasheet: SXM up to 700 W"),
    "a100-80gb": (400, "NVIDIA A100 Tensor Core GPU datasheet: SXM 400 W"),
    "a100-pcie-80gb": (300, "NVIDIA A100 Tensor Core GPU datasheet: PCIe 300 W"),
    "b200": (1000, "NVIDIA HGX B200 specification: 1000 W per GPU"),
    "mi300x": (750, "AMD Instinct MI300X datasheet: 750 W peak board power"),
    "l40s": (350, "NVIDIA L40S datasheet: 350 W"),
    "rtx-4090": (450, "NVIDIA GeForce RTX 4090 specifications: 450 W total graphics power"),
    "rtx-3090": (350, "NVIDIA GeForce RTX 3090 specifications: 350 W"),
    "rtx-3080ti": (350, "NVIDIA GeForce RTX 3080 Ti specifications: 350 W"),
}

# Assumed, not published for a particular system: inputs, stated in every report.
STORAGE_BANDWIDTH = 1e12  # B/s, aggregate: a parallel file system every node writes to at once
RESTART_S = 600.0  # s, a failed job's rescheduling, process start and initialisation
CHINCHILLA_TOKENS_PER_PARAM = 20  # Hoffmann et al. 2022 (arXiv 2203.15556): compute-optimal


@dataclass(frozen=True)
class Reliability:
    """How a run fails and recovers: the inputs of the goodput model."""

    failures_per_node_day: float = FAILURE_RATES[DEFAULT_FAILURES]
    failures_source: str = DEFAULT_FAILURES  # a FAILURE_RATES key, or "given"
    storage_bandwidth: float = STORAGE_BANDWIDTH  # B/s, checkpoint writes and reads
    restart_s: float = RESTART_S  # R0: time lost per failure before the restore begins
    interval_s: float | None = None  # checkpoint every τ seconds of work; None: Daly's optimum

    def __post_init__(self):
        for name in ("failures_per_node_day", "storage_bandwidth"):
            if not getattr(self, name) > 0:
                raise InputError(f"{name.replace('_', ' ')} {getattr(self, name)}: give a "
                                 f"positive number")
        if self.restart_s < 0 or (self.interval_s is not None and not self.interval_s > 0):
            raise InputError("restart time must be >= 0 and the checkpoint interval > 0")

    @classmethod
    def named(cls, source: str, **changes) -> "Reliability":
        if source not in FAILURE_RATES:
            raise InputError(unknown("failure-rate source", source, FAILURE_RATES))
        return cls(FAILURE_RATES[source], source, **changes)

    def to_json(self) -> dict:
        return {"failures_per_node_day": self.failures_per_node_day,
                "failures_source": self.failures_source,
                "storage_bandwidth_B_per_s": self.storage_bandwidth,
                "restart_s": self.restart_s, "interval_s": self.interval_s}


def daly_interval(delta, mttf):
    """Daly's optimum checkpoint interval τ* (eq. 37) for a save of δ seconds and an MTTF M."""
    delta, mttf = np.asarray(delta, float), np.asarray(mttf, float)
    x = delta / (2 * mttf)
    tau = np.sqrt(2 * delta * mttf) * (1 + np.sqrt(x) / 3 + x / 9) - delta
    return np.where(delta < 2 * mttf, np.maximum(tau, 1e-9), mttf)


def goodput(tau, delta, restart, mttf):
    """Useful work / wall time under Daly's complete model (module doc)."""
    tau, delta, restart, mttf = (np.asarray(v, float) for v in (tau, delta, restart, mttf))
    return tau / (mttf * np.exp(restart / mttf) * np.expm1((tau + delta) / mttf))


def checkpoint_bytes(n_params: float, recipe_name: str) -> float:
    """The state a checkpoint holds, each shard written once (the copies data-parallel replicas
    hold are the same bytes): every parameter's stored copy and optimizer state under the
    memory recipe (parex.predict.memory.RECIPES: 4 + 8 bytes for parex's float32 AdamW, 2 + 12
    for mixed precision's bf16 weights, fp32 master copy and moments)."""
    from .memory import recipe

    rec = recipe(recipe_name)
    return n_params * (rec.param_bytes + rec.optimizer_bytes)


@dataclass(frozen=True)
class TimeToTrain:
    """A whole run of one layout, failures included."""

    steps: float
    tokens: float
    step_time_s: float
    devices: int
    nodes: float
    checkpoint_bytes: float  # the whole state, each shard once
    save_s: float  # δ
    restore_s: float
    mttf_s: float  # M
    interval_s: float  # τ
    interval_chosen: str  # "Daly" or "given"
    goodput: float
    wall_s: float
    interruptions: float
    gpu_hours: float
    energy_kwh: float | None
    power_w: float | None
    power_source: str
    cost: float | None
    price_per_gpu_hour: float | None
    reliability: Reliability

    @property
    def days(self) -> float:
        return self.wall_s / DAY

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "reliability"}
        return out | {"days": self.days, "reliability": self.reliability.to_json()}


def time_to_train(step_time_s: float, tokens_per_step: int, devices: int, devices_per_node: int,
                  state_bytes: float, chip: str, *, tokens: float | None = None,
                  steps: float | None = None, reliability: Reliability = Reliability(),
                  price_per_gpu_hour: float | None = None) -> TimeToTrain:
    """The run of `steps` steps (or `tokens` tokens) of a layout whose step takes
    `step_time_s` and whose state (parameters + optimizer, each shard once) is `state_bytes`."""
    if (tokens is None) == (steps is None):
        raise InputError("give the run's length as tokens or as steps, one of them")
    if steps is None:
        steps = math.ceil(tokens / tokens_per_step)
    if not steps > 0:
        raise InputError(f"a run of {steps} steps: give at least one step")
    rel = reliability
    nodes = devices / devices_per_node
    mttf = DAY / (rel.failures_per_node_day * nodes)
    save = restore = state_bytes / rel.storage_bandwidth
    tau = float(daly_interval(save, mttf)) if rel.interval_s is None else rel.interval_s
    g = float(goodput(tau, save, rel.restart_s + restore, mttf))
    wall = steps * step_time_s / g
    power, source = BOARD_POWER_W.get(chip, (None, f"no board power on record for {chip}"))
    gpu_hours = devices * wall / HOUR
    return TimeToTrain(
        steps=steps, tokens=steps * tokens_per_step, step_time_s=step_time_s, devices=devices,
        nodes=nodes, checkpoint_bytes=state_bytes, save_s=save, restore_s=restore,
        mttf_s=mttf, interval_s=tau, interval_chosen="given" if rel.interval_s else "Daly",
        goodput=g, wall_s=wall, interruptions=wall / mttf, gpu_hours=gpu_hours,
        energy_kwh=None if power is None else power * gpu_hours / 1000, power_w=power,
        power_source=source, price_per_gpu_hour=price_per_gpu_hour,
        cost=None if price_per_gpu_hour is None else gpu_hours * price_per_gpu_hour,
        reliability=rel)


def of_prediction(p, model, cluster, **run) -> TimeToTrain:
    """time_to_train of a Prediction (parex.predict) of `model` on `cluster`: its step time, and
    its recipe's parameters + optimizer state as the checkpoint."""
    state = checkpoint_bytes(model.n_params, p.assumptions["recipe"])
    return time_to_train(p.step_time_s["total"], p.tokens_per_step, p.n_devices,
                         cluster.chip.devices_per_node, state, cluster.chip.name, **run)


__all__ = ["BOARD_POWER_W", "CHINCHILLA_TOKENS_PER_PARAM", "DEFAULT_FAILURES", "FAILURE_RATES",
           "Reliability", "TimeToTrain", "checkpoint_bytes", "daly_interval", "goodput",
           "of_prediction", "time_to_train"]
