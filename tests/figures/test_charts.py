"""Charts read real measurements (and predictions) of two layouts on the emulated mesh and draw
exactly their numbers, in one unit rule and one colour per concept."""

import pandas as pd
import pytest

import parex
from parex import charts
from parex.charts import style
from parex.charts.parts import XLA_ARGUMENT, XLA_TEMP
from parex.layout import Layout
from parex.parallel.schedules import make_schedule
from parex.predict import predict
from parex.record import records_frame

LAYOUTS = ("data=8", "fsdp=4,tensor=2")


@pytest.fixture(scope="module")
def measured():
    model, train = parex.model_preset("tiny"), parex.TrainConfig(steps=2, global_batch=8)
    return [parex.measure(model, train, parex.Layout.parse(text)) for text in LAYOUTS]


@pytest.fixture(scope="module")
def frame(measured):
    return records_frame(measured)


@pytest.fixture(scope="module")
def predicted(measured):
    """The predictor's numbers for the same runs, on the calibrated local CPU profile."""
    model, train = parex.model_preset("tiny"), parex.TrainConfig(steps=2, global_batch=8)
    return [predict(model, train, parex.Layout.parse(m.layout), "cpu-local") for m in measured]


@pytest.fixture(scope="module")
def both(measured, predicted):
    return records_frame([*measured, *predicted])


def _domain_and_range(encoding: dict) -> dict:
    scale = encoding["color"]["scale"]
    return dict(zip(scale["domain"], scale["range"]))


def _layers(spec: dict) -> list[dict]:
    return spec["spec"]["layer"]


def test_units_pick_the_largest_unit_of_at_least_one():
    assert style.format_bytes(45.2e6) == "45.2 MB" and style.format_bytes(5e11) == "500 GB"
    assert style.format_bytes(891e9) == "891 GB" and style.format_bytes(1.63e12) == "1.63 TB"
    assert style.format_seconds(0.375) == "375 ms" and style.format_seconds(134.0) == "2.23 min"
    assert style.format_seconds(119.0) == "119 s" and style.format_seconds(3e-5) == "30.0 µs"
    assert style.bytes_unit(45e6) == ("MB", 1e6) and style.seconds_unit(140.0) == ("min", 60.0)


def test_memory_parts_stack_to_the_measured_total(measured, frame):
    long = charts.memory_long(frame)
    assert set(long["label"]) == set(LAYOUTS)
    for m in measured:
        rows = long[long["label"] == m.layout].set_index("part")["bytes"]
        assert rows.drop("total").sum() == m.memory_bytes_per_device["total"] == rows["total"]
        # without the run's shardings the argument stays one block; XLA's temp is never split
        assert rows[XLA_ARGUMENT] == m.memory_bytes_per_device["argument"]
        assert rows[XLA_TEMP] == m.memory_bytes_per_device["temp"]


def test_measured_memory_splits_the_argument_when_the_split_is_known(measured, predicted):
    m, p = measured[0], predicted[0]
    split = {"params": p.memory_bytes_per_device["params"],
             "optimizer": m.memory_bytes_per_device["argument"] - p.memory_bytes_per_device[
                 "params"] - 2048, "inputs": 2048}
    row = m.to_row() | {f"memory_{k}_bytes": v for k, v in split.items()}
    long = charts.memory_long(pd.DataFrame([row])).set_index("part")["bytes"]
    assert long["parameters"] == split["params"] and long["inputs"] == 2048
    assert XLA_ARGUMENT not in long and long.drop("total").sum() == long["total"]


def test_step_time_shows_median_inside_min_max(measured, frame):
    long = charts.step_time_long(frame).set_index("label")
    for m in measured:
        row = long.loc[m.layout]
        assert row["seconds"] == pytest.approx(m.step_time_s["median"])
        assert row["lo_s"] <= row["seconds"] <= row["hi_s"]


def test_collective_bytes_by_kind_match_the_hlo(measured, frame):
    long = charts.collectives_long(frame)
    for m in measured:
        rows = long[long["label"] == m.layout].set_index("kind")["bytes"]
        for kind, value in m.comm_bytes_per_device.items():
            assert rows.get(kind, 0) == value
    fsdp = long[(long["label"] == LAYOUTS[1]) & (long["kind"] == "all-gather")]["bytes"]
    assert fsdp.item() > 0  # FSDP gathers its sharded weights; pure DP gathers nothing
    assert long[(long["label"] == LAYOUTS[0]) & (long["kind"] == "all-gather")]["bytes"].item() == 0


def test_chart_specs_facet_by_layout_and_carry_the_data(frame):
    for chart in (charts.memory_chart(frame), charts.step_time_chart(frame),
                  charts.collectives_chart(frame)):
        spec = chart.to_dict()
        assert spec["facet"]["column"]["field"] == "label"
        assert spec["facet"]["column"]["header"]["labelExpr"] == "split(datum.label, ',')"
        rows = [r for values in spec["datasets"].values() for r in values]
        assert {r["label"] for r in rows} == set(LAYOUTS)


def test_axes_carry_one_unit_and_the_values_in_it(both, predicted):
    memory = charts.memory_chart(both).to_dict()
    y = _layers(memory)[0]["encoding"]["y"]
    assert y["title"] == "memory per device (MB)"  # tiny: tens of MB
    rows = [r for values in memory["datasets"].values() for r in values]
    params = next(r for r in rows if r["part"] == "parameters" and r["label"] == LAYOUTS[0])
    assert params["value"] == pytest.approx(params["bytes"] / 1e6)
    assert params["amount"] == style.format_bytes(params["bytes"])
    time = charts.step_time_chart(both).to_dict()
    long = charts.step_time_long(both)  # the unit of the tallest bar or slowest step drawn
    peak = max(long.groupby(["label", "source"])["seconds"].sum().max(), long["hi_s"].max())
    unit = "ms" if peak < 1 else "s"  # tiny: ms, unless a busy machine stretches a step to 1 s
    assert _layers(time)[0]["encoding"]["y"]["title"] == f"step time ({unit})"
    big = predict(parex.model_preset("llama2-70b"), parex.TrainConfig(global_batch=64),
                  Layout(data=64), "h100-sxm")
    spec = charts.step_time_chart(records_frame([big])).to_dict()
    assert _layers(spec)[0]["encoding"]["y"]["title"] == "step time (s)"
    spec = charts.memory_chart(records_frame([big])).to_dict()
    assert _layers(spec)[0]["encoding"]["y"]["title"] == "memory per device (TB)"


def test_one_colour_per_concept_and_legends_list_only_what_is_drawn(both):
    memory = _domain_and_range(_layers(charts.memory_chart(both).to_dict())[0]["encoding"])
    assert memory == {k: style.MEMORY_COLORS[k] for k in memory}
    assert {"parameters", "activations", XLA_TEMP} <= set(memory)
    time = _domain_and_range(_layers(charts.step_time_chart(both).to_dict())[0]["encoding"])
    assert time == {k: style.TIME_COLORS[k] for k in time}
    assert "bubble" not in time  # no pipeline: no bubble drawn, none listed
    colours = list(style.MEMORY_COLORS.values()) + list(style.TIME_COLORS.values())
    assert len(set(colours)) == len(colours)  # no colour means two things
    assert not set(colours) & set(style.FIT_COLORS.values())
    assert all("_" not in part for part in [*memory, *time])  # human labels


def test_the_device_memory_line_says_fits_or_not():
    model, train = parex.model_preset("llama2-70b"), parex.TrainConfig(global_batch=64)
    over = predict(model, train, Layout(data=8, tensor=8), "h100-sxm")
    spec = charts.memory_chart(records_frame([over]), capacity=80e9, capacity_name="H100").to_dict()
    rule = next(layer for layer in _layers(spec) if layer["mark"]["type"] == "rule")
    assert rule["mark"]["color"] == style.FIT_COLORS["does not fit"]
    assert rule["encoding"]["y"]["datum"] == pytest.approx(80e9 / 1e9)  # in the axis' GB
    assert "H100 80.0 GB: does not fit" in spec["title"]["subtitle"]
    tiny = predict(parex.model_preset("tiny"), parex.TrainConfig(), Layout(data=8), "h100-sxm")
    spec = charts.memory_chart(records_frame([tiny]), capacity=80e9).to_dict()
    assert not any(layer["mark"]["type"] == "rule" for layer in _layers(spec))
    assert "fits (uses" in spec["title"]["subtitle"]


def test_a_layout_measured_twice_is_drawn_once(measured):
    doubled = records_frame([measured[0], measured[0], measured[1]])
    long = charts.memory_long(doubled)
    assert (long["part"] == "total").sum() == 2


def test_scatter_needs_both_sides_and_a_known_metric(frame):
    assert charts.pairs(frame).empty  # measured only: nothing to pair yet
    with pytest.raises(ValueError, match="unknown metric"):
        charts.pairs(frame, "bogus")


def test_predicted_parts_stand_beside_the_measured_ones(predicted, both):
    memory, time = charts.memory_long(both), charts.step_time_long(both)
    for p in predicted:
        parts = memory[(memory["label"] == p.layout) & (memory["source"] == "predicted")]
        parts = parts.set_index("part")["bytes"]
        for name, key in (("parameters", "params"), ("gradients", "grads"),
                          ("optimizer state", "optimizer"), ("activations", "activations"),
                          ("temporaries", "temp"), ("total", "total")):
            assert parts[name] == p.memory_bytes_per_device[key]
        steps = time[(time["label"] == p.layout) & (time["source"] == "predicted")]
        assert steps["seconds"].sum() == pytest.approx(p.step_time_s["total"])
    assert set(memory["source"]) == set(time["source"]) == {"measured", "predicted"}


def test_scatter_pairs_each_layout_with_its_ratio(measured, predicted, both):
    for metric, measured_of, predicted_of in [
            ("step_time_s", lambda m: m.step_time_s["median"], lambda p: p.step_time_s["total"]),
            ("memory_argument_bytes", lambda m: m.memory_bytes_per_device["argument"],
             lambda p: p.memory_bytes_per_device["argument"]),
            ("comm_total_bytes", lambda m: sum(m.comm_bytes_per_device.values()),
             lambda p: sum(p.comm_bytes_per_device.values()))]:
        table = charts.pairs(both, metric).set_index("label")
        assert set(table.index) == set(LAYOUTS)
        for m, p in zip(measured, predicted):
            row = table.loc[m.layout]
            assert row["measured"] == pytest.approx(measured_of(m))
            assert row["predicted"] == pytest.approx(predicted_of(p))
            assert row["ratio"] == pytest.approx(row["predicted"] / row["measured"])
    step = charts.pairs(both).set_index("label")
    for m in measured:  # the measured spread: the fastest and slowest step
        assert (step.loc[m.layout, "lo"], step.loc[m.layout, "hi"]) == (
            m.step_time_s["min"], m.step_time_s["max"])
    spec = charts.scatter_chart(both).to_dict()
    marks = [layer["mark"]["type"] for layer in spec["layer"]]
    assert marks == ["line", "rule", "circle", "text"]  # y = x, spread, points, ratios


def test_gantt_colours_stay_with_their_op_when_charts_are_stacked():
    stack = charts.gantt_stack([make_schedule("1f1b", 4, 8), make_schedule("zbh1", 4, 8),
                                make_schedule("interleaved", 4, 8, 2)]).to_dict()
    assert stack["resolve"]["scale"]["color"] == "independent"
    for panel, names in zip(stack["vconcat"], (["forward", "backward"],
                                               ["forward", "input gradient", "weight gradient"],
                                               ["forward", "backward"])):
        bars = panel["layer"][1]["encoding"]
        colours = _domain_and_range(bars)
        assert list(colours) == names
        assert colours == {n: style.OP_COLORS[n] for n in names}
    interleaved = stack["vconcat"][2]["layer"][1]["encoding"]
    assert interleaved["opacity"]["field"] == "chunk"  # the chunk as a shade, not a label


def test_the_mesh_diagram_groups_devices_per_axis():
    frame = charts.mesh_frame(Layout(data=2, tensor=4))
    tensor = frame[frame["axis"] == "tensor=4"]
    assert tensor.groupby("group")["device"].apply(list).tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    data = frame[frame["axis"] == "data=2"]
    assert data.groupby("group")["device"].apply(list).tolist() == [[0, 4], [1, 5], [2, 6],
                                                                    [3, 7]]


def test_export_png_and_svg_offline(frame, tmp_path):
    chart = charts.memory_chart(frame)
    png = charts.save(chart, tmp_path / "memory.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = charts.save(chart, tmp_path / "sub" / "memory.svg").read_text()
    assert "memory per device" in svg and "tensor=2" in svg
    with pytest.raises(ValueError, match=r"\.png or \.svg"):
        charts.save(chart, tmp_path / "memory.pdf")


# --- one visual language: measured black, predicted grey; axes that show the data ----------
def _colors_of(spec) -> dict:
    """Every colour scale in a spec: {domain value: colour}."""
    found = {}

    def walk(node):
        if isinstance(node, dict):
            color = node.get("color")
            if isinstance(color, dict) and "scale" in color and "domain" in color["scale"]:
                found.update(zip(color["scale"]["domain"], color["scale"]["range"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(spec)
    return found


def test_source_colours_are_their_own():
    assert style.SOURCE_COLORS == {"measured": style.MEASURED, "predicted": style.PREDICTED}
    concepts = [*style.MEMORY_COLORS.values(), *style.FIT_COLORS.values(),
                *[c for k, c in style.TIME_COLORS.items() if k != "measured"]]
    assert not set(style.SOURCE_COLORS.values()) & set(concepts)
    assert style.TIME_COLORS["measured"] == style.MEASURED  # the measured step is measured


def test_collective_bytes_colour_the_side_the_same_whatever_is_drawn(predicted, both):
    alone = charts.collectives_chart(records_frame(predicted)).to_dict()
    assert _colors_of(alone) == {"predicted": style.PREDICTED}  # no "measured" in the legend
    beside = charts.collectives_chart(both).to_dict()
    assert _colors_of(beside) == style.SOURCE_COLORS
    assert "opacity" not in str(beside["spec"]["layer"][0]["encoding"])


def _sweep(memory: list[float]) -> pd.DataFrame:
    values = [1, 2, 4, 8][:len(memory)]
    return pd.DataFrame({"value": values, "source": "predicted", "layout": [f"t={v}" for v in
                         values], "step_time_s": 0.1, "step_time_s_lo": 0.1,
                         "step_time_s_hi": 0.1, "memory_total_bytes": memory,
                         "memory_total_bytes_lo": memory, "memory_total_bytes_hi": memory,
                         "n": 0})


def test_a_sweep_far_under_the_capacity_does_not_draw_it_flat():
    memory = charts.sweep_chart(_sweep([52e6, 48e6, 45e6]), "tensor", capacity=3.16e9).to_dict()
    panel = memory["hconcat"][1]
    assert not [layer for layer in panel["layer"] if layer["mark"]["type"] == "rule"
                and "datum" in layer["encoding"].get("y", {})]
    assert "3.16 GB" in panel["title"]["subtitle"] and "off the chart" in panel["title"]["subtitle"]
    assert panel["layer"][0]["encoding"]["y"]["title"] == "memory per device (MB)"
    near = charts.sweep_chart(_sweep([2.9e9, 2.0e9]), "tensor", capacity=3.16e9).to_dict()
    assert any(layer["mark"]["type"] == "rule" for layer in near["hconcat"][1]["layer"])


def test_values_over_decades_get_a_log_axis():
    wide = charts.sweep_chart(_sweep([5e6, 5e8, 5e9]), "tensor").to_dict()
    y = wide["hconcat"][1]["layer"][0]["encoding"]["y"]
    assert y["scale"]["type"] == "log" and "log scale" in y["title"]
    narrow = charts.sweep_chart(_sweep([5e6, 9e6]), "tensor").to_dict()
    assert narrow["hconcat"][1]["layer"][0]["encoding"]["y"]["scale"].get("type") != "log"
    line = wide["hconcat"][1]["layer"][0]["mark"]
    assert line["color"] == style.PREDICTED  # the predicted line in the predicted colour


def test_the_planner_chart_is_all_predicted():
    frame = pd.DataFrame({"memory_total_bytes": [1.5e9, 1e9, 2e9, 3e9],
                          "step_total_s": [2.5, 3.0, 2.0, 1.5],
                          "layout": ["a", "b", "c", "d"], "remat": "none", "microbatch": 1,
                          "mfu": 0.3, "bottleneck": "compute",
                          "kind": ["layout", "pareto", "pareto", "top"],
                          "on_front": [False, True, True, True], "rank": [None, None, None, 1]})
    spec = charts.pareto_chart(frame, 4e9).to_dict()
    assert style.MEASURED not in str(spec) and style.PREDICTED in set(_colors_of(spec).values())
    front = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "line")
    assert front["mark"]["color"] == style.PREDICTED
    legend = _colors_of(charts.pareto_chart(frame[frame["kind"] != "top"], 4e9).to_dict())
    assert len(legend) == 2  # only the kinds drawn are listed


def test_a_bubble_chart_draws_measured_black_and_the_reference_grey():
    study = pd.DataFrame({"m": [1, 2, 4], "step_time_s": [0.3, 0.2, 0.15], "p": 2,
                          "bubble_measured": [0.5, 0.33, 0.2],
                          "bubble_predicted": [0.5, 0.33, 0.2]})
    spec = charts.bubble_chart(study).to_dict()
    assert spec["hconcat"][0]["mark"]["color"] == style.MEASURED
    assert _colors_of(spec["hconcat"][1]) == style.SOURCE_COLORS


def test_gallery_legends_list_only_the_kinds_a_figure_has():
    from parex.figures.charts import ratio_strip

    class Tolerance:
        lo, hi = 0.9, 1.1

    class Row:
        def __init__(self, kind):
            self.quantity, self.paper, self.parex, self.ratio = f"q {kind}", 1.0, 1.0, 1.0
            self.kind, self.tolerance, self.is_bracket = kind, Tolerance, False

    class Result:
        rows = [Row("predicted")]
        spec = type("Spec", (), {"tolerance": Tolerance})

        @staticmethod
        def verdict(row):
            return "within"

    assert _colors_of(ratio_strip(Result).to_dict()) == {"predicted": style.PREDICTED}
    Result.rows = [Row("predicted"), Row("measured")]
    assert _colors_of(ratio_strip(Result).to_dict()) == style.SOURCE_COLORS


def test_the_mesh_diagram_shows_one_devices_x_y_and_z_groups():
    """tensor=2x2x2 on 8 devices: every device's X, Y and Z groups are the executor's mesh's
    (chart device d is the d-th device of make_mesh's array, row-major over MESH_AXES)."""
    import numpy as np

    from parex.charts.mesh import groups_3d, groups_3d_frame
    from parex.executor.mesh import make_mesh

    layout = Layout.parse("tensor=2x2x2")
    mesh = make_mesh(layout)
    ids = [d.id for d in mesh.devices.ravel()]
    names = list(mesh.axis_names)
    for device in range(8):
        where = np.unravel_index(device, mesh.devices.shape)
        groups = groups_3d(layout, device)
        for group, axis in (("X", "tensor"), ("Y", "tensor_y"), ("Z", "tensor_z")):
            index = list(where)
            index[names.index(axis)] = slice(None)
            members = sorted(d.id for d in mesh.devices[tuple(index)].ravel())
            assert sorted(ids[d] for d in groups[group]) == members, (device, group)
    assert groups_3d(layout, 0) == {"X": [0, 1], "Y": [0, 2], "Z": [0, 4]}
    frame = groups_3d_frame(layout, devices_per_node=4)
    assert frame["role"].tolist() == ["the device", "X", "Y", "none", "Z", "none", "none",
                                      "none"]
    spec = charts.mesh_chart(layout, devices_per_node=4).to_dict()
    first = spec["hconcat"][0]
    assert first["title"]["text"] == "device 0's groups (tensor=2x2x2)"
    assert len(spec["hconcat"]) == 4  # the groups, then the tensor_z, tensor_y, tensor panels
    assert [p["title"]["text"] for p in spec["hconcat"][1:]] == [
        "tensor_z=2 (Z): 4 groups of 2", "tensor_y=2 (Y): 4 groups of 2",
        "tensor=2 (X): 4 groups of 2"]
    one_d = charts.mesh_chart(Layout(tensor=8)).to_dict()["hconcat"]
    assert [p["title"]["text"] for p in one_d] == ["tensor=8: 1 group of 8"]
