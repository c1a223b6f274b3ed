"""The synchronous layouts' prediction (everything but DiLoCo's outer loop): the columns of
memory.py, flops.py, comm.py and time.py over a Grid, and one layout's Prediction from them."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..config import ModelConfig, TrainConfig
from ..errors import InputError
from ..hardware import Chip, Cluster
from ..layout import Layout, LayoutError
from ..parallel.schedules import SCHEDULES
from ..record import KINDS, PREDICTED_MEMORY_PARTS, STEP_TIME_PARTS, Prediction
from ..setting import Setting, resolve
from ..validation.checks import check_valid, executable_columns, executable_reason, valid_columns
from . import (accelerator, alpha_beta, comm, flops, fp8, memory, overlap, stash, tensor3d,
               tensor3d_stages, ticks, time)
from .comm import Convention
from .memory import Recipe
from .shapes import Grid, model_sizes


def _check_fits_cluster(layout: Layout, cluster: Cluster) -> None:
    if layout.n_devices > cluster.n_devices:
        per = cluster.chip.devices_per_node
        raise LayoutError(
            f"layout {layout} uses {layout.n_devices} devices but the cluster {cluster.name} has "
            f"{cluster.n_devices}: use {-(-layout.n_devices // per)} nodes of {per} "
            f"(--nodes {-(-layout.n_devices // per)}), or shrink the layout's axes")


def columns(setting: Setting, grid: Grid, layout3d: Layout | None = None) -> tuple[dict, list]:
    """Every predicted quantity as columns over the grid, and the collective terms, under
    `setting` (its model, remat, recipe, convention, kernel, cluster and regime).
    `layout3d`: a 3D tensor layout whose `tensor3d.equivalent` the grid holds: its collectives
    are predict.tensor3d's, timed over its own axes."""
    model, chip, remat = setting.model, setting.cluster.chip, setting.train.remat
    sizes, emulated = model_sizes(model), setting.emulated
    conv, rec = program(setting), memory.recipe(setting.recipe)
    grid = dataclasses.replace(grid, executor=conv.name == "xla-cpu", flash=setting.flash,
                               splits_vectors=layout3d is None,
                               heads_tensor=None if layout3d is None else tensor3d.heads_columns(
                                   layout3d, len(grid)))
    # Megatron-LM's block (the recipe's compute counts it): its full remat repeats the whole block
    # (not in parex's compiled program, whose collectives xla-cpu counts)
    megatron = rec.activations == "korthikanti" and conv.name != "xla-cpu"
    conv = dataclasses.replace(conv, megatron_block=megatron)
    act, precision = setting.act_bytes, setting.precision
    mem = (memory.memory_parts(sizes, grid, remat, rec, act, act, precision)
           if layout3d is None else
           tensor3d.memory_parts(sizes, grid, layout3d, remat, rec, act, act, precision))
    histories = fp8.state_bytes(sizes, grid, precision)  # delayed scaling's, replicated
    mem["argument"], mem["total"] = mem["argument"] + histories, mem["total"] + histories
    terms, on_axes = comm_terms(sizes, grid, remat, conv, act, rec, layout3d, precision)
    seconds: dict = {}
    for term in terms:  # a 3D family is timed as the 1D family it resembles (time.py)
        family = tensor3d.TIME_FAMILY.get(term.name, term.name)
        seconds[family] = (seconds.get(family, 0.0)
                           + alpha_beta.term_seconds(term, on_axes, chip))
    opt_elements = memory.state_elements(sizes, grid, "opt")
    if emulated:
        compute = time.cpu_compute(model, sizes, grid, remat, chip.calibration,
                                   chip.hbm_bandwidth, opt_elements, mem)
        compute |= _executor_ticks(sizes, grid, chip, remat, act, seconds, compute)
    else:
        casts = None
        if precision.fp8:  # (FP8 FLOP/s, the casts' bytes per token, a mixture's routed ones in)
            routed = (accelerator.slots_per_token(sizes, grid, setting.expert_imbalance)
                      if sizes.moe else 0.0)
            casts = (chip.peak(precision.peak) * chip.fp8_efficiency(),
                     fp8.cast_bytes_per_token(sizes, grid, precision, act, routed))
        compute = time.accelerator_compute(model, sizes, grid, remat, chip, model.dtype, act,
                                           opt_elements, rec.activations == "korthikanti",
                                           setting.expert_imbalance, casts)
    hidden: dict = {}
    if layout3d is not None and conv.axonn_overlaps and not emulated:  # AxoNN's overlaps
        seconds, hidden = tensor3d.with_overlaps(seconds, terms, on_axes, chip, sizes, grid,
                                                 model.dtype, act,
                                                 compute["per_microbatch"] * grid.microbatches)
    parts = None
    if not emulated:
        ops = {}
        if conv.overlaps_tp_comm or conv.async_tp:
            ops = {family: sum((t.count for t in terms if t.name == family), np.zeros(len(grid)))
                   for family in overlap.CHUNKED}
            compute["projection_gemm"] = overlap.projection_gemm_seconds(sizes, grid, chip,
                                                                         model.dtype, act)
        parts = overlap.exposed_parts(grid, sizes, conv, remat, compute, seconds, ops,
                                      int(chip.gemm.get("units", 0)))
    busy = None if emulated else alpha_beta.link_seconds(terms, on_axes, chip)
    step = time.step_time(grid, compute, seconds, emulated, remat, parts, busy)
    if parts is not None:  # the busiest link as one more row of the overlap report
        parts["links"] = overlap.link_part(busy, step["saturation"])
    hw = flops.hardware_flops(model, grid, remat)
    mf = flops.model_flops(model, grid)
    counted = flops.xla_counted(model, sizes, grid, remat) if conv.loops_counted_once else hw
    peak = chip.peak(model.dtype)
    if emulated:  # fewer devices than the calibration's share the cores: each runs faster
        cal = chip.calibration
        peak = peak * time.cpu_rate_scale(grid, cal.n_devices, cal.parallel_devices)
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
    out |= {overlap.column(name, k): v for name, part in (parts or {}).items()
            for k, v in part.items()}
    return out, terms


def program(setting: Setting) -> Convention:
    """The setting's convention with its stack's overlaps (Setting.overlaps)."""
    return dataclasses.replace(comm.convention(setting.convention), **dict(setting.overlaps))


def comm_terms(sizes, grid: Grid, remat: str, conv: Convention, act: int, rec: Recipe,
               layout3d: Layout | None = None, precision=None) -> tuple[list, Grid]:
    """(collective terms, the grid their axes are sized by): comm's, or a 3D tensor layout's."""
    if layout3d is None:
        return comm.terms(sizes, grid, remat, conv, act, rec.gathered_bytes(act), rec.grad_bytes,
                          precision), grid
    if np.any(grid.stage > 1):  # a grid of 3D layouts all inside stages, or none
        if not np.all(grid.stage > 1):
            raise ValueError("3D layouts with and without pipeline stages in one grid: "
                             "predict them in two grids")
        return (tensor3d_stages.terms(sizes, layout3d, grid, remat, conv, act,
                                      rec.gathered_bytes(act),
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
    # the copy bandwidth was measured with every device busy; fewer devices share the cores
    # as their arithmetic does (time.cpu_rate_scale)
    bandwidth = chip.hbm_bandwidth * time.cpu_rate_scale(grid, cal.n_devices,
                                                         cal.parallel_devices)
    fixed, sends = ticks.tick_seconds(grid, n_ticks, cal, copied, bandwidth, hops)
    return {"lockstep": lockstep, "busy": busy, "ticks": fixed, "sends": sends}


def checked(setting: Setting) -> Setting:
    """The setting, once its layout is known to be a real program that fits its cluster
    (LayoutError / InputError naming the fix otherwise)."""
    _check_fits_cluster(setting.layout, setting.cluster)
    check_valid(setting.layout, setting.model, setting.train, setting.layout.n_devices)
    return setting


def predict_setting(setting: Setting) -> Prediction:
    """Every term of one layout without replicas (DiLoCo's outer loop: parex.lowcomm), under
    a resolved Setting (parex.setting.resolve)."""
    setting = checked(setting)
    model, train, layout = setting.model, setting.train, setting.layout
    if layout.schedule == "local":  # local learning: its own step (parex.predict.local)
        from .local import predict_local

        proxy = predict_setting(setting.with_layout(layout.replace(
            schedule="1f1b", local_loss="ce", queue=1)))
        reason = executable_reason(layout, model, train)
        return dataclasses.replace(predict_local(setting, proxy), executable=reason is None,
                                   executable_reason=reason or "")
    reason = executable_reason(layout, model, train)
    # a 3D layout: its collectives from predict.tensor3d (ZeRO-3's data axis playing fsdp's
    # role, under that name), compute and memory from its 1D equivalent
    layout3d = tensor3d.zero3_as_fsdp(layout) if layout.tensor3d else None
    grid = Grid.from_layouts([tensor3d.equivalent(layout) if layout3d else layout], train, model)
    cols, terms = columns(setting, grid, layout3d)
    on_axes = tensor3d.axes_grid(grid, layout3d) if layout3d else grid
    value = {k: (v[0].item() if isinstance(v, np.ndarray) else v) for k, v in cols.items()}
    collectives = []
    for term in terms:
        count = float(term.count[0])
        if count:
            collectives.append({"name": term.name, "kind": term.kind,
                                "axes": [a.value for a in term.axes  # those the layout has
                                         if alpha_beta.group_shape(on_axes, (a,))[0][0] > 1],
                                "count": count,
                                "bytes": float(term.bytes[0]),
                                "bytes_per_op": float(term.bytes_per_op[0]),
                                "seconds": float(alpha_beta.term_seconds(
                                    term, on_axes, setting.cluster.chip)[0])}
                               | ({"routing": list(term.routing)} if term.routing else {}))
    hidden = {k: value.get(tensor3d.hidden_column(k)) for k in tensor3d.OVERLAPS}  # 3D, gpu
    tensor3d.annotate(collectives, {k: v for k, v in hidden.items() if v is not None})
    return Prediction(
        model=model.name, layout=str(layout), n_devices=layout.n_devices,
        hardware=setting.cluster.name,
        step_time_s={k: value[f"step_{k}_s"] for k in STEP_TIME_PARTS},
        memory_bytes_per_device={k: value[f"memory_{k}_bytes"] for k in PREDICTED_MEMORY_PARTS},
        flops_per_device=value["flops_per_device"],
        model_flops_per_device=value["model_flops_per_device"],
        comm_bytes_per_device={k: value[f"comm_{k.replace('-', '_')}_bytes"] for k in KINDS},
        tokens_per_step=grid.B * grid.T, mfu=value["mfu"], hfu=value["hfu"],
        fits=bool(value["fits"]), over_capacity_bytes=value["over_capacity_bytes"],
        memory_capacity_bytes=setting.cluster.chip.hbm_bytes,
        collectives=collectives, convention=setting.convention,
        hardware_flops_per_device=value["hardware_flops_per_device"],
        executable=reason is None, executable_reason=reason or "",
        assumptions=setting.to_json(), overlaps=_overlap_report(value))


def _overlap_report(value: dict) -> dict | None:
    """{overlap: {comm, exposed, contention}} seconds of one layout (predict.overlap), only
    the overlaps with collectives to hide; None on the emulated mesh."""
    report = {name: {k: value[overlap.column(name, k)] for k in ("comm", "exposed", "contention")}
              for name in overlap.NAMES if overlap.column(name, "comm") in value}
    return {name: part for name, part in report.items() if part["comm"] > 0} if report else None


def predict_batch(model: ModelConfig, train: TrainConfig, layouts, hardware, *,
                  convention: str | Convention | None = None,
                  recipe: str | Recipe | None = None, dtype: str | None = None,
                  expert_imbalance: float | None = None, stack: str | None = None,
                  overlaps=None) -> dict[str, np.ndarray]:
    """Columns (Prediction.to_row names) for many layouts: a list of Layouts or a Grid (built
    from a resolved TrainConfig). `valid` is parex.validation's verdict (the same rules as
    predict(), as columns) and the numbers of invalid rows are NaN; `executable` marks the valid
    rows parex's executor runs today; `fits` flags the rows that fit in memory. A model or
    train config that no layout can run raises LayoutError, as predict() does. The setting is
    resolved as predict()'s (parex.setting.resolve); a pipeline that names no schedule takes
    the regime's default; `stack` and `overlaps` name the communication overlaps priced
    (parex.stacks)."""
    if not isinstance(layouts, Grid) and any(layout.diloco for layout in layouts):
        raise InputError("predict_batch has no replica columns: predict DiLoCo layouts "
                         "(replica, inner_steps) one at a time with parex.predict")
    if not isinstance(layouts, Grid) and any(layout.tensor3d for layout in layouts):
        raise InputError("predict_batch has no Y and Z columns: predict 3D tensor layouts "
                         "(tensor=XxYxZ) one at a time with parex.predict")
    n = int(layouts.n_devices.max() if isinstance(layouts, Grid)
            else max((layout.n_devices for layout in layouts), default=1))
    setting = resolve(model, train, None, hardware, n_devices=n, dtype=dtype, recipe=recipe,
                      convention=convention, expert_imbalance=expert_imbalance, stack=stack,
                      overlaps=overlaps)
    if not isinstance(layouts, Grid):
        layouts = [setting.with_layout(layout).layout for layout in layouts]
    return predict_columns(setting, layouts)


def predict_columns(setting: Setting, layouts) -> dict[str, np.ndarray]:
    """predict_batch under a resolved setting (its layout unused): a list of resolved
    Layouts or a Grid."""
    if not isinstance(layouts, Grid):
        layouts = Grid.from_layouts(layouts, setting.train, setting.model)
    grid = layouts
    if (grid.schedule == len(SCHEDULES)).any():  # ALL_SCHEDULES' last: schedule=local
        raise InputError("predict_batch has no local-learning columns: predict schedule=local "
                         "layouts one at a time with parex.predict")
    model, train = setting.model, setting.train
    valid = valid_columns(model, train, grid)
    executable = valid & executable_columns(model, train, grid)
    if valid.all():
        safe = grid
    elif valid.any():
        safe = _masked(grid, valid)
    else:  # nothing to predict: the shapes of the columns from one valid layout
        check_valid(Layout(), model, train.replace(microbatch=None))
        safe = Grid.from_layouts([Layout()] * len(grid), train.replace(microbatch=None), model)
    cols, _ = columns(setting, safe)
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


__all__ = ["checked", "columns", "predict_batch", "predict_columns", "predict_setting",
           "shared_fields"]
