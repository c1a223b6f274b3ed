"""Precision recipes (parex.precision): the Setting resolves them, chips without FP8 refuse them in
one line, the quantiser keeps its promises, and the predictor prices FP8 (time, FSDP gathers,
histories). The executor's FP8 steps: tests/parallel/test_fp8.py."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from parex.cli.main import main
from parex.config import TrainConfig, model_preset
from parex.errors import InputError
from parex.layout import Layout
from parex.model import fp8 as quant
from parex.model import transformer as gpt
from parex.precision import E4M3, E5M2, FP8_MAX, PRECISION_NAMES, precision
from parex.predict import predict_batch
from parex.predict.accelerator import slots_per_token
from parex.predict.core import predict_setting
from parex.predict.fp8 import cast_bytes_per_token
from parex.predict.shapes import Grid, model_sizes
from parex.setting import resolve

LLAMA = model_preset("llama3-8b")


def test_a_precision_sets_the_compute_dtype_and_is_stated():
    fp8 = resolve(LLAMA, TrainConfig(precision="fp8-delayed"), Layout(fsdp=8), "h100-sxm")
    assert fp8.dtype == "bfloat16" and fp8.recipe == "mixed"
    assert fp8.precision.delayed and fp8.to_json()["precision"] == "fp8-delayed"
    assert "precision fp8-delayed" in fp8.describe()
    plain = resolve(LLAMA, TrainConfig(), Layout(fsdp=8), "h100-sxm")
    assert plain.train.precision == "bf16" and "precision" in plain.defaulted
    assert resolve(LLAMA, TrainConfig(), Layout(fsdp=8), "h100-sxm",
                   dtype="float32").train.precision == "fp32"


def test_a_precision_that_contradicts_the_dtype_is_refused():
    with pytest.raises(InputError, match="precision 'bf16' means dtype bfloat16"):
        resolve(LLAMA, TrainConfig(precision="bf16"), Layout(fsdp=8), "h100-sxm",
                dtype="float32")
    with pytest.raises(InputError, match="unknown precision"):
        TrainConfig(precision="fp4")


@pytest.mark.parametrize("chip", ["a100-80gb", "tpu-v5p", "tpu-v4p"])
def test_fp8_on_a_chip_without_it_is_one_line(chip):
    with pytest.raises(InputError, match=f"{chip} has no FP8 matmul units") as error:
        resolve(LLAMA, TrainConfig(precision="fp8-current"), Layout(fsdp=8), chip)
    assert "\n" not in str(error.value)


def test_fp8_on_an_a100_exits_2_from_the_cli(capsys):
    code = main(["predict", "--model", "llama3-8b", "--hardware", "a100-80gb", "--layout",
                 "fsdp=8", "--precision", "fp8-delayed"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "no FP8 matmul units" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("chip", ["h100-sxm", "h200", "h800", "b200", "mi300x"])
def test_fp8_is_faster_than_bf16_and_halves_the_fsdp_gathers(chip):
    """Every FP8 chip: the projections at twice the rate, the FSDP gathers of their weights in
    one byte instead of bf16's two (tensor-scaled recipes), the histories in argument memory."""
    layout = Layout(fsdp=8)
    bf16 = predict_setting(resolve(LLAMA, TrainConfig(), layout, chip))
    out = {name: predict_setting(resolve(LLAMA, TrainConfig(precision=name), layout, chip))
           for name in ("fp8-delayed", "fp8-current", "fp8-rowwise")}
    speedup = bf16.step_time_s["total"] / out["fp8-delayed"].step_time_s["total"]
    assert 1.1 < speedup < 2.0, speedup  # never the peak's 2x: attention, norms, casts stay
    gathers = {name: sum(c["bytes"] for c in p.collectives if c["name"] == "fsdp-gather")
               for name, p in out.items()}
    layer = sum(c["bytes"] for c in bf16.collectives if c["name"] == "fsdp-gather"
                and c["count"] > 1)
    head = sum(c["bytes"] for c in bf16.collectives if c["name"] == "fsdp-gather"
               and c["count"] == 1)
    # a layer's flat buffer holds its norms' scales too (ZeRO partitions every parameter), and
    # those are gathered in bf16 under every recipe
    sizes = model_sizes(LLAMA)
    vectors = layer * sizes.vectors[0] / (sizes.L * sizes.layer_params)
    assert gathers["fp8-delayed"] == pytest.approx((layer - vectors) / 2 + vectors + head,
                                                   rel=1e-12)
    assert gathers["fp8-current"] == gathers["fp8-delayed"]
    assert gathers["fp8-rowwise"] == pytest.approx(layer + head)  # torchao gathers it in bf16
    # 3 histories of 1024 float32 amaxes per projection (5 in a Llama block) per layer
    extra = out["fp8-delayed"].memory_bytes_per_device["argument"] \
        - bf16.memory_bytes_per_device["argument"]
    assert extra == 3 * 1024 * 4 * 5 * LLAMA.layers
    assert out["fp8-delayed"].step_time_s["total"] < out["fp8-current"].step_time_s["total"]


def test_mxfp8_needs_blackwells_block_scales_and_casts_without_an_amax_pass():
    """Hopper has FP8 but no MX block scales: one line naming the chips that do. On B200 the
    GEMMs run at the FP8 rate, and a cast moves 2 + 2 bytes and a scale byte per 32 elements
    per copy, where current scaling reads the tensor once more for its amax."""
    with pytest.raises(InputError, match="no microscaling .* b200, gb200-nvl72") as error:
        resolve(LLAMA, TrainConfig(precision="mxfp8"), Layout(fsdp=8), "h100-sxm")
    assert "\n" not in str(error.value)
    layout = Layout(fsdp=8)
    step = {name: predict_setting(resolve(LLAMA, TrainConfig(precision=name), layout, "b200"))
            .step_time_s["total"] for name in ("bf16", "fp8-current", "mxfp8")}
    assert step["mxfp8"] < step["fp8-current"] < step["bf16"]
    grid = Grid.from_columns(TrainConfig(global_batch=8), LLAMA)
    sizes = model_sizes(LLAMA)
    mx = cast_bytes_per_token(sizes, grid, precision("mxfp8"), 2)
    current = cast_bytes_per_token(sizes, grid, precision("fp8-current"), 2)
    assert mx / current == pytest.approx((2 + 2 + 2 / 32) / (2 + 2 + 2))


def test_predict_batch_prices_fp8_as_predict_does():
    layouts = [Layout(fsdp=8), Layout(data=2, tensor=4), Layout(tensor=8)]
    train = TrainConfig(precision="fp8-current")
    cols = predict_batch(LLAMA, train, layouts, "h100-sxm")
    for i, layout in enumerate(layouts):
        one = predict_setting(resolve(LLAMA, train, layout, "h100-sxm"))
        assert cols["step_time_s"][i] == pytest.approx(one.step_time_s["total"], rel=1e-9)
        assert cols["comm_all_gather_bytes"][i] == pytest.approx(
            one.comm_bytes_per_device["all-gather"], rel=1e-9)



@pytest.mark.parametrize("name", ["fp8-delayed", "fp8-current"])
def test_a_mixtures_routed_experts_cast_their_operands_in_every_slot(name):
    """The routed experts are FP8 GEMMs too: each of a token's k slots casts its expert's
    inputs (x, D wide, and the activation, F_e) and its outputs' gradients (SwiGLU's two F_e
    and D), read in bf16 and written twice in FP8, read once more for a current amax."""
    moe = model_preset("mixtral-8x7b")
    dense = moe.replace(experts=0)
    train = TrainConfig(global_batch=8, precision=name)
    grid = dataclasses.replace(Grid.from_columns(train, moe, expert=8), executor=False)
    recipe = precision(name)
    slots = slots_per_token(model_sizes(moe), grid)
    assert slots == pytest.approx(moe.top_k)  # balanced and dropless: k per token
    D, Fe = moe.hidden, moe.expert_ffn or moe.ffn
    per_element = 2 + 2 + (0 if recipe.delayed else 2)
    routed = cast_bytes_per_token(model_sizes(moe), grid, recipe, 2, slots)
    attention_only = cast_bytes_per_token(model_sizes(moe), grid, recipe, 2)
    assert routed - attention_only == pytest.approx(
        moe.top_k * (D + Fe + 2 * Fe + D) * per_element)
    # a mixture without experts' casts is its attention's: the dense model's minus its MLP's
    dense_grid = Grid.from_columns(train, dense)
    mlp = (D + Fe + 2 * Fe + D) * per_element
    assert attention_only == pytest.approx(
        cast_bytes_per_token(model_sizes(dense), dense_grid, recipe, 2) - mlp)


@pytest.mark.parametrize("fmt", [E4M3, E5M2])
def test_quantisation_saturates_and_rounds_to_the_format(fmt):
    x = jnp.array([0.0, 1e-3, 1.0, -3.0, 1e9, -1e9], jnp.float32)
    q = quant.quantize(x, 1.0, fmt).astype(jnp.float32)
    assert np.all(np.isfinite(q))  # E4M3 has no infinity: overflow saturates, never NaN
    assert float(q[4]) == FP8_MAX[fmt] and float(q[5]) == -FP8_MAX[fmt]
    assert float(q[2]) == 1.0 and float(q[3]) == -3.0


def test_a_tensor_scale_maps_the_amax_to_the_formats_largest_value():
    x = jax.random.normal(jax.random.key(0), (64, 128)) * 7.0
    s = quant.scale_from_amax(quant.amax(x, (), precision("fp8-current")), E4M3)
    assert float(jnp.max(jnp.abs(x)) * s) == pytest.approx(448.0, rel=1e-6)
    assert float(quant.scale_from_amax(jnp.float32(0.0), E4M3)) == 1.0


def test_blockwise_amax_is_per_1x128_tile_and_128x128_block():
    recipe = precision("fp8-blockwise")
    x = jnp.arange(2 * 300, dtype=jnp.float32).reshape(2, 300)  # contraction 300: 3 tiles
    a = quant.amax(x, (1,), recipe)
    assert a.shape == x.shape
    assert float(a[0, 0]) == 127 and float(a[0, 128]) == 255 and float(a[0, 299]) == 299
    assert float(a[1, 0]) == 300 + 127
    w = jnp.arange(256 * 200, dtype=jnp.float32).reshape(256, 200)  # (K, N): blocks over both
    b = quant.amax(w, (0,), recipe, square=True)
    assert float(b[0, 0]) == w[:128, :128].max() and float(b[200, 150]) == w[128:, 128:].max()


def test_mxfp8_scales_each_32_elements_of_x_and_w_alike_by_a_power_of_two():
    """MX blocks are one-dimensional for weights too (no 32 x 32 squares), their E8M0 scales
    powers of two rounded so that the block's largest value never saturates: it lands in the
    top binade of E4M3, (224, 448]."""
    recipe = precision("mxfp8")
    w = jnp.arange(64 * 70, dtype=jnp.float32).reshape(64, 70) + 1.0  # (K, N), K contracted
    a = quant.amax(w, (0,), recipe, square=True)
    assert float(a[0, 5]) == w[:32, 5].max() and float(a[40, 5]) == w[32:, 5].max()
    assert float(a[0, 6]) != float(a[0, 5])  # each column its own blocks: not 32 x 32
    x = jax.random.normal(jax.random.key(3), (8, 96)) * jnp.exp2(jnp.arange(96) / 8.0)
    s = quant.scale_from_amax(quant.amax(x, (1,), recipe), E4M3, recipe.power_of_two)
    assert np.all(np.log2(np.asarray(s)) == np.round(np.log2(np.asarray(s))))
    top = jnp.max(jnp.abs(x * s).reshape(8, 3, 32), axis=-1)
    assert float(top.max()) <= 448.0 and float(top.min()) > 224.0


def test_rowwise_scales_are_powers_of_two():
    x = jax.random.normal(jax.random.key(1), (8, 64)) * 3.0
    recipe = precision("fp8-rowwise")
    s = quant.scale_from_amax(quant.amax(x, (1,), recipe), E4M3, recipe.power_of_two)
    assert s.shape == (8, 1)
    assert np.all(np.log2(np.asarray(s)) == np.round(np.log2(np.asarray(s))))


@pytest.mark.parametrize("name", [n for n in PRECISION_NAMES if precision(n).fp8])
def test_an_fp8_matmul_is_close_to_the_exact_one(name):
    """Relative error of the FP8 product and its gradients against float32: about E4M3's
    (2^-4 per element, averaged down over the contraction) forward; the backward's E5M2 dY
    (2^-3 per element) for the HYBRID recipes."""
    k = jax.random.split(jax.random.key(2), 3)
    x, w = jax.random.normal(k[0], (4, 32, 128)), jax.random.normal(k[1], (128, 96))
    r = jax.random.normal(k[2], (4, 32, 96))
    recipe = precision(name)
    state = quant.history_state(1, 4) if recipe.delayed else None
    state = None if state is None else jax.tree.map(lambda h: h[0] + 50.0, state)

    def loss(x, w, einsum):
        return jnp.sum(einsum(x, w) * r)

    exact = jax.grad(loss, (0, 1))(x, w, lambda x, w: jnp.einsum("btd,df->btf", x, w))
    approx = jax.grad(loss, (0, 1))(x, w, lambda x, w: quant.einsum(
        "btd,df->btf", x, w, recipe, state))
    y = quant.einsum("btd,df->btf", x, w, recipe, state)
    y_exact = jnp.einsum("btd,df->btf", x, w)
    assert float(jnp.linalg.norm(y - y_exact) / jnp.linalg.norm(y_exact)) < 0.05
    for a, b in zip(approx, exact):
        assert float(jnp.linalg.norm(a - b) / jnp.linalg.norm(b)) < 0.1


def test_delayed_scaling_returns_its_next_histories_as_the_states_gradient():
    recipe = precision("fp8-delayed")
    x = jax.random.normal(jax.random.key(3), (2, 8, 16)) * 5.0
    w = jax.random.normal(jax.random.key(4), (16, 8)) * 0.5
    state = {k: jnp.zeros((4,)).at[0].set(1.0) for k in ("x", "w", "dy")}
    _, new = jax.grad(lambda x, s: jnp.sum(quant.einsum("btd,df->btf", x, w, recipe, s)),
                      (0, 1))(x, state)
    assert float(new["x"][0]) == pytest.approx(float(jnp.max(jnp.abs(x))))
    assert float(new["w"][0]) == pytest.approx(float(jnp.max(jnp.abs(w))))
    assert float(new["dy"][0]) == 1.0  # d(sum)/dy is all ones
    assert [float(v) for v in new["x"][1:]] == [1.0, 0.0, 0.0]  # rolled


def test_the_state_table_has_a_history_per_projection_and_layer():
    model = model_preset("tiny-llama")
    table = gpt.fp8_state_table(model, 16)
    leaves = jax.tree.leaves(table)
    assert len(leaves) == 3 * 5 and all(a.shape == (model.layers, 16) for a in leaves)


def test_fp8_layouts_the_executor_cannot_run_are_predicted_and_flagged():
    """The executor's limit (validation rule fp8-global-amax) reaches predict's `executable`."""
    model, train = model_preset("tiny-llama"), TrainConfig(precision="fp8-current")
    piped = predict_setting(resolve(model, train, Layout.parse("stage=2,data=4"), "h100-sxm"))
    assert not piped.executable and "not with stage" in piped.executable_reason
    assert predict_setting(resolve(model, train, Layout.parse("fsdp=4,tensor=2"),
                                   "h100-sxm")).executable


def test_a_held_out_published_fp8_speedup_is_predicted_within_10_percent():
    """torchtitan docs/performance.md, Table 1 (Llama 3.1 8B, FSDP on 8 H100s, global batch 16,
    selective activation checkpointing, torch.compile): 6,667 tokens/s per GPU in bf16, 8,532
    with Float8 tensorwise: 1.28x. Nothing in parex was fitted on it (docs/precision.md)."""
    published = 8532 / 6667
    times = [predict_setting(resolve(LLAMA, TrainConfig(global_batch=16, remat="selective",
                                                        precision=name), Layout(fsdp=8),
                                     "h100-sxm")).step_time_s["total"]
             for name in ("bf16", "fp8-current")]
    assert abs(times[0] / times[1] / published - 1) < 0.10
