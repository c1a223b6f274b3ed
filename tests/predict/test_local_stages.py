"""When a local-learning pipeline stops beating 1F1B (parex.predict.local_stages): the per-stage
timing of the 1F1B table, and the mechanism: heads on every stage against a partition that
backprop balances around its one head."""

import numpy as np
import pytest

from parex.config import TrainConfig, model_preset
from parex.layout import Layout
from parex.parallel.schedules import make_schedule
from parex.predict.local_stages import (
    async_makespan,
    backprop_partition,
    losing_frame,
    race,
    unit_costs,
)


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
def test_per_stage_makespan_equals_the_table_for_equal_stages(name):
    for p, m in ((2, 4), (4, 8), (4, 3)):
        assert async_makespan(name, m, [1.0] * p, [2.0] * p) == pytest.approx(
            make_schedule(name, p, m).makespan(1.0, 2.0))


def test_a_slow_stage_sets_the_pace():
    """Stage 2 twice as slow: at least its m microbatches' work, at most m − 1 of them plus one
    pass through every stage, and less than if every stage were as slow."""
    f, b = np.array([1.0, 1.0, 2.0, 1.0]), np.array([2.0, 2.0, 4.0, 2.0])
    m = 16
    span = async_makespan("1f1b", m, f, b)
    assert m * 6 <= span <= (m - 1) * 6 + (f + b).sum()
    assert span < async_makespan("1f1b", m, 2 * np.ones(4), 4 * np.ones(4))


def test_without_heads_local_removes_exactly_the_bubble():
    r = race(1.0, 2.0, 0.0, (2, 2, 2, 2), m=8)
    assert r["local"] == 8 * 6 and r["backprop"] == pytest.approx((8 + 3) * 6)
    assert r["speed"] == pytest.approx(11 / 8)


def test_local_loses_once_backprop_balances_around_a_costly_head():
    """Even stages: local wins whatever the head costs (1F1B's last stage carries it too).
    Tuned for backprop (the last stage gives up layers to its head): local's every stage has
    a head of its own, and it loses once m · t_head outweighs the bubble."""
    f, b, L, p, m = 1.0, 2.0, 12, 4, 8
    for head in (0.0, 3.0, 9.0, 18.0):
        assert race(f, b, head, (3, 3, 3, 3), m)["speed"] > 1
    assert backprop_partition(f, b, 0.0, L, p, m) == (3, 3, 3, 3)
    tuned = backprop_partition(f, b, 9.0, L, p, m)
    assert tuned[-1] < 3  # the head's stage holds fewer layers
    assert race(f, b, 9.0, tuned, m)["speed"] < 1
    assert race(f, b, 9.0, tuned, m)["backprop"] < race(f, b, 9.0, (3, 3, 3, 3), m)["backprop"]


def test_losing_frame_reads_the_predictor():
    model, train = model_preset("gpt2-small"), TrainConfig(global_batch=32)
    layout = Layout(stage=4, microbatches=8, schedule="local")
    f, b, head = unit_costs(model, train, layout, "a100-80gb")
    assert 0 < f < b and head > 0
    df = losing_frame(model, train, layout, "a100-80gb", head_scales=(0.01, 1.0))
    assert list(df.partition) == ["even", "tuned for backprop"] * 2
    assert (df[df.partition == "even"].speed > 1).all()
    tuned = df[df.partition == "tuned for backprop"].set_index("head_scale")
    assert tuned.speed[0.01] > 1 > tuned.speed[1.0]  # cheap heads win, gpt2's head loses
