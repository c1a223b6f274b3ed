"""Stragglers (parex.predict.stragglers) and matmul efficiency by shape (parex.predict.kernels),
by hand and in predicted steps."""

import dataclasses
from statistics import NormalDist

import numpy as np
import pytest

from parex.config import TrainConfig, model_preset
from parex.hardware import load_chip
from parex.layout import Layout
from parex.predict import kernels, predict
from parex.predict.stragglers import SPEED_SIGMA, expected_max, slowdown

MODEL = model_preset("llama2-7b")
TRAIN = TrainConfig(global_batch=256, seq_len=4096)


def test_expected_maximum_is_blom_and_grows_with_the_group():
    for n in (2, 8, 512, 32768):
        assert expected_max(n) == pytest.approx(NormalDist().inv_cdf((n - 0.375) / (n + 0.25)),
                                                abs=1e-8)
    # and a Monte Carlo draw of the maximum agrees to a few percent
    rng = np.random.default_rng(0)
    assert rng.standard_normal((4000, 64)).max(1).mean() == pytest.approx(expected_max(64),
                                                                         rel=0.03)
    assert expected_max(1) == 0.0
    assert list(np.diff(slowdown(np.array([8, 64, 512, 4096, 32768])))) == sorted(
        np.diff(slowdown(np.array([8, 64, 512, 4096, 32768]))), reverse=True)  # concave in n
    assert slowdown(32768) == pytest.approx(1 + SPEED_SIGMA * 4.1184, abs=1e-4)


def test_a_step_waits_for_its_slowest_device():
    layout = Layout.parse("data=64,tensor=8")
    chip = load_chip("h100-sxm")
    p = predict(MODEL, TRAIN, layout, chip)
    steady = predict(MODEL, TRAIN, layout, dataclasses.replace(chip, speed_variation=0.0))
    stretch = 1 + SPEED_SIGMA * expected_max(512)
    # the compute (and optimizer) on the critical path stretch by the slowest device's factor
    assert p.step_time_s["compute"] == pytest.approx(steady.step_time_s["compute"] * stretch)
    assert p.step_time_s["exposed_comm"] == pytest.approx(steady.step_time_s["exposed_comm"])


def test_the_emulated_mesh_has_no_stragglers():
    layout = Layout.parse("data=2,tensor=4")
    model, train = model_preset("tiny"), TrainConfig(global_batch=16)
    chip = load_chip("cpu-reference")
    assert predict(model, train, layout, chip).step_time_s == predict(
        model, train, layout, dataclasses.replace(chip, speed_variation=0.2)).step_time_s


def test_quantization_by_hand():
    gemm = {"units": 108, "tile": 128}
    # aligned and many tiles: the measured best
    assert kernels.quantization(8192, 8192, 1, gemm) == 1.0
    # 64 tiles on 108 SMs: 44 idle
    assert kernels.quantization(1024, 1024, 1, gemm) == pytest.approx(64 / 108)
    # a 130-wide output: 2 tiles, the second 2/128 full
    assert kernels.quantization(128 * 108, 130, 1, gemm) == pytest.approx(130 / 256)
    # a batched GEMM's instances share the waves: 32 instances of 2x2 tiles fill the SMs
    assert kernels.quantization(256, 256, 32, gemm) == 1.0
    assert kernels.quantization(256, 256, 1, {}) == 1.0


def test_small_gemms_lose_to_their_shape_in_a_predicted_step():
    tiny = model_preset("tiny").replace(dtype="bfloat16")
    train = TrainConfig(global_batch=8, seq_len=128)
    chip = load_chip("a100-80gb")
    shaped = predict(tiny, train, Layout(), chip).step_time_s["compute"]
    flat = predict(tiny, train, Layout(), dataclasses.replace(chip, gemm={})).step_time_s
    assert shaped > flat["compute"]
