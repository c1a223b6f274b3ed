"""Charts of pipeline schedules: a Gantt chart of one schedule table, and the bubble study.

    gantt_chart(make_schedule("1f1b", 4, 8))                      # ticks on x
    gantt_chart(schedule, costs={"t_f": 1.0, "t_b": 2.0})         # predicted seconds on x
    gantt_stack([gpipe, one_f_one_b, zbh1])                       # several, each its own legend
    bubble_chart(parex.studies.pipeline.bubble_study(...))        # measured vs (p−1)/(m+p−1)

Each stage's row is shaded grey from the first tick to the last, under its ops: whatever grey
shows is the bubble, drawn from the same table the executor runs. Ops keep one colour each
(style.OP_COLORS: forward, backward or input gradient, weight gradient) in every chart.
All are plain altair charts: `chart.save("x.png")` or `chart.save("x.svg")` exports them offline.
"""

from __future__ import annotations

import textwrap

import altair as alt
import pandas as pd

from ..parallel.schedules import Schedule
from .style import (MEASURED, OP_COLORS, PREDICTED, color, format_seconds, seconds_unit,
                    source_color)

LABEL_PX = 7  # pixels per character of a bar label at font size 9
LOCAL_OP = "forward + local backward"  # schedule=local's L op (parex.parallel.local)
COLORS = OP_COLORS | {LOCAL_OP: OP_COLORS["backward"]}


def schedule_frame(schedule: Schedule, costs: dict | None = None) -> pd.DataFrame:
    """One row per op with `start` and `end`: ticks when `costs` is None, else the predicted
    seconds of `Schedule.timeline(**costs)` (keys t_f, t_b, t_w, t_p2p)."""
    if costs is None:
        rows = [row | {"start": row["tick"], "end": row["tick"] + 1} for row in schedule.table()]
    else:
        rows = schedule.timeline(**costs)
    frame = pd.DataFrame(rows)
    backward = "B (input grad)" if schedule.split_backward else "B"
    frame["kind"] = frame["op"].map({"F": "F", "B": backward, "W": "W", "L": "L"})
    names = {"F": "forward", "B": "input gradient" if schedule.split_backward else "backward",
             "W": "weight gradient", "L": LOCAL_OP}
    frame["op_name"] = frame["op"].map(names)
    frame["label"] = frame["microbatch"].astype(str)  # the chunk shows as the bar's shade
    frame["virtual_stage"] = frame["chunk"] * schedule.p + frame["stage"]
    return frame


def idle_fraction(frame: pd.DataFrame, p: int) -> float:
    """Idle time over p stages × the makespan: the bubble's share of the pipeline."""
    span = float(frame["end"].max())
    busy = float((frame["end"] - frame["start"]).sum())
    return 1.0 - busy / (p * span) if span else 0.0


def _scaled(frame: pd.DataFrame, costs: dict | None) -> tuple[pd.DataFrame, str]:
    """The frame with `x0`, `x1` on the axis' unit, and that axis' title."""
    if costs is None:
        return frame.assign(x0=frame["start"], x1=frame["end"]), "tick"
    name, size = seconds_unit(float(frame["end"].max()))
    out = frame.assign(x0=frame["start"] / size, x1=frame["end"] / size)
    out["duration"] = [format_seconds(e - s) for s, e in zip(frame["start"], frame["end"])]
    return out, f"predicted time ({name})"


def gantt_chart(schedule: Schedule, costs: dict | None = None, width: int = 640,
                height_per_stage: int = 28, title: str | None = None,
                subtitle: str | list[str] | None = None) -> alt.LayerChart:
    """Stage on y, ticks (or predicted time with `costs`) on x, one colour per op, each bar
    labelled with its microbatch where the label fits (with v > 1 chunks, later chunks are
    lighter, as in Narayanan et al. 2021's figure); every stage's row shaded grey underneath,
    so the bubble shows as grey."""
    frame, unit = _scaled(schedule_frame(schedule, costs), costs)
    span = float(frame["x1"].max())
    px = width * (frame["x1"] - frame["x0"]) / span
    frame["text"] = [t if w >= LABEL_PX * len(t) + 2 else ""
                     for t, w in zip(frame["label"], px)]
    y = alt.Y("stage:O", title="pipeline stage", sort="ascending")
    x = alt.X("x0:Q", title=unit, scale=alt.Scale(domain=[0, span], nice=False))
    # every stage's row from 0 to the makespan: what stays grey is idle, the bubble
    lane = alt.Chart(frame).transform_aggregate(ops="count()", groupby=["stage"])
    lane = lane.transform_calculate(first="0", last=str(span)).mark_bar(
        color=OP_COLORS["idle (bubble)"]).encode(
        y=y, x=alt.X("first:Q", scale=alt.Scale(domain=[0, span], nice=False), title=unit),
        x2="last:Q", tooltip=[alt.Tooltip("stage:O"), alt.Tooltip("ops:Q", title="ops")])
    tooltip = ["op_name:N", "stage:O", "microbatch:Q", "chunk:Q", "tick:Q"]
    if "duration" in frame:
        tooltip.append(alt.Tooltip("duration:N", title="predicted duration"))
    bars = alt.Chart(frame).mark_bar(stroke="white", strokeWidth=0.5).encode(
        y=y, x=x, x2="x1:Q", tooltip=tooltip,
        color=color("op_name", COLORS, frame["op_name"], title="op"))
    if schedule.v > 1:
        bars = bars.encode(opacity=alt.Opacity("chunk:O", title="chunk",
                                               scale=alt.Scale(range=[1.0, 0.6])))
    frame["ink"] = ["#222222" if op == "F" else "#ffffff" for op in frame["op"]]
    text = alt.Chart(frame).transform_calculate(middle="(datum.x0 + datum.x1) / 2").mark_text(
        fontSize=9).encode(x="middle:Q", y=y, text="text:N",
                           color=alt.Color("ink:N", scale=None))
    if isinstance(subtitle, str):
        subtitle = textwrap.wrap(subtitle, 110)
    heading = alt.TitleParams(title or _title(schedule, costs, frame), subtitle=subtitle or "",
                              anchor="start")
    return (lane + bars + text).properties(
        width=width, height=height_per_stage * schedule.p, title=heading)


def _title(schedule: Schedule, costs: dict | None, frame: pd.DataFrame) -> str:
    s = schedule
    shape = f"{s.name} · p={s.p} m={s.m}" + (f" v={s.v}" if s.v > 1 else "")
    idle = idle_fraction(frame, s.p)
    if costs is None:
        return f"{shape} · {s.n_ticks} ticks, idle {idle:.0%}"
    return f"{shape} · makespan {format_seconds(s.makespan(**costs))}, idle {idle:.0%}"


def gantt_stack(schedules, costs: dict | None = None, width: int = 560) -> alt.VConcatChart:
    """Several schedules' Gantt charts stacked, each with its own colour and chunk legends (a
    shared scale would merge their op names and shift the colours)."""
    charts = [gantt_chart(s, costs, width=width) for s in schedules]
    return alt.vconcat(*charts).resolve_scale(color="independent", opacity="independent")


def bubble_chart(df: pd.DataFrame, width: int = 360, height: int = 240) -> alt.HConcatChart:
    """Left: measured step time over m. Right: the measured bubble (solid) beside each
    schedule's table (`bubble_table`, dashed) or, without it, (p−1)/(m+p−1). `df` is a frame of
    parex.studies.pipeline.bubble_study."""
    needed = {"m", "step_time_s", "bubble_measured", "bubble_predicted"}
    missing = needed - set(df.columns)
    if missing:
        raise ValueError(f"bubble_chart needs columns {', '.join(sorted(missing))}; pass the "
                         f"frame of parex.studies.pipeline.bubble_study")
    frame = df.assign(schedule=df.get("schedule", "pipeline"))
    name, size = seconds_unit(float(frame["step_time_s"].max()))
    frame["step_time"] = frame["step_time_s"] / size
    frame["step time"] = frame["step_time_s"].map(format_seconds)
    x = alt.X("m:Q", title="microbatches m", scale=alt.Scale(type="log", base=2),
              axis=alt.Axis(values=sorted(set(frame["m"]))))
    # one grey line, or one colour per schedule when several are compared
    series = (alt.Color("schedule:N", title="schedule") if frame["schedule"].nunique() > 1
              else alt.Detail("schedule:N"))
    times = alt.Chart(frame).mark_line(point=True, color=MEASURED).encode(
        x=x, y=alt.Y("step_time:Q", title=f"measured step time ({name})"),
        tooltip=["schedule", "m", "step time"],
    ).encode(series).properties(width=width, height=height)
    # the reference: each schedule's own table where the study timed it, else (p−1)/(m+p−1)
    reference = "bubble_table" if "bubble_table" in frame else "bubble_predicted"
    names = {"bubble_measured": "measured", "bubble_table": "schedule table",
             "bubble_predicted": "(p−1)/(m+p−1)"}
    long = frame.melt(id_vars=["schedule", "m"], value_vars=["bubble_measured", reference],
                      var_name="source", value_name="bubble")
    long["source"] = long["source"].map(names)
    if frame["schedule"].nunique() == 1:  # one schedule: measured black, the reference grey
        long["side"] = long["source"].where(long["source"] == "measured", "predicted")
        series = source_color(long["side"], field="side", title="side")
    bubble = alt.Chart(long).mark_line(point=True, color=PREDICTED).encode(series).encode(
        x=x, y=alt.Y("bubble:Q", title="bubble, share of the step", axis=alt.Axis(format="%")),
        strokeDash=alt.StrokeDash("source:N", title="bubble",
                                  sort=["measured", names[reference]],
                                  legend=alt.Legend(symbolType="stroke")),
        tooltip=["schedule", "m", "source", alt.Tooltip("bubble:Q", format=".1%")],
    ).properties(width=width, height=height)
    p = frame["p"].iloc[0] if "p" in frame else "?"
    return alt.hconcat(times, bubble).properties(title=f"pipeline bubble at p={p}")


def dual_gantt_chart(table, width: int = 640, height_per_stage: int = 28) -> alt.LayerChart:
    """Gantt chart of a timed DualPipe or DualPipeV table (parallel.dualpipe.DualTable, not a
    Schedule: it is timed, not executed): device on y, time on x, one bar per op labelled with
    its microbatch, the ops of an overlapped F&B unit outlined in black, chunk 1 lighter
    (DualPipe: the direction that enters at device p−1); grey shows the bubble."""
    from ..parallel.dualpipe import gantt_rows

    frame = pd.DataFrame(gantt_rows(table))
    names = {"F": "forward", "W": "weight gradient"}
    frame["op_name"] = [names.get(op) or ("backward" if full else "input gradient")
                        for op, full in zip(frame["op"], frame["full"])]
    span = table.makespan()
    px = width * (frame["end"] - frame["start"]) / span
    frame["text"] = [str(j) if w >= LABEL_PX * len(str(j)) + 2 else ""
                     for j, w in zip(frame["microbatch"], px)]
    x = alt.X("start:Q", title="time (units of F)", scale=alt.Scale(domain=[0, span], nice=False))
    y = alt.Y("stage:O", title="device", sort="ascending")
    lanes = pd.DataFrame({"stage": range(table.p), "start": 0.0, "end": span})
    lane = alt.Chart(lanes).mark_bar(color=OP_COLORS["idle (bubble)"]).encode(y=y, x=x, x2="end:Q")
    bars = alt.Chart(frame).mark_bar(strokeWidth=1).encode(
        y=y, x=x, x2="end:Q", color=color("op_name", COLORS, frame["op_name"], title="op"),
        opacity=alt.Opacity("chunk:O", title="chunk", scale=alt.Scale(range=[1.0, 0.6])),
        stroke=alt.condition("datum.overlapped", alt.value("black"), alt.value("white")),
        tooltip=["op_name:N", "stage:O", "microbatch:Q", "chunk:Q", "start:Q", "end:Q",
                 "overlapped:N"])
    frame["ink"] = ["#222222" if op == "F" else "#ffffff" for op in frame["op"]]
    text = alt.Chart(frame).transform_calculate(middle="(datum.start + datum.end) / 2").mark_text(
        fontSize=9).encode(x="middle:Q", y=y, text="text:N", color=alt.Color("ink:N", scale=None))
    title = (f"{table.name} · p={table.p} m={table.m} · makespan {span:g}, "
             f"bubble {table.bubble():g}")
    return (lane + bars + text).properties(width=width, height=height_per_stage * table.p,
                                           title=alt.TitleParams(title, anchor="start"))


__all__ = ["bubble_chart", "dual_gantt_chart", "gantt_chart", "gantt_stack", "idle_fraction",
           "schedule_frame"]
