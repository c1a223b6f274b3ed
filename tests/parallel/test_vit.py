"""tiny-vit on 8 emulated devices: its loss and first-step gradients equal the single-device ones
(fp32, relative error 1e-5) under data, fsdp, tensor and pipeline layouts, and it learns its
synthetic images under the local-learning pipeline. Compiles of 8 devices: slow."""

import jax
import numpy as np
import pytest
from parity import Reference

from parex.config import TrainConfig, model_preset
from parex.executor.data import batches_for
from parex.executor.mesh import make_mesh
from parex.executor.step import TrainStep
from parex.layout import Layout

TRAIN = TrainConfig(global_batch=16)


@pytest.fixture(scope="module")
def vit():
    return Reference("tiny-vit", TRAIN)


@pytest.mark.slow  # one compile each, ~1-3 min on 2 shared cores
@pytest.mark.parametrize("text", [
    "data=8",
    "fsdp=4,data=2",
    "tensor=2,data=4",
    "stage=4,data=2,schedule=1f1b,microbatches=4",
    "stage=2,fsdp=2,data=2,schedule=gpipe,microbatches=2"])
def test_tiny_vit_equals_one_device(vit, text):
    vit.check(Layout.parse(text))


@pytest.mark.slow
def test_tiny_vit_learns_under_the_local_pipeline():
    """Every stage learns from its own classifier; the last stage's (the model's) loss falls."""
    model, train = model_preset("tiny-vit"), TrainConfig(global_batch=16, steps=40)
    layout = Layout.parse("data=2,stage=4,schedule=local,microbatches=4")
    step = TrainStep(model, train, layout, make_mesh(layout))
    run, state = step.jitted_step(), step.init_state()
    data = batches_for(model, "corpus", train.global_batch, model.seq_len)
    losses = []
    for i in range(train.steps):
        state, loss = run(state, data.on_mesh(i, step.batch_sharding))
        losses.append(float(jax.device_get(loss)))
    early, late = np.nanmean(losses[1:6]), np.mean(losses[-5:])
    assert np.isfinite(late) and late < 0.7 * early, (early, late)
