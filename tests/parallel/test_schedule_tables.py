"""The vectorised schedule tables (parallel.tables) against a plain scalar placement and timing
written here, one op at a time, and the batched predictor path against one table at a time."""

import itertools

import numpy as np
import pytest

from parex.parallel.schedules import (LOOPING, SCHEDULES, check_schedule, make_schedule,
                                      schedule_arrays)
from parex.parallel.tables import Tables


def inputs(op, stage, mb, chunk, p, v, vee=False):
    """What an op waits for besides its stage's previous op, as (stage, op, mb, chunk). ZB-V
    (`vee`) runs odd chunks over the stages backwards."""
    def where(k):  # (stage, chunk) of virtual stage k
        c, offset = divmod(k, p)
        return (p - 1 - offset if vee and c % 2 else offset), c

    k = chunk * p + (p - 1 - stage if vee and chunk % 2 else stage)
    if op == "F":
        return [(where(k - 1)[0], "F", mb, where(k - 1)[1])] if k else []
    if op == "B":
        after = [(where(k + 1)[0], "B", mb, where(k + 1)[1])] if k < p * v - 1 else []
        return [(stage, "F", mb, chunk)] + after
    return [(stage, "B", mb, chunk)]


def scalar_ticks(s):
    """Re-place the table's per-stage orders one op at a time: tick = 1 + the latest of the
    stage's previous op and every input."""
    orders = [[(op.op, op.microbatch, op.chunk) for op in s.ops if op.stage == st]
              for st in range(s.p)]
    tick, pos = {}, [0] * s.p
    while any(pos[st] < len(orders[st]) for st in range(s.p)):
        moved = False
        for st in range(s.p):
            while pos[st] < len(orders[st]):
                op, mb, c = orders[st][pos[st]]
                before = [tick.get(d) for d in inputs(op, st, mb, c, s.p, s.v, s.vee)]
                if None in before:
                    break
                prev = tick[(st, *orders[st][pos[st] - 1])] if pos[st] else -1
                tick[st, op, mb, c] = 1 + max([prev, *before])
                pos[st], moved = pos[st] + 1, True
        assert moved, "deadlock"
    return tick


def scalar_makespan(s, t_f, t_b, t_w, hop):
    end, free = {}, [0.0] * s.p
    for op in s.ops:  # tick order
        start = free[op.stage]
        for st, *key in inputs(op.op, op.stage, op.microbatch, op.chunk, s.p, s.v, s.vee):
            start = max(start, end[(st, *key)] + (hop if st != op.stage else 0.0))
        t = {"F": t_f, "B": t_b if s.split_backward else t_b + t_w, "W": t_w}[op.op]
        end[op.stage, op.op, op.microbatch, op.chunk] = free[op.stage] = start + t
    return max(end.values())


def cases():
    for name, p, m in itertools.product(SCHEDULES, (2, 3, 4), (1, 3, 4, 8)):
        for v in ((2, 3) if name in LOOPING else (2,) if name == "zbv" else (1,)):
            try:
                check_schedule(name, p, m, v)
            except ValueError:
                continue
            yield name, p, m, v


CASES = list(cases())


@pytest.mark.parametrize("key", CASES, ids=lambda k: "{}-p{}m{}v{}".format(*k))
def test_array_ticks_and_makespans_match_scalar_placement(key):
    s = make_schedule(*key)
    assert {(op.stage, op.op, op.microbatch, op.chunk): op.tick for op in s.ops} == scalar_ticks(s)
    for costs in [(1.0, 2.0, 0.0, 0.0), (1.0, 1.0, 1.0, 0.1), (0.3, 0.5, 0.7, 0.25)]:
        assert s.makespan(*costs) == pytest.approx(scalar_makespan(s, *costs), rel=1e-12)


def test_many_tables_at_once_equal_one_at_a_time():
    tables = schedule_arrays(CASES)
    singles = [make_schedule(*key) for key in CASES]
    assert list(tables.n_ticks()) == [s.n_ticks for s in singles]
    peaks = tables.peak_in_flight()
    for i, s in enumerate(singles):
        assert list(peaks[i, :s.p]) == s.peak_in_flight() and not peaks[i, s.p:].any()
    costs = np.tile([1.0, 2.0, 0.5], (len(CASES), 2, 1))
    costs[:, 1] *= 0.5  # a second cost set per table
    hop = np.tile([0.0, 0.3], (len(CASES), 1))
    spans = tables.makespans(costs, hop)
    for i, s in enumerate(singles):
        assert spans[i, 0] == pytest.approx(s.makespan(1.0, 2.0, 0.5))
        assert spans[i, 1] == pytest.approx(s.makespan(0.5, 1.0, 0.25, 0.3))


def test_buffer_slots_count_what_each_stage_holds_at_once():
    """Batched buffer slots equal one table at a time, and the residual stash equals a direct
    count: per stage and tick, the chunks whose F has run (tick < t) and whose B has not."""
    tables = schedule_arrays(CASES)
    slots = tables.buffer_slots()
    for i, key in enumerate(CASES):
        single = schedule_arrays([key]).buffer_slots()
        assert {k: int(v[0]) for k, v in single.items()} == {k: int(v[i]) for k, v in
                                                             slots.items()}, key
        ops = make_schedule(*key).ops
        f = {(o.stage, o.microbatch, o.chunk): o.tick for o in ops if o.op == "F"}
        b = {(o.stage, o.microbatch, o.chunk): o.tick for o in ops if o.op == "B"}
        ticks = max(o.tick for o in ops) + 1
        direct = max(sum(f[k] < t <= b[k] for k in f if k[0] == stage)
                     for stage in range(key[1]) for t in range(ticks))
        assert slots["res"][i] == direct, key


def test_a_deadlocked_order_names_its_table():
    ok = [[("F", 0, 0), ("B", 0, 0)]]
    stuck = [[("B", 0, 0), ("F", 0, 0)]]  # the backward waits for a forward queued behind it
    with pytest.raises(RuntimeError, match="deadlocks .table 1: p=1, v=1"):
        Tables.from_orders([ok, stuck], [1, 1], [1, 1], [1, 1], [False, False])


def test_an_order_without_an_op_its_neighbour_needs_is_refused():
    lonely = [[("F", 0, 0), ("B", 0, 0)], [("F", 0, 0)]]  # stage 1 never runs B
    with pytest.raises(ValueError, match="lacks an op"):
        Tables.from_orders([lonely], [2], [1], [1], [False])


def test_predictor_columns_read_each_layouts_own_table():
    from parex.config import TrainConfig, model_preset
    from parex.predict.schedule_stats import makespan_columns, table_columns
    from parex.predict.shapes import Grid

    model = model_preset("tiny")
    rows = [("gpipe", 2, 4, 1), ("1f1b", 4, 8, 1), ("interleaved", 2, 4, 2), ("zbh1", 4, 4, 1),
            ("bfs", 2, 2, 2), ("gpipe", 1, 2, 1)]
    names, p, m, v = (list(c) for c in zip(*rows))
    grid = Grid.from_columns(TrainConfig(global_batch=8), model, stage=np.array(p),
                             microbatches=np.array(m), virtual_stages=np.array(v),
                             data=np.ones(6, int), schedule=names)
    ticks, peaks = table_columns(grid)
    t_b, t_w = np.full(6, 2.0), np.full(6, 1.0)
    base, per_hop = makespan_columns(grid, t_b, t_w)
    for i, key in enumerate(rows[:-1]):
        s = make_schedule(*key)
        assert (ticks[i], peaks[i]) == (s.n_ticks, max(s.peak_in_flight()))
        assert base[i] == pytest.approx(s.makespan(1.0, 2.0, 1.0))
        assert per_hop[i] == pytest.approx((s.makespan(1.0, 2.0, 1.0, 0.01) - base[i]) / 0.01)
    assert (ticks[-1], peaks[-1], base[-1], per_hop[-1]) == (0, 1, 0, 0)  # no pipeline


def test_layouts_of_one_table_are_timed_with_their_own_backward_costs():
    """Two layouts share a table but not t_B (e.g. one recomputes): each gets its makespan."""
    from parex.config import TrainConfig, model_preset
    from parex.predict.schedule_stats import makespan_columns
    from parex.predict.shapes import Grid

    grid = Grid.from_columns(TrainConfig(global_batch=8), model_preset("tiny"),
                             stage=np.array([4, 4, 4]), microbatches=np.array([8, 8, 8]),
                             virtual_stages=np.ones(3, int), data=np.ones(3, int),
                             schedule=["zbh1"] * 3)
    t_b, t_w = np.array([1.0, 1.5, 1.0]), np.array([1.0, 1.5, 1.0])
    base, _ = makespan_columns(grid, t_b, t_w)
    s = make_schedule("zbh1", 4, 8)
    assert base.tolist() == pytest.approx([s.makespan(1.0, b, w) for b, w in zip(t_b, t_w)])
    assert base[1] > base[0] == base[2]
