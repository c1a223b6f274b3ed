"""Compute seconds of one step on a GPU or TPU, kernel by kernel, from published chip numbers.

Matmuls (a roofline per GEMM): an (M, K) @ (K, N) matmul takes
    max(2·M·K·N / (peak · matmul_efficiency · q),  (M·K + K·N + M·N) · act_bytes / HBM bandwidth)
where matmul_efficiency is the chip's maximum achievable matmul rate over its dense peak, from a
published GEMM benchmark (the profile says which), and q the share of it the shape keeps (its
tiles on the chip's units: parex.predict.kernels). The projections of a block are compute-bound;
attention's QKᵀ and PV, with K = head_dim and an (s, s) output per head, are close to the memory
roof. Every matmul's backward is two GEMMs of its FLOPs (the input and the weight gradients).
"HBM bandwidth" here and below is the achievable one, the datasheet's times the chip's
hbm_efficiency from a published memory benchmark (Chip.achievable_bandwidth; 1 without one).

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

Attention under the fused kernel (grid.flash, FlashAttention-2/3, cuDNN): no (s, s) scores in
memory, the softmax inside the kernel, so neither QKᵀ/PV GEMMs nor softmax traffic; the kernel's
FLOPs at its own published rate (the profile's `flash_attention`: a fraction of dense peak by
pass, head dim and sequence length, from FlashAttention-2's A100 and FlashAttention-3's H100
benchmarks; other chips scaled from those by their matmul efficiency, `flash_table`):
    forward   F = 4·s_q·s·Dh · b·H/t / 2 (QKᵀ and PV; the causal kernel skips masked blocks)
    backward  2.5·F                      (QKᵀ again, dV, dP, dQ, dK: 5 GEMMs to the forward's 2)
FLOPs counted as the benchmarks count them (causal: half the scores), so the published rates
apply as they are; a recomputed forward (full or selective remat) runs the kernel once more.
The non-matmul work (norms, residual adds, activations, the optimizer's update) stays
memory-bound at HBM bandwidth under either kernel. The optimizer moves OPTIMIZER_BYTES per
parameter (a fused Adam), MEGATRON_OPTIMIZER_BYTES in Megatron-LM's mixed-precision step.

Both rates are the best a kernel reaches alone; a training step sustains a fraction of them
(kernel boundaries, real shapes, launch gaps): `step_efficiency`, fitted once on named published
runs (parex.predict.published_runs.fit_step_efficiency) and stated in each profile.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..hardware import Chip, load_chip
from ..layout import CP_MODES
from . import kernels
from .flops import recompute_layers
from .stragglers import SPEED_SIGMA
from .shapes import Grid, ModelSizes

BACKWARD_BYTES = 1.5  # elementwise backward bytes / forward bytes (reads dy and x, writes dx)
# Megatron-LM's vocab-parallel cross-entropy (megatron/mpu/cross_entropy.py, 2021-22, and
# gpt_model.post_language_model_processing), bytes per (token, V/t) logit: the fp16 logits cast
# to fp32 (read 2, write 4); max (4); in-place subtract, exp and divide (8 each); sum (4); the
# backward's in-place multiply by the loss gradient (8) and the cast back to fp16 (4 + 2)
CROSS_ENTROPY_BYTES = 6 + 4 + 8 + 8 + 4 + 8 + 8 + 6
OPTIMIZER_BYTES = 28  # per optimizer-state parameter: read p, g, m, v (16), write p, m, v (12)
# Megatron-LM's mixed-precision step (megatron/optimizer/optimizer.py, 2021-22,
# Float16OptimizerWithFloat16Params.step), bytes per parameter: copy the 16-bit gradient to the
# fp32 main gradient (read 2, write 4), unscale and check for inf/nan (read 4, write 4), the
# gradient norm for clipping (read 4), Adam on p, g, m, v (28), copy the fp32 weights back to
# the 16-bit model (read 4, write 2)
MEGATRON_OPTIMIZER_BYTES = 6 + 8 + 4 + OPTIMIZER_BYTES + 6
# matmul_shapes' GEMMs an FP8 recipe runs in FP8: QKV, W_o, the MLP's input(s) and output, and a
# mixture's routed experts (DeepSeek-V3's FP8 experts); QKᵀ, PV and the router stay 16-bit
FP8_GEMMS = (0, 1, 2, 3, 7, 8)
FLASH_BACKWARD = 2.5  # the fused kernel's backward FLOPs / its forward's (5 GEMMs to 2)
FLASH_PASSES = ("forward", "backward", "forward_backward")
FLASH_FALLBACK = "a100-80gb"  # a profile without a flash_attention table is assumed like it


def gemm_seconds(M, K, N, count, rate: float, bandwidth: float, act_bytes: int,
                 gemm: dict | None = None):
    """`count` matmuls of (M, K) @ (K, N) on the roofline: compute or memory, whichever is
    slower; the compute at `rate` kept by the shape's tile and wave quantization on the chip's
    `gemm` geometry (parex.predict.kernels; none without one)."""
    rate = rate * kernels.quantization(M, N, count, gemm or {})
    return count * np.maximum(2 * M * K * N / rate, act_bytes * (M * K + K * N + M * N)
                              / bandwidth)


ATTENTION_CORE = 4  # matmul_shapes' index of QKᵀ (PV follows it)


def matmul_shapes(sizes: ModelSizes, grid: Grid, imbalance: float = 1.0) -> list[tuple]:
    """(M, K, N, count) of one block's forward matmuls on one device per microbatch: QKV, W_o,
    the MLP's input(s) and output, then QKᵀ and PV per (sequence, head). A mixture of experts'
    MLP (`moe_shapes`): the shared experts in the MLP's place (count 0 without), then the
    router and the routed experts."""
    t, M, T = grid.tensor, grid.tokens, grid.T
    q, kv = sizes.H * sizes.Dh, sizes.K * sizes.Dh
    per_head = grid.b * sizes.H / grid.heads_split  # attention runs per sequence and head
    F, mlp = (sizes.shared_F, int(sizes.shared_F > 0)) if sizes.moe else (sizes.F, 1)
    shapes = [(M, sizes.D, (q + 2 * kv) / t, 1), (M, q / t, sizes.D, 1),
              (M, sizes.D, F / t, sizes.n_mlp_in * mlp), (M, F / t, sizes.D, mlp),
              (T / grid.seq, sizes.Dh, T, per_head), (T / grid.seq, T, sizes.Dh, per_head)]
    return shapes + (moe_shapes(sizes, grid, imbalance) if sizes.moe else [])


def expert_slots(sizes: ModelSizes, grid: Grid, imbalance: float = 1.0) -> np.ndarray:
    """Slots the busiest local expert processes per microbatch: its C from each of the
    expert·b sequences of its group in parex's padded program (grid.executor; dropless C = T;
    folded, C/t from each of expert·t·b, the same count);
    in the ideal one (a grouped GEMM on the tokens routed to it) the balanced k·T/E times
    `imbalance`, the most-loaded expert's load over the mean (an assumption, 1.0 = balanced,
    never fitted), and at most C where a capacity drops the rest."""
    per_sequence = sizes.capacity(grid.T)
    ideal = np.minimum(imbalance * sizes.k * grid.T / sizes.E, per_sequence)
    per_sequence = np.where(grid.executor, per_sequence, ideal)
    return grid.expert * grid.b * per_sequence / grid.seq


def slots_per_token(sizes: ModelSizes, grid: Grid, imbalance: float = 1.0) -> np.ndarray:
    """Expert slots this device runs per token it holds: its E/EP local experts' `expert_slots`
    over its tokens (k on a balanced dropless layout)."""
    return expert_slots(sizes, grid, imbalance) * sizes.E / grid.ep / grid.tokens


def moe_shapes(sizes: ModelSizes, grid: Grid, imbalance: float = 1.0) -> list[tuple]:
    """The router W_r[D, E] on every token; the E/EP local experts, each on `expert_slots`
    slots, F_e split over ETP (SwiGLU's two input matrices, then the output); parex's dense
    dispatch and combine einsums per sequence, (E·C, T) @ (T, D) and (T, E·C) @ (E·C, D), C
    split over the tensor devices a folded layout adds to the expert group (none in the ideal
    program, which permutes the tokens: memory traffic, `elementwise_elements`)."""
    t, M = grid.expert_tensor, grid.tokens
    EC = sizes.E * sizes.capacity(grid.T) / grid.fold
    local, slots = sizes.E / grid.ep, expert_slots(sizes, grid, imbalance)
    einsums = grid.b * grid.executor
    return [(M, sizes.D, sizes.E, 1),
            (slots, sizes.D, sizes.Fe / t, sizes.n_mlp_in * local),
            (slots, sizes.Fe / t, sizes.D, local),
            (EC, grid.T / grid.seq, sizes.D, einsums), (grid.T / grid.seq, EC, sizes.D, einsums)]


def elementwise_elements(sizes: ModelSizes, grid: Grid, dropout: bool,
                         imbalance: float = 1.0) -> tuple:
    """(elements per token of one block's forward memory-bound kernels, of which the attention
    core's), read plus written (module docstring)."""
    t, heads = grid.tensor, grid.heads_split
    h = np.where(grid.sp, sizes.D / t, sizes.D)
    d = 1.0 if dropout else 0.0
    per_unit = 2.0 if sizes.family == "gpt" else 3.0
    mlp = per_unit * sizes.F / heads
    if sizes.moe:  # the shared experts; each of k assignments' activation (the busiest
        #            expert's, `expert_slots`) and its permutation there and back (read, write)
        # (folded: E/EP local experts of width F_e/ETP, their slots' D not split by tensor)
        slots = slots_per_token(sizes, grid, imbalance)
        mlp = (per_unit * (sizes.shared_F / t + slots * sizes.Fe / grid.expert_tensor)
               + 4 * slots * sizes.D + 2 * sizes.E)
    core = (2.0 + 2.5 * d) * sizes.H / heads * grid.T
    return h * (4.0 + 6.0 + d) + mlp + core, core


@lru_cache(maxsize=8)
def _published_table(name: str) -> tuple[dict, float]:
    """(a shipped profile's own flash_attention table, its matmul efficiency)."""
    chip = load_chip(name)
    if not chip.flash_attention or "assumed_from" in chip.flash_attention:
        raise ValueError(f"profile {name!r} has no published flash_attention table to scale")
    return chip.flash_attention, chip.matmul_efficiency


def flash_table(chip: Chip) -> dict:
    """The fused attention kernel's efficiency table of `chip`: its own published one, or, where
    the profile says {"assumed_from": profile} (or has none: FLASH_FALLBACK), that profile's
    scaled by the ratio of the two chips' matmul efficiencies (the kernel reaches the same
    fraction of the chip's best GEMM rate; an assumption the profile states)."""
    table = chip.flash_attention or {"assumed_from": FLASH_FALLBACK}
    if "assumed_from" not in table:
        return table
    base, base_matmul = _published_table(table["assumed_from"])
    factor = chip.matmul_efficiency / base_matmul
    return base | {p: {d: [factor * e for e in row] for d, row in base[p].items()}
                   for p in FLASH_PASSES if p in base}


def flash_efficiency(table: dict, which: str, head_dim: int, seq) -> np.ndarray:
    """The kernel's rate / dense peak for one pass ("forward" or "backward"; a table that
    publishes them together only has "forward_backward"), bilinear in log2(sequence length)
    and log2(head dim) over the table, flat beyond its ends."""
    rows = table.get(which) or table["forward_backward"]
    dims = sorted(rows, key=int)
    log_dims = np.log2([int(d) for d in dims])
    at_head_dim = [np.interp(np.log2(head_dim), log_dims, [rows[d][k] for d in dims])
                   for k in range(len(table["seq"]))]
    return np.interp(np.log2(np.asarray(seq, dtype=float)), np.log2(table["seq"]), at_head_dim)


def flash_seconds(sizes: ModelSizes, grid: Grid, peak: float, table: dict) -> tuple:
    """(forward, backward) seconds of the fused attention kernel in one block per microbatch on
    one device: s_q = T/seq queries per device against the keys they see (causal: half the T;
    a sliding window: about W, ModelSizes.visible_keys), b·H/t heads, each pass at its
    published rate for the kernel's sequence (a ring hop's T/seq under ring attention, T
    otherwise: Ulysses attends whole sequences)."""
    keys = sizes.visible_keys(grid.T)
    forward = 4 * (grid.T / grid.seq) * keys * sizes.Dh * grid.b * sizes.H / grid.heads_split
    ring = grid.cp == CP_MODES.index("ring")
    seq = np.where(ring, grid.T / grid.seq, grid.T)
    return (forward / (peak * flash_efficiency(table, "forward", sizes.Dh, seq)),
            FLASH_BACKWARD * forward / (peak * flash_efficiency(table, "backward", sizes.Dh, seq)))


def layer_seconds(sizes: ModelSizes, grid: Grid, remat: str, rate: float, bandwidth: float,
                  act_bytes: int, megatron: bool, imbalance: float = 1.0,
                  flash: tuple | None = None, gemm: dict | None = None,
                  fp8: tuple | None = None) -> np.ndarray:
    """One block per microbatch on one device: forward, backward and any recompute, at the
    kernels' own rates (`gemm`: the chip's tile geometry, kernels.quantization). Under
    grid.flash the attention core is the fused kernel, `flash` = (dense peak FLOP/s, the chip's
    flash_table); otherwise QKᵀ and PV are roofline GEMMs and the softmax moves the (s, s)
    scores. `fp8` = (FP8 FLOP/s, the casts' bytes per token): the projections and the routed
    experts (FP8_GEMMS) run there on 1-byte operands (parex.predict.fp8)."""
    shapes = matmul_shapes(sizes, grid, imbalance)
    gemms = [gemm_seconds(M, K, N, c, rate, bandwidth, act_bytes, gemm)
             if fp8 is None or i not in FP8_GEMMS else
             gemm_seconds(M, K, N, c, fp8[0], bandwidth, 1, gemm)
             for i, (M, K, N, c) in enumerate(shapes)]
    forward, core, w_out = sum(gemms), gemms[4] + gemms[5], gemms[3]
    full, selective = recompute_layers(grid, remat)
    # selective remat recomputes the attention core; full remat the whole block, except its
    # last matmul in XLA's program (dead code there: flops.recomputed_block), not in Megatron's
    recomputed = forward - (0.0 if megatron else w_out)
    elements, core_elements = elementwise_elements(sizes, grid, megatron, imbalance)
    if grid.flash:
        if flash is None:
            raise ValueError("a flash-attention grid needs flash=(peak, flash_table(chip))")
        kernel_forward, kernel_backward = flash_seconds(sizes, grid, *flash)
        matmuls = (3 * (forward - core) + full * (recomputed - core)
                   + (1 + full + selective) * kernel_forward + kernel_backward)
        moved = (elements - core_elements) * (1 + BACKWARD_BYTES + full)
    else:
        matmuls = 3 * forward + full * recomputed + selective * core
        moved = elements * (1 + BACKWARD_BYTES + full) + selective * core_elements
    casts = 0.0 if fp8 is None else fp8[1] * grid.tokens * (1 + full)
    return matmuls + (moved * grid.tokens * act_bytes + casts) / bandwidth


def accelerator_compute(model, sizes: ModelSizes, grid: Grid, remat: str, chip, dtype: str,
                        act_bytes: int, opt_elements, megatron: bool = False,
                        imbalance: float = 1.0, fp8: tuple | None = None) -> dict:
    """Seconds per step on a GPU/TPU: the block's and the head's kernels per microbatch and the
    optimizer's memory traffic (Megatron-LM's mixed-precision step under `megatron`), divided
    by the step efficiency the profile states, and the spread of device speeds the step's
    stragglers come from (`speed_sigma`, stragglers.py). `megatron`: Megatron-LM's block
    (dropout, whole-block recompute) rather than parex's compiled one; `imbalance`: a mixture
    of experts' most-loaded expert over the mean (`expert_slots`); `fp8`: layer_seconds'."""
    rate = chip.peak(dtype) * chip.matmul_efficiency
    bandwidth = chip.achievable_bandwidth()
    flash = (chip.peak(dtype), flash_table(chip)) if grid.flash else None
    layer = layer_seconds(sizes, grid, remat, rate, bandwidth, act_bytes, megatron, imbalance,
                          flash, chip.gemm, fp8)
    # the head: (M, D) @ (D, V/t) forward and its two gradients, and Megatron-LM's loss on the
    # (M, V/t) logits; M every token, or a ViT's class tokens (one row per image)
    rows = grid.tokens if not sizes.readout_rows else grid.tokens / grid.T * sizes.readout_rows
    logits = rows * sizes.V / grid.tensor
    head = 3 * gemm_seconds(rows, sizes.D, sizes.V / grid.tensor, 1, rate, bandwidth,
                            act_bytes, chip.gemm) + (CROSS_ENTROPY_BYTES * logits / bandwidth
                                                     if megatron else 0.0)
    sustained = chip.step_efficiency
    step_bytes = MEGATRON_OPTIMIZER_BYTES if megatron else OPTIMIZER_BYTES
    sigma = SPEED_SIGMA if chip.speed_variation is None else chip.speed_variation
    return {"per_microbatch": (layer * grid.stage_layers + head) / sustained,
            "head_per_microbatch": head / sustained,
            "optimizer": step_bytes * opt_elements / bandwidth / sustained,
            "overhead": 0.0, "speed_sigma": sigma}


__all__ = ["ATTENTION_CORE", "BACKWARD_BYTES", "CROSS_ENTROPY_BYTES", "FLASH_BACKWARD",
           "FLASH_FALLBACK", "MEGATRON_OPTIMIZER_BYTES", "OPTIMIZER_BYTES", "accelerator_compute",
           "elementwise_elements", "expert_slots", "flash_efficiency", "flash_seconds",
           "flash_table", "gemm_seconds", "layer_seconds", "matmul_shapes", "moe_shapes",
           "slots_per_token"]
