"""Predicted scaling efficiency against device count (parex.predict.scaling), and where the
step's time goes at each count (parex.predict.explain's parts).

    efficiency_chart(rows)     efficiency against devices, one line per mode (weak, strong),
                               beside the share of the step each effect takes
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from .style import TIME_COLORS, format_seconds

# explain's parts, in the order they stack, and their colours: compute purple (ideal darker),
# communication pink, waiting (stragglers, the bubble) greys
PARTS = {"ideal compute": "#3f007d", "kernel efficiency": "#807dba", "kernel shapes": "#bcbddc",
         "communication": TIME_COLORS["exposed communication"], "stragglers": "#969696",
         "bubble": TIME_COLORS["bubble"]}


def efficiency_lines(frame: pd.DataFrame, width: int = 320, height: int = 220) -> alt.Chart:
    """Efficiency against devices (log2 axis), one line per mode."""
    data = frame.assign(step=frame["step_s"].map(format_seconds))
    return alt.Chart(data).mark_line(point=True).encode(
        x=alt.X("devices:Q", scale=alt.Scale(type="log", base=2), title="devices"),
        y=alt.Y("efficiency:Q", title="predicted scaling efficiency",
                axis=alt.Axis(format="%"), scale=alt.Scale(zero=False)),
        color=alt.Color("mode:N", title="scaling"),
        tooltip=["mode", "devices", "layout", alt.Tooltip("efficiency:Q", format=".1%"),
                 alt.Tooltip("step:N", title="step")],
    ).properties(width=width, height=height)


def parts_bars(frame: pd.DataFrame, mode: str = "weak", width: int = 320,
               height: int = 220) -> alt.Chart:
    """Each effect's share of the step at each device count (one mode)."""
    data = frame[frame["mode"] == mode]
    long = data.melt(id_vars=["devices"], value_vars=[f"{p}_s" for p in PARTS],
                     var_name="part", value_name="seconds")
    long["part"] = long["part"].str.removesuffix("_s")
    long["time"] = long["seconds"].map(format_seconds)
    return alt.Chart(long).mark_bar().encode(
        x=alt.X("devices:O", title="devices"),
        y=alt.Y("seconds:Q", stack="normalize", title=f"share of the step ({mode} scaling)",
                axis=alt.Axis(format="%")),
        color=alt.Color("part:N", title="effect", sort=list(PARTS),
                        scale=alt.Scale(domain=list(PARTS), range=list(PARTS.values()))),
        order=alt.Order("part_order:Q"),
        tooltip=["devices", "part", alt.Tooltip("time:N", title="seconds")],
    ).transform_calculate(part_order=_order_expression()).properties(width=width,
                                                                      height=height)


def _order_expression() -> str:
    """Vega expression: a part's stacking position."""
    cases = " : ".join(f"datum.part == '{p}' ? {i}" for i, p in enumerate(PARTS))
    return f"{cases} : {len(PARTS)}"


def efficiency_chart(rows, title: str = "Predicted scaling") -> alt.HConcatChart:
    """Efficiency lines beside the weak-scaling step's parts (rows: scaling_curve's)."""
    frame = pd.DataFrame(rows)
    mode = "weak" if (frame["mode"] == "weak").any() else frame["mode"].iloc[0]
    return alt.hconcat(efficiency_lines(frame), parts_bars(frame, mode)).properties(
        title=title)


__all__ = ["PARTS", "efficiency_chart", "efficiency_lines", "parts_bars"]
