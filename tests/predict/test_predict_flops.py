"""FLOP formulas against hand-computed values and the published formulas."""

import dataclasses

import pytest

from parex.config import TrainConfig, model_preset
from parex.layout import Layout
from parex.model.transformer import flops_per_token
from parex.predict import flops as F
from parex.predict.shapes import Grid, model_sizes

TINY = model_preset("tiny")  # L=4, D=128, F=512, V=256, T=128, 198,272 parameters per block
T, D, FFN, V, L = 128, 128, 512, 256, 4


def grid(layout=Layout(), train=TrainConfig(global_batch=16), model=TINY):
    return Grid.from_layouts([layout], train, model)


def test_forward_per_token_by_hand():
    layer, head = F.forward_per_token(TINY, T)
    assert layer == 2 * 198272 + 4 * D * T  # 2 per weight + QKᵀ and PV with T² in full
    assert head == 2 * (2 * D + D * V)  # final norm and unembedding
    assert F.attention_forward_per_token(TINY, T) == 4 * D * T
    # one place for the convention: model.flops_per_token = 3 · forward
    assert 3 * (L * layer + head) == flops_per_token(TINY, T)


@pytest.mark.parametrize("layout", [Layout(), Layout(data=8), Layout(tensor=4, data=2),
                                    Layout(fsdp=8, microbatches=2)])
def test_model_flops_are_the_step_total_over_devices(layout):
    per_device = F.model_flops(TINY, grid(layout))[0]
    assert per_device * layout.n_devices == flops_per_token(TINY, T) * 16 * T


def test_recompute_by_hand():
    tokens = 16 * T
    base = flops_per_token(TINY, T) * tokens
    selective = F.hardware_flops(TINY, grid(), "selective")[0]
    assert selective - base == L * 4 * D * T * tokens  # the attention core's forward again
    full = F.hardware_flops(TINY, grid(), "full")[0]
    layer, _ = F.forward_per_token(TINY, T)
    assert full - base == L * (layer - 2 * FFN * D) * tokens  # all but the dead W_out matmul


def test_hardware_flops_match_megatrons_formula_with_full_recompute():
    # Narayanan et al.: 96·B·s·l·h²·(1 + s/6h + V/16lh) per iteration, which recomputes the whole
    # forward; parex's recompute skips the dead W_out matmul (2·F·h per token per layer), and
    # counts biases and norms: with that matmul added back, the two agree within 1 %
    model = model_preset("megatron-145.6b")
    B, s, l, h, V_ = 2304, 2048, 80, 12288, 51200
    train = TrainConfig(global_batch=B, microbatch=2, remat="full")
    # (unpipelined: a pipeline's busiest device also runs the whole head, beside 1/p of the
    # layers, so its FLOPs times the devices would count the head p times)
    layout = Layout(data=192, tensor=8)
    g = dataclasses.replace(Grid.from_layouts([layout], train, model), executor=False)
    ours = F.hardware_flops(model, g, "full")[0] * layout.n_devices
    paper = 96 * B * s * l * h ** 2 * (1 + s / (6 * h) + V_ / (16 * l * h))
    dead = l * 2 * (4 * h) * h * B * s
    assert (ours + dead) / paper == pytest.approx(1.0, abs=0.01)


def test_pipelines_recompute_nothing_and_the_last_stage_runs_the_head():
    """The busiest device of a pipeline (its last stage) runs its layers' forward and backward
    once and the head's: above the average device by half the head's FLOPs at p = 2."""
    g = grid(Layout(stage=2, schedule="1f1b", microbatches=4))
    layer, head = F.forward_per_token(TINY, T)
    tokens = 16 * T  # the whole batch passes through each stage
    assert F.hardware_flops(TINY, g, "none")[0] == pytest.approx(3 * (L / 2 * layer + head)
                                                                 * tokens)
    assert F.hardware_flops(TINY, g, "none")[0] - F.model_flops(TINY, g)[0] == \
        pytest.approx(3 * head * tokens / 2)


def test_xla_counts_one_loop_iteration():
    # XLA's cost analysis counts a while-loop body once: one layer, one microbatch
    sizes = model_sizes(TINY)
    one = F.xla_counted(TINY, sizes, grid(Layout(data=8)), "none")[0]
    two = F.xla_counted(TINY, sizes, grid(Layout(data=8, microbatches=2)), "none")[0]
    layer, head = F.forward_per_token(TINY, T)
    matmuls = 3 * (layer + head) * 2 * T  # 2 sequences per device, one layer
    assert one > matmuls and (one - matmuls) / one < 0.15  # elementwise work is a few percent
    assert two < one  # half the tokens per (once-counted) microbatch


@pytest.mark.parametrize("seq, remat, blocks", [
    (4, "none", 1 * 5 * 4 + 7 * 10),  # forward: 3 own + 2 per hop (loop); backward: 3 + 2 + 2
    (4, "full", 2 * 5 * 4 + 7 * 10),  # the forward recomputed
    (2, "none", 1 * 5 * 4 + 5 * 10),  # no backward loop: hop 1 is also the last
])
def test_xla_counts_ring_attention_blocks_once_per_hop_loop(seq, remat, blocks):
    """c × c blocks, c = T/2s, counted as XLA does (each hop loop's body once), replacing the
    full-T² convention's attention: 4·c²·D FLOPs a block forward, 10·c²·D backward."""
    sizes, b = model_sizes(TINY), 16 // 2
    ring = grid(Layout(data=2, seq=seq, cp="ring"))
    c = T // (2 * seq)
    assert F.ring_attention_counted(sizes, ring, remat)[0] == blocks * c * c * D * b
    plain = grid(Layout(data=2, seq=seq, cp="ulysses"))  # the same tokens; attention in full
    attention = (3 + (remat == "full")) * 4 * D * T * (b * T // seq)
    difference = F.xla_counted(TINY, sizes, plain, remat) - F.xla_counted(TINY, sizes, ring, remat)
    assert difference[0] == pytest.approx(attention - blocks * c * c * D * b)


@pytest.mark.parametrize("seq, remat, forwards", [(2, "none", 1), (4, "full", 2),
                                                    (8, "selective", 2)])
def test_ring_hardware_flops_count_its_blocks_on_every_hop(seq, remat, forwards):
    """2s + 1 blocks of c × c a pass, every hop counted: 4·c²·D a block forward (once more per
    recomputed forward, less hop 0's three QKᵀ, which the backward shares), 10·c²·D backward.
    They replace the full-T convention's attention core in hardware FLOPs; the rest of the
    block is unchanged. (The compiled steps of tiny run, every loop trip counted, 124,780,544
    FLOPs of attention matmuls at seq=8, 157,286,400 at seq=8 with full remat, 163,577,856 at
    data=2, seq=4 with selective: these formulas' counts.)"""
    sizes, b = model_sizes(TINY), 16 // (8 // seq)
    ring = grid(Layout(data=8 // seq, seq=seq, cp="ring"))
    c = T // (2 * seq)
    shared = (forwards - 1) * 3 * 2 * c * c * D * b
    executed = (4 * forwards + 10) * (2 * seq + 1) * c * c * D * b - shared
    assert F.ring_attention_executed(sizes, ring, remat)[0] == executed
    # in bfloat16 the re-run's QKᵀ and the backward's differ in dtype: both run (160,432,128
    # at seq=8 with full remat in the compiled step)
    assert F.ring_attention_executed(sizes, ring, remat, "bfloat16")[0] == executed + shared
    plain = grid(Layout(data=8 // seq, seq=seq, cp="ulysses"))  # the same tokens, T² in full
    attention = (2 + forwards) * 4 * D * T * (b * T // seq)
    difference = F.hardware_flops(TINY, plain, remat) - F.hardware_flops(TINY, ring, remat)
    assert difference[0] == pytest.approx(L * (attention - executed))


def test_a_sliding_window_counts_its_keys_in_model_flops_and_the_masked_ones_where_computed():
    """Model FLOPs 6N + 12·L·H·Dh·W per token (a named head width counted at its own size);
    the naive kernel also computes the T − W masked keys per query, which hardware FLOPs
    count three times (forward and backward); flash skips them."""
    from parex.config import TrainConfig, model_preset
    from parex.layout import Layout
    from parex.model.transformer import flops_per_token
    from parex.predict import predict

    model = model_preset("tiny-llama").replace(sliding_window=32, head_dim=32)
    L, H, Dh, T = model.layers, model.heads, model.head_dim, model.seq_len
    non_embedding = model.n_params - model.vocab * model.hidden  # the logits matmul counts
    assert flops_per_token(model) == 6 * non_embedding + 12 * L * H * Dh * 32
    train, layout = TrainConfig(global_batch=16), Layout.parse("data=8")
    tokens = 16 * T / 8
    naive = predict(model, train.replace(attention="naive"), layout, "h100-sxm")
    flash = predict(model, train.replace(attention="flash"), layout, "h100-sxm")
    assert naive.model_flops_per_device == flash.model_flops_per_device
    masked = 3 * 4 * H * Dh * (T - 32) * L * tokens
    assert naive.hardware_flops_per_device - flash.hardware_flops_per_device == \
        pytest.approx(masked)
