"""Explain each predicted number: its formula with the values plugged in.

    explain(prediction, model, train, layout, chip) -> {part: "formula = plugged = value"}

The keys are memory parts (params, grads, optimizer, activations, temp, inputs), step-time parts
(compute, exposed_comm, bubble) and collective kinds (all-reduce, ...). Every text ends with the
predictor's own number, read from the Prediction; where a formula is rebuilt here from published
terms (Korthikanti et al. 2022's activations, the pipeline bubble) it is rebuilt from the same
inputs, and `activation_bytes` is checked against the Prediction by the tests, so an explanation
that drifts from the predictor fails there rather than misleading here. Parts the Prediction
does not split (compute's optimizer and fixed costs, the temporaries' branches) are described in
words beside the number rather than recomputed.
"""

from __future__ import annotations

from ..charts.style import format_bytes, format_count, format_flops, format_seconds
from ..config import ModelConfig, TrainConfig
from ..defaults import attention_of
from ..layout import Layout, num_microbatches
from ..parallel.schedules import make_schedule
from ..predict import RECIPES
from ..record import Prediction

DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
LOGIT_COPIES = 3  # float32 (tokens, V/t) buffers around the loss: logits, softmax, gradient


def recipe_for(chip, prediction: Prediction | None = None):
    """The memory recipe of `prediction` (its assumptions), else the one predict() uses by
    default on this chip: parex's own float32 state on the calibrated CPU, Megatron's mixed
    precision on an accelerator."""
    named = (getattr(prediction, "assumptions", None) or {}).get("recipe")
    return RECIPES[named or ("parex" if chip.calibration is not None else "mixed")]


def shape_of(model: ModelConfig, train: TrainConfig, layout: Layout) -> dict:
    """The symbols the formulas use: s (local sequence), b (sequences per microbatch per
    replica), h, a, t, L, p, m, v, and the layers one stage holds."""
    T = train.seq_len or model.seq_len
    m = num_microbatches(layout, train)
    b = train.global_batch // (layout.data_parallel * m)
    p, v = layout.stage, layout.virtual_stages
    return {"s": T // layout.seq, "T": T, "b": b, "h": model.hidden, "a": model.heads,
            "t": layout.tensor, "L": model.layers, "p": p, "m": m, "v": v,
            "stage_layers": model.layers // p, "tokens": b * T // layout.seq}


def in_flight(layout: Layout, m: int) -> int:
    """Microbatch-chunks a stage holds at its peak (1 without a pipeline)."""
    if layout.stage == 1:
        return 1
    schedule = make_schedule(layout.schedule, layout.stage, m, layout.virtual_stages)
    return max(schedule.peak_in_flight())


# --- memory ----------------------------------------------------------------------------------
def korthikanti_layer(sym: dict, sp: bool, remat: str, flash: bool = False) -> tuple[str, float]:
    """(formula, bytes) of one layer's activations, Korthikanti et al. 2022 (16-bit); a fused
    (flash) kernel keeps each row's float32 log-sum-exp, 4·a/h per s·b·h, not the scores."""
    s, b, h, a, t = sym["s"], sym["b"], sym["h"], sym["a"], sym["t"]
    if remat == "full":
        return "2·s·b·h (full recompute keeps only the block input)", 2 * s * b * h
    term, attn, note = ("4·a/h", 4 * a / h, " (flash attention keeps no scores)") if flash else \
        ("5·a·s/h", 5 * a * s / h, "")
    if remat == "selective":
        attn, note = 0, f" (selective recompute drops {term})"
    if sp:
        return f"s·b·h/t·(34 + {term}){note}", s * b * h / t * (34 + attn)
    return f"s·b·h·(10 + 24/t + {term}/t){note}", s * b * h * (10 + 24 / t + attn / t)


def activation_bytes(model, train, layout, chip, dtype, predicted: float,
                     prediction: Prediction | None = None) -> tuple[str, float]:
    """(explanation, bytes) of the saved activations at the step's peak. Korthikanti et al.'s
    published formula is rebuilt here (and checked against the predictor by the tests); parex's
    own recipe (what XLA keeps of parex's block, and a pipeline executor's buffers) is read off
    the Prediction, per layer where the layers are all alike."""
    sym, rec = shape_of(model, train, layout), recipe_for(chip, prediction)
    flight = in_flight(layout, sym["m"])
    chunk_layers = sym["stage_layers"] // sym["v"]
    if rec.activations == "korthikanti":
        flash = attention_of(train, chip.calibration is not None) == "flash"
        formula, per_layer = korthikanti_layer(sym, layout.sp, train.remat, flash)
        layers = chunk_layers * flight if layout.stage > 1 else model.layers
        where = (f"× {chunk_layers} layers per chunk × {flight} chunks in flight"
                 if layout.stage > 1 else f"× L = {model.layers} layers")
        values = f"s={sym['s']}, b={sym['b']}, h={sym['h']}, a={sym['a']}, t={sym['t']}"
        return (f"per layer {formula} with {values} = {format_bytes(per_layer)}; {where}",
                per_layer * layers)
    if layout.stage == 1:
        return (f"what XLA keeps of parex's block (parex.predict.memory), "
                f"{format_bytes(predicted / model.layers)} per layer for {sym['tokens']} tokens "
                f"of {DTYPE_BYTES[dtype]} B; × L = {model.layers} layers", predicted)
    return (f"the pipeline executor's buffers (parex.predict.stash): the residuals of up to "
            f"{flight} chunks of {chunk_layers} layer{'s' if chunk_layers > 1 else ''} in "
            f"flight, the embedding's and head's, a split backward's records and cotangents, "
            f"the inbox", predicted)


def _state(name: str, value: float, per_param: float, n_params: int, note: str) -> str:
    local = value / per_param if per_param else 0.0
    shards = n_params / local if local else 0.0
    return (f"{name}: {per_param:g} B × {format_count(local)} parameters on this device "
            f"({format_count(n_params)} ÷ {shards:.3g} shards{note}) = {format_bytes(value)}")


def memory_notes(p: Prediction, model, train, layout, chip, dtype) -> dict[str, str]:
    rec, mem, n = recipe_for(chip, p), p.memory_bytes_per_device, model.n_params
    split = "; tensor and stage split the layers, ZeRO-3 and fsdp shard them"
    text, _ = activation_bytes(model, train, layout, chip, dtype, mem["activations"], p)
    sym = shape_of(model, train, layout)
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
def compute_note(p: Prediction, chip, dtype) -> str:
    seconds = p.step_time_s["compute"]
    if chip.calibration is not None:
        return ("compute on the calibrated CPU (parex calibrate): matmuls at the measured rate "
                "for their shape, elementwise FLOPs, activation traffic, the optimizer and the "
                f"fixed cost per step = {format_seconds(seconds)}")
    peak = chip.peak(dtype)
    rate = p.hardware_flops_per_device / seconds if seconds else 0.0
    return (f"{format_flops(p.hardware_flops_per_device)} per device ÷ "
            f"{format_flops(rate, True)} achieved ({rate / peak:.0%} of the {dtype} peak "
            f"{format_flops(peak, True)}: kernel roofline × step efficiency "
            f"{chip.step_efficiency:.2f}) = {format_seconds(seconds)}")


def collective_line(c: dict, layout: Layout) -> str:
    g = 1
    for axis in c["axes"]:
        g *= getattr(layout, axis)
    per_op = c["seconds"] / c["count"] if c["count"] else 0.0
    return (f"{c['name']}: {c['count']:g} × {c['kind']} of {format_bytes(c['bytes_per_op'])} "
            f"over {'×'.join(c['axes'])} (group {g}) × {format_seconds(per_op)} each "
            f"= {format_seconds(c['seconds'])}")


def comm_note(p: Prediction, layout: Layout, chip) -> str:
    lines = [collective_line(c, layout) for c in p.collectives if c["seconds"] > 0]
    total = sum(c["seconds"] for c in p.collectives)
    exposed = p.step_time_s["exposed_comm"]
    overlap = ("the emulated mesh overlaps nothing" if chip.calibration is not None else
               "gradient reductions hide behind the backward, fsdp gathers behind compute; "
               "TP/SP collectives are exposed")
    head = (f"exposed {format_seconds(exposed)} of {format_seconds(total)} of collectives "
            f"({overlap})")
    return "; ".join([head, *lines]) if lines else f"{head}: none"


def bubble_note(p: Prediction, layout: Layout, sym: dict, chip) -> str:
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
    if chip.calibration is not None:
        return (f"0 on the emulated mesh: its devices share the host's cores, so an idle stage "
                f"lends its core to a busy one. On a GPU: {formula} (p={pp}, m={m}, v={v})")
    share = p.step_time_s["bubble"] / p.step_time_s["total"]
    return (f"{formula} (p={pp}, m={m}, v={v}); the predictor times the schedule table: "
            f"{format_seconds(p.step_time_s['bubble'])}, {share:.0%} of this step")


def comm_bytes_notes(p: Prediction, layout: Layout) -> dict[str, str]:
    """Per collective kind, the terms whose bytes add up to it."""
    out: dict[str, list[str]] = {}
    for c in p.collectives:
        out.setdefault(c["kind"], []).append(
            f"{c['name']} {c['count']:g} × {format_bytes(c['bytes_per_op'])} over "
            f"{'×'.join(c['axes'])}")
    return {kind: " + ".join(parts) + f" = {format_bytes(p.comm_bytes_per_device[kind])}"
            for kind, parts in out.items()}


def explain(p: Prediction, model: ModelConfig, train: TrainConfig, layout: Layout, chip,
            dtype: str | None = None) -> dict[str, str]:
    """Every part's formula with the values plugged in, ending with the predicted value."""
    dtype = dtype or model.dtype
    sym = shape_of(model, train, layout)
    notes = memory_notes(p, model, train, layout, chip, dtype)
    notes |= {"compute": compute_note(p, chip, dtype),
              "exposed_comm": comm_note(p, layout, chip),
              "bubble": bubble_note(p, layout, sym, chip)}
    return notes | comm_bytes_notes(p, layout)




__all__ = ["activation_bytes", "explain", "in_flight", "recipe_for", "shape_of"]
