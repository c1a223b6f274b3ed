"""One visual language for every chart, table and status line: units, colours, labels.

Units. Bytes are decimal (a GB is 1e9 bytes, as hardware profiles count HBM) and seconds are
shown in µs, ms, s or min. One rule picks the unit from a magnitude, the largest unit in which the
value is at least 1, and the same rule serves an axis (from the largest value it draws), a
tooltip, a status line and a table cell, so a number reads the same wherever it appears:

    format_bytes(45.2e6) == "45.2 MB"      bytes_unit(5e11) == ("GB", 1e9)
    format_seconds(0.375) == "375 ms"      seconds_unit(140.0) == ("min", 60.0)

Colours. One colour per concept across all charts and notebooks. Model state is blue (parameters,
gradients, optimizer state), what the step builds is orange (activations, temporaries), inputs
and outputs brown; time spent computing is purple (forward, backward, weight gradient, and their
sum, compute), communication pink, idle time (the pipeline bubble) light grey. Fitting in memory
is green, not fitting red. Measured and predicted are told apart by position or mark (solid
points against a line), never by colour, so no colour means two things.
"""

from __future__ import annotations

import math

import altair as alt

BYTE_UNITS = (("B", 1.0), ("KB", 1e3), ("MB", 1e6), ("GB", 1e9), ("TB", 1e12))
SECOND_UNITS = (("µs", 1e-6), ("ms", 1e-3), ("s", 1.0), ("min", 60.0))
MINUTE_FROM_S = 120.0  # seconds read as minutes from two minutes on (119 s stays "119 s")

# --- colours ---------------------------------------------------------------------------------
MEMORY_COLORS = {
    "parameters": "#1f77b4",
    "gradients": "#17becf",
    "optimizer state": "#aec7e8",
    "activations": "#ff7f0e",
    "temporaries": "#ffbb78",
    "inputs": "#8c564b",
    "outputs": "#c49c94",
    # the parts of XLA's memory analysis that parex cannot split further (measured side)
    "parameters + optimizer (XLA argument)": "#393b79",
    "gradients + activations + temporaries (XLA temp)": "#e7ba52",
}
TIME_COLORS = {
    "compute": "#6a51a3",
    "exposed communication": "#e377c2",
    "bubble": "#d9d9d9",
    "measured": "#252525",  # the measured step time: one total, drawn as a dark bar
}
OP_COLORS = {"forward": "#bcbddc", "backward": "#807dba", "input gradient": "#807dba",
             "weight gradient": "#3f007d", "idle (bubble)": TIME_COLORS["bubble"],
             "stage-to-stage send": TIME_COLORS["exposed communication"]}
COMM_COLOR = TIME_COLORS["exposed communication"]
FIT_COLORS = {"fits": "#2ca02c", "does not fit": "#d62728"}
NEUTRAL = "#4d4d4d"  # predicted lines and points that carry no concept of their own
MEASURED = "#000000"

# --- human labels ----------------------------------------------------------------------------
PART_LABELS = {"params": "parameters", "grads": "gradients", "optimizer": "optimizer state",
               "activations": "activations", "temp": "temporaries", "batch": "inputs",
               "compute": "compute", "exposed_comm": "exposed communication",
               "bubble": "bubble"}
OP_LABELS = {"F": "forward", "B": "backward", "W": "weight gradient"}


def label(name: str) -> str:
    """The human label of a field or part name: PART_LABELS, else snake_case → words."""
    return PART_LABELS.get(name, name.replace("_", " "))


def color_scale(colors: dict, present) -> alt.Scale:
    """The fixed colours of the concepts actually drawn (legends list only those)."""
    shown = set(present)
    domain = [k for k in colors if k in shown]
    return alt.Scale(domain=domain, range=[colors[k] for k in domain])


def color(field: str, colors: dict, present, title: str | None = None, **legend) -> alt.Color:
    """A colour channel over `field` with fixed colours and only the present values listed."""
    scale = color_scale(colors, present)
    return alt.Color(f"{field}:N", scale=scale, sort=scale.domain, title=title,
                     legend=alt.Legend(orient="bottom", columns=2, labelLimit=260, **legend))


# --- units -----------------------------------------------------------------------------------
def _pick(units, magnitude: float) -> tuple[str, float]:
    magnitude = abs(magnitude) if magnitude and math.isfinite(magnitude) else 0.0
    chosen = units[0]
    for unit in units:
        if magnitude >= unit[1]:
            chosen = unit
    return chosen


def bytes_unit(magnitude: float) -> tuple[str, float]:
    """(name, bytes per unit): the largest unit in which `magnitude` is at least 1."""
    return _pick(BYTE_UNITS, magnitude)


def seconds_unit(magnitude: float) -> tuple[str, float]:
    """(name, seconds per unit): µs, ms, s, or min from two minutes on."""
    if magnitude and abs(magnitude) >= MINUTE_FROM_S:
        return SECOND_UNITS[-1]
    return _pick(SECOND_UNITS[:-1], magnitude)


def _number(value: float) -> str:
    """Three significant figures, no exponent: 45.2, 375, 1,234."""
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    digits = max(0, 2 - int(math.floor(math.log10(abs(value)))))
    return f"{value:.{digits}f}"


def format_bytes(value: float) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    name, size = bytes_unit(value)
    return f"{_number(value / size)} {name}"


def format_seconds(value: float) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    name, size = seconds_unit(value)
    return f"{_number(value / size)} {name}"


def format_count(value: float) -> str:
    """Parameters: 0.93M, 69.0B, 1.23T."""
    for name, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= size:
            return f"{_number(value / size)}{name}"
    return _number(value)


def format_flops(value: float, per_second: bool = False) -> str:
    """FLOPs (or FLOP/s): 1.23 TFLOP, 989 TFLOP/s."""
    unit = "FLOP/s" if per_second else "FLOP"
    for name, size in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= size:
            return f"{_number(value / size)} {name}{unit}"
    return f"{_number(value)} {unit}"


def format_ratio(value: float) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:.2f}×"


__all__ = ["COMM_COLOR", "FIT_COLORS", "MEASURED", "MEMORY_COLORS", "NEUTRAL", "OP_COLORS",
           "OP_LABELS", "PART_LABELS", "TIME_COLORS", "bytes_unit", "color", "color_scale",
           "format_bytes", "format_count", "format_flops", "format_ratio", "format_seconds",
           "label", "seconds_unit"]
