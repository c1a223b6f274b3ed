"""The planner's picture: predicted step time against memory per device for the layouts that
fit, the Pareto front (no layout is both faster and leaner) highlighted, the top rows labelled
by rank and the memory cap drawn as a rule. Reads `parex.plan.report.chart_frame`."""

from __future__ import annotations

import altair as alt
import pandas as pd

KINDS = {"layout": "#bab0ac", "pareto": "#4c78a8", "top": "#f58518"}
TOOLTIP = ["layout", "remat", "microbatch", alt.Tooltip("step_total_s", format=".4g"),
           alt.Tooltip("memory_gb", format=".4g"), alt.Tooltip("mfu", format=".1%"),
           "bottleneck"]


def pareto_chart(df: pd.DataFrame, cap_bytes: float | None = None,
                 title: str = "predicted step time against memory per device") -> alt.LayerChart:
    data = df.assign(memory_gb=df["memory_total_bytes"] / 1e9)
    x = alt.X("memory_gb:Q", title="memory per device (GB)", scale=alt.Scale(zero=False))
    y = alt.Y("step_total_s:Q", title="predicted step time (s)", scale=alt.Scale(zero=False))
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
        cap = pd.DataFrame({"memory_gb": [cap_bytes / 1e9], "label": ["memory cap"]})
        rule = alt.Chart(cap).mark_rule(strokeDash=[4, 4], color="#e45756").encode(
            x="memory_gb:Q", tooltip=["label"])
        layers.append(rule)
    return alt.layer(*layers).properties(title=title, width=420, height=260)


__all__ = ["pareto_chart"]
