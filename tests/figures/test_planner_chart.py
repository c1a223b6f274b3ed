"""The planner chart's axes follow the Pareto front and the top rows: a layout beyond the
front's ends (slower than its leanest layout, or larger than its fastest) is left off and
counted in the subtitle; a front that spans decades gets a log axis; the memory cap is drawn
when it is near and named when it is not."""

import pandas as pd
import pytest

pytest.importorskip("altair")

from parex import TrainConfig, model_preset  # noqa: E402
from parex.charts import pareto_chart  # noqa: E402
from parex.plan import chart_frame, plan  # noqa: E402

GB = 1e9


def _frame(front, top, layouts):
    """Rows of chart_frame: (memory bytes, step seconds) for the front, top and other rows."""
    rows = ([(m, t, "pareto", True) for m, t in front] + [(m, t, "top", True) for m, t in top]
            + [(m, t, "layout", False) for m, t in layouts])
    return pd.DataFrame({"memory_total_bytes": [r[0] for r in rows],
                         "step_total_s": [r[1] for r in rows],
                         "kind": [r[2] for r in rows], "on_front": [r[3] for r in rows],
                         "layout": [f"row{i}" for i in range(len(rows))], "remat": "none",
                         "microbatch": 1, "mfu": 0.4, "bottleneck": "compute",
                         "rank": [1 if r[2] == "top" else None for r in rows]})


def _scales(spec) -> tuple[dict, dict]:
    points = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "circle")
    return points["encoding"]["x"]["scale"], points["encoding"]["y"]["scale"]


def _drawn(spec) -> set[str]:
    return {row["layout"] for rows in spec["datasets"].values() for row in rows
            if "layout" in row}


FRONT = [(10 * GB, 4.0), (20 * GB, 3.0), (40 * GB, 2.0)]
TOP = [(50 * GB, 1.0)]
INSIDE = [(30 * GB, 3.5), (45 * GB, 2.0)]
OUTLIERS = [(400 * GB, 1.5), (30 * GB, 60.0)]  # larger than the fastest, slower than the leanest


def test_the_axes_follow_the_front_and_leave_outliers_off():
    df = _frame(FRONT, TOP, INSIDE + OUTLIERS)
    spec = pareto_chart(df).to_dict()
    x, y = _scales(spec)
    assert x["domain"][0] < 10 and 50 < x["domain"][1] < 55  # GB, the front's span and a margin
    assert y["domain"][0] < 1.0 and 4.0 < y["domain"][1] < 4.5
    assert x["type"] == y["type"] == "linear"
    drawn = _drawn(spec)
    assert {"row0", "row1", "row2", "row3", "row4", "row5"} <= drawn  # front, top, inside
    assert not {"row6", "row7"} & drawn  # the two outliers
    assert spec["title"]["subtitle"] == [
        "2 of 8 layouts lie off the chart: slower or larger than the front's ends, so beaten by "
        "a layout on it"]
    points = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "circle")
    assert points["encoding"]["x"]["title"] == "memory per device (GB)"


def test_units_come_from_the_front_not_from_an_outlier():
    df = _frame([(2e6, 2e-3), (5e6, 1e-3)], [], [(3e12, 9.0)])
    spec = pareto_chart(df).to_dict()
    points = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "circle")
    assert points["encoding"]["x"]["title"] == "memory per device (MB)"
    assert points["encoding"]["y"]["title"] == "predicted step time (ms)"


def test_a_front_over_decades_gets_a_log_axis():
    df = _frame([(1 * GB, 300.0), (5 * GB, 30.0), (9 * GB, 0.5)], [], [(6 * GB, 20.0)])
    spec = pareto_chart(df).to_dict()
    x, y = _scales(spec)
    assert y["type"] == "log" and x["type"] == "linear"
    assert y["domain"][0] < 0.5 and y["domain"][1] > 300 / 60  # in minutes: 300 s = 5 min
    points = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "circle")
    assert points["encoding"]["y"]["title"] == "predicted step time (min, log scale)"


def test_the_cap_is_drawn_when_near_and_named_when_far():
    df = _frame(FRONT, TOP, INSIDE)
    near = pareto_chart(df, 60 * GB).to_dict()
    rules = [layer for layer in near["layer"] if layer["mark"]["type"] == "rule"]
    assert len(rules) == 1 and _scales(near)[0]["domain"][1] >= 60
    assert near["title"]["subtitle"] == []
    far = pareto_chart(df, 800 * GB).to_dict()
    assert not [layer for layer in far["layer"] if layer["mark"]["type"] == "rule"]
    assert _scales(far)[0]["domain"][1] < 60
    assert far["title"]["subtitle"] == ["memory cap 800 GB, right of the chart"]


def test_a_real_plans_front_and_top_rows_are_all_on_the_chart():
    p = plan(model_preset("tiny"), TrainConfig(global_batch=16), "cpu-local", top=5)
    df = chart_frame(p)
    spec = pareto_chart(df, p.memory_cap).to_dict()
    drawn = {row["row"] for rows in spec["datasets"].values() for row in rows if "row" in row}
    anchors = df[df["on_front"] | (df["kind"] == "top")]
    assert set(anchors["row"]) <= drawn
    off = len(set(df["row"]) - drawn)  # tiny's front is lean and fast: most rows lie beyond it
    assert off > 0 and spec["title"]["subtitle"][0].startswith(f"{off:,} of {len(df):,} layouts")
