"""The accelerator compute model by hand, the profiles' efficiency sources, and the defaults
keyed on the profile (bf16 + mixed on accelerators, parex's own step on cpu-local)."""

import dataclasses
import json

import numpy as np
import pytest

from parex.cli.main import main
from parex.config import TrainConfig, model_preset
from parex.hardware import known_hardware, load_chip
from parex.layout import Layout
from parex.predict import accelerator, predict
from parex.predict.shapes import Grid, model_sizes

TINY = model_preset("tiny")  # L=4, D=128, H=8, F=512, V=256, T=128; 875,264 parameters
N = 875264
LLAMA = model_preset("llama3-8b")
ACCELERATORS = [name for name in known_hardware() if load_chip(name).calibration is None]


def test_gemm_roofline_by_hand():
    rate, bandwidth = 100e12, 1e12
    # a big square GEMM is compute-bound: 2·n³ FLOPs at the rate
    n = 8192
    assert accelerator.gemm_seconds(n, n, n, 1, rate, bandwidth, 2) == pytest.approx(
        2 * n ** 3 / rate)
    # attention's QKᵀ for one head (K = head_dim = 64) writes a 2048² score matrix: memory-bound
    s, d = 2048, 64
    moved = 2 * (s * d + d * s + s * s)
    assert 2 * s * d * s / rate < moved / bandwidth
    assert accelerator.gemm_seconds(s, d, s, 3, rate, bandwidth, 2) == pytest.approx(
        3 * moved / bandwidth)


def test_elementwise_elements_by_hand():
    g = Grid.from_layouts([Layout(tensor=8), Layout(tensor=8, sp=True)],
                          TrainConfig(global_batch=16), TINY)
    h, F, H, T = 128, 512, 8, 128
    total, core = accelerator.elementwise_elements(model_sizes(TINY), g, dropout=True)
    # norms 4h, residual adds 6h, their dropout masks h; bias + GELU 2F/t; softmax and
    # attention dropout (2 + 2.5)·(H/t)·s
    assert core[0] == pytest.approx(4.5 * H / 8 * T)
    assert total[0] == pytest.approx(11 * h + 2 * F / 8 + core[0])
    assert total[1] == pytest.approx(11 * h / 8 + 2 * F / 8 + core[0])  # SP splits the h terms
    plain, _ = accelerator.elementwise_elements(model_sizes(TINY), g, dropout=False)
    assert plain[0] == pytest.approx(10 * h + 2 * F / 8 + 2 * H / 8 * T)


def test_full_recompute_costs_a_forward_and_megatron_recomputes_w_out_too():
    sizes = model_sizes(TINY)
    g = Grid.from_layouts([Layout(data=8)], TrainConfig(global_batch=16), TINY)
    args = (sizes, g)
    none = accelerator.layer_seconds(*args, "none", 1e14, 1e12, 2, True)
    full = accelerator.layer_seconds(*args, "full", 1e14, 1e12, 2, True)
    xla_full = accelerator.layer_seconds(*args, "full", 1e14, 1e12, 2, False)
    xla_none = accelerator.layer_seconds(*args, "none", 1e14, 1e12, 2, False)
    assert full > none and xla_full > xla_none
    gemms = [accelerator.gemm_seconds(M, K, Nn, c, 1e14, 1e12, 2)
             for M, K, Nn, c in accelerator.matmul_shapes(sizes, g)]
    # Megatron's recompute repeats every forward GEMM, XLA's drops W_out (dead code)
    elements, _ = accelerator.elementwise_elements(sizes, g, True)
    assert (full - none)[0] == pytest.approx(sum(gemms)[0] + (elements * g.tokens * 2 / 1e12)[0])


@pytest.mark.parametrize("name", ACCELERATORS)
def test_every_accelerator_profile_says_where_its_efficiencies_come_from(name):
    chip = load_chip(name)
    sources = chip.efficiency_sources
    fp8 = {"fp8_matmul_efficiency"} if chip.fp8_matmul_efficiency is not None else set()
    hbm = {"hbm_efficiency"} if chip.hbm_efficiency != 1.0 else set()
    assert set(sources) == {"matmul_efficiency", "network_efficiency", "step_efficiency",
                            "flash_attention"} | fp8 | hbm
    # a profile without a measured achievable bandwidth keeps the step efficiency fitted at the
    # datasheet's (the pair of Megatron-LM's Table 1 fit): parex.hardware.Chip.hbm_efficiency
    assert 0.8 <= chip.hbm_efficiency <= 1.0
    if not hbm and "Table 1" in sources["step_efficiency"]:
        assert chip.step_efficiency == 0.804 and "datasheet" in sources["step_efficiency"]
    assert all(len(text) > 40 for text in sources.values())
    assert 0.5 < chip.matmul_efficiency <= 0.9 and 0.5 < chip.step_efficiency <= 1.0
    if name.startswith(("a100", "h100", "h200", "b200", "mi300")):  # a published GEMM benchmark
        assert "Maximum Achievable Matmul FLOPS" in sources["matmul_efficiency"]
    # the fused attention kernel's rates: a published benchmark, or a stated assumption
    published = "assumed_from" not in chip.flash_attention
    assert sources["flash_attention"].startswith("published" if published else "assumed, not "
                                                                                 "verified")


def test_a100_matmul_efficiency_is_the_published_mamf():
    chip = load_chip("a100-80gb")
    assert chip.matmul_efficiency == pytest.approx(271.2 / 312, abs=1e-4)
    assert load_chip("h100-sxm").matmul_efficiency == pytest.approx(794.5 / 989, abs=1e-4)


@pytest.mark.parametrize("name, mamf", [("h100-sxm", 1402.6), ("h200", 1453.4),
                                        ("alps", 1535.0), ("b200", 3432.5)])
def test_fp8_gemms_run_at_the_published_fp8_mamf(name, mamf):
    """The FP8 projections' rate is the chip's FP8 benchmark (Bekman's FP8 MAMF), not its bf16
    benchmark's fraction of the doubled peak: an FP8 step's compute moves with it alone."""
    chip = load_chip(name)
    assert chip.peak("float8") * chip.fp8_efficiency() == pytest.approx(mamf * 1e12, rel=1e-4)
    assert "FP8" in chip.efficiency_sources["fp8_matmul_efficiency"]
    assert chip.fp8_efficiency() < chip.matmul_efficiency  # below bf16's fraction on each
    train = TrainConfig(global_batch=16, precision="fp8-current")
    as_bf16 = dataclasses.replace(chip, fp8_matmul_efficiency=None)  # the old assumption
    steps = [predict(LLAMA, train, Layout(fsdp=8), c).step_time_s["compute"]
             for c in (chip, as_bf16)]
    assert steps[0] > steps[1]
    bf16 = predict(LLAMA, TrainConfig(global_batch=16), Layout(fsdp=8), chip)
    assert bf16.step_time_s == predict(LLAMA, TrainConfig(global_batch=16), Layout(fsdp=8),
                                       as_bf16).step_time_s  # bf16 steps never read it


def test_accelerator_defaults_are_bf16_and_the_mixed_recipe():
    train = TrainConfig(global_batch=16)
    p = predict(TINY, train, Layout(data=8), "a100-80gb")  # TINY is a float32 preset
    mem = p.memory_bytes_per_device
    assert mem["params"] == 2 * N and mem["grads"] == 2 * N and mem["optimizer"] == 12 * N
    explicit = predict(TINY.replace(dtype="bfloat16"), train, Layout(data=8), "a100-80gb",
                       recipe="mixed", dtype="bfloat16")
    assert p.step_time_s == explicit.step_time_s and p.memory_bytes_per_device == \
        explicit.memory_bytes_per_device
    fp32 = predict(TINY, train, Layout(data=8), "a100-80gb", recipe="parex", dtype="float32")
    assert fp32.memory_bytes_per_device["params"] == 4 * N
    assert fp32.step_time_s["total"] > p.step_time_s["total"]  # TF32 runs at half the rate
    with pytest.raises(ValueError, match="dtype 'float16'"):
        predict(TINY, train, Layout(data=8), "a100-80gb", dtype="float16")


def test_cpu_local_defaults_stay_parex_float32_and_xla_cpu():
    p = predict(TINY, TrainConfig(global_batch=16), Layout(data=8), "cpu-local")
    assert p.convention == "xla-cpu"
    assert p.memory_bytes_per_device["params"] == 4 * N
    assert p.memory_bytes_per_device["optimizer"] == 8 * N + 8  # Adam's m and v + 2 counters


def test_cli_predict_defaults_on_an_accelerator_and_fp32_when_asked(capsys):
    args = ["predict", "--model", "tiny", "--layout", "data=8", "--hardware", "a100-80gb",
            "--json"]
    assert main(args) == 0
    default = json.loads(capsys.readouterr().out)
    assert default["memory_bytes_per_device"]["params"] == 2 * N
    assert main(args + ["--dtype", "float32", "--recipe", "parex"]) == 0
    fp32 = json.loads(capsys.readouterr().out)
    assert fp32["memory_bytes_per_device"]["params"] == 4 * N


def test_pipeline_sends_split_over_the_tensor_ranks_on_gpus():
    # Megatron's scatter/gather: each tensor rank sends 1/t of the boundary activation and the
    # receiving stage all-gathers it; under SP it is already split (no gather)
    train = TrainConfig(global_batch=16)
    layout = Layout(data=2, tensor=2, stage=2, schedule="1f1b", microbatches=4)
    p = predict(TINY, train, layout, "a100-80gb", dtype="float32", recipe="parex")
    x = 2 * 128 * 128 * 4  # b = 16 / (2 · 4) = 2 sequences of (T, D) float32 per microbatch
    pipe = {c["kind"]: c for c in p.collectives if c["name"] == "pipeline"}
    assert pipe["collective-permute"]["bytes_per_op"] == x / 2
    assert pipe["collective-permute"]["count"] == 2 * 4 == pipe["all-gather"]["count"]
    assert pipe["all-gather"]["bytes_per_op"] == x
    cpu = predict(TINY, train, layout, "cpu-local")  # the emulated mesh sends it whole
    sends = [c for c in cpu.collectives if c["name"] == "pipeline"]
    assert [c["kind"] for c in sends] == ["collective-permute"] and sends[0]["bytes_per_op"] == x


def test_megatron_default_matches_the_explicit_flags():
    # the issue: `--model gpt ... --hardware a100-80gb` used to predict fp32 state by default
    model = model_preset("megatron-18.4b")
    train = TrainConfig(global_batch=1024, microbatch=8, remat="full")
    layout = Layout(data=32, tensor=8)
    default = predict(model, train, layout, "a100-80gb")
    flags = predict(model, train, layout, "a100-80gb", dtype="bfloat16", recipe="mixed")
    assert np.isclose(default.step_time_s["total"], flags.step_time_s["total"])
    assert default.memory_bytes_per_device["params"] == pytest.approx(2 * model.n_params / 8,
                                                                      rel=0.01)


def _tp_collectives(overlaps: dict, remat="full", layout=None):
    """{(family, kind): count} of one 4-layer tiny step's tensor-parallel collectives on an
    A100 cluster with the stack's `overlaps` (mixed recipe: Megatron's block)."""
    from parex.predict import columns
    from parex.setting import resolve

    setting = resolve(TINY, TrainConfig(global_batch=16, remat=remat), None, "a100-80gb",
                      recipe="mixed", convention="gpu", overlaps=overlaps)
    grid = Grid.from_layouts([layout or Layout(data=2, tensor=4)], setting.train, TINY)
    _, terms = columns(setting, grid)
    return {(t.name, t.kind): float(t.count[0]) for t in terms
            if t.name in ("tp", "tp-beside-wgrad", "sp") and t.count[0]}, terms


def test_megatron_full_recompute_repeats_both_forward_all_reduces():
    full, _ = _tp_collectives({}, "full")
    none, _ = _tp_collectives({}, "none")
    # per block: 2 forward + 2 backward, + the recomputed forward's 2 (W_o's and W_out's: the
    # checkpointed block runs again whole); + the embedding's and the head's
    assert none[("tp", "all-reduce")] == 4 * 4 + 2
    assert full[("tp", "all-reduce")] == 6 * 4 + 2


def test_async_tensor_parallel_backward_moves_the_column_parallel_reductions_off_the_path():
    gpu, overlapped = {}, {"overlaps_tp_backward": True}
    plain, _ = _tp_collectives(gpu)
    beside, _ = _tp_collectives(overlapped)
    # QKV's and the MLP input's input-gradient all-reduces, 2 per block, run beside dW
    assert beside[("tp-beside-wgrad", "all-reduce")] == 2 * 4
    assert beside[("tp", "all-reduce")] == plain[("tp", "all-reduce")] - 2 * 4
    # under SP the same two are reduce-scatters
    sp = Layout(data=2, tensor=4, sp=True)
    plain_sp, _ = _tp_collectives(gpu, "none", sp)
    beside_sp, _ = _tp_collectives(overlapped, "none", sp)
    assert beside_sp[("tp-beside-wgrad", "reduce-scatter")] == 2 * 4
    assert beside_sp[("sp", "reduce-scatter")] == plain_sp[("sp", "reduce-scatter")] - 2 * 4


def test_gradient_reduction_after_the_backward_is_exposed_in_full():
    from parex.predict import overlap, time
    from parex.predict.comm import Convention
    from parex.predict.shapes import model_sizes

    g = Grid.from_layouts([Layout(data=8)], TrainConfig(global_batch=16), TINY)
    compute = {"per_microbatch": np.array([1.0]), "optimizer": 0.0, "overhead": 0.0}
    seconds = {"grad-reduce": np.array([0.5])}

    def step(overlaps_grad_reduce):
        conv = Convention("gpu", True, False, False, False, False,
                          overlaps_grad_reduce=overlaps_grad_reduce)
        parts = overlap.exposed_parts(g, model_sizes(TINY), conv, "none", compute, seconds,
                                      {}, 0)
        return time.step_time(g, compute, seconds, False, "none", parts)

    hidden, after = step(True), step(False)
    # behind the backward (2/3 of 1 s) all but one layer's share: 0.5 / 4; after it: all
    assert hidden["exposed_comm"][0] == pytest.approx(0.5 / 4)
    assert after["exposed_comm"][0] == pytest.approx(0.5)


def test_megatron_cross_entropy_traffic_on_the_logits():
    # 52 bytes per (token, V/t) logit: cast, max, subtract, exp, sum, divide; the backward's
    # multiply and cast back (Megatron-LM's vocab-parallel cross-entropy)
    assert accelerator.CROSS_ENTROPY_BYTES == 52
    chip = load_chip("a100-80gb")
    g = Grid.from_layouts([Layout(data=8)], TrainConfig(global_batch=16), TINY)
    sizes = model_sizes(TINY)
    args = (TINY, sizes, g, "none", chip, "bfloat16", 2, np.array([0.0]))
    megatron = accelerator.accelerator_compute(*args, megatron=True)
    bandwidth = chip.achievable_bandwidth()  # the datasheet's x the measured 88 %
    assert bandwidth == pytest.approx(0.88 * chip.hbm_bandwidth)
    layer = accelerator.layer_seconds(sizes, g, "none", chip.peak("bfloat16")
                                      * chip.matmul_efficiency, bandwidth, 2, True,
                                      gemm=chip.gemm)
    head = 3 * accelerator.gemm_seconds(g.tokens, 128, 256, 1, chip.peak("bfloat16")
                                        * chip.matmul_efficiency, bandwidth, 2, chip.gemm)
    logits = 52 * g.tokens * 256 / bandwidth
    assert megatron["head_per_microbatch"][0] == pytest.approx(
        (head + logits)[0] / chip.step_efficiency)
    assert megatron["per_microbatch"][0] == pytest.approx(
        (layer * 4 + head + logits)[0] / chip.step_efficiency)
