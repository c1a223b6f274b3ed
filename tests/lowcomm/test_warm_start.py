"""DiLoCo's protocol on the mesh (parex.lowcomm.studies): a warm-up with sync DP, then every run
starts from its parameters on the batches after it; the single worker takes as many steps as
the others on one worker's share."""

import jax
import numpy as np
import pytest

from parex.config import TrainConfig, model_preset
from parex.executor.mesh import make_mesh
from parex.executor.step import TrainStep
from parex.layout import Layout
from parex.lowcomm.studies import StudyRun, loss_study, state_from, warm_up

MODEL = model_preset("tiny")
TRAIN = TrainConfig(global_batch=8, seq_len=32, steps=2, warmup_steps=1)  # a fresh AdamW
# at its peak lr on step 1 jumps: the phase warms up as a new run would


@pytest.fixture(scope="module")
def start():
    return warm_up(MODEL, TRAIN, 2, devices=jax.devices()[:2])


def test_a_state_from_parameters_holds_them_and_a_fresh_optimizer(start):
    layout = Layout(data=2)
    step = TrainStep(MODEL, TRAIN, layout, make_mesh(layout, jax.devices()[:2]))
    state = state_from(step, start)
    back = jax.device_get(step.natural_params(state["params"]))
    for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(start)):
        np.testing.assert_array_equal(a, b)
    fresh = jax.device_get(step.init_state()["opt"])
    for a, b in zip(jax.tree.leaves(jax.device_get(state["opt"])), jax.tree.leaves(fresh)):
        if np.issubdtype(np.asarray(a).dtype, np.floating):  # moments zero, counts zero
            np.testing.assert_array_equal(a, np.zeros_like(a))


def test_every_run_starts_from_the_warm_up_and_trains_on(start):
    runs = [StudyRun("sync DP", Layout(data=2)),
            StudyRun("one worker", Layout(data=1), batch_split=2, first_piece_only=True),
            StudyRun("DiLoCo H=1", Layout(data=1, replica=2, inner_steps=1))]
    frame = loss_study(MODEL, TRAIN, runs, devices=jax.devices()[:2], eval_every=2,
                       eval_batches=1, progress=False, start=start, offset=2)
    first = frame[frame.step == 0]
    assert len(first) == 3 and first.eval_loss.nunique() == 1  # one warm point for all
    last = frame[frame.step == TRAIN.steps].set_index("run")
    assert (last.eval_loss < first.eval_loss.iloc[0]).all()  # each went on learning
    # the single worker: as many steps as the others (one row each), half the batch's tokens
    assert (frame[frame.run == "one worker"].step.max() == TRAIN.steps)
    assert last.loc["one worker", "tokens"] * 2 == last.loc["sync DP", "tokens"]
    assert last.loc["one worker", "cross_replica_bytes"] == 0
