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
defaults live in parex.defaults, are applied once by parex.setting.resolve, and every Prediction
carries the Setting it was made under as `assumptions` (hardware, regime, dtype, recipe,
convention, global batch, b, remat, schedule, attention kernel).
"""

from __future__ import annotations

from ..config import ModelConfig, TrainConfig
from ..errors import InputError
from ..layout import Layout
from ..record import Prediction
from ..setting import resolve
from .comm import CONVENTIONS, Convention
from .core import checked, columns, predict_batch, predict_columns, predict_setting, shared_fields
from .memory import RECIPES, Recipe
from .shapes import Grid


def predict(model: ModelConfig, train: TrainConfig, layout: Layout, hardware, *,
            convention: str | Convention | None = None, recipe: str | Recipe | None = None,
            dtype: str | None = None, expert_imbalance: float | None = None,
            stack: str | None = None, overlaps=None) -> Prediction:
    """Predicted step time, memory, FLOPs and communication of one layout. A layout that is not
    a real program raises LayoutError (parex.validation's rules); a valid one that parex's
    executor cannot run yet is predicted with `executable=False` and the reason; one that does
    not fit in memory is predicted and flagged (`fits`, `over_capacity_bytes`). What is not
    given (the train config's None fields, `convention`, `recipe`, `dtype`, the pipeline
    schedule) takes the profile's defaults, resolved once (parex.setting.resolve) and stated in
    the Prediction's `assumptions`: on an accelerator "gpu", "mixed" and bfloat16; on the
    calibrated `cpu-local` "xla-cpu", "parex" and the model's own dtype.
    `expert_imbalance`: a mixture of experts' most-loaded expert over the mean (1.0: balanced),
    which sets the ideal program's expert compute (accelerator.expert_slots). `stack`: the
    framework whose communication overlaps are priced (parex.stacks); `overlaps`: the names
    on, replacing the stack's (predict.overlap)."""
    if layout.diloco:
        raise InputError(f"layout {layout} has DiLoCo replicas: predict it with parex.predict "
                         f"(parex.entry), which adds the outer exchange (parex.lowcomm)")
    return predict_setting(resolve(model, train, layout, hardware, dtype=dtype, recipe=recipe,
                                   convention=convention, expert_imbalance=expert_imbalance,
                                   stack=stack, overlaps=overlaps))


__all__ = ["CONVENTIONS", "Convention", "Grid", "RECIPES", "Recipe", "checked", "columns",
           "predict", "predict_batch", "predict_columns", "predict_setting", "shared_fields"]
