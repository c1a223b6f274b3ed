"""Pipeline schedules beside their papers: the bubble against m (GPipe, 1F1B), zero-bubble
against 1F1B, and the interleaved schedule's bubble against v.

    pipeline-bubble      measured at p = 2 (one emulated device per core, parex.studies.pipeline:
                         1 − t(one stage alone) / t(pipeline)), with the schedule table's bubble
                         (T_F = T_B = T_W) and the lockstep executor's, against (p−1)/(m+p−1)
    zero-bubble          ZB-H1 and ZB-V against 1F1B at p = 2: bubble time and step time,
                         measured and from the table, against Qi et al.'s formulas
    interleaved-bubble   the table's bubble of interleaved 1F1B against (p−1)/(v·m), v = 1, 2, 4

The published formulas are data/reference/pipeline_schedules.csv (each with its source).
"""

from __future__ import annotations

import os

import pandas as pd

from ..parallel.schedules import LOOPING, VEE, make_schedule
from ..predict.references import read_reference
from .core import Figure, Row, Tolerance, figure
from .tables import evaluate_formula

P = 2  # stages of the measured figures: one emulated device per core of a 2-core machine
EXACT = Tolerance(0.999, 1.001, "the schedule table, exact")
MEASURED = Tolerance(2 / 3, 1.5, "a wall-clock bubble on shared CPU cores: within a factor 1.5")


def formula(quantity: str, **names) -> float:
    table = read_reference("pipeline_schedules").set_index("quantity")
    return evaluate_formula(table.loc[quantity, "formula"], **names)


def source(quantity: str) -> str:
    return read_reference("pipeline_schedules").set_index("quantity").loc[quantity, "source"]


def table_times(name: str, p: int, m: int) -> tuple[float, float]:
    """(asynchronous, lockstep) makespan of the table with T_F = T_B = T_W = 1 per stage."""
    v = 2 if name in LOOPING + VEE else 1
    s, c = make_schedule(name, p, m, v), 1 / v
    return s.makespan(c, c, c), s.lockstep_makespan(c, c, c)


def _study(schedules, ms, repeats: int = 5) -> pd.DataFrame:
    """bubble_study of the tiny model at p = 2 on this process's first two devices."""
    import jax

    from ..config import model_preset
    from ..layout import LayoutError
    from ..studies.pipeline import bubble_study

    if len(jax.devices()) < P:
        raise LayoutError(f"the measured pipeline figures need {P} devices: run them through "
                          f"`parex figure`, which starts a process with {P} emulated devices")
    return bubble_study(model_preset("tiny"), p=P, ms=ms, schedules=schedules, repeats=repeats)


def _load_note(df: pd.DataFrame) -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    slow = (df.step_time_s / df.stage_alone_s).median()
    return (f"measured on {P} emulated devices, one per core; load average {load:.1f} on "
            f"{os.cpu_count()} cores; the pipelined step took {slow:.1f}× one stage alone "
            f"(with both stages busy at once and no overhead: 1/(1 − bubble))")


# --- GPipe and 1F1B against m --------------------------------------------------------------------

LOCKSTEP_PAIRS = ("parex's executor runs the table in lockstep ticks, each as long as its "
                  "slowest op: in 1F1B's steady state one stage's forward (T_F) shares a tick "
                  "with the other stage's backward (2·T_F), so the forward's stage idles T_F "
                  "there (GPipe's ticks pair like with like: its lockstep bubble is the table's)")


def bubble_rows(df: pd.DataFrame) -> list[Row]:
    """Per schedule and m: the asynchronous table's bubble, the lockstep executor's (each tick
    as long as its slowest op, as parex's executor runs it) and the measured one, each scored
    against (p−1)/(m+p−1)."""
    rows = []
    for r in df.itertuples():
        paper = formula(f"{r.schedule}_bubble", p=r.p, m=r.m)
        label = f"{r.schedule} · m={r.m}"
        rows.append(Row(f"{label} · table (fraction)", paper, r.bubble_table, "predicted", EXACT))
        rows.append(Row(f"{label} · lockstep executor", paper, r.bubble_lockstep, "predicted",
                        EXACT, note=LOCKSTEP_PAIRS if r.bubble_lockstep > r.bubble_table + 1e-9
                        else ""))
        rows.append(Row(f"{label} · measured", paper, r.bubble_measured, "measured",
                        note=f"{r.step_time_s * 1e3:.0f} ms pipelined, "
                             f"{r.stage_alone_s * 1e3:.0f} ms one stage alone; "
                             + modelled_note(r)))
    return rows


def modelled_note(r) -> str:
    """What parex's model of its own executor on this machine predicts for a measured row:
    the cause of a measured bubble above the paper's, in numbers (parex.studies.pipeline)."""
    return (f"parex's model of its executor here: bubble {r.bubble_modelled:.2f} "
            f"({r.step_time_modelled_s * 1e3:.0f} ms, {r.stage_alone_modelled_s * 1e3:.0f} ms: "
            f"lockstep ticks, each copying its switch's outputs)")


def _bubble_chart(df: pd.DataFrame):
    import altair as alt

    long = df.melt(id_vars=["schedule", "m"], value_vars=["bubble_measured", "bubble_lockstep"],
                   var_name="source", value_name="bubble")
    long["source"] = long.source.map({"bubble_measured": "measured",
                                      "bubble_lockstep": "lockstep table"})
    paper = pd.DataFrame([{"m": m, "bubble": formula("gpipe_bubble", p=P, m=m)}
                          for m in range(int(df.m.min()), int(df.m.max()) + 1)])
    x = alt.X("m:Q", title="microbatches m", scale=alt.Scale(type="log", base=2),
              axis=alt.Axis(values=sorted(set(df.m))))
    y = alt.Y("bubble:Q", title="bubble (fraction of the step)", axis=alt.Axis(format="%"))
    ours = alt.Chart(long).mark_line(point=True).encode(
        x=x, y=y, color=alt.Color("schedule:N"),
        strokeDash=alt.StrokeDash("source:N", legend=alt.Legend(symbolType="stroke")),
        tooltip=["schedule", "m", "source", alt.Tooltip("bubble:Q", format=".1%")])
    line = alt.Chart(paper).mark_line(color="#222").encode(x=x, y=y)
    label = alt.Chart(paper.head(1)).mark_text(
        align="left", dx=6, dy=10, text="paper: (p−1)/(m+p−1)").encode(x=x, y=y)
    return alt.layer(line, label, ours).properties(width=420, height=200)


@figure("pipeline-bubble", title="GPipe and 1F1B: the bubble against m (p = 2)",
        source="Huang et al. 2019, GPipe (arXiv:1811.06965), §2.3; Narayanan et al. 2021 "
               "(arXiv:2104.04473), §2.2.1",
        tolerance=MEASURED, evidence="analysis", slow=True, devices=P)
def pipeline_bubble() -> Figure:
    df = _study(("gpipe", "1f1b"), (2, 4, 8))
    return Figure(bubble_rows(df), lambda: _bubble_chart(df), [
        _load_note(df), "table: the schedule timed with T_F = T_B = T_W; lockstep: each tick "
        "as long as its slowest op, as parex's executor runs it (in 1F1B's steady state a "
        "forward waits for the other stage's backward)"])


# --- ZB-H1 and ZB-V against 1F1B -----------------------------------------------------------------

def zero_bubble_rows(df: pd.DataFrame) -> list[Row]:
    rows = []
    for m in sorted(set(df.m)):
        at = df[df.m == m].set_index("schedule")
        base_async, _ = table_times("1f1b", P, m)
        paper_1f1b = 3 * m + formula("1f1b_bubble_time", p=P, tf=1, tb=1, tw=1)
        for name, key in (("zbh1", "zbh1_bubble_time"), ("zbv", "zbv_bubble_time")):
            async_, lock = table_times(name, P, m)
            paper_step = (3 * m + formula(key, p=P, tf=1, tb=1, tw=1)) / paper_1f1b
            tol = EXACT if name == "zbh1" else Tolerance(0.95, 1.05, "'about zero' bubble: "
                                                          "within 5 % of a bubble-free step")
            label = f"{name}/1f1b step time · m={m}"
            rows.append(Row(f"{label} · table", paper_step, async_ / base_async, "predicted",
                            tol))
            modelled = at.step_time_modelled_s[name] / at.step_time_modelled_s["1f1b"]
            rows.append(Row(f"{label} · measured", paper_step,
                            at.step_time_s[name] / at.step_time_s["1f1b"], "measured",
                            note=f"parex's model of its executor here: {modelled:.2f}"))
        paper_bubble = formula("zbh1_bubble_time", p=P, tf=1, tb=1, tw=1) / formula(
            "1f1b_bubble_time", p=P, tf=1, tb=1, tw=1)
        zb_async, _ = table_times("zbh1", P, m)
        rows.append(Row(f"zbh1/1f1b bubble time · m={m} · table", paper_bubble,
                        (zb_async - 3 * m) / (base_async - 3 * m), "predicted", EXACT))
        idle = {s: at.step_time_s[s] - at.stage_alone_s[s] for s in ("zbh1", "1f1b")}
        modelled = {s: at.step_time_modelled_s[s] - at.stage_alone_modelled_s[s]
                    for s in ("zbh1", "1f1b")}
        rows.append(Row(f"zbh1/1f1b bubble time · m={m} · measured", paper_bubble,
                        idle["zbh1"] / idle["1f1b"], "measured",
                        note=f"parex's model of its executor here: "
                             f"{modelled['zbh1'] / modelled['1f1b']:.2f}"))
    return rows


def _zero_bubble_chart(df: pd.DataFrame):
    import altair as alt

    return alt.Chart(df).mark_bar().encode(
        x=alt.X("schedule:N", title=None, sort=["1f1b", "zbh1", "zbv"]),
        y=alt.Y("step_time_s:Q", title="measured step time (s)"),
        color=alt.Color("schedule:N", legend=None), column=alt.Column("m:O", title="m"),
        tooltip=["schedule", "m", "step_time_s", "bubble_measured", "bubble_table"],
    ).properties(width=120, height=180)


@figure("zero-bubble", title="ZB-H1 and ZB-V against 1F1B: step time and bubble (p = 2)",
        source="Qi et al. 2023, Zero Bubble Pipeline Parallelism (arXiv:2401.10241), §2.2; "
               "Qi et al. 2024 (arXiv:2405.15362), ZB-V",
        tolerance=Tolerance(0.9, 1.1, "measured step-time ratios within 10 %"),
        evidence="analysis", slow=True, devices=P)
def zero_bubble() -> Figure:
    df = _study(("1f1b", "zbh1", "zbv"), (4, 8))
    return Figure(zero_bubble_rows(df), lambda: _zero_bubble_chart(df), [
        _load_note(df), "paper: T_F = T_B = T_W; 1F1B's bubble (p−1)(T_F+T_B+T_W), ZB-H1's "
        "(p−1)(T_F+T_B−T_W), ZB-V's about zero"])


# --- interleaved 1F1B against v ------------------------------------------------------------------

INTERLEAVED = ((4, 8), (4, 16), (8, 16))  # (p, m)


@figure("interleaved-bubble", title="Interleaved 1F1B: the bubble against v",
        source="Narayanan et al. 2021 (arXiv:2104.04473), §2.2.2",
        tolerance=EXACT, evidence="analysis")
def interleaved_bubble() -> Figure:
    rows, points = [], []
    for p, m in INTERLEAVED:
        for v in (1, 2, 4):
            name = "interleaved" if v > 1 else "1f1b"
            s, c = make_schedule(name, p, m, v), 1 / v
            ideal = 3 * m  # every microbatch's F, B and W on one stage, T_F = T_B = T_W = 1
            ours = (s.makespan(c, c, c) - ideal) / ideal
            lockstep = (s.lockstep_makespan(c, c, c) - ideal) / ideal
            paper = formula("interleaved_bubble", p=p, m=m, v=v)
            rows.append(Row(f"p={p} m={m} v={v} (fraction of the ideal)", paper, ours))
            points += [{"p·m": f"p={p}, m={m}", "v": v, "source": k, "bubble": b}
                       for k, b in (("paper", paper), ("table", ours), ("lockstep", lockstep))]
    frame = pd.DataFrame(points)
    return Figure(rows, lambda: _interleaved_chart(frame), [
        "table: the interleaved schedule's table timed with T_F = T_B = T_W split over v "
        "chunks; lockstep (drawn, not scored): each tick as long as its slowest op, as "
        "parex's executor runs it"])


def _interleaved_chart(frame: pd.DataFrame):
    import altair as alt

    sources = ["paper", "table", "lockstep"]
    return alt.Chart(frame).mark_line(point=True).encode(
        x=alt.X("v:O", title="chunks per stage v"),
        y=alt.Y("bubble:Q", title="bubble / ideal compute time", axis=alt.Axis(format="%")),
        color=alt.Color("source:N", scale=alt.Scale(domain=sources,
                                                    range=["#222", "#f58518", "#bab0ac"])),
        strokeDash=alt.StrokeDash("source:N", legend=None, scale=alt.Scale(
            domain=sources, range=[[1, 0], [5, 3], [1, 0]])),  # table dashed over paper
        column=alt.Column("p·m:N", title=None, sort=list(dict.fromkeys(frame["p·m"]))),
        tooltip=["p·m", "v", "source", alt.Tooltip("bubble:Q", format=".1%")],
    ).properties(width=150, height=170)


__all__ = ["bubble_rows", "formula", "source", "table_times", "zero_bubble_rows"]
