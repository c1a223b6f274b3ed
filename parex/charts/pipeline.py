"""Charts of pipeline schedules: a Gantt chart of one schedule table, and the bubble study.

    gantt_chart(make_schedule("1f1b", 4, 8))                      # ticks on x
    gantt_chart(schedule, costs={"t_f": 1.0, "t_b": 2.0})         # predicted seconds on x
    bubble_chart(parex.studies_pipeline.bubble_study(...))        # measured vs (p−1)/(m+p−1)

Both are plain altair charts: `chart.save("x.png")` or `chart.save("x.svg")` exports them offline.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from ..parallel.schedules import Schedule

OP_COLORS = {"F": "#4c78a8", "B": "#f58518", "W": "#54a24b"}
OP_NAMES = {"F": "forward", "B": "backward", "W": "weight gradient"}


def schedule_frame(schedule: Schedule, costs: dict | None = None) -> pd.DataFrame:
    """One row per op with `start` and `end`: ticks when `costs` is None, else the predicted
    seconds of `Schedule.timeline(**costs)` (keys t_f, t_b, t_w, t_p2p)."""
    if costs is None:
        rows = [row | {"start": row["tick"], "end": row["tick"] + 1} for row in schedule.table()]
    else:
        rows = schedule.timeline(**costs)
    frame = pd.DataFrame(rows)
    backward = "B (input grad)" if schedule.split_backward else "B"
    frame["kind"] = frame["op"].map({"F": "F", "B": backward, "W": "W"})
    label = frame["microbatch"].astype(str)
    if schedule.v > 1:  # microbatch.chunk, so the loops of interleaved schedules show
        label = label + "." + frame["chunk"].astype(str)
    frame["label"] = label
    frame["virtual_stage"] = frame["chunk"] * schedule.p + frame["stage"]
    return frame


def gantt_chart(schedule: Schedule, costs: dict | None = None, width: int = 640,
                height_per_stage: int = 28) -> alt.LayerChart:
    """Stage on y, ticks (or predicted seconds with `costs`) on x, colour by op, each bar
    labelled with its microbatch (microbatch.chunk when v > 1)."""
    frame = schedule_frame(schedule, costs)
    kinds = list(dict.fromkeys(frame.sort_values("op", key=lambda s: s.map("FBW".index))["kind"]))
    colors = [OP_COLORS[k[0]] for k in kinds]
    unit = "tick" if costs is None else "predicted seconds"
    base = alt.Chart(frame).encode(
        y=alt.Y("stage:O", title="pipeline stage", sort="ascending"),
        x=alt.X("start:Q", title=unit,
                scale=alt.Scale(domain=[0, float(frame["end"].max())], nice=False)),
        tooltip=["stage", "op", "microbatch", "chunk", "tick",
                 alt.Tooltip("start:Q", format=".3g"), alt.Tooltip("end:Q", format=".3g")])
    bars = base.mark_bar(stroke="white", strokeWidth=0.5).encode(
        x2="end:Q", color=alt.Color("kind:N", title="op", sort=kinds,
                                    scale=alt.Scale(domain=kinds, range=colors)))
    text = base.transform_calculate(middle="(datum.start + datum.end) / 2").mark_text(
        color="white", fontSize=9).encode(x="middle:Q", text="label:N")
    return (bars + text).properties(
        width=width, height=height_per_stage * schedule.p, title=_title(schedule, costs))


def _title(schedule: Schedule, costs: dict | None) -> str:
    s = schedule
    shape = f"{s.name} · p={s.p} m={s.m}" + (f" v={s.v}" if s.v > 1 else "")
    if costs is None:
        return f"{shape} · {s.n_ticks} ticks, idle {s.idle_fraction():.0%}"
    return f"{shape} · makespan {s.makespan(**costs):.3g} s"


def bubble_chart(df: pd.DataFrame, width: int = 360, height: int = 240) -> alt.HConcatChart:
    """Left: measured step time over m. Right: the bubble inferred from those times beside
    (p−1)/(m+p−1). `df` is a frame of parex.studies_pipeline.bubble_study."""
    needed = {"m", "step_time_s", "bubble_measured", "bubble_predicted"}
    missing = needed - set(df.columns)
    if missing:
        raise ValueError(f"bubble_chart needs columns {', '.join(sorted(missing))}; pass the "
                         f"frame of parex.studies_pipeline.bubble_study")
    frame = df.assign(schedule=df.get("schedule", "pipeline"))
    x = alt.X("m:Q", title="microbatches m", scale=alt.Scale(type="log", base=2),
              axis=alt.Axis(values=sorted(set(frame["m"]))))
    times = alt.Chart(frame).mark_line(point=True).encode(
        x=x, y=alt.Y("step_time_s:Q", title="measured step time (s)"),
        color=alt.Color("schedule:N"), tooltip=["schedule", "m", "step_time_s"],
    ).properties(width=width, height=height)
    long = frame.melt(id_vars=["schedule", "m"], value_vars=["bubble_measured", "bubble_predicted"],
                      var_name="source", value_name="bubble")
    long["source"] = long["source"].map({"bubble_measured": "measured",
                                         "bubble_predicted": "(p−1)/(m+p−1)"})
    bubble = alt.Chart(long).mark_line(point=True).encode(
        x=x, y=alt.Y("bubble:Q", title="bubble fraction of the step", axis=alt.Axis(format="%")),
        color=alt.Color("schedule:N"),
        strokeDash=alt.StrokeDash("source:N", title="bubble",
                                  legend=alt.Legend(symbolType="stroke")),
        tooltip=["schedule", "m", "source", alt.Tooltip("bubble:Q", format=".1%")],
    ).properties(width=width, height=height)
    p = frame["p"].iloc[0] if "p" in frame else "?"
    return alt.hconcat(times, bubble).properties(title=f"pipeline bubble at p={p}")
