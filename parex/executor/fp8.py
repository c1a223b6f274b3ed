"""The train step's FP8 part: delayed scaling's state (amax histories) as train state. Which
layouts the executor runs an FP8 recipe on is parex.validation's rule `fp8-global-amax`.

The state lives beside the parameters, {"params", "opt", "fp8"}, replicated on every device as
Transformer Engine keeps its per-rank copies (after its amax all-reduce they are equal): for each
FP8 projection of each block, the histories of x, W and dY (parex.model.transformer
.fp8_state_table), 3 · history · 4 bytes per projection per layer. The step computes the new
histories as the gradient of the old (parex.model.fp8) and stores them in place of the old.
"""

from __future__ import annotations

import jax
from jax.sharding import NamedSharding, PartitionSpec

from ..model import transformer as gpt
from ..precision import Precision


def init_state(model, precision: Precision):
    """Delayed scaling's histories, all zeros (scale 1 on the first step, as TE starts); None
    for recipes without state."""
    return gpt.fp8_state_table(model, precision.history) if precision.delayed else None


def state_shardings(model, precision: Precision, mesh):
    """Every history replicated."""
    shapes = jax.eval_shape(lambda: init_state(model, precision))
    replicated = NamedSharding(mesh, PartitionSpec())
    return jax.tree.map(lambda _: replicated, shapes)

