"""Charts of low-communication training: the loss study (parex.lowcomm.studies) and the
predicted wall clock over a WAN (parex.lowcomm.predict).

    loss_chart(frame)       training loss against tokens, eval loss against bytes sent
    wan_chart(rows)         predicted step time against H, one line per method
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from .style import bytes_unit, format_bytes, format_seconds, seconds_unit


def _runs(frame: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(frame["run"]))


def loss_curves(frame: pd.DataFrame, width: int = 320, height: int = 220) -> alt.Chart:
    """Training loss (a 10-step rolling mean) against tokens, one line per run."""
    data = frame.copy()
    data["smoothed"] = data.groupby("run")["loss"].transform(
        lambda s: s.rolling(10, min_periods=1).mean())
    return alt.Chart(data).mark_line().encode(
        x=alt.X("tokens:Q", title="tokens seen (all replicas)", axis=alt.Axis(format="~s")),
        y=alt.Y("smoothed:Q", title="training loss (10-step mean)", scale=alt.Scale(zero=False)),
        color=alt.Color("run:N", sort=_runs(frame), title="run"),
        tooltip=["run", "layout", "step", alt.Tooltip("smoothed:Q", format=".3f")],
    ).properties(width=width, height=height)


def loss_vs_bytes(frame: pd.DataFrame, width: int = 320, height: int = 220) -> alt.Chart:
    """Eval loss against the bytes each replica has sent to the others (log axis; the single
    replica, which sends nothing, is left out)."""
    data = frame.dropna(subset=["eval_loss"])
    data = data[data["cross_replica_bytes"] > 0]
    unit, size = bytes_unit(float(data["cross_replica_bytes"].max()) if len(data) else 0.0)
    data = data.assign(sent=data["cross_replica_bytes"] / size,
                       sent_text=data["cross_replica_bytes"].map(format_bytes))
    return alt.Chart(data).mark_line(point=True).encode(
        x=alt.X("sent:Q", title=f"bytes sent to other replicas, per replica ({unit})",
                scale=alt.Scale(type="log")),
        y=alt.Y("eval_loss:Q", title="eval loss", scale=alt.Scale(zero=False)),
        color=alt.Color("run:N", sort=_runs(frame), title="run"),
        tooltip=["run", "step", alt.Tooltip("eval_loss:Q", format=".3f"),
                 alt.Tooltip("sent_text:N", title="bytes sent")],
    ).properties(width=width, height=height)


def loss_chart(frame: pd.DataFrame, title: str = "DiLoCo against sync DP") -> alt.HConcatChart:
    return alt.hconcat(loss_curves(frame), loss_vs_bytes(frame)).properties(title=title)


def wan_chart(rows: pd.DataFrame, width: int = 360, height: int = 240) -> alt.LayerChart:
    """Predicted step time against H (columns method, inner_steps, step_time_s, compute_s;
    optional model for one panel per model), log-log, with the compute-only floor dashed."""
    unit, size = seconds_unit(float(rows["step_time_s"].max()))
    rows = rows.assign(step=rows["step_time_s"] / size, floor=rows["compute_s"] / size,
                       step_text=rows["step_time_s"].map(format_seconds),
                       wan_text=rows.get("exposed_wan_s", rows["step_time_s"] * 0).map(
                           format_seconds))
    lines = alt.Chart().mark_line(point=True).encode(
        x=alt.X("inner_steps:Q", title="inner steps H between syncs",
                scale=alt.Scale(type="log")),
        y=alt.Y("step:Q", title=f"predicted time per step ({unit})", scale=alt.Scale(type="log")),
        color=alt.Color("method:N", title="method"),
        tooltip=["method", "inner_steps", alt.Tooltip("step_text:N", title="step time"),
                 alt.Tooltip("wan_text:N", title="exposed WAN time")])
    floor = alt.Chart().mark_line(strokeDash=[4, 4], color="gray").encode(
        x="inner_steps:Q", y="floor:Q")
    chart = alt.layer(lines, floor, data=rows).properties(width=width, height=height)
    if "model" in rows:
        chart = chart.facet(column=alt.Column("model:N", title=None, sort=list(
            dict.fromkeys(rows["model"]))))
    return chart
