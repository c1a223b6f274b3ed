"""What a pipeline stage keeps between its ops, in bytes per device: the predictor's mirror of the
executor's buffers (parex.parallel.timetable), each a number of slots times the bytes of one value.

    res    a chunk's residuals, F to B: its layers' saved activations (memory.xla_layer_elements;
           under a split backward without the weighted ops' inputs, which the records keep; a
           split backward under full remat keeps each layer's input, as the unsplit one does,
           since B's recompute does not read the zero taps (split._tap); layers looped in
           Python also keep their weights, and Ulysses' nested attention no scores)
    emb    the embedding's residuals (its token ids), on the first virtual stage
    head   the head's and loss's: the final norm's input and output, the float32 logits
    rec    a split backward's records: each weighted op's input, F to W
    dtap   a split backward's tap cotangents: each weighted op's output gradient, B to W
    inbox  activations and cotangents received and not yet read, (b, T, D) each, and a trash slot
Slots are the most values one stage holds at once (schedule_stats.buffer_columns). Every device
allocates every buffer (one program for all stages), so the per-device total is the same on each.

Per token per layer, with h the residual width (D/t under SP, else D), t the tensor size, for the
tapped ops only (the norms' weight gradients are formed in B, parex.parallel.split):
    records   2·h + H·Dh/t + F/t           (QKV, W_o, MLP input and W_out inputs)
    cotangents 2·h + (H + 2K)·Dh/t + n·F/t  (their outputs; n MLP input matrices)
"""

from __future__ import annotations

import numpy as np

from ..layout import CP_MODES, partitioned_inside_stages
from .comm import fsdp_in_stages
from .schedule_stats import buffer_columns
from .shapes import Grid, ModelSizes

HEAD_PER_TOKEN = 4  # the final norm's (b, T, D) input, output and two statistics' worth


def record_elements(sizes: ModelSizes, grid: Grid) -> np.ndarray:
    """Inputs of a block's weighted ops, per token (module docstring)."""
    t, h = grid.tensor, residual_width(sizes, grid)
    return 2 * h + sizes.H * sizes.Dh / t + sizes.F / t


def cotangent_elements(sizes: ModelSizes, grid: Grid) -> np.ndarray:
    """Outputs of a block's weighted ops, per token (module docstring)."""
    t, h = grid.tensor, residual_width(sizes, grid)
    return 2 * h + (sizes.H + 2 * sizes.K) * sizes.Dh / t + sizes.n_mlp_in * sizes.F / t


def residual_width(sizes: ModelSizes, grid: Grid) -> np.ndarray:
    """The residual stream's elements per token on one device: D, or D/t under SP."""
    return np.where(grid.sp, sizes.D / grid.tensor, sizes.D)


def stash_bytes(sizes: ModelSizes, grid: Grid, layer_elements, act_bytes: int,
                remat: str = "none") -> dict:
    """Bytes per device of each buffer, all slots (zeros without a pipeline). `layer_elements`:
    per token, what one layer keeps for its unsplit backward (memory.xla_layer_elements)."""
    slots = buffer_columns(grid)
    tokens, layers = grid.tokens, grid.stage_layers / grid.virtual_stages
    split = split_backward(grid)
    rec = record_elements(sizes, grid)
    # split: the records hold the weighted ops' inputs; under full remat the checkpointed layer
    # keeps only the block input (layer_elements), as unsplit
    split_residual = layer_elements if remat == "full" else layer_elements - rec
    residual = np.where(split, split_residual, layer_elements) - nested_scores(sizes, grid, remat)
    per_value = {  # bytes of one value of each buffer
        "res": (layers * residual * tokens * act_bytes
                + looped_weight_bytes(sizes, grid, act_bytes, remat)),
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


def nested_scores(sizes: ModelSizes, grid: Grid, remat: str) -> np.ndarray:
    """Per token, the attention scores and probabilities (2·(H/t)·T) a layer does not keep
    inside a stage under Ulysses: its attention is a nested shard_map (parallel.nested) whose
    backward keeps only the op's inputs and recomputes the rest (remat none; selective and full
    keep no scores anyway). tiny tensor=2,seq=2,stage=2,cp=ulysses,schedule=1f1b,
    microbatches=2: the res slots and their two window copies are 4 MiB each short of them."""
    ulysses = grid.cp == CP_MODES.index("ulysses")
    scores = 2 * sizes.H / grid.tensor * grid.T if remat == "none" else 0.0
    # flash attention keeps none to begin with (memory.xla_layer_elements)
    return np.where(ulysses & (grid.stage > 1) & ~np.asarray(grid.flash), scores, 0.0)


def looped_weight_bytes(sizes: ModelSizes, grid: Grid, act_bytes: int, remat: str):
    """Bytes of the weights one chunk's residuals hold when its layers are looped in Python (sp
    or seq inside stages, parallel.nested): each layer's slice of the stacked blocks is a value
    of its own, not the parameter JAX forwards, so the backward's weights are stashed with every
    microbatch in flight (compute copies split by tensor; gathered over fsdp and ZeRO-3, except
    under full remat, where the checkpointed layer keeps the slice as stored). tiny
    data=2,seq=2,stage=2,zero=2,cp=ulysses,microbatches=4: W_qkv, W_o, W_in and W_out of both
    layers in each of the 4 res slots."""
    looped = (grid.sp > 0) | (grid.seq > 1)
    layers = grid.stage_layers / grid.virtual_stages
    stored = grid.embed_shards("param") if remat == "full" else 1
    return np.where(looped, layers * sizes.layer_params / (grid.tensor * stored) * act_bytes,
                    0.0)


def window_bytes(sizes: ModelSizes, grid: Grid, values: dict, grads=0.0) -> np.ndarray:
    """The tick's copies around its switch (parallel.pipeline.tick), bytes per device, from one
    value of each buffer (`stash_bytes(...)["value"]`) and the gradient deltas (`grads` bytes:
    one chunk's and the embedding's and head's, loop_grad_elements):
        written  the switch's output positions (parallel.outputs), every one held by every
                 branch: outputs of one size and dtype that no branch produces together share
                 one (`shared_positions`; else every output has its own). F's values (res,
                 rec, emb, head) and B's tap cotangents (dtap) are all (layers, b, T, width)
                 leaves, so the smaller branch's fit the larger's positions: max(F, dtap). The
                 gradients (B's, or W's when split) are (layers, D, width) leaves and share with
                 none of them (unless b·T = D by chance), so they come on top. Plus the value
                 the tick sends (one inbox value); branches read the buffers in place
        read     a B's residual slot, copied out of a res buffer of several slots where the
                 chunk's layers are a scan (`scanned_chunk`): the slot becomes the operand of the
                 backward's while loop; a buffer of one slot is read in place (its dynamic index
                 is the buffer)
    Read off XLA's buffer assignment of tiny data=4,stage=2,schedule=1f1b,microbatches=4 (remat
    none: the 6.5 MiB res value written once, its scores read out by dynamic-slice + copy), tiny
    tensor=2,stage=4,schedule=1f1b,microbatches=2 (one layer per chunk: no read copy) and tiny
    data=4,stage=2,schedule=1f1b,microbatches=1 (one res slot: none). F's values beside the
    gradients: heavy stage=2,schedule=1f1b,microbatches=4 (8 layers of hidden 512, 16 tokens)
    holds F's 9.5 MB res value in positions of its own beside the chunk's 50 MB of gradients
    (tiny's b·T = D made its MLP residuals share the gradients' positions)."""
    slots = buffer_columns(grid)
    read = np.where(slots["res"] > 1, values["res"] * scanned_chunk(grid), 0.0)
    forward = values["res"] + values["rec"] + values["emb"] + values["head"]
    shared = np.maximum(forward, values["dtap"]) + grads
    written = np.where(shared_positions(grid), shared, forward + values["dtap"] + grads)
    return np.where(grid.stage > 1, values["inbox"] + read + written, 0.0)


def chunk_weight_bytes(sizes: ModelSizes, grid: Grid, compute_bytes: int) -> np.ndarray:
    """The weights an op copies out of the stage's chunks to run its layers (parallel.pipeline:
    _Context.chunk, _run_layers), bytes per device, in the compute dtype:
        layer  one layer's weights where the chunk's layers are a scan (`scanned_chunk`): the
               loop body's dynamic-slice of the stacked layers is a buffer of its own (XLA:CPU's
               dots read contiguous operands); likewise a chunk of one layer picked out of
               several (v > 1)
        chunk  the whole chunk where it is picked out of several (v > 1) and its layers are a
               scan: the loop's operand is a buffer of its own (as B's residual slot is,
               window_bytes' read); with one chunk per stage the loop reads the stage's weights
               in place
    Layers looped in Python (sp, seq) keep their slices as residuals (looped_weight_bytes).
    Where the pipeline gathers the chunk by hand (fsdp), an op peaks as it starts, holding the
    gathered chunk and buffers for its whole gradients (memory.gathered_chunk_bytes) before
    it slices a layer: none counted. Compute copies as stored (split by tensor, and ZeRO-3).
    Read off heavy data=2,stage=4,schedule=1f1b,microbatches=4 (W_qkv, W_o, W_in,
    W_out of one layer, 12.6 MB, each at an offset of its own in the temp allocation), heavy
    data=2,stage=2,schedule=interleaved,virtual=2,microbatches=4 (the chunk's 25 MB beside
    them) and heavy fsdp=2,stage=2,schedule=1f1b,microbatches=4 (B's peak at its gathers)."""
    looped = (grid.sp > 0) | (grid.seq > 1)
    scanned = scanned_chunk(grid) > 0
    picked = (grid.virtual_stages > 1) & ~looped
    layer = compute_bytes * (sizes.layer_params / grid.tensor + sizes.routed_layer
                             / (grid.tensor * grid.expert)) / grid.embed_shards("param")
    chunk = grid.stage_layers / grid.virtual_stages * layer
    copied = np.where(scanned | picked, layer, 0.0) + np.where(scanned & picked, chunk, 0.0)
    copied = np.where(fsdp_in_stages(grid), 0.0, copied)
    return np.where(grid.stage > 1, copied, 0.0)


def shared_positions(grid: Grid) -> np.ndarray:
    """Where the switch's outputs share positions (parallel.outputs): unless XLA partitions
    values inside the stage (parex.layout.partitioned_inside_stages)."""
    return ~partitioned_inside_stages(grid.tensor, grid.seq, grid.fsdp, grid.data, grid.zero)


def scanned_chunk(grid: Grid) -> np.ndarray:
    """Whether a chunk's layers run as a lax.scan (pipeline._run_layers): more than one layer,
    and not looped in Python (sp or seq inside stages unroll it, parallel.nested)."""
    looped = (grid.sp > 0) | (grid.seq > 1)
    return np.where(~looped & (grid.stage_layers / grid.virtual_stages > 1), 1.0, 0.0)


def loop_grad_elements(sizes: ModelSizes, grid: Grid, stored) -> np.ndarray:
    """Gradient buffers of the tick loop beyond the step's gradients, in parameters' worth: the
    switch's outputs, one chunk's d_blocks (`stored`, the block parameters this device stores,
    over v) and a d_head delta the size of the embedding and head gathered over the stages
    (parallel.pipeline._outputs), added into the carried g_blocks and g_head after the switch.
    Read off tiny data=4,stage=2,schedule=1f1b,microbatches=4: one chunk-gradient-sized value
    beside the carry."""
    tokens, positions = sizes.embedding
    unembed, final_norm = sizes.head
    head = (tokens + unembed) / grid.tensor + positions + final_norm
    return np.where(grid.stage > 1, head + stored / grid.virtual_stages, 0.0)


def split_backward(grid: Grid) -> np.ndarray:
    """Where the schedule splits the backward into B and W (parallel.schedules.SPLIT)."""
    return np.isin(grid.schedule, _split_codes())


def _split_codes():
    from ..parallel.schedules import SCHEDULES, SPLIT

    return [SCHEDULES.index(name) for name in SPLIT]


__all__ = ["chunk_weight_bytes", "cotangent_elements", "loop_grad_elements", "record_elements", "scanned_chunk",
           "split_backward", "stash_bytes", "window_bytes"]
