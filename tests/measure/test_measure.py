"""What the compiled step shows agrees with the textbook analysis of each layout."""

import json

import pytest

from parex.config import TrainConfig, model_preset
from parex.layout import Layout
from parex.measure.compiled import compile_layout, compiled_stats
from parex.measure import measure

TINY = model_preset("tiny")
TRAIN = TrainConfig(global_batch=16, seq_len=64)
FP32 = 4


def stats(text):
    step, compiled, _ = compile_layout(TINY, TRAIN, Layout.parse(text))
    return compiled_stats(compiled, step)


@pytest.fixture(scope="module")
def dp():
    return stats("data=8")


def test_dp_gradient_all_reduce_moves_the_gradient_bytes(dp):
    """Plain DP all-reduces every gradient once: 4 bytes × N parameters, plus the scalar loss.
    XLA knows the position rows past the 64 tokens used get a zero gradient and skips them."""
    on_data = sum(c.total_bytes for c in dp["collectives"]
                  if c.kind == "all-reduce" and c.axes == ("data",))
    unused_positions = (TINY.seq_len - TRAIN.seq_len) * TINY.hidden
    assert on_data == FP32 * (TINY.n_params - unused_positions) + FP32
    assert {c.axes for c in dp["collectives"]} == {("data",)}


def test_gradient_accumulation_reduces_over_data_once_per_step():
    """With 2 microbatches each data replica sums its gradients locally, then one psum of the
    whole gradient tree (the unused position rows' zeros too): not one reduction per
    microbatch."""
    accumulated = stats("data=8,microbatches=2")
    on_data = [(c.count, c.total_bytes) for c in accumulated["collectives"]
               if c.kind == "all-reduce" and c.axes == ("data",)]
    assert on_data == [(1, FP32 * TINY.n_params + FP32)]  # + the loss


def test_fsdp_argument_memory_is_one_nth_of_dp(dp):
    """Parameters and AdamW moments are sharded 8 ways; the batch and a few biases are not."""
    fsdp = stats("fsdp=8")
    ratio = fsdp["memory_bytes_per_device"]["argument"] / dp["memory_bytes_per_device"]["argument"]
    assert 1 / 8 <= ratio < 1 / 8 * 1.1
    assert any(c.kind == "all-gather" and c.axes == ("fsdp",) for c in fsdp["collectives"])


def test_zero_stages_shrink_state_in_order(dp):
    """ZeRO-1 shards the optimizer state (2 of the 3 copies: Adam's moments), ZeRO-3 everything."""
    args = {z: stats(f"data=8,zero={z}")["memory_bytes_per_device"]["argument"] for z in (1, 3)}
    full = dp["memory_bytes_per_device"]["argument"]
    assert args[1] == pytest.approx(full * (1 + 2 / 8) / 3, rel=0.05)
    assert args[3] == pytest.approx(full / 8, rel=0.1)


def test_tensor_parallel_shows_megatrons_per_layer_all_reduces():
    """Megatron: per layer, one all-reduce of the (B, T, D) activation after attention and one after
    the MLP in the forward pass, and the same two in the backward pass: 4L. The vocab-parallel
    embedding (forward) and logits (backward) add one each."""
    tp = stats("tensor=8")
    activation = TRAIN.global_batch * TRAIN.seq_len * TINY.hidden * FP32
    per_layer = sum(c.count for c in tp["collectives"]
                    if c.kind == "all-reduce" and c.axes == ("tensor",)
                    and abs(c.bytes - activation) <= 16)
    assert per_layer == 4 * TINY.layers + 2


def test_measure_reports_every_field_and_serialises():
    m = measure(TINY, TRAIN.replace(steps=3), Layout(data=2, tensor=4))
    out = json.loads(m.dumps())
    assert len(out["losses"]) == 3
    assert out["step_time_s"]["min"] <= out["step_time_s"]["median"] <= out["step_time_s"]["max"]
    mem = out["memory_bytes_per_device"]
    assert mem["total"] == mem["argument"] + mem["output"] - mem["alias"] + mem["temp"] > 0
    assert out["flops_per_device"] > 0 and out["tokens_per_s"] > 0
    assert {"data", "tensor"} <= {a for c in out["collectives"] for a in c["axes"]}


@pytest.mark.parametrize("text", ["data=8", "tensor=8", "data=2,fsdp=2,tensor=2,microbatches=2"])
def test_matmul_flops_count_every_loop_trip(text):
    """Every dot of the compiled step, loop trips included, is the model's 6N + 12·L·D·T per token
    split over the devices (6N also counts biases and norms, about 0.7% of N here); XLA's own cost
    analysis counts each loop body once and falls far short."""
    from parex.model.transformer import flops_per_token

    got = stats(text)
    tokens = TRAIN.global_batch * TRAIN.seq_len / 8
    expected = flops_per_token(TINY, TRAIN.seq_len) * tokens
    assert got["matmul_flops_per_device"] == pytest.approx(expected, rel=0.015)
    assert got["flops_per_device"] < 0.6 * expected
