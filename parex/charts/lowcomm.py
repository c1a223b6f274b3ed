"""Charts of low-communication training: the loss study (parex.studies_lowcomm) and the
predicted wall clock over a WAN (parex.predict.lowcomm).

    loss_chart(frame)       training loss against tokens, eval loss against bytes sent
    wan_chart(rows)         predicted step time against H, one line per method
"""

from __future__ import annotations

import altair as alt
import pandas as pd


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
    return alt.Chart(data).mark_line(point=True).encode(
        x=alt.X("cross_replica_bytes:Q", title="bytes sent to other replicas, per replica",
                scale=alt.Scale(type="log"), axis=alt.Axis(format="~s")),
        y=alt.Y("eval_loss:Q", title="eval loss", scale=alt.Scale(zero=False)),
        color=alt.Color("run:N", sort=_runs(frame), title="run"),
        tooltip=["run", "step", alt.Tooltip("eval_loss:Q", format=".3f"),
                 alt.Tooltip("cross_replica_bytes:Q", format=".3s")],
    ).properties(width=width, height=height)


def loss_chart(frame: pd.DataFrame, title: str = "DiLoCo against sync DP") -> alt.HConcatChart:
    return alt.hconcat(loss_curves(frame), loss_vs_bytes(frame)).properties(title=title)


def wan_chart(rows: pd.DataFrame, width: int = 360, height: int = 240) -> alt.LayerChart:
    """Predicted step time against H (columns method, inner_steps, step_time_s, compute_s;
    optional model for one panel per model), log-log, with the compute-only floor dashed."""
    lines = alt.Chart().mark_line(point=True).encode(
        x=alt.X("inner_steps:Q", title="inner steps H between syncs",
                scale=alt.Scale(type="log")),
        y=alt.Y("step_time_s:Q", title="predicted seconds per step", scale=alt.Scale(type="log")),
        color=alt.Color("method:N", title="method"),
        tooltip=["method", "inner_steps", alt.Tooltip("step_time_s:Q", format=".3g"),
                 alt.Tooltip("exposed_wan_s:Q", format=".3g")])
    floor = alt.Chart().mark_line(strokeDash=[4, 4], color="gray").encode(
        x="inner_steps:Q", y="compute_s:Q")
    chart = alt.layer(lines, floor, data=rows).properties(width=width, height=height)
    if "model" in rows:
        chart = chart.facet(column=alt.Column("model:N", title=None, sort=list(
            dict.fromkeys(rows["model"]))))
    return chart
