"""The planner's picture: predicted step time against memory per device for the layouts that
fit, the Pareto front (no layout is both faster and leaner) highlighted, the top rows labelled
by rank and the memory cap drawn as a rule. Reads `parex.plan.report.chart_frame`.

The axes follow the front and the top rows, not the sample around them: a layout slower than
the front's leanest end or larger than its fastest one is beaten on both counts by a layout on
the front, so it is left off the chart (the subtitle counts it) rather than squeezing the front
into a corner. An axis whose front spans SPAN_FOR_LOG or more is logarithmic.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from .style import (FIT_COLORS, PREDICTED, bytes_unit, format_bytes, format_seconds,
                    log_scale_fits, seconds_unit)

# every point is predicted, so every mark is the predicted grey (parex.charts.style; black
# would mean measured): the rest light, the Pareto front the predicted grey, the top ringed
KINDS = {"layout": "#d0d0d0", "pareto": PREDICTED, "top": PREDICTED}
KIND_NAMES = {"layout": "a layout that fits", "pareto": "Pareto front (no layout both faster "
              "and leaner)", "top": "top rows, by rank"}
TOOLTIP = ["layout", "remat", "microbatch", alt.Tooltip("step_time:N", title="step time"),
           alt.Tooltip("memory:N", title="memory per device"),
           alt.Tooltip("mfu", format=".1%"), "bottleneck"]
MARGIN = 0.06  # room around the front and the top rows, as a share of their span per side
CAP_REACH = 0.5  # the cap joins the memory axis when it lies within this share of the span


def _domain(values, log: bool = False) -> list[float]:
    """[lo, hi] around `values` with MARGIN of their span each side (of their ratio on a log
    axis); never below zero on a linear one."""
    lo, hi = float(min(values)), float(max(values))
    if log:
        pad = (hi / lo) ** MARGIN
        return [lo / pad, hi * pad]
    pad = (hi - lo) * MARGIN or abs(hi) * MARGIN or 1.0
    return [max(lo - pad, 0.0), hi + pad]


def _anchors(df: pd.DataFrame) -> pd.DataFrame:
    """The rows the axes must show: the Pareto front and the top rows (all rows without)."""
    anchors = df[df["on_front"].astype(bool) | (df["kind"] == "top")]
    return df if anchors.empty else anchors


def _axes(anchors: pd.DataFrame, cap_v: float | None) -> tuple[dict, dict]:
    """Scale options of the memory and time axes (memory_v, time_v) around `anchors`, the
    memory axis stretched to the cap when the cap is near."""
    scales = []
    for column in ("memory_v", "time_v"):
        log = log_scale_fits(anchors[column])
        scales.append({"domain": _domain(anchors[column], log), "type": "log" if log else
                       "linear", "nice": False, "zero": False})
    memory = scales[0]["domain"]
    if cap_v is not None and memory[1] < cap_v <= memory[1] + CAP_REACH * (memory[1] - memory[0]):
        memory[1] = cap_v * (1 + MARGIN / 4)  # the rule just inside the frame
    return scales[0], scales[1]


def _axis_title(name: str, unit: str, scale: dict) -> str:
    return f"{name} ({unit}" + (", log scale)" if scale["type"] == "log" else ")")


def _subtitle(off: int, shown: int, cap_bytes: float | None, cap_drawn: bool) -> list[str]:
    """One line per note: the layouts left off, the cap when it lies beyond the axis."""
    lines = []
    if off:
        lines.append(f"{off:,} of {off + shown:,} layouts lie off the chart: slower or larger "
                     f"than the front's ends, so beaten by a layout on it")
    if cap_bytes is not None and not cap_drawn:
        lines.append(f"memory cap {format_bytes(cap_bytes)}, right of the chart")
    return lines


def pareto_chart(df: pd.DataFrame, cap_bytes: float | None = None,
                 title: str = "predicted step time against memory per device") -> alt.LayerChart:
    """Axes in the unit rule of parex.charts.style (memory_v, time_v: values in those units),
    their domains from the Pareto front and the top rows."""
    anchors = _anchors(df)
    memory_unit, memory_size = bytes_unit(float(anchors["memory_total_bytes"].max()))
    time_unit, time_size = seconds_unit(float(anchors["step_total_s"].max()))
    data = df.assign(memory_v=df["memory_total_bytes"] / memory_size,
                     time_v=df["step_total_s"] / time_size,
                     memory=df["memory_total_bytes"].map(format_bytes),
                     step_time=df["step_total_s"].map(format_seconds),
                     what=df["kind"].map(KIND_NAMES))
    cap_v = None if cap_bytes is None else cap_bytes / memory_size
    x_scale, y_scale = _axes(_anchors(data), cap_v)
    inside = (data["memory_v"].between(*x_scale["domain"])
              & data["time_v"].between(*y_scale["domain"]))
    cap_drawn = cap_v is not None and cap_v <= x_scale["domain"][1]
    heading = alt.TitleParams(title, anchor="start", subtitle=_subtitle(
        int((~inside).sum()), int(inside.sum()), cap_bytes, cap_drawn))
    x = alt.X("memory_v:Q", title=_axis_title("memory per device", memory_unit, x_scale),
              scale=alt.Scale(**x_scale))
    y = alt.Y("time_v:Q", title=_axis_title("predicted step time", time_unit, y_scale),
              scale=alt.Scale(**y_scale))
    layers = _marks(data[inside], x, y)
    if cap_drawn:
        cap = pd.DataFrame({"memory_v": [cap_v],
                            "label": [f"memory cap {format_bytes(cap_bytes)}"]})
        rule = alt.Chart(cap).mark_rule(strokeDash=[4, 4], color=FIT_COLORS["does not fit"])
        layers.append(rule.encode(x=x, tooltip=["label"]))
    return alt.layer(*layers).properties(title=heading, width=420, height=260)


def _marks(data: pd.DataFrame, x: alt.X, y: alt.Y) -> list:
    """The points, the front's step line, and the top rows ringed and numbered."""
    present = [KIND_NAMES[k] for k in KINDS if k in set(data["kind"])]
    color = alt.Color("what:N", title="predicted", sort=present, scale=alt.Scale(
        domain=present, range=[KINDS[k] for k in KINDS if k in set(data["kind"])]),
        legend=alt.Legend(orient="bottom", columns=1, labelLimit=320))
    base = alt.Chart(data).encode(x=x, y=y)
    points = base.mark_circle(size=30, opacity=0.7).encode(color=color, tooltip=TOOLTIP)
    front = base.transform_filter("datum.on_front").mark_line(
        color=KINDS["pareto"], strokeWidth=2, interpolate="step-after")
    top = data[data["kind"] == "top"]
    rings = alt.Chart(top).mark_point(size=140, strokeWidth=2, color=KINDS["top"]).encode(
        x=x, y=y, tooltip=TOOLTIP)
    labels = alt.Chart(top).mark_text(dx=10, align="left", color=KINDS["top"],
                                      fontWeight="bold").encode(x=x, y=y, text="rank:Q")
    return [front, points, rings, labels]


__all__ = ["pareto_chart"]
