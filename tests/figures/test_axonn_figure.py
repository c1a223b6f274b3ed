"""Figure `axonn`: AxoNN's published results beside parex's, scored rows and brackets."""

import json

import numpy as np
import pytest

from parex.cli.main import main
from parex.figures import FIGURES
from parex.figures.axonn import axonn_model, bracket_rows, megatron_rows
from parex.parallel.schedules import SCHEDULES


def test_axonn_models_are_the_published_table():
    m = axonn_model("gpt-80b")
    assert (m.layers, m.hidden, m.heads, m.seq_len) == (42, 12288, 96, 2048)
    assert 75e9 < m.n_params < 85e9


def test_megatron_rows_are_tensor_pipeline_data_with_its_schedules():
    code = {s: SCHEDULES.index(s) for s in ("1f1b", "interleaved", "zbh1")}
    cols = {k: np.array(v) for k, v in {
        "tensor_y": [1, 1, 1, 2, 1, 1], "tensor_z": [1, 1, 1, 2, 1, 1],
        "fsdp": [1, 1, 1, 1, 2, 1], "seq": [1, 1, 1, 1, 1, 2], "zero": [1, 0, 0, 0, 0, 0],
        "stage": [4, 2, 1, 1, 1, 1],
        "schedule": [code["interleaved"], code["zbh1"], 0, 0, 0, 0]}.items()}
    assert megatron_rows(cols).tolist() == [True, False, True, False, False, False]


def test_a_bracket_is_two_known_rows_never_scored():
    rows = bracket_rows("x", 0.5, [0.9, 0.7, 0.8], "the batch")
    assert [r.parex for r in rows] == [0.7, 0.9]
    assert all(r.known and "never scored" in r.known for r in rows)
    assert "outside" in rows[0].note


@pytest.mark.slow
def test_parex_figure_axonn_json_has_paper_parex_ratio_tolerance(capsys):
    assert "axonn" in FIGURES
    assert main(["figure", "axonn", "--json"]) in (0, 1)  # 1: a row out of tolerance
    out = json.loads(capsys.readouterr().out)
    rows = {r["quantity"]: r for r in out["rows"]}
    points = [r for r in out["rows"] if not r["quantity"].endswith(("low end", "high end"))]
    assert len(points) == 2 and out["tolerance"]["lo"] < 1 < out["tolerance"]["hi"]
    for r in points:  # each point is within tolerance or a named deviation, never silently out
        within = out["tolerance"]["lo"] <= r["ratio"] <= out["tolerance"]["hi"]
        assert within or r["known"]
    for r in out["rows"]:
        assert r["ratio"] == pytest.approx(r["parex"] / r["paper"])
    speed = rows["80B · 1,024 Perlmutter GPUs · best 3D ÷ best Megatron-LM speed (×)"]
    assert speed["paper"] == 1.26 and 0.5 < speed["parex"] < 2
    brackets = [r for r in out["rows"] if r not in points]
    assert all(r["known"] for r in brackets) and len(brackets) == 12  # 3 weak-scaling points and 3 machines, low and high each
    assert {r["paper"] for r in brackets} >= {0.883, 0.79, 0.535}
