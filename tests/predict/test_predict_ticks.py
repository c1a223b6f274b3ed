"""The cpu-local pipeline model: the tick-synchronous executor's lockstep, its calibrated cost per
tick and its window copies (parex.predict.ticks). Analytic, no compile, except the slow check
that the calibration measures the tick."""

import dataclasses
import json

import numpy as np
import pytest

from parex import machine
from parex.calibrate import local as local_profile
from parex.config import TrainConfig, model_preset
from parex.errors import InputError
from parex.hardware import chip_from_json, load_chip
from parex.layout import Layout
from parex.predict import predict, predict_batch
from parex.predict.schedule_stats import lockstep_columns, table_columns
from parex.predict.shapes import Grid
from parex.predict.ticks import lockstep_compute

TINY, TRAIN = model_preset("tiny"), TrainConfig(global_batch=16)


def _grid(spec: str) -> Grid:
    return Grid.from_layouts([Layout.parse(spec, 8)], TRAIN, TINY)


def _sum(grid, t_b, t_w, ratio: float) -> float:
    return lockstep_columns(grid, t_b, t_w, np.array([ratio]))[2][0]


def test_lockstep_sums_the_ticks_slowest_ops():
    """ratio 0: the ops' summed cost p·m·(t_F + t_B); ratio ≥ p: ratio × Σ_t (the tick's
    slowest op), GPipe's makespan (m + p − 1)(t_F + t_B); 1F1B's ticks mix an F on one stage
    with a B on another, so its lockstep makespan is longer than that, at most 2 t_F a tick."""
    p, m = 4, 6
    t_b, t_w = np.array([2.0]), np.array([0.0])
    for schedule in ("gpipe", "1f1b"):
        grid = _grid(f"data=2,stage={p},schedule={schedule},microbatches={m}")
        assert _sum(grid, t_b, t_w, 0.0) == pytest.approx(p * m * 3)
        assert _sum(grid, t_b, t_w, 1.0) == pytest.approx(p * m * 3)
        slowest = _sum(grid, t_b, t_w, p) / p
        if schedule == "gpipe":
            assert slowest == pytest.approx((m + p - 1) * 3)
        else:
            assert (m + p - 1) * 3 < slowest <= 2 * table_columns(grid)[0][0]


def test_lockstep_compute_loses_the_idle_cores():
    """GPipe, P = 8 devices at once, d = 2 per stage (ratio 4 = p): every tick lasts its
    slowest op, so the arithmetic takes (m + p − 1)/m of its busy time; with P ≤ d, the busy
    time; the head's share is 1/p of m heads either way."""
    grid = _grid("data=2,stage=4,schedule=gpipe,microbatches=4")
    units = (np.array([2.0]), np.array([0.0]))
    lock, busy, _ = lockstep_compute(grid, np.ones(1), np.zeros(1), "none", 8.0, units)
    assert lock[0] / busy[0] == pytest.approx(7 / 4)
    lock, busy, _ = lockstep_compute(grid, np.ones(1), np.zeros(1), "none", 2.0, units)
    assert lock[0] == pytest.approx(busy[0]) and busy[0] == pytest.approx(4.0)  # m t_layers
    lock, busy, _ = lockstep_compute(grid, np.zeros(1), np.ones(1), "none", 8.0, units)
    assert lock[0] == busy[0] == pytest.approx(1.0)  # 4 heads on 1 of 4 stages


def _chip(**calibration):
    chip = load_chip("cpu-reference")
    return dataclasses.replace(chip, calibration=dataclasses.replace(chip.calibration,
                                                                     **calibration))


def test_a_cheaper_tick_shows_up_per_tick_of_the_table():
    """The calibrated tick cost enters once per tick of the schedule table, pipelines only."""
    specs = ["data=2,stage=4,schedule=1f1b,microbatches=4",
             "data=4,stage=2,schedule=zbh1,microbatches=4", "data=8"]
    layouts = [Layout.parse(s, 8) for s in specs]
    slow = predict_batch(TINY, TRAIN, layouts, _chip(pipeline_tick_s=2e-3))["step_time_s"]
    fast = predict_batch(TINY, TRAIN, layouts, _chip(pipeline_tick_s=1e-3))["step_time_s"]
    ticks = table_columns(Grid.from_layouts(layouts, TRAIN, TINY))[0]
    assert ticks[0] == 2 * (4 + 4 - 1) and ticks[1] > ticks[0] / 2
    np.testing.assert_allclose(slow - fast, 1e-3 * ticks, rtol=1e-9, atol=1e-12)
    assert ticks[2] == 0 and slow[2] == fast[2]


def test_emulated_bubble_only_when_busy_devices_leave_cores_idle():
    """With fewer devices per stage than the devices that run at once (P), a tick of one busy
    stage leaves cores idle: a bubble; with P ≤ devices per stage there is none."""
    layout = Layout.parse("data=2,stage=4,schedule=gpipe,microbatches=4", 8)
    shared = predict(TINY, TRAIN, layout, _chip(parallel_devices=1.0)).step_time_s
    wide = predict(TINY, TRAIN, layout, _chip(parallel_devices=8.0)).step_time_s
    assert shared["bubble"] == 0.0
    assert wide["bubble"] > 0.0
    assert wide["total"] - shared["total"] == pytest.approx(wide["bubble"])


def test_profile_without_the_tick_cost_is_refused_and_recalibrated(monkeypatch, tmp_path,
                                                                    stand_in_calibration):
    """A profile calibrated before the tick cost was measured is not used at 0 s: loading it
    raises, and cpu-local calibrates this machine again."""
    data = load_chip("cpu-reference").to_json()
    del data["calibration"]["pipeline_tick_s"]
    with pytest.raises(InputError, match="tick cost"):
        chip_from_json(data)
    monkeypatch.setenv("PAREX_CACHE", str(tmp_path))
    path = machine.profile_path()
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(data | {"name": "cpu-local"}))
    calls = stand_in_calibration
    with pytest.raises(InputError, match="parex calibrate"):
        load_chip("cpu-local")  # an out-of-date profile is not used
    local_profile.ensure_local(progress=False)
    assert load_chip("cpu-local").calibration.pipeline_tick_s > 0
    assert calls == [path]


def test_calibration_stores_the_probed_tick(monkeypatch):
    """`parex calibrate` runs the tick probe and keeps what it measured (every measurement
    replaced by a stand-in here: the probe itself is the slow test below)."""
    from parex.calibrate import run as calibrate, pipeline as calibrate_pipeline

    monkeypatch.setattr(calibrate, "kernel_timings", lambda d: {
        "matmul": [(2.0 * n ** 3, 1e10 + n) for n in calibrate.MATMUL_SIZES], "bf16": 2e10,
        "elementwise": (1e9, 1e9), "blocks8": 0.05, "alone": (0.1, 1e6), "shallow": 0.02,
        "in_step": (0.01, 0.02), "attention": (0.01, 0.012)})
    monkeypatch.setattr(calibrate, "optimizer_seconds", lambda d: 1e-8)
    monkeypatch.setattr(calibrate, "step_overhead", lambda d: 1e-4)
    monkeypatch.setattr(calibrate, "collective_seconds", lambda k, g, s, d: 1e-4 + s * 1e-9)
    monkeypatch.setattr(calibrate_pipeline, "tick_seconds", lambda d: 1.25e-3)
    chip = calibrate.calibrate(8, progress=False)
    assert chip.calibration.pipeline_tick_s == 1.25e-3
    assert 1e-5 < load_chip("cpu-reference").calibration.pipeline_tick_s < 0.1


@pytest.mark.slow
def test_tick_probe_measures_a_positive_cost():
    """The probe pipeline (two compiles of a 4-layer, width-16 model) times a tick."""
    from parex.calibrate.pipeline import tick_seconds

    assert 1e-5 < tick_seconds(8, repeats=3) < 0.1


def test_fewer_devices_than_calibrated_copy_faster_around_each_tick():
    """The calibration measured the copy bandwidth with all 8 devices busy; a pipeline on 2
    devices (one per core) copies its ticks' switch outputs at the bandwidth its 2 devices get,
    scaled as their arithmetic is (time.cpu_rate_scale), so its per-tick cost is the tick probe's
    plus the copies at that faster rate."""
    import importlib

    from parex.predict import memory, stash, time
    from parex.predict.shapes import model_sizes

    core = importlib.import_module("parex.predict.core")
    chip = load_chip("cpu-reference")
    cal = chip.calibration
    layout = Layout.parse("stage=2,schedule=gpipe,microbatches=8", 2)
    train = TrainConfig(global_batch=8)
    grid = Grid.from_layouts([layout], train, TINY)
    sizes = model_sizes(TINY)
    compute = {"layers_per_microbatch": np.array([0.01]), "head_per_microbatch": np.array([0.0])}
    out = core._executor_ticks(sizes, grid, chip, "none", 4, {}, compute)
    values = stash.stash_bytes(sizes, grid, memory.xla_layer_elements(sizes, grid, "none"), 4,
                               "none")["value"]
    copied = stash.window_bytes(sizes, grid, values)
    scale = time.cpu_rate_scale(grid, cal.n_devices, cal.parallel_devices)
    assert scale[0] > 1.5  # 2 devices share the cores with nobody else
    n_ticks = table_columns(grid)[0]
    expected = n_ticks * (cal.pipeline_tick_s + 2 * copied / (chip.hbm_bandwidth * scale))
    assert out["ticks"] == pytest.approx(expected)
    # on all 8 devices the calibrated bandwidth applies as measured
    eight = Grid.from_layouts([Layout.parse("data=4,stage=2,schedule=gpipe,microbatches=4", 8)],
                              TRAIN, TINY)
    assert time.cpu_rate_scale(eight, cal.n_devices, cal.parallel_devices)[0] == pytest.approx(1)
