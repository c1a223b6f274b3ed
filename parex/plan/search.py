"""`plan`: every layout of a model on a cluster, predicted, filtered by memory and ranked.

    enumerate (candidates.py) -> predict_batch once per remat policy -> drop what does not fit
    under the cap -> rank (rank.py) -> the top K distinct predictions that parex.validation
    accepts -> Plan

A Plan keeps every valid (layout, remat) row as columns, so the Pareto front, a chart or another
objective are a re-rank away. When nothing fits, `plan` raises NoFit with the nearest thing that
works: the cap the leanest layout needs, or the smallest cluster on which one fits.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np

from ..config import REMAT_POLICIES, ModelConfig, TrainConfig
from ..errors import InputError
from ..hardware import Cluster
from ..layout import Layout, LayoutError
from ..predict import Grid, predict_columns
from ..setting import Setting, describe, resolve
from ..validation.checks import check_layout, check_valid, valid_columns
from . import rank, tensor3d
from .candidates import COLUMNS, DATA, EXPERT, FSDP, Candidates, layout_at
from .names import cluster_of

PREDICTED = (("step_time_s",) + tuple(f"step_{p}_s" for p in rank.TIME_PARTS)
             + tuple(f"memory_{p}_bytes" for p in rank.MEMORY_PARTS) + ("mfu", "tokens_per_s"))
MAX_WALK = 10_000  # ranked rows the top-K check walks past at most


class NoFit(InputError):
    """No layout runs or fits; the message names the nearest setting that works."""


@dataclass
class Plan:
    """Every valid (layout, remat) row of a model on a cluster, predicted and ranked."""

    model: ModelConfig
    train: TrainConfig  # global batch and sequence length; remat and microbatches are per row
    cluster: Cluster
    memory_cap: float  # bytes per device a layout may use
    objective: str
    columns: dict  # layout COLUMNS, "remat" (index into REMAT_POLICIES) and PREDICTED
    order: np.ndarray  # the fitting rows, best first
    top: list[int]  # the first K rows of `order` that parex.validation accepts
    n_candidates: int  # rows enumerated before the predictor's validity check
    seconds: float  # enumerate + predict + rank
    rejected: int = 0  # ranked rows the predictor accepted and parex.validation did not
    equivalents: dict = dataclasses.field(default_factory=dict)  # row -> equally predicted rows
    setting: Setting | None = None  # what every row was predicted under, but its remat and
    # microbatch count (setting_of(i) has row i's)
    remats: tuple[str, ...] = REMAT_POLICIES  # the policies searched

    @property
    def settings(self) -> dict:
        """predict()'s keywords that give a row's numbers again: `predict(plan.model,
        plan.train_of(i), plan.layout(i), plan.cluster, **plan.settings)`."""
        s = self.setting
        return {"convention": s.convention, "recipe": s.recipe, "dtype": s.dtype}

    @property
    def layouts_considered(self) -> int:
        return len(self.columns["step_time_s"])

    @property
    def fits(self) -> np.ndarray:
        return self.columns["memory_total_bytes"] <= self.memory_cap

    def layout(self, i: int) -> Layout:
        return layout_at(self.columns, i, self.model.layers)

    def microbatch(self, i: int) -> int:
        """b, sequences per replica per microbatch, of row i."""
        dp = int(self.columns[DATA][i] * self.columns[FSDP][i] * self.columns[EXPERT][i])
        dp *= int(self.columns["tensor_z"][i]) if "tensor_z" in self.columns else 1  # 3D: Z too
        return self.train.global_batch // (dp * int(self.columns["microbatches"][i]))

    def train_of(self, i: int) -> TrainConfig:
        """Row i's train config: its remat, and for a row of one microbatch its b, which a
        regime's default microbatch size would otherwise change (parex.defaults)."""
        one = int(self.columns["microbatches"][i]) == 1
        return self.train.replace(remat=REMAT_POLICIES[int(self.columns["remat"][i])],
                                  microbatch=self.microbatch(i) if one else None)

    def setting_of(self, i: int) -> Setting:
        """Row i's Setting: what parex.predict resolves for `predict(plan.model,
        plan.train_of(i), plan.layout(i), plan.cluster, **plan.settings)`."""
        return self.setting.replace(train=self.train_of(i)).with_layout(self.layout(i))

    def flags(self, i: int) -> str:
        """The `parex predict` flags that give row i's numbers with the plan's others."""
        b = self.train_of(i).microbatch
        return (f"--layout {layout_text(self.layout(i))} --remat {self.train_of(i).remat}"
                + (f" --microbatch {b}" if b is not None else ""))

    def describe(self) -> str:
        """The setting of every row, in one line: the remat policies searched, b per row."""
        stated = self.setting.to_json() | {"remat": ",".join(self.remats), "microbatch": None}
        return describe(stated)

    def entry(self, i: int) -> dict:
        """Row i as the JSON of one ranked layout."""
        return {"layout": layout_text(self.layout(i)), "remat": self.train_of(i).remat,
                "microbatch": self.microbatch(i), "flags": self.flags(i),
                "equivalent_layouts": self.equivalents.get(i, 0)
                } | rank.entry(self.columns, i, self.memory_cap) | {
                "axonn_step_time_s": _finite(self.columns.get("axonn_time_s"), i),
                "assumptions": self.setting_of(i).to_json()}

    def pareto(self) -> np.ndarray:
        return rank.pareto_front(self.columns, self.fits)


def plan(model: ModelConfig, train: TrainConfig, hardware, nodes: int | None = None, *,
         memory_cap: float | None = None, objective: str = "time", top: int = 5,
         recipe=None, convention=None, dtype: str | None = None,
         remats: tuple[str, ...] = REMAT_POLICIES) -> Plan:
    """Rank every layout of `model` on `nodes` nodes of `hardware` (a profile name, a Chip or
    a Cluster) for train's global batch and sequence length (each row has its own remat and
    microbatch count). What is not given resolves exactly as predict()'s (parex.setting); the
    Plan keeps the Setting and its model in the compute dtype, so predict() of a row gives the
    row's numbers (Plan.setting_of, Plan.flags). A model or batch that no layout can run (a
    sequence longer than the model's, a dim of 0) raises LayoutError with the fix, as
    predict() does."""
    rank.check_objective(objective)
    if memory_cap is not None and not memory_cap > 0:
        raise InputError(f"memory cap {memory_cap}: give the bytes per device a layout may use, "
                         f"above 0")
    cluster = cluster_of(hardware, nodes)
    setting = resolve(model, train.replace(microbatch=None), None, cluster, dtype=dtype,
                      recipe=recipe, convention=convention)
    setting = setting.replace(train=setting.train.replace(microbatch=None))  # b per row
    model, train = setting.model, setting.train
    check_valid(Layout(), model, train, 1)  # the rules that hold for every layout or none
    cap = cluster.chip.hbm_bytes if memory_cap is None else float(memory_cap)
    start = time.perf_counter()
    cols, n_candidates = predicted_columns(setting, remats)
    result = Plan(model, train, cluster, cap, objective, cols, np.zeros(0, np.int64), [],
                  n_candidates, 0.0, setting=setting, remats=tuple(remats))
    if not result.fits.any():
        raise NoFit(explain_no_fit(result, memory_cap is not None))
    result.order = rank.ranked(cols, result.fits, objective)
    firsts, runs = rank.distinct(cols, result.order)
    result.top, result.rejected = validated(result, firsts, top)
    shown = np.isin(firsts, result.top)
    result.equivalents = dict(zip(firsts[shown].tolist(), (runs[shown] - 1).tolist()))
    result.seconds = time.perf_counter() - start
    return result


def predicted_columns(setting: Setting, remats) -> tuple[dict, int]:
    """(columns of every valid (layout, remat) row, how many layouts were enumerated), predicted
    under `setting` (no layout, no microbatch size: each row has its own) with each remat."""
    model, train, cluster = setting.model, setting.train, setting.cluster
    cands = Candidates.enumerate(model, train.global_batch, setting.seq_len, cluster.n_devices)
    valid = valid_columns(model, train, Grid.from_columns(train, model, **cands.grid_columns()))
    cands = cands.take(valid)  # the predictor's own validity rules: no time spent on the rest
    parts = []
    for remat in remats if len(cands) else ():
        setting_r = setting.replace(train=train.replace(remat=remat))
        grid = Grid.from_columns(setting_r.train, model, **cands.grid_columns())
        out = predict_columns(setting_r, grid)
        # on this machine's emulated mesh a plan is for running: only what the executor runs
        keep = out["executable"] if setting.emulated else out["valid"]
        part = {k: v[keep] for k, v in cands.columns.items()}
        part |= {k: out[k][keep] for k in PREDICTED}
        part["remat"] = np.full(int(keep.sum()), REMAT_POLICIES.index(remat))
        part |= {k: np.ones(int(keep.sum()), np.int64) for k in tensor3d.EXTRA}
        parts.append(part)
        parts += tensor3d.rows_3d(setting_r, PREDICTED, COLUMNS)  # AxoNN's (plan.tensor3d)
    names = COLUMNS + tensor3d.EXTRA + PREDICTED + ("remat",)
    if not parts:
        return {k: np.zeros(0) for k in names}, len(valid)
    cols = {k: np.concatenate([p[k] for p in parts]) for k in names}
    cols["axonn_time_s"] = tensor3d.axonn_times(cols, setting)
    return cols, len(valid)


def validated(result: Plan, order: np.ndarray, k: int, check=None) -> tuple[list[int], int]:
    """The first k rows of `order` that `check` accepts (parex.validation's check_valid: a real
    program; check_layout: one parex also runs here; default: check_layout on a calibrated
    profile, which describes this machine's emulated mesh, check_valid elsewhere), and how many
    it rejected."""
    if check is None:
        check = check_layout if result.setting.emulated else check_valid
    chosen, rejected = [], 0
    n = result.cluster.n_devices
    for i in order[:MAX_WALK]:
        try:
            check(result.layout(i), result.model, result.train_of(i), n)
        except LayoutError:
            rejected += 1
            continue
        chosen.append(int(i))
        if len(chosen) == k:
            break
    return chosen, rejected


def explain_no_fit(result: Plan, capped: bool) -> str:
    """Why nothing fits, and the nearest setting that does."""
    model, cluster, cols = result.model, result.cluster, result.columns
    where = (f"{cluster.n_devices} × {cluster.chip.name} ({cluster.nodes} node"
             f"{'s' if cluster.nodes > 1 else ''})")
    if not len(cols["step_time_s"]):
        return (f"no layout of {model.name} can run on {where} with global batch "
                f"{result.train.global_batch}: every split of the devices leaves a size that "
                f"does not divide the batch or the model's dims; use a global batch that is a "
                f"multiple of {cluster.n_devices}, or another node count")
    lean = int(np.argmin(cols["memory_total_bytes"]))
    need = cols["memory_total_bytes"][lean]
    leanest = f"{result.layout(lean)}, remat={result.train_of(lean).remat}"
    if capped and need <= cluster.chip.hbm_bytes:
        return (f"no layout of {model.name} fits under the cap of {result.memory_cap / 1e9:.3g} "
                f"GB per device on {where}; the leanest ({leanest}) needs {need / 1e9:.3g} GB: "
                f"use --memory-cap {round_up(need / 1e9)} or more")
    # parameters, gradients and optimizer state alone, on as many devices as fit them
    state = (cols["memory_params_bytes"] + cols["memory_grads_bytes"]
             + cols["memory_optimizer_bytes"]) * cluster.n_devices
    at_least = int(np.ceil(state.min() / result.memory_cap / cluster.chip.devices_per_node))
    nodes = smallest_cluster(result.setting, result.memory_cap, at_least)
    fix = (f"the smallest cluster on which one fits is {nodes} nodes of "
           f"{cluster.chip.devices_per_node} (--nodes {nodes})" if nodes else
           f"no cluster of {max(cluster.nodes + 1, at_least)} nodes or a few more fits it "
           f"either; shorten the sequence or the batch, or use a chip with more memory")
    return (f"{model.name} does not fit in {result.memory_cap / 1e9:.3g} GB per device on {where}"
            f" at any layout: the leanest ({leanest}) needs {need / 1e9:.3g} GB; {fix}")


def _finite(column, i: int) -> float | None:
    """column[i] as a float, None where absent or NaN (AxoNN's model: no pipelines)."""
    return None if column is None or not np.isfinite(column[i]) else float(column[i])


def layout_text(layout: Layout) -> str:
    """The layout's string form, naming a pipeline's schedule even where it is the Layout's
    default (GPipe), so that `parex predict --layout` reads it back as planned (a pipeline that
    names no schedule defaults to 1F1B on accelerators: parex.defaults)."""
    text = str(layout)
    if layout.stage > 1 and "schedule=" not in text:
        text += f",schedule={layout.schedule}"
    return text


def round_up(x: float, digits: int = 3) -> str:
    """x rounded up to `digits` significant digits, as text."""
    step = 10.0 ** (np.floor(np.log10(x)) - digits + 1)
    return f"{np.ceil(x / step - 1e-9) * step:.{digits}g}"


def smallest_cluster(setting: Setting, cap: float, at_least: int = 1,
                     max_probes: int = 48) -> int | None:
    """The fewest nodes (more than cluster's, and at least `at_least`, where the model state
    alone fits) on which some layout fits under cap, by trying node counts in order. Counts
    with no valid layout at all (a prime factor no axis can take) cost only the enumeration;
    at most `max_probes` others are predicted, with full remat only (the leanest)."""
    cluster = setting.cluster
    nodes, probes = max(cluster.nodes + 1, at_least), 0
    while probes < max_probes:
        bigger = setting.replace(cluster=dataclasses.replace(cluster, nodes=nodes))
        cols, _ = predicted_columns(bigger, ("full",))
        if len(cols["memory_total_bytes"]):
            probes += 1
            if (cols["memory_total_bytes"] <= cap).any():
                return nodes
        nodes += 1
    return None


__all__ = ["NoFit", "Plan", "layout_text", "plan"]
