"""The Planner widget driven from Python: the ranked rows, the chart, loading a row into the
Explorer, and the message when nothing fits."""

import re

import pytest

from parex.layout import Layout
from parex.units import format_bytes, format_seconds
from parex.explorer.widget import Explorer
from parex.explorer.planner import Planner


@pytest.fixture(scope="module")
def planner():
    return Planner(model="tiny", hardware="cpu-local", global_batch=16, top=4)


def test_table_and_chart_show_the_plan(planner):
    p = planner.plan
    table = planner.table_frame()
    assert list(table["layout"]) == [str(p.layout(i)) for i in p.top]
    assert len(planner.table.children) == 1 + 4  # the header, then one row per layout
    assert "layouts considered" in planner.status.value
    rows = planner.chart_data()
    top = rows[rows["kind"] == "top"]
    assert set(top["layout"]) == set(table["layout"])
    on_front = rows["on_front"].fillna(False).astype(bool)  # the cap rule's row has none
    front = rows[on_front].drop_duplicates("row").sort_values("memory_total_bytes")
    assert len(front) == len(p.pareto())
    assert front["step_total_s"].is_monotonic_decreasing  # leaner costs time on the front


def test_a_row_loads_into_the_explorer(planner):
    explorer = planner.load(2)
    p, i = planner.plan, planner.plan.top[1]
    assert explorer.layout == p.layout(i) and explorer.error is None
    assert explorer.controls["remat"].value == p.train_of(i).remat
    assert explorer.prediction.step_time_s["total"] == pytest.approx(
        p.columns["step_time_s"][i])
    planner.table.children[1].children[0].click()  # the button of rank 1
    assert explorer.layout == p.layout(p.top[0])


def test_explorer_load_widens_the_choices_a_layout_needs():
    explorer = Explorer(model="tiny", n_devices=8, global_batch=12)
    layout = Layout(data=2, stage=2, schedule="interleaved", virtual_stages=2, microbatches=6)
    explorer.load("tiny", layout, 4, global_batch=12, remat="full")
    assert explorer.layout == layout and explorer.error is None  # 6 was not offered before
    assert 6 in explorer.controls["microbatches"].options and explorer.n_devices == 4


def test_a_cap_no_layout_meets_shows_the_cap_it_needs():
    planner = Planner(model="tiny", hardware="cpu-local", memory_cap_gb=1e-6)
    assert planner.plan is None and "use --memory-cap" in planner.error
    assert "use --memory-cap" in planner.status.value and planner.table.children == ()
    planner.set(memory_cap_gb=0.0)
    assert planner.error is None and planner.plan.top


def test_a_row_handed_to_the_explorer_shows_the_rows_numbers_and_assumptions():
    """Llama 2 7B on 4 nodes of H100s: what the Planner ranks and what the Explorer then shows
    agree to the byte and the second, under the same assumptions, for each of the top rows."""
    planner = Planner(model="llama2-7b", hardware="h100-sxm", nodes=4, global_batch=256,
                      top=3)
    p = planner.plan
    for rank, i in enumerate(p.top, start=1):
        explorer = planner.load(rank)
        shown = explorer.prediction
        assert explorer.error is None and explorer.layout == p.layout(i)
        assert shown.step_time_s["total"] == pytest.approx(p.columns["step_time_s"][i],
                                                           rel=1e-9)
        assert shown.memory_bytes_per_device["total"] == pytest.approx(
            p.columns["memory_total_bytes"][i], rel=1e-9)
        assert shown.assumptions == p.setting_of(i).to_json()  # the same Setting
        row = planner.table.children[rank].children[1].value
        for text in (format_seconds(shown.step_time_s["total"]),
                     format_bytes(shown.memory_bytes_per_device["total"])):
            assert text in row and text in explorer.status.value


def test_the_rows_fade_when_the_controls_change_until_plan_runs(planner):
    assert not planner.stale and "parex-stale" not in planner.result._dom_classes
    assert "assumes cpu-local" in planner.assumptions.value
    planner.controls["global_batch"].value = 32  # not planned yet: the old rows, faded
    assert planner.stale and "parex-stale" in planner.result._dom_classes
    assert "press Plan" in planner.status.value
    planner.run()
    assert not planner.stale and "parex-stale" not in planner.result._dom_classes
    planner.set(global_batch=16)


def test_numbers_are_written_by_parex_units(planner):
    p, table = planner.plan, planner.table_frame()
    row = planner.table.children[1].children[1].value
    assert format_bytes(table["memory_total_bytes"].iloc[0]) in row
    assert not re.search(r"\d\.\d{4}", row)  # three figures: 22.9 MB, never 0.0229 GB
    assert format_bytes(p.memory_cap) in planner.status.value
