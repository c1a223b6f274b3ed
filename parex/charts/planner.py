"""The planner's picture: predicted step time against memory per device for the layouts that
fit, the Pareto front (no layout is both faster and leaner) highlighted, the top rows labelled
by rank and the memory cap drawn as a rule. Reads `parex.plan.report.chart_frame`."""

from __future__ import annotations

import altair as alt
import pandas as pd

from .style import FIT_COLORS, MEASURED, NEUTRAL, bytes_unit, format_bytes, format_seconds
from .style import seconds_unit

# neutral marks (parex.charts.style): the ranked top rows black, the front dark, the rest light
KINDS = {"layout": "#c7c7c7", "pareto": NEUTRAL, "top": MEASURED}
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
    color = alt.Color("kind:N", title="", sort=list(KINDS),
                      scale=alt.Scale(domain=list(KINDS), range=list(KINDS.values())))
    base = alt.Chart(data).encode(x=x, y=y)
    points = base.mark_circle(size=30, opacity=0.6).encode(color=color, tooltip=TOOLTIP)
    front = base.transform_filter("datum.on_front").mark_line(color=KINDS["pareto"],
                                                              interpolate="step-after")
    top = data[data["kind"] == "top"]
    labels = alt.Chart(top).mark_text(dx=8, align="left", color=KINDS["top"]).encode(
        x=x, y=y, text="rank:Q")
    layers = [front, points, labels]
    if cap_bytes is not None:
        cap = pd.DataFrame({"memory_v": [cap_bytes / memory_size],
                            "label": [f"memory cap {format_bytes(cap_bytes)}"]})
        rule = alt.Chart(cap).mark_rule(strokeDash=[4, 4],
                                        color=FIT_COLORS["does not fit"]).encode(
            x="memory_v:Q", tooltip=["label"])
        layers.append(rule)
    return alt.layer(*layers).properties(title=title, width=420, height=260)


__all__ = ["pareto_chart"]
