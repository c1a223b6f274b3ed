"""Charts of the long-sequence study (parex.studies.sequence): per-device activation memory and
collective bytes against sequence length, one line per way of splitting the sequence.

Both axes are logarithmic, so a memory that grows as T² (scores of unsplit attention) has twice
the slope of one that grows as T, and a split over n devices is a constant downward shift of
log n. Export with `parex.charts.records.save(chart, "x.png" or "x.svg")`.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from .style import bytes_unit, format_bytes

MODE_ORDER = ["single", "tp", "tp+sp", "ring", "ulysses"]
PANELS = {  # column -> y-axis title (its unit, from the largest value, is appended)
    "memory_temp_bytes": "activation (temp) memory per device",
    "memory_total_bytes": "total memory per device",
    "comm_total_bytes": "collective bytes per device per step",
    "comm_wire_bytes": "bytes sent per device per step (ring algorithms)",
}


def sequence_long(df: pd.DataFrame, columns=tuple(PANELS)) -> pd.DataFrame:
    """(seq_len, mode, layout, metric, bytes): the study frame in the long form a chart draws."""
    out = df.melt(id_vars=["seq_len", "mode", "layout"], value_vars=list(columns),
                  var_name="metric", value_name="bytes")
    return out[out["bytes"] > 0]  # a log axis cannot draw 0 (e.g. no collectives on one device)


def _panel(data: pd.DataFrame, column: str, width: int, height: int) -> alt.Chart:
    modes = [m for m in MODE_ORDER if m in set(data["mode"])]
    panel = data[data["metric"] == column].copy()
    unit, size = bytes_unit(float(panel["bytes"].max()) if len(panel) else 0.0)
    panel["value"], panel["amount"] = panel["bytes"] / size, panel["bytes"].map(format_bytes)
    return alt.Chart(panel).mark_line(point=True).encode(
        x=alt.X("seq_len:Q", title="sequence length T", scale=alt.Scale(type="log", base=2),
                axis=alt.Axis(values=sorted(set(data["seq_len"])))),
        y=alt.Y("value:Q", title=f"{PANELS[column]} ({unit})", scale=alt.Scale(type="log")),
        color=alt.Color("mode:N", sort=modes, title="split"),
        tooltip=["mode", "layout", "seq_len", alt.Tooltip("amount:N", title="bytes")],
    ).properties(width=width, height=height)


def long_sequence_chart(df: pd.DataFrame, columns=("memory_temp_bytes", "comm_wire_bytes"),
                        width: int = 260, height: int = 200) -> alt.HConcatChart:
    """Side-by-side panels (default: activation memory, collective bytes) against T."""
    unknown = [c for c in columns if c not in PANELS]
    if unknown:
        raise ValueError(f"cannot chart {', '.join(unknown)}; choose from {', '.join(PANELS)}")
    data = sequence_long(df, columns)
    panels = [_panel(data, c, width, height) for c in columns]
    return alt.hconcat(*panels).properties(
        title=f"long sequences · {df['model'].iloc[0]} · per device, from the compiled step")
