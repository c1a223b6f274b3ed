"""When a local-learning pipeline stops beating 1F1B (parex.predict.local_stages): the per-stage
timing of the 1F1B table, and the mechanism: heads on every stage against a partition that
backprop balances around its one head."""

import numpy as np
import pytest

from parex.config import TrainConfig, model_preset, ppll_vit
from parex.layout import Layout
from parex.parallel.schedules import make_schedule
from parex.predict.local_stages import (
    async_makespan,
    auxiliary_race,
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


def test_an_auxiliary_net_on_every_local_stage_but_the_last():
    """A local head of one block before the classifier: every stage but the last does one
    block's work more per microbatch; with no head at all, the bound (m + p − 1)/m."""
    base = race(1.0, 2.0, 0.0, (3, 3, 3, 3), m=8, local_head=3.0)
    assert base["local"] == 8 * (3 * 3 + 3) and base["backprop"] == pytest.approx(11 * 9)


def test_a_vits_head_is_a_small_part_of_a_block_where_gpt2s_is_many():
    """The paper's ViT classifies one token per image; GPT-2 projects every token onto 50k
    words: the head that decides whether local learning wins (module docstring)."""
    train, layout = TrainConfig(global_batch=128), Layout(stage=4, microbatches=8,
                                                         schedule="local")
    vit = auxiliary_race(ppll_vit(), train, layout, "a100-80gb", 0)
    assert vit["partition"] == (3, 3, 3, 3) and vit["head_over_layer"] < 0.2
    f, b, head = unit_costs(model_preset("gpt2-small"), train.replace(global_batch=32), layout,
                            "a100-80gb")
    assert head / (f + b) > 5
    assert 1.3 < vit["speed"] <= 11 / 8  # near the flush-free bound
    aux = auxiliary_race(ppll_vit(), train, layout, "a100-80gb", 1)
    assert aux["block_s"] == pytest.approx(vit["block_s"])
    assert 1 < aux["speed"] < vit["speed"]  # a block more per local head: about 4/3 the tick
