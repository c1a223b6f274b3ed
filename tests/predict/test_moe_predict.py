"""Mixtures of experts in the predictor (parex.model.moe, issue 32): the expert axis's all-to-alls and
gradient reductions, routed experts' state, the padded dispatch's FLOPs, against the compiled
step on the emulated mesh (xla-cpu); the ideal program's terms by hand; Mixtral 8x7B at scale
beside Megatron-LM's published 468 TFLOP/s per GPU."""

import jax
import numpy as np
import pytest

from parex.config import TrainConfig, model_preset
from parex.hardware import load_chip
from parex.layout import Axis, Layout
from parex.measure.compiled import compile_layout, compiled_stats
from parex.record import KINDS, bytes_by_kind
from parex.predict import alpha_beta, predict
from parex.predict.comm import Term
from parex.predict.shapes import Grid, model_sizes

TINY_MOE = model_preset("tiny-moe")  # L=4, D=128, T=128, E=8, k=2, F_e=128, dropless: C = T
TRAIN = TrainConfig(global_batch=16)
SLOTS = 8 * 128 * 128 * 4  # one sequence's dispatch buffer: E·C·D float32


def compare(spec, model=TINY_MOE, remat="none"):
    train = TRAIN.replace(remat=remat)
    layout = Layout.parse(spec)
    step, compiled, _ = compile_layout(model, train, layout, jax.devices()[:layout.n_devices])
    return (predict(model, train, layout, "cpu-local", convention="xla-cpu"),
            compiled_stats(compiled, step))


# the five layouts of issue 32, about 4 s of compiling each; MoE parallel folding (issue 43):
# DeepSeek-V3's in small, attention data=4 × tensor=2, the experts over all 8 devices
LAYOUTS = ["data=2,expert=4", "expert=8", "fsdp=2,expert=4", "data=2,expert=2,tensor=2",
           "data=2,expert=4,zero=1", "expert=4,tensor=2,expert_tensor=1",
           "seq=2,cp=ulysses,expert=4"]  # the slots split over seq (MeshOps.dispatch)


@pytest.mark.parametrize("spec", LAYOUTS)
def test_collectives_memory_and_flops_match_the_compiled_step(spec):
    p, measured = compare(spec)
    check(p, measured)


# beyond the five: a capacity with F_e ≠ D (C = ceil(1·2·128/8) = 32), full remat (the
# dispatch's two all-to-alls again in the recomputed forward), TP with a capacity under full
# remat, selective remat with fsdp; gradients sharded over data by ZeRO-2/3 and with data and
# fsdp both (XLA sums the matmul weights over data × fsdp, then their shard over expert)
@pytest.mark.slow
@pytest.mark.parametrize("spec, changes, remat", [
    ("data=2,expert=4", {"expert_ffn": 64, "capacity_factor": 1.0}, "none"),
    ("data=2,expert=4", {}, "full"),
    ("data=2,expert=2,tensor=2", {"capacity_factor": 1.25}, "full"),
    ("fsdp=2,expert=4", {}, "selective"),
    ("data=2,expert=4,zero=2", {}, "none"), ("data=2,expert=4,zero=3", {}, "none"),
    ("data=2,fsdp=2,expert=2", {}, "none"), ("expert=4,tensor=2", {}, "none"),
    ("data=2,expert=2,tensor=2,sp=on", {}, "none"), ("data=2,expert=2,tensor=2,sp=on", {}, "full"),
    ("expert=4,tensor=2,sp=on", {"shared_experts": 1}, "none"),
    ("data=2,expert=2,microbatches=2", {}, "none"),  # reduced per microbatch (step.py)
    ("data=2,expert=2,microbatches=2", {"bias_rate": 0.01}, "none"),  # + the load's sums
    # folded: the expert group over tensor only (EDP = 4), with ZeRO-1, SP, full remat (the
    # combine's sum not recomputed) and a capacity (C = 40, 20 per tensor device)
    ("data=4,tensor=2,expert_tensor=1", {}, "none"),
    ("data=2,expert=2,tensor=2,expert_tensor=1,zero=1", {}, "none"),
    ("expert=4,tensor=2,expert_tensor=1,sp=on", {}, "none"),
    ("expert=4,tensor=2,expert_tensor=1", {}, "full"),
    ("expert=4,tensor=2,expert_tensor=1", {"capacity_factor": 1.25}, "none"),
    ("seq=4,cp=ulysses,data=2", {}, "none"), ("seq=2,cp=ulysses,expert=2,data=2", {}, "full"),
    ("seq=2,cp=ulysses,expert=2,tensor=2", {"capacity_factor": 1.25}, "none")])
def test_more_moe_steps_match(spec, changes, remat):
    check(*compare(spec, TINY_MOE.replace(**changes), remat))


@pytest.mark.slow
@pytest.mark.parametrize("spec, remat", [("seq=2,cp=ring,expert=4", "full"),
                                         ("seq=8,cp=ring", "none")])
def test_ring_attention_gathers_the_routing_by_all_reduce(spec, remat):
    """Under ring attention the routing undoes the zig-zag order with a gather across the
    shards, which XLA partitions as an all-reduce (comm.routing_terms); the slots are split
    over seq as under Ulysses. (Ring attention's own matmul count is test_predict_flops'.)"""
    p, measured = compare(spec, remat=remat)
    assert p.memory_bytes_per_device["total"] / measured["memory_bytes_per_device"]["total"] \
        == pytest.approx(1.0, abs=0.10)
    kinds = bytes_by_kind(measured["collectives"])
    for kind in KINDS:
        assert p.comm_bytes_per_device[kind] == pytest.approx(kinds[kind], rel=1e-5,
                                                              abs=128), kind


@pytest.mark.slow
def test_a_switch_gpt_with_a_shared_expert_matches():
    """GPT family (biases), top-1 with the probability as gate, a shared expert, capacity 1.0:
    the shared experts' output matmul is counted once (full remat skips it)."""
    switch = model_preset("tiny").replace(name="tiny-switch", experts=4, top_k=1,
                                          expert_ffn=256, capacity_factor=1.0, shared_experts=1)
    for spec in ("data=2,expert=4", "expert=4,tensor=2,sp=on"):
        check(*compare(spec, switch))


def check(p, measured):
    mem, pmem = measured["memory_bytes_per_device"], p.memory_bytes_per_device
    assert pmem["argument"] == mem["argument"]  # routed experts' state: E/expert experts
    assert pmem["total"] / mem["total"] == pytest.approx(1.0, abs=0.10)
    # the padded dispatch's matmuls, every loop trip, and XLA's count (loop bodies once)
    assert p.hardware_flops_per_device / measured["matmul_flops_per_device"] == \
        pytest.approx(1.0, abs=0.01)
    assert p.flops_per_device / measured["flops_per_device"] == pytest.approx(1.0, abs=0.05)
    kinds = bytes_by_kind(measured["collectives"])
    assert p.comm_bytes_per_device["all-to-all"] == kinds["all-to-all"]  # to the byte
    for kind in KINDS:  # up to the loss's and the router statistics' scalars XLA reduces
        assert p.comm_bytes_per_device[kind] == pytest.approx(kinds[kind], rel=1e-5,
                                                              abs=128), kind


def by_name(layout, convention="xla-cpu", model=TINY_MOE, train=TRAIN, **kw):
    p = predict(model, train, Layout.parse(layout), "cpu-local" if convention == "xla-cpu"
                else "h100-sxm", convention=convention, **kw)
    return p, [(c["name"], c["kind"], tuple(c["axes"]), c["count"], c["bytes_per_op"])
               for c in p.collectives]


def test_routed_experts_are_counted_apart_and_add_up():
    sizes = model_sizes(TINY_MOE)
    assert sizes.n_params == TINY_MOE.n_params
    assert sum(sizes.routed) == 4 * 8 * 3 * 128 * 128  # L·E·(gate, up, out)·D·F_e
    assert sizes.routed_layer == 8 * 3 * 128 * 128
    assert sizes.capacity(128) == 128  # dropless
    assert model_sizes(TINY_MOE.replace(capacity_factor=1.25)).capacity(128) == 40


def test_dispatch_all_to_alls_and_gradient_axes_by_hand():
    """data=2,expert=4: b = 16/8 = 2 sequences per device. Four all-to-alls of the dispatch
    buffer per block (two forward, their transposes backward); dense gradients summed over data
    × expert, the two local experts' over data only."""
    _, terms = by_name("data=2,expert=4")
    assert ("moe-dispatch", "all-to-all", ("expert",), 16.0, 2 * SLOTS) in terms
    dense = 4 * (4 * (16384 + 32768 + 1024 + 256) + 32768 + 32768 + 128) + 4  # + the loss
    assert ("grad-reduce", "all-reduce", ("data", "expert"), 1.0, dense) in terms
    assert ("grad-reduce", "all-reduce", ("data",), 1.0, 4 * 4 * 2 * 3 * 128 * 128) in terms
    _, full = by_name("data=2,expert=4", train=TRAIN.replace(remat="full"))
    assert ("moe-dispatch", "all-to-all", ("expert",), 24.0, 2 * SLOTS) in full
    _, alone = by_name("expert=8")  # each expert on one device: nothing to reduce
    assert not [t for t in alone if t[0] == "grad-reduce" and "expert" not in t[2]]


def test_the_ideal_program_moves_only_the_routed_tokens():
    """gpu convention (a ragged all-to-all, Megatron-LM's alltoall dispatcher): b·k·T·D per op,
    dropless; with a capacity at most the E·C slots it keeps."""
    train = TrainConfig(global_batch=64, seq_len=128)
    _, terms = by_name("data=2,expert=4", "gpu", train=train, dtype="float32", recipe="parex")
    b = 64 // 8
    assert ("moe-dispatch", "all-to-all", ("expert",), 16.0, b * 2 * 128 * 128 * 4) in terms
    drop = TINY_MOE.replace(capacity_factor=0.5)  # C = ceil(0.5·2·128/8) = 16 < k·T/E = 32
    _, dropped = by_name("data=2,expert=4", "gpu", model=drop, train=train, dtype="float32",
                         recipe="parex")
    assert ("moe-dispatch", "all-to-all", ("expert",), 16.0, b * 8 * 16 * 128 * 4) in dropped


def test_the_all_to_all_runs_on_the_expert_groups_links():
    """An expert group of 8 inside an H100 node sends 7/8 of its tokens over NVLink (NCCL's
    Simple protocol: base 8.4 µs, a step per rank at 3.4 µs); one of 16 across two nodes sends
    half of them through each GPU's own NIC, the slowest link (LL128 there: base 14 µs, a step
    per rank at the network's 4 µs, 120 of 128 bytes)."""
    chip = load_chip("h100-sxm")
    model = model_preset("mixtral-8x7b")
    train = TrainConfig(global_batch=64, seq_len=4096)
    inside = Grid.from_layouts([Layout(data=2, expert=8)], train, model)
    across = Grid.from_layouts([Layout(expert=16)], train, model)
    S = 1 * 2 * 4096 * 4096 * 2.0  # b·k·T·D bf16
    term = Term("moe-dispatch", "all-to-all", (Axis.EXPERT,), np.ones(1), np.full(1, S))
    t_in = alpha_beta.term_seconds(term, inside, chip)[0]
    intra = chip.intra_node.bandwidth * chip.network_efficiency
    assert t_in == pytest.approx(7 / 8 * S / intra + (8.4 + 8 * 3.4) * 1e-6)
    t_out = alpha_beta.term_seconds(term, across, chip)[0]
    inter = chip.inter_node.bandwidth * chip.network_efficiency
    assert t_out == pytest.approx(1 / 2 * S / inter / 0.92 + (14.0 + 16 * 4.0) * 1e-6)


def test_a_per_node_dispatch_sends_a_token_once_to_each_remote_node():
    """DeepEP and HybridEP (`deepep`): a token leaves its node once for every remote node holding
    one of its k experts. Mixtral's 8 experts, top-2, over 16 ranks on two nodes: the other node
    holds 4, so it gets the token with p = 1 − (4/8)(3/7) = 11/14, where the all-to-all sends a
    copy per slot, half of them off the node: 2·p/2 of its NIC bytes go. Inside one node, and
    with the all-to-all dispatcher, nothing changes."""
    chip = load_chip("h100-sxm")
    model = model_preset("mixtral-8x7b")
    train = TrainConfig(global_batch=64, seq_len=4096)
    across = Grid.from_layouts([Layout(expert=16)], train, model)
    inside = Grid.from_layouts([Layout(data=2, expert=8)], train, model)
    S = 1 * 2 * 4096 * 4096 * 2.0
    plain = Term("moe-dispatch", "all-to-all", (Axis.EXPERT,), np.ones(1), np.full(1, S))
    per_node = Term("moe-dispatch", "all-to-all", (Axis.EXPERT,), np.ones(1), np.full(1, S),
                    routing=(8, 2))
    inter = chip.inter_node.bandwidth * chip.network_efficiency
    share = 2 * (1 - 4 / 8 * 3 / 7) / 2
    assert alpha_beta.term_seconds(per_node, across, chip)[0] == pytest.approx(
        share / 2 * S / inter / 0.92 + (14.0 + 16 * 4.0) * 1e-6)
    assert alpha_beta.link_seconds([per_node], across, chip)[0] == pytest.approx(
        share * alpha_beta.link_seconds([plain], across, chip)[0])
    assert alpha_beta.term_seconds(per_node, inside, chip)[0] == pytest.approx(
        alpha_beta.term_seconds(plain, inside, chip)[0])
    # predict (16 experts, one per rank): the stack's `deepep` sets it on the dispatch; the
    # bytes stay the op's
    wider = model.replace(experts=16)
    runs = {ov: predict(wider, train, Layout(expert=16), "h100-sxm", overlaps=ov)
            for ov in (("grad-reduce",), ("grad-reduce", "deepep"))}
    dispatch = {ov: [c for c in p.collectives if c["name"] == "moe-dispatch"]
                for ov, p in runs.items()}
    plain_op, deduped = dispatch[("grad-reduce",)][0], dispatch[("grad-reduce", "deepep")][0]
    assert deduped["routing"] == [16, 2] and "routing" not in plain_op
    assert deduped["bytes"] == plain_op["bytes"]
    assert deduped["seconds"] < 0.8 * plain_op["seconds"]


def test_imbalance_is_a_stated_assumption_that_slows_the_experts():
    """The ideal program's step is set by its most-loaded expert: `expert_imbalance` (1.0,
    balanced, by default) scales its slots; a capacity caps them at C."""
    model, train = model_preset("mixtral-8x7b"), TrainConfig(global_batch=64, seq_len=4096)
    layout = Layout(data=2, expert=8)
    even = predict(model, train, layout, "h100-sxm")
    skewed = predict(model, train, layout, "h100-sxm", expert_imbalance=1.5)
    assert even.assumptions["expert_imbalance"] == 1.0
    assert skewed.assumptions["expert_imbalance"] == 1.5
    assert skewed.step_time_s["compute"] > 1.2 * even.step_time_s["compute"]
    assert skewed.comm_bytes_per_device == even.comm_bytes_per_device  # bytes as balanced
    capped = model.replace(capacity_factor=1.0)  # C = k·T/E: nothing beyond the balanced load
    assert predict(capped, train, layout, "h100-sxm", expert_imbalance=1.5).step_time_s[
        "compute"] == pytest.approx(even.step_time_s["compute"], rel=1e-6)
    assert predict(model_preset("tiny"), TRAIN, Layout(data=8),
                   "cpu-local").assumptions["expert_imbalance"] is None  # a dense model


def test_model_flops_count_active_parameters_and_the_program_its_padding():
    """MFU's FLOPs: 6·N_active + attention per token. parex's padded program (dropless: every
    expert on all T slots of every sequence) runs E/k = 4 times the experts' active FLOPs."""
    p, _ = by_name("data=2,expert=4")
    from parex.model.transformer import flops_per_token

    assert p.model_flops_per_device == pytest.approx(flops_per_token(TINY_MOE) * 16 * 128 / 8)
    b, T, D, E, Fe = 2, 128, 128, 8, 128
    experts = 3 * 2 * 3 * D * Fe * b * E * T  # fwd + bwd of gate, up and out on E·T slots
    einsums = 5 * 2 * b * T * E * T * D  # dispatch (fwd, dx) and combine (fwd, dx, d-gates)
    attention = 3 * (2 * D * 256 + 2 * 128 * D + 4 * D * T + 2 * D * E) * b * T
    head = 3 * 2 * D * 256 * b * T
    assert p.hardware_flops_per_device == pytest.approx(4 * (experts + einsums + attention)
                                                        + head, rel=1e-3)


def test_mixtral_8x7b_at_megatron_lms_published_layout():
    """Megatron-LM's reference mapping for Mixtral 8x7B (megatron/core/transformer/moe/
    README.md, MCore v0.8-0.9, 'Reference Best Parallel Mapping'): 64 H100, dropless, all-to-all
    dispatcher, BF16, sequence 4096, TP1 EP8 PP4 VP8, MBS 1, GBS 256, distributed optimizer;
    published 468 TFLOP/s per GPU. With 64 GPUs, data × expert = 16: data=2,expert=8."""
    model = model_preset("mixtral-8x7b")
    train = TrainConfig(global_batch=256, microbatch=1, seq_len=4096)
    layout = Layout.parse("data=2,expert=8,stage=4,virtual=8,schedule=interleaved,zero=1")
    p = predict(model, train, layout, "h100-sxm")
    assert not p.executable and p.fits
    names = {c["name"] for c in p.collectives}
    assert {"moe-dispatch", "grad-reduce", "pipeline"} <= names
    a2a = next(c for c in p.collectives if c["name"] == "moe-dispatch")
    assert a2a["count"] == 4 * 8 * 16  # 4 per block, 8 blocks per stage, 16 microbatches
    assert a2a["bytes_per_op"] == 1 * 2 * 4096 * 4096 * 2  # b·k·T·D, bf16
    # Megatron's FLOPs per step are 6·N_active + 12·L·D·T per token (its router uncounted):
    # its TFLOP/s per GPU are parex's model FLOPs per device over the step
    tflops = p.model_flops_per_device / p.step_time_s["total"] / 1e12
    print(f"mixtral-8x7b {layout}: {tflops:.0f} TFLOP/s per GPU predicted, 468 published; "
          f"{p.memory_bytes_per_device['total'] / 2**30:.1f} GiB per GPU")
    assert 0.6 < tflops / 468 < 1.3


# --- MoE parallel folding (Liu et al. 2025, arXiv:2504.14960; issue 43, item 5) ------------------

def test_folded_dispatch_and_its_tensor_sums_by_hand():
    """expert=4,tensor=2,expert_tensor=1: b = 16/4 = 4 sequences per device, each tensor device
    sends its C/2 = 64 slots of them over the 8 devices of the expert group; the dispatch's
    and combine's sums over the split C are token-sized all-reduces over tensor (forward:
    the combine's b·T·D; backward: the dispatch's input gradient with that of each token's
    gate per expert, b·T·E float32). The unfolded expert=4,tensor=2 moves the whole buffer
    and all-reduces it."""
    b, T, D, E = 4, 128, 128, 8
    _, terms = by_name("expert=4,tensor=2,expert_tensor=1")
    assert ("moe-dispatch", "all-to-all", ("expert", "tensor"), 16.0, b * SLOTS // 2) in terms
    assert ("moe-combine", "all-reduce", ("tensor",), 4.0, b * T * D * 4) in terms
    assert ("moe-combine", "all-reduce", ("tensor",), 4.0, b * T * (D + E) * 4) in terms
    _, unfolded = by_name("expert=4,tensor=2")
    assert ("moe-dispatch", "all-to-all", ("expert",), 16.0, b * SLOTS) in unfolded
    assert not [t for t in unfolded if t[0] == "moe-combine"]


def test_folded_routed_state_is_whole_experts_over_the_group():
    """The same bytes per device as E over expert and F_e over tensor: 1 whole expert each."""
    folded, _ = by_name("expert=4,tensor=2,expert_tensor=1")
    unfolded, _ = by_name("expert=4,tensor=2")
    assert folded.memory_bytes_per_device["params"] == unfolded.memory_bytes_per_device["params"]


DEEPSEEK_TRAIN = TrainConfig(global_batch=15360, microbatch=1, seq_len=4096)
PARTITION = "partition=4*13:3*3"  # 61 blocks over 16 stages


def test_deepseek_v3_folding_at_scale():
    """DeepSeek-V3 (arXiv:2412.19437 §3.2: PP 16, EP 64 over 8 nodes, ZeRO-1 data parallel;
    batch 15,360 sequences of 4,096 tokens at its largest) with its 64-way expert parallelism
    folded over 2 × 32 ranks of a stage: attention tensor=2 × data-parallel 32, the experts
    over all 64 (ETP 1), 1,024 H100s. The ideal program's dispatch moves each tensor device's
    half of the b·k·T routed tokens (bf16) over the 64 devices; unfolded (expert=32: EP 32,
    F_e split over tensor) every device sends all of them, so its all-to-all takes longer."""
    model = model_preset("deepseek-v3")
    layout = Layout.parse(f"expert=32,tensor=2,expert_tensor=1,stage=16,zero=1,"
                          f"schedule=1f1b,{PARTITION}")
    assert layout.n_devices == 1024 and layout.expert_parallel == 64
    p = predict(model, DEEPSEEK_TRAIN, layout, "h100-sxm")
    assert not p.executable  # the executor runs no mixture of experts inside stages yet
    a2a = next(c for c in p.collectives if c["name"] == "moe-dispatch")
    m = 15360 // 32  # microbatches of one sequence
    assert tuple(a2a["axes"]) == ("expert", "tensor") and a2a["count"] == 4 * 4 * m
    assert a2a["bytes_per_op"] == 1 * 8 * 4096 * 7168 * 2 / 2  # b·k·T·D bf16, over tensor
    unfolded = predict(model, DEEPSEEK_TRAIN, layout.replace(expert_tensor=None), "h100-sxm")
    a2a_unfolded = next(c for c in unfolded.collectives if c["name"] == "moe-dispatch")
    assert a2a_unfolded["bytes_per_op"] == 2 * a2a["bytes_per_op"]
    assert a2a["seconds"] < 0.6 * a2a_unfolded["seconds"]
    tokens = DEEPSEEK_TRAIN.global_batch * 4096 / p.step_time_s["total"] / layout.n_devices
    print(f"deepseek-v3 {layout}: {tokens:.0f} tokens/s per GPU predicted, all-to-all "
          f"{a2a['seconds']:.1f} s per step (unfolded {a2a_unfolded['seconds']:.1f} s); "
          f"{p.memory_bytes_per_device['total'] / 2**30:.1f} GiB per GPU")
