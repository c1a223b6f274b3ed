"""A sweep store read into the Explorer's measured-vs-predicted frame, table and charts: each
finished configuration's latest record as a measured row beside `parex predict`'s prediction
of the same setup, written through the store's own API (the file and a cluster task's shard)."""

import pandas as pd
import pytest

from parex.config import TrainConfig, model_preset
from parex.errors import InputError
from parex.explorer.sweep_store import StoreView, load_store, prediction_of
from parex.layout import Layout
from parex.predict import predict
from parex.sweep import SweepConfig, append_record, measurement_of
from parex.sweep.store import append_shard


def _measurement(layout: str, step_s: float, platform: str = "cpu") -> dict:
    """A Measurement's to_json() as `parex run --json` prints it."""
    return {"model": "tiny", "layout": layout, "n_devices": 2, "platform": platform,
            "losses": [5.5, 5.4, 5.3], "compile_time_s": 1.0, "flops_per_device": 1e9,
            "step_time_s": {"median": step_s, "min": 0.8 * step_s, "max": 1.5 * step_s},
            "bytes_accessed_per_device": 1e8, "matmul_flops_per_device": 1e9,
            "memory_bytes_per_device": {"argument": 4_000_000, "output": 2_000_000,
                                        "alias": 1_000_000, "temp": 3_000_000,
                                        "total": 8_000_000},
            "collectives": [{"kind": "all-reduce", "count": 4, "bytes_per_op": 1000,
                             "group_size": 2, "axes": ["data"]}], "tokens_per_step": 512}


def _record(config: SweepConfig, status: str, at: float, step_s: float = 0.02,
            platform: str = "cpu") -> dict:
    ok = status == "ok"
    return {"key": config.key(), "config": config.__dict__, "status": status,
            "measurement": _measurement(config.layout, step_s, platform) if ok else None,
            "error": None if ok else "exit status 1: parex: it broke", "started_at": at,
            "elapsed_s": 1.0}


DATA, TENSOR, FSDP = (SweepConfig("tiny", layout, global_batch=4, steps=3)
                      for layout in ("data=2", "tensor=2", "fsdp=2"))


@pytest.fixture
def store(tmp_path):
    """data=2 finished; tensor=2 failed, then finished on a cluster task (its shard); fsdp=2
    failed."""
    path = tmp_path / "runs.jsonl"
    append_record(path, _record(DATA, "ok", 1.0, step_s=0.02))
    append_record(path, _record(TENSOR, "error", 2.0))
    append_record(path, _record(FSDP, "timeout", 3.0))
    append_shard(path, _record(TENSOR, "ok", 4.0, step_s=0.05), "node1-42-abcd")
    return path


def test_store_loads_as_measured_and_predicted_rows(store):
    rows = load_store(store)
    frame = rows.frame
    assert list(frame["source"]) == ["measured", "predicted", "measured", "predicted"]
    assert list(frame["label"]) == ["data=2", "data=2", "tensor=2", "tensor=2"]
    assert list(frame["key"]) == [DATA.key(), DATA.key(), TENSOR.key(), TENSOR.key()]
    for column in ("step_time_s", "step_time_min_s", "step_time_max_s", "memory_total_bytes",
                   "comm_all_reduce_bytes", "n_devices", "hardware", "n_steps", "n_runs"):
        assert column in frame, column
    measured = frame[frame["source"] == "measured"].set_index("label")
    assert measured.loc["tensor=2", "step_time_s"] == 0.05  # the shard's later record wins
    assert measured.loc["data=2", "memory_total_bytes"] == 8_000_000
    assert set(measured["n_steps"]) == {2}  # 3 steps, the first not timed
    assert set(measured["n_runs"]) == {1}
    predicted = frame[frame["source"] == "predicted"].set_index("label")
    assert set(predicted["hardware"]) == {"cpu-local"}  # measured on the emulated CPU mesh
    model = model_preset("tiny")
    direct = predict(model, TrainConfig(global_batch=4, steps=3), Layout.parse("tensor=2", 2),
                     "cpu-local", dtype=model.dtype)
    assert predicted.loc["tensor=2", "step_time_s"] == pytest.approx(
        direct.step_time_s["total"])
    assert rows.notes == ["not finished: 1 timeout"]  # tensor=2's failure was superseded

    table = rows.table()
    assert list(table["config"]) == ["data=2", "tensor=2"]
    assert {"measured step", "predicted (cpu-local)", "predicted / measured"} <= set(table)
    assert "n=2 steps in 1 run" in table.loc[1, "predicted / measured"]


def test_repeated_layouts_are_labelled_by_what_differs(tmp_path):
    path = tmp_path / "runs.jsonl"
    a = SweepConfig("tiny", "data=2", global_batch=4, steps=3)
    b = SweepConfig("tiny", "data=2", global_batch=4, steps=3, remat="full")
    append_record(path, _record(a, "ok", 1.0))
    append_record(path, _record(b, "ok", 2.0))
    frame = load_store(path).frame
    assert list(dict.fromkeys(frame["label"])) == ["data=2 · remat=none", "data=2 · remat=full"]


def test_accelerator_runs_need_their_profile(tmp_path):
    path = tmp_path / "runs.jsonl"
    append_record(path, _record(DATA, "ok", 1.0, platform="gpu"))
    rows = load_store(path)
    assert rows.frame.empty and "name the hardware profile" in rows.notes[0]
    rows = load_store(path, hardware="h100-sxm")
    assert list(rows.frame["hardware"].dropna()) == ["h100-sxm"]
    record = _record(DATA, "ok", 1.0, platform="gpu")
    m = measurement_of(record["measurement"])
    assert prediction_of(record["config"], m, "h100-sxm").hardware == "h100-sxm"
    with pytest.raises(InputError, match="no records"):
        load_store(tmp_path / "missing.jsonl")


def test_store_view_loads_into_its_table_and_charts(store, tmp_path):
    view = StoreView()
    assert view.rows is None
    rows = view.load(store)
    assert rows is view.rows and "2 finished configurations; not finished: 1 timeout" in (
        view.note.value)
    assert "tensor=2" in view.table.value and "predicted (cpu-local)" in view.table.value
    drawn = pd.DataFrame([r for values in view.charts.spec["datasets"].values() for r in values])
    assert {"data=2", "tensor=2"} <= set(drawn["label"])
    assert view.load(tmp_path / "none.jsonl") is None and view.rows is None
    assert "no records" in view.note.value
