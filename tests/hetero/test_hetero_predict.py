"""Predicting a heterogeneous plan: the one-group case is the homogeneous predictor, each stage
is costed on its own chip and links, the balancing problems are solved exactly."""

import dataclasses
import itertools
import math

import numpy as np
import pytest

from parex.cluster import cluster_from_dict, homogeneous, load_hetero_cluster
from parex.config import TrainConfig, model_preset
from parex.layout import Layout
from parex.model.transformer import flops_per_token
from parex.parallel.schedules import make_schedule
from parex.predict import predict
from parex.hetero.costs import stage_setting
from parex.hetero.plan import HeteroPlan
from parex.hetero.predict import predict_plan
from parex.hetero.split import batch_split, layer_split
from parex.hetero.timing import closed_form, hops_on_path, pipeline_times

MODEL = model_preset("llama2-7b")
SETTING = stage_setting(MODEL, 4096)


def even_plan(chip: str, data: int, tensor: int, stages: int, batch: int, micro: int) -> str:
    """The plan a homogeneous Layout(data, tensor, stage) is, in the mesh's device order."""
    pipes = []
    for i in range(data):
        boxes = [f"{chip}[{(s * data + i) * tensor}:{(s * data + i + 1) * tensor}] "
                 f"L{MODEL.layers // stages}" for s in range(stages)]
        pipes.append(f"batch={batch // data} micro={micro}: " + " > ".join(boxes))
    return "; ".join(pipes)


@pytest.mark.parametrize("nodes, data, tensor, stages", [(1, 1, 8, 1), (1, 1, 2, 4),
                                                         (2, 2, 4, 2), (1, 2, 4, 1)])
def test_one_group_plans_agree_with_the_homogeneous_predictor(nodes, data, tensor, stages):
    B, m = 32, 32 // data
    cluster = homogeneous("a100-80gb", nodes)
    layout = Layout(data=data, tensor=tensor, stage=stages, microbatches=m,
                    schedule="1f1b" if stages > 1 else "gpipe")
    train = TrainConfig(global_batch=B, seq_len=4096)
    want = predict(MODEL, train, layout, cluster.groups[0].as_cluster())
    plan = HeteroPlan.parse(even_plan("a100-80gb", data, tensor, stages, B, m))
    got = predict_plan(plan, cluster, SETTING, B)
    last, first = got.stages[-1], got.stages[0]
    # the stage holding the head is the homogeneous predictor's busiest (it puts the head on
    # every stage); its embedding and head state differ, so its optimizer step by a little
    assert math.isclose(m * last.compute_s + last.opt_s, want.step_time_s["compute"],
                        rel_tol=2e-3)
    assert math.isclose(first.memory["activations"], want.memory_bytes_per_device["activations"],
                        rel_tol=1e-9)  # Korthikanti's bytes × the table's in-flight count
    assert math.isclose(got.step_time_s["total"], want.step_time_s["total"], rel_tol=0.02)


def test_each_stage_runs_on_its_own_chip_and_memory():
    cluster = load_hetero_cluster("het-48")
    plan = HeteroPlan.parse("batch=64 micro=64: a100-pcie-80gb[0:4] L16 > rtx-4090[0:4] L8 > "
                            "rtx-3090[0:4] L4 > a100-pcie-80gb[4:8] L4")
    pred = predict_plan(plan, cluster, SETTING, 64)
    a100, g4090, g3090, _ = pred.stages
    # per block (no head on these), a chip is slower by between its memory-bandwidth ratio
    # (the memory-bound kernels) and its peak ratio (the matmuls)
    slower = 2 * g3090.compute_s / g4090.compute_s
    assert 1008 / 936 < slower < 165.2 / 71
    # the A100 PCIe is about 1.9× a 4090 on both roofs: 312 · 0.81 against 165.2 · 0.8
    # TFLOP/s, 1,935 against 1,008 GB/s
    assert 1.8 < g4090.compute_s / (a100.compute_s / 2) < 1.95
    assert (a100.cap, g4090.cap) == (80e9, 24e9)
    assert pred.fits == all(s.memory["total"] <= s.cap for s in pred.stages)
    # the first stage holds the most microbatches in flight (1F1B: p − s)
    assert a100.memory["activations"] / 16 == pytest.approx(4 * g4090.memory["activations"] / 24)
    # MFU: the step's model FLOPs over the cluster's whole peak
    flops = flops_per_token(SETTING.model, 4096) * 64 * 4096
    assert math.isclose(pred.mfu, flops / (pred.step_time_s["total"] * cluster.peak()))
    entry = pred.entry()
    assert entry["plan"] == plan.to_json() and entry["layout"] == str(plan)
    assert set(entry["step_time_s"]) == {"total", "compute", "exposed_comm", "bubble"}


def test_slower_links_cost_where_they_are_crossed():
    plan = HeteroPlan.parse("batch=32 micro=32: rtx-4090[0:4] L16 > a100-pcie-80gb[0:4] L16; "
                            "batch=32 micro=32: rtx-4090[8:12] L16 > a100-pcie-80gb[8:12] L16")
    base = load_hetero_cluster("het-48")
    steps = [predict_plan(plan, dataclasses.replace(base, inter_group_gbps=g), SETTING, 64)
             for g in (100, 10, 1)]
    totals = [p.step_time_s["total"] for p in steps]
    assert totals[0] < totals[1] < totals[2]
    hops = [p.stages[0].hop_s for p in steps]
    assert hops[2] > 5 * hops[1] > 5 * hops[0]
    # the data-parallel reduction of the two pipelines' 4090 stages crosses nodes
    # (devices 0-3 and 8-11); in one node it is cheaper
    near = HeteroPlan.parse(str(plan).replace("rtx-4090[8:12]", "rtx-4090[4:8]"))
    far_dp = steps[1].stages[0].reduce_end - steps[1].stages[0].compute_end
    near_pred = predict_plan(near, dataclasses.replace(base, inter_group_gbps=10), SETTING, 64)
    assert near_pred.stages[0].reduce_end - near_pred.stages[0].compute_end < far_dp


def test_a_plan_that_overflows_a_small_card_is_flagged():
    mix = load_hetero_cluster("hexiscale-mix")
    plan = HeteroPlan.parse("batch=16 micro=16: rtx-3080ti[0:8] L16 > a100-pcie-80gb[0:8] L16")
    pred = predict_plan(plan, mix, SETTING, 16)
    assert not pred.fits and pred.tightest().chip == "rtx-3080ti"
    assert pred.entry()["memory_headroom_bytes"] < 0 and pred.bottleneck() == "memory"


def test_the_table_timed_per_stage_matches_the_schedule_and_the_closed_form():
    for p, m in [(1, 4), (3, 5), (4, 8)]:
        timed = pipeline_times([1.0] * p, [2.0] * p, [0.1] * (p - 1), m)
        assert math.isclose(timed["makespan"], make_schedule("1f1b", p, m).makespan(1, 2, 0, .1))
        assert math.isclose(closed_form(np.full(p, 3.0), np.full(p - 1, 0.1), m,
                                        hops_on_path(p, m)), timed["makespan"], rel_tol=1e-9)
    # a slow middle stage sets the pace: (m − 1) of its 6 s after one pass through all
    uneven = pipeline_times([1, 2, 1], [2, 4, 2], [0, 0], 8)
    assert uneven["makespan"] == pytest.approx(3 + 6 + 3 + 7 * 6, rel=0.1)
    assert list(uneven["last_backward"]) == sorted(uneven["last_backward"], reverse=True)


def test_layer_split_finds_the_smallest_bottleneck():
    rng = np.random.default_rng(0)
    for _ in range(20):
        cost, extra = rng.uniform(1, 4, 3), rng.uniform(0, 3, 3)
        cap = rng.integers(4, 20, 3).astype(float)
        L = 16
        counts, ok, worst = layer_split(cost[None], extra[None], np.ones((1, 3)),
                                        np.zeros((1, 3)), cap[None], np.ones((1, 3), bool), L)
        best = min((max(e + n * c for e, n, c in zip(extra, ns, cost)), ns)
                   for ns in itertools.product(range(1, L), repeat=3)
                   if sum(ns) == L and all(n <= k for n, k in zip(ns, cap)))[0] \
            if cap.sum() >= L else None
        assert ok[0] == (best is not None)
        if ok[0]:
            assert counts.sum() == L and (counts[0] <= cap).all()
            assert worst[0] == pytest.approx(best)


def test_batch_split_makes_the_pipelines_finish_together():
    first, pace = np.array([[5.0, 8.0, 3.0]]), np.array([[1.0, 2.0, 0.5]])
    counts, finish = batch_split(first, pace, [40])
    assert counts.sum() == 40 and (counts >= 1).all()
    best = min(max(f + (n - 1) * r for f, n, r in zip(first[0], ns, pace[0]))
               for ns in itertools.product(range(1, 39), repeat=3) if sum(ns) == 40)
    assert finish.max() == pytest.approx(best)


def test_a_toy_cluster_for_the_runner_is_predicted_too():
    toy = cluster_from_dict({"name": "toy", "groups": [
        {"chip": "a100-80gb", "devices_per_node": 4, "name": "fast"},
        {"chip": "rtx-3090", "devices_per_node": 4, "name": "slow"}]})
    tiny = stage_setting(model_preset("tiny"))
    plan = HeteroPlan.parse("batch=6 micro=3: fast[0:2] t2 L3 > slow[0:1] t1 L1; "
                            "batch=2 micro=1: slow[2:4] t2 L4")
    pred = predict_plan(plan, toy, tiny, 8)
    assert pred.fits and 0 < pred.mfu < 1 and len(pred.pipeline_s) == 2
