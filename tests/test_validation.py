"""Impossible layouts are rejected before anything compiles, with the problem and the fix named."""

import pytest

from parex.config import ModelConfig, TrainConfig, model_preset
from parex.errors import InputError
from parex.layout import Layout, LayoutError
from parex.validation import validate

TINY = model_preset("tiny")  # 4 layers, hidden 128, 8 heads, ffn 512, vocab 256, seq 128
TRAIN = TrainConfig(global_batch=16)

CASES = [
    # (layout, model, train, devices, words the message must contain)
    ("data=2,tensor=2", TINY, TRAIN, 8, ["uses 4 devices but 8 are available", "--devices 4"]),
    ("data=3", TINY, TRAIN, 3, ["global batch 16 is not divisible by the 3", "multiple of 3"]),
    ("tensor=8", TINY.replace(heads=4, kv_heads=4), TRAIN, 8,
     ["heads=4 is not divisible by tensor=8", "divisors of 4"]),
    ("tensor=4", TINY.replace(vocab=258), TRAIN, 4, ["vocab=258 is not divisible by tensor=4"]),
    ("tensor=2", TINY.replace(ffn=257), TRAIN, 2, ["ffn=257 is not divisible by tensor=2"]),
    ("data=8,sp=on", TINY, TRAIN, 8, ["sp=on needs tensor > 1", "tensor=2 or more"]),
    ("tensor=8,sp=on", TINY, TRAIN.replace(seq_len=100), 8,
     ["sequence length 100 is not divisible by tensor=8"]),
    ("data=8,zero=5", TINY, TRAIN, 8, ["zero=5", "0, 1 (optimizer state)"]),
    ("fsdp=8", TINY.replace(hidden=100, heads=4, kv_heads=4), TRAIN, 8,
     ["hidden=100 is not divisible by the 8 shards"]),
    ("data=8,microbatches=4", TINY, TRAIN, 8,
     ["too small or uneven for 4 microbatches", "raise the batch to 32"]),
    ("data=0", TINY, TRAIN, 0, ["data=0", "at least 1"]),
    ("data=2", TINY.replace(dtype="float8"), TRAIN, 2, ["unknown dtype 'float8'"]),
    ("data=2", TINY.replace(family="mamba"), TRAIN, 2, ["unknown model family 'mamba'"]),
    ("data=2", ModelConfig(hidden=100, heads=8), TRAIN, 2, ["hidden=100 is not divisible by heads=8"]),
    ("data=2", TINY.replace(kv_heads=3), TRAIN, 2, ["heads=8 is not a multiple of kv_heads=3"]),
    ("data=2", TINY, TRAIN.replace(seq_len=512), 2, ["sequence length 512", "seq_len=128"]),
    ("data=2", TINY, TRAIN.replace(microbatch=3), 2, ["microbatch=3 must divide the 8 sequences"]),
    ("data=2,microbatches=2", TINY, TRAIN.replace(microbatch=2), 2,
     ["microbatches=2 and microbatch=2 disagree"]),
]


def test_a_misspelt_train_setting_is_refused_where_it_is_written():
    """TrainConfig(remat="selctive") fails at once, not when a prediction first reads it."""
    for field, value, says in (("remat", "selctive", "unknown remat policy 'selctive'"),
                               ("attention", "fast", "unknown attention kernel 'fast'"),
                               ("global_batch", 0, "global_batch=0")):
        with pytest.raises(InputError, match=says):
            TrainConfig(**{field: value})


@pytest.mark.parametrize("text, model, train, devices, words", CASES,
                         ids=[c[0] + "|" + c[4][0][:30] for c in CASES])
def test_invalid_configuration_is_explained(text, model, train, devices, words):
    with pytest.raises(LayoutError) as err:
        validate(Layout.parse(text), model, train, devices)
    for word in words:
        assert word in str(err.value)


@pytest.mark.parametrize("text, devices", [
    ("data=8", 8), ("fsdp=8", 8), ("tensor=8,sp=on", 8), ("data=2,fsdp=2,tensor=2,zero=1", 8),
    ("data=4,microbatches=2", 4)])
def test_valid_layouts_pass(text, devices):
    layout = Layout.parse(text)
    assert validate(layout, TINY, TRAIN, devices) is layout


