"""The Explorer driven from Python, as a notebook user would through its controls."""

import html
import re

import pytest
from cli_agreement import assert_cli_predicts_what_is_shown

from parex.charts.style import format_bytes
import parex
from parex.explorer.explain import activation_bytes
from parex.explorer.measuring import ratio_text
from parex.explorer.state import resolve
from parex.layout import Layout
from parex.parallel.schedules import make_schedule
from parex.predict import predict
from parex.explorer.widget import Explorer, divisors


@pytest.fixture
def explorer():
    return Explorer(model="tiny", n_devices=8, global_batch=8, steps=2)


@pytest.fixture(scope="module")
def measured():
    """One Explorer after measuring tensor=2 (data=4) on the emulated mesh, then pressing
    Measure twice in a row (the second press lands while the first runs)."""
    explorer = Explorer(model="tiny", n_devices=8, global_batch=8, steps=3)
    explorer.controls["tensor"].value = 2
    events = []
    explorer._progress = lambda done, total, text: events.append((done, total, text))
    first = explorer.measure()
    explorer._on_measure_click()
    explorer._on_measure_click()  # ignored: the first click's run holds the button
    explorer._thread.join()
    return explorer, first, events


def _drawn(rows, source, part, column="bytes"):
    """What the live chart draws for one part of one side."""
    row = rows[(rows["source"] == source) & (rows["part"] == part)]
    return row[column].item()


def test_controls_describe_the_layout(explorer):
    assert explorer.layout == Layout(data=8)
    explorer.controls["tensor"].value = 4
    assert explorer.layout == Layout(data=2, tensor=4)
    explorer.set(fsdp=2, zero=1, sp=True)
    assert explorer.layout == Layout(data=1, fsdp=2, tensor=4, zero=1, sp=True)
    assert explorer.error is None and "fsdp=2,tensor=4" in explorer.status.value
    explorer.load_layout("data=4,stage=2,schedule=1f1b,microbatches=2")
    assert explorer.layout == Layout(data=4, stage=2, schedule="1f1b", microbatches=2)


def test_prediction_updates_the_chart_in_place(explorer):
    chart, before = explorer.chart, explorer.chart_data()
    params = explorer.prediction.memory_bytes_per_device["params"]
    assert _drawn(before, "predicted", "parameters") == params
    explorer.controls["tensor"].value = 4
    after, p = explorer.chart_data(), explorer.prediction
    assert explorer.chart is chart  # the same widget, its chart replaced
    assert p.layout == "data=2,tensor=4"
    assert _drawn(after, "predicted", "parameters") == p.memory_bytes_per_device["params"]
    assert _drawn(after, "predicted", "parameters") < params  # TP splits the weights
    assert _drawn(after, "predicted", "compute", "seconds") == pytest.approx(
        p.step_time_s["compute"])
    assert "data=2,tensor=4" in set(after["label"]) and "predicted" in explorer.status.value


@pytest.mark.parametrize("controls", [
    {},
    {"tensor": 2, "zero": 1, "remat": "selective", "hardware": "a100-80gb"},
    {"stage": 4, "schedule": "1f1b", "microbatches": 4, "hardware": "h100-sxm"},
    {"layers": 8, "hidden": 256, "seq_len": 64, "tensor": 4, "sp": True},
    {"model": "llama2-70b", "devices": 64, "global_batch": 64, "tensor": 8, "stage": 4,
     "schedule": "interleaved", "virtual": 2, "microbatches": 8, "hardware": "h100-sxm"},
])
def test_the_explorer_predicts_what_parex_predict_prints(explorer, controls):
    explorer.set(**controls)
    assert explorer.error is None
    cli, shown = assert_cli_predicts_what_is_shown(explorer)
    assert (cli["layout"], cli["hardware"], cli["fits"]) == (
        shown["layout"], shown["hardware"], shown["fits"])


def test_hardware_follows_the_profile_and_scale(explorer):
    local = explorer.prediction.step_time_s["total"]
    explorer.set(hardware="a100-80gb")  # an accelerator predicts what runs there: bfloat16
    assert explorer.controls["dtype"].value == "bfloat16" and explorer.model.dtype == "bfloat16"
    assert explorer.prediction.hardware.startswith("a100-80gb")
    assert explorer.prediction.step_time_s["total"] < local
    explorer.set(hardware="cpu-local")
    assert explorer.controls["dtype"].value == "float32"  # what the emulated mesh runs
    # Megatron's 175B recipe: TP inside a node, a pipeline across nodes, bf16, recompute.
    explorer.set(model="korthikanti-175b", hardware="a100-80gb", devices=1024, tensor=8,
                 stage=8, microbatches=8, global_batch=1024, schedule="1f1b", remat="full",
                 zero=1)
    assert explorer.layout == Layout(data=16, tensor=8, stage=8, zero=1, schedule="1f1b",
                                     microbatches=8)
    assert explorer.prediction.fits and explorer.prediction.n_devices == 1024
    assert ">fits<" in explorer.status.value and "175B parameters" in explorer.status.value


def test_a_large_preset_comes_up_realistic_and_is_guided_to_fit(explorer):
    explorer.set(model="llama2-70b", devices=64, global_batch=64, hardware="h100-sxm")
    # what runs there use: bfloat16, flash attention and so no recompute by default
    assert (explorer.model.dtype, explorer.train.remat) == ("bfloat16", "none")
    p = explorer.prediction
    assert not p.fits and "does not fit" in explorer.status.value
    assert format_bytes(p.over_capacity_bytes) in explorer.status.value
    assert explorer.fixes, "no change found that fits"
    fix = explorer.fixes[0]
    assert fix.prediction.fits and all(f.prediction.fits for f in explorer.fixes)
    # the planner's fastest first (parex.plan.alternatives), each with its saving
    steps = [f.prediction.step_time_s["total"] for f in explorer.fixes]
    assert steps == sorted(steps) and "than now" in fix.note
    buttons = explorer.guide.children[1:]
    assert fix.text in buttons[0].description
    buttons[0].click()  # apply it: the Explorer now predicts what the suggestion did
    assert explorer.prediction.fits and explorer.fixes == []
    assert explorer.prediction.to_json() == fix.prediction.to_json()


def test_a_fix_at_the_default_batch_is_one_the_controls_can_set(explorer):
    """llama2-13b on 8 H100s at its default batch (512 sequences, b = 1 on an accelerator):
    the fastest fits split it into 512 / 8 = 64 microbatches, which the control offers; each
    fix sets only values its controls hold, and a click applies it (the browser test's path)."""
    explorer.set(hardware="h100-sxm", global_batch=None)  # None: the default batch
    explorer.set(tensor=2, stage=4, schedule="1f1b", microbatches=4)
    explorer.set(model="llama2-13b")
    assert explorer.train.global_batch is None and not explorer.prediction.fits
    assert explorer.fixes and any(f.changes.get("microbatches", 0) > 32 for f in explorer.fixes)
    for fix in explorer.fixes:
        for name, value in fix.changes.items():
            options = getattr(explorer.controls[name], "options", None)
            assert options is None or value in options, (name, value)
    explorer.guide.children[1].click()
    assert explorer.prediction.fits and "per device <span" in explorer.status.value


def test_the_printed_command_for_another_framework_imports_back_as_the_same_setting(explorer):
    """The command line's framework menu: Megatron-LM's options for the Setting the Explorer
    shows (parex.interop.emit), which import back to the same Setting; a layout Megatron-LM
    cannot run is refused in one line naming the nearest it can; parex's own command again."""
    from parex.interop import from_megatron

    explorer.set(model="llama2-7b", hardware="h100-sxm", global_batch=None)
    explorer.set(tensor=2, stage=4, schedule="1f1b", microbatches=8)
    explorer.command_for.value = "megatron"
    text = html.unescape(re.sub("<[^>]+>", "", explorer.cli_line.value))
    assert "pretrain_gpt.py" in text and "--tensor-model-parallel-size 2" in text
    back = from_megatron(text)
    assert back.setting("h100-sxm").layout == explorer.setting.layout
    explorer.set(stage=2, schedule="zbv", virtual=2)
    refusal = html.unescape(re.sub("<[^>]+>", "", explorer.cli_line.value))
    assert "Megatron-LM" in refusal and "nearest" in refusal and "\n" not in refusal
    explorer.command_for.value = "parex"
    assert "parex predict" in explorer.cli_line.value


def test_mesh_axes_offer_only_divisors_of_the_device_count(explorer):
    assert list(explorer.controls["tensor"].options) == divisors(8) == [1, 2, 4, 8]
    explorer.set(tensor=8)
    explorer.controls["devices"].value = 4  # 8 no longer divides: falls back to 1
    assert list(explorer.controls["tensor"].options) == [1, 2, 4]
    assert explorer.layout == Layout(data=4)
    explorer.set(tensor=4)
    explorer.controls["devices"].value = 16  # 4 still divides: kept
    assert explorer.layout == Layout(data=4, tensor=4)


def test_invalid_combinations_show_the_message_and_fade_the_charts(explorer):
    chart_before = explorer.draw().chart.spec
    explorer.set(fsdp=4, tensor=4)  # 16 devices' worth of axes on 8 devices
    assert "lower one of those axes" in explorer.error and "invalid layout" in explorer.status.value
    assert explorer.stale and _faded(explorer) == len(explorer.stale_views)
    explorer.set(fsdp=1, tensor=1, sp=True)  # sp needs tensor > 1: the LayoutError's text
    assert "sp=on needs tensor > 1" in explorer.error and "sp=on" in explorer.status.value
    explorer.set(sp=False, global_batch=4)  # 8 replicas cannot split 4 sequences
    assert "global batch 4" in explorer.error
    assert explorer.chart.spec == chart_before  # the last good chart stays up, faded
    assert explorer.measure() is None and explorer.history == []
    explorer.set(global_batch=8)
    assert not explorer.stale and _faded(explorer) == 0


def _faded(explorer) -> int:
    """How many of the views that show the controls' numbers are faded; the chart's pane is
    among them (a browser checks the computed opacity: tests/test_browser.py)."""
    assert explorer.stale_views[0].children == (explorer.chart,)
    return sum("parex-stale" in view._dom_classes for view in explorer.stale_views)


def test_the_status_states_every_assumption_in_one_line(explorer):
    a = explorer.prediction.assumptions
    assert a["recipe"] == "parex" and a["convention"] == "xla-cpu"  # cpu-local's own
    line = explorer.status.value.split("assumes ")[1]
    for value in (a["hardware"], a["dtype"], f"recipe {a['recipe']}", a["convention"],
                  f"global batch {a['global_batch']}", f"remat {a['remat']}", a["schedule"]):
        assert str(value) in line
    explorer.set(hardware="h100-sxm")  # the profile's defaults follow, and can be overridden
    assert explorer.prediction.assumptions["recipe"] == "mixed"
    assert explorer.explained["params"].startswith("stored weights: 2 B ×")  # bf16 weights
    explorer.set(recipe="parex")
    assert "recipe parex" in explorer.status.value and "--recipe parex" in explorer.cli_command()
    assert explorer.explained["params"].startswith("stored weights: 4 B ×")  # the formula too


def test_a_busy_machine_is_named_beside_the_calibration(explorer, monkeypatch):
    from types import SimpleNamespace

    from parex.explorer import live_panel

    # the tests' reference profile has no load on record: give it one of 0.5
    real = live_panel.load_note
    monkeypatch.setattr(live_panel, "load_note", lambda cal, now=None: real(
        SimpleNamespace(load_average=0.5, cores=cal.cores), now))
    cores = explorer.chip.calibration.cores
    monkeypatch.setattr("os.getloadavg", lambda: (cores + 3.0,) * 3)
    explorer.set(global_batch=16)
    ratio = f"{(2 * cores + 3.0) / (cores + 0.5):.2f}×"
    assert "machine load" in explorer.notes.value and ratio in explorer.notes.value
    monkeypatch.setattr("os.getloadavg", lambda: (0.6, 0.6, 0.6))  # as calibrated
    explorer.set(global_batch=8)
    assert "machine load" not in explorer.notes.value


def test_a_dead_end_offers_ways_out(explorer):
    explorer.set(global_batch=16, stage=4, schedule="interleaved", virtual=2, microbatches=4)
    assert "lower virtual to at most 1" in explorer.error  # tiny has 4 layers: 8 chunks
    offered = [way.changes for way in explorer.ways]
    assert {"stage": 2} in offered and {"layers": 8} in offered
    for way in explorer.ways:  # every one is a valid layout
        resolve(explorer.values | way.changes)
    explorer.guide.children[1 + offered.index({"stage": 2})].click()
    assert explorer.error is None and explorer.layout.stage == 2


def test_schedule_controls_only_apply_to_pipelines(explorer):
    explorer.set(schedule="1f1b", virtual=2)
    assert explorer.controls["schedule"].disabled
    assert explorer.layout.schedule is None and explorer.layout.virtual_stages == 1
    explorer.set(stage=2)  # now they apply, and the schedule table's checks speak
    assert not explorer.controls["schedule"].disabled
    assert "set virtual=1, or use schedule=interleaved" in explorer.error
    explorer.set(schedule="interleaved", microbatches=2)
    assert explorer.layout == Layout(data=4, stage=2, schedule="interleaved", virtual_stages=2,
                                     microbatches=2)


def test_preset_fills_dims_and_dims_make_a_custom_model(explorer):
    explorer.controls["model"].value = "small"
    assert explorer.controls["hidden"].value == 384 and explorer.model.name == "small"
    explorer.controls["layers"].value = 2
    assert explorer.model.layers == 2 and explorer.model.name == "small-custom"
    assert explorer.model.ffn == 4 * 384


def test_cpu_local_says_why_the_bubble_is_hidden_and_a_gpu_shows_it(explorer):
    explorer.set(global_batch=16, stage=4, schedule="1f1b", microbatches=4)
    assert explorer.prediction.step_time_s["bubble"] == 0
    assert "share the host's cores" in explorer.notes.value
    assert explorer.gpu_button.layout.display != "none"
    explorer.gpu_button.click()
    p = explorer.prediction
    assert p.hardware.startswith("h100") and p.step_time_s["bubble"] > 0
    assert _drawn(explorer.chart_data(), "predicted", "bubble", "seconds") == pytest.approx(
        p.step_time_s["bubble"])
    assert explorer.gpu_button.layout.display == "none" and explorer.notes.value == ""


def test_the_gantt_panel_draws_the_schedule_idle_for_the_predicted_bubble(explorer):
    # gpt2-medium: with flash attention timed as its fused kernel, gpt2-small's blocks are so
    # cheap beside its head that the chart falls back to compute-timed ops (gantt_costs)
    explorer.set(model="gpt2-medium", global_batch=16, stage=4, schedule="zbh1",
                 microbatches=8, hardware="h100-sxm").show("pipeline and mesh")
    rows = explorer.spec_rows("pictures")
    ops = rows[rows["op_name"].notna()]
    schedule = make_schedule("zbh1", 4, 8)
    assert len(ops) == len(schedule.ops)
    assert set(ops["op_name"]) == {"forward", "input gradient", "weight gradient"}
    stage0 = ops[ops["stage"] == 0]
    idle = ops["end"].max() - (stage0["end"] - stage0["start"]).sum()
    assert idle == pytest.approx(explorer.prediction.step_time_s["bubble"], rel=1e-6)
    mesh = rows[rows["axis"].notna()]
    assert set(mesh["axis"]) == {"data=2", "stage=4"}
    assert mesh.groupby("axis")["group"].nunique().to_dict() == {"data=2": 4, "stage=4": 2}


def test_every_drawn_number_carries_its_formula(explorer):
    explorer.set(tensor=2, hardware="h100-sxm", remat="selective")
    rows, p = explorer.chart_data(), explorer.prediction
    memory = rows[(rows["source"] == "predicted") & rows["part"].isin(
        ["parameters", "activations"])].set_index("part")["formula"]
    assert format_bytes(p.memory_bytes_per_device["params"]) in memory["parameters"]
    assert "s·b·h·(10 + 24/t" in memory["activations"]  # Korthikanti et al.'s, on a GPU
    assert format_bytes(p.memory_bytes_per_device["activations"]) in memory["activations"]
    comm = rows[(rows["kind"] == "all-reduce") & (rows["source"] == "predicted")]
    assert "grad-reduce" in comm["formula"].item() and "tp" in comm["formula"].item()
    explorer.show("explain")
    assert "compute" in explorer.explain_table.value and "FLOP/s" in explorer.explain_table.value


@pytest.mark.parametrize("layout,remat,precision", [
    ("data=8,tensor=8,zero=1", "selective", None), ("data=8,tensor=8,sp=on", "none", None),
    ("fsdp=64", "full", None),
    ("data=2,tensor=8,stage=4,schedule=1f1b,microbatches=8", "selective", None),
    ("data=2,tensor=8,stage=4,schedule=interleaved,virtual=2,microbatches=8", "none", None),
    ("data=8,tensor=8,sp=on", "none", "fp8-current"), ("data=8,tensor=8", "selective", "mxfp8")])
def test_the_activation_formula_shown_is_the_predictors(layout, remat, precision):
    """The explain panel rebuilds Korthikanti et al.'s formula with the values plugged in (and
    the GEMM inputs an FP8 recipe keeps in FP8): it must give the predictor's number, or the
    explanation would mislead."""
    from parex.setting import resolve

    model, train = parex.model_preset("llama2-70b"), parex.TrainConfig(
        global_batch=64, remat=remat, precision=precision)
    hardware = "b200" if precision == "mxfp8" else "h100-sxm"
    setting = resolve(model, train, Layout.parse(layout), hardware)
    p = predict(model, train, Layout.parse(layout), hardware)
    text, value = activation_bytes(setting, p.memory_bytes_per_device["activations"])
    assert value == pytest.approx(p.memory_bytes_per_device["activations"], rel=1e-9)
    assert "s=4096" in text and ("kept in FP8" in text) == (precision is not None)


def _compare_tops(explorer):
    """The upper ends of the compare chart's memory and step-time axes."""
    spec = explorer.draw().compare_chart.spec["hconcat"]
    return [panel["spec"]["layer"][0]["encoding"]["y"]["scale"]["domain"][1] for panel in spec]


def test_compare_mode_shows_deltas_against_a_pinned_baseline_on_fixed_axes(explorer):
    explorer.set(tensor=4).show("compare")
    explorer.pin_baseline()
    explorer.set(tensor=1)  # data=8: more memory per device
    frame = explorer.compare_frame()
    assert list(frame["label"]) == ["baseline · data=2,tensor=4", "data=8 (now)"]
    now = frame.iloc[-1]
    base = frame.iloc[0]
    change = now["memory_total_bytes"] / base["memory_total_bytes"] - 1
    grown = format_bytes(now["memory_total_bytes"] - base["memory_total_bytes"])
    assert now["delta_memory"] == f"+{change:.1%} (+{grown})"
    tops = _compare_tops(explorer)
    explorer.keep()
    explorer.set(tensor=2)  # smaller than what was drawn: the axes stay put
    assert _compare_tops(explorer) == tops
    assert len(explorer.compare_frame()["label"].unique()) == 3


def test_measure_pools_repeats_and_ignores_a_double_click(measured):
    explorer, first, events = measured
    assert first is not None and first.layout == "data=4,tensor=2" and first.n_devices == 8
    assert len(explorer.runs) == 2  # the second click during a run was ignored
    assert events[:2] == [(0, 4, "compiling"), (1, 4, events[1][2])]
    assert [e[0] for e in events[2:5]] == [2, 3, 4] and "step 3 of 3" in events[4][2]
    key = explorer.runs[0].key
    pooled = explorer.pooled(key)
    times = [t for run in explorer.runs for t in run.step_times]
    assert (pooled["n_runs"], pooled["n_steps"]) == (2, 4)
    assert pooled["step_time_min_s"] == min(times) and pooled["step_time_max_s"] == max(times)
    split = explorer.runs[0].split  # the argument buffers, split exactly
    assert sum(split.values()) == first.memory_bytes_per_device["argument"]
    live = explorer.chart_data()
    measured_time = live[(live["source"] == "measured") & (live["part"] == "measured")]
    assert measured_time["seconds"].item() == pytest.approx(pooled["step_time_s"])
    assert measured_time["n"].item() == 4
    assert _drawn(live, "measured", "parameters") == split["params"]
    table = explorer.show("measured").history_table.value
    assert "predicted / measured" in table and ratio_text(
        explorer.runs[-1].prediction.step_time_s["total"], pooled) in table


def test_sweep_draws_the_predicted_line_and_measured_points(measured):
    explorer, _, _ = measured
    explorer.sweep_control.value = "tensor"
    frame = explorer.sweep()
    predicted = frame[frame["source"] == "predicted"].set_index("value")
    for tensor in (1, 2, 4, 8):
        layout = Layout(data=8 // tensor, tensor=tensor)
        p = predict(explorer.model, explorer.train, layout, "cpu-local")
        assert predicted.loc[tensor, "step_time_s"] == pytest.approx(p.step_time_s["total"])
    point = frame[frame["source"] == "measured"]
    assert point["value"].tolist() == [2]
    assert point["step_time_s"].item() == pytest.approx(
        explorer.pooled(explorer.runs[0].key)["step_time_s"])


def test_measure_refuses_what_this_host_cannot_run(measured):
    explorer, _, _ = measured
    count = len(explorer.records)
    explorer.controls["devices"].value = 16  # only 8 emulated devices exist
    assert explorer.error is None and explorer.measure() is None
    assert "JAX sees 8" in explorer.status.value
    explorer.set(devices=8, tensor=1, model="gpt2-medium")
    assert explorer.measure() is None and "too many to run" in explorer.status.value
    assert len(explorer.records) == count
