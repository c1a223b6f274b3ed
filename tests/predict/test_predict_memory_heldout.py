"""Total memory on shapes the memory model was not fitted on, against XLA's memory_analysis of the
compiled step (emulated mesh, convention xla-cpu): a weight-heavy model (8 layers of hidden 512,
16 tokens per sequence: the optimizer update's temporaries set the peak), a long sequence
(tiny's width at 1024 tokens) and the Llama family with GQA. The activation constants were read
off the tiny and small presets; the update and sharded-layer buffer counts (memory.py) were
worked out on the weight-heavy model, not fitted. Each case must land within 10 %. Pipelines are
left out (the pipeline executor's memory is being rewritten)."""

import jax
import pytest

from parex.config import ModelConfig, TrainConfig, model_preset
from parex.layout import Layout
from parex.measure.compiled import compile_layout, memory_stats
from parex.predict import predict

HEAVY = (ModelConfig("heavy", layers=8, hidden=512, heads=8, vocab=256, seq_len=16),
         TrainConfig(global_batch=8))
LONG = (model_preset("tiny").replace(name="tiny-1k", seq_len=1024), TrainConfig(global_batch=8))
LLAMA = (model_preset("tiny-llama"), TrainConfig(global_batch=16))
FAMILY = {"heavy": HEAVY, "long": LONG, "llama": LLAMA}

FAST = [("heavy", "data=8")]
SLOW = [("heavy", "fsdp=8"), ("heavy", "data=2,tensor=4,sp=on"), ("heavy", "data=8,zero=1"),
        ("heavy", "data=8,zero=2"), ("heavy", "tensor=8"), ("heavy", "tensor=8,sp=on"),
        ("heavy", "data=2,tensor=4"), ("heavy", "fsdp=2,tensor=4"),
        ("heavy", "data=4,tensor=2,zero=1"), ("heavy", "single"),
        ("long", "data=8"), ("long", "fsdp=8"), ("long", "tensor=8,sp=on"),
        ("long", "data=2,tensor=4,sp=on"), ("llama", "data=8"), ("llama", "fsdp=8"),
        ("llama", "data=2,tensor=4"), ("llama", "data=2,tensor=4,sp=on")]


def total_ratio(family: str, spec: str) -> float:
    model, train = FAMILY[family]
    layout = Layout.parse(spec, 8)
    _, compiled, _ = compile_layout(model, train, layout, jax.devices()[:layout.n_devices])
    measured = memory_stats(compiled)["total"]
    return predict(model, train, layout, "cpu-local").memory_bytes_per_device["total"] / measured


@pytest.mark.parametrize("family, spec", FAST)
def test_held_out_total_memory_within_ten_percent(family, spec):
    assert abs(total_ratio(family, spec) - 1) <= 0.10


@pytest.mark.slow
@pytest.mark.parametrize("family, spec", SLOW)
def test_held_out_total_memory_within_ten_percent_slow(family, spec):
    assert abs(total_ratio(family, spec) - 1) <= 0.10
