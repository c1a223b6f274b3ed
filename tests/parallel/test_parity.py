"""The heart of the suite: every layout's loss and first-step gradients equal the single-device
reference (fp32, relative error ~1e-5)."""

import random

import pytest
from parity import reference_fixtures

from parex.config import TrainConfig, model_preset
from parex.layout import LAYOUT_PRESETS, Layout, LayoutError
from parex.validation import validate

TRAIN = TrainConfig(global_batch=16, seq_len=64)


tiny, tiny_llama = reference_fixtures(TRAIN)


@pytest.mark.parametrize("preset", list(LAYOUT_PRESETS))
def test_every_layout_preset_matches_single_device(tiny, preset):
    tiny.check(Layout.preset(preset, 1 if preset == "single" else 8))


@pytest.mark.parametrize("text", ["data=2,tensor=4", "fsdp=2,tensor=4,sp=on", "data=8,zero=2"])
def test_llama_layouts_match_single_device(tiny_llama, text):
    """Grouped-query attention (4 KV heads) split over tensor=4 keeps whole groups per device."""
    tiny_llama.check(Layout.parse(text))


@pytest.mark.parametrize("remat", ["selective", "full"])
def test_rematerialisation_does_not_change_gradients(tiny, remat):
    tiny.check(Layout(data=2, tensor=4, sp=True), TRAIN.replace(remat=remat))


def random_layouts(count, seed=0):
    """Valid random layouts over 8 devices: axis sizes, ZeRO stage, SP, microbatches, remat."""
    rng, found = random.Random(seed), []
    while len(found) < count:
        data = rng.choice([1, 2, 4, 8])
        fsdp = rng.choice([d for d in (1, 2, 4, 8) if data * d <= 8])
        tensor = 8 // (data * fsdp)
        layout = Layout(data=data, fsdp=fsdp, tensor=tensor, zero=rng.choice([0, 1, 2, 3]),
                        sp=tensor > 1 and rng.random() < 0.5,
                        microbatches=rng.choice([1, 2]))
        train = TRAIN.replace(remat=rng.choice(["none", "selective", "full"]))
        try:
            validate(layout, model_preset("tiny"), train, 8)
        except LayoutError:
            continue
        if (layout, train) not in found:
            found.append((layout, train))
    return found


@pytest.mark.parametrize("layout, train", random_layouts(6), ids=lambda x: str(x)[:40])
def test_random_layouts_match_single_device(tiny, layout, train):
    tiny.check(layout, train)


def test_training_step_reduces_the_loss():
    """The full step (AdamW, clipping, schedule) runs sharded and learns."""
    from parex.measure import measure

    m = measure(model_preset("tiny"), TRAIN.replace(steps=8), Layout(fsdp=2, tensor=4))
    assert len(m.losses) == 8 and m.losses[-1] < m.losses[0] - 0.5
