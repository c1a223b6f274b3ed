"""Attention timed as the kernel that runs it (issue 30, item 3): the fused kernel at its own
published rate (the profile's flash_attention table) with no (s, s) scores traffic; the naive
kernel as before; published runs predicted with the naive kernel their code ran."""

import dataclasses

import numpy as np
import pytest

from parex.config import TrainConfig, model_preset
from parex.hardware import load_chip
from parex.layout import Layout
from parex.predict import accelerator
from parex.predict.flops import recompute_layers
from parex.predict.published import stack_runs
from parex.predict.published_runs import fit_runs, predict_run, run_setup
from parex.predict.shapes import Grid, model_sizes

LLAMA = model_preset("llama3-8b")  # H = 32, K = 8, Dh = 128, D = 4096


def _grid(seq: int, flash: bool, layout: Layout = Layout(data=8), model=LLAMA) -> Grid:
    model = model.replace(seq_len=seq)
    grid = Grid.from_layouts([layout], TrainConfig(global_batch=8, seq_len=seq), model)
    return dataclasses.replace(grid, executor=False, flash=flash)


def _layer(chip, grid, remat="none", megatron=True, bandwidth=None, model=LLAMA):
    peak = chip.peak("bfloat16")
    flash = (peak, accelerator.flash_table(chip)) if grid.flash else None
    return accelerator.layer_seconds(model_sizes(model), grid, remat,
                                     peak * chip.matmul_efficiency,
                                     bandwidth or chip.hbm_bandwidth, 2, megatron, flash=flash)


def test_flash_kernel_seconds_by_hand_on_h100():
    # one sequence of 4096 tokens, 32 heads of 128: FlashAttention-3's causal forward at s = 4k,
    # head dim 128, is 579 TFLOP/s and its backward 542 (the profile's sources) of 989
    chip = load_chip("h100-sxm")
    grid = _grid(4096, True)
    F = 4 * 4096 * 4096 * 128 * 32 / 2  # QKᵀ and PV, half the scores under the causal mask
    forward, backward = accelerator.flash_seconds(model_sizes(LLAMA), grid, 989e12,
                                                  accelerator.flash_table(chip))
    assert forward[0] == pytest.approx(F / 579e12, rel=2e-4)
    assert backward[0] == pytest.approx(2.5 * F / 542e12, rel=2e-4)


def test_a100_times_both_passes_at_the_published_forward_backward_rate():
    # FlashAttention-2 publishes forward + backward together: 155 TFLOP/s at 2k, 173 at 4k
    # (causal, head dim 128); between them, linear in log2(s)
    table = accelerator.flash_table(load_chip("a100-80gb"))
    for which in ("forward", "backward"):
        assert accelerator.flash_efficiency(table, which, 128, 2048) == pytest.approx(155 / 312,
                                                                                      abs=1e-4)
    mid = accelerator.flash_efficiency(table, "forward", 128, 2048 * 2 ** 0.5)
    assert mid == pytest.approx((155 + 173) / 2 / 312, abs=1e-4)
    # flat beyond the table: 16k's rate at 64k, 512's at 128
    assert accelerator.flash_efficiency(table, "forward", 128, 65536) == pytest.approx(189 / 312,
                                                                                       abs=1e-4)
    assert accelerator.flash_efficiency(table, "forward", 128, 128) == pytest.approx(99 / 312,
                                                                                     abs=1e-4)


@pytest.mark.parametrize("remat", ["none", "selective", "full"])
def test_flash_block_is_the_naive_block_with_the_kernel_in_place_of_the_core(remat):
    # the formula by hand: the naive block less QKᵀ/PV (3 passes + recomputes) and the softmax
    # traffic, plus the kernel's forward (once, and once per recompute) and its backward
    chip = load_chip("h100-sxm")
    sizes, naive_grid, flash_grid = model_sizes(LLAMA), _grid(4096, False), _grid(4096, True)
    rate, bw = chip.peak("bfloat16") * chip.matmul_efficiency, chip.hbm_bandwidth
    core = sum(accelerator.gemm_seconds(M, K, N, c, rate, bw, 2)
               for M, K, N, c in accelerator.matmul_shapes(sizes, naive_grid)[4:6])
    _, core_elements = accelerator.elementwise_elements(sizes, naive_grid, True)
    full, selective = recompute_layers(naive_grid, remat)
    forward, backward = accelerator.flash_seconds(sizes, flash_grid, chip.peak("bfloat16"),
                                                  accelerator.flash_table(chip))
    scores = core_elements * naive_grid.tokens * 2 / bw
    expected = (_layer(chip, naive_grid, remat) - (3 + full + selective) * core
                - (1 + accelerator.BACKWARD_BYTES + full + selective) * scores
                + (1 + full + selective) * forward + backward)
    assert _layer(chip, flash_grid, remat)[0] == pytest.approx(expected[0], rel=1e-12)


@pytest.mark.parametrize("remat,megatron", [("none", True), ("selective", True),
                                            ("full", True), ("full", False)])
def test_naive_block_is_the_formula_it_was(remat, megatron):
    # the naive kernel as before this change: every GEMM on the roofline (QKᵀ and PV with
    # their (s, s) outputs) and the softmax's traffic over the scores
    chip = load_chip("a100-80gb")
    sizes, grid = model_sizes(LLAMA), _grid(2048, False, Layout(data=2, tensor=4, sp=True))
    rate, bw = chip.peak("bfloat16") * chip.matmul_efficiency, chip.hbm_bandwidth
    gemms = [accelerator.gemm_seconds(M, K, N, c, rate, bw, 2)
             for M, K, N, c in accelerator.matmul_shapes(sizes, grid)]
    full, selective = recompute_layers(grid, remat)
    recomputed = sum(gemms) - (0.0 if megatron else gemms[3])
    elements, core_elements = accelerator.elementwise_elements(sizes, grid, megatron)
    before = (3 * sum(gemms) + full * recomputed + selective * (gemms[4] + gemms[5])
              + (elements * (1 + accelerator.BACKWARD_BYTES + full) + selective * core_elements)
              * grid.tokens * 2 / bw)
    assert _layer(chip, grid, remat, megatron)[0] == pytest.approx(before[0], rel=1e-12)


def test_flash_attention_time_does_not_move_with_hbm_bandwidth():
    # the fused kernel keeps the scores on chip: halving HBM bandwidth slows the flash block
    # only by its non-attention traffic, the naive block by its scores' traffic too
    chip = load_chip("h100-sxm")
    sizes = model_sizes(LLAMA)
    elements = {}
    for flash in (False, True):
        grid = _grid(16384, flash)
        total, core = accelerator.elementwise_elements(sizes, grid, True)
        elements[flash] = (total - core * flash) * grid.tokens * 2 * 2.5
        slower = _layer(chip, grid, bandwidth=chip.hbm_bandwidth / 2)
        assert slower - _layer(chip, grid) >= elements[flash] / chip.hbm_bandwidth * (1 - 1e-9)
        if flash:  # nothing else: no GEMM of this block is memory-bound at this size
            assert (slower - _layer(chip, grid))[0] == pytest.approx(
                (elements[flash] / chip.hbm_bandwidth)[0], rel=1e-9)
    assert elements[False][0] > 2 * elements[True][0]  # the scores dominate naive's traffic


def test_doubling_the_sequence_doubles_flash_attention_per_token():
    # per token, attention FLOPs grow as s; beyond the table (16k) the kernel's rate is flat,
    # so the kernel's seconds per token double exactly, and below it a little less than double
    # (the rate still climbs); naive's attention per token grows by its (s, s) traffic besides
    chip = load_chip("h100-sxm")
    table, sizes = accelerator.flash_table(chip), model_sizes(LLAMA)

    def per_token(seq):
        grid = _grid(seq, True)
        return sum(accelerator.flash_seconds(sizes, grid, 989e12, table))[0] / grid.tokens

    assert per_token(65536) / per_token(32768) == pytest.approx(2.0, rel=1e-12)
    assert 1.8 < per_token(8192) / per_token(4096) < 2.0
    # at 32k the naive block spends more on attention than the whole flash block
    naive, flash = _layer(chip, _grid(32768, False)), _layer(chip, _grid(32768, True))
    assert naive[0] > 2 * flash[0]


def test_profiles_without_a_benchmark_scale_a_published_table():
    # b200 states it is assumed from h100-sxm: FA3's fractions times 0.7756 / 0.8033
    b200, h100 = load_chip("b200"), load_chip("h100-sxm")
    assert b200.flash_attention == {"assumed_from": "h100-sxm"}
    ours, theirs = accelerator.flash_table(b200), accelerator.flash_table(h100)
    factor = b200.matmul_efficiency / h100.matmul_efficiency
    assert np.allclose(ours["forward"]["128"], np.array(theirs["forward"]["128"]) * factor)
    # a profile with no table at all (one saved before tables existed) is assumed like A100
    bare = dataclasses.replace(load_chip("tpu-v5p"), flash_attention={})
    a100 = load_chip("a100-80gb")
    assert np.allclose(accelerator.flash_table(bare)["forward_backward"]["64"],
                       np.array(a100.flash_attention["forward_backward"]["64"])
                       * bare.matmul_efficiency / a100.matmul_efficiency)


def test_published_runs_are_predicted_with_the_naive_kernel():
    runs = stack_runs()
    assert {run_setup(r)[1].attention for r in runs.itertuples()} == {"naive"}
    # a row that names its kernel is predicted with it: flash, without the scores' traffic
    row = fit_runs().iloc[[0]].assign(attention="flash")
    chip = load_chip("a100-80gb")
    flash, naive = (predict_run(next(r.itertuples()), chip)["compute"]
                    for r in (row, fit_runs().iloc[[0]]))
    assert run_setup(next(row.itertuples()))[1].attention == "flash"
    assert flash < naive
