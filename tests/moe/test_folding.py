"""MoE parallel folding (Liu et al. 2025, arXiv:2504.14960; issue 43, item 5): `expert_tensor=1`
folds the tensor axis into the expert group, so the attention runs TP × DP and the routed experts
EP = expert × tensor, each expert whole (ETP = 1). The spelling and its refusals, the specs
(unfolded layouts keep theirs), fp32 parity with one device, and the all-to-all the step
compiles over expert × tensor."""

import pytest
from jax.sharding import PartitionSpec as P
from parity import Reference

from parex.config import TrainConfig, model_preset
from parex.layout import Axis, Layout, LayoutError
from parex.measure.compiled import compile_layout, compiled_stats
from parex.model.moe import routing
from parex.model.moe.layer import EXPERT_DIMS, MASKS, SLOTS
from parex.validation import validate

TRAIN = TrainConfig(global_batch=8)
TINY_MOE = model_preset("tiny-moe")  # L=4, D=128, T=128, E=8, k=2, F_e=128, dropless
# DeepSeek-V3's folding in small: attention data=4 × tensor=2 (the expert axis is data-parallel
# for it), the experts over all 8 devices, one whole expert each
FOLDED = "expert=4,tensor=2,expert_tensor=1"


# --- the spelling ---------------------------------------------------------------------------------

def test_the_fold_reads_back_and_counts_its_group():
    layout = Layout.parse(FOLDED)
    assert Layout.parse(str(layout)) == layout and layout.n_devices == 8
    assert layout.folds_experts and layout.expert_parallel == 8 and layout.data_parallel == 4
    assert layout.expert_axes == (Axis.EXPERT, Axis.TENSOR)
    over_tensor = Layout.parse("data=4,tensor=2,expert_tensor=1")  # EP over tensor, EDP = 4
    assert over_tensor.expert_parallel == 2 and over_tensor.data_parallel == 4


def test_expert_tensor_equal_to_tensor_is_the_unfolded_layout():
    """Megatron's default ETP = TP is parex's layout of before: the same value and string."""
    assert Layout.parse("expert=4,tensor=2,expert_tensor=2") == Layout.parse("expert=4,tensor=2")
    assert str(Layout.parse("expert=4,tensor=2,expert_tensor=2")) == "expert=4,tensor=2"


def test_folded_specs_split_experts_over_the_group_and_slots_over_tensor():
    layout = Layout.parse(FOLDED)
    assert layout.spec(EXPERT_DIMS["w_in"], "param") == P(("expert", "tensor"), None, None)
    assert layout.spec(EXPERT_DIMS["w_out"], "param") == P(("expert", "tensor"), None, None)
    assert layout.spec(SLOTS) == P(None, "expert", "tensor", None)  # (E, B, C, D)
    assert layout.spec(MASKS) == P("expert", None, None, "tensor")


@pytest.mark.parametrize("text", ["data=2,expert=4", "expert=4,tensor=2",
                                  "data=2,expert=2,tensor=2,sp=on"])
def test_unfolded_layouts_keep_their_specs(text):
    """The expert axis inside data is the special case: specs as before the fold existed."""
    layout = Layout.parse(text)
    tensor = "tensor" if layout.tensor > 1 else None
    assert layout.spec(EXPERT_DIMS["w_in"], "param") == P("expert", None, tensor)
    assert layout.spec(SLOTS) == P(None, layout.spec(("batch",))[0], None, None)
    assert layout.spec(MASKS)[2:] == (None, None)


@pytest.mark.parametrize("model, text, words", [
    (TINY_MOE, "data=2,tensor=4,expert_tensor=2",
     ["expert_tensor=2", "tensor=4", "expert_tensor=1"]),
    (TINY_MOE, "data=8,expert_tensor=2", ["expert_tensor=2", "tensor=1", "tensor > 1"]),
    (model_preset("tiny-llama"), "data=4,tensor=2,expert_tensor=1",
     ["dense model", "drop expert_tensor"]),
    (TINY_MOE.replace(experts=4), FOLDED, ["experts=4", "expert × tensor = 8", "[1, 2, 4]"]),
    (TINY_MOE, "seq=2,cp=ring,tensor=2,expert=2,expert_tensor=1", ["seq=2", "drop expert_tensor"]),
    (TINY_MOE, "tensor=2x2x1,data=2,expert_tensor=1", ["3D split", "drop expert_tensor"]),
    (TINY_MOE.replace(capacity_factor=1.0, top_k=1, experts=2, expert_ffn=64).replace(seq_len=130),
     "data=4,tensor=2,expert_tensor=1", ["C = 65", "tensor=2"]),
])
def test_bad_folds_get_one_clear_line(model, text, words):
    train = TRAIN.replace(seq_len=model.seq_len)
    with pytest.raises(LayoutError) as error:
        validate(Layout.parse(text), model, train, 8)
    message = str(error.value)
    assert "\n" not in message and all(w in message for w in words), message


# --- parity with one device ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_moe():
    return Reference(TINY_MOE, TRAIN)


def test_deepseek_v3_folding_in_small_matches_single_device(tiny_moe):
    tiny_moe.check(Layout.parse(FOLDED))


@pytest.mark.slow
@pytest.mark.parametrize("text", ["data=4,tensor=2,expert_tensor=1",
                                  "data=2,expert=2,tensor=2,expert_tensor=1,zero=1",
                                  "expert=2,fsdp=2,tensor=2,expert_tensor=1",
                                  "data=2,expert=2,tensor=2,expert_tensor=1,sp=on",
                                  "expert=2,tensor=2,expert_tensor=1,microbatches=2,data=2"])
def test_more_folds_match_single_device(tiny_moe, text):
    tiny_moe.check(Layout.parse(text))


@pytest.mark.slow
def test_a_fold_with_dropped_tokens_and_full_remat_matches_single_device():
    """Capacity 1.0 drops assignments (C = 32, 16 per tensor device); full remat recomputes the
    dispatch."""
    dropping = Reference(TINY_MOE.replace(name="tiny-moe-drop", capacity_factor=1.0), TRAIN)
    dropping.check(Layout.parse(FOLDED))
    dropping.check(Layout.parse(FOLDED), TRAIN.replace(remat="full"))


# --- the compiled step ---------------------------------------------------------------------------

def test_dispatch_is_four_all_to_alls_per_block_over_expert_and_tensor():
    """Each tensor device sends its C/t slots of the b sequences it shares with its tensor
    peers: b·E·C/t·D float32 per op, over all 8 devices (expert × tensor)."""
    step, compiled, _ = compile_layout(TINY_MOE, TRAIN, Layout.parse(FOLDED))
    a2a = [c for c in compiled_stats(compiled, step)["collectives"] if c.kind == "all-to-all"]
    b, T, D, E = TRAIN.global_batch // 4, TINY_MOE.seq_len, TINY_MOE.hidden, TINY_MOE.experts
    C = routing.capacity(TINY_MOE, T)
    assert [(c.axes, c.count, c.bytes) for c in a2a] == [
        (("expert", "tensor"), 4 * TINY_MOE.layers, b * E * (C // 2) * D * 4)]
