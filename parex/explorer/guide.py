"""Guidance from the predictor: the cheapest changes that make a layout fit in memory, and the
nearest valid layouts when the controls describe an impossible one.

    fit_fixes(values)     -> [Suggestion]   fits, fastest predicted step first
    ways_out(values)      -> [Suggestion]   valid, fewest and smallest changes first

Both work on the Explorer's control values (parex.explorer.state) and try changes one at a
time, then in pairs, then in threes, so a suggestion is a short list of controls to set. Fit
candidates are screened with predict_batch (every layout of one model and training setup at
once) and the winners re-predicted with predict(), which runs every validation check.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..charts.style import format_bytes, format_seconds
from ..hardware import load_chip
from ..layout import CP_MODES, LayoutError, divisors
from ..parallel.schedules import SCHEDULES
from ..predict import predict, predict_batch
from ..record import Prediction
from .state import layout_of, model_of, resolve, train_of

MICROBATCHES = (1, 2, 4, 8, 16, 32)
REMAT_ORDER = ("none", "selective", "full")


@dataclass
class Suggestion:
    """Controls to set, and what the predictor says of the result."""

    changes: dict
    prediction: Prediction | None = None
    note: str = ""

    @property
    def text(self) -> str:
        return ", ".join(f"{k}={_show(v)}" for k, v in self.changes.items())


def _show(value) -> str:
    return {True: "on", False: "off"}.get(value, str(value)) if isinstance(value, bool) else str(
        value)


# --- fitting in memory ---------------------------------------------------------------------
def memory_moves(values: dict) -> list[dict]:
    """Single changes that lower memory per device: recompute more, shard more state (ZeRO,
    fsdp), split the model (tensor, stage), accumulate gradients, sequence parallelism,
    16-bit compute."""
    n, moves = values["devices"], []
    moves += [{"remat": r} for r in REMAT_ORDER[REMAT_ORDER.index(values["remat"]) + 1:]]
    moves += [{"zero": z} for z in range(values["zero"] + 1, 4)]
    for axis in ("fsdp", "tensor"):
        moves += [{axis: values[axis] * k} for k in (2, 4, 8, 16, 32, 64)
                  if n % (values[axis] * k) == 0]
    for k in (2, 4, 8):
        stage = values["stage"] * k
        if n % stage == 0:
            schedule = values["schedule"] if values["stage"] > 1 else "1f1b"
            moves += [{"stage": stage, "schedule": schedule, "microbatches": m}
                      for m in MICROBATCHES if m >= stage and m >= values["microbatches"]][:2]
    moves += [{"microbatches": m} for m in MICROBATCHES if m > values["microbatches"]][:3]
    if values["tensor"] > 1 and not values["sp"]:
        moves.append({"sp": True})
    if values["dtype"] != "bfloat16":
        moves.append({"dtype": "bfloat16"})
    return moves


def _merge(moves: tuple[dict, ...]) -> dict | None:
    """One change set from several, or None when two set the same control."""
    out: dict = {}
    for move in moves:
        if set(move) & set(out):
            return None
        out |= move
    return out


def _screen(values: dict, changes: list[dict]) -> list[tuple[dict, float, float]]:
    """(changes, predicted step seconds, memory bytes) of every candidate that fits, by
    predict_batch over the candidates that share a model and training setup."""
    groups: dict = {}
    for change in changes:
        trial = values | change
        try:
            layout = layout_of(trial)
            key = (model_of(trial), train_of(trial))
        except (LayoutError, ValueError):
            continue
        groups.setdefault(key, []).append((change, layout))
    found = []
    for (model, train), items in groups.items():
        cols = predict_batch(model, train, [layout for _, layout in items], values["hardware"],
                             dtype=model.dtype)
        for i, (change, _) in enumerate(items):
            if cols["valid"][i] and cols["fits"][i]:
                found.append((change, float(cols["step_time_s"][i]),
                              float(cols["memory_total_bytes"][i])))
    return found


def fit_fixes(values: dict, limit: int = 3) -> list[Suggestion]:
    """The fastest (by predicted step time) changes of up to three controls that make the
    layout fit; the fewest changes that work win, so a single change is never hidden behind a
    faster pair."""
    moves = memory_moves(values)
    capacity = load_chip(values["hardware"]).hbm_bytes
    for size in (1, 2, 3):
        combos = [_merge(c) for c in itertools.combinations(moves, size)]
        found = sorted(_screen(values, [c for c in combos if c]), key=lambda f: f[1])
        out = []
        for change, _, _ in found:
            try:
                model, train, layout = resolve(values | change)
                p = predict(model, train, layout, values["hardware"], dtype=model.dtype)
            except (LayoutError, ValueError):
                continue  # a check predict_batch's screen does not run
            if p.fits:
                out.append(Suggestion(change, p, _fit_note(p, capacity)))
            if len(out) == limit:
                break
        if out:
            return out
    return []


def _fit_note(p: Prediction, capacity: float) -> str:
    return (f"{format_bytes(p.memory_bytes_per_device['total'])} of {format_bytes(capacity)}, "
            f"{format_seconds(p.step_time_s['total'])} per step")


# --- out of an impossible layout -------------------------------------------------------------
def neighbours(values: dict) -> list[dict]:
    """Single changes to try when the controls are impossible, nearest first within each
    control."""
    n, out = values["devices"], []
    for axis in ("stage", "tensor", "fsdp", "seq"):
        out += [{axis: d} for d in _near(divisors(n), values[axis])]
    out += [{"virtual": v} for v in _near([1, 2, 3, 4], values["virtual"])]
    out += [{"schedule": s} for s in SCHEDULES if s != values["schedule"]]
    out += [{"microbatches": m} for m in _near(list(MICROBATCHES), values["microbatches"])]
    out += [{"sp": not values["sp"]}, *({"cp": c} for c in CP_MODES if c != values["cp"])]
    out += [{"zero": z} for z in _near([0, 1, 2, 3], values["zero"])]
    chunks = values["stage"] * values["virtual"]
    layers = -(-values["layers"] // chunks) * chunks
    if layers != values["layers"]:
        out.append({"layers": layers})
    for k in (2, 4, 8):
        out.append({"global_batch": values["global_batch"] * k})
    return out


def _near(options: list, current) -> list:
    """The options other than `current`, nearest first."""
    index = options.index(current) if current in options else 0
    return sorted((o for o in options if o != current),
                  key=lambda o: abs(options.index(o) - index))


def _valid(values: dict) -> bool:
    try:
        resolve(values)
        return True
    except (LayoutError, ValueError):
        return False


def ways_out(values: dict, limit: int = 3) -> list[Suggestion]:
    """Valid layouts one change away (at most one per control), then two changes away."""
    singles = neighbours(values)
    out, used = [], set()
    for change in singles:
        (control,) = change
        if control not in used and _valid(values | change):
            out.append(Suggestion(change))
            used.add(control)
    if len(out) >= limit:
        return out[:limit]
    for a, b in itertools.combinations(singles, 2):  # then pairs of controls not used yet
        change = _merge((a, b))
        if change and not set(change) & used and _valid(values | change):
            out.append(Suggestion(change))
            used |= set(change)
        if len(out) == limit:
            break
    return out


def regime_of(p: Prediction) -> str:
    """compute-, communication- or bubble-bound: the largest part of the step (memory-bound
    when it does not fit), as parex.charts.regime."""
    if not p.fits:
        return "memory-bound (does not fit)"
    parts = {"compute-bound": p.step_time_s["compute"],
             "communication-bound": p.step_time_s["exposed_comm"],
             "bubble-bound": p.step_time_s["bubble"]}
    return max(parts, key=parts.get)


__all__ = ["Suggestion", "fit_fixes", "memory_moves", "neighbours", "regime_of", "ways_out"]
