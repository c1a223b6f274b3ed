"""Predicted collectives of a 3D tensor layout inside pipeline stages (parex.parallel.pipeline
with X, Y and Z manual axes of its shard_map: ManualAxes), per step on the busiest device, the
last stage, as comm.py's pipeline terms count them. b = B/(m·data·fsdp·Z) rows of T tokens per
microbatch, Ls = the layers the last stage holds (all its chunks), m microbatches:

    t3d-gather-z    each layer's weights gathered over Z·fsdp in F and again in B, per
                    microbatch: 2·Ls·m per weight; the head's table 2·m
    t3d-scatter-z   their gradients reduce-scattered in B, per microbatch: Ls·m per weight, m
    t3d-x, t3d-y, t3d-gather-x, cross-entropy
                    predict.tensor3d's per layer and the head's, per microbatch (the
                    embedding's rows and GPT's positions run on the first stage)
    t3d-grads       after the loop, the blocks' gradients over data (their shards) and over
                    data × Z·fsdp (norms and biases), as without stages, for Ls layers
    t3d-head-grads  after the loop, the embedding's and head's gradients summed over stages
                    (only the first and last virtual stages produce them) and data: the tables'
                    shards over stage × data, the final norm over stage × data × Z·fsdp (one
                    all-reduce when Z·fsdp = 1)
    stage-gather    before the loop, the tables (stored split over stages) gathered, each
                    device's X·Y·Z·fsdp shard of each
    pipeline        the activations and their cotangents between stages, (b, T, D), one send
                    each way per tick (xla-cpu) or per microbatch and chunk (gpu): every device
                    of a 3D group sends its own copy

Under ZB-V the first and last virtual stages sit on one device, which then runs the
embedding's collectives as well. ZeRO-1's gather of the updated parameters is the unstaged
one's over the stage's layers.
"""

from __future__ import annotations

import numpy as np

from ..layout import Axis, Layout
from ..parallel.schedules import SCHEDULES, VEE
from .comm import Convention, Term
from .schedule_stats import table_columns
from .shapes import Grid, ModelSizes
from .tensor3d import DATA, X, Y, ZF, Sizes3D, _grad_terms, _shapes, _zf_axes, layer_weights

STAGE = Axis.STAGE


def terms(sizes: ModelSizes, layout: Layout | Sizes3D, grid: Grid, remat: str,
          conv: Convention, act_bytes: int, param_bytes: float, grad_bytes: float) -> list[Term]:
    """Every collective family of 3D layouts with stage > 1 (module docstring): a Layout, or
    Sizes3D columns; `grid` holds their predict.tensor3d.equivalent (stage, microbatches and
    the schedule included)."""
    n, m, Ls = len(grid), grid.microbatches, grid.stage_layers
    s3 = Sizes3D.of(layout)
    s, on = _shapes(sizes, s3, grid.B // m, grid.T), s3.on()
    a, gpt = act_bytes, sizes.family == "gpt"
    first = np.isin(grid.schedule, [SCHEDULES.index(name) for name in VEE]) * 1.0
    again = Ls if remat == "full" else 0  # blocks whose forward runs again
    weights = layer_weights(s, sizes.n_mlp_in)
    table = s.Vy * s.Dx
    out = []

    def term(name, kind, axes, count, per_op):
        out.append(Term(name, kind, axes, np.broadcast_to(np.asarray(count, float), (n,)),
                        np.broadcast_to(np.asarray(per_op, float), (n,))))

    zf_axes = _zf_axes(s3)
    for per_layer, w in weights.values():
        term("t3d-gather-z", "all-gather", zf_axes, 2 * Ls * m * per_layer * on[ZF], w * a)
        term("t3d-scatter-z", "reduce-scatter", zf_axes, Ls * m * per_layer * on[ZF], w * a)
    term("t3d-gather-z", "all-gather", zf_axes, (2 + first) * m * on[ZF], table * a)
    term("t3d-scatter-z", "reduce-scatter", zf_axes, (1 + first) * m * on[ZF], table * a)

    # per layer: the QKV and MLP inputs' outputs (SwiGLU's two in one op), the transposed
    # layers' input gradients; full remat repeats the first two; the head's logits
    for width in (s.qkv, sizes.n_mlp_in * s.Fy, s.heads, s.Fy):
        term("t3d-x", "all-reduce", (X,), Ls * m * on[X], s.tok * width * a)
    term("t3d-x", "all-reduce", (X,), again * m * on[X],
         s.tok * (s.qkv + sizes.n_mlp_in * s.Fy) * a)
    term("t3d-x", "all-reduce", (X,), m * on[X], s.tok * s.Vy * a)
    exits = (4 * Ls + again + 1 + first) * m  # per layer 4; the head's (and the embedding's)
    term("t3d-y", "all-reduce", (Y,), exits * on[Y], s.tok * s.Dx * a)
    term("t3d-gather-x", "all-gather", (X,), exits * on[X], s.tok * sizes.D * a)
    term("cross-entropy", "all-reduce", (Y,), 3 * m * on[Y], s.tok * 4)
    if gpt:  # the used position rows made whole on the first stage (ZB-V: this device)
        term("t3d-positions", "all-gather", zf_axes, first * m * on[ZF], grid.T * s.Dx * a)
        term("t3d-positions", "all-gather", (X,), first * m * on[X], grid.T * sizes.D * a)

    zf = s3.tensor_z * s3.fsdp
    layer_w = sum(k * w for k, w in weights.values())
    out += _grad_terms(s, Ls, layer_w, 0, zf, zf_axes, on[DATA], a, grad_bytes, n, once=False)
    # the tables' shards (GPT's T_max position rows too) and the final norm over stages
    positions = sizes.T_max * s.Dx if gpt else 0
    shards = (2 * table + positions) * grad_bytes / zf
    alone = (np.asarray(zf) == 1) * 1.0
    final = sizes.head[1] * grad_bytes
    term("t3d-head-grads", "all-reduce", (STAGE, DATA), 1, shards + final * alone)
    term("t3d-head-grads", "all-reduce", (STAGE, DATA) + zf_axes, 1 - alone, final)
    term("stage-gather", "all-gather", (STAGE,), 2, table * param_bytes / zf)
    if gpt:
        term("stage-gather", "all-gather", (STAGE,), 1, positions * param_bytes / zf)
    # one send each way per tick in parex's program (xla-cpu), per microbatch and chunk in
    # the ideal one
    sends = (2 * table_columns(grid)[0] if conv.name == "xla-cpu"
             else 2 * m * grid.virtual_stages)
    term("pipeline", "collective-permute", (STAGE,), sends, s.tok * sizes.D * a)
    zero1 = on[DATA] * (np.asarray(0 if s3.zero is None else s3.zero) >= 1)
    term("zero-gather", "all-gather", (DATA,), zero1,
         (Ls * layer_w + (2 * table + positions) / grid.stage) / zf * grad_bytes)
    return out


__all__ = ["terms"]
