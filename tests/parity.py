"""The single-device reference that every layout's loss and first-step gradients must reproduce
(fp32, relative error 1e-5), shared by the parity, context-parallel and pipeline-free test files."""

import jax
import pytest

from parex.model import transformer as gpt
from parex.config import TrainConfig, model_preset
from parex.executor.data import batches_for
from parex.layout import Layout
from parex.measure import relative_error
from parex.executor.mesh import make_mesh
from parex.executor.step import TrainStep, reference_loss_and_grads
from parex.validation import validate

TOLERANCE = 1e-5


class Reference:
    """One model's parameters and batch, its single-device loss and gradients, and `check`."""

    def __init__(self, name, train: TrainConfig):
        """`name`: a preset's name, or a ModelConfig."""
        self.model = model_preset(name) if isinstance(name, str) else name
        self.train = train
        self.params = gpt.init_params(self.model, jax.random.key(0))
        seq = train.seq_len or self.model.seq_len
        self.batch = batches_for(self.model, "corpus", train.global_batch, seq)[0]
        self.cache = {}

    def loss_and_grads(self, train: TrainConfig):
        if train.remat not in self.cache:  # remat changes nothing numerically; one per policy
            self.cache[train.remat] = reference_loss_and_grads(self.model, train, self.params,
                                                               self.batch)
        return self.cache[train.remat]

    def check(self, layout: Layout, train: TrainConfig | None = None):
        """Assert parity for `layout`; return (TrainStep, compiled loss-and-gradients)."""
        train = train or self.train
        validate(layout, self.model, train, layout.n_devices)
        step = TrainStep(self.model, train, layout, make_mesh(layout))
        compiled = step.jitted_loss_and_grads().lower(self.params, self.batch).compile()
        loss, grads = compiled(self.params, self.batch)
        ref_loss, ref_grads = self.loss_and_grads(train)
        assert abs(float(loss) - float(ref_loss)) <= TOLERANCE * abs(float(ref_loss)), layout
        error = relative_error(grads, ref_grads)
        assert error <= TOLERANCE, f"{layout}: gradient relative error {error:.2e}"
        return step, compiled


def reference_fixtures(train: TrainConfig):
    """The module-scoped fixtures `tiny` and `tiny_llama`: each model's Reference under `train`
    (a test module binds them: `tiny, tiny_llama = reference_fixtures(TRAIN)`)."""

    @pytest.fixture(scope="module", name="tiny")
    def tiny():
        return Reference("tiny", train)

    @pytest.fixture(scope="module", name="tiny_llama")
    def tiny_llama():
        return Reference("tiny-llama", train)

    return tiny, tiny_llama
