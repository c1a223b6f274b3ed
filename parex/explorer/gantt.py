"""The Explorer's Gantt chart: the layout's schedule table timed with per-op costs that agree
with the prediction.

The Prediction reports the step's compute and bubble, not the time of one forward. The backward
takes (passes − 1) forwards, passes = 3 (forward, backward = 2) + 1 under full remat + ¼ under
selective remat (+ ¼ for Ulysses' attention inside parex's own pipeline stages, which re-runs
its forward); a split backward (zbh1 and the other zero-bubble schedules) gives half to B
and half to W (time.unit_costs's rule). On an accelerator t_F is then the one value for which
the table's makespan minus the busy time m·v·passes·t_F equals the predicted bubble
(bisection: the excess grows with t_F),
with the predicted stage-to-stage hop; the chart's grey is the predicted bubble. For models so
small that a hop costs as much as an op the table's critical path is not the predictor's linear
one (the solved t_F would disagree with the predicted compute by more than 4×): then t_F comes
from the compute, as on the CPU, and the note says the idle time differs. On the emulated
CPU the predicted bubble is 0 (idle stages lend their cores), so t_F = compute / (m·v·passes),
the optimizer and fixed per-step costs included, and the chart shows the idle time a real
device would have.
"""

from __future__ import annotations

from ..layout import Layout
from ..units import format_seconds
from ..parallel.schedules import Schedule, make_schedule
from ..record import Prediction
from ..setting import Setting
from .explain import shape_of


def unit_costs(layout: Layout, remat: str, emulated: bool,
               split_backward: bool) -> tuple[float, float, float]:
    """(passes, t_B, t_W) in forwards; a split backward (zero-bubble schedules) halves it."""
    nested = emulated and layout.stage > 1 and layout.cp == "ulysses"  # its attention re-run
    passes = 3 + (remat == "full") + 0.25 * ((remat == "selective") + nested)
    backward = passes - 1
    if split_backward:
        return passes, backward / 2, backward / 2
    return passes, backward, 0.0


def hop_seconds(p: Prediction, m: int, v: int, n_ticks: int) -> float:
    """One stage-to-stage send: the pipeline term's seconds over its sends (2 per microbatch
    and chunk on a GPU; 2 per tick on the emulated mesh, whose executor sends every tick)."""
    hops = [c for c in p.collectives if c["name"] == "pipeline"
            and c["kind"] == "collective-permute"]
    if not hops:
        return 0.0
    sends = 2 * n_ticks if p.convention == "xla-cpu" else 2 * m * v
    return hops[0]["seconds"] / max(sends, 1)


def _excess(schedule: Schedule, t_f: float, t_b: float, t_w: float, hop: float,
            busy: float) -> float:
    return schedule.makespan(t_f, t_b * t_f, t_w * t_f, hop) - busy * t_f


def _solve(schedule, t_b, t_w, hop, busy, bubble) -> float | None:
    """t_F at which the table idles for `bubble`, by bisection; None when the hops alone idle
    it longer."""
    if _excess(schedule, 0.0, t_b, t_w, hop, busy) >= bubble:
        return None
    lo, hi = 0.0, max(bubble, 1e-12)
    while _excess(schedule, hi, t_b, t_w, hop, busy) < bubble:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _excess(schedule, mid, t_b, t_w, hop, busy) < bubble else (lo, mid)
    return (lo + hi) / 2


def gantt_costs(p: Prediction, setting: Setting) -> tuple[Schedule, dict, str] | None:
    """(schedule, costs for Schedule.timeline, a note on where they come from), or None
    without a pipeline; `setting`: the one `p` was predicted under."""
    layout = setting.layout
    if layout.stage == 1:
        return None
    sym = shape_of(setting)
    m, v = sym["m"], sym["v"]
    schedule = make_schedule(layout.schedule, layout.stage, m, v)
    passes, t_b, t_w = unit_costs(layout, setting.train.remat, setting.emulated,
                                  schedule.split_backward)
    busy = m * v * passes
    hop = hop_seconds(p, m, v, schedule.n_ticks)
    bubble = p.step_time_s["bubble"]
    if setting.emulated or bubble <= 0:
        t_f = p.step_time_s["compute"] / busy
        note = ("op times: predicted compute ÷ (m·v·passes). The emulated devices share the "
                "host's cores, so the grey idle time is lent to busy stages and the predicted "
                "step has no bubble; on a GPU it would wait like this")
    elif (t_f := _solve(schedule, t_b, t_w, hop, busy, bubble)) is None or not (
            0.25 < t_f * busy / p.step_time_s["compute"] < 4):
        t_f = p.step_time_s["compute"] / busy  # the hops, not the ops, make the bubble
        note = ("op times: predicted compute ÷ (m·v·passes); the stage-to-stage hops are as "
                "long as the ops, so the table's idle time differs from the predicted bubble "
                "(the predictor adds the hops' cost on the critical path linearly)")
    else:
        note = ("op times: t_F chosen so that the table's idle time is the predicted bubble; "
                f"t_B = {t_b:g}·t_F" + (f", t_W = {t_w:g}·t_F" if t_w else ""))
    costs = {"t_f": t_f, "t_b": t_b * t_f, "t_w": t_w * t_f, "t_p2p": hop}
    span = schedule.makespan(costs["t_f"], costs["t_b"], costs["t_w"], hop)
    return schedule, costs, note + ". " + reconciled(span, p.step_time_s["total"])


def reconciled(span: float, step: float) -> str:
    """How the table's span relates to the predicted step the status line shows: the step
    adds what the table does not draw (the optimizer, the step's fixed cost, exposed
    communication), or, on the emulated mesh, is shorter (idle stages lend their cores)."""
    def time(x):  # a number and its unit never split over two lines of the subtitle
        return format_seconds(x).replace(" ", "\u00a0")

    rest = step - span
    if rest >= 0:
        return (f"The table spans {time(span)}; the predicted step, {time(step)}, adds "
                f"{time(rest)} it does not draw (the optimizer, the step's fixed cost, exposed "
                f"communication)")
    return (f"The table spans {time(span)}; the predicted step is {time(step)}, as idle "
            f"stages lend their cores to busy ones")


__all__ = ["gantt_costs", "hop_seconds", "unit_costs"]
