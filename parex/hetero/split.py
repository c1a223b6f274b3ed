"""The two balancing problems of a heterogeneous plan, solved for many rows at once.

Layers over a pipeline's stages (`layer_split`): stage u with n blocks takes e_u + n·c_u seconds
per microbatch and needs f_u + n·w_u bytes; give every stage at least one block, L in all, within
its memory, so that the slowest stage is as fast as possible. The smallest feasible bottleneck τ
is found by bisection on

    Σ_u min(M_u, ⌊(τ − e_u) / c_u⌋) ≥ L,     M_u = ⌊(cap_u − f_u) / w_u⌋,

and the blocks beyond L at that τ come off the slowest stages. Exact up to the bisection's
tolerance (the bottleneck is monotone in τ); rows are independent, padded stages masked.

Microbatches over pipelines (`batch_split`): pipeline i with m microbatches takes about
a_i + (m − 1)·r_i seconds; give each at least one, M in all, so that the slowest pipeline
finishes first: the same bisection on the finishing time, then the surplus off the slowest.
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError

ITERATIONS = 36  # bisection steps: the interval shrinks by 2^-36 (about 1e-11 of it)


def _trim(counts, times, surplus, floor_ok):
    """Remove `surplus` (per row) units from the entries with the largest times, never below
    1 (entries where floor_ok is False cannot give)."""
    counts = counts.copy()
    for _ in range(int(surplus.max(initial=0))):
        give = (surplus > 0)
        if not give.any():
            break
        t = np.where(floor_ok & (counts > 1), times(counts), -np.inf)
        pick = np.argmax(t, axis=1)
        rows = np.nonzero(give & np.isfinite(t.max(axis=1)))[0]
        counts[rows, pick[rows]] -= 1
        surplus = surplus - np.isin(np.arange(len(surplus)), rows)
    return counts


def layer_split(cost, extra, per_block_bytes, fixed_bytes, cap, valid, layers: int):
    """(blocks per stage (R, S) int, feasible (R,) bool, bottleneck seconds (R,)) for R rows of
    up to S stages (valid masks the padding)."""
    cost, extra = np.asarray(cost, float), np.asarray(extra, float)
    valid = np.asarray(valid, bool)
    room = np.floor((np.asarray(cap) - fixed_bytes) / np.maximum(per_block_bytes, 1e-30))
    most = np.where(valid, np.clip(room, 0, layers), 0).astype(np.int64)
    enough = (np.where(valid, most, 1) >= 1).all(axis=1) & (most.sum(axis=1) >= layers)
    enough &= valid.sum(axis=1) <= layers
    c = np.where(valid, cost, 1.0)
    e = np.where(valid, extra, 0.0)
    lo = np.where(valid, e + c, -np.inf).max(axis=1)
    hi = np.where(valid, e + c * np.maximum(most, 1), -np.inf).max(axis=1)

    def count(tau):
        n = np.floor((tau[:, None] - e) / c + 1e-9)
        return np.where(valid, np.clip(n, 1, most), 0)

    for _ in range(ITERATIONS):
        mid = 0.5 * (lo + hi)
        ok = count(mid).sum(axis=1) >= layers
        hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid)
    counts = count(hi).astype(np.int64)
    surplus = np.where(enough, counts.sum(axis=1) - layers, 0)
    counts = _trim(counts, lambda n: e + n * c, surplus, valid)
    bottleneck = np.where(valid, e + counts * c, -np.inf).max(axis=1)
    return counts, enough, bottleneck


def batch_split(first, pace, total):
    """(microbatches per pipeline (R, P) int, finishing time per pipeline (R, P)) for R rows of
    P pipelines taking first + (m − 1)·pace seconds for m microbatches, `total` (R,) per row
    (at least P). Padded pipelines: first = −inf."""
    first, pace = np.asarray(first, float), np.asarray(pace, float)
    total = np.broadcast_to(np.asarray(total), first.shape[:1])
    real = np.isfinite(first)
    P = real.sum(axis=1)
    if (total < P).any():
        raise InputError(f"{int(total.min())} microbatches cannot feed {int(P.max())} pipelines")
    first = np.where(real, first, 0.0)
    pace = np.where(real, pace, 1.0)
    lo = np.where(real, first, -np.inf).max(axis=1)
    hi = np.where(real, first + (total - P + 1)[:, None] * pace, -np.inf).max(axis=1)

    def count(t):
        return np.where(real, 1 + np.floor(np.maximum(t[:, None] - first, 0) / pace + 1e-9), 0)

    for _ in range(ITERATIONS):
        mid = 0.5 * (lo + hi)
        ok = count(mid).sum(axis=1) >= total
        hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid)
    counts = count(hi).astype(np.int64)
    counts = _trim(counts, lambda m: first + (m - 1) * pace, counts.sum(axis=1) - total, real)
    return counts, np.where(real, first + (counts - 1) * pace, -np.inf)


__all__ = ["batch_split", "layer_split"]
