"""AxoNN's 3D tensor layouts in `parex plan`: listed with the rest, each with parex's and AxoNN's
predicted step time, a row's numbers are predict()'s, and the two models' rankings compared."""

import json

import numpy as np
import pytest

from parex.cli.main import main
from parex.config import ModelConfig, TrainConfig
from parex.layout import Layout
from parex.plan import plan, plan_report
from parex.plan.rank import distinct
from parex.plan.tensor3d import best_3d, disagreement
from parex.predict import axonn, predict

# AxoNN's GPT-20B (arXiv 2502.08145's model table): 32 layers, hidden 7168, 56 heads
GPT20B = ModelConfig("axonn-gpt-20b", "gpt", layers=32, hidden=7168, heads=56, vocab=50304,
                     seq_len=2048)
TRAIN = TrainConfig(global_batch=256, seq_len=2048)


@pytest.fixture(scope="module")
def perlmutter_plan():
    return plan(GPT20B, TRAIN, "perlmutter", 8, top=5)


def test_plan_lists_3d_layouts_with_both_models_times(perlmutter_plan):
    p = perlmutter_plan
    rows = best_3d(p)
    assert rows, "no 3D layout fits"
    for i in rows:
        layout = p.layout(i)
        assert layout.tensor3d and layout.n_devices == 32
        e = p.entry(i)
        assert e["axonn_step_time_s"] > e["step_time_s"]["compute"]
        # the row is what predict() gives for its layout
        pred = predict(p.model, p.train_of(i), layout, p.cluster, **p.settings)
        assert e["step_time_s"]["total"] == pytest.approx(pred.step_time_s["total"], rel=1e-9)
        assert e["microbatch"] == TRAIN.global_batch // (layout.data * layout.tensor_z)


def test_plan_lists_3d_layouts_inside_pipeline_stages(perlmutter_plan):
    """3D rows inside pipeline stages, with the 1D rows' schedules and microbatch counts: each
    row is predict()'s for its layout, and parex runs it (validation accepts it)."""
    from parex.validation import check_layout

    p, cols = perlmutter_plan, perlmutter_plan.columns
    staged = ((cols["tensor_y"] > 1) | (cols["tensor_z"] > 1)) & (cols["stage"] > 1)
    assert len(set(cols["schedule"][staged])) > 2 and len(set(cols["stage"][staged])) > 2
    rows = best_3d(p, stages=True)
    assert rows == [int(i) for i in p.order if staged[i]][:3], "the fastest, in parex's order"
    assert "inside pipeline stages" in str(plan_report(p))
    for i in rows:
        layout = p.layout(i)
        assert layout.tensor3d and layout.stage > 1 and layout.n_devices == 32
        check_layout(layout, p.model, p.train_of(i), 32)
        pred = predict(p.model, p.train_of(i), layout, p.cluster, **p.settings)
        assert p.entry(i)["step_time_s"]["total"] == pytest.approx(pred.step_time_s["total"],
                                                                   rel=1e-9)
        assert {"t3d-gather-z", "pipeline"} <= {c["name"] for c in pred.collectives}


def test_axonn_time_is_parex_compute_plus_axonns_communication(perlmutter_plan):
    p = perlmutter_plan
    i = best_3d(p)[0]
    layout, cols = p.layout(i), p.columns
    comm = axonn.comm_seconds(p.model, p.cluster.chip, layout.tensor, layout.tensor_y,
                              layout.tensor_z, layout.data, TRAIN.global_batch * 2048, 2)
    expected = cols["step_compute_s"][i] + sum(float(np.sum(v)) for v in comm.values())
    assert cols["axonn_time_s"][i] == pytest.approx(expected, rel=1e-12)
    pipelines = cols["stage"] > 1
    assert np.isnan(cols["axonn_time_s"][pipelines]).all()  # AxoNN's model has no pipelines


def test_disagreement_counts_the_pairs_the_models_order_differently(perlmutter_plan):
    d = disagreement(perlmutter_plan, k=8)
    cols = perlmutter_plan.columns
    firsts, _ = distinct(cols, perlmutter_plan.order)  # alike layouts once
    rows = [i for i in firsts if np.isfinite(cols["axonn_time_s"][i])][:8]
    assert len(rows) == len({(cols["step_time_s"][i], cols["memory_total_bytes"][i]) for i in rows})
    ours, theirs = cols["step_time_s"][rows], cols["axonn_time_s"][rows]
    flips = sum((ours[a] - ours[b]) * (theirs[a] - theirs[b]) < 0
                for a in range(8) for b in range(a + 1, 8))
    assert d["rows_compared"] == 8 and len(d["flipped"]) == flips
    assert d["kendall_tau"] == pytest.approx(1 - 2 * flips / 28)
    assert d["axonn_best"]["axonn_step_s"] == pytest.approx(theirs.min())


def test_cli_plan_json_has_3d_rows_and_the_comparison(capsys):
    assert main(["plan", "--model", "gpt", "--layers", "32", "--hidden", "7168", "--heads",
                 "56", "--vocab", "50304", "--seq", "2048", "--hardware", "perlmutter",
                 "--nodes", "8", "--global-batch", "256", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["top_3d"] and out["axonn"]["rows_compared"] >= 2 and out["top_3d_in_stages"]
    for e in out["top_3d"]:
        assert Layout.parse(e["layout"]).tensor3d and e["axonn_step_time_s"] > 0
