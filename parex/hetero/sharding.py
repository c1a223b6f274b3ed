"""ZeRO between the pipelines of a heterogeneous plan: model state sharded over the pipelines.

Every block lives on one stage of every pipeline; the P pipelines are its data-parallel group.
ZeRO (Rajbhandari et al. 2020, arXiv:1910.02054, Table 1 and §7) shards the model state over
that group by stage, the same stages as `Layout.zero` (layout.ZERO_STAGE_SHARDING):

    stage  held per device, per parameter of its blocks    collectives per block
    0      p + g + o            (a whole replica)          end of step: all-reduce its gradient
    1      p + g + o / P        (optimizer state sharded)  end of step: reduce-scatter the
                                                           gradient, all-gather the updated
                                                           parameters (ZeRO §7: the all-
                                                           reduce's 2Ψ, priced as that)
    3      (p + g + o) / P      (everything sharded)       every microbatch: all-gather the
                                                           parameters before its forward and
                                                           again before its backward, reduce-
                                                           scatter its gradient after (ZeRO
                                                           §7: 3Ψ per pass); none at the end

with p, g, o the recipe's bytes per parameter (mixed: 2 + 2 + 12). Stage 3 also holds, while a
block runs, that block's gathered parameters and its unsharded gradient (p + g per parameter of
one block). Stage 2 (gradients sharded, parameters whole) would reduce-scatter every
microbatch's gradients while keeping a whole copy of the parameters: not modelled, and refused.

HexiScale's runtime (FlashFlex, `--fsdp 1`, the default in llama/arguments.py) wraps every
block in PyTorch FSDP with SHARD_GRAD_OP (hexiscale/wrap_modules.py) and, while a step's
microbatches run, removes FSDP's post-backward hooks so that gradients accumulate unsharded and
parameters stay gathered until the last microbatch (hexiscale/fsdp_hooks_utils.py): during the
step each GPU holds whole 16-bit parameters and gradients and a 1/P shard of the fp32 master
and Adam moments, ZeRO stage 1's footprint and traffic (`HEXISCALE_ZERO`).

The per-microbatch collectives of stage 3 are charged to the stage's forward and backward in
full (no overlap): FlashFlex turns FSDP's backward prefetch off inside pipelines
(wrap_modules.py: `backward_prefetch = None if pp_on`).
"""

from __future__ import annotations

from ..layout import ZERO_STAGE_SHARDING
from .plan import PlanError

STAGES = (0, 1, 3)  # the ZeRO stages a heterogeneous plan may use between its pipelines
HEXISCALE_ZERO = 1  # HexiScale's FSDP as its code runs it (module docstring)


def check_zero(zero: int) -> None:
    if zero not in STAGES:
        raise PlanError(f"zero={zero} between pipelines: use 0 (a replica per pipeline), 1 "
                        f"(optimizer state sharded, HexiScale's FSDP) or 3 (parameters, "
                        f"gradients and optimizer state sharded); stage 2 is not modelled")


def shards(zero: int, kind: str, pipelines: int) -> int:
    """Over how many devices state of `kind` ("param", "grad", "opt") is split by ZeRO."""
    return pipelines if zero >= ZERO_STAGE_SHARDING[kind] else 1


def state_bytes_per_element(rec, zero: int, pipelines: int) -> dict:
    """Bytes per parameter a device keeps of each kind of state ("params", "grads",
    "optimizer", the homogeneous predictor's names), recipe `rec`, over `pipelines`."""
    return {"params": rec.param_bytes / shards(zero, "param", pipelines),
            "grads": rec.grad_bytes / shards(zero, "grad", pipelines),
            "optimizer": rec.optimizer_bytes / shards(zero, "opt", pipelines)}


def per_element(rec, zero: int, pipelines) -> object:
    """Σ of state_bytes_per_element (works on arrays of pipeline counts too: shaped like them)."""
    return sum(state_bytes_per_element(rec, zero, pipelines).values()) + 0 * pipelines


def working_bytes_per_element(rec, zero: int) -> float:
    """Bytes per parameter of the one block being run, beyond the state (stage 3: its gathered
    parameters and its gradient before the reduce-scatter)."""
    return rec.param_bytes + rec.grad_bytes if zero >= 3 else 0.0


def gathers_per_microbatch(rec, zero: int) -> dict:
    """Collectives of one block's state per microbatch, per pass: {pass: [(kind, bytes per
    parameter of the buffer)]}, recipe `rec`."""
    if zero < 3:
        return {"forward": [], "backward": []}
    return {"forward": [("all-gather", rec.param_bytes)],
            "backward": [("all-gather", rec.param_bytes), ("reduce-scatter", rec.grad_bytes)]}


def reduces_at_end(zero: int) -> bool:
    """Whether the gradient is reduced after the last backward (stages 0 and 1)."""
    return zero < 3


__all__ = ["HEXISCALE_ZERO", "STAGES", "check_zero", "gathers_per_microbatch", "per_element",
           "reduces_at_end", "shards", "state_bytes_per_element", "working_bytes_per_element"]
