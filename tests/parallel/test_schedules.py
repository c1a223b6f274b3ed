"""Pipeline schedule tables against the published facts (the papers parex.parallel.schedules
cites: bubbles and in-flight counts) and against their own dependencies. Pure Python: no JAX."""

from collections import Counter

import pytest

from parex.parallel.schedules import SCHEDULES, make_schedule

GRID = [(2, 2), (2, 4), (3, 6), (4, 4), (4, 8), (4, 16), (4, 2), (8, 8)]


def all_tables():
    for p, m in GRID:
        for name in ("gpipe", "1f1b", "zbh1", "bfs"):
            yield make_schedule(name, p, m)
        for v in (2, 3):
            yield make_schedule("bfs", p, m, v)
            if m % p == 0:
                yield make_schedule("interleaved", p, m, v)
        yield make_schedule("zbv", p, m, 2)


def check_dependencies(s):
    """Independent of the module's own dependency function: virtual stage k = chunk·p + stage
    (ZB-V: odd chunks run the stages backwards); F(k) after F(k−1), B(k) after B(k+1) and after
    its own F, W after B, one op per stage-tick."""
    tick = {}
    for op in s.ops:
        offset = s.p - 1 - op.stage if s.name == "zbv" and op.chunk % 2 else op.stage
        key = (op.op, op.microbatch, op.chunk * s.p + offset)
        assert key not in tick, f"{s.name}: {key} runs twice"
        tick[key] = op.tick
    last = s.p * s.v - 1
    for (kind, j, k), t in tick.items():
        if kind == "F" and k > 0:
            assert tick["F", j, k - 1] < t
        if kind == "B":
            assert tick["F", j, k] < t
            if k < last:
                assert tick["B", j, k + 1] < t
        if kind == "W":
            assert tick["B", j, k] < t
    busy = Counter((op.tick, op.stage) for op in s.ops)
    assert max(busy.values()) == 1, f"{s.name}: a stage runs two ops in one tick"
    kinds = Counter(op.op for op in s.ops)
    n = s.p * s.m * s.v
    assert kinds == (Counter(F=n, B=n, W=n) if s.split_backward else Counter(F=n, B=n))


@pytest.mark.parametrize("s", list(all_tables()), ids=lambda s: f"{s.name}-p{s.p}m{s.m}v{s.v}")
def test_every_table_respects_dependencies(s):
    check_dependencies(s)
    rows = s.table()
    assert len(rows) == len(s.ops)
    assert set(rows[0]) == {"tick", "stage", "op", "microbatch", "chunk"}


@pytest.mark.parametrize("p,m", GRID)
def test_gpipe_and_1f1b_bubble_is_published_fraction(p, m):
    for name in ("gpipe", "1f1b"):
        s = make_schedule(name, p, m)
        assert s.idle_fraction() == pytest.approx((p - 1) / (m + p - 1))
        # With T_B = 2 T_F (B also does W here) the makespan is (m + p − 1)(T_F + T_B).
        assert s.makespan(1.0, 1.0, 1.0) == pytest.approx((m + p - 1) * 3.0)


@pytest.mark.parametrize("p,m", [(p, m) for p, m in GRID if m % p == 0])
@pytest.mark.parametrize("v", [2, 3, 4])
def test_interleaved_bubble_is_p_minus_1_over_vm_of_ideal(p, m, v):
    s = make_schedule("interleaved", p, m, v)
    ideal = 2 * m * v  # ticks of F and B work per stage
    assert (s.n_ticks - ideal) / ideal == pytest.approx((p - 1) / (v * m))
    # Per-chunk costs are 1/v of a whole stage's: the bubble shrinks v-fold against 1F1B's.
    one_f_one_b = make_schedule("1f1b", p, m).makespan(1.0, 2.0)
    assert s.makespan(1 / v, 2 / v) - 3 * m == pytest.approx((one_f_one_b - 3 * m) / v)


@pytest.mark.parametrize("p,m", [(p, m) for p, m in GRID if m >= p])
@pytest.mark.parametrize("t_f,t_b,t_w", [(1.0, 1.0, 1.0), (1.0, 1.5, 0.8), (2.0, 2.0, 1.0)])
def test_zbh1_bubble_matches_zero_bubble_paper(p, m, t_f, t_b, t_w):
    zb, base = make_schedule("zbh1", p, m), make_schedule("1f1b", p, m)
    work = m * (t_f + t_b + t_w)
    assert zb.makespan(t_f, t_b, t_w) - work == pytest.approx((p - 1) * (t_f + t_b - t_w))
    assert base.makespan(t_f, t_b, t_w) - work == pytest.approx((p - 1) * (t_f + t_b + t_w))


@pytest.mark.parametrize("p,m", GRID)
def test_zbh1_has_fewer_idle_ticks_than_1f1b(p, m):
    zb, base = make_schedule("zbh1", p, m), make_schedule("1f1b", p, m)
    idle = [s.p * s.n_ticks - len(s.ops) for s in (zb, base)]
    assert idle[0] < idle[1]
    assert zb.idle_fraction() < base.idle_fraction()
    assert zb.makespan(1.0, 1.0, 1.0) < base.makespan(1.0, 1.0, 1.0)


@pytest.mark.parametrize("p,m", GRID)
def test_activations_in_flight(p, m):
    assert make_schedule("gpipe", p, m).peak_in_flight() == [m] * p
    peaks = make_schedule("1f1b", p, m).peak_in_flight()
    assert peaks == [min(p - s, m) for s in range(p)]  # 1F1B: at most p, falling with the stage
    assert max(make_schedule("zbh1", p, m).peak_in_flight()) <= p  # ZB-H1: 1F1B's peak
    assert make_schedule("bfs", p, m, 2).peak_in_flight() == [2 * m] * p


@pytest.mark.parametrize("p,m", [(p, m) for p, m in GRID if m >= p])
def test_zbv_is_v_shaped_and_nearly_bubble_free(p, m):
    """ZB-V: stage 0 runs the first and the last virtual stage; with chunks of half a stage's
    layers (costs 1/2) and T_F = T_B = T_W its bubble is below ZB-H1's, which is below 1F1B's,
    and each stage holds at most 2p half chunks: 1F1B's activation memory."""
    v = make_schedule("zbv", p, m, 2)
    assert {(op.stage, op.chunk) for op in v.ops if op.microbatch == 0 and op.op == "F"} == \
        {(s, c) for s in range(p) for c in (0, 1)}
    assert v.place(0) == (0, 0) and v.place(2 * p - 1) == (0, 1) and v.place(p) == (p - 1, 1)
    work = 3 * m  # F, B and W of two half chunks per microbatch
    bubbles = [v.makespan(0.5, 0.5, 0.5) - work,
               make_schedule("zbh1", p, m).makespan(1.0, 1.0, 1.0) - work,
               make_schedule("1f1b", p, m).makespan(1.0, 1.0, 1.0) - work]
    assert bubbles[0] < bubbles[1] < bubbles[2]
    assert bubbles[0] <= 0.5 * (p - 1) * 1.0 + 1e-9  # at most half of ZB-H1's (p−1)(T_F+T_B−T_W)
    assert max(v.peak_in_flight()) <= 2 * p


def test_p2p_time_adds_one_hop_per_stage_each_way():
    p, m, hop = 4, 8, 0.25
    s = make_schedule("gpipe", p, m)
    assert s.makespan(1.0, 1.0, 0.0, hop) == pytest.approx(2 * (m + p - 1) + 2 * (p - 1) * hop)


def test_timeline_rows_never_overlap_on_a_stage():
    s = make_schedule("interleaved", 4, 8, 2)
    rows = s.timeline(1.0, 2.0, 0.5, 0.1)
    for stage in range(4):
        spans = sorted((r["start"], r["end"]) for r in rows if r["stage"] == stage)
        assert all(a[1] <= b[0] + 1e-12 for a, b in zip(spans, spans[1:]))


@pytest.mark.parametrize("args,fix", [
    (("zigzag", 4, 8), "use one of gpipe"),
    (("1f1b", 4, 8, 2), "set virtual=1"),
    (("interleaved", 4, 8, 1), "virtual=2"),
    (("interleaved", 4, 6, 2), "use microbatches=8 or 4"),
    (("interleaved", 4, 2, 2), "at least and a multiple of stages=4"),
    (("zbv", 4, 8, 1), "set virtual=2"),
    (("gpipe", 4, 0), "whole number >= 1"),
])
def test_bad_schedules_name_the_fix(args, fix):
    with pytest.raises(ValueError, match=fix):
        make_schedule(*args)


def test_names():
    assert SCHEDULES == ("gpipe", "1f1b", "interleaved", "zbh1", "bfs", "zbv")


# --- charts of schedule tables (altair; exported offline through vl-convert) ---------------------

CHART_CASES = [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zbh1", 1), ("bfs", 2),
               ("zbv", 2)]


def chart_rows(chart) -> list[dict]:
    (rows,) = chart.to_dict()["datasets"].values()
    return rows


@pytest.mark.parametrize("name,v", CHART_CASES)
def test_gantt_chart_renders_every_schedule(name, v, tmp_path):
    from parex.charts.pipeline import gantt_chart

    s = make_schedule(name, 4, 8, v)
    chart = gantt_chart(s)
    rows = chart_rows(chart)
    assert len(rows) == len(s.ops)
    assert {(r["stage"], r["tick"]) for r in rows} == {(op.stage, op.tick) for op in s.ops}
    assert all(r["end"] - r["start"] == 1 for r in rows)
    path = tmp_path / f"{name}.svg"
    chart.save(str(path))
    svg = path.read_text()
    assert svg.startswith("<svg") and "pipeline stage" in svg and name in svg


def test_gantt_chart_in_predicted_seconds():
    from parex.charts.pipeline import gantt_chart

    s = make_schedule("zbh1", 4, 8)
    costs = {"t_f": 1.0, "t_b": 1.0, "t_w": 0.5, "t_p2p": 0.1}
    rows = chart_rows(gantt_chart(s, costs))
    assert max(r["end"] for r in rows) == pytest.approx(s.makespan(**costs))
    assert {r["kind"] for r in rows} == {"F", "B (input grad)", "W"}


def test_table_and_lockstep_bubbles():
    """GPipe and 1F1B's table bubble is (p−1)/(m+p−1); a tick-synchronous executor waits for
    each tick's slowest op, so its bubble is never smaller; ZB-H1's table bubble is below
    1F1B's."""
    from parex.studies.pipeline import predicted_bubble, table_bubbles

    for p, m in ((2, 4), (4, 8)):
        table, lockstep = table_bubbles("1f1b", p, m)
        assert table == pytest.approx(predicted_bubble(p, m))
        assert lockstep >= table - 1e-12
        assert table_bubbles("zbh1", p, m)[0] < table
    s = make_schedule("1f1b", 2, 2)  # ticks: F | F F | B B | B with an unsplit B of 2
    assert s.lockstep_makespan(1.0, 1.0, 1.0) == pytest.approx(sum(
        max({"F": 1.0, "B": 2.0}[op.op] for op in s.ops if op.tick == t) for t in range(s.n_ticks)))


def test_bubble_chart_exports(tmp_path):
    import pandas as pd

    from parex.charts.pipeline import bubble_chart
    from parex.studies.pipeline import predicted_bubble

    ms = [2, 4, 8]
    frame = pd.DataFrame({"schedule": "1f1b", "p": 2, "m": ms, "step_time_s": [0.3, 0.5, 0.9],
                          "bubble_measured": [0.3, 0.2, 0.1],
                          "bubble_predicted": [predicted_bubble(2, m) for m in ms]})
    chart = bubble_chart(frame)
    chart.save(str(tmp_path / "bubble.png"))
    assert (tmp_path / "bubble.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="bubble_study"):
        bubble_chart(frame.drop(columns="bubble_measured"))
