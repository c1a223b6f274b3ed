"""Many 3D tensor layouts (`tensor=XxYxZ` beside data) predicted at once, for the planner:

    configurations(model, train, n_devices) -> Sizes3D     every (data, X, Y, Z) that runs
    predict_3d_batch(model, train, sizes, hardware) -> dict columns as predict_batch's

The same formulas as one layout's predict() (parex.predict.core.columns over the equivalent 1D
grid, predict.tensor3d's collectives over the layouts' own X, Y and Z), one microbatch each (the
3D executor's outside a pipeline) or inside pipeline stages, so that a row's numbers are what
`parex predict` gives for its layout. Under the
gpu convention the columns also hold the seconds AxoNN's overlaps hide (predict.tensor3d.overlaps:
hidden_dx_y_beside_dw_s, hidden_scatter_z_deferred_s, hidden_gather_z_prefetched_s).
"""

from __future__ import annotations

import numpy as np

from ..config import ModelConfig, TrainConfig
from . import axonn
from ..setting import Setting, resolve
from .core import columns
from .shapes import Grid
from .tensor3d import Sizes3D, equivalent_columns


def configurations(model: ModelConfig, train: TrainConfig, n_devices: int) -> Sizes3D:
    """Every (data, X, Y, Z) with product n_devices, Y or Z above 1, that parex.validation's
    3D rules accept: Y divides the KV heads, MLP width and vocabulary, X·Z the hidden size,
    data·Z the global batch."""
    rows = axonn.configurations(model, n_devices)
    data, X, Y, Z = rows.T if len(rows) else np.zeros((4, 0), np.int64)
    keep = ((Y > 1) | (Z > 1)) & (train.global_batch % (data * Z) == 0)
    return Sizes3D(data[keep], np.ones(int(keep.sum()), np.int64), X[keep], Y[keep], Z[keep])


def predict_3d_batch(model: ModelConfig, train: TrainConfig, sizes: Sizes3D, hardware, *,
                     pipeline: dict | None = None, convention=None, recipe=None,
                     dtype=None) -> dict[str, np.ndarray]:
    """Columns (Prediction.to_row names, as predict_batch's) of the 3D layouts in `sizes`;
    `pipeline`: their Grid columns stage, schedule, virtual_stages and microbatches when all
    run inside pipeline stages (predict.tensor3d_stages), else one microbatch each. The
    setting is resolved as predict()'s (parex.setting.resolve)."""
    stage = 1 if pipeline is None else pipeline["stage"]
    n = int((sizes.data * sizes.tensor * sizes.tensor_y * sizes.tensor_z * stage).max(initial=1))
    setting = resolve(model, train, None, hardware, n_devices=n, dtype=dtype, recipe=recipe,
                      convention=convention)
    return columns_3d(setting, sizes, pipeline)


def columns_3d(setting: Setting, sizes: Sizes3D, pipeline: dict | None = None
               ) -> dict[str, np.ndarray]:
    """predict_3d_batch under a resolved setting."""
    grid = Grid.from_columns(setting.train, setting.model, **(pipeline or {"microbatches": 1}),
                             **equivalent_columns(sizes))
    cols, _ = columns(setting, grid, layout3d=sizes)
    cols["step_time_s"] = cols.pop("step_total_s")
    cols["valid"] = np.ones(len(grid), bool)
    cols["executable"] = np.ones(len(grid), bool)  # what configurations() gives runs
    return cols


__all__ = ["columns_3d", "configurations", "predict_3d_batch"]
