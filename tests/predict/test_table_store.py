"""The schedule-table store: a later process reads the numbers an earlier one computed, and
gets the same predictions without placing a table."""

import json

import numpy as np
import pytest

from parex.config import TrainConfig, model_preset
from parex.layout import Layout
from parex.predict import predict_batch, schedule_stats, table_store

LAYOUTS = [Layout(data=4, stage=2, schedule=s, microbatches=m, virtual_stages=v)
           for s, v in (("1f1b", 1), ("zbh1", 1), ("zbv", 2), ("interleaved", 2)) for m in (4, 8)]


def fresh_process(monkeypatch):
    """Empty the in-memory caches, as a new process starts."""
    monkeypatch.setattr(schedule_stats, "_TABLES", {})
    monkeypatch.setattr(schedule_stats, "_MAKESPANS", {})
    monkeypatch.setattr(schedule_stats, "_LAST", {"rows": {}})
    monkeypatch.setattr(schedule_stats, "_STORE", {"read": False})


def predicted(model, train):
    columns = predict_batch(model, train, LAYOUTS, "a100-80gb")
    return columns["step_time_s"], columns["memory_total_bytes"]


def test_a_later_process_reads_the_tables_it_did_not_place(monkeypatch, tmp_path):
    monkeypatch.setenv("PAREX_TABLE_STORE", str(tmp_path))
    model, train = model_preset("tiny"), TrainConfig(global_batch=64)
    fresh_process(monkeypatch)
    expected = predicted(model, train)
    stored = json.loads(table_store.path().read_text())
    assert len(stored["tables"]) == len(LAYOUTS) and stored["makespans"]

    fresh_process(monkeypatch)

    def refuse(*_):
        raise AssertionError("a table was placed although the store holds its numbers")
    monkeypatch.setattr(schedule_stats, "schedule_arrays", refuse)
    for got, want in zip(predicted(model, train), expected):
        np.testing.assert_array_equal(got, want)


def test_the_store_is_named_by_the_code_that_fills_it(monkeypatch, tmp_path):
    monkeypatch.setenv("PAREX_TABLE_STORE", str(tmp_path))
    name = table_store.path().name
    monkeypatch.setattr(table_store, "SOURCES", table_store.SOURCES[:-1])
    assert table_store.path().name != name  # other code, another file: never stale numbers


@pytest.mark.parametrize("body", ["{not json", json.dumps({"tables": [[1, 2]]})])
def test_an_unreadable_store_is_ignored_and_rewritten(monkeypatch, tmp_path, body):
    monkeypatch.setenv("PAREX_TABLE_STORE", str(tmp_path))
    table_store.path().write_text(body)
    assert table_store.load() == {"tables": {}, "makespans": {}}
    table_store.save({(1, 2, 4, 1): (10, 2)}, {})
    assert table_store.load()["tables"] == {(1, 2, 4, 1): (10, 2)}


def test_the_store_can_be_turned_off(monkeypatch, tmp_path):
    monkeypatch.setenv("PAREX_TABLE_STORE", "0")
    table_store.save({(1, 2, 4, 1): (10, 2)}, {})
    assert table_store.load() == {"tables": {}, "makespans": {}}
