"""The Planner widget driven from Python: the ranked rows, the chart, loading a row into the
Explorer, and the message when nothing fits."""

import pytest

from parex.layout import Layout
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
