"""The analytic model: what a layout costs per step on any hardware, in Measurement's units.

    predict(model, train, layout, hardware) -> Prediction          one layout, every term
    predict_batch(model, train, layouts, hardware) -> dict          columns over many layouts

Both run the same formulas (memory.py, flops.py, comm.py, time.py) on numpy columns, one entry
per layout (shapes.Grid), so a planner can rank a hundred thousand layouts in about a second.

`convention` says which program the numbers describe: "xla-cpu" is what parex's step compiles to on
the emulated CPU mesh (all-reduce where a GPU would reduce-scatter, FLOPs as XLA's cost analysis
counts them) and is the default for the calibrated `cpu-local` profile; "gpu" is the ideal program
and the default everywhere else. `recipe` says how many bytes each kind of model state takes
("parex": float32 master weights, gradients and Adam moments; "mixed": ZeRO's 2 + 2 + 12, with
Korthikanti et al.'s activations of Megatron-LM's block) and `dtype` the compute dtype. Defaults
follow the profile: an accelerator predicts what real runs there use (bfloat16 and the mixed
recipe), `cpu-local` parex's own step (the model's dtype, float32 for the presets, and the parex
recipe); pass dtype="float32" / recipe="parex" to ask for those on an accelerator. Those
defaults live in parex.defaults (`assume`), and every Prediction carries the `assumptions` it
was made under (hardware, dtype, recipe, convention, global batch, b, remat, schedule).
"""

from __future__ import annotations

from ..config import ModelConfig, TrainConfig
from ..layout import Layout
from ..record import Prediction
from .comm import CONVENTIONS, Convention
from .core import (EXPERT_IMBALANCE, as_cluster, assumptions_of, checked, columns, predict_batch,
                   predict_synchronous, shared_fields)
from .memory import RECIPES, Recipe
from .shapes import Grid


def predict(model: ModelConfig, train: TrainConfig, layout: Layout, hardware, *,
            convention: str | Convention | None = None, recipe: str | Recipe | None = None,
            dtype: str | None = None, wan=None,
            expert_imbalance: float = EXPERT_IMBALANCE) -> Prediction:
    """Predicted step time, memory, FLOPs and communication of one layout. A layout that is not
    a real program raises LayoutError (parex.validation's rules); a valid one that parex's
    executor cannot run yet is predicted with `executable=False` and the reason; one that does
    not fit in memory is predicted and flagged (`fits`, `over_capacity_bytes`). `convention`,
    `recipe` and `dtype` (the compute dtype) default by profile: on an accelerator "gpu",
    "mixed" and bfloat16; on the calibrated `cpu-local` "xla-cpu", "parex" and the model's own
    dtype. A DiLoCo layout (replica, inner_steps) is one replica's inner step plus the outer
    exchange over `wan` (a hardware.Link, default 1 Gb/s): parex.lowcomm.predict.
    `expert_imbalance`: a mixture of experts' most-loaded expert over the mean (1.0: balanced),
    which sets the ideal program's expert compute (accelerator.expert_slots); stated in the
    Prediction's assumptions."""
    if layout.diloco:
        from ..lowcomm.predict import predict_diloco

        cluster = checked(model, train, layout, hardware, convention, recipe, dtype)[0]
        p = predict_diloco(model, train, layout, cluster, wan=wan, convention=convention,
                           recipe=recipe, dtype=dtype)
        p.assumptions = assumptions_of(model, train, layout, cluster, convention, recipe,
                                       dtype).to_json()  # the whole batch, not one replica's
        return p
    return predict_synchronous(model, train, layout, hardware, convention=convention,
                               recipe=recipe, dtype=dtype, expert_imbalance=expert_imbalance)


__all__ = ["CONVENTIONS", "Convention", "EXPERT_IMBALANCE", "Grid", "RECIPES", "Recipe",
           "as_cluster", "assumptions_of", "columns", "predict", "predict_batch", "shared_fields"]
