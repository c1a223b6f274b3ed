"""Compute seconds of one step on a GPU or TPU, kernel by kernel, from published chip numbers.

Matmuls (a roofline per GEMM): an (M, K) @ (K, N) matmul takes
    max(2·M·K·N / (peak · matmul_efficiency),  (M·K + K·N + M·N) · act_bytes / HBM bandwidth)
where matmul_efficiency is the chip's maximum achievable matmul rate over its dense peak, from a
published GEMM benchmark (the profile says which). The projections of a block are compute-bound;
attention's QKᵀ and PV, with K = head_dim and an (s, s) output per head, are close to the memory
roof. Every matmul's backward is two GEMMs of its FLOPs (the input and the weight gradients).

Memory-bound kernels: elements each kernel reads and writes, per token per layer (h the hidden
width, h/t under sequence parallelism; F the MLP width, H the query heads, s the sequence):
    two norms (read, write)                  4·h
    two residual adds (two reads, a write)   6·h     (+ one dropout mask each: 0.5·h)
    bias + GELU, or SwiGLU's gate            2·F/t,  3·F/t
    softmax over the (s, s) scores           2·(H/t)·s   (+ attention dropout: 2.5·(H/t)·s)
with dropout where the recipe's activations say so (Korthikanti et al.'s Megatron-LM block). The
backward moves BACKWARD_BYTES times the forward's bytes (it reads the output gradient and the
saved input and writes the input gradient); a recomputed forward moves them again. Full remat
recomputes the block's forward (Megatron-LM all of it; XLA drops the last matmul as dead code),
selective remat the attention core. Megatron-LM's block also pays its vocab-parallel
cross-entropy's passes over the (tokens, V/t) logits (CROSS_ENTROPY_BYTES each); the head and
the loss run on a pipeline's last stage only (`head_per_microbatch`, which the bubble leaves out).

Both rates are the best a kernel reaches alone; a training step sustains a fraction of them
(kernel boundaries, real shapes, launch gaps): `step_efficiency`, fitted once on named published
runs (parex.predict.published_runs.fit_step_efficiency) and stated in each profile.
"""

from __future__ import annotations

import numpy as np

from .flops import recompute_layers
from .shapes import Grid, ModelSizes

BACKWARD_BYTES = 1.5  # elementwise backward bytes / forward bytes (reads dy and x, writes dx)
# Megatron-LM's vocab-parallel cross-entropy (megatron/mpu/cross_entropy.py, 2021-22, and
# gpt_model.post_language_model_processing), bytes per (token, V/t) logit: the fp16 logits cast
# to fp32 (read 2, write 4); max (4); in-place subtract, exp and divide (8 each); sum (4); the
# backward's in-place multiply by the loss gradient (8) and the cast back to fp16 (4 + 2)
CROSS_ENTROPY_BYTES = 6 + 4 + 8 + 8 + 4 + 8 + 8 + 6
OPTIMIZER_BYTES = 28  # per optimizer-state parameter: read p, g, m, v (16), write p, m, v (12)


def gemm_seconds(M, K, N, count, rate: float, bandwidth: float, act_bytes: int):
    """`count` matmuls of (M, K) @ (K, N) on the roofline: compute or memory, whichever is
    slower."""
    return count * np.maximum(2 * M * K * N / rate, act_bytes * (M * K + K * N + M * N)
                              / bandwidth)


def matmul_shapes(sizes: ModelSizes, grid: Grid, imbalance: float = 1.0) -> list[tuple]:
    """(M, K, N, count) of one block's forward matmuls on one device per microbatch: QKV, W_o,
    the MLP's input(s) and output, then QKᵀ and PV per (sequence, head). A mixture of experts'
    MLP (`moe_shapes`): the shared experts in the MLP's place (count 0 without), then the
    router and the routed experts."""
    t, M, T = grid.tensor, grid.tokens, grid.T
    q, kv = sizes.H * sizes.Dh, sizes.K * sizes.Dh
    per_head = grid.b * sizes.H / t  # attention runs per sequence and head
    F, mlp = (sizes.shared_F, int(sizes.shared_F > 0)) if sizes.moe else (sizes.F, 1)
    shapes = [(M, sizes.D, (q + 2 * kv) / t, 1), (M, q / t, sizes.D, 1),
              (M, sizes.D, F / t, sizes.n_mlp_in * mlp), (M, F / t, sizes.D, mlp),
              (T / grid.seq, sizes.Dh, T, per_head), (T / grid.seq, T, sizes.Dh, per_head)]
    return shapes + (moe_shapes(sizes, grid, imbalance) if sizes.moe else [])


def expert_slots(sizes: ModelSizes, grid: Grid, imbalance: float = 1.0) -> np.ndarray:
    """Slots the busiest local expert processes per microbatch: its C from each of the
    expert·b sequences of its group in parex's padded program (grid.executor; dropless C = T);
    in the ideal one (a grouped GEMM on the tokens routed to it) the balanced k·T/E times
    `imbalance`, the most-loaded expert's load over the mean (an assumption, 1.0 = balanced,
    never fitted), and at most C where a capacity drops the rest."""
    per_sequence = sizes.capacity(grid.T)
    ideal = np.minimum(imbalance * sizes.k * grid.T / sizes.E, per_sequence)
    per_sequence = np.where(grid.executor, per_sequence, ideal)
    return grid.expert * grid.b * per_sequence / grid.seq


def moe_shapes(sizes: ModelSizes, grid: Grid, imbalance: float = 1.0) -> list[tuple]:
    """The router W_r[D, E] on every token; the E/expert local experts, each on `expert_slots`
    slots (SwiGLU's two input matrices, then the output); parex's dense dispatch and combine
    einsums per sequence, (E·C, T) @ (T, D) and (T, E·C) @ (E·C, D) (none in the ideal
    program, which permutes the tokens: memory traffic, `elementwise_elements`)."""
    t, M, EC = grid.tensor, grid.tokens, sizes.E * sizes.capacity(grid.T)
    local, slots = sizes.E / grid.expert, expert_slots(sizes, grid, imbalance)
    einsums = grid.b * grid.executor
    return [(M, sizes.D, sizes.E, 1),
            (slots, sizes.D, sizes.Fe / t, sizes.n_mlp_in * local),
            (slots, sizes.Fe / t, sizes.D, local),
            (EC, grid.T / grid.seq, sizes.D, einsums), (grid.T / grid.seq, EC, sizes.D, einsums)]


def elementwise_elements(sizes: ModelSizes, grid: Grid, dropout: bool,
                         imbalance: float = 1.0) -> tuple:
    """(elements per token of one block's forward memory-bound kernels, of which the attention
    core's), read plus written (module docstring)."""
    t = grid.tensor
    h = np.where(grid.sp, sizes.D / t, sizes.D)
    d = 1.0 if dropout else 0.0
    per_unit = 2.0 if sizes.family == "gpt" else 3.0
    mlp = per_unit * sizes.F / t
    if sizes.moe:  # the shared experts; each of k assignments' activation (the busiest
        #            expert's, `expert_slots`) and its permutation there and back (read, write)
        slots = expert_slots(sizes, grid, imbalance) * sizes.E / grid.expert / grid.tokens
        mlp = per_unit * (sizes.shared_F + slots * sizes.Fe) / t + 4 * slots * sizes.D \
            + 2 * sizes.E
    core = (2.0 + 2.5 * d) * sizes.H / t * grid.T
    return h * (4.0 + 6.0 + d) + mlp + core, core


def layer_seconds(sizes: ModelSizes, grid: Grid, remat: str, rate: float, bandwidth: float,
                  act_bytes: int, megatron: bool, imbalance: float = 1.0) -> np.ndarray:
    """One block per microbatch on one device: forward, backward and any recompute, at the
    kernels' own rates."""
    gemms = [gemm_seconds(M, K, N, c, rate, bandwidth, act_bytes)
             for M, K, N, c in matmul_shapes(sizes, grid, imbalance)]
    forward, core, w_out = sum(gemms), gemms[4] + gemms[5], gemms[3]
    full, selective = recompute_layers(grid, remat)
    # selective remat recomputes the attention core; full remat the whole block, except its
    # last matmul in XLA's program (dead code there: flops.recomputed_block), not in Megatron's
    recomputed = forward - (0.0 if megatron else w_out)
    matmuls = 3 * forward + full * recomputed + selective * core
    elements, core_elements = elementwise_elements(sizes, grid, megatron, imbalance)
    moved = elements * (1 + BACKWARD_BYTES + full) + selective * core_elements
    return matmuls + moved * grid.tokens * act_bytes / bandwidth


def accelerator_compute(model, sizes: ModelSizes, grid: Grid, remat: str, chip, dtype: str,
                        act_bytes: int, opt_elements, megatron: bool = False,
                        imbalance: float = 1.0) -> dict:
    """Seconds per step on a GPU/TPU: the block's and the head's kernels per microbatch and the
    optimizer's memory traffic, divided by the step efficiency the profile states. `megatron`:
    Megatron-LM's block (dropout, whole-block recompute) rather than parex's compiled one;
    `imbalance`: a mixture of experts' most-loaded expert over the mean (`expert_slots`)."""
    rate = chip.peak(dtype) * chip.matmul_efficiency
    bandwidth = chip.hbm_bandwidth
    layer = layer_seconds(sizes, grid, remat, rate, bandwidth, act_bytes, megatron, imbalance)
    # the head: (M, D) @ (D, V/t) forward and its two gradients, and Megatron-LM's loss on the
    # (M, V/t) logits
    logits = grid.tokens * sizes.V / grid.tensor
    head = 3 * gemm_seconds(grid.tokens, sizes.D, sizes.V / grid.tensor, 1, rate, bandwidth,
                            act_bytes) + (CROSS_ENTROPY_BYTES * logits / bandwidth if megatron
                                          else 0.0)
    sustained = chip.step_efficiency
    return {"per_microbatch": (layer * grid.stage_layers + head) / sustained,
            "head_per_microbatch": head / sustained,
            "optimizer": OPTIMIZER_BYTES * opt_elements / bandwidth / sustained,
            "overhead": 0.0}


__all__ = ["BACKWARD_BYTES", "CROSS_ENTROPY_BYTES", "OPTIMIZER_BYTES", "accelerator_compute",
           "elementwise_elements", "expert_slots", "gemm_seconds", "layer_seconds",
           "matmul_shapes", "moe_shapes"]
