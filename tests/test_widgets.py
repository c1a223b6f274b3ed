"""The Explorer driven from Python, as a notebook user would through its controls."""

import pytest

from parex.layout import Layout
from parex.widgets import Explorer, divisors


@pytest.fixture
def explorer():
    return Explorer(model="tiny", n_devices=8, global_batch=8, steps=2)


@pytest.fixture(scope="module")
def measured():
    """One Explorer after a real measurement of tensor=2 (data=4) on the emulated mesh."""
    explorer = Explorer(model="tiny", n_devices=8, global_batch=8, steps=2)
    explorer.controls["tensor"].value = 2
    result = explorer.measure()
    return explorer, result


def test_controls_describe_the_layout(explorer):
    assert explorer.layout == Layout(data=8)
    explorer.controls["tensor"].value = 4
    assert explorer.layout == Layout(data=2, tensor=4)
    explorer.set(fsdp=2, zero=1, sp=True)
    assert explorer.layout == Layout(data=1, fsdp=2, tensor=4, zero=1, sp=True)
    assert explorer.error is None and "fsdp=2,tensor=4" in explorer.status.value


def _predicted(rows, part):
    """The bytes or milliseconds the live chart draws for one predicted part."""
    row = rows[(rows["source"] == "predicted") & (rows["part"] == part)]
    return row["bytes"].item() if row["bytes"].notna().all() else row["ms"].item()


def test_prediction_updates_the_chart_in_place(explorer):
    chart, before = explorer.chart, explorer.chart_data()
    assert _predicted(before, "params") == explorer.prediction.memory_bytes_per_device["params"]
    explorer.controls["tensor"].value = 4
    after = explorer.chart_data()
    assert explorer.chart is chart  # the same widget, its chart replaced
    assert explorer.prediction.layout == "data=2,tensor=4"
    assert _predicted(after, "params") == explorer.prediction.memory_bytes_per_device["params"]
    assert _predicted(after, "params") < _predicted(before, "params")  # TP splits the weights
    assert _predicted(after, "compute") == pytest.approx(
        1e3 * explorer.prediction.step_time_s["compute"])
    assert "data=2,tensor=4" in set(after["label"]) and "predicted" in explorer.status.value


def test_hardware_and_scale_change_the_prediction(explorer):
    local = explorer.prediction.step_time_s["total"]
    explorer.set(hardware="a100-80gb")
    assert explorer.prediction.hardware.startswith("a100-80gb")
    assert explorer.prediction.step_time_s["total"] < local
    explorer.set(model="korthikanti-175b", global_batch=64)  # 175B on eight A100s, DP only
    assert explorer.error is None and not explorer.prediction.fits
    assert "does NOT fit" in explorer.status.value and "175.2B parameters" in explorer.status.value
    # Megatron's 175B recipe: TP inside a node, a pipeline across nodes, bf16, recompute.
    explorer.set(devices=1024, tensor=8, stage=8, microbatches=8, global_batch=1024,
                 schedule="1f1b", dtype="bfloat16", remat="full", zero=1)
    assert explorer.layout == Layout(data=16, tensor=8, stage=8, zero=1, schedule="1f1b",
                                     microbatches=8)
    assert explorer.prediction.fits and explorer.prediction.n_devices == 1024
    assert "(fits)" in explorer.status.value


def test_mesh_axes_offer_only_divisors_of_the_device_count(explorer):
    assert list(explorer.controls["tensor"].options) == divisors(8) == [1, 2, 4, 8]
    explorer.set(tensor=8)
    explorer.controls["devices"].value = 4  # 8 no longer divides: falls back to 1
    assert list(explorer.controls["tensor"].options) == [1, 2, 4]
    assert explorer.layout == Layout(data=4)
    explorer.set(tensor=4)
    explorer.controls["devices"].value = 16  # 4 still divides: kept
    assert explorer.layout == Layout(data=4, tensor=4)


def test_invalid_combinations_show_the_validation_message(explorer):
    chart_before = explorer.chart.spec
    explorer.set(fsdp=4, tensor=4)  # 16 devices' worth of axes on 8 devices
    assert explorer.layout is None and "lower one of those axes" in explorer.error
    assert "invalid layout" in explorer.status.value
    explorer.set(fsdp=1, tensor=1, sp=True)  # sp needs tensor > 1: the LayoutError's text
    assert "sp=on needs tensor > 1" in explorer.error and "sp=on" in explorer.status.value
    explorer.set(sp=False, global_batch=4)  # 8 replicas cannot split 4 sequences
    assert "global batch 4" in explorer.error
    assert explorer.chart.spec == chart_before  # the last good chart stays up
    assert explorer.measure() is None and explorer.history == []


def test_schedule_controls_only_apply_to_pipelines(explorer):
    explorer.set(schedule="1f1b", virtual=2)
    assert explorer.controls["schedule"].disabled
    assert explorer.layout.schedule == "gpipe" and explorer.layout.virtual_stages == 1
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


def test_measure_appends_to_history_table_and_chart(measured):
    explorer, result = measured
    assert result is not None and result.layout == "data=4,tensor=2" and result.n_devices == 8
    history = explorer.history_frame()
    row = history[history["source"] == "measured"].iloc[-1]
    assert row["layout"] == "data=4,tensor=2" and row["step_time_s"] > 0
    assert "data=4,tensor=2" in explorer.history_table.value
    assert explorer.progress.bar_style == "success"
    predicted = history[history["source"] == "predicted"].iloc[-1]
    assert predicted["layout"] == row["layout"] and predicted["hardware"] == "cpu-local"
    drawn = explorer.history_chart_data()
    median = drawn[drawn["part"] == "measured median"]
    assert median["ms"].tolist() == pytest.approx([1e3 * result.step_time_s["median"]])
    point = drawn[drawn["error"].notna()]  # the measured-vs-predicted scatter
    assert point["measured"].item() == pytest.approx(result.step_time_s["median"])
    assert point["predicted"].item() == pytest.approx(predicted["step_time_s"])
    live = explorer.chart_data()  # the live chart now shows the measurement of this layout
    totals = live[(live["part"] == "total") & (live["source"] == "measured")]
    assert totals["bytes"].tolist() == [result.memory_bytes_per_device["total"]]


def test_measure_refuses_what_this_host_cannot_run(measured):
    explorer, _ = measured
    count = len(explorer.records)
    explorer.controls["devices"].value = 16  # only 8 emulated devices exist
    assert explorer.error is None and explorer.measure() is None
    assert "JAX sees 8" in explorer.status.value
    explorer.set(devices=8, tensor=1, model="gpt2-medium")
    assert explorer.measure() is None and "too many to run" in explorer.status.value
    assert len(explorer.records) == count
