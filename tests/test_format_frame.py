"""parex.format_frame: a DataFrame's numbers written as everywhere else in parex, each column in
the unit its name says (bytes, seconds, FLOPs, FLOP/s, %, counts, ratios), never as pandas'
1.955711e+11 or a bare 0.454."""

import math
import re

import numpy as np
import pandas as pd
import pytest

import parex
from parex.units import column_unit, format_bytes, format_flops, format_seconds


@pytest.mark.parametrize("name, unit", [
    ("memory_total_bytes", "bytes"), ("comm_all_gather_bytes", "bytes"), ("memory", "bytes"),
    ("all_to_all_predicted", "bytes"), ("step_time_s", "seconds"), ("step_bubble_s", "seconds"),
    ("total s", "seconds"), ("compile_time_s", "seconds"), ("flops_per_device", "flops"),
    ("bf16 peak FLOP/s", "flop/s"), ("tflops_per_gpu", "tflop/s"), ("mfu", "percent"),
    ("even split mfu", "percent"), ("idle fraction", "percent"),
    ("bubble_measured", "percent"), ("percent_of_peak", "percent points"),
    ("tokens_per_s", "per second"), ("avg_bandwidth", "bytes/s"), ("params", "count"),
    ("gb_per_device", "gigabytes"), ("parex_gb", "gigabytes"), ("between nodes Gb/s", None),
    ("gbps", None), ("ratio", "ratio"), ("speed", "ratio"),
    ("loss_last", "loss"), ("gap_vs_sync_DP", "loss"),
    ("n_devices", None), ("layout", None), ("m", None)])
def test_a_columns_name_says_its_unit(name, unit):
    assert column_unit(name) == unit


@pytest.fixture(scope="module")
def frame():
    model, train = parex.model_preset("gpt2-small"), parex.TrainConfig(global_batch=64)
    ps = [parex.predict(model, train, parex.Layout.parse(text), "h100-sxm")
          for text in ("data=8", "fsdp=4,tensor=2")]
    return parex.records_frame(ps)


def test_a_records_frame_reads_in_units(frame):
    shown = parex.format_frame(frame)
    row, raw = shown.iloc[0], frame.iloc[0]
    assert row["memory_total_bytes"] == format_bytes(raw["memory_total_bytes"])
    assert row["memory_total_bytes"].endswith(" GB")
    assert row["step_time_s"] == format_seconds(raw["step_time_s"])
    assert row["flops_per_device"] == format_flops(raw["flops_per_device"])
    assert row["mfu"] == f"{raw['mfu'] * 100:.1f}%"
    assert row["n_devices"] == "8" and row["layout"] == "data=8"
    assert frame["memory_total_bytes"].dtype.kind == "f"  # the frame keeps its numbers


def test_no_number_is_left_in_pandas_notation(frame):
    """Every numeric cell of a whole records frame is written in a unit or as a plain number:
    no exponent, no long decimal tail."""
    shown = parex.format_frame(frame)
    for column in frame.columns:
        if frame[column].dtype.kind not in "fi":
            continue
        for cell in shown[column]:
            assert "e+" not in cell and "e-" not in cell, (column, cell)
            assert all(len(d) <= 4 for d in re.findall(r"\.(\d+)", cell)), (column, cell)


def test_shared_fields_take_each_rows_unit():
    fields = pd.DataFrame({"field": ["step_time_s", "memory_total_bytes", "flops_per_device"],
                           "predicted": [0.246, 47.3e6, 1.955711e11],
                           "measured": [0.5, 45e6, 2e11], "ratio": [0.492, 1.0511, 0.97786]})
    shown = parex.format_frame(fields)
    assert list(shown["predicted"]) == ["246 ms", "47.3 MB", "196 GFLOP"]
    assert list(shown["measured"]) == ["500 ms", "45.0 MB", "200 GFLOP"]
    assert list(shown["ratio"]) == ["0.492×", "1.051×", "0.978×"]


def test_a_unit_for_the_rest_and_units_by_name():
    pivot = pd.DataFrame({"dp": [3.2e6, 3.2e6], "fsdp": [1.6e6, 0.8e6]},
                         index=pd.Index([2, 4], name="n_devices"))
    shown = parex.format_frame(pivot, unit="bytes")
    assert list(shown["fsdp"]) == ["1.60 MB", "800 KB"] and list(shown.index) == [2, 4]
    named = parex.format_frame(pd.DataFrame({"exposed": [0.0123], "mfu": [0.5]}),
                               units={"exposed": "seconds"})
    assert named.iloc[0].tolist() == ["12.3 ms", "50.0%"]


def test_missing_values_whole_numbers_and_text():
    df = pd.DataFrame({"layout": ["a", None], "h_crossover": [3.0, math.nan],
                       "global_batch": np.array([2048, 16]), "head_scale": [0.1234, 0.1],
                       "fits": [True, False], "mfu": [pd.NA, 0.454]}, dtype=object)
    shown = parex.format_frame(df)
    assert shown.iloc[0].tolist() == ["a", "3", "2,048", "0.123", "True", "–"]
    assert shown.iloc[1].tolist() == ["–", "–", "16", "0.1", "False", "45.4%"]
