"""Predicted memory per device: model state per ZeRO stage, activations, temporaries.

    total = argument + gradients + activations + temp,   argument = params + optimizer + batch

Model state (bytes per parameter, `Recipe`): parex keeps float32 master weights (4), float32
gradients (4) and Adam's two moments (8); the ZeRO paper's mixed precision keeps 2 + 2 + K = 12.
Each kind is divided by the shards its dims are cut into (shapes.Grid.embed_shards: ZeRO stage s
shards optimizer state from s = 1, gradients from 2, parameters from 3; fsdp shards all three).

Activations, two formulas:
- "korthikanti" (Korthikanti et al. 2022, 16-bit activations with dropout masks, materialised
  scores: the naive kernel; under flash attention the a·s/h terms become each row's float32
  log-sum-exp, 4·a/h), bytes per layer:
      none       s·b·h·(34 + 5·a·s/h)                 TP: s·b·h·(10 + 24/t + 5·a·s/(h·t))
      TP + SP    s·b·h/t·(34 + 5·a·s/h)               selective drops the 5·a·s/h term
      full       2·s·b·h (the block input only)
- "xla": what XLA keeps for parex.model.transformer's block, read from the compiled step's buffer assignment
  (elements per token per layer; h full = replicated over the tensor axis, /t = split by it):
      8·h full (residual stream, norms, MLP input; h/t under SP, which saves the inputs of the
      column-parallel matmuls sequence-split and all-gathers them again in the backward)
      + (2 + 2·K/H)·h/t (q, attention output, k, v) + 6·F/t (MLP pre- and post-activation terms)
      + 2·(a/t)·s (scores and probabilities; dropped by selective remat; ring attention and
      flash attention keep a/t instead, each row's log-sum-exp, and recompute their blocks in
      the backward: parex.model.attention)
      full remat keeps only the block input, h (h/t under SP).
      A mixture of experts' MLP replaces 6·F/t by its dispatch's buffers (`moe_elements`);
      Korthikanti's by each token's k assignments (`korthikanti_moe_delta`). Routed experts'
      state: E/expert experts per device, split like any weight (state_elements).
The pipeline holds the activations of every microbatch-chunk in flight, taken from the schedule
table (Schedule.peak_in_flight); parex's executor keeps them in slot buffers (predict.stash: the
chunks' residuals, the embedding's and head's, a split backward's records and tap cotangents,
the inbox); each tick's switch writes new values of them and one chunk's gradient delta
(stash.loop_grad_elements) in its output positions (stash.window_bytes), and its ops copy the
weights they run out of the stage's chunks (stash.chunk_weight_bytes), on top of one layer's
working set.
Temporaries: the layer being differentiated needs its whole un-rematerialised working set, the
float32 logits need a few (B, T, V/t) buffers, bfloat16 runs keep compute copies of weights, and
gradient accumulation keeps a running sum of the gradients; where gradients are sharded (fsdp,
ZeRO-2/3) that layer is held whole, weights and unreduced gradient (`sharded_layer_bytes`).
The step peaks at the end of the backward or during the optimizer update, whichever is larger:
the update keeps `Recipe.update_buffers` float32 buffers of the optimizer state's size
(`update_bytes`; optax's AdamW in parex's step: 1) while the activations are already freed.
The activation and working-set constants were read off the tiny and small presets' compiled
steps. The update and sharded-layer terms are counts of whole buffers, not fitted numbers, but
they were worked out from the weight-heavy model's compiled steps, which the held-out family
(tests/test_predict_memory_heldout.py) also uses; its long-sequence and Llama cases were not
looked at before.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..parallel.timetable import BUFFERS
from . import fp8
from .comm import (fsdp_in_stages, ring_block_elements, ring_hops_are_all_to_alls,
                   seq_sliced_grad_elements)
from .schedule_stats import table_columns
from .stash import (chunk_weight_bytes, loop_grad_elements, split_backward, stash_bytes,
                    window_bytes)
from .shapes import GROUPS, ROUTED_GROUPS, Grid, ModelSizes, named

LOGIT_COPIES = 3  # float32 (tokens, V/t) buffers alive around the loss: logits, softmax, gradient
COUNTERS = 8  # two int32 step counters in the optimizer state (Adam's and the schedule's)


@dataclass(frozen=True)
class Recipe:
    """Bytes per parameter of each kind of model state, and the activation formula."""

    name: str
    param_bytes: float  # stored parameters (the master copy)
    grad_bytes: float
    optimizer_bytes: float  # all optimizer state (ZeRO's K, plus the fp32 master copy if 2-byte)
    activations: str  # "xla" or "korthikanti"
    counters: int = 0  # scalar optimizer state (bytes, replicated)
    update_buffers: float = 0.0  # float32 optimizer-state-sized temporaries of the update
    # FSDP2's MixedPrecisionPolicy: each shard cast to the compute dtype on its device, then
    # all-gathered in it (else the stored bytes are gathered)
    gathers_compute_dtype: bool = False

    def gathered_bytes(self, compute_bytes: int) -> float:
        """Bytes per parameter an FSDP / ZeRO-3 all-gather moves and a gathered layer holds."""
        return compute_bytes if self.gathers_compute_dtype else self.param_bytes


RECIPES = {
    # parex's own step (what the emulated mesh compiles): float32 state, XLA's buffers, optax's
    # AdamW keeping one update-sized buffer (memory.update_bytes)
    "parex": Recipe("parex", 4, 4, 8, "xla", COUNTERS, update_buffers=1),
    # Megatron-LM's mixed precision: ZeRO's 2 + 2 + K with K = 12, Korthikanti's activations,
    # a fused in-place Adam
    "mixed": Recipe("mixed", 2, 2, 12, "korthikanti"),
    # Megatron-LM's bfloat16 default: gradients accumulated and all-reduced in float32
    # (megatron/arguments.py since 2021, megatron/training/arguments.py today: "bfloat16
    # requires gradient accumulation and all-reduce to be done in fp32", unless
    # --grad-reduce-in-bf16): 2 + 4 + 12 bytes per parameter, and 4-byte gradient reductions
    "mixed-fp32-grads": Recipe("mixed-fp32-grads", 2, 4, 12, "korthikanti"),
    # PyTorch FSDP2 as torchtitan runs it (v0.2.2: training.dtype float32, mixed_precision_param
    # the compute dtype, mixed_precision_reduce float32, its only value; MixedPrecisionPolicy in
    # models/llama3/infra/parallelize.py): float32 parameter, gradient and Adam shards (4 + 4 +
    # 8 bytes per parameter), parameters gathered in the compute dtype, gradients reduced in
    # float32
    "fsdp2": Recipe("fsdp2", 4, 4, 8, "korthikanti", gathers_compute_dtype=True),
}


def recipe(name_or_recipe) -> Recipe:
    return named(RECIPES, name_or_recipe, Recipe, "memory recipe")


# --- model state -------------------------------------------------------------------------------

def state_elements(sizes: ModelSizes, grid: Grid, kind: str) -> np.ndarray:
    """Parameters' worth of `kind` state ("param", "grad", "opt") one device holds. Stacked
    layers are stored split evenly over the stage axis; the embedding and head as
    `head_state_elements` says. State sharded over data whose D those shards do not divide is
    Megatron-LM's distributed optimizer's flat buffer (`padded_state_elements`)."""
    dense, routed = grid.embed_shards(kind), grid.embed_shards(kind, routed=True)
    split = _dense_elements(sizes, grid, dense) + _routed_elements(sizes, grid, routed)
    uneven = (sizes.D % dense != 0) | (sizes.moe & (sizes.D % routed != 0))
    if not np.any(uneven):
        return split
    return np.where(uneven, padded_state_elements(sizes, grid, kind), split)


def padded_state_elements(sizes: ModelSizes, grid: Grid, kind: str) -> np.ndarray:
    """Megatron-LM's distributed optimizer (docs: distrib_optimizer.md): a rank's parameters in
    one flat buffer, padded to a multiple of its group's size (Grid.zero_group: the dense
    parameters' and the routed experts' each) and cut into equal contiguous shards, ⌈N / group⌉
    elements each, whatever the dims (fsdp still splits D)."""
    return (np.ceil(_dense_elements(sizes, grid, grid.fsdp) / grid.zero_group())
            + np.ceil(_routed_elements(sizes, grid, grid.fsdp) / grid.zero_group(routed=True)))


def _dense_elements(sizes: ModelSizes, grid: Grid, embed) -> np.ndarray:
    """state_elements of every parameter but a mixture's routed experts, each weight's embed
    dim, and the norms' and D-sized biases' D, cut into `embed` shards (layout.STATE_DIMS).
    The few leaves with neither (GPT's QKV and MLP-input biases, a router's bias) stay whole in
    parex's step; the ideal program partitions them too, as ZeRO's and FSDP's flat buffers
    partition every parameter (Rajbhandari et al. 2020, §5)."""
    flat = np.where(grid.executor | (not grid.splits_vectors), 1, embed)
    total = np.zeros(len(grid))
    for (e, t, l), n in zip(GROUPS, sizes.groups):
        if n and l:
            total = total + n / ((embed if e else flat) * (grid.tensor if t else 1) * grid.stage)
    # parex's step: the vectors (in the groups without an embed dim) split along D
    vectors = grid.executor & grid.splits_vectors
    total = total + np.where(vectors, sizes.vectors[0] / grid.stage * (1 / embed - 1), 0)
    return total + head_state_elements(sizes, grid, embed)


def _routed_elements(sizes: ModelSizes, grid: Grid, embed) -> np.ndarray:
    """A mixture of experts' routed experts' share of state_elements (0 for a dense model):
    W_in[E_EP, D_embed-shards, F_e,ETP] (EP the expert group, ETP tensor or, folded, 1:
    W_in[E_expert·tensor, D, F_e])."""
    total = np.zeros(len(grid))
    for (e, t), n in zip(ROUTED_GROUPS, sizes.routed):
        if n:
            total = total + n / ((embed if e else 1) * (grid.expert_tensor if t else 1)
                                 * grid.stage * grid.ep)
    return total


def head_state_elements(sizes: ModelSizes, grid: Grid, embed) -> np.ndarray:
    """The embedding's and head's state on the busiest device. Tables split their vocab over
    tensor and their embed dim like every weight (`embed` shards). Pipelines: parex's executor
    also splits them over the stages (Layout.spec); the ideal program keeps the embedding on the
    first stage and the head on the last (Megatron-LM), so the larger of the two counts. Tied
    tables in a pipeline: Megatron-LM keeps a copy of the token table on the last stage (its
    gradient all-reduced with the first's, comm.tied-embedding)."""
    tokens, positions = sizes.embedding
    unembed, final_norm = sizes.head
    if grid.splits_vectors:
        final_norm = final_norm / embed  # split along D like the tables (layout.STATE_DIMS)
    if sizes.tied:
        unembed = np.where(grid.stage > 1, tokens, 0)
    first = (tokens / grid.tensor + positions) / embed
    last = unembed / grid.tensor / embed + final_norm
    whole = first + last
    staged = np.where(grid.executor, (first + last - final_norm) / grid.stage + final_norm,
                      np.maximum(first, last))
    return np.where(grid.stage > 1, staged, whole)


def batch_bytes(grid: Grid) -> np.ndarray:
    """Inputs and targets (int32), split over the batch axes only."""
    return 2 * 4 * (grid.B // grid.dp) * grid.T


# --- activations ---------------------------------------------------------------------------------

def korthikanti_layer_bytes(s, b, h, a, t=1, sp=False, remat="none", dropout=True,
                            flash=False):
    """Bytes of one layer's activations, Korthikanti et al. 2022 (16-bit, with dropout masks).
    `dropout=False`: the same accounting for a model without dropout, which has neither the
    masks (1 byte per element: 2·s·b·h, a·s²·b) nor the dropout's output (2·a·s²·b):
    none s·b·h·(32 + 2·a·s/h), TP s·b·h·(8 + 24/t + 2·a·s/(h·t)), TP + SP s·b·h/t·(32 + 2·a·s/h).
    `flash`: a fused attention kernel keeps no scores (as selective remat) but each row's
    float32 log-sum-exp, 4·a·s·b bytes (4·a/h per s·b·h), split over t with the heads."""
    if remat == "full":
        return 2 * s * b * h
    fixed, scores = (34, 5) if dropout else (32, 2)
    # selective remat recomputes the attention core, whatever its kernel
    attn = 0 if remat == "selective" else np.where(flash, 4 * a / h, scores * a * s / h)
    return np.where(sp, s * b * h / t * (fixed + attn),
                    s * b * h * (fixed - 24 + 24 / t + attn / t))


def korthikanti_layer_formula(sp: bool, remat: str, flash: bool) -> str:
    """korthikanti_layer_bytes of one configuration as text (with dropout), for the Explorer's
    explanation: the formula the predictor evaluates, written once here beside it."""
    if remat == "full":
        return "2·s·b·h (full recompute keeps only the block input)"
    term = "4·a/h" if flash else "5·a·s/h"
    note = (f" (selective recompute drops {term})" if remat == "selective" else
            " (flash attention keeps no scores)" if flash else "")
    attn = "" if remat == "selective" else f" + {term}"
    if sp:
        return f"s·b·h/t·(34{attn}){note}"
    return f"s·b·h·(10 + 24/t{attn}/t){note}"


def xla_layer_elements(sizes: ModelSizes, grid: Grid, remat: str) -> np.ndarray:
    """Elements per token of one layer's saved activations in parex.model.transformer as XLA keeps them."""
    t, sp, h, heads = grid.tensor, grid.sp, sizes.D, grid.heads_split
    if remat == "full":
        return np.where(sp, h / t, h) * np.ones(len(grid))
    # a parallel block has one norm and one residual sum where a sequential one has two: half
    # the D-sized elements (tiny data=8, data=2,tensor=4 (sp=on): 3.6 to 4.3 h fewer measured)
    full_h = np.where(sp, h / t, h) * (4 if sizes.parallel else 8)
    split_h = 2 * (sizes.H + sizes.K) * sizes.Dh / heads  # q, k, v and the attention output
    # ring attention's and flash attention's custom VJPs keep no scores, only the rows'
    # log-sum-exp (one per head); selective remat recomputes either kernel's forward
    scores = 0 if remat == "selective" else np.where(keeps_scores(grid),
                                                     score_elements(sizes, grid),
                                                     sizes.H / heads)
    if sizes.moe:
        return full_h + split_h + scores + moe_elements(sizes, grid)
    return full_h + split_h + 6 * sizes.F / heads + scores


def keeps_scores(grid: Grid) -> np.ndarray:
    """The naive kernel keeps its scores for the backward; ring attention's and flash
    attention's custom VJPs keep only each row's log-sum-exp."""
    return ~((grid.cp == 1) | grid.flash)


def score_elements(sizes: ModelSizes, grid: Grid) -> np.ndarray:
    """Elements per token the naive kernel keeps of one layer's attention: the scores and the
    probabilities of its H/t heads, T of each per query."""
    return 2 * sizes.H / grid.heads_split * grid.T


def moe_elements(sizes: ModelSizes, grid: Grid) -> np.ndarray:
    """A mixture of experts' MLP in parex's dense dispatch (parex.model.moe), elements per token of
    one layer's saved activations, read off tiny-moe's buffer assignment (data=2,expert=4, F_e
    and C varied): per sequence (T, E, C) three times, the dispatch and combine masks (the
    combine is the dispatch weighed by each token's gate per expert,
    routing.dispatch_and_combine) and one temporary of their size at the peak (2 to 4 of them
    across tiny-moe's layouts: within 8 % of the compiled totals),
    the slots on both sides of the all-to-all (E, C, D)
    twice, and the experts' hidden terms as the dense MLP's, 6·(E, C, F_e/t); plus the
    shared experts' (a dense MLP, 6·S·F_e/t per token) and the router's logits and
    probabilities (2·E per token). Folded (expert_tensor=1) the tensor devices split C and hold
    whole experts: every (E, C) term over fold = tensor, the hidden terms F_e over ETP = 1.
    Under seq a device holds T/s tokens and C/s slots, and the combine keeps the experts'
    outputs of all C slots as it gathered them (MeshOps.combine: its mask's gradient needs
    them), E·C·D more per sequence."""
    t, E, C = grid.tensor, sizes.E, sizes.capacity(grid.T)
    per_sequence = E * C / grid.fold * (3 * grid.T + 2 * sizes.D
                                        + 6 * sizes.Fe / grid.expert_tensor)
    gathered = np.where(grid.seq > 1, E * C * sizes.D * grid.seq, 0)
    return (per_sequence + gathered) / grid.T + 6 * sizes.shared_F / t + 2 * E


def layer_bytes(sizes: ModelSizes, grid: Grid, remat: str, rec: Recipe, act_bytes: int,
                precision=None):
    """One layer's saved activations for one microbatch on one device, in bytes; under an FP8
    `precision` (parex.precision) Korthikanti's accounting keeps the GEMM inputs in FP8
    (parex.predict.fp8.saved_input_bytes)."""
    tokens = grid.tokens
    if rec.activations == "korthikanti":
        # the paper's s is the local sequence; CP splits it (tokens = b·T/seq)
        block = korthikanti_layer_bytes(grid.T / grid.seq, grid.b, sizes.D, sizes.H, grid.tensor,
                                        grid.sp.astype(bool), remat,
                                        flash=grid.flash) * np.ones(len(grid))
        if sizes.moe and remat != "full":
            block = block + korthikanti_moe_delta(sizes, grid) * tokens
        return block - fp8_kept_bytes(sizes, grid, remat, precision)
    return xla_layer_elements(sizes, grid, remat) * tokens * act_bytes


def fp8_kept_bytes(sizes: ModelSizes, grid: Grid, remat: str, precision) -> np.ndarray:
    """Bytes one layer's saved activations (one microbatch, Korthikanti's accounting) shed by
    keeping its GEMM inputs in FP8 (parex.predict.fp8.saved_input_bytes); none without an FP8
    `precision` or under full remat, which keeps the block's input alone."""
    if precision is None or remat == "full":
        return np.zeros(len(grid))
    return fp8.saved_input_bytes(sizes, grid, precision) * grid.tokens


def korthikanti_moe_delta(sizes: ModelSizes, grid: Grid) -> np.ndarray:
    """Bytes per token a mixture of experts' MLP keeps beyond Korthikanti et al.'s dense MLP
    (16-bit, with dropout: its input 2h and mask h unsplit, 16h/t for the 4h-wide linear
    output and GELU output; SP splits all of it). A MoE keeps the same input and mask, the
    router's float32 logits (4E), and for each of a token's k assignments its permuted input
    (2h) and its expert's linear outputs and activation output, 2·(n_in + 1)·F_e/t (the
    shared experts likewise, once); dropless and balanced (time.py's imbalance factor is not
    applied to memory)."""
    h, t, sp = sizes.D, grid.tensor, grid.sp.astype(bool)
    dense = np.where(sp, 19 * h / t, 3 * h + 16 * h / t)
    widths = 2 * (sizes.n_mlp_in + 1) / t
    moe = (np.where(sp, 3 * h / t, 3 * h) + 4 * sizes.E
           + sizes.k * (2 * h + widths * sizes.Fe) + widths * sizes.shared_F)
    return moe - dense


def in_flight(grid: Grid) -> np.ndarray:
    """Microbatch-chunks whose activations a pipeline stage holds at its peak, from the schedule
    table (1 without a pipeline: microbatches of gradient accumulation run one after another)."""
    return table_columns(grid)[1]


def activation_bytes(sizes, grid, remat, rec, act_bytes, precision=None):
    """Saved activations at the peak. Without a pipeline: all layers of one microbatch. With
    one: (Korthikanti) the layers of every chunk in flight; (parex) what the executor's buffers
    hold (predict.stash: every chunk in flight, the embedding's and head's residuals, a split
    backward's records and cotangents, the inbox)."""
    per_layer = layer_bytes(sizes, grid, remat, rec, act_bytes, precision)
    chunk_layers = grid.stage_layers / grid.virtual_stages
    piped = grid.stage > 1
    if rec.activations == "korthikanti":
        return per_layer * np.where(piped, chunk_layers * in_flight(grid), sizes.L)
    buffers = stash_bytes(sizes, grid, xla_layer_elements(sizes, grid, remat), act_bytes,
                          remat)
    held = sum(buffers[name] for name in BUFFERS)
    return np.where(piped, held, per_layer * sizes.L)


def temp_bytes(sizes, grid, remat, rec, act_bytes, compute_bytes, precision=None):
    """Transient buffers: the working set of the layer being differentiated (its activations as
    if nothing were rematerialised), the float32 logits, and the compute-dtype copies of the
    weights (bfloat16 runs only) of the parameters a device gathers."""
    working = layer_bytes(sizes, grid, "none", rec, act_bytes, precision)
    logits = LOGIT_COPIES * grid.tokens * sizes.V / grid.tensor * 4
    copies = 0.0
    if compute_bytes < rec.param_bytes:
        copies = compute_bytes * state_elements(sizes, grid, "param")
    # accumulating microbatches keeps a running sum beside each microbatch's gradients, laid out
    # like the parameters (the pipeline executor accumulates in its own buffers, counted above)
    accumulate = np.where((grid.microbatches > 1) & (grid.stage == 1), 1.0, 0.0)
    # the pipeline's switch returns gradient deltas, added into the loop's carry (predict.stash)
    stored_blocks = (state_elements(sizes, grid, "param")
                     - head_state_elements(sizes, grid, grid.embed_shards("param")))
    loop = np.where(grid.executor, loop_grad_elements(sizes, grid, stored_blocks), 0.0)
    return (working + logits + copies
            + pipeline_copies(sizes, grid, remat, rec, act_bytes, compute_bytes,
                              loop * rec.grad_bytes)
            + seq_summed_chunk_elements(grid, stored_blocks) * rec.grad_bytes
            + ring_hop_bytes(sizes, grid)
            + accumulate * state_elements(sizes, grid, "param") * rec.grad_bytes)


def seq_summed_chunk_elements(grid, stored_blocks) -> np.ndarray:
    """seq inside parex's pipeline stages, where XLA partitions it (comm): the op that forms a
    chunk's weight gradients sums them over seq into a buffer of their own while it still holds
    them, one chunk's gradients more (`stored_blocks` / v, in parameters' worth). Read off heavy
    data=2,seq=2,cp=ulysses,stage=2,schedule=1f1b,microbatches=2 (B's all-reduce of its 50 MB
    beside them: 0.89 of the compiled total without)."""
    inside = grid.executor & (grid.stage > 1) & (grid.seq > 1)
    return np.where(inside, stored_blocks / grid.virtual_stages, 0.0)


def ring_hop_bytes(sizes, grid) -> np.ndarray:
    """Ring attention inside parex's pipeline stages sends each hop as an all-to-all of s copies
    (parallel.context._shift_by_all_to_all): the backward's widest hop holds its s copies and
    the s blocks that arrive, of (k, v, dk, dv) in float32 (for s = 2 only (k, v) or (dk, dv))."""
    widest = np.where(grid.seq > 2, 4, 2) * ring_block_elements(sizes, grid) * 4
    return np.where(ring_hops_are_all_to_alls(grid), 2 * grid.seq * widest, 0.0)


def pipeline_copies(sizes, grid, remat, rec, act_bytes, compute_bytes, grads=0.0):
    """parex's pipeline executor (parallel.pipeline): its switch returns new values of the
    buffers and gradient deltas (`grads` bytes), scattered into their slots after it
    (predict.stash.window_bytes), and its ops copy the weights of the chunk they run out of the
    stage's (predict.stash.chunk_weight_bytes)."""
    if rec.activations != "xla":
        return np.zeros(len(grid))
    one = stash_bytes(sizes, grid, xla_layer_elements(sizes, grid, remat), act_bytes,
                      remat)["value"]
    copies = window_bytes(sizes, grid, one, grads) + chunk_weight_bytes(sizes, grid,
                                                                        compute_bytes)
    return np.where(grid.executor, copies, 0.0)


# --- the two peaks: the end of the backward, and the optimizer update ----------------------------

def chunks_gathered_by_hand(grid) -> np.ndarray:
    """Where parex's pipeline gathers each chunk over fsdp itself (parallel.fsdp_stage), not
    layer by layer as XLA does elsewhere."""
    return grid.executor & fsdp_in_stages(grid)


def sharded_layer_bytes(sizes, grid, rec, compute_bytes: int) -> np.ndarray:
    """Where gradients are sharded, the layer being differentiated holds its weights whole and
    its gradient before the reduction that shards it: one layer's parameters (split only by
    tensor) in the gathered (Recipe.gathered_bytes) and the gradient dtypes. A pipeline that
    gathers its chunks by hand holds a whole chunk instead (gathered_chunk_bytes)."""
    layer = sizes.layer_params / grid.tensor + sizes.routed_layer / (grid.tensor * grid.expert)
    by_layer = grid.grads_sharded & ~chunks_gathered_by_hand(grid)
    return np.where(by_layer, (rec.gathered_bytes(compute_bytes) + rec.grad_bytes) * layer, 0.0)


def gathered_chunk_bytes(sizes, grid, act_bytes) -> np.ndarray:
    """fsdp inside pipeline stages, by hand (chunks_gathered_by_hand): each op gathers its whole
    chunk over fsdp, and the op that forms the chunk's gradients holds them whole before it
    reduce-scatters them, both in the compute dtype, on top of the stash and the switch's
    positions. B holds both; split, B holds the weights and W the gradients (and F peaks apart,
    `gathering_forward_bytes`). The model lacked 4.0 MB of tiny-llama fsdp=2,data=2,stage=2
    under full remat (0.78 of the compiled total, now 0.94) and 41 MB of small
    fsdp=2,data=2,stage=2,schedule=1f1b,microbatches=4 (0.67, now 1.01)."""
    held = np.where(split_backward(grid), 1.0, 2.0)
    return np.where(chunks_gathered_by_hand(grid), held * _chunk_bytes(sizes, grid, act_bytes),
                    0.0)


def gathering_forward_bytes(sizes, grid, act_bytes) -> np.ndarray:
    """A split backward's F, where the pipeline gathers the chunk by hand: as it starts, before
    any of the switch's positions is written, it holds the gathered chunk twice, as the
    all-gather lays it out (the gathered dim major) and as the layer loop reads it. The
    transient is the larger of this and the rest. Read off heavy fsdp=4,stage=2,schedule=zbh1,
    microbatches=2 (its 50 MB chunk twice at F's start; 0.87 of the compiled total without,
    1.04 with); fsdp=2,stage=2 and stage=4 and ZB-V check it (0.92, 0.89, 0.92 before)."""
    by_hand = chunks_gathered_by_hand(grid) & split_backward(grid)
    return np.where(by_hand, 2 * _chunk_bytes(sizes, grid, act_bytes), 0.0)


def _chunk_bytes(sizes, grid, act_bytes) -> np.ndarray:
    """A chunk's weights whole over fsdp: stage_layers / v layers, split only by tensor."""
    return act_bytes * sizes.layer_params * grid.stage_layers / (grid.virtual_stages
                                                                 * grid.tensor)


def update_bytes(sizes, grid, rec) -> np.ndarray:
    """The optimizer update's temporaries: float32 buffers the size of a device's optimizer
    state that the update keeps while it reads the clipped gradients and writes the moments and
    parameters in place (`Recipe.update_buffers`: 1 for parex's optax step, 0 for a fused
    in-place Adam)."""
    return rec.update_buffers * 4 * state_elements(sizes, grid, "opt")


def memory_parts(sizes, grid, remat, rec, act_bytes, compute_bytes, precision=None) -> dict:
    """Every part of Prediction.memory_bytes_per_device, as columns. The step peaks either at
    the end of the backward (gradients + saved activations + the transients of the layer being
    differentiated) or during the update (gradients + the update's temporaries; the activations
    are freed by then), whichever is larger; `temp` is what is alive at that peak beyond the
    state and the saved activations (at the update peak: its temporaries − the activations)."""
    params = rec.param_bytes * state_elements(sizes, grid, "param")
    optimizer = rec.optimizer_bytes * state_elements(sizes, grid, "opt") + rec.counters
    grads = rec.grad_bytes * state_elements(sizes, grid, "grad")
    # (xla-cpu) ring attention's step holds the blocks' weight gradients split over seq until
    # the update gathers them, into a buffer the size of update_bytes'
    grads = grads - rec.grad_bytes * seq_sliced_grad_elements(sizes, grid)
    acts = activation_bytes(sizes, grid, remat, rec, act_bytes, precision)
    transient = np.maximum(temp_bytes(sizes, grid, remat, rec, act_bytes, compute_bytes,
                                      precision),
                           sharded_layer_bytes(sizes, grid, rec, compute_bytes))
    transient = np.maximum(transient + gathered_chunk_bytes(sizes, grid, act_bytes),
                           gathering_forward_bytes(sizes, grid, act_bytes))
    if rec.activations == "xla":
        # XLA all-reduces whole gradients over a data axis it cannot make manual (under SP) into
        # a second buffer while the backward still holds the first (sharded gradients are
        # reduce-scattered layer by layer instead: sharded_layer_bytes). Under full remat it
        # keeps one: tiny data=2,seq=2,tensor=2,cp=ulysses,sp=on holds two gradient-sized
        # copies of the blocks in its temp buffer under remat none and one under full.
        second = ((grid.sp > 0) & (grid.data > 1) & ~grid.grads_sharded
                  & (remat != "full"))
        transient = transient + np.where(second, grads, 0.0)
    temp = np.maximum(acts + transient, update_bytes(sizes, grid, rec)) - acts
    argument = params + optimizer + batch_bytes(grid)
    return {"params": params, "grads": grads, "optimizer": optimizer, "activations": acts,
            "temp": temp, "argument": argument, "total": argument + grads + acts + temp}


__all__ = ["RECIPES", "Recipe", "activation_bytes", "fp8_kept_bytes", "in_flight",
           "keeps_scores", "korthikanti_layer_bytes", "memory_parts", "recipe",
           "score_elements", "state_elements", "xla_layer_elements"]
