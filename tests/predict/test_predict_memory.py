"""Memory formulas against hand-computed values (the compiled-step checks are in
test_predict_compiled.py)."""

import dataclasses
import math

import numpy as np
import pytest

from parex.config import TrainConfig, model_preset
from parex.layout import Layout
from parex.predict import predict
from parex.predict import memory as M
from parex.predict.shapes import Grid, model_sizes
from parex.setting import resolve

TINY = model_preset("tiny")  # L=4, D=128, H=8, F=512, V=256, T=128
# tiny's parameters by sharding group, by hand: every matrix of a block has an embed dim and a
# tensor dim: W_qkv 3·D², W_o D², W_in, W_out D·F each -> 4·(4·128² + 2·128·512) = 786,432;
# biases on heads/mlp (b_qkv 3·D, b_in F) -> 4·(384 + 512) = 3,584; D-sized norms and biases
# per block 6·D -> 3,072; final norm 2·D = 256; tokens and unembed 2·V·D = 65,536; positions T·D.
MATRICES, HEAD_BIASES, HIDDEN, FINAL, TABLES, POSITIONS = 786432, 3584, 3072, 256, 65536, 16384
N = MATRICES + HEAD_BIASES + HIDDEN + FINAL + TABLES + POSITIONS


def grid(layout: Layout, train=TrainConfig(global_batch=16), model=TINY) -> Grid:
    return Grid.from_layouts([layout], train, model)


def elements(layout: Layout, kind: str) -> float:
    return float(M.state_elements(model_sizes(TINY), grid(layout), kind)[0])


def test_parameter_groups_add_up_to_the_model():
    sizes = model_sizes(TINY)
    assert sizes.n_params == N == TINY.n_params
    assert sizes.layer_params == (MATRICES + HEAD_BIASES + HIDDEN) // 4


# what ZeRO's state axes split in parex's step: every weight's embed dim, and the D of the
# norms' scales and D-sized biases (layout.STATE_DIMS); b_qkv and b_in stay whole
SPLIT = MATRICES + TABLES + POSITIONS + HIDDEN + FINAL


@pytest.mark.parametrize("layout, param, grad, opt", [
    (Layout(data=8), N, N, N),
    # ZeRO shards those over data, from stage 1 (opt), 2 (grad), 3 (param)
    (Layout(data=8, zero=1), N, N, N - SPLIT * 7 / 8),
    (Layout(data=8, zero=2), N, N - SPLIT * 7 / 8, N - SPLIT * 7 / 8),
    (Layout(fsdp=8), *[N - SPLIT * 7 / 8] * 3),
    # TP splits everything with a heads / kv_heads / mlp / vocab dim: not norms, D-biases, positions
    (Layout(tensor=8), *[(MATRICES + HEAD_BIASES + TABLES) / 8 + HIDDEN + FINAL + POSITIONS] * 3),
    (Layout(fsdp=2, tensor=4), *[MATRICES / 8 + TABLES / 8 + POSITIONS / 2 + HEAD_BIASES / 4
                                 + (HIDDEN + FINAL) / 2] * 3),
])
def test_state_elements_per_zero_stage_by_hand(layout, param, grad, opt):
    assert elements(layout, "param") == pytest.approx(param)
    assert elements(layout, "grad") == pytest.approx(grad)
    assert elements(layout, "opt") == pytest.approx(opt)


def test_the_ideal_program_partitions_every_parameter():
    """ZeRO's and FSDP's flat buffers (Rajbhandari et al. 2020, section 5) split every
    parameter over N_d, the biases parex's step keeps whole too: 16Ψ/N_d at ZeRO-3."""
    ideal = dataclasses.replace(grid(Layout(fsdp=8)), executor=False)
    for kind in ("param", "grad", "opt"):
        assert M.state_elements(model_sizes(TINY), ideal, kind)[0] == pytest.approx(N / 8)
    zero1 = dataclasses.replace(grid(Layout(data=8, zero=1)), executor=False)
    assert M.state_elements(model_sizes(TINY), zero1, "opt")[0] == pytest.approx(N / 8)
    assert M.state_elements(model_sizes(TINY), zero1, "grad")[0] == pytest.approx(N)


def test_the_ideal_program_shards_zero_over_megatrons_distributed_optimizer_groups():
    """Megatron-Core's distributed optimizer shards the dense parameters' state over data ×
    context × expert (its data-parallel group with context parallelism, expert parallelism
    carved out of it) and the routed experts' over data × context (the expert-data-parallel
    group); parex's step over data alone."""
    def opt(layout, model=TINY, executor=False):
        g = dataclasses.replace(grid(layout, model=model), executor=executor)
        return M.state_elements(model_sizes(model), g, "opt")[0]

    assert opt(Layout(data=4, seq=2, cp="ring", zero=1)) == pytest.approx(N / 8)
    assert opt(Layout(data=4, seq=2, cp="ring", zero=1), executor=True) == pytest.approx(
        opt(Layout(data=4, zero=1), executor=True))
    moe = model_preset("tiny-moe")
    sizes = model_sizes(moe)
    routed = sum(sizes.routed)
    dense = moe.n_params - routed
    # 8 experts over expert=4: each device holds 2, their state cut over data = 2 only
    assert opt(Layout(data=2, expert=4, zero=1), moe) == pytest.approx(
        dense / 8 + routed / 4 / 2)
    assert opt(Layout(data=2, expert=4, zero=1), moe, executor=True) == pytest.approx(
        dense / 2 + routed / 4 / 2)


def test_argument_is_params_optimizer_and_batch_by_hand():
    mem = predict(TINY, TrainConfig(global_batch=16), Layout(data=8), "a100-80gb",
                  recipe="parex", dtype="float32")
    batch = 2 * 4 * (16 // 8) * 128  # inputs and targets, int32, 2 sequences per device
    assert mem.memory_bytes_per_device["params"] == 4 * N
    assert mem.memory_bytes_per_device["optimizer"] == 8 * N + 8  # Adam's m and v + 2 counters
    assert mem.memory_bytes_per_device["argument"] == 12 * N + 8 + batch


def test_korthikanti_formulas_by_hand():
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    sbh = s * b * h
    assert M.korthikanti_layer_bytes(s, b, h, a) == sbh * (34 + 5 * a * s / h)
    assert M.korthikanti_layer_bytes(s, b, h, a, t) == sbh * (10 + 24 / t + 5 * a * s / (h * t))
    assert M.korthikanti_layer_bytes(s, b, h, a, t, sp=True) == sbh / t * (34 + 5 * a * s / h)
    assert M.korthikanti_layer_bytes(s, b, h, a, t, remat="selective") == sbh * (10 + 24 / t)
    assert M.korthikanti_layer_bytes(s, b, h, a, t, True, "selective") == 34 * sbh / t
    assert M.korthikanti_layer_bytes(s, b, h, a, t, remat="full") == 2 * sbh
    # without dropout: no masks (s·b·h twice, a·s²·b) and no dropout output (2·a·s²·b)
    assert M.korthikanti_layer_bytes(s, b, h, a, dropout=False) == sbh * (32 + 2 * a * s / h)
    assert M.korthikanti_layer_bytes(s, b, h, a, t, dropout=False) == sbh * (
        8 + 24 / t + 2 * a * s / (h * t))
    assert M.korthikanti_layer_bytes(s, b, h, a, t, True, dropout=False) == sbh / t * (
        32 + 2 * a * s / h)
    assert M.korthikanti_layer_bytes(s, b, h, a, t, True, "selective", False) == 32 * sbh / t
    # 175B, t = 8, SP + selective: 34·2048·12288/8 bytes = 107 MB per layer
    assert math.isclose(34 * sbh / t / 1e6, 106.95, rel_tol=1e-3)


def test_xla_activation_elements_by_hand():
    sizes = model_sizes(TINY)
    h, F, a, s = 128, 512, 8, 128
    dp = M.xla_layer_elements(sizes, grid(Layout(data=8)), "none")[0]
    assert dp == 8 * h + 4 * h + 6 * F + 2 * a * s  # 6,656 per token
    tp = M.xla_layer_elements(sizes, grid(Layout(tensor=8)), "none")[0]
    assert tp == 8 * h + 4 * h / 8 + 6 * F / 8 + 2 * a / 8 * s
    sp = M.xla_layer_elements(sizes, grid(Layout(tensor=8, sp=True)), "selective")[0]
    # SP splits every saved activation (the column-parallel inputs are saved sequence-split);
    # no scores under selective remat
    assert sp == 8 * h / 8 + 4 * h / 8 + 6 * F / 8
    full = M.xla_layer_elements(sizes, grid(Layout(tensor=8, sp=True)), "full")[0]
    assert full == h / 8  # only the block input, split by SP


def test_pipeline_activations_follow_the_schedule_table():
    from parex.parallel.schedules import make_schedule

    sizes, train = model_sizes(TINY), TrainConfig(global_batch=16)
    mixed = M.RECIPES["mixed"]
    for name, expected_flight in (("gpipe", 8), ("1f1b", 2)):
        g = grid(Layout(stage=2, schedule=name, microbatches=8), train)
        flight = M.in_flight(g)[0]
        assert flight == expected_flight == max(make_schedule(name, 2, 8).peak_in_flight())
        per_layer = M.layer_bytes(sizes, g, "none", mixed, 2)[0]
        acts = M.activation_bytes(sizes, g, "none", mixed, 2)[0]
        assert acts == per_layer * 2 * flight  # 2 layers per stage × microbatches in flight
    # Korthikanti: interleaving multiplies 1F1B's L layers' worth by (1 + (p − 1)/(p·v))
    p, v, m = 4, 2, 8
    g1 = grid(Layout(stage=p, schedule="1f1b", microbatches=m), train)
    gi = grid(Layout(stage=p, schedule="interleaved", virtual_stages=v, microbatches=m), train)
    ratio = M.activation_bytes(sizes, gi, "none", mixed, 2) / M.activation_bytes(sizes, g1, "none",
                                                                                 mixed, 2)
    assert ratio[0] == pytest.approx(1 + (p - 1) / (p * v))


def test_a_layout_that_does_not_fit_is_predicted_and_flagged_by_how_much():
    model = model_preset("llama2-13b").replace(dtype="bfloat16")
    p = predict(model, TrainConfig(global_batch=8, seq_len=4096), Layout(data=8), "a100-80gb")
    assert not p.fits
    assert p.over_capacity_bytes == pytest.approx(p.memory_bytes_per_device["total"] - 80e9)
    assert p.over_capacity_bytes > 100e9  # 13B parameters × 16 bytes alone are 208 GB
    assert p.step_time_s["total"] > 0  # still predicted
    fits = predict(model, TrainConfig(global_batch=8, seq_len=4096, remat="full"),
                   Layout(fsdp=8), "h200")
    assert fits.fits and fits.over_capacity_bytes == 0


def test_update_temporaries_and_the_sharded_layer_by_hand():
    sizes, train = model_sizes(TINY), TrainConfig(global_batch=16)
    parex, mixed = M.RECIPES["parex"], M.RECIPES["mixed"]
    dp, fsdp = grid(Layout(data=8), train), grid(Layout(fsdp=8), train)
    # optax's AdamW keeps one float32 buffer the size of the optimizer state; a fused in-place
    # Adam (Megatron's) none
    assert M.update_bytes(sizes, dp, parex)[0] == 4 * N
    assert M.update_bytes(sizes, fsdp, parex)[0] == 4 * elements(Layout(fsdp=8), "opt")
    assert M.update_bytes(sizes, dp, mixed)[0] == 0
    # sharded gradients: the layer in flight whole (weights as gathered and unreduced gradient;
    # FSDP2 gathers in the compute dtype, 2 bytes beside its 4-byte gradient)
    layer = (MATRICES + HEAD_BIASES + HIDDEN) // 4
    zero2 = grid(Layout(data=8, zero=2), train)
    assert M.sharded_layer_bytes(sizes, fsdp, parex, 4)[0] == 8 * layer
    assert M.sharded_layer_bytes(sizes, zero2, mixed, 2)[0] == 4 * layer
    assert M.sharded_layer_bytes(sizes, fsdp, M.RECIPES["fsdp2"], 2)[0] == 6 * layer
    assert M.sharded_layer_bytes(sizes, dp, parex, 4)[0] == 0
    assert M.sharded_layer_bytes(sizes, grid(Layout(data=8, zero=1), train), parex, 4)[0] == 0


def test_the_peak_is_the_backward_or_the_update_whichever_is_larger():
    sizes = model_sizes(TINY)
    heavy = TrainConfig(global_batch=8, seq_len=16)  # 16 tokens per device: weights dominate
    g = grid(Layout(data=8), heavy)
    parts = M.memory_parts(sizes, g, "none", M.RECIPES["parex"], 4, 4)
    update = M.update_bytes(sizes, g, M.RECIPES["parex"])[0]
    backward = M.temp_bytes(sizes, g, "none", M.RECIPES["parex"], 4, 4)[0]
    assert parts["activations"][0] + backward < update  # the update's peak wins here
    assert parts["total"][0] == pytest.approx(parts["argument"][0] + parts["grads"][0] + update)
    long = TrainConfig(global_batch=16)  # 128 tokens per sequence: activations dominate
    g = grid(Layout(data=8), long)
    parts = M.memory_parts(sizes, g, "none", M.RECIPES["parex"], 4, 4)
    assert parts["temp"][0] == pytest.approx(M.temp_bytes(sizes, g, "none", M.RECIPES["parex"],
                                                          4, 4)[0])


def test_ring_attention_keeps_one_log_sum_exp_per_row_and_head_not_scores():
    """xla: ring attention's custom VJP keeps q, k, v and the output (in the 2 + 2·K/H term)
    and lse, H/t per token; plain attention keeps the scores and probabilities, 2·H·T/t."""
    sizes = model_sizes(TINY)
    layouts = [Layout(data=2, seq=4, cp="ring"), Layout(data=2, seq=4, cp="ulysses")]
    ring, plain = M.xla_layer_elements(sizes, Grid.from_layouts(layouts, TrainConfig(), TINY),
                                       "none")
    D, H, F, T = TINY.hidden, TINY.heads, TINY.ffn, TINY.seq_len
    assert ring == 8 * D + 4 * D + 6 * F + H
    assert plain == 8 * D + 4 * D + 6 * F + 2 * H * T
    selective = M.xla_layer_elements(sizes, Grid.from_layouts(layouts[:1], TrainConfig(), TINY),
                                     "selective")
    assert selective[0] == 8 * D + 4 * D + 6 * F  # lse recomputed with the attention


def test_pipeline_buffers_around_the_tick_switch_by_hand():
    """predict.stash: a split backward under full remat keeps each layer's input, as unsplit (its
    taps are an identity the recompute does not read; not a negative residual); the tick's switch
    writes one value of every stash buffer and the value it sends, and a B copies its residual
    slot out only where the chunk's layers are a scan (more than one, not looped in Python) and
    res has several slots."""
    from parex.predict.stash import loop_grad_elements, stash_bytes, window_bytes

    sizes, train = model_sizes(TINY), TrainConfig(global_batch=16)
    g = grid(Layout(data=4, stage=2, schedule="zbh1", microbatches=2), train)
    tokens, layers, h = 2 * 128, 2, 128  # b = 16 / (4 · 2), T = 128; 2 layers per stage
    full = M.xla_layer_elements(sizes, g, "full")
    res = stash_bytes(sizes, g, full, 4, "full")["value"]["res"][0]
    assert res == layers * h * tokens * 4 > 0
    # 1F1B at p = 2, m = 1: one slot of res, read in place; every buffer written once, one sent
    g1 = grid(Layout(data=4, stage=2, schedule="1f1b", microbatches=1), train)
    one = stash_bytes(sizes, g1, M.xla_layer_elements(sizes, g1, "none"), 4)["value"]
    written = one["res"] + one["emb"] + one["head"] + one["inbox"]
    assert window_bytes(sizes, g1, one)[0] == pytest.approx(written[0])
    # the gradient deltas are (layers, D, width) leaves, F's values (layers, b, T, width): they
    # share no position (parallel.outputs), so the deltas come on top, however large
    forward = (one["res"] + one["emb"] + one["head"])[0]
    for grads in (0.5 * forward, 2 * forward):
        assert window_bytes(sizes, g1, one, grads)[0] == pytest.approx(written[0] + grads)
    # a split backward's tap cotangents are activations: B's share F's positions
    gz = grid(Layout(data=4, stage=2, schedule="zbh1", microbatches=2), train)
    z = stash_bytes(sizes, gz, M.xla_layer_elements(sizes, gz, "none"), 4)["value"]
    assert 0 < z["dtap"][0] < (z["res"] + z["rec"])[0]
    for grads in (0.0, 2 * forward):
        assert window_bytes(sizes, gz, z, grads)[0] == pytest.approx(
            (2 * z["res"] + z["rec"] + z["emb"] + z["head"] + z["inbox"])[0] + grads)
    g4 = grid(Layout(data=4, stage=2, schedule="1f1b", microbatches=4), train)  # 2 res slots
    four = stash_bytes(sizes, g4, M.xla_layer_elements(sizes, g4, "none"), 4)["value"]
    assert window_bytes(sizes, g4, four)[0] == pytest.approx(
        (2 * four["res"] + four["emb"] + four["head"] + four["inbox"])[0])
    # one layer per chunk (p = 4), or layers looped in Python (SP): no scan, no read copy
    for layout in (Layout(data=2, stage=4, microbatches=4, schedule="gpipe"),
                   Layout(data=2, tensor=2, sp=True, stage=2, microbatches=4, schedule="gpipe")):
        gs = grid(layout, train)
        vs = stash_bytes(sizes, gs, M.xla_layer_elements(sizes, gs, "none"), 4)["value"]
        assert window_bytes(sizes, gs, vs)[0] == pytest.approx(
            (vs["res"] + vs["emb"] + vs["head"] + vs["inbox"])[0])
    # the loop's gradient deltas: one chunk's blocks (v = 2: half the stored) and the head
    gv = grid(Layout(stage=2, schedule="interleaved", virtual_stages=2, microbatches=4), train)
    assert (loop_grad_elements(sizes, gv, np.array([1000.0]))
            - loop_grad_elements(sizes, gv, np.array([0.0])))[0] == pytest.approx(500.0)


def test_the_weights_a_pipeline_op_copies_by_hand():
    """predict.stash.chunk_weight_bytes: one layer's weights where a chunk's layers are a scan or
    a one-layer chunk is picked out of several, and the whole chunk as well where a scanned one
    is picked out of several; nothing with one layer per stage, layers looped in Python (SP),
    chunks gathered by hand (fsdp) or no pipeline. Compute copies (float32 here), split by
    tensor."""
    from parex.predict.stash import chunk_weight_bytes

    eight = TINY.replace(layers=8)
    layer = 4 * model_sizes(TINY).layer_params

    def copied(layout, model=TINY):
        return chunk_weight_bytes(model_sizes(model), grid(layout, model=model), 4)[0]

    one_chunk = dict(schedule="1f1b", microbatches=4)
    assert copied(Layout(data=4, stage=2, **one_chunk)) == pytest.approx(layer)  # 2 layers
    assert copied(Layout(data=2, stage=4, **one_chunk)) == 0  # one layer, read in place
    two = dict(schedule="interleaved", virtual_stages=2, microbatches=4)
    assert copied(Layout(data=4, stage=2, **two)) == pytest.approx(layer)  # 1 layer of 2 chunks
    assert copied(Layout(data=4, stage=2, **two), eight) == pytest.approx(3 * layer)  # 2 + 1
    assert copied(Layout(data=2, tensor=2, stage=2, **one_chunk)) == pytest.approx(layer / 2)
    # fsdp by hand: an op peaks at its gathers, before it slices a layer
    assert copied(Layout(fsdp=2, data=2, stage=2, **two), eight) == 0
    assert copied(Layout(data=2, tensor=2, sp=True, stage=2, **one_chunk)) == 0
    assert copied(Layout(data=8)) == 0


def test_megatrons_distributed_optimizer_pads_its_flat_buffer_for_any_data_size():
    """ZeRO-1 over 7 replicas, whose D = 2304 they do not divide: Megatron-LM's distributed
    optimizer shards one flat buffer padded to a multiple of 7, ⌈N/7⌉ parameters' worth of
    fp32 master weights and Adam's two moments (12 bytes) on each rank."""
    model = model_preset("megatron-1.7b")
    p = predict(model, TrainConfig(global_batch=112), Layout.parse("data=7,zero=1"), "h100-sxm")
    assert p.memory_bytes_per_device["optimizer"] == math.ceil(model.n_params / 7) * 12


def test_megatron_bf16_recipe_holds_and_reduces_float32_gradients():
    """Megatron-LM's bf16 (mixed-fp32-grads): 2 + 4 + 12 bytes per parameter, and its
    data-parallel gradient all-reduce moves 4-byte gradients, twice the mixed recipe's bytes;
    weights and optimizer state unchanged."""
    from parex.config import ModelConfig

    model = ModelConfig("gpt-1b", "gpt", 16, 2048, 16, vocab=32000, seq_len=1024,
                        dtype="bfloat16")
    layout, train = Layout(data=8, tensor=2), TrainConfig(global_batch=64)
    runs = {name: predict(model, train, layout, "a100-80gb", recipe=name, convention="gpu",
                          overlaps={"overlaps_grad_reduce": False})
            for name in ("mixed", "mixed-fp32-grads")}
    mixed, fp32 = (runs[n].memory_bytes_per_device for n in ("mixed", "mixed-fp32-grads"))
    assert fp32["grads"] == 2 * mixed["grads"] > 0
    assert (fp32["params"], fp32["optimizer"]) == (mixed["params"], mixed["optimizer"])
    reduce = {name: next(c for c in p.collectives if c["name"] == "grad-reduce")
              for name, p in runs.items()}
    assert reduce["mixed"]["bytes"] > 0  # (a 4-byte scalar rides along with the gradients)
    assert reduce["mixed-fp32-grads"]["bytes"] == pytest.approx(2 * reduce["mixed"]["bytes"],
                                                                rel=1e-8)
    assert (runs["mixed-fp32-grads"].step_time_s["exposed_comm"]
            > runs["mixed"].step_time_s["exposed_comm"])


def test_fsdp2_keeps_float32_shards_gathers_bfloat16_and_reduces_float32():
    """torchtitan's FSDP2 (recipe fsdp2): 4 + 4 + 8 bytes per parameter, the same 16 as the
    mixed recipe's 2 + 2 + 12, parameters all-gathered in bfloat16 (the same bytes as mixed)
    and gradients reduce-scattered in float32 (twice mixed's), the gathered layer in bfloat16
    beside its float32 gradient."""
    model = model_preset("llama3-8b")
    layout, train = Layout(fsdp=8), TrainConfig(global_batch=64, remat="full")
    runs = {name: predict(model, train, layout, "h100-sxm", recipe=name)
            for name in ("mixed", "fsdp2")}
    mixed, fsdp2 = (runs[n].memory_bytes_per_device for n in ("mixed", "fsdp2"))
    assert fsdp2["params"] == 2 * mixed["params"] and fsdp2["grads"] == 2 * mixed["grads"]
    assert fsdp2["optimizer"] == pytest.approx(mixed["optimizer"] * 8 / 12)
    assert sum(fsdp2[k] for k in ("params", "grads", "optimizer")) == pytest.approx(
        sum(mixed[k] for k in ("params", "grads", "optimizer")))
    by_kind = {name: p.comm_bytes_per_device for name, p in runs.items()}
    assert by_kind["fsdp2"]["all-gather"] == by_kind["mixed"]["all-gather"] > 0
    assert by_kind["fsdp2"]["reduce-scatter"] == pytest.approx(
        2 * by_kind["mixed"]["reduce-scatter"], rel=1e-6)
    # torchtitan's stack picks it; the others keep the default (mixed)
    assert resolve(model, train, layout, "h100-sxm", stack="torchtitan").recipe == "fsdp2"
    assert resolve(model, train, layout, "h100-sxm", stack="nemo").recipe == "mixed"
