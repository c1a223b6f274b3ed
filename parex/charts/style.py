"""One visual language for every chart, table and status line: colours and labels here, units
in parex.units (re-exported, so a chart reads both from one place).

Colours. One colour per concept across all charts and notebooks. Model state is blue (parameters,
gradients, optimizer state), what the step builds is orange (activations, temporaries), inputs
and outputs brown; time spent computing is purple (forward, backward, weight gradient, and their
sum, compute), communication pink, idle time (the pipeline bubble) light grey. Fitting in memory
is green, not fitting red. Measured and predicted are told apart by position or mark (solid
points against a line), never by colour, so no colour means two things.
"""

from __future__ import annotations

import altair as alt

from ..units import (bytes_unit, format_bytes, format_count, format_flops, format_ratio,
                     format_seconds, seconds_unit)


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


__all__ = ["COMM_COLOR", "FIT_COLORS", "MEASURED", "MEMORY_COLORS", "NEUTRAL", "OP_COLORS",
           "OP_LABELS", "PART_LABELS", "TIME_COLORS", "bytes_unit", "color", "color_scale",
           "format_bytes", "format_count", "format_flops", "format_ratio", "format_seconds",
           "label", "seconds_unit"]
