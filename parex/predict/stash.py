"""What a pipeline stage keeps between its ops, in bytes per device: the predictor's mirror of the
executor's buffers (parex.parallel.plan), each a number of slots times the bytes of one value.

    res    a chunk's residuals, F to B: its layers' saved activations (memory.xla_layer_elements;
           under a split backward without the weighted ops' inputs, which the records keep)
    emb    the embedding's residuals (its token ids), on the first virtual stage
    head   the head's and loss's: the final norm's input and output, the float32 logits
    rec    a split backward's records: each weighted op's input, F to W
    dtap   a split backward's tap cotangents: each weighted op's output gradient, B to W
    inbox  activations and cotangents received and not yet read, (b, T, D) each, and a trash slot
Slots are the most values one stage holds at once (schedule_stats.buffer_columns). Every device
allocates every buffer (one program for all stages), so the per-device total is the same on each.

Per token per layer, with h the residual width (D/t under SP, else D), t the tensor size:
    records   4·h + H·Dh/t + F/t           (norm1, QKV, W_o, norm2, MLP input, W_out inputs)
    cotangents 4·h + (H + 2K)·Dh/t + n·F/t  (their outputs; n MLP input matrices)
"""

from __future__ import annotations

import numpy as np

from .schedule_stats import buffer_columns
from .shapes import Grid, ModelSizes

HEAD_PER_TOKEN = 4  # the final norm's (b, T, D) input, output and two statistics' worth


def record_elements(sizes: ModelSizes, grid: Grid) -> np.ndarray:
    """Inputs of a block's weighted ops, per token (module docstring)."""
    t, h = grid.tensor, residual_width(sizes, grid)
    return 4 * h + sizes.H * sizes.Dh / t + sizes.F / t


def cotangent_elements(sizes: ModelSizes, grid: Grid) -> np.ndarray:
    """Outputs of a block's weighted ops, per token (module docstring)."""
    t, h = grid.tensor, residual_width(sizes, grid)
    return 4 * h + (sizes.H + 2 * sizes.K) * sizes.Dh / t + sizes.n_mlp_in * sizes.F / t


def residual_width(sizes: ModelSizes, grid: Grid) -> np.ndarray:
    """The residual stream's elements per token on one device: D, or D/t under SP."""
    return np.where(grid.sp, sizes.D / grid.tensor, sizes.D)


def stash_bytes(sizes: ModelSizes, grid: Grid, layer_elements, act_bytes: int) -> dict:
    """Bytes per device of each buffer, all slots (zeros without a pipeline). `layer_elements`:
    per token, what one layer keeps for its unsplit backward (memory.xla_layer_elements)."""
    slots = buffer_columns(grid)
    tokens, layers = grid.tokens, grid.stage_layers / grid.virtual_stages
    split = np.isin(grid.schedule, _split_codes())
    rec = record_elements(sizes, grid)
    residual = np.where(split, layer_elements - rec, layer_elements)
    per_value = {  # bytes of one value of each buffer
        "res": layers * residual * tokens * act_bytes,
        "emb": 4 * tokens,  # int32 token ids
        "head": tokens * (HEAD_PER_TOKEN * sizes.D * act_bytes + 2 * 4 * sizes.V / grid.tensor),
        "rec": layers * rec * tokens * act_bytes * split,
        "dtap": layers * cotangent_elements(sizes, grid) * tokens * act_bytes * split,
        "inbox": tokens * sizes.D * act_bytes,
    }
    piped = grid.stage > 1
    out = {name: np.where(piped, slots[name] * value, 0.0) for name, value in per_value.items()}
    out["inbox"] = np.where(piped, (slots["inbox"] + 1) * per_value["inbox"], 0.0)
    out["value"] = {name: np.where(piped, v, 0.0) for name, v in per_value.items()}
    return out


def _split_codes():
    from ..parallel.schedules import SCHEDULES, SPLIT

    return [SCHEDULES.index(name) for name in SPLIT]


__all__ = ["cotangent_elements", "record_elements", "stash_bytes"]
