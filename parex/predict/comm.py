"""Predicted communication: the collectives of a step, as bytes per kind.

Bytes follow parex.measure.hlo's convention (the full logical buffer: the all-reduced array, the gathered
result, the unscattered input, the array sent). Each `Term` is one family of collectives with its
kind, mesh axes, count per step and bytes per op, as columns over the layouts:

    grad-reduce   gradients over the batch axes (data, fsdp, expert, seq)   all-reduce, or
                  reduce-scatter where gradients are sharded (ZeRO-2/3, fsdp); a mixture of
                  experts' routed experts over data × fsdp (× seq) only: each lives on one
                  device of the expert axis (xla-cpu: reduce-scattered over the axes that shard
                  them, fsdp, then the shard over data; with expert and sharded gradients XLA
                  sums the matmul weights over data × fsdp, then their shard over expert)
                  (xla-cpu, fsdp inside pipeline stages: each backward op reduce-scatters its
                  chunk's gradients over fsdp, parallel.fsdp_stage; the rest is summed after)
                  (xla-cpu, sharded gradients: the global norm's partial sums, a float per leaf)
    zero-gather   ZeRO-1/2: updated parameters back from their shards          all-gather
                  (every parameter in the ideal program; xla-cpu: those layout.STATE_DIMS split)
    seq-embedding xla-cpu, seq inside pipeline stages: per microbatch the embedding's backward
                  gathers its token ids and output cotangent over seq (ring: the zig-zag
                  position rows' cotangent too), as the tables are whole on every seq device
    seq-head      the same: per microbatch the last virtual stage's loss and head gradients
                  all-reduced over seq (reported where that stage moves more, or under ZB-V)
    stage-regroup xla-cpu, uneven pipeline chunks: the step's gather of the padded chunks (an
                  all-reduce over stage) and its gradients' way back (a permute)
    seq-grads     xla-cpu, ring attention: the blocks' weight gradients, held split over seq
                  in the backward (each slice reduced over data), gathered for the update
    fsdp-gather   ZeRO-3/fsdp: each layer's weights in forward and backward   all-gather
                  (the ideal program: each layer's flat buffer, every parameter; xla-cpu: the
                  matrices by layer, the norms' scales and D-sized biases whole once a step)
                  (the projections' in FP8, 1 byte, under tensor-scaled FP8 recipes: predict.fp8)
    fp8-amax      FP8 recipes: one float32 amax per FP8 tensor, all-reduced (TE's delayed
                  scaling on a GPU: one buffer per microbatch)
    tp            Megatron: 2 per block forward (after W_o, W_out), 2 backward, 1 more per block
                  under full remat (the recomputed W_out is dead code; 2 in Megatron-LM's block,
                  Convention.megatron_block), + embedding and head; under SP each becomes an
                  all-gather and a reduce-scatter of the same bytes
    tp-beside-wgrad  the 2 backward ones per block (SP: reduce-scatters) where the program runs
                  them beside the weight-gradient GEMMs (Convention.overlaps_tp_backward)
    sp-chunked    SP under a chunked TP overlap (Convention.overlaps_tp_comm, async_tp): each
    sp-chunked-rs block's forward all-gathers and reduce-scatters, the backward's gathers of the
                  row-parallel output gradients and a recomputed forward's, split into chunks
                  behind their GEMMs (predict.overlap); the rest stay in sp
    sp-regather   SP: the backward's all-gathers of the column-parallel inputs (2 per block and
                  the head's), which SP saves sequence-split; Megatron overlaps them with the
                  input-gradient matmuls
    sp-grads      SP: gradients of the D-sized (norm, bias) weights summed over the tensor axis
                  (xla-cpu, with seq: over seq and tensor at once)
    sp-positions  SP (xla-cpu): GPT's position-table gradient, T/t rows per tensor shard, gathered
                  (with seq: ring all-reduces it over seq and tensor at once; Ulysses gathers
                  the table over both instead of cp-positions)
    cross-entropy vocab-parallel loss: 3 all-reduces of (tokens,) float32 (max, sum, target)
    cp            ring: s − 1 hops of K and of V per block forward; the backward re-runs the ring
                  with (K, V, dK, dV), s permutes of 4(s − 1) float32 blocks in all; a forward
                  more under either remat (the attention is recomputed); xla-cpu, inside
                  pipeline stages: each hop an all-to-all of s copies, and a forward more
                  (the same one as a remat's);
                  ulysses: 4 all-to-alls per block forward (q, k, v in, output back), 4 backward;
                  a forward's worth more under full remat (the recomputed forward)
    pipeline      activations forward and cotangents backward between stages; the shared
                  embedding and head gradients summed over stages
    tied-embedding tied tables: the first and last stages' gradients of the token table summed
                  over stage (Megatron-LM); xla-cpu: the output layer's share reduced apart
    moe-dispatch  a mixture of experts under expert parallelism: the dispatch buffer
                  x_e[E, b, C, D] to the experts' devices and back (all-to-all over expert), 2
                  per block forward, their 2 transposes backward, 2 more under full remat;
                  b·E·C·D elements per op in parex's padded program, b·k·T·D in the ideal
                  ragged one (`dispatch_slots`); with tensor parallelism the experts' split F_e
                  all-reduces the buffer (tp: 1 forward, 1 per input matrix backward)

Conventions (`Convention`): "gpu" is the ideal program (reduce-scatter where the result is
sharded, gradients reduced once per step). "xla-cpu" is what parex's step compiles to on the CPU:
all-reduce + slice instead of reduce-scatter, gradients reduced inside the microbatch loop, the
pipeline's two ppermutes on every tick, XLA's handling of the D-sharded embedding table (token
ids all-gathered and the lookup's output moved by all-to-all), and SP's backward re-gathers merged
with a gather of the same input in the same region (the head's, used at once by its backward; the
recomputed forward's under full remat). Under SP with fsdp or ZeRO-3 the weights of SP's manual
regions are gathered inside them and their gradients leave by explicit reduce-scatters on both.

Their seconds on a cluster: parex.predict.alpha_beta.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..layout import CP_MODES, Axis, fsdp_by_hand, grads_split_over_seq
from ..precision import PRECISIONS, Precision
from . import fp8
from ..record import KINDS
from ..parallel.schedules import SCHEDULES, SPLIT, VEE
from .schedule_stats import table_columns
from .shapes import GROUPS, ROUTED_GROUPS, Grid, ModelSizes, named


@dataclass(frozen=True)
class Convention:
    """Which program the prediction describes (see the module docstring)."""

    name: str
    reduce_scatter: bool  # reductions into a sharded result are reduce-scatters
    reduce_per_microbatch: bool  # gradients reduced inside the accumulation loop
    loops_counted_once: bool  # FLOPs as XLA's cost analysis counts them (loop bodies once)
    xla_embedding: bool  # XLA's collectives around the embedding tables (the D-sharded token
    #                       table; GPT's position rows split by SP or CP)
    merges_sp_regathers: bool  # SP's backward re-gather of an input merged with a gather of
    #                             the same input in the same region (the head's; full remat's)
    overlaps_grad_reduce: bool = True  # gradient reductions overlap the backward (PyTorch DDP's
    #   buckets); False: they run after it (Megatron-LM's local DDP, DeepSpeed's pipeline engine)
    megatron_block: bool = False  # full remat repeats the whole block, its last all-reduce (or
    #   SP's reduce-scatter) included (Megatron-LM's checkpointed layers; XLA drops it as dead
    #   code); set by predict.columns with the recipe whose compute counts that block
    overlaps_tp_backward: bool = False  # the column-parallel layers' input-gradient all-reduce
    #   (SP: reduce-scatter) runs beside their weight-gradient GEMM (Megatron-LM from September
    #   2021: mpu/layers.py LinearWithGradAccumulationAndAsync*, async_op=True; on by default)
    overlaps_tp_comm: bool = False  # SP's all-gathers and reduce-scatters chunked behind their
    #   GEMMs (Transformer Engine's userbuffers, Megatron-Core --tp-comm-overlap): predict.overlap
    async_tp: bool = False  # the same by PyTorch's micro-pipelined TP (torchtitan's async TP)
    overlaps_param_gather: bool = False  # ZeRO-1/2's parameter all-gather in buckets behind
    #   the next step's forward (Megatron-Core --overlap-param-gather)
    overlaps_moe_a2a: bool = False  # a mixture's expert-parallel all-to-alls (the dispatch
    #   family) beside another microbatch's compute (Megatron-Core
    #   --overlap-moe-expert-parallel-comm, Megatron-Bridge's moe_a2a_overlap): predict.overlap
    dispatch_per_node: bool = False  # a mixture's dispatch and combine send a token once per
    #   remote node and forward it there over NVLink (DeepEP, HybridEP: Megatron-Core's flex
    #   dispatcher, --moe-token-dispatcher-type flex): collectives.per_node_share
    bucket_params: float = 0.0  # gradient / parameter bucket size in parameters (parex.stacks:
    #   Megatron-Core's); 0: one bucket per layer, behind the whole step's backward
    axonn_overlaps: bool = False  # 3D tensor layouts: AxoNN's three overlaps, each hiding
    #   min(collective, the compute behind it) (predict.tensor3d.overlaps); False: their
    #   collectives are timed as the 1D families they resemble (tensor3d.TIME_FAMILY)


CONVENTIONS = {
    "gpu": Convention("gpu", True, False, False, False, False, axonn_overlaps=True),
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
    routing: tuple[int, int] | None = None  # (E, k): a mixture's dispatch sent once per remote
    #   node (Convention.dispatch_per_node; priced by collectives.per_node_share)

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


def _vector_elements(sizes: ModelSizes, grid: Grid, layers=None) -> np.ndarray:
    """The norms' scales and D-sized biases per device before any batch-axis sharding (their D
    is split like an embed dim, layout.STATE_DIMS), those stacked over layers or not when asked."""
    stacked, unstacked = sizes.vectors
    return (stacked / grid.stage * (layers is not False)
            + unstacked * (layers is not True) * np.ones(len(grid)))


def _partitioned_elements(sizes: ModelSizes, grid: Grid, layers=None) -> np.ndarray:
    """Parameters whose state the batch axes partition, before that split: in parex's step the
    weights with an embed dim and the vectors; in the ideal program every parameter, as ZeRO's
    and FSDP's flat buffers hold them (Rajbhandari et al. 2020, §5)."""
    split = _elements(sizes, grid, embed=True, layers=layers) + _vector_elements(sizes, grid,
                                                                               layers)
    return np.where(grid.executor, split, _elements(sizes, grid, layers=layers))


def routed_elements(sizes: ModelSizes, grid: Grid, embed: bool | None = None) -> np.ndarray:
    """A mixture of experts' routed-expert parameters per device before any batch-axis sharding:
    E/EP experts of each of the stage's layers, F_e split over ETP (tensor, or 1 folded; 0 for
    a dense model); only those with / without an expert_embed dim when asked."""
    total = np.zeros(len(grid))
    for (e, t), n in zip(ROUTED_GROUPS, sizes.routed):
        if n and (embed is None or e == embed):
            total = total + n / ((grid.expert_tensor if t else 1) * grid.stage * grid.ep)
    return total


def terms(sizes: ModelSizes, grid: Grid, remat: str, conv: Convention, act_bytes: int,
          param_bytes: float, grad_bytes: float, precision=None) -> list[Term]:
    """Every collective family of one step, as columns (count 0 where a layout has none), in
    this order: the gradient reduction, the parameter gathers, tensor, context and pipeline
    parallelism's. Each family states the ideal program's terms first; what parex's compiled
    program does instead (xla-cpu) is a correction in a function of its own."""
    step = _Step(sizes, grid, remat, conv, act_bytes, param_bytes, grad_bytes,
                 precision or PRECISIONS["fp32"])
    return (_grad_reduce_terms(step) + _gather_terms(step) + _tied_table_terms(step)
            + _fp8_terms(step)
            + _tensor_terms(sizes, grid, remat, conv, act_bytes, grad_bytes, step.x_bytes)
            + moe_terms(step)
            + _context_terms(sizes, grid, remat, conv, act_bytes)
            + _pipeline_terms(sizes, grid, conv, param_bytes, grad_bytes, step.x_bytes))


@dataclass(frozen=True)
class _Step:
    """One call's arguments and the quantities several families read."""

    sizes: ModelSizes
    grid: Grid
    remat: str
    conv: Convention
    act_bytes: int
    param_bytes: float
    grad_bytes: float
    precision: Precision  # FP8 recipes gather their projections' weights in FP8 (predict.fp8)

    @property
    def x_bytes(self) -> np.ndarray:
        """One microbatch's activation (b, T/s, D) on a device."""
        return self.grid.tokens * self.sizes.D * self.act_bytes

    @property
    def grads_sharded(self) -> np.ndarray:
        return self.grid.grads_sharded

    @property
    def scatters_grads(self) -> np.ndarray:
        """Where the ideal program reduce-scatters the gradients: sharded ones, and ZeRO-1's,
        whose optimizer updates only its shard (Megatron-Core's distributed optimizer,
        DeepSpeed's stage 1 `reduce_scatter`); the updated shards come back by zero-gather."""
        grid = self.grid
        return self.conv.reduce_scatter & (self.grads_sharded
                                           | ((grid.zero >= 1) & (grid.zero_group() > 1)))

    @property
    def per_replica(self) -> np.ndarray:
        """Where parex's step accumulates per data replica (step.accumulates_per_replica): the
        tables are whole inside its loop, and one psum of the whole tree reduces after it."""
        grid = self.grid
        return ((grid.data > 1) & (grid.fsdp == 1) & (grid.zero < 3) & (grid.sp == 0)
                & (grid.seq == 1) & (grid.stage == 1) & (grid.microbatches > 1)
                & (grid.expert == 1))

    @property
    def fsdp_piped(self) -> np.ndarray:
        """xla-cpu, fsdp by hand inside pipeline stages (`_fsdp_in_stages`)."""
        return (self.conv.name == "xla-cpu") & fsdp_in_stages(self.grid)

    @property
    def xla_embed(self) -> np.ndarray:
        """XLA's lookup in a D-sharded table: with tensor = 1 it all-gathers the token ids and
        moves the lookup's output by all-to-all; with tensor > 1 (fsdp) it gathers the table
        instead (not inside parex's per-replica accumulation loop, where the table is whole)."""
        grid = self.grid
        return (self.conv.xla_embedding & self.grads_sharded & (grid.dp * grid.seq > 1)
                & (grid.tensor == 1) & ~self.per_replica & ~self.fsdp_piped
                & (grid.expert == 1))  # with expert: the table is gathered (fsdp=2,expert=4)

    @property
    def table(self) -> np.ndarray:
        """The token table's elements on a device (none reduced in a pipeline: pipeline-shared)."""
        sizes = self.sizes
        return sizes.V * sizes.D / self.grid.tensor * np.where(self.grid.stage > 1, 0, 1)

    @property
    def positions(self):
        """GPT's position-table rows the sequence reads (T·D); rows beyond the sequence get no
        gradient, so nothing to reduce."""
        return self.grid.T * self.sizes.D if self.sizes.family == "gpt" else 0.0

    @property
    def others(self) -> np.ndarray:
        """Gradient elements reduced over the batch axes but the position table's: all but the
        token table where its lookup moved instead (`xla_embed`) and the unused position rows
        (which the per-replica step's one psum of the whole tree reduces too)."""
        sizes, positions = self.sizes, self.positions
        unused = sizes.T_max * sizes.D - positions if sizes.family == "gpt" else 0.0
        unused = np.where(self.per_replica, 0.0, unused)
        return (_elements(sizes, self.grid) - np.where(self.xla_embed, self.table, 0) - unused
                - positions)

    @property
    def per_step(self) -> np.ndarray:
        """Gradient reductions per step: once per microbatch inside XLA's accumulation loop
        (xla-cpu), except where parex's step accumulates per data replica and in the pipeline
        executor: both reduce once, after the loop."""
        grid = self.grid
        return np.where(self.conv.reduce_per_microbatch & (grid.stage == 1) & ~self.per_replica,
                        grid.microbatches, 1)


@dataclass(frozen=True)
class _Reduction:
    """The gradient reduction over the batch axes: per step, bytes each, over which axes."""

    count: np.ndarray
    bytes: np.ndarray
    axes: tuple[Axis, ...]


def _grad_reduce_terms(step: _Step) -> list[Term]:
    """Gradients over the batch axes: all-reduces, or reduce-scatters where the convention forms
    them and gradients are sharded (ZeRO-2/3, fsdp); then fsdp by hand inside pipeline stages
    and XLA's embedding lookup, both xla-cpu only (count 0 otherwise)."""
    if step.conv.name == "xla-cpu":
        out, reduction = _xla_cpu_grad_reduce(step)
    else:
        out, reduction = [], _ideal_grad_reduce(step)
    count = reduction.count * ~step.fsdp_piped  # their own terms: _fsdp_in_stages
    rs = step.scatters_grads
    out.append(Term("grad-reduce", "all-reduce", reduction.axes, count * ~rs, reduction.bytes))
    out.append(Term("grad-reduce", "reduce-scatter", reduction.axes, count * rs,
                    reduction.bytes))
    out += _fsdp_in_stages(step.sizes, step.grid, step.grad_bytes, step.fsdp_piped)
    return (out + _embedding_lookup_terms(step, reduction.axes) + _routed_grad_terms(step)
            + _norm_partial_terms(step))


def _norm_partial_terms(step: _Step) -> list[Term]:
    """xla-cpu, gradients sharded over the batch axes (fsdp, ZeRO-2/3): the clipping's global
    norm sums each sharded leaf's squares on its shard, then all-reduces one float32 per leaf
    (XLA fuses them into other reductions; tiny fsdp=8: 15 leaves, 60 bytes; tiny-llama: 10;
    fsdp by hand in a pipeline too: tiny fsdp=2,tensor=2,stage=2)."""
    grid = step.grid
    on = step.conv.name == "xla-cpu" and step.sizes.split_leaves > 0
    count = 1.0 * (on & step.grads_sharded) * np.ones(len(grid))
    return [Term("grad-reduce", "all-reduce", (Axis.DATA, Axis.FSDP), count,
                 4.0 * step.sizes.split_leaves * np.ones(len(grid)))]


def _ideal_grad_reduce(step: _Step) -> _Reduction:
    """The ideal program: every gradient (a mixture of experts' routed experts apart:
    `_routed_grad_terms`), and the loss summed alongside (4 bytes), reduced once per step over
    all the batch axes (data, fsdp, expert, seq) at once."""
    grid = step.grid
    return _Reduction(step.per_step * (grid.dp * grid.seq > 1),
                      step.grad_bytes * (step.others + step.positions) + 4,
                      (Axis.DATA, Axis.FSDP, Axis.EXPERT, Axis.SEQ))


def _routed_grad_terms(step: _Step) -> list[Term]:
    """A mixture of experts' routed experts: each lives on one device of the expert axis, so
    its gradient is summed over data × fsdp (× seq) only, never over expert. xla-cpu: the
    experts run in a manual region that gathers their weights over the axes that shard them
    (fsdp, and data under ZeRO-3: sharding.gather_weight), so the gradient leaves
    reduce-scattered over those and its shard is all-reduced over the other replicas (data,
    seq); with neither, shard_map's transpose all-reduces it over data."""
    sizes, grid = step.sizes, step.grid
    if not sizes.moe:
        return []
    routed = step.grad_bytes * routed_elements(sizes, grid)
    if step.conv.name == "xla-cpu":
        zero3 = grid.zero >= 3
        split = grid.fsdp * np.where(zero3, grid.data, 1)
        rest = np.where(zero3, 1, grid.data) * grid.seq
        return [Term("grad-reduce", "reduce-scatter", (Axis.DATA, Axis.FSDP),
                     step.per_step * (split > 1), routed),
                Term("grad-reduce", "all-reduce", (Axis.DATA, Axis.SEQ),
                     step.per_step * (rest > 1), routed / split)]
    on = step.per_step * (grid.data * grid.fsdp * grid.seq > 1)
    rs = step.scatters_grads
    axes = (Axis.DATA, Axis.FSDP, Axis.SEQ)
    return [Term("grad-reduce", "all-reduce", axes, on * ~rs, routed),
            Term("grad-reduce", "reduce-scatter", axes, on * rs, routed)]


def _staged_over_expert(step: _Step) -> list[Term]:
    """xla-cpu, gradients sharded (fsdp, or ZeRO-2/3 over data) and expert > 1: XLA reduces the
    matmul weights' gradients (the blocks' embed-dim matrices and the unembedding) over data ×
    fsdp whole, then their shard over expert (the token table, norms and the loss go over all
    the axes at once). Read off tiny-moe fsdp=2,expert=4, data=2,fsdp=2,expert=2 and
    data=2,expert=4 under ZeRO-2 and ZeRO-3."""
    sizes, grid = step.sizes, step.grid
    staged = (step.grads_sharded & (grid.expert > 1) & (grid.sp == 0) & (grid.stage == 1)
              & ~step.fsdp_piped)
    matrices = step.grad_bytes * (_elements(sizes, grid, embed=True, layers=True)
                                  + sizes.head[0] / grid.tensor) * staged
    return [Term("grad-reduce", "all-reduce", (Axis.DATA, Axis.FSDP), step.per_step * staged,
                 matrices),
            Term("grad-reduce", "all-reduce", (Axis.EXPERT,), step.per_step * staged,
                 matrices / grid.embed_shards("grad"))]


def _xla_cpu_grad_reduce(step: _Step) -> tuple[list[Term], _Reduction]:
    """parex's program (xla-cpu): XLA reduces over the seq axis (`_over_seq_term`) and the data
    axes separately. Over the data axes a device reduces only the position rows it holds (T/s
    under CP, T/(s·t) under SP; in a pipeline under ring attention all of them); the weights of
    SP's manual regions are reduced inside them (`_sp_weight_reduces`); under ring attention
    the blocks' weight gradients are kept split over seq: a device reduces its 1/s of them over
    the data axes, and gathers them whole for the update (seq-grads)."""
    sizes, grid, grad_bytes = step.sizes, step.grid, step.grad_bytes
    manual = _sp_weight_grads(sizes, grid, grad_bytes)
    out = [_over_seq_term(step, manual)]
    out += _seq_embedding_and_head(sizes, grid, step.act_bytes, grad_bytes)
    held = step.positions / (grid.seq * np.where(grid.sp, grid.tensor, 1))
    held = np.where(_seq_in_stages(grid) & (grid.cp == CP_MODES.index("ring")), step.positions,
                    held)
    reduce = grad_bytes * (step.others + held) + 4 - manual
    reduce = reduce - grad_bytes * seq_sliced_grad_elements(sizes, grid)
    out.append(Term("seq-grads", "all-gather", (Axis.SEQ,), 1.0 * _seq_sliced(sizes, grid),
                    grad_bytes * _elements(sizes, grid, embed=True, layers=True)))
    out += _sp_weight_reduces(grid, step.per_step, manual)
    staged = _staged_over_expert(step)
    out += staged
    reduce = reduce - staged[0].bytes_per_op
    return out, _Reduction(step.per_step * (grid.dp > 1), reduce,
                           (Axis.DATA, Axis.FSDP, Axis.EXPERT))


def _over_seq_term(step: _Step, manual) -> Term:
    """xla-cpu, the reduction over seq: ring attention's step reduces all the position rows,
    Ulysses' none (it gathers the table instead: cp-positions); the weights of SP's manual
    regions are reduced inside them; under SP XLA merges the D-sized weights and ring's
    positions with their tensor-axis reductions (sp-grads, sp-positions). In a pipeline `seq`
    stays with XLA, which reduces each backward op's chunk gradients (the blocks' alone: the
    embedding's backward gathers its cotangent over seq instead, seq-embedding); the
    embedding's and head's are summed once, whole, after the loop."""
    sizes, grid, grad_bytes, positions = step.sizes, step.grid, step.grad_bytes, step.positions
    over_seq = grad_bytes * (step.others + positions * (grid.cp == 1)) + 4 - manual
    over_seq = over_seq - grid.sp * grad_bytes * (sizes.hidden_params
                                                  + positions * (grid.cp == 1))
    seq_steps = np.where(grid.stage > 1, grid.microbatches * grid.virtual_stages, step.per_step)
    chunk = grad_bytes * _elements(sizes, grid, layers=True) / grid.virtual_stages
    over_seq = np.where(_seq_in_stages(grid), chunk, over_seq)
    return Term("grad-reduce", "all-reduce", (Axis.SEQ,), seq_steps * (grid.seq > 1), over_seq)


def _embedding_lookup_terms(step: _Step, axes) -> list[Term]:
    """xla-cpu, XLA's lookup in a D-sharded token table (`_Step.xla_embed`): per microbatch the
    token ids (int32) all-gathered, and the lookup's output moved by all-to-all in the backward
    (and the forward under fsdp)."""
    grid, m = step.grid, step.grid.microbatches
    ids = 4 * grid.B // m * grid.T
    lookups = np.where(grid.fsdp > 1, 2, 1) * m * step.xla_embed
    return [Term("embedding-ids", "all-gather", axes, m * step.xla_embed,
                 ids * np.ones(len(grid))),
            Term("embedding-lookup", "all-to-all", axes, lookups, step.x_bytes)]


def _tied_table_terms(step: _Step) -> list[Term]:
    """Tied embeddings (ModelConfig.tied_embeddings), the token table's second use. Ideal
    program: in a pipeline, Megatron-LM's first and last stages each hold the table and
    all-reduce its two gradients over stage once per step. xla-cpu: XLA reduces the output
    layer's gradient of the table over the batch axes apart from the lookup's (one all-reduce
    of the table's V·D/t more) and, where the table is sharded over fsdp, gathers it for the
    logits too; read off tiny data=8, fsdp=8, data=2,tensor=4 (sp=on) and
    data=4,tensor=2,zero=1."""
    sizes, grid = step.sizes, step.grid
    if not sizes.tied:
        return []
    table = sizes.V * sizes.D / grid.tensor
    piped = (grid.stage > 1) * 1.0
    out = [Term("tied-embedding", "all-reduce", (Axis.STAGE,), piped,
                step.grad_bytes * table / grid.embed_shards("grad"))]
    if step.conv.name == "xla-cpu":
        reduced = (grid.stage == 1) & (grid.dp * grid.seq > 1)
        gathered = (grid.stage == 1) & (grid.embed_shards("param") > 1)
        out += [Term("tied-embedding", "all-reduce", (Axis.DATA, Axis.FSDP, Axis.SEQ),
                     1.0 * reduced, step.grad_bytes * table),
                Term("tied-embedding", "all-gather", (Axis.DATA, Axis.FSDP), 1.0 * gathered,
                     step.param_bytes * table)]
    return out


def _gather_terms(step: _Step) -> list[Term]:
    """Parameter gathers. ZeRO-1/2: the updated parameters back from their shards, once (over
    data; the ideal program over Grid.zero_group's, the dense and the routed parameters apart).
    ZeRO-3/fsdp: each layer's weights in forward and backward (under SP too: gathered inside its
    manual regions, again in the backward; full remat's recomputed forward shares the
    backward's gathers), and the embedding and head once (`_head_gather_bytes`); then XLA's
    gathers of a D-sharded token table under tensor parallelism (`_xla_cpu_table_terms`)."""
    sizes, grid, param_bytes = step.sizes, step.grid, step.param_bytes
    zero12 = (grid.zero >= 1) & (grid.zero <= 2)
    dense = param_bytes * _partitioned_elements(sizes, grid) / grid.fsdp
    routed = param_bytes * routed_elements(sizes, grid, embed=True) / grid.fsdp
    if grid.executor:
        out = [Term("zero-gather", "all-gather", (Axis.DATA,), 1.0 * zero12 * (grid.data > 1),
                    dense + routed)]
    else:  # each over its shards' group (Grid.zero_group)
        out = [Term("zero-gather", "all-gather", (Axis.DATA, Axis.EXPERT, Axis.SEQ),
                    1.0 * zero12 * (grid.zero_group() > 1), dense)]
        if sizes.moe:
            out.append(Term("zero-gather", "all-gather", (Axis.DATA, Axis.SEQ),
                            1.0 * zero12 * (grid.zero_group(routed=True) > 1), routed))
    fsdp = (grid.fsdp > 1) | ((grid.zero >= 3) & (grid.data > 1))
    # the ideal program gathers each layer's flat buffer, vectors and all; parex's step its
    # weights by layer and the vectors whole once per step (`_vector_gather_terms`)
    by_layer = np.where(grid.executor,
                        _elements(sizes, grid, embed=True, layers=True),
                        _partitioned_elements(sizes, grid, layers=True))
    layer_w = param_bytes * by_layer / grid.stage_layers
    layer_w = layer_w + (fp8.gathered_layer_bytes(sizes, grid, step.precision, param_bytes)
                         - param_bytes * fp8.projection_elements(sizes, grid.tensor))
    out.append(Term("fsdp-gather", "all-gather", (Axis.DATA, Axis.FSDP),
                    2 * grid.microbatches * grid.stage_layers * fsdp, layer_w))
    # a mixture of experts' routed experts (E/expert of them); xla-cpu gathers them once per
    # forward inside the experts' manual region and keeps them for the backward
    routed_w = param_bytes * routed_elements(sizes, grid, embed=True) / grid.stage_layers
    passes = 1 + (step.remat == "full") if step.conv.name == "xla-cpu" else 2
    out.append(Term("fsdp-gather", "all-gather", (Axis.DATA, Axis.FSDP),
                    passes * grid.microbatches * grid.stage_layers * fsdp * (routed_w > 0),
                    routed_w))
    out.append(Term("fsdp-gather", "all-gather", (Axis.DATA, Axis.FSDP), 1.0 * fsdp,
                    _head_gather_bytes(step)))
    return out + _vector_gather_terms(step, fsdp) + _xla_cpu_table_terms(step, fsdp)


def _vector_gather_terms(step: _Step, fsdp) -> list[Term]:
    """xla-cpu, state partitioned over the batch axes: the vectors (norms' scales, D-sized
    biases; the busiest stage's layers' in a pipeline) gathered whole once per step, one
    all-gather per leaf, of their mean size here: before the layers
    (parex.model.transformer.whole_vectors), hoisted by XLA out of the microbatch loop
    (tiny-llama fsdp=8 at 2 microbatches), or as they enter a pipeline that runs fsdp by hand
    (parallel.fsdp_stage gathers only the weights: tiny fsdp=2,stage=2,microbatches=2)."""
    sizes, grid = step.sizes, step.grid
    leaves = sum(sizes.vector_leaves)
    on = fsdp & grid.executor & (leaves > 0)
    stacked, unstacked = sizes.vectors
    held = stacked * grid.stage_layers / sizes.L + unstacked
    return [Term("fsdp-gather", "all-gather", (Axis.DATA, Axis.FSDP), leaves * on,
                 step.param_bytes * held / max(leaves, 1))]


def _fp8_terms(step: _Step) -> list[Term]:
    """FP8 recipes: the amaxes' all-reduces, one float32 scalar per FP8 tensor (predict.fp8)."""
    count, each = fp8.amax_reduces(step.sizes, step.grid, step.precision,
                                   fused=step.conv.name != "xla-cpu")
    return [Term("fp8-amax", "all-reduce", (Axis.DATA, Axis.FSDP, Axis.TENSOR), count, each)]


def _head_gather_bytes(step: _Step) -> np.ndarray:
    """The embedding's and head's gathered bytes: every matrix without a layers dim; xla-cpu
    gathers only GPT's T/(s·t) position rows under SP, and not the token table where its
    lookup's output moves instead (`_Step.xla_embed`)."""
    sizes, grid, param_bytes = step.sizes, step.grid, step.param_bytes
    head_w = param_bytes * np.where(grid.executor, _elements(sizes, grid, embed=True,
                                                             layers=False),
                                    _partitioned_elements(sizes, grid, layers=False))
    if step.conv.xla_embedding and sizes.family == "gpt":
        held = grid.T / (grid.tensor * grid.seq)
        head_w = head_w - param_bytes * grid.sp.astype(bool) * sizes.D * (sizes.T_max - held)
    return head_w - np.where(step.xla_embed, param_bytes * step.table, 0)


def _xla_cpu_table_terms(step: _Step, fsdp) -> list[Term]:
    """xla-cpu, a token table sharded over fsdp and tensor (no SP): XLA moves its shards by two
    permutes and gathers each microbatch's lookup over tensor."""
    sizes, grid = step.sizes, step.grid
    table_tp = (step.conv.xla_embedding & fsdp & (grid.tensor > 1) & (grid.sp == 0)
                & ~step.fsdp_piped)
    shard = 4.0 * sizes.V * sizes.D / (grid.tensor * grid.fsdp)
    return [Term("embedding-table", "collective-permute", (Axis.FSDP, Axis.TENSOR),
                 2.0 * table_tp, shard),
            Term("embedding-lookup", "all-gather", (Axis.TENSOR,),
                 grid.microbatches * table_tp, step.x_bytes)]


def fsdp_in_stages(grid) -> np.ndarray:
    """Where the pipeline runs fsdp by hand (parallel.fsdp_stage)."""
    return (grid.stage > 1) & fsdp_by_hand(grid.fsdp, grid.zero, grid.sp, grid.seq)


def _fsdp_in_stages(sizes, grid, grad_bytes, on) -> list[Term]:
    """xla-cpu, fsdp manual inside pipeline stages (parallel.fsdp_stage): each backward op (B,
    or W when split) reduce-scatters its chunk's sharded gradients over fsdp; after the loop
    the shards are summed over data, the unsharded leaves (biases, norms) over data and fsdp at
    once, and the embedding's and head's over stage and the batch axes at once
    (parallel.pipeline._sum_partials). (Its forward and backward gathers are fsdp-gather's, by
    chunk instead of by layer.)"""
    sharded = grad_bytes * _elements(sizes, grid, embed=True, layers=True)
    unsharded = grad_bytes * _elements(sizes, grid, embed=False, layers=True)
    ops = grid.microbatches * grid.virtual_stages
    shared = grad_bytes * _elements(sizes, grid, layers=False) + 4  # + the loss
    return [Term("grad-reduce", "reduce-scatter", (Axis.FSDP,), ops * on,
                 sharded / grid.virtual_stages),
            Term("grad-reduce", "all-reduce", (Axis.DATA,), 1.0 * on * (grid.data > 1),
                 sharded / grid.fsdp),
            Term("grad-reduce", "all-reduce", (Axis.DATA, Axis.FSDP), 1.0 * on, unsharded),
            Term("pipeline-shared", "all-reduce", (Axis.STAGE, Axis.DATA, Axis.FSDP), 1.0 * on,
                 shared)]


def _seq_embedding_and_head(sizes, grid, act_bytes, grad_bytes) -> list[Term]:
    """xla-cpu, seq inside pipeline stages (no SP), per microbatch. The first virtual stage's
    backward scatter-adds into the embedding tables, whole on every seq device, so XLA
    all-gathers over seq the token ids (int32) and the embedding's output cotangent, and under
    ring attention (GPT) the zig-zag position rows' cotangent with its 2s chunk offsets. The
    last virtual stage all-reduces over seq its loss and the head's gradients (unembedding and
    final norm). Both run on stage 0 under ZB-V; otherwise on different stages, of which the
    measured step (measure.compiled_stats) reports the one that moves more."""
    on = _seq_in_stages(grid)
    gathered = grid.tokens * grid.seq  # b · T per microbatch
    ring = grid.cp == CP_MODES.index("ring")
    rows = grid.T * sizes.D * grad_bytes * (sizes.family == "gpt") * np.ones(len(grid))
    first = [(4 * gathered, 1), (gathered * sizes.D * act_bytes, 1),
             (rows, ring * (rows > 0)), (4 * 2 * grid.seq, ring * (rows > 0))]
    unembed, norm = sizes.head
    head = grad_bytes * (unembed / grid.tensor + norm) * np.ones(len(grid))
    last = [(head, 1), (4 * np.ones(len(grid)), 1)]
    vee = np.isin(grid.schedule, [SCHEDULES.index(name) for name in VEE])
    moved = [sum(b * c for b, c in parts) for parts in (first, last)]
    takes = [vee | (moved[0] >= moved[1]), vee | (moved[0] < moved[1])]
    m = grid.microbatches * on
    return [Term(name, kind, (Axis.SEQ,), 1.0 * m * on_stage * c, b)
            for name, kind, parts, on_stage in
            (("seq-embedding", "all-gather", first, takes[0]),
             ("seq-head", "all-reduce", last, takes[1]))
            for b, c in parts]


def _seq_sliced(sizes, grid) -> np.ndarray:
    """Layouts whose step keeps the blocks' weight gradients split over seq in the backward
    (parex.layout.grads_split_over_seq), in parex's program (xla-cpu) only: the ideal one
    all-reduces them over DP x CP at once."""
    ring = grid.cp == CP_MODES.index("ring")
    return grid.executor & grads_split_over_seq(ring, grid.seq, grid.stage, grid.sp, grid.fsdp,
                                                grid.zero, sizes.D)


def seq_sliced_grad_elements(sizes, grid) -> np.ndarray:
    """Parameters' worth of the blocks' weight gradients a device does not hold where its step
    keeps them split over seq (`_seq_sliced`): all but its 1/s; 0 elsewhere."""
    blocks = _elements(sizes, grid, embed=True, layers=True)
    return np.where(_seq_sliced(sizes, grid), blocks * (1 - 1 / grid.seq), 0.0)


def _tensor_terms(sizes, grid, remat, conv, act_bytes, grad_bytes, x_bytes) -> list[Term]:
    """Tensor parallelism's collectives: the activations' (`_tp_activation_terms`), the
    D-sized weights' gradients under SP (`_sp_grad_terms`), XLA's around GPT's position table
    under SP (xla-cpu: `_xla_cpu_sp_position_terms`), and the vocab-parallel loss's 3
    all-reduces of (tokens,) float32 per microbatch (max, sum, target)."""
    out = _tp_activation_terms(sizes, grid, remat, conv, x_bytes)
    out += _sp_grad_terms(sizes, grid, conv, grad_bytes)
    if conv.xla_embedding and sizes.family == "gpt":
        out += _xla_cpu_sp_position_terms(sizes, grid, conv, grad_bytes)
    ce = 3 * grid.microbatches * (grid.tensor > 1)
    out.append(Term("cross-entropy", "all-reduce", (Axis.TENSOR,), ce, 4.0 * grid.tokens))
    return out


def _tp_activation_terms(sizes, grid, remat, conv, x_bytes) -> list[Term]:
    """Megatron's per microbatch: 4 per block (SwiGLU's second input matrix adds one
    backward), 1 more per block recomputed under full remat, + the embedding and the head. A
    pipeline's busiest device is its last stage: its layers, the head and the loss, but not the
    embedding. Under SP each becomes an all-gather and a reduce-scatter of the same bytes, +
    the embedding's output (reduce-scatter; backward all-gather) and the head's input
    (all-gather; backward reduce-scatter), + SP's re-gathers in the backward of the inputs it
    saves sequence-split: 2 per block and the head's (xla-cpu merges the head's with its
    forward gather, and under full remat the blocks' with the recomputed forward's). Inside
    parex's pipeline stages SP's ops are nested shard_maps (`_nested_sp_counts`)."""
    m, L = grid.microbatches, grid.stage_layers
    tp, sp = (grid.tensor > 1), grid.sp.astype(bool)
    full = 1 if remat == "full" else 0
    axes = (Axis.TENSOR,)
    piped = grid.stage > 1
    # a mixture of experts' MLP is (b, T, D)-sized only in its shared experts (the routed
    # experts' reductions are on the dispatch buffer: moe_terms)
    dense_mlp = 1 if (not sizes.moe or sizes.shared_F) else 0
    backward = 1 + dense_mlp * sizes.n_mlp_in
    last = full * conv.megatron_block  # the recomputed block's last all-reduce / reduce-scatter
    per_block = 1 + dense_mlp + backward + full + last
    # the column-parallel layers' backward ones (QKV's and the MLP inputs') run beside their
    # weight-gradient GEMMs where the program overlaps them
    beside = backward * L * conv.overlaps_tp_backward
    # under SP a SwiGLU's two input matrices leave one input gradient (Megatron's fused fc1):
    # 2 reduce-scatters per block beside dW, 1 where the MLP is a mixture of experts' routed one
    beside_rs = min(backward, 2) * L * conv.overlaps_tp_backward
    n_ar = per_block * L + np.where(piped, 1, 2) - beside
    out = [Term("tp", "all-reduce", axes, m * n_ar * (tp & ~sp), x_bytes),
           Term("tp-beside-wgrad", "all-reduce", axes, m * beside * (tp & ~sp), x_bytes)]
    # SP's gathers per block: of each branch's input, and of the cotangent of each branch's
    # reduce-scatter; a parallel block's two branches read one input and one output cotangent,
    # so one of each (xla-cpu merges the identical gathers; Megatron would gather once)
    g = 1 if sizes.parallel else 2
    regathers = np.where(conv.merges_sp_regathers, g * L * (1 - full), g * L + 1)
    n_ag = (2 * g + g * full) * L + 2
    n_rs = (4 + full + last) * L + 2 - beside_rs
    if sizes.moe:  # the routed experts' input gathered whole (forward, recompute; backward: the
        #           gather of its replicated output's slice), no reduce-scatter, no re-gather
        routed = (2 + full) * L
        if not sizes.shared_F:  # in the MLP's place: its gather, scatters and re-gather go
            n_ag, n_rs = n_ag - routed, n_rs - (2 + last) * L
            regathers = regathers - L * np.where(conv.merges_sp_regathers, 1 - full, 1)
        n_ag = n_ag + routed
    nested_ag, nested_rs = _nested_sp_counts(grid, full)
    nested = piped & grid.executor  # SP's ops nested in the pipeline's shard_map
    # chunked behind their GEMMs (predict.overlap): each block's forward gathers (before QKV
    # and the MLP) and scatters (after W_o and W_out), the backward's gathers of the
    # row-parallel layers' output gradients, and a recomputed forward's; not a mixture of
    # experts' (its routed MLP has no such pair)
    chunks = (conv.overlaps_tp_comm or conv.async_tp) and not sizes.moe
    c_ag, c_rs = ((2 * g + g * full) * L, (2 + full + last) * L) if chunks else (0, 0)
    out.append(Term("sp", "all-gather", axes,
                    m * np.where(nested, nested_ag, n_ag - c_ag) * sp, x_bytes))
    out.append(Term("sp", "reduce-scatter", axes,
                    m * np.where(nested, nested_rs, n_rs - c_rs) * sp, x_bytes))
    out.append(Term("sp-chunked", "all-gather", axes, m * c_ag * (sp & ~nested), x_bytes))
    out.append(Term("sp-chunked-rs", "reduce-scatter", axes, m * c_rs * (sp & ~nested),
                    x_bytes))
    out.append(Term("sp-regather", "all-gather", axes, m * regathers * (sp & ~nested), x_bytes))
    out.append(Term("tp-beside-wgrad", "reduce-scatter", axes, m * beside_rs * (sp & ~nested),
                    x_bytes))
    return out


def _sp_grad_terms(sizes, grid, conv, grad_bytes) -> list[Term]:
    """SP: the D-sized weights' gradients (norms, biases) summed over tensor per microbatch; a
    pipeline's last stage has its layers' and the final norm's. xla-cpu with seq: summed over
    seq and tensor at once (the seq reduction leaves them out)."""
    m, n, sp = grid.microbatches, len(grid), grid.sp.astype(bool)
    final = sizes.head[1]
    hidden = grad_bytes * np.where(grid.stage > 1,
                                   (sizes.hidden_params - final) * grid.stage_layers / sizes.L
                                   + final, sizes.hidden_params)
    merged = conv.xla_embedding & sp & (grid.seq > 1)
    return [Term("sp-grads", "all-reduce", (Axis.TENSOR,), m * sp * ~merged,
                 hidden * np.ones(n)),
            Term("sp-grads", "all-reduce", (Axis.SEQ, Axis.TENSOR), m * merged,
                 hidden * np.ones(n))]


def _xla_cpu_sp_position_terms(sizes, grid, conv, grad_bytes) -> list[Term]:
    """xla-cpu, GPT's position table under SP: each shard's position gradient (T/t rows) is
    gathered over tensor; in a pipeline each tensor shard's T/t rows are exchanged by an
    all-to-all and a permute into the table's stored layout; with seq, ring all-reduces it over
    seq and tensor at once and Ulysses gathers the table over both."""
    axes, sp, piped = (Axis.TENSOR,), grid.sp.astype(bool), grid.stage > 1
    table = grad_bytes * sizes.T_max * sizes.D / grid.embed_shards("grad")
    rows = grad_bytes * grid.T / grid.tensor * sizes.D / grid.embed_shards("grad")
    nested_sp = 1.0 * (sp & piped & grid.executor)
    merged = conv.xla_embedding & sp & (grid.seq > 1)
    ring, ulysses = merged & (grid.cp == 1), merged & (grid.cp == 2)
    return [Term("sp-positions", "all-gather", axes, 1.0 * (sp & ~piped) * (grid.seq == 1),
                 table),
            Term("sp-positions", "all-to-all", axes, nested_sp, rows),
            Term("sp-positions", "collective-permute", (Axis.STAGE, Axis.DATA, Axis.TENSOR),
                 nested_sp, rows),
            Term("sp-positions", "all-reduce", (Axis.SEQ, Axis.TENSOR), 1.0 * ring,
                 grad_bytes * grid.T * sizes.D / grid.embed_shards("grad")),
            Term("sp-positions", "all-gather", (Axis.SEQ, Axis.TENSOR), 1.0 * ulysses,
                 4.0 * sizes.T_max * sizes.D / grid.embed_shards("param"))]


def _nested_sp_counts(grid, full: int) -> tuple[np.ndarray, np.ndarray]:
    """(all-gathers, reduce-scatters) per microbatch of SP inside parex's pipeline stages, on
    its last stage: each op is a nested shard_map whose backward is its own (parallel.nested).
    Per layer: the forward gathers before QKV and the MLP and reduce-scatters after W_o and
    W_out (2, 2). An unsplit backward gathers each column-parallel input again for its weight
    gradient and each row-parallel output gradient (4, 0), and reduce-scatters the
    column-parallel input gradients (0, 2). A split backward's B needs no re-gather for dx
    (2, 2); its W gathers both again (4, 0). Full remat runs the forward once more (2, 2). The
    head: its input gathered in F and again in B, its gradient reduce-scattered (2, 1)."""
    L = grid.stage_layers
    split = np.isin(grid.schedule, [SCHEDULES.index(s) for s in SPLIT])
    ag = (2 + np.where(split, 2 + 4, 4) + 2 * full) * L + 2
    rs = (2 + 2 + 2 * full) * L + 1
    return ag, rs


def _sp_weight_grads(sizes, grid, grad_bytes) -> np.ndarray:
    """Gradient bytes of the weights in SP's manual regions: every matrix with an embed dim
    but GPT's position table."""
    positions = sizes.T_max * sizes.D if sizes.family == "gpt" else 0.0
    router = sizes.D * sizes.E * sizes.L / grid.stage if sizes.moe else 0.0  # routes outside
    return grid.sp * grad_bytes * (_elements(sizes, grid, embed=True) - positions - router)


def _sp_weight_reduces(grid, per_step, manual) -> list[Term]:
    """xla-cpu: those gradients are reduced inside SP's regions, reduce-scattered over the axes
    that shard the weights (fsdp; data too under ZeRO-3: they are gathered there), then the
    shard all-reduced over the other replica axes (data, expert, seq) at once."""
    zero3, on = grid.zero >= 3, per_step * (manual > 0)
    split = np.where(zero3, grid.data * grid.fsdp, grid.fsdp)
    shard = manual / split
    return [Term("grad-reduce", "reduce-scatter", (Axis.DATA, Axis.FSDP),
                 on * zero3 * (split > 1), manual),
            Term("grad-reduce", "reduce-scatter", (Axis.FSDP,), on * ~zero3 * (split > 1), manual),
            Term("grad-reduce", "all-reduce", (Axis.DATA, Axis.EXPERT, Axis.SEQ),
                 on * ~zero3 * (grid.data * grid.expert * grid.seq > 1), shard),
            Term("grad-reduce", "all-reduce", (Axis.EXPERT, Axis.SEQ),
                 on * zero3 * (grid.expert * grid.seq > 1), shard)]


def _context_terms(sizes, grid, remat, conv, act_bytes) -> list[Term]:
    s, m, L = grid.seq, grid.microbatches, grid.stage_layers
    passes = 3 if remat == "full" else 2  # forward, backward, and the recomputed forward
    out = _ring_terms(sizes, grid, remat, act_bytes)
    ulysses = (grid.cp == 2) & (s > 1)
    head = grid.tokens * sizes.Dh / grid.tensor * act_bytes  # one head's (b, T/s) slice
    qkvo = head * (2 * sizes.H + 2 * sizes.K) / 4  # the mean of q, k, v and o
    # inside parex's pipeline stages the attention is a nested shard_map whose backward runs
    # its forward again without the output's all-to-all (parallel.nested): 4 + 3 + 4 per
    # layer, q k v o, then q k v, then dO dq dk dv: (5H + 6K) heads; full remat's recomputed
    # forward adds only the output's (H heads: the nested backward reruns the rest anyway)
    nested = (grid.stage > 1) & grid.executor
    a2a = np.where(nested, 11 + (passes - 2), 4 * passes)
    moved = np.where(nested, head * (5 * sizes.H + 6 * sizes.K + (passes - 2) * sizes.H),
                     passes * 4 * qkvo)
    out.append(Term("cp-ulysses", "all-to-all", (Axis.SEQ,), a2a * L * m * ulysses,
                    moved / a2a))
    if conv.xla_embedding and sizes.family == "gpt":  # XLA gathers GPT's position table
        table = 4.0 * sizes.T_max * sizes.D * np.ones(len(grid))
        # (under SP the table is gathered over seq and tensor at once: sp-positions); inside
        # stages with data replicas it moves the T/s looked-up rows instead
        moved = _ulysses_in_stages(grid) & (grid.dp > 1)
        out.append(Term("cp-positions", "all-gather", (Axis.SEQ,),
                        1.0 * ulysses * (grid.sp == 0) * ~moved, table))
        rows = 4.0 * grid.T * sizes.D / s
        for kind in ("all-to-all", "collective-permute"):
            out.append(Term("cp-positions", kind, (Axis.SEQ,), 1.0 * moved, rows))
    return out


def _seq_in_stages(grid) -> np.ndarray:
    """xla-cpu: seq inside pipeline stages, without SP (XLA's partitioner keeps seq there)."""
    return grid.executor & (grid.stage > 1) & (grid.seq > 1) & (grid.sp == 0)


def _ulysses_in_stages(grid) -> np.ndarray:
    return _seq_in_stages(grid) & (grid.cp == CP_MODES.index("ulysses"))


def _ring_terms(sizes, grid, remat, act_bytes) -> list[Term]:
    """parex.parallel.context.ring_attention, per block and microbatch. Forward: k and v each
    s − 1 hops (again in the backward under either remat: the attention is recomputed). Its
    custom VJP re-runs the ring in float32: hop 1 sends (k, v), hops 2 … s − 1 send
    (k, v, dk, dv) as one buffer, and a last hop sends (dk, dv) home. Each hop is a
    collective-permute, but inside parex's pipeline stages (xla-cpu) an all-to-all of s copies
    of the block (context._shift_by_all_to_all), and the attention is a nested shard_map whose
    backward runs the ring's forward once more (parallel.nested; under a remat XLA merges it with
    the recomputed forward of the same branch)."""
    s, ring = grid.seq, (grid.cp == 1) & (grid.seq > 1)
    rings = grid.microbatches * grid.stage_layers * ring  # one per block and microbatch
    staged = ring_hops_are_all_to_alls(grid)
    forwards = np.where(staged | (remat != "none"), 2, 1)  # a remat's recompute is the same one
    block = ring_block_elements(sizes, grid) * np.where(staged, s, 1)  # all-to-all: s copies
    axes, out = (Axis.SEQ,), []
    for kind, on in (("collective-permute", ~staged), ("all-to-all", staged)):
        out += [Term("cp-ring", kind, axes, forwards * 2 * (s - 1) * rings * on,
                     block * act_bytes),
                Term("cp-ring", kind, axes, 2.0 * rings * on, 2 * 4 * block),
                Term("cp-ring", kind, axes, (s - 2) * rings * on, 4 * 4 * block)]
    return out


def ring_block_elements(sizes, grid) -> np.ndarray:
    """One device's k (or v) block of ring attention: (b, T/s, K/t, Dh) elements."""
    return grid.tokens * sizes.K * sizes.Dh / grid.tensor


def ring_hops_are_all_to_alls(grid) -> np.ndarray:
    """Ring attention inside parex's pipeline stages (xla-cpu): its hops are all-to-alls of s
    copies (parallel.context._shift_by_all_to_all), not collective-permutes."""
    return (grid.cp == 1) & (grid.seq > 1) & (grid.stage > 1) & grid.executor


def _pipeline_terms(sizes, grid, conv, param_bytes, grad_bytes, x_bytes) -> list[Term]:
    piped = grid.stage > 1
    sends = 2 * grid.microbatches * grid.virtual_stages
    if conv.name == "xla-cpu":
        sends = 2 * table_columns(grid)[0]  # one send each way per tick
    send = x_bytes / np.where(grid.sp, grid.tensor, 1)  # under SP: the sequence-split stream
    out = []
    if conv.name != "xla-cpu":
        # Megatron's scatter/gather (Narayanan et al. 2021, 4.1): each tensor rank sends its
        # 1/t of the (replicated) boundary activation and the receiver all-gathers it over the
        # fast links; under SP the activation is already split that way
        send = x_bytes / grid.tensor
        gather = piped & (grid.tensor > 1) & (grid.sp == 0)
        out.append(Term("pipeline", "all-gather", (Axis.TENSOR,), sends * gather, x_bytes))
    out.insert(0, Term("pipeline", "collective-permute", (Axis.STAGE,), sends * piped, send))
    # the stage-shared embedding and head: summed over stages (merged into the gradient
    # reduction when there is a batch axis too)
    shared = grad_bytes * _elements(sizes, grid, layers=False)
    alone = piped & (grid.dp * grid.seq == 1)
    if conv.name == "xla-cpu":  # seq stays with XLA, which reduces only the blocks over it
        alone = alone | (piped & (grid.dp == 1) & (grid.sp == 0))
        # Ulysses leaves each seq device the position rows it looked up (T/s of them)
        rows = grid.T * sizes.D * (sizes.family == "gpt") * (1 - 1 / grid.seq)
        shared = shared - grad_bytes * rows * _ulysses_in_stages(grid)
    out.append(Term("pipeline-shared", "all-reduce", (Axis.STAGE,), 1.0 * alone, shared))
    if conv.name == "xla-cpu":  # parex stores them split over stages and gathers them first
        tables = param_bytes * (_elements(sizes, grid, embed=True, layers=False)
                                / grid.embed_shards("param"))
        out.append(Term("stage-gather", "all-gather", (Axis.STAGE,), 1.0 * piped, tables))
        out += _uneven_regroup(sizes, grid, param_bytes, grad_bytes)
    return out


def _uneven_regroup(sizes, grid, param_bytes, grad_bytes) -> list[Term]:
    """xla-cpu, uneven chunks: stages hold different layer counts, so the train state cannot
    store each stage's chunks in its own rows (TrainStep.block_order) and the step gathers them
    into the padded (p, v, Lmax) chunks: XLA all-reduces those over stage and permutes the
    gradients of the L layers back. (Checked with the parameters whole over the batch axes;
    with fsdp or ZeRO-3 inside stages XLA's collectives differ, even with even chunks.)"""
    uneven = (grid.stage > 1) & (grid.partition_n > 0) & (grid.partition_min != grid.partition_max)
    uneven = uneven & (grid.fsdp == 1) & ~((grid.zero >= 3) & (grid.data > 1))
    layers = np.maximum(grid.partition_sum, 1)
    per_layer = _elements(sizes, grid, layers=True) * grid.stage / layers  # on one device
    padded = grid.stage * grid.virtual_stages * grid.partition_max
    return [Term("stage-regroup", "all-reduce", (Axis.STAGE,), 1.0 * uneven,
                 param_bytes * per_layer * padded),
            Term("stage-regroup", "collective-permute", (Axis.STAGE,), 1.0 * uneven,
                 grad_bytes * per_layer * layers)]


def dispatch_slots(sizes: ModelSizes, grid: Grid) -> np.ndarray:
    """Expert slots per sequence a MoE block moves. parex's program (xla-cpu) dispatches densely
    (parex.model.moe.layer): E·C, padded to capacity (dropless: C = T, E·T slots). The ideal program
    (Megatron-LM's alltoall dispatcher, a ragged all-to-all) moves only the k·T assignments, or
    the E·C that capacity keeps when fewer."""
    padded = sizes.E * sizes.capacity(grid.T)
    return np.where(grid.executor, padded, np.minimum(sizes.k * grid.T, padded))


def moe_terms(step: _Step) -> list[Term]:
    """A mixture of experts, per block and microbatch (parex.model.moe.layer). Expert parallelism:
    the dispatch buffer x_e[E, b, C, D] (b sequences per device, `dispatch_slots` slots each)
    goes to the experts' devices by an all-to-all over expert and comes back by a second; the
    backward runs their two transposes; full remat's recomputed forward both again (the
    combine's backward needs the experts' output, for the gates). Tensor parallelism splits
    F_e: the experts' partial outputs are all-reduced on the buffer (forward; again under full
    remat) and so are the input gradients of their column-parallel matrices (backward: one
    per input matrix, SwiGLU's two merged by XLA into one op of twice the bytes).
    Folded (MoE parallel folding, expert_tensor=1: the group is expert × tensor, each expert
    whole) each tensor device sends its 1/t of the slots (`folded_terms`). Under seq each device
    holds T/s of the tokens and C/s of the slots (MeshOps.dispatch): its partial sums of the
    whole buffer are reduce-scattered over seq, the outputs all-gathered back for the combine,
    and the backward runs their transposes (full remat's forward both again); the ideal program
    dispatches each seq device's own tokens and moves nothing over seq. Under DeepEP's dispatch
    (`dispatch_routing`) the all-to-alls carry (E, k): what leaves a node goes once per remote
    node, dispatch and combine alike (the combine sums a node's partial outputs first)."""
    sizes, grid, conv = step.sizes, step.grid, step.conv
    if not sizes.moe:
        return []
    full = 1 if step.remat == "full" else 0
    m_l = grid.microbatches * grid.stage_layers
    buffer = grid.b * dispatch_slots(sizes, grid) * sizes.D / grid.seq * step.act_bytes
    routing = dispatch_routing(step)
    folded = grid.fold > 1
    tp = ((grid.tensor > 1) & ~folded) * 1.0
    beside = conv.overlaps_tp_backward
    seq = (2 + full) * m_l * (grid.seq > 1) * grid.executor
    whole = buffer * grid.seq  # the seq devices' partial sums of every slot
    return [Term("moe-dispatch", "reduce-scatter", (Axis.SEQ,), seq, whole),
            Term("moe-combine", "all-gather", (Axis.SEQ,), seq, whole)] + routing_terms(step) + [
            Term("moe-dispatch", "all-to-all", (Axis.EXPERT,),
                 (4 + 2 * full) * m_l * (grid.expert > 1) * ~folded, buffer, routing),
            Term("tp", "all-reduce", (Axis.TENSOR,), (1 + full) * m_l * tp, buffer),
            Term("tp-beside-wgrad" if beside else "tp", "all-reduce", (Axis.TENSOR,),
                 sizes.n_mlp_in * m_l * tp, buffer)] + folded_terms(step, folded, buffer, routing)


def dispatch_routing(step: _Step) -> tuple[int, int] | None:
    """(E, k) where the ideal program's dispatch goes once per remote node
    (Convention.dispatch_per_node: DeepEP, HybridEP), else None: one copy per slot."""
    sizes, conv = step.sizes, step.conv
    if not conv.dispatch_per_node or step.grid.executor:
        return None
    return (int(sizes.E), int(sizes.k))


def routing_terms(step: _Step) -> list[Term]:
    """The router's sums over a sequence split over seq, per block and microbatch, as XLA
    partitions parex's routing (parex.model.moe.routing; read off tiny-moe's compiled steps,
    b = 4-16, s = 2-8): the slots go by position over the whole sequence, so the int32 one-hot
    choices (b, T, k, E) are gathered whole (all-gathered; all-reduced under ring attention,
    whose zig-zag order is undone by a gather across the shards), again in full remat's
    recomputed forward; the per-sequence load statistics (b·k·E counts and one scalar) are
    all-reduced, and under full remat the router's mean probabilities (b·E) too."""
    sizes, grid = step.sizes, step.grid
    full = 1 if step.remat == "full" else 0
    m_l = grid.microbatches * grid.stage_layers * (grid.seq > 1) * grid.executor
    ring = grid.cp == CP_MODES.index("ring")
    choices = grid.b * grid.T * sizes.k * sizes.E * 4
    return [Term("moe-route", "all-reduce", (Axis.SEQ,), (1 + full) * m_l * ring, choices),
            Term("moe-route", "all-gather", (Axis.SEQ,), (1 + full) * m_l * ~ring, choices),
            Term("moe-route", "all-reduce", (Axis.SEQ,), 1.0 * m_l,
                 (grid.b * sizes.k * sizes.E + 1) * 4),
            Term("moe-route", "all-reduce", (Axis.SEQ,), full * m_l, grid.b * sizes.E * 4)]


def folded_terms(step: _Step, folded: np.ndarray, buffer: np.ndarray,
                 routing: tuple[int, int] | None = None) -> list[Term]:
    """MoE parallel folding (Liu et al. 2025, arXiv:2504.14960), per block and microbatch: the
    dispatch buffer's C slots are split over tensor, whose devices hold the same tokens, so
    each sends buffer/t by all-to-all over expert × tensor (four, six under full remat, as
    unfolded). The dispatch and combine einsums then contract a C split over tensor, so their
    token-sized results are all-reduced over it (parex.model.moe.layer's SLOTS and MASKS): the
    combine's output b·T/s·D in the forward (not again under full remat: the backward needs
    the experts' output, not the combined tokens, so XLA drops that sum), and in the backward the
    dispatch's input gradient with that of each token's gate per expert (b·T/s·E, float32:
    routing runs in float32),
    which XLA merges into one op. The ideal program (Megatron-Core's, which runs MoE with
    tensor parallelism only under SP) sends each tensor device's own tokens: under sp=on they
    are the sequence shard it holds, so nothing more moves; without SP the tokens' shares are
    all-gathered after the combine (reduce-scattered in the backward)."""
    sizes, grid = step.sizes, step.grid
    full = 1 if step.remat == "full" else 0
    m_l = grid.microbatches * grid.stage_layers * folded
    x = grid.b * grid.T / grid.seq * sizes.D * step.act_bytes  # the block's tokens (b, T/s, D)
    dense, ideal = m_l * grid.executor, m_l * np.logical_not(grid.executor) * (grid.sp == 0)
    return [Term("moe-dispatch", "all-to-all", (Axis.EXPERT, Axis.TENSOR), (4 + 2 * full) * m_l,
                 buffer / grid.fold, routing),
            Term("moe-combine", "all-reduce", (Axis.TENSOR,), 1.0 * dense, x),
            Term("moe-combine", "all-reduce", (Axis.TENSOR,), 1.0 * dense,
                 x + grid.b * grid.T / grid.seq * sizes.E * 4),
            Term("moe-combine", "all-gather", (Axis.TENSOR,), 1.0 * ideal, x),
            Term("moe-combine", "reduce-scatter", (Axis.TENSOR,), 1.0 * ideal, x)]


def bytes_by_kind(all_terms: list[Term], n: int) -> dict[str, np.ndarray]:
    totals = {kind: np.zeros(n) for kind in KINDS}
    for term in all_terms:
        totals[term.kind] = totals[term.kind] + term.bytes
    return totals


__all__ = ["CONVENTIONS", "Convention", "Term", "bytes_by_kind", "convention", "dispatch_slots",
           "moe_terms", "ring_block_elements", "ring_hops_are_all_to_alls", "routed_elements",
           "seq_sliced_grad_elements", "terms"]

