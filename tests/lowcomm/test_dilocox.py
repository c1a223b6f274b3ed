"""DiLoCoX's headline predicted (parex.lowcomm.dilocox): the speed-up's closed form, how it moves
with what the paper leaves unread, and the claim that a cluster's width does not change it."""

import pytest

from parex.config import TrainConfig
from parex.layout import Layout, example_partition
from parex.lowcomm import dilocox as dx
from parex.lowcomm.predict import scale_models
from parex.predict import predict


@pytest.fixture(scope="module")
def cases():
    return dx.cases()


def test_every_unread_setting_is_predicted_once(cases):
    sizes = [len(v) for v in dx.UNREAD.values()]
    assert len(cases) == sizes[0] * sizes[1] * sizes[2]


def test_the_allreduce_is_one_gradient_through_the_link(cases):
    """Two clusters: a ring all-reduce sends the whole gradient once, |θ|·b / W, plus 2α."""
    model, _ = scale_models()["107B"]
    for c in cases:
        expected = model.n_params * c.grad_bytes / (dx.LINK_GBPS * 1e9 / 8) + 2 * 10e-3
        assert c.allreduce_s == pytest.approx(expected, rel=1e-9)
        assert c.speedup == pytest.approx(1 + c.allreduce_s / c.cluster_step_s)


def test_more_compute_per_step_means_less_speed_up(cases):
    for seq in dx.UNREAD["sequence length"]:
        for b in dx.UNREAD["AllReduce gradient bytes per element"]:
            line = sorted((c for c in cases if c.seq_len == seq and c.grad_bytes == b),
                          key=lambda c: c.sequences)
            assert all(a.speedup > z.speedup for a, z in zip(line, line[1:]))
            assert all(a.cluster_step_s < z.cluster_step_s for a, z in zip(line, line[1:]))


def test_a_wider_cluster_at_the_same_per_rank_batch_keeps_the_step():
    """The module's claim that lets Figure 1's 16-worker cluster stand for a bigger one: more
    DP ranks at a fixed per-rank batch change t_c by about 1 % (their gradient reduce)."""
    model, _ = scale_models()["107B"]
    steps = []
    for data in (2, 8):
        layout = Layout(stage=8, data=data, microbatches=2,
                        layers_per_stage=example_partition(model.layers, 8))
        train = TrainConfig(global_batch=2 * data, seq_len=2048, remat="full")
        steps.append(predict(model, train, layout, dx.CHIP).step_time_s["total"])
    assert steps[1] == pytest.approx(steps[0], rel=0.02)


def test_hiding_the_exchange_needs_H_times_compression(cases):
    model, _ = scale_models()["107B"]
    bandwidth = dx.LINK_GBPS * 1e9 / 8
    for c in cases:
        product = c.hiding_product(model.n_params, bandwidth)
        assert product * c.cluster_step_s * bandwidth == pytest.approx(4 * model.n_params)
