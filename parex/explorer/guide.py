"""Guidance from the predictor: the cheapest changes that make a layout fit in memory, and the
nearest valid layouts when the controls describe an impossible one.

    fit_fixes(values)     -> [Suggestion]   fits, fastest predicted step first
    ways_out(values)      -> [Suggestion]   valid, fewest and smallest changes first

Both work on the Explorer's control values (parex.explorer.state). The fit fixes are the real
planner's best layouts on the same devices (parex.plan.alternatives), as the controls to set;
the ways out try changes one at a time, then in pairs. Every suggestion is re-predicted with
predict(), which runs every validation check.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..charts.style import format_bytes, format_seconds
from ..hardware import load_chip
from ..layout import CP_MODES, LayoutError, divisors
from ..parallel.schedules import SCHEDULES
from ..plan.alternatives import fitting_layouts, saving_text
from ..record import Prediction
from ..setting import resolve as resolve_setting
from .state import layout_of, model_of, predicted, resolve, train_of

# the microbatch control's choices: up to 512, as a >=1B model's default batch on an accelerator
# (parex.defaults) splits into 512 / data microbatches of one sequence, which the fixes propose
MICROBATCHES = tuple(2 ** k for k in range(10))


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
LAYOUT_CONTROLS = {"fsdp": "fsdp", "expert": "expert", "tensor": "tensor", "tensor_y": "tensor_y",
                   "tensor_z": "tensor_z", "seq": "seq", "stage": "stage",
                   "zero": "zero", "sp": "sp", "cp": "cp", "microbatches": "microbatches",
                   "schedule": "schedule", "virtual": "virtual_stages"}


def controls_of(values: dict, layout, remat: str) -> dict | None:
    """The controls to set so that the Explorer shows `layout` with `remat` (only those that
    change), or None when the controls cannot describe it (an uneven stage partition, a
    microbatch count the control does not offer)."""
    if layout.layers_per_stage or layout.microbatches not in MICROBATCHES:
        return None
    wanted = {control: getattr(layout, name) for control, name in LAYOUT_CONTROLS.items()}
    wanted["remat"] = remat
    changes = {k: v for k, v in wanted.items() if values.get(k) != v}
    if layout.folds_experts != values.get("expert_fold", False):  # a checkbox, off by default
        changes["expert_fold"] = layout.folds_experts
    if layout.stage == 1:  # the controls ignore schedule and virtual without a pipeline
        changes = {k: v for k, v in changes.items() if k not in ("schedule", "virtual")}
    try:
        same = layout_of(values | changes) == layout
    except LayoutError:
        return None
    return changes if same else None


def fit_fixes(values: dict, limit: int = 3) -> list[Suggestion]:
    """The planner's fastest layouts that fit on the same devices (parex.plan.alternatives:
    every layout of this model, batch, dtype and hardware, every remat policy, ranked by
    predicted step time), as controls to set, each re-predicted as the Explorer will show it
    and noted with its saving against the current layout's step."""
    # the controls' recipe and convention where the Explorer has them, else the profile's
    chosen = {k: values.get(k) for k in ("recipe", "convention")}
    model, train, layout = resolve(values)
    current = predicted(values, model, train, layout)
    now = current.step_time_s["total"]
    alts = fitting_layouts(model, train, values["hardware"], values["devices"], limit=limit,
                           current_step_s=now, dtype=model.dtype, **chosen,
                           keep=lambda lay, remat: controls_of(values, lay, remat) is not None)
    capacity = load_chip(values["hardware"]).hbm_bytes
    out = []
    for alt in alts:
        change = controls_of(values, alt.layout, alt.remat)
        try:
            model, train, layout = resolve(values | change)
            p = predicted(values | change, model, train, layout)
        except (LayoutError, ValueError):
            continue
        if p.fits:
            out.append(Suggestion(change, p, _fit_note(p, capacity, saving_text(alt, now))))
    return out


def _fit_note(p: Prediction, capacity: float, saving: str = "") -> str:
    return (f"{format_bytes(p.memory_bytes_per_device['total'])} of {format_bytes(capacity)}, "
            f"{format_seconds(p.step_time_s['total'])} per step"
            + (f" ({saving} than now)" if saving else ""))


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
    batch = values["global_batch"] or resolve_setting(
        model_of(values), train_of(values), layout_of(values), values["hardware"]
    ).train.global_batch  # the default the controls show
    for k in (2, 4, 8):
        out.append({"global_batch": batch * k})
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


def _merge(moves: tuple[dict, ...]) -> dict | None:
    """One change set from several, or None when two set the same control."""
    out: dict = {}
    for move in moves:
        if set(move) & set(out):
            return None
        out |= move
    return out


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
    """What bounds the step, in the words the Planner and the charts use (record.bound)."""
    return f"{p.bound}-bound" + ("" if p.fits else " (does not fit)")


__all__ = ["Suggestion", "controls_of", "fit_fixes", "neighbours", "regime_of", "ways_out"]
