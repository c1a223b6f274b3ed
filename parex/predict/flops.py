"""Predicted FLOPs per device per step: model FLOPs (for MFU), hardware FLOPs (for HFU), and the
count XLA's cost analysis reports.

The causal-attention convention lives in one place, `parex.model.transformer.flops_per_token` (model FLOPs of
forward + backward per token, attention counted in full as in Megatron's papers); every count here
is derived from it, so measurement and prediction share it:
    forward per token = L · layer + head,   layer = 2·(block parameters) + 4·D·T,
    head = 2·(final norm + unembedding),    model FLOPs = 3 · forward  (backward = 2 · forward).
Hardware FLOPs add recomputation: selective remat repeats the attention core's forward (4·D·T per
token per layer), full remat repeats the block forward except its last matmul (W_out: the
backward needs only each op's inputs, so XLA drops it); pipelines recompute nothing beyond that
(parex.parallel.stash). They are the busiest device's: a pipeline's last stage runs the head
beside its layers, so its FLOPs exceed the average by the head's share. A mixture of experts'
model FLOPs count its active parameters (k experts and the router per token); its hardware FLOPs
count what the program runs (`moe_layer_flops`): parex pads every expert to its capacity (E·C
slots per sequence, E·T dropless) and adds the dispatch and combine einsums. Under ring
attention they count the ring's blocks on every hop (`ring_attention_executed`): 2s + 1 blocks of
c × c, c = T/2s, a pass, where the full-T convention counts 4s (T/s queries by T keys).

XLA's cost analysis (the measured `flops_per_device`) counts a while loop's body once, whatever its
trip count: the scan over layers, the scan over microbatches and ring attention's hop loops
each count one iteration (`ring_attention_counted`). Under the "xla-cpu" convention
`xla_counted` reproduces that, and adds the elementwise work XLA counts (norms, activations,
softmax, loss, AdamW) with the per-element costs below.
"""

from __future__ import annotations

import numpy as np

from ..config import ModelConfig
from ..layout import CP_MODES
from ..model.transformer import flops_per_token
from .comm import dispatch_slots
from .memory import state_elements
from .shapes import Grid, ModelSizes, model_sizes

# Elementwise FLOPs XLA's cost analysis counts per element, forward + backward: a non-negative
# least-squares fit, once, to the tiny GPT and Llama compiled steps over the layout presets and
# remat policies (the small model held out: docs/results/2026-12-predict-accuracy.md). A few
# percent of the total.
ELEMENTWISE = {
    "hidden": 125.0,  # per token per layer per hidden unit: norms, residual adds, biases, RoPE
    "mlp": {"gpt": 20.0, "llama": 0.0},  # per MLP unit beyond the above: GELU's tanh form
    "scores": 12.0,  # per attention score: scale, mask, softmax forward and backward
    "vocab": 0.0,  # per logit: XLA folds the cross-entropy into the matmul's fusions
    "optimizer": 20.0,  # per parameter of optimizer state: AdamW moments, decay, update
    "grad": 3.0,  # per gradient element: global-norm clipping
}


def forward_per_token(model: ModelConfig, T: int) -> tuple[float, float]:
    """(one block's forward FLOPs per token, the head's), from model.flops_per_token."""
    head = flops_per_token(model.replace(layers=0), T) / 3
    layer = (flops_per_token(model, T) / 3 - head) / model.layers
    return layer, head


def attention_forward_per_token(model: ModelConfig, T: int, keys=None) -> float:
    """The attention core's share of a block's forward per token: QKᵀ and PV, 2·2·H·Dh FLOPs
    per key, against `keys` keys per query (None: the model FLOPs' model.attended_keys(T))."""
    keys = model.attended_keys(T) if keys is None else keys
    return 4 * model.heads * model.head_dim * keys


def executed_keys(model: ModelConfig, grid: Grid):
    """Keys per query the program computes: the naive kernel all T (a sliding window only masks
    its scores), the flash kernel the window's (its blocks beyond it are skipped; counted in
    full, as causal attention is)."""
    return np.where(grid.flash, model.attended_keys(grid.T), grid.T)


def masked_attention(model: ModelConfig, grid: Grid) -> np.ndarray:
    """FLOPs per token a block's forward computes beyond the model FLOPs: the scores a window
    masks but the naive kernel computes (0 without a window)."""
    return (attention_forward_per_token(model, grid.T, executed_keys(model, grid))
            - attention_forward_per_token(model, grid.T))


def recompute_layers(grid: Grid, remat: str) -> tuple[np.ndarray, np.ndarray]:
    """(block forwards, attention-core forwards) recomputed per layer per microbatch. A recomputed
    block skips its last matmul (W_out): the backward needs only each op's inputs, so XLA drops
    it as dead code (`recomputed_block`)."""
    full = np.full(len(grid), 1.0 if remat == "full" else 0.0)
    # inside parex's pipeline stages context-parallel attention (Ulysses' or the ring) is a
    # nested shard_map whose explicit backward re-runs its forward (parallel.nested): the
    # attention core once more
    nested = (grid.stage > 1) & (grid.seq > 1) & (grid.cp != CP_MODES.index("none")) \
        & grid.executor
    core = np.where(nested, 1.0, 0.0) + (1.0 if remat == "selective" else 0.0)
    return full, core


def passes_per_layer(grid: Grid, remat: str) -> np.ndarray:
    """Forward-equivalents per layer per microbatch: forward, backward (2), recompute (a whole
    block under full remat; the attention core, about a quarter of one, under selective)."""
    full, core = recompute_layers(grid, remat)
    return 3 + full + 0.25 * core


def recomputed_block(model: ModelConfig, T: int) -> float:
    """FLOPs per token of recomputing one block's forward: all but its last matmuls, the MLP's
    output (and, in a parallel block, whose two branches end the block together, W_o too)."""
    last = 2 * model.ffn * model.hidden
    if model.parallel_block:
        last += 2 * model.heads * model.head_dim * model.hidden
    return forward_per_token(model, T)[0] - last


def model_flops(model: ModelConfig, grid: Grid) -> np.ndarray:
    """Model FLOPs per device per step (no recompute): the step's total over the devices."""
    T = grid.T
    return flops_per_token(model, T) * grid.B * T / grid.n_devices


def hardware_flops(model: ModelConfig, grid: Grid, remat: str) -> np.ndarray:
    """Model FLOPs plus recomputation on the busiest device per step: its layers (all of them,
    or a pipeline stage's) and the head, every microbatch."""
    mm = matmul_split(model, grid, remat)
    return grid.microbatches * (grid.stage_layers * mm["layer"] + mm["head"])


def matmul_split(model: ModelConfig, grid: Grid, remat: str) -> dict:
    """Per device, per microbatch: FLOPs of one block (forward + backward + recompute) and of the
    head, after the tensor and sequence splits, every loop trip counted (ring attention's hops
    too). hardware_flops and xla_counted read these."""
    layer, head = forward_per_token(model, grid.T)
    masked = masked_attention(model, grid)
    full, core = recompute_layers(grid, remat)
    attn = attention_forward_per_token(model, grid.T, executed_keys(model, grid))
    split = grid.tokens / grid.tensor
    # ring attention runs its own blocks in place of the kernel's attention core
    ring = np.where(is_ring(grid), ring_attention_executed(model_sizes(model), grid, remat,
                                                           model.dtype)
                    - attention_core(model, grid, remat), 0.0)
    if model.moe:
        return {"layer": moe_layer_flops(model, grid, remat) + ring, "head": 3 * head * split}
    again = full * (recomputed_block(model, grid.T) + masked) + core * attn
    linear = (3 * (layer + masked) + again - (3 + full + core) * attn) * split
    return {"layer": linear + attention_core(model, grid, remat) + ring,
            "head": 3 * head * split}


def attention_core(model: ModelConfig, grid: Grid, remat: str) -> np.ndarray:
    """The attention core's matmuls in one layer per device per microbatch as the kernels count
    them (`executed_keys` per query): forward 4·H·Dh/t per key, backward twice that, and each
    recomputed forward (full or selective remat) once more."""
    full, core = recompute_layers(grid, remat)
    return ((3 + full + core) * grid.tokens / grid.heads_split
            * attention_forward_per_token(model, grid.T, executed_keys(model, grid)))


def moe_forward(model: ModelConfig, grid: Grid) -> dict:
    """One mixture-of-experts block's forward matmuls per device per microbatch, in the program
    the grid describes (comm.dispatch_slots): "dense" the attention, norms and shared experts
    (split by tensor), "shared_out" the shared experts' output matmul, "router" W_r[D, E] (not
    split by tensor), "experts" the routed experts on b·slots slots (F_e split by tensor; parex
    pads every expert to its capacity, E·C slots per sequence, where the ideal program runs
    the k·T assignments), "dispatch" and "combine" parex's dense-dispatch einsums, each
    2·b·T·E·C·D, C split over the tensor devices folded into the expert group (none in the
    ideal program, which permutes tokens instead)."""
    sizes = model_sizes(model)
    layer = forward_per_token(model, grid.T)[0] + masked_attention(model, grid)
    n_mat = sizes.n_mlp_in + 1
    active = sizes.k * 2 * n_mat * sizes.D * sizes.Fe  # the k experts' matrices per token
    router = 2 * sizes.D * sizes.E
    tokens, t = grid.tokens, grid.tensor
    slots = grid.b * dispatch_slots(sizes, grid) / grid.seq
    einsum = 2 * tokens * sizes.E * sizes.capacity(grid.T) / grid.fold * sizes.D * grid.executor
    shared_out = 2 * sizes.shared_F * sizes.D  # per token, apart: full remat skips it
    return {"dense": (layer - active - router - shared_out) * tokens / t,
            "shared_out": shared_out * tokens / t,
            "router": router * tokens,
            "experts": 2 * n_mat * sizes.D * sizes.Fe / t * slots,
            "dispatch": einsum, "combine": einsum}


def moe_layer_flops(model: ModelConfig, grid: Grid, remat: str) -> np.ndarray:
    """A MoE block's executed matmul FLOPs per device per microbatch: forward, backward (twice
    the forward, but the dispatch einsum's: its mask is not differentiated, so only the input
    gradient, once) and recompute. Full remat recomputes all of the forward but the combine
    and the shared experts' output matmul (dead code: the backward needs only their inputs;
    the experts' output is needed, for the gates' gradient); selective the attention core."""
    f = moe_forward(model, grid)
    forward = sum(f.values())
    full, core = recompute_layers(grid, remat)
    attn = (attention_forward_per_token(model, grid.T, executed_keys(model, grid)) * grid.tokens
            / grid.tensor)
    again = full * (forward - f["combine"] - f["shared_out"]) + core * attn
    return 3 * forward - f["dispatch"] + again


def elementwise_flops(sizes: ModelSizes, grid: Grid, remat: str) -> dict:
    """Elementwise FLOPs per device: per microbatch for one layer and for the head, and per step
    for the optimizer (XLA's per-element counts, ELEMENTWISE)."""
    t, heads, tokens = grid.tensor, grid.heads_split, grid.tokens
    hidden = np.where(grid.sp, sizes.D / t, sizes.D)
    mlp = sizes.F
    if sizes.moe:  # the experts' units on their slots, per token, and the shared experts'
        mlp = sizes.shared_F + grid.b * dispatch_slots(sizes, grid) * sizes.Fe / grid.tokens
    per_token = ELEMENTWISE["hidden"] * hidden + ELEMENTWISE["mlp"][sizes.family] * mlp / heads
    opt = (ELEMENTWISE["optimizer"] * state_elements(sizes, grid, "opt")
           + ELEMENTWISE["grad"] * state_elements(sizes, grid, "grad"))
    return {"layer": per_token * tokens + score_elementwise(sizes, grid),
            "head": ELEMENTWISE["vocab"] * sizes.V / t * tokens, "optimizer": opt}


def score_elementwise(sizes: ModelSizes, grid: Grid) -> np.ndarray:
    """Elementwise FLOPs of one layer's attention scores per device per microbatch (scale, mask,
    softmax forward and backward): H/t heads of T scores per query, the full-T convention."""
    return ELEMENTWISE["scores"] * sizes.H / grid.heads_split * grid.T * grid.tokens


def is_ring(grid: Grid) -> np.ndarray:
    """Ring attention (parex.parallel.context) runs the attention core: cp=ring over seq > 1."""
    return (grid.cp == CP_MODES.index("ring")) & (grid.seq > 1)


def ring_blocks(sizes: ModelSizes, grid: Grid) -> tuple[np.ndarray, np.ndarray]:
    """(c²·d·b, the blocks of one pass) of zig-zag ring attention: blocks of c = T/2s query rows
    by c keys, d = H·Dh/t, b sequences. A pass (the forward, or the backward) computes hop 0's
    three blocks of the device's own chunks (two of them diagonal, causal by a mask, computed
    in full) and two unmasked blocks on each of the s − 1 hops: 2s + 1 blocks, the causal half
    of the device's T/s × T scores (2s·c²) plus the masked halves of its two diagonal blocks.
    The full-T convention counts all 4s·c²."""
    c, d = grid.T / (2 * grid.seq), sizes.H * sizes.Dh / grid.heads_split
    return c * c * d * grid.b, 2 * grid.seq + 1


def ring_attention_executed(sizes: ModelSizes, grid: Grid, remat: str,
                            dtype: str = "float32") -> np.ndarray:
    """Ring attention's matmuls in one layer per device per microbatch, every hop counted:
        (4 · (1 + r) + 10) · (2s + 1) · c² · d · b  −  r · 3 · 2 · c² · d · b   (float32),
    a block's forward 4·c²·d (QKᵀ, PV), its backward 10·c²·d (QKᵀ recomputed from the saved
    log-sum-exp, dV = Pᵀ dO, dP = dO Vᵀ, dQ = dS K, dK = dSᵀ Q: flash attention's backward),
    2s + 1 blocks a pass (`ring_blocks`). r counts the forward's re-runs (`recompute_layers`):
    full or selective remat (jax.checkpoint around the custom VJP recomputes its residuals, out
    and lse), a pipeline stage's nested backward. A re-run sits beside the backward, outside
    the hop loops, so in float32 XLA computes hop 0's three QKᵀ once for both (the same q and k
    chunks: the backward's float32 casts are no-ops); in bfloat16 the forward's product is
    bf16's, the backward's float32, and both run."""
    full, core = recompute_layers(grid, remat)
    unit, blocks = ring_blocks(sizes, grid)
    shared = (full + core) * 3 * 2 * unit if dtype == "float32" else 0.0
    return (4 * (1 + full + core) + 10) * blocks * unit - shared


def ring_attention_counted(sizes: ModelSizes, grid: Grid, remat: str) -> np.ndarray:
    """XLA's count of ring attention's matmuls in one layer and microbatch: as
    `ring_attention_executed`, but each hop loop's body once. The forward does 3 own blocks,
    then 2 per hop in a loop of s − 1 hops; the backward 3 own, 2 on hop 1, then 2 per hop in a
    loop of s − 2. (Under remat XLA also counts hop 0's shared QKᵀ once, 6·c²·d·b fewer than
    this, 0.2 % of tiny's count: not modelled here.)"""
    unit, _ = ring_blocks(sizes, grid)
    full, core = recompute_layers(grid, remat)
    forwards = 1 + full + core
    backward_blocks = 5 + 2 * np.minimum(grid.seq - 2, 1)
    return (forwards * 5 * 4 + backward_blocks * 10) * unit


def xla_counted(model: ModelConfig, sizes: ModelSizes, grid: Grid, remat: str) -> np.ndarray:
    """What XLA's cost analysis reports per device: loop bodies once (one layer, and one
    microbatch when microbatches > 1), plus elementwise work. Under ring attention the attention
    core is counted as XLA counts the ring's blocks (`ring_attention_counted`), not every hop."""
    mm, ew = matmul_split(model, grid, remat), elementwise_flops(sizes, grid, remat)
    once = (ring_attention_counted(sizes, grid, remat)
            - ring_attention_executed(sizes, grid, remat, model.dtype))
    layer = mm["layer"] + np.where(is_ring(grid), once, 0.0)
    return layer + mm["head"] + ew["layer"] + ew["head"] + ew["optimizer"]


__all__ = ["ELEMENTWISE", "attention_core", "attention_forward_per_token", "elementwise_flops",
           "executed_keys", "forward_per_token", "hardware_flops", "is_ring", "masked_attention",
           "matmul_split", "model_flops", "moe_forward", "moe_layer_flops", "recomputed_block",
           "ring_attention_counted", "ring_attention_executed", "ring_blocks", "score_elementwise",
           "xla_counted"]
