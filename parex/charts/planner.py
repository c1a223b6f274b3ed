"""The planner's picture: predicted step time against memory per device for the layouts that
fit, the Pareto front (no layout is both faster and leaner) highlighted, the top rows labelled
by rank and the memory cap drawn as a rule. Reads `parex.plan.report.chart_frame`."""

from __future__ import annotations

import altair as alt
import pandas as pd

from .style import FIT_COLORS, PREDICTED, bytes_unit, format_bytes, format_seconds
from .style import seconds_unit

# every point is predicted, so every mark is the predicted grey (parex.charts.style; black
# would mean measured): the rest light, the Pareto front the predicted grey, the top ringed
KINDS = {"layout": "#d0d0d0", "pareto": PREDICTED, "top": PREDICTED}
KIND_NAMES = {"layout": "a layout that fits", "pareto": "Pareto front (no layout both faster "
              "and leaner)", "top": "top rows, by rank"}
TOOLTIP = ["layout", "remat", "microbatch", alt.Tooltip("step_time:N", title="step time"),
           alt.Tooltip("memory:N", title="memory per device"),
           alt.Tooltip("mfu", format=".1%"), "bottleneck"]


def pareto_chart(df: pd.DataFrame, cap_bytes: float | None = None,
                 title: str = "predicted step time against memory per device") -> alt.LayerChart:
    """Axes in the unit rule of parex.charts.style (memory_v, time_v: values in those units)."""
    memory_unit, memory_size = bytes_unit(float(df["memory_total_bytes"].max()))
    time_unit, time_size = seconds_unit(float(df["step_total_s"].max()))
    data = df.assign(memory_v=df["memory_total_bytes"] / memory_size,
                     time_v=df["step_total_s"] / time_size,
                     memory=df["memory_total_bytes"].map(format_bytes),
                     step_time=df["step_total_s"].map(format_seconds))
    x = alt.X("memory_v:Q", title=f"memory per device ({memory_unit})",
              scale=alt.Scale(zero=False))
    y = alt.Y("time_v:Q", title=f"predicted step time ({time_unit})", scale=alt.Scale(zero=False))
    data["what"] = data["kind"].map(KIND_NAMES)
    present = [KIND_NAMES[k] for k in KINDS if k in set(data["kind"])]
    color = alt.Color("what:N", title="predicted", sort=present, scale=alt.Scale(
        domain=present, range=[KINDS[k] for k in KINDS if k in set(data["kind"])]),
        legend=alt.Legend(orient="bottom", columns=1))
    base = alt.Chart(data).encode(x=x, y=y)
    points = base.mark_circle(size=30, opacity=0.7).encode(color=color, tooltip=TOOLTIP)
    front = base.transform_filter("datum.on_front").mark_line(
        color=KINDS["pareto"], strokeWidth=2, interpolate="step-after")
    top = data[data["kind"] == "top"]
    rings = alt.Chart(top).mark_point(size=140, strokeWidth=2, color=KINDS["top"]).encode(
        x=x, y=y, tooltip=TOOLTIP)
    labels = alt.Chart(top).mark_text(dx=10, align="left", color=KINDS["top"],
                                      fontWeight="bold").encode(x=x, y=y, text="rank:Q")
    layers = [front, points, rings, labels]
    if cap_bytes is not None:
        cap = pd.DataFrame({"memory_v": [cap_bytes / memory_size],
                            "label": [f"memory cap {format_bytes(cap_bytes)}"]})
        rule = alt.Chart(cap).mark_rule(strokeDash=[4, 4],
                                        color=FIT_COLORS["does not fit"]).encode(
            x="memory_v:Q", tooltip=["label"])
        layers.append(rule)
    return alt.layer(*layers).properties(title=title, width=420, height=260)


__all__ = ["pareto_chart"]
