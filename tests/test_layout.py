"""Layout values: string form, presets, rules, and golden PartitionSpec snapshots."""

import json
import os
from pathlib import Path

import pytest
from jax.sharding import PartitionSpec as P

from parex.model import transformer as gpt
from parex.config import model_preset
from parex.layout import LAYOUT_PRESETS, Layout, LayoutError

GOLDEN = Path(__file__).parent / "golden" / "partition_specs.json"


@pytest.mark.parametrize("text", [
    "data=2,tensor=4,zero=1,sp=on", "fsdp=8", "data=2,fsdp=2,tensor=2,microbatches=2",
    "data=2,stage=4,schedule=interleaved,virtual=2,microbatches=8", "stage=2,partition=3:1",
    "data=2,seq=4,cp=ring", "single"])
def test_string_form_round_trips(text):
    layout = Layout.parse(text)
    assert str(layout) == text
    assert Layout.parse(str(layout)) == layout


def test_parse_reads_values():
    layout = Layout.parse("data=2, tensor=4, zero=1, sp=on")
    assert (layout.data, layout.tensor, layout.zero, layout.sp, layout.n_devices) == (2, 4, 1, True, 8)


@pytest.mark.parametrize("text, message", [
    ("data=two", "takes a whole number"), ("sp=maybe", "sp=on or sp=off"),
    ("pipeline=4", "cannot read 'pipeline=4'"), ("data", "cannot read 'data'"),
    ("partition=3:x", "separated by ':'")])
def test_parse_errors_say_what_to_write(text, message):
    with pytest.raises(LayoutError, match=message):
        Layout.parse(text)


def test_presets_use_all_devices():
    for name in LAYOUT_PRESETS:
        layout = Layout.preset(name, 8)
        assert layout.n_devices == (1 if name == "single" else 8), name


def test_unknown_preset_lists_known_ones():
    with pytest.raises(LayoutError, match="unknown layout preset 'zero4'.*fsdp_tp"):
        Layout.preset("zero4", 8)


def test_preset_by_name_needs_device_count():
    with pytest.raises(LayoutError, match="needs a device count"):
        Layout.parse("dp")
    assert Layout.parse("dp", 4) == Layout(data=4)


def test_zero_stages_shard_state_progressively():
    """ZeRO-1 shards optimizer state, ZeRO-2 also gradients, ZeRO-3 also parameters."""
    dims = ("embed", "mlp")
    for zero, sharded in [(0, set()), (1, {"opt"}), (2, {"opt", "grad"}),
                          (3, {"opt", "grad", "param"})]:
        layout = Layout(data=8, zero=zero)
        for kind in ("param", "grad", "opt"):
            expected = P("data", None) if kind in sharded else P(None, None)
            assert layout.spec(dims, kind) == expected, (zero, kind)


def test_zero_partitions_the_norms_and_d_sized_biases_too():
    """ZeRO (arXiv:1910.02054, section 5) partitions every parameter: a norm's scale or a
    D-sized bias, (L, D), is split along D like a weight's embed dim, stage by stage, and used
    whole; GPT's b_in (L, F), split over tensor, has no D and stays whole over the batch axes."""
    norm = ("layers", "hidden")
    for zero, sharded in [(0, set()), (1, {"opt"}), (2, {"opt", "grad"}),
                          (3, {"opt", "grad", "param"})]:
        layout = Layout(data=8, zero=zero)
        for kind in ("param", "grad", "opt"):
            expected = P(None, "data") if kind in sharded else P(None, None)
            assert layout.spec(norm, kind) == expected, (zero, kind)
    fsdp = Layout(fsdp=2, tensor=4)
    assert fsdp.spec(norm, "param") == P(None, "fsdp")
    assert fsdp.spec(norm) == P(None, None)  # used whole
    assert fsdp.spec(("layers", "mlp"), "param") == P(None, "tensor")
    # a leaf with two state dims (local learning's recon decoder) is split along the first
    assert fsdp.spec(("embed", "hidden"), "param") == P("fsdp", None)
    # AxoNN's 3D program keeps norms and biases whole, as AxoNN does
    assert Layout.parse("fsdp=2,tensor=1x2x2").spec(norm, "param") == P(None, None)


def test_megatron_tensor_parallel_specs():
    layout = Layout(tensor=4, sp=True)
    assert layout.spec(("embed", "mlp"), "param") == P(None, "tensor")  # column-parallel W_in
    assert layout.spec(("mlp", "embed"), "param") == P("tensor", None)  # row-parallel W_out
    assert layout.spec(("batch", "seq_res", "hidden")) == P(None, "tensor", None)  # SP region
    assert layout.spec(("batch", "seq", "vocab")) == P(None, None, "tensor")  # vocab-parallel


def _all_specs():
    specs = {}
    for model in ("tiny", "tiny-llama"):
        dims = gpt.param_dims(model_preset(model))
        flat = _flatten(dims)
        layouts = {name: Layout.preset(name, 8) for name in LAYOUT_PRESETS}
        layouts |= {text: Layout.parse(text) for text in PIPELINES}
        for name, layout in layouts.items():
            specs[f"{model}/{name}"] = {
                path: {kind: str(layout.storage_spec(d, kind)) for kind in ("param", "grad", "opt")}
                for path, d in flat.items()}
    return specs


# Pipelines store their blocks split over `stage` and the embedding and head split along embed
PIPELINES = ("data=2,stage=4", "data=2,tensor=2,sp=on,stage=2", "data=2,seq=2,cp=ulysses,stage=2",
             "data=2,seq=2,cp=ring,stage=2", "fsdp=2,tensor=2,stage=2",
             "data=2,zero=1,stage=2,tensor=2")


def _flatten(tree, prefix=""):
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out |= _flatten(value, f"{prefix}{key}/")
        else:
            out[prefix + key] = value
    return out


def test_golden_partition_specs():
    """Silent re-sharding shows up here. After an intended change, regenerate with
    PAREX_UPDATE_GOLDEN=1 pytest tests/test_layout.py and review the diff."""
    specs = _all_specs()
    if os.environ.get("PAREX_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(specs, indent=1, sort_keys=True) + "\n")
    assert specs == json.loads(GOLDEN.read_text())


def test_a_mistyped_key_or_preset_gets_the_nearest_one():
    with pytest.raises(LayoutError, match="cannot read 'dat=8'.*did you mean 'data'\\?"):
        Layout.parse("dat=8")
    with pytest.raises(LayoutError, match="did you mean 'microbatches'\\?"):
        Layout.parse("stage=2,microbatch=4")
    with pytest.raises(LayoutError, match="did you mean 'fsdp'"):
        Layout.parse("fsd", 8)  # no '=': a preset name or a key
    with pytest.raises(LayoutError, match="unknown layout preset 'dp-tp'; did you mean 'dp_tp'"):
        Layout.preset("dp-tp", 8)
