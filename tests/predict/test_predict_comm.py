"""Communication bytes and α-β costs by hand, the overlap model, and the pipeline bubble."""

import math

import numpy as np
import pytest

from parex.config import TrainConfig, model_preset
from parex.hardware import load_chip
from parex.layout import Axis, Layout
from parex.predict import alpha_beta, predict
from parex.predict import time as time_model
from parex.predict.shapes import Grid

TINY = model_preset("tiny")  # 875,264 parameters; L=4, D=128, T=128, V=256
N, L, D, T = 875264, 4, 128, 128
EMBED_PARAMS = 786432 + 65536 + 16384  # matrices, tokens + unembed, positions: 868,352
TRAIN = TrainConfig(global_batch=16)
FP32 = {"recipe": "parex", "dtype": "float32"}  # the bytes below are float32 state and activations


def by_kind(layout, convention, train=TRAIN, model=TINY):
    return predict(model, train, layout, "a100-80gb", convention=convention,
                   **FP32).comm_bytes_per_device


def test_data_parallel_all_reduces_every_gradient_once():
    kinds = by_kind(Layout(data=8), "gpu")
    assert kinds["all-reduce"] == 4 * N + 4  # float32 gradients and the loss
    assert sum(kinds.values()) == kinds["all-reduce"]


def test_zero_stages_by_convention():
    gpu, cpu = by_kind(Layout(data=8, zero=2), "gpu"), by_kind(Layout(data=8, zero=2), "xla-cpu")
    assert gpu["reduce-scatter"] == 4 * N + 4 and gpu["all-reduce"] == 0  # sharded gradients
    # updated parameters back from their shards: every one (ZeRO's flat buffer)
    assert gpu["all-gather"] == 4 * N
    assert cpu["reduce-scatter"] == 0  # the CPU compiler all-reduces, then slices
    # ... and moves the token-embedding gradient by all-to-all instead (its lookup output)
    assert cpu["all-to-all"] == 2 * T * D * 4
    # + the global norm's partial sums: one float per sharded leaf (7 matrices, 8 vectors)
    assert cpu["all-reduce"] + 256 * D * 4 == 4 * N + 4 + 4 * 15
    # ZeRO-1 updates a shard too, so its gradients are reduce-scattered: data parallelism's
    # volume, as the ZeRO paper's P_os (Rajbhandari et al. 2020, section 7) and Megatron-Core's
    # distributed optimizer
    zero1 = by_kind(Layout(data=8, zero=1), "gpu")
    assert zero1["reduce-scatter"] == 4 * N + 4 and zero1["all-reduce"] == 0
    assert zero1["all-gather"] == 4 * N
    # parex's step shards the matrices and the vectors (norms' scales, D-sized biases) only:
    # GPT's QKV and MLP-input biases, (3 + 4) · D per layer, stay whole
    step = predict(TINY, TRAIN, Layout(data=8, zero=2), "a100-80gb", convention="xla-cpu",
                   **FP32)
    gathers = sum(c["bytes"] for c in step.collectives if c["name"] == "zero-gather")
    assert gathers == 4 * (N - L * 7 * D)


def test_the_ideal_programs_zero_runs_over_data_and_context():
    """Megatron-Core's distributed optimizer shards over data × context (Grid.zero_group):
    with seq > 1 its ZeRO-1 reduce-scatters and gathers back over both, even where data is 1;
    parex's step gathers over data alone."""
    for layout, axes in ((Layout(data=4, seq=2, cp="ring", zero=1), ("data", "seq")),
                         (Layout(seq=8, cp="ring", zero=1), ("seq",))):
        p = predict(TINY, TRAIN, layout, "a100-80gb", convention="gpu", **FP32)
        gathers = [c for c in p.collectives if c["name"] == "zero-gather"]
        assert [tuple(c["axes"]) for c in gathers] == [axes]
        assert gathers[0]["bytes"] == 4 * N
        assert not [c for c in p.collectives if c["name"] == "grad-reduce"
                    and c["kind"] == "all-reduce"]
    step = predict(TINY, TRAIN, Layout(data=4, seq=2, cp="ring", zero=1), "a100-80gb",
                   convention="xla-cpu", **FP32)
    assert {tuple(c["axes"]) for c in step.collectives if c["name"] == "zero-gather"} == {
        ("data",)}


def test_fsdp_gathers_each_layer_forward_and_backward():
    kinds = by_kind(Layout(fsdp=8), "gpu")
    # each layer's flat buffer, every parameter, float32, twice (forward and backward): the
    # stacked matrices and each block's biases and norms (3D + 4D + 6D); then the tables and
    # the final norm once
    layers = 4 * (786432 + L * 13 * D)
    assert kinds["all-gather"] == 2 * layers + 4 * (65536 + 16384 + 2 * D)
    assert kinds["reduce-scatter"] == 4 * N + 4


def test_fsdp_under_sp_gathers_inside_the_manual_regions_and_reduce_scatters_there():
    """The weights of SP's regions are gathered inside them, again in the backward (not kept),
    and their gradients leave by explicit reduce-scatters even on the CPU."""
    layout, x = Layout(fsdp=2, tensor=4, sp=True), 8 * T * D * 4  # (B/fsdp, T, D) float32
    cpu, plain = by_kind(layout, "xla-cpu"), by_kind(layout.replace(sp=False), "xla-cpu")
    layer_w = 4 * 786432 / 4  # the stacked matrices, float32, split by tensor
    head = 4 * 65536 / 4 + 4 * T / 4 * D  # tokens and unembed, and the positions' T/t rows
    positions = 4 * T * D / 2  # SP: each tensor shard's position gradient, gathered
    vectors = 4 * (6 * L + 2) * D  # norms' scales and D-sized biases, whole, once
    fsdp_gathers = cpu["all-gather"] - (6 * L + 2) * x - positions  # SP's activations
    assert fsdp_gathers == 2 * layer_w + head + vectors  # each layer forward and backward
    matrices = 4 * (786432 + 65536) / 4  # every matrix but the position table
    assert cpu["reduce-scatter"] == matrices + (4 * L + 2) * x  # + SP's activations
    assert plain["reduce-scatter"] == 0  # left to XLA: all-reduce, then slice


def test_tensor_parallel_all_reduces_by_hand():
    x = 16 * T * D * 4  # one (B, T, D) float32 activation per device
    for remat, per_block in (("none", 4), ("full", 5)):
        kinds = by_kind(Layout(tensor=8), "gpu", TRAIN.replace(remat=remat))
        cross_entropy = 3 * 16 * T * 4
        assert kinds["all-reduce"] == (per_block * L + 2) * x + cross_entropy
    sp = by_kind(Layout(tensor=8, sp=True), "gpu")
    # + the embedding (reduce-scatter, backward all-gather) and the head (all-gather, backward
    # reduce-scatter), as in Megatron, which also all-gathers each column-parallel input again
    # in the backward (2 per block and the head's): it saves them sequence-split
    assert sp["reduce-scatter"] == (4 * L + 2) * x
    assert sp["all-gather"] == (4 * L + 2 + 2 * L + 1) * x
    # on the CPU XLA merges the head's re-gather with its forward gather, and under full remat
    # the blocks' with the recomputed forward's
    cpu = by_kind(Layout(tensor=8, sp=True), "xla-cpu")
    assert cpu["all-gather"] - 4 * T * D == (6 * L + 2) * x  # - GPT's position gradient
    full = by_kind(Layout(tensor=8, sp=True), "xla-cpu", TRAIN.replace(remat="full"))
    assert full["all-gather"] - 4 * T * D == (6 * L + 2) * x
    llama = model_preset("tiny-llama")  # SwiGLU: the second MLP input adds one backward
    p = predict(llama, TRAIN, Layout(tensor=4, data=2), "a100-80gb", **FP32)
    tp = sum(c["bytes"] for c in p.collectives if c["name"] == "tp")
    assert tp == (5 * L + 2) * 8 * T * D * 4


def test_microbatches_multiply_reductions_on_xla_only_where_xla_accumulates():
    train = TRAIN.replace(microbatch=1)  # 2 microbatches per replica on 8 replicas
    # parex's step accumulates each data replica's gradients locally and reduces once...
    assert by_kind(Layout(data=8), "xla-cpu", train)["all-reduce"] == 4 * N + 4
    assert by_kind(Layout(data=8), "gpu", train)["all-reduce"] == 4 * N + 4
    # ... except where the data axis cannot be manual (here sequence parallelism): there XLA
    # reduces inside the loop, once per microbatch
    sp = predict(TINY, train, Layout(data=2, tensor=4, sp=True), "cpu-local",
                 convention="xla-cpu")
    # (the weights of SP's regions are reduced inside them, the rest by XLA after them)
    counts = [c["count"] for c in sp.collectives if c["name"] == "grad-reduce"]
    assert counts == [8.0, 8.0]  # 16 sequences / (2 replicas · 1 per microbatch)


def test_pipeline_sends_activations_both_ways():
    kinds = by_kind(Layout(stage=2, data=4, schedule="1f1b", microbatches=2), "gpu")
    x = 2 * T * D * 4  # b = 16 / (4 · 2) = 2 sequences per microbatch
    assert kinds["collective-permute"] == 2 * 2 * x  # forward and backward per microbatch


@pytest.mark.parametrize("convention", ["gpu", "xla-cpu"])
@pytest.mark.parametrize("remat, forwards", [("none", 1), ("selective", 2), ("full", 2)])
def test_ring_attention_permutes_by_hand(convention, remat, forwards):
    """seq=4: per layer, k and v 3 hops each forward (again when remat recomputes the
    attention); the custom VJP's ring in float32: (k, v) on hop 1, (k, v, dk, dv) on hops 2-3,
    (dk, dv) home. One device's k: b = 16/2 sequences, T/4 = 32 tokens, K = 8, Dh = 16."""
    p = predict(TINY, TRAIN.replace(remat=remat), Layout(data=2, seq=4, cp="ring"),
                "a100-80gb", convention=convention, dtype="float32")
    ring = [(c["count"], c["bytes_per_op"]) for c in p.collectives if c["name"] == "cp-ring"]
    block = 8 * 32 * 8 * 16 * 4
    assert ring == [(forwards * L * 2 * 3, block), (L * 2, 2 * block), (L * 2, 4 * block)]
    assert p.comm_bytes_per_device["collective-permute"] == (6 * forwards + 4 * 3) * L * block


def test_two_way_ring_sends_no_four_block_buffers():
    p = predict(TINY, TRAIN, Layout(data=4, seq=2, cp="ring"), "a100-80gb", dtype="float32")
    ring = [(c["count"], c["bytes_per_op"]) for c in p.collectives if c["name"] == "cp-ring"]
    block = 4 * 64 * 8 * 16 * 4  # b = 16/4, T/2 = 64 tokens
    assert ring == [(L * 2, block), (L * 2, 2 * block)]  # forward hop; backward hop and home


def test_group_shape_places_tensor_innermost():
    g = Grid.from_layouts([Layout(data=4, tensor=8), Layout(data=8)], TRAIN, TINY)
    size, stride = alpha_beta.group_shape(g, (Axis.TENSOR,))
    assert list(size) == [8, 1]
    size, stride = alpha_beta.group_shape(g, (Axis.DATA, Axis.FSDP))
    assert list(size) == [4, 8] and list(stride) == [8, 1]


def test_ring_costs_by_hand_and_hierarchy():
    """NCCL's rings (parex.predict.collectives, NCCL's tuning constants): Simple inside a node
    (base 8.4 µs, NVLink steps of 3.4 µs); across nodes LL128 (base 14 µs, network steps of
    4 µs, 120 of 128 bytes) beats Simple there (network steps of 14 µs, the multi-node
    all-reduce's plateau factor 1.4)."""
    chip = load_chip("a100-80gb")
    S, bw = 1e9, 300e9 * chip.network_efficiency
    inside = alpha_beta.collective_seconds("all-reduce", np.array([8]), np.array([1]), S, chip)[0]
    assert inside == pytest.approx(2 * 7 / 8 * S / bw + (8.4 + 2 * 8 * 3.4) * 1e-6)
    # 4 nodes: each GPU's own NIC carries its 1/8 of the bytes that cross nodes, the slowest
    # tier; every step of the ring at the network's latency
    across = alpha_beta.collective_seconds("all-reduce", np.array([32]), np.array([1]), S, chip)[0]
    inter = 25e9 * chip.network_efficiency
    bytes_time = 2 * 3 / 4 * S / 8 / inter
    assert across == pytest.approx(bytes_time / 0.92 + (14.0 + 2 * 32 * 4.0) * 1e-6)
    assert across < bytes_time + 1.4 * (8.4 + 2 * 32 * 14.0) * 1e-6 and across > inside
    # a data axis outside an 8-wide tensor axis crosses nodes at every step (one pass)
    strided = alpha_beta.collective_seconds("all-gather", np.array([4]), np.array([8]), S, chip)[0]
    assert strided == pytest.approx(3 / 4 * S / inter + (8.4 + 4 * 14.0) * 1e-6)  # Simple


def test_tree_latency_wins_for_small_messages():
    """8 bytes on 8 GPUs: NCCL's LL tree (6.8 µs + a chain of 7 steps each way at 0.6 µs)
    beats its LL ring (6.6 µs + 16 steps)."""
    chip = load_chip("a100-80gb")
    t = alpha_beta.collective_seconds("all-reduce", np.array([8]), np.array([1]), 8.0, chip)[0]
    tree = (6.8 + 2 * 7 * 0.6) * 1e-6 + 2 * 7 / 8 * 8 / (300e9 * 0.8) * 3.8
    assert t == pytest.approx(tree)
    assert tree < (6.6 + 2 * 8 * 0.6) * 1e-6


def test_gradient_reduction_hides_behind_the_backward_pass():
    model = model_preset("gpt2-medium").replace(dtype="bfloat16", vocab=50304)
    train = TrainConfig(global_batch=64, seq_len=1024)
    p = predict(model, train, Layout(data=64), load_chip("a100-80gb"))
    reduce = sum(c["seconds"] for c in p.collectives if c["name"] == "grad-reduce")
    assert reduce > 0
    # at most everything, at least the last layer's share
    assert reduce / model.layers <= p.step_time_s["exposed_comm"] <= reduce
    tp = predict(model, train, Layout(data=8, tensor=8), load_chip("a100-80gb"))
    critical = sum(c["seconds"] for c in tp.collectives if c["name"] in ("tp", "cross-entropy"))
    assert tp.step_time_s["exposed_comm"] >= critical  # Megatron's all-reduces are exposed


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_bubble_matches_the_published_fraction(schedule):
    # (p − 1)/(m + p − 1) of the step for GPipe and 1F1B with equal per-microbatch costs
    p, m = 4, 8
    g = Grid.from_layouts([Layout(stage=p, schedule=schedule, microbatches=m)],
                          TrainConfig(global_batch=8), TINY)
    busy = np.array([3.0])  # seconds per microbatch on a stage (t_F = 1, t_B = 2 units)
    bubble = time_model.bubble_seconds(g, busy, "none", np.zeros(1))[0]
    # parex's executor recomputes each chunk: t_F + t_B = 1 + 3 in units of busy / 4
    assert bubble / (bubble + m * busy[0]) == pytest.approx((p - 1) / (m + p - 1))


def test_interleaving_shrinks_the_bubble_by_v():
    p, m, v = 4, 8, 2
    train = TrainConfig(global_batch=8)
    flat = Grid.from_layouts([Layout(stage=p, schedule="1f1b", microbatches=m)], train, TINY)
    inter = Grid.from_layouts([Layout(stage=p, schedule="interleaved", microbatches=m,
                                      virtual_stages=v)], train, TINY)
    busy = np.array([3.0])
    b1 = time_model.bubble_seconds(flat, busy, "none", np.zeros(1))[0]
    bv = time_model.bubble_seconds(inter, busy, "none", np.zeros(1))[0]
    assert bv / (m * busy[0]) == pytest.approx((p - 1) / (v * m), rel=0.05)
    assert math.isclose(b1 / bv, v, rel_tol=0.05)


def test_every_term_adds_up():
    p = predict(model_preset("megatron-39.1b").replace(dtype="bfloat16"),
                TrainConfig(global_batch=1536, microbatch=4, remat="full"),
                Layout(data=32, tensor=8, stage=2, schedule="1f1b"), "a100-80gb",
                recipe="mixed")
    st = p.step_time_s
    assert st["total"] == pytest.approx(st["compute"] + st["exposed_comm"] + st["bubble"])
    assert st["bubble"] > 0 and st["exposed_comm"] > 0
    assert sum(c["bytes"] for c in p.collectives) == pytest.approx(
        sum(p.comm_bytes_per_device.values()))
    assert p.memory_bytes_per_device["total"] == pytest.approx(
        sum(p.memory_bytes_per_device[k] for k in ("argument", "grads", "activations", "temp")))
    assert 0 < p.mfu < p.hfu < 1


@pytest.mark.parametrize("convention", ["xla-cpu", "gpu"])
def test_every_collective_family_has_a_place_in_the_step_time(convention):
    """No family's seconds are silently dropped: each is exposed, hidden behind a window of
    work, or timed apart (ring behind half the work, the pipeline by its own term)."""
    timed = set(time_model.EXPOSED + time_model.OVERLAPPED
                + time_model.HIDE_BEHIND_COMPUTE + time_model.TIMED_APART)
    layouts = ["data=8,zero=1", "fsdp=8", "data=2,tensor=4,sp=on", "data=2,seq=4,cp=ring",
               "data=2,seq=2,cp=ulysses,tensor=2", "data=2,seq=2,cp=ring,stage=2,microbatches=2",
               "seq=4,cp=ulysses,stage=2,schedule=zbv,virtual=2,microbatches=4",
               "fsdp=2,tensor=2,stage=2,schedule=zbh1,microbatches=2",
               "data=4,stage=2,partition=3:1,microbatches=4"]
    names = set()
    for text in layouts:
        p = predict(model_preset("tiny"), TrainConfig(), Layout.parse(text), "cpu-local",
                    convention=convention)
        names |= {c["name"] for c in p.collectives}
    for text in ["seq=2,cp=ring,expert=2,tensor=2", "expert=4,tensor=2,expert_tensor=1"]:
        p = predict(model_preset("tiny-moe"), TrainConfig(), Layout.parse(text), "cpu-local",
                    convention=convention)
        names |= {c["name"] for c in p.collectives}
    assert {"seq-embedding", "seq-head", "seq-grads", "cp-ring", "pipeline",
            "stage-regroup"} & names
    assert names <= timed, names - timed


@pytest.mark.parametrize("spec", [
    "fsdp=2,stage=2", "data=2,fsdp=2,stage=2,schedule=zbh1", "fsdp=2,tensor=2,stage=2",
    "fsdp=2,tensor=2,sp=on,stage=2", "fsdp=2,seq=2,cp=ring,stage=2", "fsdp=8",
    "data=2,zero=3,stage=2,fsdp=2", "data=4,stage=2"])
def test_the_predictor_runs_fsdp_by_hand_where_the_pipeline_does(spec):
    """comm._fsdp_in_stages's terms (its embedding and head sum over stage, data and fsdp at
    once) exactly where the executor's rule (parallel.fsdp_stage.manual_fsdp) makes fsdp a
    manual axis of a pipeline."""
    from parex.parallel.fsdp_stage import manual_fsdp

    layout = Layout.parse(spec)
    p = predict(model_preset("tiny"), TrainConfig(global_batch=16), layout, "cpu-local",
                convention="xla-cpu")
    # the by-hand family spans the batch axes too (those of size > 1: every layout here has one);
    # the executor's own one spans stage alone
    by_hand = [c for c in p.collectives if c["name"] == "pipeline-shared"
               and c["axes"] != ["stage"] and c["count"] > 0]
    assert bool(by_hand) == (layout.stage > 1 and manual_fsdp(layout) > 1)
