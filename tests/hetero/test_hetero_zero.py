"""ZeRO between the pipelines of a heterogeneous plan (parex.hetero.sharding): the memory and
the collectives follow ZeRO's definitions (Rajbhandari et al. 2020, Table 1 and §7)."""

import math

import pytest

from parex.cluster import cluster_from_dict
from parex.config import model_preset
from parex.hetero.costs import stage_setting
from parex.hetero.links import tensor_chip
from parex.hetero.plan import HeteroPlan, PlanError
from parex.hetero.predict import predict_plan
from parex.hetero.search import search

MODEL = model_preset("llama2-7b")
SETTING = stage_setting(MODEL, 4096)
# one server of eight RTX 3090s: Llama-2 7B's whole state (16 B × 6.7e9 = 108 GB) fits its
# 192 GB once, not twice
SERVER = cluster_from_dict({"name": "one-3090-server", "inter_group_gbps": 10,
                            "groups": [{"chip": "rtx-3090", "nodes": 1}]})
# Llama-2 7B's block: attention 4·D² + SwiGLU MLP 3·D·F + two RMSNorm scales of D
D, F = 4096, 11008
BLOCK = 4 * D * D + 3 * D * F + 2 * D


def four_pipelines(zero: int) -> HeteroPlan:
    """Four pipelines of two stages, stage j of every pipeline on neighbouring devices."""
    pipes = [f"batch=4 micro=4: rtx-3090[{i}:{i + 1}] L16 > rtx-3090[{4 + i}:{5 + i}] L16"
             for i in range(4)]
    return HeteroPlan.parse("; ".join(pipes + ([f"zero={zero}"] if zero else [])))


def test_the_zero_stage_is_part_of_the_plan_value():
    plan = four_pipelines(1)
    assert str(plan).endswith("; zero=1") and HeteroPlan.parse(str(plan)) == plan
    assert HeteroPlan.from_json(plan.to_json()) == plan and plan.to_json()["zero"] == 1
    assert "zero" not in str(four_pipelines(0))
    with pytest.raises(PlanError, match="zero=2 between pipelines: use 0 .*, 1 .* or 3"):
        predict_plan(HeteroPlan.parse(str(four_pipelines(0)) + "; zero=2"), SERVER, SETTING, 16)


def test_a_layers_state_per_device_is_zeros_share_of_16_bytes_per_parameter():
    preds = {z: predict_plan(four_pipelines(z), SERVER, SETTING, 16) for z in (0, 1, 3)}
    # pipeline 1's second stage: 16 blocks and the head, on one device (t1: whole blocks)
    s0, s1, s3 = (preds[z].stages[1] for z in (0, 1, 3))
    assert s0.elements["block"] == s3.elements["block"] == BLOCK
    n = 16 * BLOCK + s0.elements["last"]
    state = lambda s: s.memory["params"] + s.memory["grads"] + s.memory["optimizer"]
    assert state(s0) == pytest.approx(16 * n)  # a whole replica: 2 + 2 + 12 bytes
    assert state(s1) == pytest.approx((2 + 2 + 12 / 4) * n)  # optimizer state over 4 pipelines
    assert state(s3) == pytest.approx(16 * n / 4)  # everything over the 4 pipelines
    # ZeRO-3 holds one block's gathered parameters and its gradient on top (2 + 2 bytes)
    assert s3.memory["temp"] - s0.memory["temp"] == pytest.approx(4 * BLOCK)
    assert s1.memory["activations"] == s0.memory["activations"]
    # the optimizer updates its own shard only
    assert s1.opt_s == pytest.approx(s0.opt_s / 4) and s3.opt_s == pytest.approx(s0.opt_s / 4)


def test_zero3_gathers_every_block_each_microbatch_over_the_pipelines():
    preds = {z: predict_plan(four_pipelines(z), SERVER, SETTING, 16) for z in (0, 1, 3)}
    stage = preds[3].stages[0]  # 16 blocks and the embedding, its peers in the same server
    chip = tensor_chip(SERVER, stage.stage)
    bandwidth = chip.intra_node.bandwidth * chip.network_efficiency
    # per microbatch: each block's 2-byte parameters gathered for the forward and again for
    # the backward, its 2-byte gradient reduce-scattered, each a ring over P = 4 that moves
    # (P − 1)/P of the buffer through every device's link
    moved = 3 * (16 * BLOCK + stage.elements["first"]) * 2 * 3 / 4
    assert stage.shard_s == pytest.approx(moved / bandwidth, rel=0.15)
    plain = preds[0].stages[0]
    assert stage.t_f - plain.t_f == pytest.approx(stage.shard_s / 3, rel=1e-6)
    assert stage.t_b - plain.t_b == pytest.approx(2 * stage.shard_s / 3, rel=1e-6)
    # ... and nothing is reduced after the last backward; stages 0 and 1 reduce the same
    # bytes there (ZeRO §7: stage 1's reduce-scatter + all-gather is the all-reduce's 2Ψ)
    assert all(s.reduce_end == s.compute_end for s in preds[3].stages)
    tail = [[s.reduce_end - s.compute_end for s in preds[z].stages] for z in (0, 1)]
    assert tail[0] == pytest.approx(tail[1]) and min(tail[0]) > 0
    assert preds[1].stages[0].shard_s == 0.0


def test_sharding_the_state_lets_more_pipelines_fit():
    found = {z: search(MODEL, SERVER, 32, 4096, top=1, remats=("full",), zero=z)
             for z in (0, 1)}
    assert found[1].best.plan.zero == 1 and found[0].best.plan.zero == 0
    # a replica fits the server's 192 GB once: zero 0 runs one pipeline; with the optimizer
    # state sharded (4 + 12/P bytes per parameter) two pipelines fit, and run faster
    assert len(found[0].best.plan.pipelines) == 1
    assert len(found[1].best.plan.pipelines) >= 2
    assert found[1].best.step_time_s["total"] < found[0].best.step_time_s["total"]
    assert found[1].best.fits and math.isfinite(found[1].best.mfu)
