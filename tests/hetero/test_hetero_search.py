"""Searching heterogeneous plans, and `parex plan --cluster`: no compile, about a second."""

import json

import pytest

from parex.cli.main import main
from parex.cluster import cluster_from_dict
from parex.config import model_preset
from parex.hetero.baselines import compare, even_splits
from parex.hetero.estimate import Estimator
from parex.hetero.costs import stage_setting
from parex.hetero.predict import predict_plan
from parex.hetero.search import NoPlan, build_plan, plan_of, search, structures
from parex.hetero.validate import check_plan

MODEL = model_preset("llama2-7b")
TWO = {"name": "two", "inter_group_gbps": 10, "groups": [
    {"chip": "rtx-4090", "inter_node_gbps": 10}, {"chip": "a100-pcie-80gb",
                                                   "inter_node_gbps": 10}]}


@pytest.fixture(scope="module")
def result():
    return compare(MODEL, cluster_from_dict(TWO), 64, 2048, remats=("none", "full"))


def test_the_best_plan_is_valid_fits_and_beats_the_even_split(result):
    s = result.search
    best = s.best
    check_plan(best.plan, s.cluster, MODEL, 64)
    assert best.fits and all(p.fits for p in s.top)
    steps = [p.step_time_s["total"] for p in s.top]
    assert steps == sorted(steps)
    # asymmetric: the two chips get different layer counts
    layers = {st.group: st.layers for _, _, st in best.plan.stages()}
    assert layers["a100-pcie-80gb"] > layers["rtx-4090"]
    assert result.even is not None and result.versus_even > 1.1
    assert best.step_time_s["total"] < result.even.step_time_s["total"]
    assert result.homogeneous is not None and result.reference.n_devices == 12


def test_estimates_are_close_to_the_exact_prediction(result):
    s = result.search
    for e in sorted(s.estimates, key=lambda e: e.step_s)[:5]:
        exact = predict_plan(build_plan(s.cluster, e), s.cluster,
                             stage_setting(MODEL, 2048, e.remat), 64)
        assert 0.8 < e.step_s / exact.step_time_s["total"] < 1.25


def test_even_splits_are_the_homogeneous_mesh_order():
    cluster = cluster_from_dict(TWO)
    splits = list(even_splits(cluster, MODEL, 64, [1, 2]))
    (t, P, p, order), pipes, layers, micro = next(x for x in splits if x[0][:3] == (2, 4, 2))
    # stage s of pipeline i on devices (s·P + i)·t: stage 0 on the first group, 1 on the second
    assert [(u.group, u.first) for u in pipes[1]] == [(order[0], 2), (order[1], 2)]
    assert layers[0] == [16, 16] and micro[1] == [16] * 4


def test_structures_span_tensor_degrees_pipelines_orders_and_placements():
    shapes = list(structures(cluster_from_dict(TWO), MODEL))
    assert {s.placement for s in shapes} == {"dp", "pp"}
    assert {s.order for s in shapes} == {(0, 1), (1, 0)}
    assert max(s.pipelines for s in shapes) == 8 and {s.tensors[0] for s in shapes} == {1, 2, 4, 8}
    uneven = next(s for s in shapes if s.tensors == (8, 1) and s.pipelines == 1)
    pipe, = uneven.pipelines_of(cluster_from_dict(TWO))
    assert [u.tensor for u in pipe] == [8] + [1] * 8


def test_nothing_fits_says_what_was_tried():
    tiny = cluster_from_dict({"groups": [{"chip": "rtx-3080ti", "nodes": 1,
                                          "devices_per_node": 2}]})
    with pytest.raises(NoPlan, match="no plan of llama2-7b fits"):
        search(MODEL, tiny, 8, 2048, remats=("full",))


def test_the_estimators_memory_check_agrees_with_the_exact_prediction():
    cluster, setting = cluster_from_dict(TWO), stage_setting(MODEL, 2048)
    est = Estimator(cluster, setting, 64, [1])
    verdicts = set()
    for label, pipes, layers, micro in even_splits(cluster, MODEL, 64, [1]):
        fits_estimated = bool(est.estimate([pipes], [label], layers=[layers],
                                           microbatches=[micro]))
        plan = plan_of(cluster, pipes, layers, micro[1], 1)
        fits_exact = predict_plan(plan, cluster, setting, 64).fits
        assert fits_estimated == fits_exact, label
        verdicts.add(fits_exact)
    assert verdicts == {True, False}  # both kinds occur


def test_cli_plans_a_cluster_file_in_the_homogeneous_json_shape(tmp_path, capsys):
    path = tmp_path / "two.toml"
    path.write_text('name = "two"\ninter_group_gbps = 10\n[[groups]]\nchip = "rtx-4090"\n'
                    'inter_node_gbps = 10\n[[groups]]\nchip = "a100-pcie-80gb"\n'
                    'inter_node_gbps = 10\n')
    assert main(["plan", "--cluster", str(path), "--model", "llama2-7b", "--global-batch", "64",
                 "--seq", "2048", "--top", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("layouts_considered", "layouts_per_s", "top", "even_split", "homogeneous",
                "n_devices", "seconds"):
        assert key in out
    assert out["n_devices"] == 16 and len(out["top"]) == 3
    first = out["top"][0]
    assert 0 < first["mfu"] < 1 and first["rank"] == 1 and first["fits"]
    assert first["plan"]["pipelines"] and "batch=" in first["layout"]
    assert out["even_split"]["speedup_of_best"] > 1
    assert out["homogeneous"]["chip"] == "a100-pcie-80gb"
    assert main(["plan", "--cluster", str(path), "--model", "llama2-7b", "--global-batch", "64",
                 "--seq", "2048", "--top", "2"]) == 0
    text = capsys.readouterr().out
    assert "best plan:" in text and "vs the best even split" in text and "pipeline  1" in text


def test_a_memory_cap_holds_on_every_device_and_bad_flags_are_named():
    capped = search(MODEL, cluster_from_dict(TWO), 64, 2048, remats=("none", "full"),
                    memory_cap=18e9, top=3)
    for pred in capped.top:
        assert all(s.memory["total"] <= 18e9 and s.cap == 18e9 for s in pred.stages)

def test_cli_names_flags_a_cluster_plan_does_not_take(capsys):
    assert main(["plan", "--cluster", "het-48", "--model", "llama2-7b", "--verify"]) == 2
    assert "drop --verify" in capsys.readouterr().err
    assert main(["plan", "--cluster", "no-such", "--model", "llama2-7b"]) == 2
    assert "no cluster file 'no-such'" in capsys.readouterr().err
