"""The step by effect (parex.predict.explain, `parex predict --explain`) and predicted scaling
efficiency against device count (parex.predict.scaling, charts.efficiency_chart)."""

import dataclasses

import pytest

from parex.cluster import Cluster
from parex.config import TrainConfig, model_preset
from parex.hardware import load_chip
from parex.layout import Layout
from parex.network import FabricTier, Network, load_network
from parex.predict import predict
from parex.predict.comm import convention
from parex.predict.explain import breakdown, explain_text
from parex.predict.scaling import doubling, grown, scaling_curve

MODEL = model_preset("llama2-7b")
PARTS = ("ideal compute", "kernel efficiency", "kernel shapes", "communication", "stragglers",
         "bubble")


def test_the_parts_add_up_to_the_predicted_step():
    train = TrainConfig(global_batch=256, seq_len=4096)
    layout = Layout.parse("data=8,tensor=4,stage=4,schedule=1f1b,microbatches=16")
    result = breakdown(MODEL, train, layout, "h100-sxm")
    parts = result["parts"]
    assert sum(parts[k] for k in PARTS) == pytest.approx(parts["total"], rel=1e-9)
    assert parts["total"] == pytest.approx(predict(MODEL, train, layout, "h100-sxm")
                                           .step_time_s["total"])
    assert parts["ideal compute"] > 0 and parts["bubble"] > 0 and parts["stragglers"] > 0
    assert parts["kernel shapes"] >= 0 and parts["congestion"] == 0  # a non-blocking fat tree
    assert result["tiers"]["scale-up links"] > 0 and result["tiers"]["NICs"] > 0
    text = explain_text(result)
    assert "step breakdown" in text and "stragglers" in text and "NICs" in text


def test_congestion_is_what_the_oversubscribed_tier_adds():
    """A spine at 1:8 above domains of two nodes; the data-parallel groups (stride 8: a
    member per node, two per domain) all-reduce their gradients after the backward, as
    Megatron-LM's local DDP runs it: a ring moves 1 byte per byte of the op across the NICs
    inside a domain and 0.5 across the spine, whose links carry it at an eighth of the NICs'
    rate. The spine's 0.5 · 8 = 4 against the NICs' 1.5 on a flat network: the congestion is
    2.5/4 of the all-reduce's bandwidth time."""
    spine = Network("tapered", tiers=(FabricTier("two nodes", 16),
                                      FabricTier("spine", 1024, oversubscription=8.0)))
    cluster = Cluster(load_chip("a100-80gb"), 8, network=spine)
    after = dataclasses.replace(convention("gpu"), overlaps_grad_reduce=False)
    train = TrainConfig(global_batch=64, seq_len=4096)
    layout = Layout.parse("data=4,tensor=8,stage=2,schedule=1f1b,microbatches=16")
    result = breakdown(MODEL, train, layout, cluster, convention=after)
    parts = result["parts"]
    grads = sum(c["seconds"] for c in result["prediction"].collectives
                if c["name"] == "grad-reduce")
    assert 0.55 * grads < parts["congestion"] < 2.5 / 4 * grads
    # on the profile's own non-blocking fat tree: none
    plain = breakdown(MODEL, train, layout, "a100-80gb", convention=after)["parts"]
    assert plain["congestion"] == 0 and plain["communication"] < parts["communication"]


def test_weak_and_strong_scaling_curves():
    train = TrainConfig(global_batch=64, seq_len=4096)
    layout = Layout.parse("data=1,tensor=8,stage=4,schedule=1f1b,microbatches=64")
    weak = scaling_curve(MODEL, train, layout, "h100-sxm", doubling(32, 1024), "weak")
    assert [r["devices"] for r in weak] == [32, 64, 128, 256, 512, 1024]
    assert weak[0]["efficiency"] == 1.0 and all(r["efficiency"] <= 1.0 for r in weak)
    # the slowest of more devices, the longer rings: weak scaling never gains
    effs = [r["efficiency"] for r in weak]
    assert effs == sorted(effs, reverse=True) and effs[-1] < 1.0
    strong = scaling_curve(MODEL, TrainConfig(global_batch=512, seq_len=4096), layout,
                           "h100-sxm", doubling(32, 1024), "strong")
    # fewer microbatches per pipeline as the replicas grow: the bubble takes over
    assert [r["layout"].split("microbatches=")[1] for r in strong][:3] == ["64", "32", "16"]
    assert strong[-1]["efficiency"] < 0.8 * weak[len(strong) - 1]["efficiency"]
    bubble = [r["bubble_s"] / r["step_s"] for r in strong]
    assert bubble == sorted(bubble)


def test_grown_layouts_and_refusals():
    layout = Layout.parse("data=2,tensor=4,stage=2,schedule=1f1b,microbatches=8")
    train = TrainConfig(global_batch=64)
    bigger, weak_train = grown(layout, train, 4, "weak")
    assert bigger.data == 8 and weak_train.global_batch == 256 and bigger.microbatches == 8
    bigger, strong_train = grown(layout, train, 4, "strong")
    assert bigger.microbatches == 2 and strong_train.global_batch == 64
    with pytest.raises(ValueError, match="mode"):
        grown(layout, train, 2, "sideways")


def test_efficiency_chart_draws_both_panels():
    from parex.charts import efficiency_chart

    train = TrainConfig(global_batch=64, seq_len=4096)
    layout = Layout.parse("tensor=8")
    rows = scaling_curve(MODEL, train, layout, "a100-80gb", [8, 64, 512], "weak")
    spec = efficiency_chart(rows).to_dict()
    assert len(spec["hconcat"]) == 2


def test_stalls_are_what_rccls_measured_small_chunk_stalls_add():
    """AxoNN's 5B GPT on 512 Frontier GCDs as its run script sets it up (Megatron-AxoNN,
    examples/run_axonn_amd.sh: depth 512, 2,048 sequences): each layer's weight-gradient
    reduce-scatter over 512 ranks carries about 200 kB per rank, under RCCL's measured 384 KiB,
    so under an unconfigured launch (data/networks/frontier-unconfigured.toml) each pays the
    stall measured for its ring size; Frontier's default, the configured launch, and Perlmutter
    (NCCL) never stall."""
    from parex.figures.axonn import axonn_model

    model, train = axonn_model("gpt-5b"), TrainConfig(global_batch=2048, seq_len=2048)
    layout = Layout.parse("tensor=1x1x512")
    kw = {"convention": "gpu", "dtype": "bfloat16", "recipe": "mixed"}
    unconfigured = Cluster(load_chip("frontier"), 64,
                           network=load_network("frontier-unconfigured"))
    stalled = breakdown(model, train, layout, unconfigured, **kw)
    parts = stalled["parts"]
    assert parts["communication"] >= parts["stalls"] > 0.5 * parts["total"]
    assert "small-chunk stalls" in explain_text(stalled)
    assert "frontier-unconfigured, measured under this launch: unconfigured" in " ".join(
        explain_text(stalled).split())
    configured = breakdown(model, train, layout, "frontier", **kw)["parts"]
    assert configured["stalls"] == 0 and configured["total"] < 0.2 * parts["total"]
    assert breakdown(model, train, layout, "perlmutter", **kw)["parts"]["stalls"] == 0
