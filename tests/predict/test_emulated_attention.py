"""The emulated mesh prices each attention kernel at what the calibration measured it to take
(parex.predict.time: naive_attention_seconds, ring_core_seconds, blockwise_seconds; parex.
calibrate.run.attention_factors): the naive kernel's batched small products run far below the
square matmuls' rates, and a factor fitted on a whole block would carry that loss into ring
attention's layouts, which never run it (docs/results/2026-12-emulated-step.md)."""

import dataclasses

import numpy as np
import pytest

from parex.calibrate.run import BLOCK_SEQUENCES, _block_config, attention_factors
from parex.config import TrainConfig, model_preset
from parex.hardware import load_chip
from parex.layout import Layout
from parex.predict.flops import ring_attention_executed
from parex.predict.shapes import Grid, model_sizes
from parex.predict.time import cpu_layer_seconds, naive_attention_seconds, ring_core_seconds

MODEL, TRAIN = model_preset("tiny"), TrainConfig(global_batch=16)
SIZES = model_sizes(MODEL)
CHIP = load_chip("cpu-reference")


def _grid(*specs) -> Grid:
    return Grid.from_layouts([Layout.parse(s, 8) for s in specs], TRAIN, MODEL)


def _layer(cal, grid) -> np.ndarray:
    return cpu_layer_seconds(SIZES, grid, "none", cal, CHIP.hbm_bandwidth)


def test_each_attention_kernel_takes_its_own_factor():
    # data=8 and Ulysses run the naive kernel, the ring its blocks: scaling one kernel's factor
    # moves only the layouts that run it, by exactly that kernel's price
    cal = CHIP.calibration
    grid = _grid("data=8", "data=2,seq=4,cp=ring", "data=2,seq=4,cp=ulysses")
    base = _layer(cal, grid)
    naive = naive_attention_seconds(SIZES, grid, "none", cal, CHIP.hbm_bandwidth)
    ring = ring_core_seconds(SIZES, grid, "none", cal) / cal.blockwise_factor
    moved = _layer(dataclasses.replace(cal, attention_factor=cal.attention_factor + 1.5), grid)
    np.testing.assert_allclose(moved - base, [1.5 * naive[0], 0.0, 1.5 * naive[2]],
                               rtol=1e-9, atol=1e-12)
    moved = _layer(dataclasses.replace(cal, blockwise_factor=cal.blockwise_factor + 1.0), grid)
    np.testing.assert_allclose(moved - base, [0.0, ring[1], 0.0], rtol=1e-9, atol=1e-12)
    assert naive[0] > 0 and ring[1] > 0


def test_the_ring_is_priced_by_the_blocks_it_executes():
    # at one matmul rate and free elementwise work, the ring's core is its executed FLOPs (every
    # hop's c × c blocks, the backward recomputing QKᵀ) over that rate: 2s + 1 blocks a pass,
    # not the T/s × T scores of the full-T convention, which would give the same seconds at
    # every s
    rate = 3e9
    cal = dataclasses.replace(CHIP.calibration, matmul_curve=((1e3, rate), (1e12, rate)),
                              elementwise_rate=1e30, blockwise_factor=1.0)
    grid = _grid("data=4,seq=2,cp=ring", "data=2,seq=4,cp=ring", "seq=8,cp=ring")
    core = ring_core_seconds(SIZES, grid, "none", cal)
    np.testing.assert_allclose(core, ring_attention_executed(SIZES, grid, "none") / rate,
                               rtol=1e-12)
    s, T = np.array([2, 4, 8]), MODEL.seq_len
    b = 16 / (8 / s)  # sequences per device: 16 over 8/s replicas
    full_t = 3 * 2 * 2 * (T / s) * T * SIZES.Dh * SIZES.H * b / rate  # QKᵀ and PV, 3 passes
    assert (core < full_t).all()
    assert core[0] / full_t[0] > core[2] / full_t[2]  # (2s + 1) / 4s of the scores shrinks


def test_a_factor_is_the_probes_time_over_its_price():
    cal = CHIP.calibration
    cfg = _block_config(layers=1)
    grid = Grid.from_columns(TrainConfig(global_batch=BLOCK_SEQUENCES), cfg)
    priced = float(naive_attention_seconds(model_sizes(cfg), grid, "none", cal,
                                           CHIP.hbm_bandwidth)[0])
    at = attention_factors(cal, CHIP.hbm_bandwidth, cal.step_overhead_s + 1.6 * priced,
                           cal.step_overhead_s + 1e9)
    assert at["attention_factor"] == pytest.approx(1.6)
    assert at["blockwise_factor"] == 8.0  # clipped: a probe cannot take 8× its price
    slower = attention_factors(cal, CHIP.hbm_bandwidth, 1.0, cal.step_overhead_s + 1e-9)
    assert slower["blockwise_factor"] == 0.25
