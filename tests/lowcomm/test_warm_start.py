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
from parex.lowcomm.studies import (StudyRun, loss_study, natural_state, schedule_config,
                                   state_from, warm_up)

MODEL = model_preset("tiny")
TRAIN = TrainConfig(global_batch=8, seq_len=32, steps=2, warmup_steps=1)


@pytest.fixture(scope="module")
def start():
    return warm_up(MODEL, TRAIN, 2, devices=jax.devices()[:2])


def test_a_run_resumes_the_warm_up_state_in_its_own_layout(start):
    """Parameters and optimizer state (moments, step count) as the warm-up left them, in a
    pipeline's storage order and back."""
    layout = Layout(stage=2, microbatches=2)
    step = TrainStep(MODEL, schedule_config(TRAIN, 2), layout,
                     make_mesh(layout, jax.devices()[:2]))
    back = natural_state(step, state_from(step, start))
    assert jax.tree.structure(back) == jax.tree.structure(start)
    for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(start)):
        np.testing.assert_array_equal(a, b)
    counts = [x for x in jax.tree.leaves(start) if np.ndim(x) == 0]
    assert counts and all(int(c) == 2 for c in counts)  # the schedule goes on from step 2


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
