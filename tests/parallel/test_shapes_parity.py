"""The shapes other frameworks' configurations name (issue 45, docs/models.md): an explicit head
width, parallel attention + MLP blocks, tied embeddings and a sliding window match the
single-device reference (fp32, relative error ~1e-5) on the layouts parex's executor runs them
on, and each layout it cannot run is refused in one line naming the fix."""

import pytest
from parity import Reference

from parex.config import TrainConfig, model_preset
from parex.layout import Layout, LayoutError
from parex.validation import validate

TRAIN = TrainConfig(global_batch=16, seq_len=64)

# Gemma-style heads wider than D / H (8 × 32 = 256 ≠ 128), GPT-J's parallel block, tied tables,
# a window of 24 of the 64 positions (not a multiple of the flash kernel's blocks)
SHAPES = {"head-dim": ("tiny-llama", {"head_dim": 32}),
          "parallel": ("tiny", {"parallel_block": True}),
          "tied": ("tiny", {"tied_embeddings": True}),
          "window": ("tiny-llama", {"sliding_window": 24}),
          "all": ("tiny-llama", {"head_dim": 32, "parallel_block": True, "tied_embeddings": True,
                                 "sliding_window": 24})}


@pytest.fixture(scope="module")
def references():
    cache = {}

    def get(shape):
        if shape not in cache:
            base, changes = SHAPES[shape]
            cache[shape] = Reference(model_preset(base).replace(**changes), TRAIN)
        return cache[shape]

    return get


# the default suite runs the four at once on one layout of four axes; each alone in SLOW
FAST = [("all", "fsdp=2,seq=2,cp=ulysses,tensor=2,sp=on")]
SLOW = [("head-dim", "data=2,tensor=4"), ("parallel", "fsdp=2,tensor=4,sp=on"),
        ("tied", "data=2,tensor=4,sp=on"), ("window", "data=2,seq=2,cp=ulysses,tensor=2"),
        ("all", "data=2,tensor=4"), ("head-dim", "fsdp=2,tensor=4,sp=on"), ("head-dim", "data=2,stage=2,microbatches=2"),
        ("head-dim", "data=2,seq=4,cp=ring"), ("parallel", "data=2,tensor=4"),
        ("parallel", "data=2,tensor=2,stage=2,schedule=1f1b,microbatches=2"),
        ("parallel", "data=2,seq=2,cp=ring,tensor=2"), ("tied", "fsdp=8"),
        ("tied", "data=2,seq=2,cp=ring,tensor=2"), ("tied", "data=4,zero=1,tensor=2"),
        ("window", "data=2,tensor=4,sp=on"), ("window", "data=2,stage=2,microbatches=2"),
        # AxoNN's 3D tensor split (parex.parallel.tensor3d): the tied logits read E[V_Y, D_XZ]
        ("tied", "tensor=2x2x2"), ("head-dim", "tensor=2x2x2"), ("parallel", "tensor=2x2x2"),
        ("window", "data=2,tensor=2x2x1")]


@pytest.mark.parametrize("shape, spec", FAST)
def test_shapes_match_single_device(references, shape, spec):
    references(shape).check(Layout.parse(spec))


@pytest.mark.slow
@pytest.mark.parametrize("shape, spec", SLOW)
def test_shapes_match_single_device_on_more_layouts(references, shape, spec):
    references(shape).check(Layout.parse(spec))


@pytest.mark.slow
def test_the_flash_kernels_window_matches_single_device(references):
    """The flash kernel skips the blocks wholly outside the window and agrees with the
    reference (the naive kernel's, on one device; FAST runs the naive one on a mesh)."""
    references("window").check(Layout.parse("data=2,tensor=4"), TRAIN.replace(attention="flash"))


@pytest.mark.parametrize("shape, spec, words", [
    ("tied", "data=2,stage=2,microbatches=2", ["tied_embeddings with stage=2", "untie them"]),
    ("window", "data=2,seq=2,cp=ring", ["cp=ring", "use cp=ulysses",
                                        "nearest layout that runs is data=2,seq=2,cp=ulysses"]),
])
def test_what_the_executor_cannot_run_is_refused_in_one_line(shape, spec, words):
    base, changes = SHAPES[shape]
    model = model_preset(base).replace(**changes)
    validate(Layout.parse(spec), model, TRAIN, 4, executable=False)  # a real program: predicted
    with pytest.raises(LayoutError) as error:
        validate(Layout.parse(spec), model, TRAIN, 4)
    assert "\n" not in str(error.value) and all(w in str(error.value) for w in words)


def test_distributed_optimizer_state_need_not_divide_hidden():
    """ZeRO-1 over 16 replicas of hidden 120: a real program (Megatron-LM pads its flat buffer),
    refused by the executor, which splits each weight's state along D, naming the fix."""
    model = model_preset("tiny").replace(hidden=120)
    layout = Layout.parse("data=16,zero=1")
    validate(layout, model, TRAIN, 16, executable=False)
    with pytest.raises(LayoutError, match="distributed optimizer pads a flat buffer.*"
                                          "nearest layout that runs is data=16$"):
        validate(layout, model, TRAIN, 16)
