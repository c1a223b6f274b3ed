"""What an FP8 precision recipe (parex.precision) changes in a prediction, as columns.

Per block, the FP8 projections are QKV, W_o, the MLP's input(s) and output (`projection_elements`:
D·(q + 2·kv) + q·D + (n_in + 1)·D·F weights per layer, split over tensor). Four things move:

    time     their GEMMs at the chip's FP8 peak (MXFP8: its block-scaled one, Precision.peak)
             times its published FP8 GEMM benchmark's fraction (Chip.fp8_efficiency: Bekman's
             FP8 MAMF, e.g. H100 SXM 1,402.6 of 1,979 TFLOP/s; where none is published, the bf16
             benchmark's fraction), with 1-byte operands on the roofline's memory side; plus
             the casts' memory traffic (`cast_bytes_per_token`)
    memory   delayed scaling's amax histories: 3 · history · 4 bytes per projection per layer,
             replicated (argument memory); the weights' FP8 copies are transients of one layer;
             on an accelerator (Korthikanti et al.'s accounting) the GEMM inputs kept for the
             weight gradients in FP8, one byte where 16 bits were (`saved_input_bytes`)
    comm     FSDP / ZeRO-3's all-gathers of the projections' weights in FP8 (1 byte), for the
             recipes that gather FP8 (tensor scaling: torchao's float8 all-gather, Megatron-Core's
             --fp8-param-gather); the amaxes' all-reduces, one float32 scalar per FP8 tensor
    refusal  a chip without FP8 matmul units, or without MX block scales for mxfp8
             (parex.precision.check_chip)

Casts (Transformer Engine's cast-transpose kernels; torchao's fused casts): each FP8 operand is
read in the compute dtype and written in FP8 twice (itself and its transpose for the other GEMM of
the backward, or MXFP8's rowwise and columnwise copies) (read a, write 2 bytes per element) and,
where the scale comes from a whole tensor's or row's own amax (current and row scaling), read once
more for the amax first (Precision.amax_pass). Delayed scaling reads its scale from the history,
which is why TE defaults to it; block scaling finds each block's amax inside the cast kernel and
writes a scale per block with each copy (float32 per 128 elements, MXFP8's E8M0 byte per 32).
"""

from __future__ import annotations

import numpy as np

from ..precision import Precision

AMAX_BYTES = 4  # one float32 amax per FP8 tensor (TE reduces them in one buffer per step)
HISTORY_BYTES = 4  # float32 amax history entries


def projections(sizes) -> int:
    """FP8 projections per block: QKV, W_o, the MLP's input matrices and its output."""
    return 3 + sizes.n_mlp_in


def projection_elements(sizes, tensor) -> np.ndarray:
    """Weights of one block's FP8 projections on one device (split over tensor)."""
    q, kv = sizes.H * sizes.Dh, sizes.K * sizes.Dh
    F = sizes.shared_F if sizes.moe else sizes.F
    return (sizes.D * (q + 2 * kv) + q * sizes.D + (sizes.n_mlp_in + 1) * sizes.D * F) / tensor


def state_bytes(sizes, grid, precision: Precision) -> np.ndarray:
    """Delayed scaling's histories on one device: x, W and dY per projection of its layers."""
    if not precision.delayed:
        return np.zeros(len(grid))
    per_layer = 3 * precision.history * HISTORY_BYTES * projections(sizes)
    return per_layer * grid.stage_layers * np.ones(len(grid))


def gathered_layer_bytes(sizes, grid, precision: Precision, param_bytes: float) -> np.ndarray:
    """Bytes FSDP gathers of one layer's projections: FP8 where the recipe gathers FP8, else
    the stored parameters' bytes (the other weights of a layer are gathered as they are)."""
    per_element = 1.0 if precision.gathers_fp8 else param_bytes
    return per_element * projection_elements(sizes, grid.tensor)


def amax_reduces(sizes, grid, precision: Precision, fused: bool) -> tuple:
    """(all-reduces per step, bytes each) of the amaxes where a layout shards the tensors
    (n_devices > 1): per projection per layer its x, W and dY, float32 scalars (row and block
    scaling reduce a vector over the contraction's shards, priced as the same scalars).
    `fused`: delayed scaling on a GPU, where Transformer Engine reduces every amax of a
    microbatch in one buffer; otherwise one all-reduce per tensor (torchao's, parex's)."""
    n = np.ones(len(grid))
    if not precision.fp8:
        return 0 * n, AMAX_BYTES * n
    tensors = 3.0 * projections(sizes) * grid.stage_layers * (grid.n_devices > 1)
    if fused and precision.delayed:
        return grid.microbatches * (tensors > 0), AMAX_BYTES * np.maximum(tensors, 1)
    return tensors * grid.microbatches, AMAX_BYTES * n


def saved_input_bytes(sizes, grid, precision: Precision) -> np.ndarray:
    """Bytes per token one block's saved activations shed when the forward keeps its GEMM
    inputs in FP8 for the weight gradients (Precision.saves_fp8_inputs): Transformer Engine's
    LayerNormLinear and LayerNormMLP keep their normed input and the MLP's activation output
    in FP8 (their backward transposes the FP8 copies for the weight GEMMs), one byte per
    element where Korthikanti et al.'s accounting keeps two. Per token: the attention's normed
    input D (whole under tensor parallelism alone, split by SP) and the MLP's, and the
    activation output F/t; a mixture's router reads its normed input in 16 bits, so there it
    is each of the token's k slots' permuted input D and its expert's activation output
    F_e/ETP, and the shared experts' F/t. The attention output, W_o's input, stays 16-bit:
    the fused attention keeps it for its own backward."""
    if not precision.saves_fp8_inputs:
        return np.zeros(len(grid))
    t = grid.tensor
    normed = sizes.D * np.where(grid.sp, 1.0 / t, 1.0)
    if not sizes.moe:
        return 2 * normed + sizes.F / t
    return (normed + sizes.k * (sizes.D + sizes.Fe / grid.expert_tensor)
            + sizes.shared_F / t)


def cast_bytes_per_token(sizes, grid, precision: Precision, act_bytes: int,
                         slots=0.0) -> np.ndarray:
    """Bytes one token moves per block for the casts (module docstring): the projections'
    inputs (D for QKV and the MLP's inputs, q/t and F/t for W_o and W_out) in the forward and
    their outputs' gradients in the backward; a mixture's routed experts (FP8 GEMMs too) cast
    theirs in each of its `slots` on this device (parex.predict.accelerator.slots_per_token,
    k when balanced): D and F_e/ETP in, n_in·F_e/ETP and D out."""
    if not precision.fp8:
        return np.zeros(len(grid))
    t = grid.tensor
    q, kv = sizes.H * sizes.Dh, sizes.K * sizes.Dh
    F = sizes.shared_F if sizes.moe else sizes.F
    mlp = float(F > 0)  # a mixture without shared experts has no dense MLP to cast for
    inputs = sizes.D + q / t + mlp * (sizes.D + F / t)  # QKV's, W_o's, the MLP's x (shared by
    #                                                     its input matrices) and W_out's
    grads = (q + 2 * kv) / t + sizes.D + mlp * (sizes.D + sizes.n_mlp_in * F / t)
    if sizes.moe:
        Fe = sizes.Fe / grid.expert_tensor
        inputs = inputs + slots * (sizes.D + Fe)
        grads = grads + slots * (sizes.n_mlp_in * Fe + sizes.D)
    per_element = act_bytes + 2 + (act_bytes if precision.amax_pass else 0)
    if precision.scaling == "block":  # each copy's scales, one per tile
        per_element += 2 * precision.scale_bytes / precision.tile
    return (inputs + grads) * per_element


__all__ = ["AMAX_BYTES", "amax_reduces", "cast_bytes_per_token", "gathered_layer_bytes",
           "projection_elements", "projections", "saved_input_bytes", "state_bytes"]
