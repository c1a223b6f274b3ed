"""The train step's FP8 part: which layouts the executor runs an FP8 recipe on, and delayed
scaling's state (amax histories) as train state.

The state lives beside the parameters, {"params", "opt", "fp8"}, replicated on every device as
Transformer Engine keeps its per-rank copies (after its amax all-reduce they are equal): for each
FP8 projection of each block, the histories of x, W and dY (parex.model.transformer
.fp8_state_table), 3 · history · 4 bytes per projection per layer. The step computes the new
histories as the gradient of the old (parex.model.fp8) and stores them in place of the old.
"""

from __future__ import annotations

import jax
from jax.sharding import NamedSharding, PartitionSpec

from ..errors import InputError
from ..model import transformer as gpt
from ..precision import Precision


def refuse_unsupported(precision: Precision, layout, model, microbatches: int) -> None:
    """One line where the executor cannot run `precision` on this layout. Its amaxes must be
    global (the same scale on every shard): XLA reduces them over the axes it partitions
    automatically (data, fsdp, tensor, ZeRO), but not inside parex's manual regions (pipeline
    stages, context parallelism, sequence parallelism's collectives, expert dispatch, the
    per-replica accumulation loop), and delayed scaling's once-per-step history update assumes
    one microbatch. Those layouts are predicted, not executed, in FP8."""
    if not precision.fp8:
        return
    manual = [name for name, on in (
        ("stage", layout.stage > 1), ("seq", layout.seq > 1), ("sp", bool(layout.sp)),
        ("expert", layout.expert > 1), ("microbatches", microbatches > 1),
        ("diloco", bool(layout.diloco)), ("a 3D tensor split", layout.tensor3d))
        if on]
    if model.moe or manual:
        what = "a mixture of experts" if model.moe else ", ".join(manual)
        raise InputError(f"precision {precision.name}: the executor runs FP8 on data, fsdp, "
                         f"tensor and ZeRO layouts of dense models with one microbatch, not "
                         f"with {what}; run it with --precision bf16, or predict it "
                         f"(parex predict --precision {precision.name})")


def init_state(model, precision: Precision):
    """Delayed scaling's histories, all zeros (scale 1 on the first step, as TE starts); None
    for recipes without state."""
    return gpt.fp8_state_table(model, precision.history) if precision.delayed else None


def state_shardings(model, precision: Precision, mesh):
    """Every history replicated."""
    shapes = jax.eval_shape(lambda: init_state(model, precision))
    replicated = NamedSharding(mesh, PartitionSpec())
    return jax.tree.map(lambda _: replicated, shapes)


def state_bytes(model, precision: Precision) -> int:
    """Bytes of the state per device: what the predictor counts (parex.predict.fp8)."""
    shapes = jax.eval_shape(lambda: init_state(model, precision))
    return sum(s.size * s.dtype.itemsize for s in jax.tree.leaves(shapes))
