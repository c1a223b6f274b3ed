"""The synchronous layouts' prediction (everything but DiLoCo's outer loop): the columns of
memory.py, flops.py, comm.py and time.py over a Grid, and one layout's Prediction from them."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..config import ModelConfig, TrainConfig
from ..defaults import Assumptions, assume, attention_of
from ..errors import InputError
from ..hardware import Chip, Cluster, load_cluster
from ..layout import Layout, LayoutError
from ..measure.hlo import KINDS
from ..parallel.schedules import SCHEDULES
from ..record import PREDICTED_MEMORY_PARTS, STEP_TIME_PARTS, Prediction
from ..validation.checks import check_valid, executable_columns, executable_reason, valid_columns
from . import alpha_beta, comm, flops, memory, stash, tensor3d, tensor3d_stages, ticks, time
from .comm import Convention
from .memory import Recipe
from .shapes import Grid, model_sizes

DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
# A mixture of experts' most-loaded expert over the mean (accelerator.expert_slots): balanced
# unless the caller says otherwise, a stated assumption (Prediction.assumptions), never fitted
EXPERT_IMBALANCE = 1.0


def as_cluster(hardware, n_devices: int = 1) -> Cluster:
    """A Cluster from a Cluster, a Chip or a profile name (nodes enough for n_devices)."""
    if isinstance(hardware, Cluster):
        return hardware
    if isinstance(hardware, str):
        hardware = load_cluster(hardware).chip
    if isinstance(hardware, Chip):
        return Cluster(hardware, max(1, -(-n_devices // hardware.devices_per_node)))
    raise TypeError(f"hardware must be a profile name, a Chip or a Cluster, not {hardware!r}")


def _check_fits_cluster(layout: Layout, cluster: Cluster) -> None:
    if layout.n_devices > cluster.n_devices:
        per = cluster.chip.devices_per_node
        raise LayoutError(
            f"layout {layout} uses {layout.n_devices} devices but the cluster {cluster.name} has "
            f"{cluster.n_devices}: use {-(-layout.n_devices // per)} nodes of {per} "
            f"(--nodes {-(-layout.n_devices // per)}), or shrink the layout's axes")


def columns(model: ModelConfig, train: TrainConfig, grid: Grid, cluster: Cluster,
            conv: Convention, rec: Recipe, layout3d: Layout | None = None,
            expert_imbalance: float = EXPERT_IMBALANCE) -> tuple[dict, list]:
    """Every predicted quantity as columns over the grid, and the collective terms.
    `layout3d`: a 3D tensor layout whose `tensor3d.equivalent` the grid holds: its collectives
    are predict.tensor3d's, timed over its own axes. `expert_imbalance`: a mixture of experts'
    most-loaded expert over the mean, on an accelerator's ideal program
    (accelerator.expert_slots)."""
    chip, sizes, remat = cluster.chip, model_sizes(model), train.remat
    grid = dataclasses.replace(grid, executor=conv.name == "xla-cpu",
                               flash=attention_of(train, chip.calibration is not None) == "flash")
    # Megatron-LM's block (the recipe's compute counts it): its full remat repeats the whole block
    # (not in parex's compiled program, whose collectives xla-cpu counts)
    megatron = rec.activations == "korthikanti" and conv.name != "xla-cpu"
    conv = dataclasses.replace(conv, megatron_block=megatron)
    act = DTYPE_BYTES[model.dtype]
    mem = (memory.memory_parts(sizes, grid, remat, rec, act, act) if layout3d is None else
           tensor3d.memory_parts(sizes, grid, layout3d, remat, rec, act, act))
    terms, on_axes = comm_terms(sizes, grid, remat, conv, act, rec, layout3d)
    emulated = chip.calibration is not None
    seconds: dict = {}
    for term in terms:  # a 3D family is timed as the 1D family it resembles (time.py)
        family = tensor3d.TIME_FAMILY.get(term.name, term.name)
        seconds[family] = (seconds.get(family, 0.0)
                           + alpha_beta.term_seconds(term, on_axes, chip))
    opt_elements = memory.state_elements(sizes, grid, "opt")
    if emulated:
        compute = time.cpu_compute(model, sizes, grid, remat, chip.calibration,
                                   chip.hbm_bandwidth, opt_elements)
    else:
        compute = time.accelerator_compute(model, sizes, grid, remat, chip, model.dtype, act,
                                           opt_elements, rec.activations == "korthikanti",
                                           expert_imbalance)
    if emulated:
        compute |= _executor_ticks(sizes, grid, chip, remat, act, seconds, compute)
    hidden: dict = {}
    if layout3d is not None and conv.axonn_overlaps and not emulated:  # AxoNN's overlaps
        seconds, hidden = tensor3d.with_overlaps(seconds, terms, on_axes, chip, sizes, grid,
                                                 model.dtype, act,
                                                 compute["per_microbatch"] * grid.microbatches)
    step = time.step_time(grid, compute, seconds, emulated, remat, conv.overlaps_grad_reduce)
    hw = flops.hardware_flops(model, grid, remat)
    mf = flops.model_flops(model, grid)
    counted = flops.xla_counted(model, sizes, grid, remat) if conv.loops_counted_once else hw
    peak = chip.peak(model.dtype)
    out = {f"step_{k}_s": v for k, v in step.items()}
    out |= {f"memory_{k}_bytes": v for k, v in mem.items()}
    out |= {f"comm_{k.replace('-', '_')}_bytes": v
            for k, v in comm.bytes_by_kind(terms, len(grid)).items()}
    out |= {"flops_per_device": counted, "model_flops_per_device": mf,
            "hardware_flops_per_device": hw, "mfu": mf / (step["total"] * peak),
            "hfu": hw / (step["total"] * peak), "tflops_per_device": hw / step["total"] / 1e12,
            "tokens_per_s": grid.B * grid.T / step["total"],
            "fits": mem["total"] <= chip.hbm_bytes,
            "over_capacity_bytes": np.maximum(mem["total"] - chip.hbm_bytes, 0.0)}
    out |= {tensor3d.hidden_column(k): v for k, v in hidden.items()}
    return out, terms


def comm_terms(sizes, grid: Grid, remat: str, conv: Convention, act: int, rec: Recipe,
               layout3d: Layout | None = None) -> tuple[list, Grid]:
    """(collective terms, the grid their axes are sized by): comm's, or a 3D tensor layout's."""
    if layout3d is None:
        return comm.terms(sizes, grid, remat, conv, act, rec.param_bytes, rec.grad_bytes), grid
    if np.any(grid.stage > 1):  # a grid of 3D layouts all inside stages, or none
        if not np.all(grid.stage > 1):
            raise ValueError("3D layouts with and without pipeline stages in one grid: "
                             "predict them in two grids")
        return (tensor3d_stages.terms(sizes, layout3d, grid, remat, conv, act, rec.param_bytes,
                                      rec.grad_bytes), tensor3d.axes_grid(grid, layout3d))
    return (tensor3d.terms(sizes, layout3d, grid.B, grid.T, remat, conv, act, rec.grad_bytes,
                           len(grid)), tensor3d.axes_grid(grid, layout3d))


def _executor_ticks(sizes, grid: Grid, chip: Chip, remat: str, act: int, seconds: dict,
                    compute: dict) -> dict:
    """The tick-synchronous pipeline executor's terms on the calibrated CPU (predict.ticks)."""
    cal = chip.calibration
    lockstep, busy, n_ticks = ticks.lockstep_compute(grid, compute["layers_per_microbatch"],
                                            compute["head_per_microbatch"], remat,
                                            cal.parallel_devices, time.unit_costs(grid, remat))
    values = stash.stash_bytes(sizes, grid, memory.xla_layer_elements(sizes, grid, remat),
                               act, remat)["value"]
    copied = stash.window_bytes(sizes, grid, values)
    hops = seconds.get("pipeline", np.zeros(len(grid)))
    fixed, sends = ticks.tick_seconds(grid, n_ticks, cal, copied, chip.hbm_bandwidth, hops)
    return {"lockstep": lockstep, "busy": busy, "ticks": fixed, "sends": sends}


def resolved(hardware, n_devices: int, model: ModelConfig, train: TrainConfig, convention=None,
             recipe=None, dtype=None):
    """(cluster, convention, recipe, model in its compute dtype, Assumptions): parex.defaults's
    `assume` fills what is not given from the profile (the calibrated CPU predicts parex's own
    program: xla-cpu, parex recipe, the model's dtype; an accelerator what real runs use there:
    gpu, mixed recipe, bfloat16)."""
    cluster = as_cluster(hardware, n_devices)
    a = assume(cluster, model, dtype=dtype, recipe=recipe, convention=convention,
               global_batch=train.global_batch, seq_len=train.seq_len, remat=train.remat,
               microbatch=train.microbatch, attention=train.attention)
    if a.dtype != model.dtype:
        model = model.replace(dtype=a.dtype)
    return (cluster, comm.convention(convention or a.convention),
            memory.recipe(recipe or a.recipe), model, a)


def checked(model: ModelConfig, train: TrainConfig, layout: Layout, hardware, convention=None,
            recipe=None, dtype=None):
    """(cluster, convention, recipe, model in its compute dtype) once the layout is known to be
    a real program that fits the cluster (LayoutError / InputError naming the fix otherwise)."""
    cluster, conv, rec, model, _ = resolved(hardware, layout.n_devices, model, train, convention,
                                            recipe, dtype)
    _check_fits_cluster(layout, cluster)
    check_valid(layout, model, train, layout.n_devices)
    return cluster, conv, rec, model


def assumptions_of(model: ModelConfig, train: TrainConfig, layout: Layout, hardware,
                   convention=None, recipe=None, dtype=None) -> Assumptions:
    """The Assumptions predict() makes for this layout (its schedule, b and remat filled in)."""
    a = resolved(hardware, layout.n_devices, model, train, convention, recipe, dtype)[-1]
    return a.of_layout(layout, train.microbatch)


def predict_synchronous(model: ModelConfig, train: TrainConfig, layout: Layout, hardware, *,
                        convention: str | Convention | None = None,
                        recipe: str | Recipe | None = None, dtype: str | None = None,
                        expert_imbalance: float = EXPERT_IMBALANCE) -> Prediction:
    """parex.predict.predict for a layout without replicas: every term of one layout."""
    cluster, conv, rec, model = checked(model, train, layout, hardware, convention, recipe, dtype)
    if layout.schedule == "local":  # local learning: its own step (parex.predict.local)
        from .local import predict_local

        proxy = predict_synchronous(model, train, layout.replace(
            schedule="1f1b", local_loss="ce", queue=1), cluster, convention=conv, recipe=rec,
            dtype=model.dtype)
        reason = executable_reason(layout, model, train)
        return dataclasses.replace(predict_local(model, train, layout, cluster, conv, rec, proxy),
                                   executable=reason is None, executable_reason=reason or "")
    assumed = assumptions_of(model, train, layout, cluster, conv.name, rec.name, model.dtype)
    reason = executable_reason(layout, model, train)
    # a 3D layout: its collectives from predict.tensor3d (ZeRO-3's data axis playing fsdp's
    # role, under that name), compute and memory from its 1D equivalent
    layout3d = tensor3d.zero3_as_fsdp(layout) if layout.tensor3d else None
    grid = Grid.from_layouts([tensor3d.equivalent(layout) if layout3d else layout], train, model)
    cols, terms = columns(model, train, grid, cluster, conv, rec, layout3d, expert_imbalance)
    on_axes = tensor3d.axes_grid(grid, layout3d) if layout3d else grid
    value = {k: (v[0].item() if isinstance(v, np.ndarray) else v) for k, v in cols.items()}
    collectives = []
    for term in terms:
        count = float(term.count[0])
        if count:
            collectives.append({"name": term.name, "kind": term.kind,
                                "axes": [a.value for a in term.axes], "count": count,
                                "bytes": float(term.bytes[0]),
                                "bytes_per_op": float(term.bytes_per_op[0]),
                                "seconds": float(alpha_beta.term_seconds(term, on_axes,
                                                                         cluster.chip)[0])})
    hidden = {k: value.get(tensor3d.hidden_column(k)) for k in tensor3d.OVERLAPS}  # 3D, gpu
    tensor3d.annotate(collectives, {k: v for k, v in hidden.items() if v is not None})
    return Prediction(
        model=model.name, layout=str(layout), n_devices=layout.n_devices, hardware=cluster.name,
        step_time_s={k: value[f"step_{k}_s"] for k in STEP_TIME_PARTS},
        memory_bytes_per_device={k: value[f"memory_{k}_bytes"] for k in PREDICTED_MEMORY_PARTS},
        flops_per_device=value["flops_per_device"],
        model_flops_per_device=value["model_flops_per_device"],
        comm_bytes_per_device={k: value[f"comm_{k.replace('-', '_')}_bytes"] for k in KINDS},
        tokens_per_step=grid.B * grid.T, mfu=value["mfu"], hfu=value["hfu"],
        fits=bool(value["fits"]), over_capacity_bytes=value["over_capacity_bytes"],
        collectives=collectives, convention=conv.name,
        hardware_flops_per_device=value["hardware_flops_per_device"],
        executable=reason is None, executable_reason=reason or "",
        assumptions=(assumed.replace(expert_imbalance=expert_imbalance) if model.moe
                     else assumed).to_json())


def predict_batch(model: ModelConfig, train: TrainConfig, layouts, hardware, *,
                  convention: str | Convention | None = None,
                  recipe: str | Recipe | None = None, dtype: str | None = None,
                  expert_imbalance: float = EXPERT_IMBALANCE) -> dict[str, np.ndarray]:
    """Columns (Prediction.to_row names) for many layouts: a list of Layouts or a Grid.
    `valid` is parex.validation's verdict (the same rules as predict(), as columns) and the
    numbers of invalid rows are NaN; `executable` marks the valid rows parex's executor runs
    today; `fits` flags the rows that fit in memory. A model or train config that no layout
    can run raises LayoutError, as predict() does. Defaults as predict()'s."""
    if not isinstance(layouts, Grid) and any(layout.diloco for layout in layouts):
        raise InputError("predict_batch has no replica columns: predict DiLoCo layouts "
                         "(replica, inner_steps) one at a time with parex.predict.predict")
    if not isinstance(layouts, Grid) and any(layout.tensor3d for layout in layouts):
        raise InputError("predict_batch has no Y and Z columns: predict 3D tensor layouts "
                         "(tensor=XxYxZ) one at a time with parex.predict.predict")
    grid = layouts if isinstance(layouts, Grid) else Grid.from_layouts(layouts, train, model)
    if (grid.schedule == len(SCHEDULES)).any():  # ALL_SCHEDULES' last: schedule=local
        raise InputError("predict_batch has no local-learning columns: predict schedule=local "
                         "layouts one at a time with parex.predict.predict")
    cluster, conv, rec, model, _ = resolved(hardware, int(grid.n_devices.max()), model, train,
                                            convention, recipe, dtype)
    valid = valid_columns(model, train, grid)
    executable = valid & executable_columns(model, train, grid)
    if valid.all():
        safe = grid
    elif valid.any():
        safe = _masked(grid, valid)
    else:  # nothing to predict: the shapes of the columns from one valid layout
        check_valid(Layout(), model, train.replace(microbatch=None))
        safe = Grid.from_layouts([Layout()] * len(grid), train.replace(microbatch=None), model)
    cols, _ = columns(model, train, safe, cluster, conv, rec, None, expert_imbalance)
    cols["step_time_s"] = cols.pop("step_total_s")
    for key, value in cols.items():
        if value.dtype.kind == "f":
            cols[key] = np.where(valid, value, np.nan)
    cols["fits"] = cols["fits"] & valid
    cols["valid"], cols["executable"] = valid, executable
    return cols


def _masked(grid: Grid, valid: np.ndarray) -> Grid:
    """The grid with invalid rows replaced by the first valid one (their results are NaN)."""
    first = int(np.argmax(valid)) if valid.any() else 0
    pick = np.where(valid, np.arange(len(grid)), first)
    return dataclasses.replace(grid, **{f.name: getattr(grid, f.name)[pick]
                                        for f in dataclasses.fields(grid)
                                        if isinstance(getattr(grid, f.name), np.ndarray)})




def shared_fields(measurement, prediction) -> list[dict]:
    """Predicted, measured and their ratio for every field both sides have (same units)."""
    pairs = [("step_time_s", prediction.step_time_s["total"], measurement.step_time_s["median"]),
             ("tokens_per_s", prediction.tokens_per_s, measurement.tokens_per_s),
             ("flops_per_device", prediction.flops_per_device, measurement.flops_per_device),
             # every loop trip counted: the formula's hardware FLOPs against the compiled dots
             ("matmul_flops_per_device", prediction.hardware_flops_per_device,
              getattr(measurement, "matmul_flops_per_device", 0.0))]
    for part in ("argument", "total"):
        pairs.append((f"memory_{part}_bytes", prediction.memory_bytes_per_device[part],
                      measurement.memory_bytes_per_device[part]))
    measured_comm = measurement.comm_bytes_per_device
    for kind in KINDS:
        pairs.append((f"comm_{kind.replace('-', '_')}_bytes",
                      prediction.comm_bytes_per_device[kind], measured_comm[kind]))
    return [{"field": name, "predicted": float(p), "measured": float(m),
             "ratio": float(p / m) if m else (1.0 if not p else float("inf"))}
            for name, p, m in pairs]


__all__ = ["EXPERT_IMBALANCE", "as_cluster", "assumptions_of", "checked", "columns",
           "predict_batch", "predict_synchronous", "resolved", "shared_fields"]
