"""Charts read real measurements (and predictions) of two layouts on the emulated mesh and draw
exactly their numbers."""

import pytest

import parex
from parex import charts
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


def test_memory_parts_stack_to_the_measured_total(measured, frame):
    long = charts.memory_long(frame)
    assert set(long["label"]) == set(LAYOUTS)
    for m in measured:
        rows = long[long["label"] == m.layout].set_index("part")["bytes"]
        parts = rows.drop("total").sum()
        assert parts == m.memory_bytes_per_device["total"] == rows["total"]
        assert rows["argument"] == m.memory_bytes_per_device["argument"]


def test_step_time_shows_median_inside_min_max(measured, frame):
    long = charts.step_time_long(frame).set_index("label")
    for m in measured:
        row = long.loc[m.layout]
        assert row["ms"] == pytest.approx(1e3 * m.step_time_s["median"])
        assert row["lo_ms"] <= row["ms"] <= row["hi_ms"]


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
        rows = [r for values in spec["datasets"].values() for r in values]
        assert {r["label"] for r in rows} == set(LAYOUTS)


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
        for name in ("params", "grads", "optimizer", "activations", "temp", "total"):
            assert parts[name] == p.memory_bytes_per_device[name]
        steps = time[(time["label"] == p.layout) & (time["source"] == "predicted")]
        assert steps["ms"].sum() == pytest.approx(1e3 * p.step_time_s["total"])
    assert set(memory["source"]) == set(time["source"]) == {"measured", "predicted"}


def test_scatter_pairs_each_layout_with_its_error(measured, predicted, both):
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
            assert row["error"] == pytest.approx((row["predicted"] - row["measured"])
                                                 / row["measured"])
    spec = charts.scatter_chart(both).to_dict()
    marks = [layer["mark"]["type"] for layer in spec["layer"]]
    assert marks == ["line", "circle", "text"]  # y = x, the points, their errors


def test_scaling_chart_draws_measured_solid_and_predicted_dashed(both):
    spec = charts.scaling_chart(both, y="memory_argument_bytes", by="layout").to_dict()
    assert spec["encoding"]["strokeDash"]["field"] == "source"
    with pytest.raises(ValueError, match="no column 'strategy'"):
        charts.scaling_chart(both, by="strategy")


def test_export_png_and_svg_offline(frame, tmp_path):
    chart = charts.memory_chart(frame)
    png = charts.save(chart, tmp_path / "memory.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = charts.save(chart, tmp_path / "sub" / "memory.svg").read_text()
    assert "memory per device" in svg and "fsdp=4,tensor=2" in svg
    with pytest.raises(ValueError, match=r"\.png or \.svg"):
        charts.save(chart, tmp_path / "memory.pdf")
