"""The schema shared by what was measured and what is predicted.

Units: seconds per optimizer step, bytes per device, FLOPs per device per step (a multiply-add is 2).
`Measurement` and (later) `Prediction` use the same field names, so a `Record` can put them side by side
and flatten into one tidy DataFrame row that every chart, widget and table reads.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

# The collective kinds both sides count, with the bytes convention of parex.measure.hlo (the
# full logical buffer one device contributes or receives) and of parex.predict.comm.
KINDS = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all")


@dataclass(frozen=True)
class Collective:
    """One kind of collective as run by one device in one step."""

    kind: str  # one of KINDS
    count: int  # executions per step (loop trip counts included)
    bytes: int  # bytes per execution, by the convention above
    group_size: int  # devices per group
    axes: tuple[str, ...]  # mesh axes spanned by a group

    @property
    def total_bytes(self) -> int:
        return self.count * self.bytes

    def to_json(self) -> dict:
        return {"kind": self.kind, "count": self.count, "bytes": self.total_bytes,
                "bytes_per_op": self.bytes, "group_size": self.group_size, "axes": list(self.axes)}


def bytes_by_kind(collectives: list[Collective]) -> dict[str, int]:
    totals = {kind: 0 for kind in KINDS}
    for c in collectives:
        totals[c.kind] += c.total_bytes
    return totals


def wire_bytes(collectives) -> int:
    """Bytes one device sends per step, ring algorithms over groups of g: all-reduce
    2(g−1)/g · S, all-gather / reduce-scatter / all-to-all (g−1)/g · S, permute S (S: hlo bytes)."""
    share = {"all-reduce": lambda g: 2 * (g - 1) / g, "collective-permute": lambda g: 1.0}
    return int(sum(c.total_bytes * share.get(c.kind, lambda g: (g - 1) / g)(c.group_size)
                   for c in collectives if c.group_size > 0))


MEMORY_PARTS = ("argument", "output", "alias", "temp", "total")
TIGHT_MEMORY = 0.1  # under this share of the device's memory left, memory bounds the layout
BOUNDS = {"compute": "compute", "exposed_comm": "communication", "bubble": "bubble"}


def bound(step_time_s: dict, memory_total: float, capacity: float) -> str:
    """What bounds a step, in one word (the Planner, the Explorer and the charts say it alike):
    "memory" when less than TIGHT_MEMORY of `capacity` is left (or it does not fit), else the
    largest part of its step time: "compute", "communication" (exposed) or "bubble"."""
    if capacity and capacity - memory_total < TIGHT_MEMORY * capacity:
        return "memory"
    return BOUNDS[max(BOUNDS, key=lambda part: step_time_s.get(part, 0.0))]


@dataclass
class Measurement:
    """What one layout did on a real mesh: XLA's compile statistics and timed steps."""

    model: str  # model preset name
    layout: str  # the Layout's string form
    n_devices: int
    platform: str  # "cpu", "gpu", "tpu"
    losses: list[float]  # one per step, in order
    step_time_s: dict[str, float]  # median, min, max over the timed steps
    compile_time_s: float  # lowering + compilation
    memory_bytes_per_device: dict[str, int]  # MEMORY_PARTS; total = argument + output − alias
    # + temp
    flops_per_device: float  # XLA's cost analysis of the compiled step; it counts each loop body
    # (the scan over layers, microbatches, pipeline ticks) once: see matmul_flops_per_device
    bytes_accessed_per_device: float  # XLA cost analysis: HBM traffic
    matmul_flops_per_device: float = 0.0  # every dot in the compiled step, loop trips included
    collectives: list[Collective] = field(default_factory=list)
    tokens_per_step: int = 0
    diloco: dict | None = None  # DiLoCo layouts: inner_steps, cross_replica_bytes_per_step,
    # outer_bytes_per_sync, inner_bytes_per_device_per_step, ... (parex.lowcomm.measure)
    moe: dict | None = None  # mixtures of experts, per step: dropped_fraction, expert_load
    # (each expert's share of the assignments), balance_loss (parex.measure.router)
    checkpoint: dict | None = None  # runs with --checkpoint: saves, bytes_per_device,
    # save_blocking_s, resumed_from_step (parex.executor.checkpoint)

    @property
    def tokens_per_s(self) -> float:
        median = self.step_time_s.get("median", 0.0)
        return self.tokens_per_step / median if median else 0.0

    @property
    def comm_bytes_per_device(self) -> dict[str, int]:
        return bytes_by_kind(self.collectives)

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        out["collectives"] = [c.to_json() for c in self.collectives]
        out["tokens_per_s"] = self.tokens_per_s
        out["comm_bytes_per_device"] = self.comm_bytes_per_device
        return out

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2)

    def to_row(self) -> dict:
        """Flat columns for a DataFrame; `source` tells measured rows from predicted ones."""
        row = {"source": "measured", "model": self.model, "layout": self.layout,
               "n_devices": self.n_devices, "platform": self.platform,
               "step_time_s": self.step_time_s.get("median"),
               "step_time_min_s": self.step_time_s.get("min"),
               "step_time_max_s": self.step_time_s.get("max"),
               "compile_time_s": self.compile_time_s, "flops_per_device": self.flops_per_device,
               "matmul_flops_per_device": self.matmul_flops_per_device,
               "tokens_per_s": self.tokens_per_s,
               "loss_first": self.losses[0] if self.losses else None,
               "loss_last": self.losses[-1] if self.losses else None}
        row |= {f"memory_{k}_bytes": v for k, v in self.memory_bytes_per_device.items()}
        row |= {f"comm_{k.replace('-', '_')}_bytes": v
                for k, v in self.comm_bytes_per_device.items()}
        return row | diloco_columns(self.diloco) | moe_columns(self.moe)


def moe_columns(block: dict | None) -> dict:
    """A `moe` block's last step as columns: moe_dropped_fraction, moe_max_load_ratio (the
    busiest expert's load over the mean: what sets an imbalanced step)."""
    if not block or not block.get("dropped_fraction"):
        return {}
    return {"moe_dropped_fraction": block["dropped_fraction"][-1],
            "moe_max_load_ratio": block["max_load_ratio"][-1]}


def diloco_columns(block: dict | None) -> dict:
    """The scalar entries of a `diloco` block as `diloco_<name>` columns."""
    return {f"diloco_{k}": v for k, v in (block or {}).items()
            if isinstance(v, (int, float, str, bool)) or v is None}


PREDICTED_MEMORY_PARTS = ("params", "grads", "optimizer", "activations", "temp", "argument",
                          "total")
STEP_TIME_PARTS = ("total", "compute", "exposed_comm", "bubble")


@dataclass
class Prediction:
    """What the analytic model says one layout costs, in Measurement's units and field names.

    memory_bytes_per_device has PREDICTED_MEMORY_PARTS; "argument" (parameters + optimizer state +
    batch, what the compiled step takes in) and "total" are directly comparable with the measured
    parts of the same name. step_time_s has STEP_TIME_PARTS; "total" compares with the measured
    median.
    """

    model: str
    layout: str
    n_devices: int
    hardware: str  # hardware profile name, e.g. "a100-80gb" or "cpu-local"
    step_time_s: dict[str, float]
    memory_bytes_per_device: dict[str, float]
    flops_per_device: float  # hardware FLOPs (recompute included), the measured side's convention
    model_flops_per_device: float  # no recompute: what MFU uses
    comm_bytes_per_device: dict[str, float]  # by collective kind (hlo.KINDS), hlo.py's convention
    tokens_per_step: int = 0
    mfu: float = 0.0
    hfu: float = 0.0
    fits: bool = True
    over_capacity_bytes: float = 0.0  # how far total memory exceeds the device's HBM (0 if it fits)
    memory_capacity_bytes: float = 0.0  # the device's HBM, what `fits` is judged against
    collectives: list[dict] = field(default_factory=list)  # {kind, axes, count, bytes, seconds}
    convention: str = "gpu"  # "xla-cpu" (what the emulated mesh compiles) or "gpu" (ideal)
    hardware_flops_per_device: float = 0.0  # true count with recompute, every loop iteration (HFU)
    diloco: dict | None = None  # DiLoCo layouts: the outer sync over the WAN
    # (parex.lowcomm.predict); the other fields describe one replica's inner step
    executable: bool = True  # parex's executor runs this layout on a mesh today
    executable_reason: str = ""  # why not, and the nearest layout that runs (validation.py)
    assumptions: dict | None = None  # the Setting it was predicted under (parex.setting:
    # hardware, regime, dtype, recipe, convention, batch, b, remat, schedule, kernel)
    overlaps: dict | None = None  # {overlap: {comm, exposed, contention}} seconds: what each
    # of the stack's overlaps leaves exposed (parex.predict.overlap); None on the emulated mesh

    @property
    def tokens_per_s(self) -> float:
        total = self.step_time_s.get("total", 0.0)
        return self.tokens_per_step / total if total else 0.0

    @property
    def bound(self) -> str:
        """What bounds the step (record.bound): memory, compute, communication or bubble."""
        return bound(self.step_time_s, self.memory_bytes_per_device.get("total", 0.0),
                     self.memory_capacity_bytes)

    @property
    def tflops_per_device(self) -> float:
        """Achieved hardware TFLOP/s per device (recompute included)."""
        total = self.step_time_s.get("total", 0.0)
        return self.hardware_flops_per_device / total / 1e12 if total else 0.0

    def to_json(self) -> dict:
        return dataclasses.asdict(self) | {"tokens_per_s": self.tokens_per_s,
                                           "tflops_per_device": self.tflops_per_device}

    def to_row(self) -> dict:
        row = {"source": "predicted", "model": self.model, "layout": self.layout,
               "n_devices": self.n_devices, "hardware": self.hardware,
               "step_time_s": self.step_time_s.get("total"),
               "flops_per_device": self.flops_per_device, "tokens_per_s": self.tokens_per_s,
               "mfu": self.mfu, "hfu": self.hfu, "fits": self.fits,
               "executable": self.executable, "bound": self.bound}
        row |= {f"step_{k}_s": v for k, v in self.step_time_s.items() if k != "total"}
        row |= {f"memory_{k}_bytes": v for k, v in self.memory_bytes_per_device.items()}
        row |= {f"comm_{k.replace('-', '_')}_bytes": v
                for k, v in self.comm_bytes_per_device.items()}
        return row | diloco_columns(self.diloco)


def records_frame(items):
    """One tidy DataFrame of Measurement and Prediction rows (column `source` tells them apart)."""
    import pandas as pd

    return pd.DataFrame([item.to_row() for item in items])


def collectives_from_json(items: list[dict]) -> list[Collective]:
    return [Collective(c["kind"], c["count"], c["bytes_per_op"], c["group_size"], tuple(c["axes"]))
            for c in items]


__all__ = ["BOUNDS", "KINDS", "TIGHT_MEMORY", "bound", "MEMORY_PARTS", "PREDICTED_MEMORY_PARTS", "STEP_TIME_PARTS", "Measurement",
           "Prediction", "collectives_from_json", "records_frame"]
