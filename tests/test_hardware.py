"""Hardware profiles as data, clusters, and the calibration's pieces."""

import dataclasses
import json
import math

import numpy as np
import pytest

from parex import machine
from parex.calibrate import local as local_profile, run as calibrate
from parex.errors import InputError
from parex.precision import check_chip
from parex.hardware import (COLLECTIVE_KINDS, HARDWARE_DIR, Calibration, Chip, Cluster, Link,
                            chip_from_json, known_hardware, load_chip, load_cluster, load_local,
                            save_chip)

CHIPS = ("a100-80gb", "h100-sxm", "h200", "b200", "mi300x", "tpu-v4p", "tpu-v5e", "tpu-v5p",
         "tpu-v6e")
# which chips have FP8 matmul units, by their vendors' datasheets: Hopper, Ada, Blackwell and
# CDNA 3 do; Ampere stops at int8, and Google's TPUs up to v6e list bf16 and int8 only
FP8_CHIPS = ("h100-sxm", "h100-sxm-500w", "h100-pcie", "h100-nvl", "h200", "h800", "b200",
             "gb200-nvl72", "mi300x", "l40s", "rtx-4090", "alps")  # alps: GH200's Hopper
NO_FP8_CHIPS = ("a100-80gb", "a100-pcie-80gb", "perlmutter", "rtx-3090", "rtx-3080ti",
                "frontier", "tpu-v4p", "tpu-v5e", "tpu-v5p", "tpu-v6e")  # frontier: MI250X


@pytest.mark.parametrize("name", CHIPS)
def test_every_profile_loads_with_sources_and_sane_numbers(name):
    chip = load_chip(name)
    assert chip.name == name and chip.sources
    assert 1e14 < chip.peak("bfloat16") < 1e16  # dense bf16: 197 TFLOP/s (v5e) .. 2.25 PFLOP/s
    assert 1e10 < chip.hbm_bytes < 1e12 and 5e11 < chip.hbm_bandwidth < 1e13
    assert chip.intra_node.bandwidth > chip.inter_node.bandwidth > 0
    assert 0 < chip.matmul_efficiency <= 1 and 0 < chip.network_efficiency <= 1
    assert chip.scaleup_domain >= chip.devices_per_node


def test_published_reference_numbers_are_the_profiles():
    # the vendors' datasheets (NVIDIA A100, H100 SXM, H200, B200) and the HDR InfiniBand link rate
    assert load_chip("a100-80gb").peak("bfloat16") == 312e12
    assert load_chip("h100-sxm").hbm_bandwidth == 3.35e12
    assert load_chip("h200").hbm_bytes == 141e9
    assert load_chip("b200").intra_node.bandwidth == 900e9
    assert load_chip("a100-80gb").inter_node.bandwidth == 25e9  # 200 Gb/s HDR per GPU


def test_every_shipped_chip_is_listed_here_with_or_without_fp8():
    """A new profile must be named in FP8_CHIPS or NO_FP8_CHIPS, so the test below checks it."""
    shipped = {name for name in known_hardware() if not name.startswith("cpu-")}
    assert shipped == set(FP8_CHIPS) | set(NO_FP8_CHIPS)


@pytest.mark.parametrize("name", FP8_CHIPS + NO_FP8_CHIPS)
def test_each_profile_loads_with_sourced_numbers_and_its_fp8_support(name):
    chip = load_chip(name)
    assert chip.name == name and chip.sources
    assert 1e13 < chip.peak("bfloat16") < 1e16 and 1e10 < chip.hbm_bytes < 1e12  # RTX 3080 Ti..
    assert 0 < chip.intra_node.bandwidth and 0 < chip.inter_node.bandwidth
    assert chip.scaleup_domain >= chip.devices_per_node
    if name in FP8_CHIPS:  # dense FP8 is twice dense bf16 on every chip that has it (L40S's
        # datasheet rounds 362.05 and 733: 2.02)
        assert chip.peak_flops["float8"] == pytest.approx(2 * chip.peak("bfloat16"), rel=0.02)
    else:
        assert "float8" not in chip.peak_flops
        with pytest.raises(InputError, match=f"precision fp8-delayed: {name} has no FP8"):
            check_chip("fp8-delayed", chip)


def test_the_new_chips_are_their_datasheets():
    nvl, grand_teton, nvl72 = (load_chip(n) for n in ("h100-nvl", "h100-sxm-500w",
                                                      "gb200-nvl72"))
    assert (nvl.hbm_bytes, nvl.hbm_bandwidth, nvl.peak_flops["float8"]) == (94e9, 3.9e12,
                                                                            1670.5e12)
    assert (grand_teton.hbm_bytes, grand_teton.hbm_bandwidth) == (96e9, 2.4e12)
    assert nvl72.scaleup_domain == 72 and nvl72.peak_flops["float8"] == 5e15
    rack = load_cluster("gb200-nvl72", nodes=18)  # 18 trays of 4: one rack on NVLink
    assert rack.link(72) == nvl72.intra_node and rack.link(144) == nvl72.inter_node
    assert load_chip("tpu-v5e").hbm_bandwidth == 819e9  # Google's 819 GB/s
    assert load_chip("b200").hbm_bytes == 180e9  # DGX B200: 1,440 GB over 8 GPUs


def test_unknown_hardware_lists_the_known_ones():
    with pytest.raises(ValueError) as err:
        load_chip("a100-40gb")
    message = str(err.value)
    assert "unknown hardware 'a100-40gb'" in message
    for name in CHIPS:
        assert name in message
    assert set(CHIPS) <= set(known_hardware())


def test_cluster_counts_devices_and_picks_the_link_level():
    cluster = load_cluster("h100-sxm", nodes=4)
    assert cluster.n_devices == 32 and cluster.name == "h100-sxm×4"
    assert cluster.link(8) is cluster.chip.intra_node
    assert cluster.link(16) is cluster.chip.inter_node
    with pytest.raises(ValueError, match="at least one node"):
        load_cluster("h100-sxm", nodes=0)


def _test_chip(kinds=COLLECTIVE_KINDS) -> Chip:
    cal = Calibration(matmul_curve=((1e6, 1e9), (1e8, 4e9)),
                      collectives={k: {"8": {"alpha": 1e-4, "beta": 1e-9}} for k in kinds},
                      step_overhead_s=1e-3, parallel_devices=1.5, elementwise_rate=2e9)
    return Chip("test-chip", "a test", {"float32": 4e9}, 1e9, 1e9, Link(1e9, 1e-5, "shm"),
                Link(1e9, 1e-5, "shm"), 8, 8, 1.0, 1.0, ("made up",), cal)


def test_profile_round_trips_through_json(tmp_path):
    chip = _test_chip()
    path = save_chip(chip, tmp_path)
    again = chip_from_json(json.loads(path.read_text()))
    assert again == chip
    assert load_chip("test-chip", tmp_path).calibration == chip.calibration
    h100 = load_chip("h100-sxm")  # a published FP8 benchmark survives the trip too
    assert chip_from_json(h100.to_json()).fp8_matmul_efficiency == h100.fp8_matmul_efficiency


def test_a_calibration_missing_a_collective_kind_is_refused_not_free(tmp_path):
    from parex.config import TrainConfig, model_preset
    from parex.layout import Layout
    from parex.predict import predict

    chip = _test_chip(kinds=("all-reduce", "all-gather"))
    save_chip(chip, tmp_path)
    with pytest.raises(InputError, match="lacks reduce-scatter, all-to-all, collective-permute"):
        load_chip("test-chip", tmp_path)
    with pytest.raises(ValueError, match="has no reduce-scatter timings"):  # built in code
        predict(model_preset("tiny"), TrainConfig(), Layout(seq=8, cp="ring"), chip)


def test_calibration_interpolates_the_matmul_curve_in_log_size():
    cal = Calibration(matmul_curve=((1e6, 1e9), (1e8, 3e9)))
    assert cal.matmul_rate(1e3) == 1e9 and cal.matmul_rate(1e10) == 3e9  # flat beyond the ends
    assert math.isclose(cal.matmul_rate(1e7), 2e9)  # halfway in log size


def test_alpha_beta_fit_recovers_a_line():
    sizes = np.array([1e4, 1e5, 1e6, 4e6])
    fit = calibrate.fit_alpha_beta(sizes, 2e-4 + 5e-10 * sizes)
    assert math.isclose(fit["alpha"], 2e-4, rel_tol=1e-6)
    assert math.isclose(fit["beta"], 5e-10, rel_tol=1e-6)
    # a negative intercept from noise is clamped to zero, the slope refitted through the origin
    fit = calibrate.fit_alpha_beta(sizes, -1e-4 + 5e-10 * sizes)
    assert fit["alpha"] == 0.0 and fit["beta"] > 0


def test_calibration_kernels_run_on_the_emulated_mesh():
    assert calibrate.matmul_rate(64, 8) > 1e6  # FLOP/s per device, all devices busy
    seconds = calibrate.collective_seconds("all-reduce", 8, 64 * 1024, 8)
    assert 0 < seconds < 1.0
    fn, args = calibrate.block_step(8)
    grads = fn(*args)
    assert grads[1].shape == args[1].shape  # input gradients too: every matmul runs 3 times


def test_in_step_probe_adds_one_all_reduce_per_matmul():
    """The two loops run the same matmuls; the second all-reduces after each, so it returns
    the mean over devices (equal rows everywhere) where the first does not."""
    import numpy as np

    (plain, args), (reduced, same) = calibrate.in_step_calls(8)
    assert all(a is b for a, b in zip(same, args))  # the same activation and weights
    a, b = np.asarray(plain(*args)), np.asarray(reduced(*args))
    rows = calibrate.IN_STEP_ROWS
    assert a.shape == b.shape == (8 * rows, 128)
    assert not np.allclose(a[:rows], a[rows:2 * rows])  # each device its own rows
    assert np.allclose(b[:rows], b[rows:2 * rows], atol=1e-6)  # averaged over the devices


def test_in_step_factor_is_the_extra_seconds_per_all_reduce_over_the_chained_fit():
    chain = calibrate.CHAIN
    assert calibrate.in_step_factor(0.010, 0.010 + chain * 2e-3, 1e-3) == pytest.approx(2.0)
    # never below the chained cost: a probe noisier than its difference reads as 1
    assert calibrate.in_step_factor(0.010, 0.009, 1e-3) == 1.0


def test_kernels_and_probes_are_timed_in_alternated_rounds(monkeypatch):
    order = []
    calls = {k: ((lambda k=k: order.append(k)), ()) for k in ("a", "b")}
    monkeypatch.setattr("jax.block_until_ready", lambda x: x)
    medians = calibrate.timed_alternately(calls, repeats=3)
    assert order == ["a", "b"] + ["a", "b"] * 3  # a warm-up each, then one of each per round
    assert set(medians) == {"a", "b"} and all(t >= 0 for t in medians.values())


def test_recalibration_reads_efficiency_and_parallelism_off_block_timings():
    chip = load_chip("cpu-reference")
    kernels, held = calibrate.block_probe(chip)
    overhead = chip.calibration.step_overhead_s
    t_all = 2 * kernels + overhead  # twice what the kernel rates say
    # all 8 devices' sequences on one device alone: kernels_8 at the busy rates, 4 times faster
    # than a busy device runs them (8 / P = 4: two devices' worth run at once)
    kernels_8, _ = calibrate.block_probe(chip, sequences=8 * calibrate.BLOCK_SEQUENCES)
    assert kernels_8 == pytest.approx(8 * kernels, rel=0.3)  # larger matmuls, other rates
    again = calibrate.recalibrated(chip, t_all, kernels_8 / 0.5 / 4 + overhead)
    assert again.calibration.step_efficiency == pytest.approx(0.5)
    assert again.calibration.efficiency_curve == chip.calibration.efficiency_curve  # not timed
    # the one-block loop: half the blocks' kernels and half the activations held per trip, its
    # SHALLOW_TRIPS trips at 0.8 of the kernel rates
    kernels_1, held_1 = calibrate.block_probe(chip, layers=1)
    assert (kernels_1, held_1) == pytest.approx((kernels / 2, held / 2))
    curved = calibrate.recalibrated(chip, t_all, t_all / 4,
                                    calibrate.SHALLOW_TRIPS * kernels_1 / 0.8 + overhead)
    (held_a, shallow), (held_b, deep) = curved.calibration.efficiency_curve
    assert (held_a, shallow, held_b, deep) == pytest.approx((held_1, 0.8, held, 0.5))
    assert again.calibration.parallel_devices == pytest.approx(2.0)
    # its temporaries over the mmap threshold fault in: their seconds are not parallelism
    faulting = dataclasses.replace(chip, calibration=dataclasses.replace(
        chip.calibration, page_fault_rate=1e9, mmap_threshold_bytes=32 * 2**20))
    temp = 100 * 2**20
    slower = calibrate.recalibrated(faulting, t_all,
                                    (kernels_8 / 0.5 + temp / 1e9) / 4 + overhead,
                                    alone_temp_bytes=temp)
    assert slower.calibration.parallel_devices == pytest.approx(2.0)


def test_reference_calibration_is_complete():
    chip = load_chip("cpu-reference")
    cal = chip.calibration
    assert cal is not None and cal.n_devices == chip.devices_per_node == 8
    assert set(cal.collectives) == set(COLLECTIVE_KINDS)
    assert 1 <= cal.parallel_devices <= cal.n_devices and 0 < cal.step_efficiency <= 2


def test_cpu_local_is_this_machines_profile_from_the_cache(monkeypatch, tmp_path,
                                                           stand_in_calibration):
    """No tracked file is cpu-local: it comes from $PAREX_CACHE, keyed by this machine. Loading
    it never calibrates; ensure_local (what the commands call) does, once, when it is missing."""
    assert not (HARDWARE_DIR / "cpu-local.json").exists()
    assert "cpu-local" in known_hardware()
    monkeypatch.setenv("PAREX_CACHE", str(tmp_path))
    path = machine.profile_path()
    assert path.parent == tmp_path / "hardware"
    assert path.name == f"cpu-local-{machine.fingerprint()}.json"
    calls = stand_in_calibration
    with pytest.raises(InputError, match="run `parex calibrate`"):
        load_chip("cpu-local")
    assert calls == [] and not path.exists()  # a load asked for nothing to be measured
    assert local_profile.ensure_local(progress=False) == path
    assert calls == [path] and path.exists()
    first = load_chip("cpu-local")
    assert local_profile.ensure_local(progress=False) == path and calls == [path]  # kept
    assert load_chip("cpu-local") == first


def test_fingerprint_names_the_cpu_setup(monkeypatch):
    description = machine.machine_description()
    assert "cores" in description and "GiB" in description
    before = machine.fingerprint()
    assert len(before) == 12 and int(before, 16) >= 0
    cores = machine._usable_cores()
    monkeypatch.setattr(machine, "_usable_cores", lambda: cores + 1)
    assert machine.fingerprint() != before  # another core count is another machine
    monkeypatch.setattr(machine, "_cpu_model", lambda: "another CPU")
    assert "another CPU" in machine.machine_description()


def test_a_profile_measured_at_another_load_says_so_once(monkeypatch, tmp_path, capsys):
    cal = Calibration(cores=2, load_average=12.0)
    notice = machine.load_changed(cal, now=3.0)
    assert "load 12.0" in notice and "3.0 now" in notice and "parex calibrate" in notice
    assert machine.load_changed(cal, now=11.5) is None  # under one core's difference
    assert machine.load_changed(Calibration(cores=2), now=9.0) is None  # no record
    path = tmp_path / "cpu-local.json"
    chip = load_chip("cpu-reference")
    path.write_text(json.dumps(dataclasses.replace(
        chip, calibration=dataclasses.replace(chip.calibration, load_average=50.0)).to_json()))
    local_profile.warn_if_load_changed(path)
    local_profile.warn_if_load_changed(path)
    assert capsys.readouterr().err.count("measured at load 50.0") == 1


def test_a_machine_running_at_another_speed_says_by_how_much():
    """The calibration's block step timed now against its calibrated time: a notice beyond
    ±10 %, naming the factor to expect and the fix."""
    notice = machine.speed_changed(1.25)
    assert "1.25×" in notice and "parex calibrate" in notice
    assert "0.80×" in machine.speed_changed(0.8)
    assert machine.speed_changed(1.08) is None and machine.speed_changed(0.93) is None


def test_the_calibrated_block_time_inverts_the_recalibration():
    """calibrated_block_seconds is what recalibrated() takes a block step time to: a profile
    recalibrated on a block step of t seconds (all devices) gives t back."""
    from parex.calibrate.run import calibrated_block_seconds, recalibrated

    chip = load_chip("cpu-reference")
    t_alone = chip.calibration.parallel_devices  # any positive time: only t_all is checked
    for t_all in (0.2, 0.35):
        again = recalibrated(chip, t_all, t_alone)
        assert calibrated_block_seconds(again) == pytest.approx(t_all, rel=1e-9)


@pytest.mark.slow
def test_first_use_calibrates_in_a_fresh_process(monkeypatch, tmp_path):
    monkeypatch.setenv("PAREX_CACHE", str(tmp_path))
    seconds = local_profile.calibrate_in_subprocess(machine.profile_path(), progress=False)
    chip = load_local()
    assert chip.name == "cpu-local"
    assert chip.calibration.machine == machine.fingerprint()
    print(f"calibration took {seconds:.1f} s")



@pytest.mark.slow
def test_parex_calibrate_writes_a_profile(tmp_path):
    chip, path, seconds = calibrate.run(8, directory=tmp_path, progress=False)
    assert seconds > 0 and path == str(tmp_path / "cpu-local.json")
    again = load_chip("cpu-local", tmp_path)
    assert again.calibration.matmul_curve == chip.calibration.matmul_curve
    assert "devices run at once" in calibrate.summary(chip)


def test_cluster_of_a_chip_is_a_value():
    """A Cluster is a frozen value: equal by content (two loads of a profile are one cluster),
    never changed in place; its size and name follow from the chip and the node count."""
    chip = load_chip("a100-80gb")
    two = Cluster(chip, 2)
    assert two == Cluster(load_chip("a100-80gb"), 2) and two != Cluster(chip, 3)
    assert two != Cluster(load_chip("h100-sxm"), 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        two.nodes = 4
    assert two.n_devices == 2 * chip.devices_per_node and two.name == f"{chip.name}×2"


def test_a_step_holding_fewer_activations_runs_at_the_one_block_probes_efficiency():
    from parex.predict.time import cpu_step_efficiency

    cal = dataclasses.replace(load_chip("cpu-reference").calibration,
                              efficiency_curve=((1e6, 0.9), (4e6, 0.6)), step_efficiency=0.6)
    held = np.array([1e5, 1e6, 2e6, 4e6, 1e9])
    # flat beyond the probes, log-linear between them: 2 MB is half way from 1 to 4 in log
    assert cpu_step_efficiency(cal, held) == pytest.approx([0.9, 0.9, 0.75, 0.6, 0.6])
    without = dataclasses.replace(cal, efficiency_curve=())
    assert cpu_step_efficiency(without, held) == pytest.approx([0.6] * 5)
