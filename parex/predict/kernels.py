"""Matmul efficiency by shape: the fraction of dense peak an (M, K) @ (K, N) GEMM reaches.

A GEMM library cuts the (M, N) output into tiles, one thread block each, run over the chip's
compute units (SMs, CUs) in waves (NVIDIA, "Matrix Multiplication Background User's Guide",
docs.nvidia.com/deeplearning/performance: tile and wave quantization). Of the best rate the chip
reaches (its `matmul_efficiency`: the maximum achievable matmul FLOP/s of a published sweep over
shapes, Bekman's MAMF table) a shape keeps

    tiles  = count · ⌈M / t⌉ · ⌈N / t⌉                 (a batched GEMM's instances share waves)
    shape  = count · M · N / (tiles · t²)             (tile quantization: edge tiles part empty)
    fill   = min(1, tiles / units)                    (fewer tiles than units leave units idle)
    efficiency(M, K, N) = matmul_efficiency · shape · fill

with t the library's smallest full-speed tile and the chip's compute units (the profile's `gemm`,
each with its source). Wave quantization past the first wave is left out: the libraries pick
among many tiles, split K and reorder tiles to hide it, and a one-tile model of it moved the
predicted step of Megatron-LM's Table 1 runs by ±8 % with no trend the published times show. K
enters through the roofline (accelerator.gemm_seconds: a small K is memory-bound). A profile
without `gemm` keeps one efficiency for every shape.
"""

from __future__ import annotations

import numpy as np


def quantization(M, N, count, gemm: dict) -> np.ndarray:
    """shape · fill (module docstring) of `count` (M, N) outputs on the chip's `gemm` geometry;
    1 without one."""
    if not gemm:
        return np.ones(np.broadcast(M, N, count).shape)
    t, units = gemm["tile"], gemm["units"]
    M, N = np.maximum(np.asarray(M, dtype=np.float64), 1.0), np.maximum(N, 1.0)
    count = np.maximum(np.asarray(count, dtype=np.float64), 1.0)
    tiles = count * np.ceil(M / t) * np.ceil(N / t)
    return count * M * N / (tiles * t * t) * np.minimum(1.0, tiles / units)


def efficiency(M, N, count, chip) -> np.ndarray:
    """The chip's matmul rate for this shape over its dense peak."""
    return chip.matmul_efficiency * quantization(M, N, count, chip.gemm)


__all__ = ["efficiency", "quantization"]
