"""Predicted communication: bytes per collective kind, and α-β costs placed on the cluster.

Bytes follow parex.hlo's convention (the full logical buffer: the all-reduced array, the gathered
result, the unscattered input, the array sent). Each `Term` is one family of collectives with its
kind, mesh axes, count per step and bytes per op, as columns over the layouts:

    grad-reduce   gradients over the batch axes (data, fsdp, seq)   all-reduce, or reduce-scatter
                  where gradients are sharded (ZeRO-2/3, fsdp)
    zero-gather   ZeRO-1/2: updated parameters back from their data shards    all-gather
    fsdp-gather   ZeRO-3/fsdp: each layer's weights in forward and backward   all-gather
    tp            Megatron: 2 per block forward (after W_o, W_out), 2 backward, 1 more per block
                  under full remat (the recomputed W_out is dead code), + embedding and head;
                  under SP each becomes an all-gather and a reduce-scatter of the same bytes
    sp-grads      SP: gradients of the D-sized (norm, bias) weights summed over the tensor axis
    sp-positions  SP (xla-cpu): GPT's position-table gradient, T/t rows per tensor shard, gathered
    cross-entropy vocab-parallel loss: 3 all-reduces of (tokens,) float32 (max, sum, target)
    cp            ring: s − 1 hops of K and V per block forward, s − 1 of their gradients back;
                  ulysses: 4 all-to-alls per block forward (q, k, v in, output back), 4 backward;
                  a forward's worth more under full remat (the recomputed forward)
    pipeline      activations forward and cotangents backward between stages; the shared
                  embedding and head gradients summed over stages

Conventions (`Convention`): "gpu" is the ideal program (reduce-scatter where the result is
sharded, gradients reduced once per step). "xla-cpu" is what parex's step compiles to on the CPU:
all-reduce + slice instead of reduce-scatter, gradients reduced inside the microbatch loop, the
pipeline's two ppermutes on every tick, XLA's handling of the D-sharded embedding table (token
ids all-gathered and the lookup's output moved by all-to-all), and fsdp weights gathered once per
microbatch under SP (kept from the forward for the backward).

Costs, per op (bytes S, group g, link bandwidth β·efficiency, latency α): ring all-reduce
2(g−1)/g·S/β + 2(g−1)α, tree latency 2⌈log2 g⌉α when smaller; all-gather, reduce-scatter and
all-to-all (g−1)/g·S/β + (g−1)α; permute S/β + α. Groups spanning nodes run hierarchically:
intra-node first, then inter-node on 1/g_in of the data, each device on its own NIC.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hlo import KINDS
from ..layout import MESH_AXES, Axis
from ..parallel.schedules import SCHEDULES
from .schedule_stats import table_columns
from .shapes import GROUPS, Grid, ModelSizes, named


@dataclass(frozen=True)
class Convention:
    """Which program the prediction describes (see the module docstring)."""

    name: str
    reduce_scatter: bool  # reductions into a sharded result are reduce-scatters
    reduce_per_microbatch: bool  # gradients reduced inside the accumulation loop
    loops_counted_once: bool  # FLOPs as XLA's cost analysis counts them (loop bodies once)
    xla_embedding: bool  # XLA's collectives around the embedding tables (the D-sharded token
    #                       table; GPT's position rows split by SP or CP)
    gather_once_under_sp: bool  # fsdp: weights gathered for SP's manual regions kept for the
    #                              backward (a residual), not gathered again


CONVENTIONS = {
    "gpu": Convention("gpu", True, False, False, False, False),
    "xla-cpu": Convention("xla-cpu", False, True, True, True, True),
}


def convention(name_or_convention) -> Convention:
    return named(CONVENTIONS, name_or_convention, Convention, "convention")


@dataclass(frozen=True)
class Term:
    """One family of collectives over N layouts: per-op bytes and ops per step as columns."""

    name: str
    kind: str  # one of hlo.KINDS
    axes: tuple[Axis, ...]
    count: np.ndarray
    bytes_per_op: np.ndarray

    @property
    def bytes(self) -> np.ndarray:
        return self.count * self.bytes_per_op


def _elements(sizes: ModelSizes, grid: Grid, embed: bool | None = None, layers=None):
    """Parameters per device before any batch-axis sharding (split only by tensor and stage),
    restricted to groups with / without an embed dim or a layers dim when asked."""
    total = np.zeros(len(grid))
    for (e, t, l), n in zip(GROUPS, sizes.groups):
        if n and (embed is None or e == embed) and (layers is None or l == layers):
            total = total + n / ((grid.tensor if t else 1) * (grid.stage if l else 1))
    return total


def terms(sizes: ModelSizes, grid: Grid, remat: str, conv: Convention, act_bytes: int,
          param_bytes: float, grad_bytes: float) -> list[Term]:
    """Every collective family of one step, as columns (count 0 where a layout has none)."""
    n, m, L = len(grid), grid.microbatches, grid.stage_layers
    one = np.ones(n)
    batch_group = grid.dp * grid.seq
    grads_sharded = (grid.fsdp > 1) | ((grid.zero >= 2) & (grid.data > 1))
    # XLA's lookup in a D-sharded table: with tensor = 1 it all-gathers the token ids and moves
    # the lookup's output by all-to-all; with tensor > 1 (fsdp) it gathers the table instead
    # (not inside parex's per-replica accumulation loop, where the table is whole)
    per_replica = ((grid.data > 1) & (grid.fsdp == 1) & (grid.zero < 3) & (grid.sp == 0)
                   & (grid.seq == 1) & (grid.stage == 1) & (m > 1))
    xla_embed = (conv.xla_embedding & grads_sharded & (batch_group > 1) & (grid.tensor == 1)
                 & ~per_replica)
    x_bytes = grid.tokens * sizes.D * act_bytes  # one microbatch's (b, T/s, D) on a device
    out: list[Term] = []

    # gradients over the batch axes
    table = sizes.V * sizes.D / grid.tensor * np.where(grid.stage > 1, 0, 1)
    # GPT's position table: rows beyond the sequence get no gradient, so nothing to reduce
    positions = grid.T * sizes.D if sizes.family == "gpt" else 0.0
    unused = sizes.T_max * sizes.D - positions if sizes.family == "gpt" else 0.0
    unused = np.where(per_replica, 0.0, unused)  # one psum of the whole tree reduces them too
    others = _elements(sizes, grid) - np.where(xla_embed, table, 0) - unused - positions
    reduce = grad_bytes * (others + positions) + 4  # + the loss, summed alongside
    rs = conv.reduce_scatter & grads_sharded
    # once per microbatch inside XLA's accumulation loop (xla-cpu), except where parex's step
    # accumulates per data replica (step.accumulates_per_replica) and in the pipeline
    # executor: both reduce once, after the loop
    per_step = np.where(conv.reduce_per_microbatch & (grid.stage == 1) & ~per_replica, m, 1)
    batch_axes = (Axis.DATA, Axis.FSDP, Axis.SEQ)
    if conv.name == "xla-cpu":
        # XLA reduces over the seq axis and the data axes separately. Over the data axes a
        # device reduces only the position rows it holds (T/s under CP, T/(s·t) under SP);
        # over seq, ring attention's step reduces all of them and Ulysses' none (it gathers
        # the table instead: cp-positions)
        over_seq = grad_bytes * (others + positions * (grid.cp == 1)) + 4
        out.append(Term("grad-reduce", "all-reduce", (Axis.SEQ,), per_step * (grid.seq > 1),
                        over_seq))
        held = positions / (grid.seq * np.where(grid.sp, grid.tensor, 1))
        reduce = grad_bytes * (others + held) + 4
        reductions, batch_axes = per_step * (grid.dp > 1), (Axis.DATA, Axis.FSDP)
    else:
        reductions = per_step * (batch_group > 1)
    out.append(Term("grad-reduce", "all-reduce", batch_axes, reductions * ~rs, reduce))
    out.append(Term("grad-reduce", "reduce-scatter", batch_axes, reductions * rs, reduce))
    ids = 4 * grid.B // m * grid.T
    out.append(Term("embedding-ids", "all-gather", batch_axes, m * xla_embed, ids * one))
    lookups = np.where(grid.fsdp > 1, 2, 1) * m * xla_embed  # forward (fsdp) and backward
    out.append(Term("embedding-lookup", "all-to-all", batch_axes, lookups, x_bytes))

    # ZeRO-1/2 and fsdp parameter gathers
    zero12 = (grid.zero >= 1) & (grid.zero <= 2) & (grid.data > 1)
    gathered = param_bytes * _elements(sizes, grid, embed=True) / grid.fsdp
    out.append(Term("zero-gather", "all-gather", (Axis.DATA,), 1.0 * zero12, gathered))
    fsdp = (grid.fsdp > 1) | ((grid.zero >= 3) & (grid.data > 1))
    layer_w = param_bytes * _elements(sizes, grid, embed=True, layers=True) / L
    sp = grid.sp.astype(bool)
    # forward and backward; under SP (xla-cpu) the backward reuses the forward's gathers
    # unless full remat gathers again for the recomputed forward
    passes = np.where(conv.gather_once_under_sp & sp & (remat != "full"), 1, 2)
    out.append(Term("fsdp-gather", "all-gather", (Axis.DATA, Axis.FSDP), passes * m * L * fsdp,
                    layer_w))
    head_w = param_bytes * _elements(sizes, grid, embed=True, layers=False)
    if conv.xla_embedding and sizes.family == "gpt":  # under SP: only its T/t position rows
        head_w = head_w - param_bytes * sp * sizes.D * (sizes.T_max - grid.T / grid.tensor)
    head_w = head_w - np.where(xla_embed, param_bytes * table, 0)  # the lookup moved instead
    out.append(Term("fsdp-gather", "all-gather", (Axis.DATA, Axis.FSDP), 1.0 * fsdp, head_w))
    table_tp = conv.xla_embedding & fsdp & (grid.tensor > 1) & (grid.sp == 0)
    shard = 4.0 * sizes.V * sizes.D / (grid.tensor * grid.fsdp)
    out.append(Term("embedding-table", "collective-permute", (Axis.FSDP, Axis.TENSOR),
                    2.0 * table_tp, shard))
    out.append(Term("embedding-lookup", "all-gather", (Axis.TENSOR,), m * table_tp, x_bytes))

    out += _tensor_terms(sizes, grid, remat, conv, act_bytes, grad_bytes, x_bytes)
    out += _context_terms(sizes, grid, remat, conv, act_bytes)
    out += _pipeline_terms(sizes, grid, conv, grad_bytes, x_bytes)
    return out


def _tensor_terms(sizes, grid, remat, conv, act_bytes, grad_bytes, x_bytes) -> list[Term]:
    m, L, n = grid.microbatches, grid.stage_layers, len(grid)
    tp, sp = (grid.tensor > 1), grid.sp.astype(bool)
    full = 1 if remat == "full" else 0
    axes = (Axis.TENSOR,)
    # per microbatch: 4 per block (SwiGLU's second input matrix adds one backward), 1 more per
    # block recomputed under full remat, + the embedding and the head. Under a pipeline, the
    # busiest device (the first stage: it holds the embedding) recomputes each chunk's forward
    # whole in each backward op (stage remat: 2 more per block, and the embedding again), and
    # runs neither the head nor the loss. A split backward (ZB-H1's B and W) recomputes the
    # chunk and runs the backward's all-reduces twice.
    piped = (grid.stage > 1) & grid.stage_remat
    backward = 2 + sizes.n_mlp_in - 1
    split = np.where(grid.schedule == SCHEDULES.index("zbh1"), 2, 1)
    per_block = np.where(piped, 2 + split * (2 + backward), 2 + backward + full)
    n_ar = per_block * L + 2
    out = [Term("tp", "all-reduce", axes, m * n_ar * (tp & ~sp), x_bytes)]
    # + the embedding's output (reduce-scatter; backward all-gather) and the head's input
    # (all-gather; backward reduce-scatter)
    n_ag = (4 + 2 * full) * L + 2
    n_rs = (4 + full) * L + 2
    out.append(Term("sp", "all-gather", axes, m * n_ag * sp, x_bytes))
    out.append(Term("sp", "reduce-scatter", axes, m * n_rs * sp, x_bytes))
    hidden = grad_bytes * sizes.hidden_params / np.where(grid.stage > 1, grid.stage, 1)
    out.append(Term("sp-grads", "all-reduce", axes, m * sp, hidden * np.ones(n)))
    if conv.xla_embedding and sizes.family == "gpt":  # each shard's position gradient: T/t rows
        table = grad_bytes * sizes.T_max * sizes.D / grid.embed_shards("grad")
        out.append(Term("sp-positions", "all-gather", axes, 1.0 * sp, table))
    ce = 3 * m * tp * (grid.stage == 1)
    out.append(Term("cross-entropy", "all-reduce", axes, ce, 4.0 * grid.tokens))
    return out


def _context_terms(sizes, grid, remat, conv, act_bytes) -> list[Term]:
    s, m, L = grid.seq, grid.microbatches, grid.stage_layers
    passes = 3 if remat == "full" else 2  # forward, backward, and the recomputed forward
    kv = 2 * grid.tokens * sizes.K * sizes.Dh / grid.tensor * act_bytes
    ring = (grid.cp == 1) & (s > 1)
    hops = passes * (s - 1) * L * m * ring
    out = [Term("cp-ring", "collective-permute", (Axis.SEQ,), hops, kv)]
    ulysses = (grid.cp == 2) & (s > 1)
    qkvo = grid.tokens * (2 * sizes.H + 2 * sizes.K) * sizes.Dh / grid.tensor * act_bytes / 4
    out.append(Term("cp-ulysses", "all-to-all", (Axis.SEQ,), 4 * passes * L * m * ulysses,
                    qkvo))
    if conv.xla_embedding and sizes.family == "gpt":  # XLA gathers GPT's position table
        table = 4.0 * sizes.T_max * sizes.D * np.ones(len(grid))
        out.append(Term("cp-positions", "all-gather", (Axis.SEQ,), 1.0 * ulysses, table))
    return out


def _pipeline_terms(sizes, grid, conv, grad_bytes, x_bytes) -> list[Term]:
    piped = grid.stage > 1
    sends = 2 * grid.microbatches * grid.virtual_stages
    if conv.name == "xla-cpu":
        sends = 2 * table_columns(grid)[0]  # one send each way per tick
    out = [Term("pipeline", "collective-permute", (Axis.STAGE,), sends * piped, x_bytes)]
    # the stage-shared embedding and head: summed over stages (merged into the gradient
    # reduction when there is a batch axis too)
    shared = grad_bytes * _elements(sizes, grid, layers=False)
    alone = piped & (grid.dp * grid.seq == 1)
    out.append(Term("pipeline-shared", "all-reduce", (Axis.STAGE,), 1.0 * alone, shared))
    return out


def bytes_by_kind(all_terms: list[Term], n: int) -> dict[str, np.ndarray]:
    totals = {kind: np.zeros(n) for kind in KINDS}
    for term in all_terms:
        totals[term.kind] = totals[term.kind] + term.bytes
    return totals


# --- α-β costs -----------------------------------------------------------------------------------

def group_shape(grid: Grid, axes: tuple[Axis, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(group size, device stride of its innermost non-trivial axis). The mesh orders axes
    stage, data, fsdp, seq, tensor, tensor innermost, so tensor groups sit inside a node."""
    g = np.ones(len(grid), dtype=np.int64)
    stride = np.ones(len(grid), dtype=np.int64)
    found = np.zeros(len(grid), dtype=bool)
    for axis in reversed(MESH_AXES):  # innermost first
        size = getattr(grid, axis.value)
        if axis in axes:
            g = g * size
            found = found | (size > 1)
        stride = np.where(found, stride, stride * size)
    return g, stride


def _ring(kind: str, g, S, bandwidth, latency):
    """One level of a collective: bandwidth term and latency term."""
    g = np.maximum(g, 1)
    frac = (g - 1) / g
    if kind == "all-reduce":
        steps = np.minimum(2 * (g - 1), 2 * np.ceil(np.log2(g)))
        return 2 * frac * S / bandwidth + steps * latency
    if kind == "collective-permute":
        return np.where(g > 1, S / bandwidth + latency, 0.0)
    return frac * S / bandwidth + (g - 1) * latency


def collective_seconds(kind, g, stride, S, chip) -> np.ndarray:
    """Seconds of one collective on a GPU/TPU-style cluster, intra-node level first."""
    eff = chip.network_efficiency
    inside = np.clip(chip.scaleup_domain // np.maximum(stride, 1), 1, None)
    g_in = np.minimum(g, inside)
    g_out = np.maximum(g // g_in, 1)
    intra, inter = chip.intra_node, chip.inter_node
    t = _ring(kind, g_in, S, intra.bandwidth * eff, intra.latency)
    return t + np.where(g_out > 1, _ring(kind, g_out, S / g_in, inter.bandwidth * eff,
                                         inter.latency), 0.0)


def calibrated_seconds(kind, g, S, calibration) -> np.ndarray:
    """Seconds of one collective on the emulated mesh: α + β·S measured by `parex calibrate`
    for the closest group size."""
    table = calibration.collectives.get(kind)
    if not table:  # never cost a collective at 0 s
        raise ValueError(f"the calibration has no {kind} timings: run `parex calibrate`")
    groups = sorted(int(k) for k in table)
    out = np.zeros(np.broadcast(g, S).shape)
    for i, size in enumerate(groups):
        lo = 0 if i == 0 else (groups[i - 1] + size) / 2
        hi = np.inf if i == len(groups) - 1 else (size + groups[i + 1]) / 2
        fit = table[str(size)]
        out = np.where((g > lo) & (g <= hi), fit["alpha"] + fit["beta"] * S, out)
    return np.where(g > 1, out, 0.0)


def term_seconds(term: Term, grid: Grid, chip) -> np.ndarray:
    """Seconds all ops of a term take per step on this chip's cluster."""
    g, stride = group_shape(grid, term.axes)
    if chip.calibration is not None:
        per_op = calibrated_seconds(term.kind, g, term.bytes_per_op, chip.calibration)
    else:
        per_op = collective_seconds(term.kind, g, stride, term.bytes_per_op, chip)
    return term.count * per_op


__all__ = ["CONVENTIONS", "Convention", "Term", "bytes_by_kind", "collective_seconds",
           "convention", "group_shape", "term_seconds", "terms"]
