"""parex.units: one way to write a number (bytes, seconds, counts), and the reports that use it."""

import math
import re

import pytest

from parex.measure.report import TextReport, human_bytes, load_note, load_ratio, table
from parex.units import (bytes_unit, format_bytes, format_count, format_ratio, format_seconds,
                         seconds_unit)


@pytest.mark.parametrize("value, text", [
    (0, "0 B"), (512, "512 B"), (45.2e6, "45.2 MB"), (22.9e6, "22.9 MB"), (1.46e12, "1.46 TB"),
    (1377.31e9, "1.38 TB"), (999.4e9, "999 GB"), (80e9, "80.0 GB"), (787737600.0, "788 MB"),
    (-2.5e9, "-2.50 GB")])
def test_bytes_in_their_unit_with_three_figures(value, text):
    assert format_bytes(value) == text


@pytest.mark.parametrize("value, text", [
    (8.201e-05, "82.0 µs"), (2.16, "2.16 s"), (0.0905e-3, "90.5 µs"), (0.375, "375 ms"),
    (119.0, "119 s"), (134.0, "2.23 min"), (0.0, "0 s")])
def test_times_pick_their_unit_by_size(value, text):
    assert format_seconds(value) == text


def test_counts_and_ratios():
    assert format_count(6.74e9) == "6.74B" and format_count(930_000) == "930K"
    assert format_count(1.234e15) == "1,234T"  # separators where three figures do not reach
    assert format_ratio(1.5) == "1.50×" and format_ratio(math.nan) == "–"


def test_missing_values_are_a_dash():
    assert format_bytes(math.nan) == format_seconds(None) == "–"


def test_units_follow_the_magnitude():
    assert bytes_unit(5e11) == ("GB", 1e9) and seconds_unit(0.02) == ("ms", 1e-3)


def test_the_cli_tables_use_the_formatter():
    assert human_bytes is format_bytes
    text = table([["a", format_bytes(1.5e9)]], ["layout", "memory"])
    assert "1.50 GB" in text and text._repr_html_().count("<td") == 2


def test_a_report_wraps_prose_at_100_columns_and_renders_html_tables():
    long_line = " ".join(["word"] * 60)
    report = TextReport(long_line, table([["x", "1"]], ["a", "b"]))
    assert all(len(line) <= 100 for line in report.splitlines())
    html = report._repr_html_()
    assert "<table" in html and re.search(r"<th[^>]*>a</th>", html) and html.count("<pre") == 1


class _Calibration:
    load_average, cores = 0.3, 2


def test_the_load_note_says_what_a_busy_machine_does_to_the_ratio():
    assert load_ratio(_Calibration, now=4.0) == pytest.approx((2 + 4.0) / (2 + 0.3))
    note = load_note(_Calibration, now=4.0)
    assert "4.0 now" in note and "0.3 when" in note and "2.61×" in note and "0.38" in note
    assert load_note(_Calibration, now=1.2) is None  # within 1.5× (loads under 1 count as 1)
    assert load_note(_Calibration, now=1.6) is not None  # 1.6× the calibration's
    assert load_note(type("Old", (), {"load_average": None, "cores": 2}), now=9.0) is None


def test_verify_report_writes_units_and_names_a_busy_machine():
    from parex.plan.verify import summarise, verify_report

    rows = [{"layout": "data=8", "remat": "none", "chosen": "top", "status": "ok", "error": "",
             "predicted_step_s": 0.0905e-3 * 1000, "measured_step_s": 0.216,
             "predicted_memory_bytes": 22.9e6, "measured_memory_bytes": 24.1e6},
            {"layout": "tensor=8", "remat": "full", "chosen": "random", "status": "ok",
             "error": "", "predicted_step_s": 2.16, "measured_step_s": 3.0,
             "predicted_memory_bytes": 1.46e12, "measured_memory_bytes": 1.5e12}]
    result = summarise(rows) | {"store": "/tmp/x.jsonl",
                                "load_average": {"now": 6.0, "calibration": 0.5, "cores": 2}}
    text = verify_report(result)
    for shown in ("90.5 ms", "216 ms", "2.16 s", "22.9 MB", "1.46 TB", "1.50 TB"):
        assert shown in text
    assert "machine load 6.0 now, 0.5 when" in text and "3.20×" in text
    assert all(len(line) <= 100 for line in text.splitlines() if "---" not in line
               and "data=8" not in line and "tensor=8" not in line and "layout" not in line)
    assert "<table" in text._repr_html_()
    quiet = verify_report(result | {"load_average": {"now": 0.6, "calibration": 0.5,
                                                     "cores": 2}})
    assert "machine load" not in quiet
