"""DualPipe and DualPipeV tables (parex.parallel.dualpipe) against DeepSeek-V3's Table 2: bubble,
parameters and activations per device; 1F1B's and ZB-H1's tables timed by the same engine against
their rows of the table; every op's dependencies; the Gantt rows and chart. Pure Python: no JAX."""

from collections import Counter

import pytest

from parex.parallel.dualpipe import (dualpipe, dualpipe_orders, dualpipev, gantt_rows, path,
                                     published_activations, published_bubble,
                                     published_devices, published_parameters, time_schedule)
from parex.parallel.schedules import make_schedule

SHAPES = [(p, m) for p in (4, 6, 8) for m in (2 * p, 2 * p + 2, 4 * p)]
# F = B − W (a forward as long as an input gradient), W ≤ F ≤ B ≤ F&B, and W, B, F&B ≠ F:
# Table 2's assumptions, under which the formula is exact
COSTS = [dict(F=1.0, B=1.8, W=0.8), dict(F=1.0, B=1.8, W=0.8, FB=2.2),
         dict(F=1.2, B=1.7, W=0.5), dict(F=1.0, B=1.3, W=0.3, FB=1.6)]


@pytest.mark.parametrize("costs", COSTS)
@pytest.mark.parametrize("p,m", SHAPES)
def test_dualpipe_bubble_is_table_2s(p, m, costs):
    table = dualpipe(p, m, **costs)
    assert table.bubble() == pytest.approx(published_bubble("dualpipe", p, **costs), abs=1e-9)
    if "FB" not in costs:  # no overlap: every device computes m(F+B) and idles alike
        assert table.makespan() == pytest.approx(m * (costs["F"] + costs["B"]) + table.bubble())
        assert max(table.idle()) - min(table.idle()) == pytest.approx(0, abs=1e-9)


@pytest.mark.parametrize("costs", COSTS)
@pytest.mark.parametrize("p", [2, 3, 4])
def test_dualpipev_bubble_is_table_2s_on_half_the_devices(p, costs):
    """DualPipeV: PP = 2p stages on p = PP/2 devices, the same bubble as DualPipe on 2p."""
    for m in (2 * p, 2 * p + 1, 4 * p):
        table = dualpipev(p, m, **costs)
        assert table.stages == 2 * p and published_devices("dualpipev", table.stages) == p
        expected = published_bubble("dualpipev", 2 * p, **costs)
        assert table.bubble() == pytest.approx(expected, abs=1e-9)
        if m % 2 == 0 and m >= 4 * p:  # DualPipe on 2p devices needs m/2 >= 2p
            assert table.bubble() == pytest.approx(dualpipe(2 * p, m, **costs).bubble())


def test_bubble_differs_from_table_2_when_forward_is_not_an_input_gradient():
    """F=1, B=2, W=0.8 (F ≠ B − W): the table idles 2.4·(PP/2−1), the formula says 2.6·(PP/2−1).
    The formula is Table 2's equal-cell case, not every cost's critical path."""
    for p in (4, 6, 8):
        measured = dualpipe(p, 2 * p, 1.0, 2.0, 0.8).bubble()
        assert measured == pytest.approx(2.4 * (p / 2 - 1))
        assert published_bubble("dualpipe", p, 1.0, 2.0, 0.8) == pytest.approx(2.6 * (p / 2 - 1))


@pytest.mark.parametrize("costs", [dict(F=1.0, B=2.0, W=0.8), dict(F=1.0, B=2.2, W=0.7),
                                   dict(F=1.0, B=1.2, W=0.8)])
@pytest.mark.parametrize("p,m", [(4, 8), (4, 16), (6, 12), (8, 16), (8, 24)])
def test_one_f_one_b_and_zbh1_tables_match_table_2(p, m, costs):
    """parex's own tables timed here: 1F1B idles (PP−1)(F+B) always; ZB-H1 (parex's `zbh1`, whose
    docstring writes (p−1)(T_F+T_B−T_W) with T_B the input gradient: the same thing, as B here
    is the full backward T_B + T_W) idles (PP−1)(F+B−2W) when W ≤ B − W, and more otherwise
    (its W's then outlast the gaps they fill)."""
    one = time_schedule(make_schedule("1f1b", p, m), **costs)
    assert one.bubble() == pytest.approx(published_bubble("1f1b", p, **costs))
    zb = time_schedule(make_schedule("zbh1", p, m), **costs)
    formula = published_bubble("zb1p", p, **costs)
    if costs["W"] <= costs["B"] - costs["W"]:
        assert zb.bubble() == pytest.approx(formula)
    else:
        assert zb.bubble() > formula + 0.1
    for table, name in ((one, "1f1b"), (zb, "zb1p")):
        assert max(table.peak_in_flight()) == published_activations(name, p)
        assert table.parameters() == [published_parameters(name)] * p


@pytest.mark.parametrize("p,m", SHAPES[:6])
def test_memory_is_table_2s(p, m):
    """Parameters 2× (two stages per device), activations at most PP+1 stage-microbatches."""
    for table in (dualpipe(p, m), dualpipev(p // 2, m)):
        pp = table.stages
        assert table.parameters() == [published_parameters(table.name)] * table.p == [2] * table.p
        assert max(table.peak_in_flight()) == published_activations(table.name, pp) == pp + 1


@pytest.mark.parametrize("name,p,m", [("dualpipe", 2, 4), ("dualpipe", 4, 10), ("dualpipe", 8, 16),
                                      ("dualpipev", 1, 2), ("dualpipev", 3, 7),
                                      ("dualpipev", 4, 8)])
def test_every_op_once_and_after_its_inputs(name, p, m):
    """Independent of the module's timing: each microbatch's F and B once per virtual stage on the
    device its path names, a W after every split B, F after the previous stage's F, B after its F
    and the next stage's B, W after its B, and no two units of a device overlapping."""
    table = (dualpipe if name == "dualpipe" else dualpipev)(p, m, 1.0, 2.0, 0.7)
    ops = {}
    for op in table.ops:
        key = (op.kind, op.microbatch, op.device, op.chunk)
        assert key not in ops
        ops[key] = op
    for j in range(m):
        route = path(name, p, m, j)
        for k, (d, c) in enumerate(route):
            f, b = ops["F", j, d, c], ops["B", j, d, c]
            if k:
                assert f.start >= ops["F", j, *route[k - 1]].end - 1e-9
            if k < len(route) - 1:
                assert b.start >= ops["B", j, *route[k + 1]].end - 1e-9
            assert b.start >= f.end - 1e-9
            w = ops.get(("W", j, d, c))
            assert (w is None) == b.full
            assert w is None or w.start >= b.end - 1e-9
    kinds = Counter(op.kind for op in table.ops)
    assert kinds["F"] == kinds["B"] == m * len(path(name, p, m, 0))
    for d in range(table.p):
        spans = sorted({(op.start, op.end) for op in table.ops if op.device == d})
        assert all(a[1] <= b[0] + 1e-9 for a, b in zip(spans, spans[1:]))


def test_steady_state_pairs_forward_and_backward_of_both_directions():
    """Every device runs F&B units, each a forward of one direction with a backward of the
    other; the middle devices' first unit of the main step runs F and B apart."""
    p, m = 8, 20
    orders = dualpipe_orders(p, m)
    for d, order in enumerate(orders):
        r = min(d, p - 1 - d)  # steps from the nearer end
        pairs = [u.keys for u in order if len(u.keys) == 2]
        main = m // 2 - p + r + 1  # step 4's two units, then step 5's one
        assert len(pairs) == 2 * main - (r == p // 2 - 1) + p // 2 - r - 1
        assert pairs and all(f[0] == "F" and b[0] == "B" and f[2] != b[2] for f, b in pairs)
    # the first unit of step 4 on a middle device (d = 3) is a lone F, the next a lone B
    middle = orders[p // 2 - 1]
    first_pair = next(i for i, u in enumerate(middle) if len(u.keys) == 2)
    assert [u.keys[0][0] for u in middle[first_pair - 2:first_pair]] == ["F", "B"]


def test_checks_and_published_names():
    with pytest.raises(ValueError, match="even p"):
        dualpipe(5, 10)
    with pytest.raises(ValueError, match="m >= 2p"):
        dualpipe(4, 6)
    with pytest.raises(ValueError, match="m >= 2p"):
        dualpipev(4, 7)
    with pytest.raises(ValueError, match="Table 2 lists"):
        published_bubble("gpipe", 4, 1.0, 2.0, 1.0)
    assert published_bubble("dualpipe", 8, 1.0, 2.0, 1.0, FB=2.5) == pytest.approx(3 * 1.5)


def test_gantt_rows_and_chart_have_one_row_per_op():
    from parex.charts.pipeline import dual_gantt_chart

    table = dualpipe(4, 8, 1.0, 1.8, 0.8)
    rows = gantt_rows(table)
    assert len(rows) == len(table.ops)
    assert {"tick", "stage", "op", "microbatch", "chunk", "start", "end"} <= set(rows[0])
    busy = [sum(r["end"] - r["start"] for r in rows if r["stage"] == d) for d in range(table.p)]
    assert busy == pytest.approx(table.busy())  # an F&B unit split into F then B, not doubled
    chart = dual_gantt_chart(table)
    bars = chart.layer[1]
    assert len(bars.data) == len(table.ops)
    assert set(bars.data["op_name"]) == {"forward", "backward", "input gradient", "weight gradient"}
    assert chart.to_dict()["title"]["text"].startswith("dualpipe · p=4 m=8")
