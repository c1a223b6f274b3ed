"""What a layout must satisfy, at two levels, checked before anything compiles.

- *valid*: the layout describes a real training program for this model and batch: axis sizes
  divide the dims they split, the schedule exists, the partition covers the layers. The
  predictor predicts every valid layout, at any scale.
- *executable*: parex's executor runs it on a mesh today. `EXECUTOR_LIMITS` lists what it cannot
  run yet; `TrainStep` and `measure` refuse those layouts with the reason and the nearest layout
  that runs, and a Prediction says `executable: false`.

Every check is written once, on columns (`Rule`: a numpy test over a predict.shapes.Grid, one
entry per layout, and the message for one failing layout): `check_valid` runs the rules on one
layout and raises the first failure's message with its fix; `valid_columns` runs them on a grid
of a hundred thousand layouts (predict_batch). The rules themselves are in validation/rules.py.
"""

from __future__ import annotations

import numpy as np

from ..config import ModelConfig, TrainConfig
from ..errors import unknown
from ..layout import (
    CP_MODES,
    DILOCO_FIELDS,
    LOCAL_LOSSES,
    OUTER_DTYPES,
    UNRESOLVED_SCHEDULE,
    Layout,
    LayoutError,
    changed_diloco_keys,
    divisors,
    example_partition,
    inner_layout,
    num_microbatches,
)
from ..parallel.schedules import ALL_SCHEDULES, LOCAL
from .rules import (EXECUTOR_LIMITS, VALID_RULES, Context, Rule, local_fold, tensor3d_limit,
                    tensor3d_problem)


class LayoutValues:
    """One layout's values under Grid's column names, as Python ints: the rules run on it for
    a single check, the same values Grid holds as columns (it resolves microbatches and reads
    partitions with the helpers below)."""

    def __init__(self, layout: Layout, model: ModelConfig, train: TrainConfig):
        for name in ("data", "fsdp", "expert", "tensor", "seq", "stage", "zero",
                     "virtual_stages"):
            setattr(self, name, getattr(layout, name))
        self.sp = int(layout.sp)
        self.expert_tensor = layout.tensor if layout.expert_tensor is None else layout.expert_tensor
        self.fold = self.tensor // max(self.expert_tensor, 1)
        self.ep = self.expert * self.fold  # as Grid.fold and Grid.ep
        if layout.tensor3d:  # Megatron's tensor and SP rules do not apply: tensor3d_problem's do
            self.tensor, self.sp = 1, 0
            self.expert_tensor, self.fold, self.ep = 1, 1, self.expert  # tensor3d_problem's
        self.cp = CP_MODES.index(layout.cp) if layout.cp in CP_MODES else -1
        if layout.schedule is None and layout.stage > 1:
            raise ValueError(UNRESOLVED_SCHEDULE)
        self.schedule = (0 if layout.schedule is None else  # no pipeline: GPipe's code
                         ALL_SCHEDULES.index(layout.schedule) if layout.schedule in ALL_SCHEDULES
                         else -1)
        self.local_loss = (LOCAL_LOSSES.index(layout.local_loss)
                           if layout.local_loss in LOCAL_LOSSES else -1)
        self.queue = layout.queue
        self.microbatches = num_microbatches(layout, train)
        stats = partition_stats(layout.layers_per_stage, layout.stage)
        self.partition_n, self.partition_min, self.partition_sum, self.partition_max = stats[1:]
        self.dp, self.n_devices = layout.batch_split, layout.n_devices  # as Grid.dp
        self._layout = layout

    def __len__(self) -> int:
        return 1

    def embed_shards(self, kind: str) -> int:
        return self._layout.shard_count("embed", kind)


def partition_stats(parts, p: int) -> tuple[int, int, int, int, int]:
    """(layers of the busiest stage, entries, smallest entry, sum, largest entry) of a
    partition, whose entry k = c·p + s is chunk c of stage s; all 0 without one."""
    if not parts:
        return 0, 0, 0, 0, 0
    p = max(p, 1)
    busiest = max(sum(parts[k] for k in range(s, len(parts), p)) for s in range(p))
    return busiest, len(parts), min(parts), sum(parts), max(parts)


def _fail(message: str):
    raise LayoutError(message)


def _fails(result) -> bool:
    return result is False or (result is not True and not np.all(result))


def _first_failure(rules: tuple[Rule, ...], values, ctx: Context) -> Rule | None:
    with np.errstate(divide="ignore", invalid="ignore"):
        for rule in rules:
            if _fails(rule.holds(values, ctx)):
                return rule
    return None


def _all_hold(rules: tuple[Rule, ...], grid, ctx: Context) -> np.ndarray:
    """Rows that pass every rule. Rules run in order and stop once no row is left, so a
    model-level rule (a scalar) that fails spares the later ones a division by zero."""
    ok = np.ones(len(grid), bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        for rule in rules:
            ok &= np.broadcast_to(rule.holds(grid, ctx), ok.shape)
            if not ok.any():
                break
    return ok


# --- one layout ----------------------------------------------------------------------------------

def check_valid(layout: Layout, model: ModelConfig, train: TrainConfig,
                n_devices: int | None = None) -> None:
    """Raise LayoutError naming the problem and the fix unless the layout is a real program for
    (model, train) on n_devices devices (None: the layout's own count). A DiLoCo layout is
    checked as its replica axis, then each replica's inner layout."""
    if _has_replica_keys(layout):
        _check_replica(layout, model, train, n_devices or layout.n_devices, check_valid)
        return
    ctx = Context(model, train, layout.n_devices if n_devices is None else n_devices)
    failed = _first_failure(VALID_RULES, LayoutValues(layout, model, train), ctx)
    if failed is not None:
        raise LayoutError(failed.message(layout, ctx))
    problem = tensor3d_problem(layout, ctx) if layout.tensor3d else None
    if problem is not None:
        raise LayoutError(problem)


def executable_reason(layout: Layout, model: ModelConfig, train: TrainConfig) -> str | None:
    """Why parex's executor cannot run this valid layout today (every limit it hits), with the
    nearest layout that runs; None when it can (a DiLoCo layout: its inner layout's)."""
    if layout.diloco:
        R = layout.replica
        return executable_reason(inner_layout(layout), model,
                                 train.replace(global_batch=train.global_batch // R))
    ctx, values = Context(model, train, layout.n_devices), LayoutValues(layout, model, train)
    if layout.tensor3d and tensor3d_limit(layout, ctx) is not None:
        return tensor3d_limit(layout, ctx)
    with np.errstate(divide="ignore", invalid="ignore"):
        failed = [rule for rule in EXECUTOR_LIMITS if _fails(rule.holds(values, ctx))]
    if not failed:
        return None
    near = nearest_executable(layout, model, train)
    fix = (f"the nearest layout that runs is {near}" if near is not None else
           "no layout near it runs; use stage=1")
    return "; ".join(rule.message(layout, ctx) for rule in failed) + f": {fix}"


def check_layout(layout: Layout, model: ModelConfig, train: TrainConfig, n_devices: int) -> None:
    """Both levels: raise LayoutError unless the layout is valid and parex can run it."""
    if _has_replica_keys(layout):
        _check_replica(layout, model, train, n_devices, check_layout)
        return
    check_valid(layout, model, train, n_devices)
    reason = executable_reason(layout, model, train)
    if reason is not None:
        raise LayoutError(reason)


# --- many layouts --------------------------------------------------------------------------------

def valid_columns(model: ModelConfig, train: TrainConfig, grid) -> np.ndarray:
    """True where check_valid accepts the layout (each layout on its own device count)."""
    return _all_hold(VALID_RULES, grid, Context(model, train, None))


def executable_columns(model: ModelConfig, train: TrainConfig, grid) -> np.ndarray:
    """True where the executor's limits allow the layout (meaningful on valid rows only)."""
    return _all_hold(EXECUTOR_LIMITS, grid, Context(model, train, None))


# --- the nearest layout that runs ----------------------------------------------------------------

def nearest_executable(layout: Layout, model: ModelConfig, train: TrainConfig) -> Layout | None:
    """A valid, executable layout on the same devices that differs least: stages fold into data
    until they divide the layers (an explicit partition made as even as possible for the new
    stage count), with the most microbatches the batch still allows."""
    if layout.schedule == LOCAL and _runs(local_fold(layout), model, train):
        return local_fold(layout)
    for near in _repairs(layout, model):
        for stage in reversed(divisors(layout.stage)):
            candidate = _with_stages(near, stage, model.layers)
            for m in range(candidate.microbatches, 0, -1):  # more replicas may need fewer
                if _runs(candidate.replace(microbatches=m), model, train):
                    return candidate.replace(microbatches=m)
    return None


def _repairs(layout: Layout, model: ModelConfig) -> list[Layout]:
    """The layout, then the one-key changes that lift a model-shape limit: a sliding window's
    ring attention as Ulysses, ZeRO state that D cannot split kept whole (zero=0)."""
    out = [layout]
    if model.sliding_window is not None and layout.cp == "ring":
        out.append(layout.replace(cp="ulysses"))
    if layout.zero in (1, 2) and model.hidden % layout.shard_count("embed", "opt"):
        out.append(layout.replace(zero=0))
    return out


def _with_stages(layout: Layout, stage: int, layers: int) -> Layout:
    if stage == layout.stage:
        return layout
    data = layout.data * (layout.stage // stage)
    if stage == 1:
        return layout.replace(stage=1, data=data, schedule="gpipe", virtual_stages=1,
                              layers_per_stage=None, local_loss="ce", queue=1)
    v = layout.virtual_stages
    parts = None if layers % (stage * v) == 0 else example_partition(layers, stage * v)
    return layout.replace(stage=stage, data=data, layers_per_stage=parts)


def _runs(layout: Layout, model: ModelConfig, train: TrainConfig) -> bool:
    values, ctx = LayoutValues(layout, model, train), Context(model, train, layout.n_devices)
    return (_first_failure(VALID_RULES, values, ctx) is None
            and _first_failure(EXECUTOR_LIMITS, values, ctx) is None)


# --- DiLoCo: the replica axis (parex.lowcomm.diloco) --------------------------------------------

def _check_replica(layout: Layout, model: ModelConfig, train: TrainConfig, n_devices: int,
                   check) -> None:
    """The replica axis and the DiLoCo keys; then each replica's inner layout on its share of
    the devices and of the batch, with `check` (check_valid or check_layout)."""
    R, H = layout.replica, layout.inner_steps
    if not layout.diloco:
        changed = changed_diloco_keys(layout)
        if changed:
            _fail(f"{', '.join(changed)} only mean something for DiLoCo: set replica=2 or more "
                  f"(and inner_steps=H), or leave {', '.join(changed)} at the default")
        return
    if R < 1:
        _fail(f"replica={R}: use at least 1 replica")
    if n_devices % R:
        _fail(f"replica={R} does not divide the {n_devices} devices: every replica runs the same "
              f"inner mesh on n/R devices; choose replica from {divisors(n_devices)}")
    if H < 1:
        _fail(f"inner_steps={H}: each replica takes at least one inner step between "
              f"synchronisations; use inner_steps=1 or more (DiLoCo uses tens to hundreds)")
    _check_outer(layout)
    _check_fragments(layout, model)
    B, inner = train.global_batch, inner_layout(layout)
    unit = R * inner.data_parallel * inner.microbatches
    if B % unit:
        _fail(f"global batch {B} does not split evenly over replica × data × fsdp × microbatches "
              f"= {unit}: each replica takes B/R sequences; use a global batch that is a "
              f"multiple of {unit}")
    check(inner, model, train.replace(global_batch=B // R), n_devices // R)


def _check_outer(layout: Layout) -> None:
    if layout.outer_dtype not in OUTER_DTYPES:
        _fail(unknown("outer_dtype", layout.outer_dtype, OUTER_DTYPES)
              + " (the pseudo-gradients' exchange format)")
    if not layout.outer.lr > 0:
        _fail(f"outer_lr={layout.outer.lr}: the outer learning rate must be positive "
              f"(DiLoCo uses 0.7)")
    if not 0 <= layout.outer.momentum < 1:
        _fail(f"outer_momentum={layout.outer.momentum}: Nesterov momentum lies in [0, 1) "
              f"(DiLoCo uses 0.9)")


def _check_fragments(layout: Layout, model: ModelConfig) -> None:
    P, H, L, p = layout.fragments, layout.inner_steps, model.layers, layout.stage
    if P < 1:
        _fail(f"fragments={P}: use 1 (all parameters at once) or more (streaming)")
    if L % P:
        _fail(f"fragments={P} does not divide the model's layers={L}: each fragment holds "
              f"every P-th layer; choose fragments from {divisors(L)}")
    if p > 1 and (L // p) % P:
        _fail(f"fragments={P} does not divide the {L // p} layers of each of the stage={p} "
              f"pipeline stages: a strided fragment takes the same share of every stage; "
              f"choose fragments from the divisors of {L // p}")
    if H % P:
        _fail(f"inner_steps={H} is not a multiple of fragments={P}: the fragments synchronise "
              f"H/P steps apart; use inner_steps={P * max(1, -(-H // P))}")


def _has_replica_keys(layout: Layout) -> bool:
    return layout.diloco or any(getattr(layout, k) != getattr(Layout(), k) for k in DILOCO_FIELDS)


__all__ = ["check_layout", "check_valid", "executable_columns", "executable_reason",
           "nearest_executable", "valid_columns"]
