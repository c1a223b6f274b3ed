"""One visual language for every chart, table and status line: colours and labels here, units
in parex.units (re-exported, so a chart reads both from one place).

Colours. One colour per concept across all charts and notebooks. Model state is blue (parameters,
gradients, optimizer state), what the step builds is orange (activations, temporaries), inputs
and outputs brown; time spent computing is purple (forward, backward, weight gradient, and their
sum, compute), communication pink, idle time (the pipeline bubble) light grey. Fitting in memory
is green, not fitting red. Where a mark stands for a source rather than a part (a sweep's line
and points, the collective bytes' bars, a bubble's curves, the planner's layouts), measured is
black and predicted grey, in every chart and legend (SOURCE_COLORS), and a legend lists only the
sources drawn; part colours never stand for a source, so no colour means two things.

Axes show the data: a capacity line (HBM) is drawn only when the values reach CAPACITY_SHOWN of
it, else the subtitle says how much of it they use; values that span decades get a log axis
(SPAN_FOR_LOG).
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
    "measured": "#000000",  # the measured step time: one total, in the measured colour
}
OP_COLORS = {"forward": "#bcbddc", "backward": "#807dba", "input gradient": "#807dba",
             "weight gradient": "#3f007d", "idle (bubble)": TIME_COLORS["bubble"],
             "stage-to-stage send": TIME_COLORS["exposed communication"]}
COMM_COLOR = TIME_COLORS["exposed communication"]
FIT_COLORS = {"fits": "#2ca02c", "does not fit": "#d62728"}
MEASURED = "#000000"  # what ran: black, in every chart
PREDICTED = "#8c8c8c"  # what the analytic model says: grey, in every chart
SOURCE_COLORS = {"measured": MEASURED, "predicted": PREDICTED}
NEUTRAL = "#4d4d4d"  # rules and labels that stand for neither source (spreads, axes' notes)
CAPACITY_SHOWN = 0.1  # draw a capacity line when the values reach this share of it
SPAN_FOR_LOG = 100.0  # largest / smallest positive value from which an axis is logarithmic

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


def source_color(present, field: str = "source", title: str | None = None) -> alt.Color:
    """Measured black, predicted grey, the legend listing only the sources drawn."""
    return color(field, SOURCE_COLORS, present, title=title, columns=1)


def log_scale_fits(values) -> bool:
    """Whether positive `values` span SPAN_FOR_LOG or more (a linear axis would flatten the
    small ones)."""
    import numpy as np

    positive = np.asarray([v for v in values if v == v and v > 0], dtype=float)
    return len(positive) > 1 and positive.max() / positive.min() >= SPAN_FOR_LOG


def color(field: str, colors: dict, present, title: str | None = None, **legend) -> alt.Color:
    """A colour channel over `field` with fixed colours and only the present values listed."""
    scale = color_scale(colors, present)
    options = {"orient": "bottom", "columns": 2, "labelLimit": 260} | legend
    return alt.Color(f"{field}:N", scale=scale, sort=scale.domain, title=title,
                     legend=alt.Legend(**options))


__all__ = ["CAPACITY_SHOWN", "COMM_COLOR", "FIT_COLORS", "MEASURED", "MEMORY_COLORS", "NEUTRAL",
           "OP_COLORS", "OP_LABELS", "PART_LABELS", "PREDICTED", "SOURCE_COLORS", "SPAN_FOR_LOG",
           "TIME_COLORS", "bytes_unit", "color", "color_scale", "format_bytes", "format_count",
           "format_flops", "format_ratio", "format_seconds", "label", "log_scale_fits",
           "seconds_unit", "source_color"]
