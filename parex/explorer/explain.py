"""Explain each predicted number: its formula with the values plugged in.

    explain(prediction, setting) -> {part: "formula = plugged = value"}

The keys are memory parts (params, grads, optimizer, activations, temp, inputs), step-time parts
(compute, exposed_comm, bubble) and collective kinds (all-reduce, ...). Every text ends with the
predictor's own number, read from the Prediction, and reads the Setting the prediction was made
under (parex.setting: its recipe, kernel, regime). Korthikanti et al. 2022's activations are the
predictor's own formula (parex.predict.memory.korthikanti_layer_bytes, with its text beside
it); the pipeline bubble's textbook formula is shown beside the predicted bubble. Parts the
Prediction does not split (compute's optimizer and fixed costs, the temporaries' branches) are
described in words beside the number rather than recomputed.
"""

from __future__ import annotations

from ..charts.style import format_bytes, format_count, format_flops, format_seconds
from ..layout import num_microbatches
from ..parallel.schedules import make_schedule
from ..predict import RECIPES
from ..predict.memory import fp8_kept_bytes, korthikanti_layer_bytes, korthikanti_layer_formula
from ..predict.shapes import Grid, model_sizes
from ..record import Prediction
from ..setting import Setting

LOGIT_COPIES = 3  # float32 (tokens, V/t) buffers around the loss: logits, softmax, gradient


def shape_of(setting: Setting) -> dict:
    """The symbols the formulas use: s (local sequence), b (sequences per microbatch per
    replica), h, a, t, L, p, m, v, and the layers one stage holds."""
    model, train, layout = setting.model, setting.train, setting.layout
    T = setting.seq_len
    m = num_microbatches(layout, train)
    b = train.global_batch // (layout.data_parallel * m)
    p, v = layout.stage, layout.virtual_stages
    return {"s": T // layout.seq, "T": T, "b": b, "h": model.hidden, "a": model.heads,
            "t": layout.tensor, "L": model.layers, "p": p, "m": m, "v": v,
            "stage_layers": model.layers // p, "tokens": b * T // layout.seq}


def in_flight(layout, m: int) -> int:
    """Microbatch-chunks a stage holds at its peak (1 without a pipeline)."""
    if layout.stage == 1:
        return 1
    schedule = make_schedule(layout.schedule, layout.stage, m, layout.virtual_stages)
    return max(schedule.peak_in_flight())


# --- memory ----------------------------------------------------------------------------------
def activation_bytes(setting: Setting, predicted: float) -> tuple[str, float]:
    """(explanation, bytes) of the saved activations at the step's peak. Korthikanti et al.'s
    formula is the predictor's (parex.predict.memory), plugged in here with the setting's
    values; parex's own recipe (what XLA keeps of parex's block, and a pipeline executor's
    buffers) is read off the Prediction, per layer where the layers are all alike."""
    model, layout = setting.model, setting.layout
    sym, rec = shape_of(setting), RECIPES[setting.recipe]
    flight = in_flight(layout, sym["m"])
    chunk_layers = sym["stage_layers"] // sym["v"]
    if rec.activations == "korthikanti":
        remat = setting.train.remat
        formula = korthikanti_layer_formula(layout.sp, remat, setting.flash)
        per_layer = float(korthikanti_layer_bytes(sym["s"], sym["b"], sym["h"], sym["a"],
                                                  sym["t"], layout.sp, remat,
                                                  flash=setting.flash))
        grid = Grid.from_layouts([layout], setting.train, model)
        kept = float(fp8_kept_bytes(model_sizes(model), grid, remat, setting.precision)[0])
        if kept and not model.moe:  # (the formula shown is the dense block's)
            formula += f" − {kept / sym['tokens']:g} B per token of GEMM inputs kept in FP8"
            per_layer -= kept
        layers = chunk_layers * flight if layout.stage > 1 else model.layers
        where = (f"× {chunk_layers} layers per chunk × {flight} chunks in flight"
                 if layout.stage > 1 else f"× L = {model.layers} layers")
        values = f"s={sym['s']}, b={sym['b']}, h={sym['h']}, a={sym['a']}, t={sym['t']}"
        return (f"per layer {formula} with {values} = {format_bytes(per_layer)}; {where}",
                per_layer * layers)
    if layout.stage == 1:
        return (f"what XLA keeps of parex's block (parex.predict.memory), "
                f"{format_bytes(predicted / model.layers)} per layer for {sym['tokens']} tokens "
                f"of {setting.act_bytes} B; × L = {model.layers} layers", predicted)
    return (f"the pipeline executor's buffers (parex.predict.stash): the residuals of up to "
            f"{flight} chunks of {chunk_layers} layer{'s' if chunk_layers > 1 else ''} in "
            f"flight, the embedding's and head's, a split backward's records and cotangents, "
            f"the inbox", predicted)


def _state(name: str, value: float, per_param: float, n_params: int, note: str) -> str:
    local = value / per_param if per_param else 0.0
    shards = n_params / local if local else 0.0
    return (f"{name}: {per_param:g} B × {format_count(local)} parameters on this device "
            f"({format_count(n_params)} ÷ {shards:.3g} shards{note}) = {format_bytes(value)}")


def memory_notes(p: Prediction, setting: Setting) -> dict[str, str]:
    model, layout = setting.model, setting.layout
    rec, mem, n = RECIPES[setting.recipe], p.memory_bytes_per_device, model.n_params
    split = "; tensor and stage split the layers, ZeRO-3 and fsdp shard them"
    text, _ = activation_bytes(setting, mem["activations"])
    sym = shape_of(setting)
    logits = LOGIT_COPIES * sym["tokens"] * model.vocab / layout.tensor * 4
    inputs = mem["argument"] - mem["params"] - mem["optimizer"]
    return {
        "params": _state("stored weights", mem["params"], rec.param_bytes, n, split),
        "grads": _state("gradients", mem["grads"], rec.grad_bytes, n,
                        "; ZeRO-2/3 and fsdp shard them"),
        "optimizer": _state("optimizer state", mem["optimizer"], rec.optimizer_bytes, n,
                            "; ZeRO-1+ and fsdp shard it"),
        "activations": f"saved activations ({rec.activations} formula): {text} = "
                       f"{format_bytes(mem['activations'])}",
        "temp": ("the larger of the backward's transients (one layer's working set, the float32 "
                 f"logits 3·tokens·V/t·4 B = {format_bytes(logits)}, bf16 weight copies, a "
                 "gradient-accumulation sum) and the optimizer update's buffers, less the "
                 f"activations = {format_bytes(mem['temp'])}"),
        "inputs": f"token ids and targets: 2 × 4 B × b·T = {format_bytes(inputs)}",
    }


# --- time ------------------------------------------------------------------------------------
def compute_note(p: Prediction, setting: Setting) -> str:
    seconds, chip, dtype = p.step_time_s["compute"], setting.cluster.chip, setting.dtype
    if setting.emulated:
        return ("compute on the calibrated CPU (parex calibrate): matmuls at the measured rate "
                "for their shape, elementwise FLOPs, activation traffic, the optimizer and the "
                f"fixed cost per step = {format_seconds(seconds)}")
    peak = chip.peak(dtype)
    rate = p.hardware_flops_per_device / seconds if seconds else 0.0
    return (f"{format_flops(p.hardware_flops_per_device)} per device ÷ "
            f"{format_flops(rate, True)} achieved ({rate / peak:.0%} of the {dtype} peak "
            f"{format_flops(peak, True)}: kernel roofline × step efficiency "
            f"{chip.step_efficiency:.2f}) = {format_seconds(seconds)}")


def collective_line(c: dict, layout) -> str:
    g = 1
    for axis in c["axes"]:
        g *= getattr(layout, axis)
    per_op = c["seconds"] / c["count"] if c["count"] else 0.0
    return (f"{c['name']}: {c['count']:g} × {c['kind']} of {format_bytes(c['bytes_per_op'])} "
            f"over {'×'.join(c['axes'])} (group {g}) × {format_seconds(per_op)} each "
            f"= {format_seconds(c['seconds'])}")


def comm_note(p: Prediction, setting: Setting) -> str:
    lines = [collective_line(c, setting.layout) for c in p.collectives if c["seconds"] > 0]
    total = sum(c["seconds"] for c in p.collectives)
    exposed = p.step_time_s["exposed_comm"]
    overlap = ("the emulated mesh overlaps nothing" if setting.emulated else
               "fsdp gathers hide behind compute; "
               + "; ".join(f"{name} {format_seconds(part['comm'])} leaves "
                           f"{format_seconds(part['exposed'] + part['contention'])}"
                           for name, part in (p.overlaps or {}).items())
               + (f" (stack {setting.stack}, parex.predict.overlap)" if setting.stack else
                  " (parex.predict.overlap)"))
    head = (f"exposed {format_seconds(exposed)} of {format_seconds(total)} of collectives "
            f"({overlap})")
    return "; ".join([head, *lines]) if lines else f"{head}: none"


def bubble_note(p: Prediction, setting: Setting) -> str:
    layout, sym = setting.layout, shape_of(setting)
    pp, m, v = sym["p"], sym["m"], sym["v"]
    if pp == 1:
        return "no pipeline: no bubble"
    textbook = (pp - 1) / (m + pp - 1)
    formula = {"interleaved": f"(p−1)/(v·m) = {(pp - 1) / (v * m):.0%} of the ideal compute",
               "zbh1": "(p−1)·(t_F + t_B − t_W): W fills the tail",
               "gpipe": f"(p−1)/(m+p−1) = {pp - 1}/{m + pp - 1} = {textbook:.0%} of the step",
               }.get(layout.schedule, "the idle time of its schedule table")
    if layout.schedule == "1f1b":
        formula = f"(p−1)/(m+p−1) = {pp - 1}/{m + pp - 1} = {textbook:.0%} of the step"
    if setting.emulated:
        return (f"0 on the emulated mesh: its devices share the host's cores, so an idle stage "
                f"lends its core to a busy one. On a GPU: {formula} (p={pp}, m={m}, v={v})")
    share = p.step_time_s["bubble"] / p.step_time_s["total"]
    return (f"{formula} (p={pp}, m={m}, v={v}); the predictor times the schedule table: "
            f"{format_seconds(p.step_time_s['bubble'])}, {share:.0%} of this step")


def comm_bytes_notes(p: Prediction) -> dict[str, str]:
    """Per collective kind, the terms whose bytes add up to it."""
    out: dict[str, list[str]] = {}
    for c in p.collectives:
        out.setdefault(c["kind"], []).append(
            f"{c['name']} {c['count']:g} × {format_bytes(c['bytes_per_op'])} over "
            f"{'×'.join(c['axes'])}")
    return {kind: " + ".join(parts) + f" = {format_bytes(p.comm_bytes_per_device[kind])}"
            for kind, parts in out.items()}


def explain(p: Prediction, setting: Setting) -> dict[str, str]:
    """Every part's formula with the values plugged in, ending with the predicted value, under
    the Setting `p` was predicted with."""
    notes = memory_notes(p, setting)
    notes |= {"compute": compute_note(p, setting), "exposed_comm": comm_note(p, setting),
              "bubble": bubble_note(p, setting)}
    return notes | comm_bytes_notes(p)


__all__ = ["activation_bytes", "explain", "in_flight", "shape_of"]
