"""A predicted collective names the mesh axes its groups span in this layout, as the measured
side does (parex.measure.hlo.spanned_axes): an axis of size 1 spans nothing, so a gradient
reduction over (data, fsdp, expert, seq) reads "data" when only data is above 1. Every table
that lists collectives (`parex predict`, the Explorer's explanation) reads these names."""

import pytest

from parex import Layout, TrainConfig, model_preset, predict
from parex.cli.main import main

LAYOUTS = [("gpt2-small", "data=4,tensor=2", "h100-sxm"),
           ("gpt2-small", "fsdp=2,tensor=2,stage=2,microbatches=4", "h100-sxm"),
           ("gpt2-small", "fsdp=2,tensor=1x2x2", "h100-sxm"),
           ("tiny", "data=2,stage=4,schedule=local,microbatches=8", "a100-80gb"),
           ("tiny-moe", "data=2,expert=4", "h100-sxm")]


@pytest.mark.parametrize("model, text, hardware", LAYOUTS)
def test_every_listed_axis_is_one_the_layout_has(model, text, hardware):
    layout = Layout.parse(text)
    sizes = {axis.value: size for axis, size in layout.axis_sizes().items()}
    p = predict(model_preset(model), TrainConfig(global_batch=64), layout, hardware)
    assert p.collectives
    for c in p.collectives:
        assert c["axes"], c  # a group of one device would not be a collective
        assert all(sizes[axis] > 1 for axis in c["axes"]), (text, c["name"], c["axes"])


def test_a_reduction_over_data_and_fsdp_reads_data_when_fsdp_is_1():
    p = predict(model_preset("gpt2-small"), TrainConfig(global_batch=64),
                Layout.parse("data=4,tensor=2"), "h100-sxm")
    axes = {c["name"]: c["axes"] for c in p.collectives}
    assert axes["grad-reduce"] == ["data"] and axes["tp"] == ["tensor"]
    both = predict(model_preset("gpt2-small"), TrainConfig(global_batch=64),
                   Layout.parse("data=2,fsdp=2,tensor=2"), "h100-sxm")
    assert ["data", "fsdp"] in [c["axes"] for c in both.collectives if c["name"] == "grad-reduce"]


def test_the_predict_table_lists_only_the_layouts_axes(capsys):
    assert main(["predict", "--model", "gpt2-small", "--layout", "data=4,tensor=2",
                 "--hardware", "h100-sxm", "--global-batch", "64"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()
            if line.startswith(("grad-reduce", "tp "))]
    assert [row[:3] for row in rows] == [["grad-reduce", "all-reduce", "data"],
                                         ["tp", "all-reduce", "tensor"]]
