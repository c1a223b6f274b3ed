"""The attention kernels: causal softmax(QKᵀ/√Dh)V, materialised (`naive`) or blockwise (`flash`).

naive   one einsum for the (B, H, T, T) scores, a softmax, a second einsum. Autodiff keeps the
        probabilities for the backward: 2·H·T² elements per sequence and layer (scores and
        probabilities), the a·s²·b terms of Korthikanti et al. 2022's activation formula.
flash   the FlashAttention algorithm (Dao et al. 2022; Dao 2023, FlashAttention-2) over blocks
        of c rows: each query block meets the key blocks at or before it, one loop over the
        n(n + 1)/2 blocks at or below the diagonal (fully masked causal blocks are never
        computed; under a sliding window only those it reaches, `block_pairs`), accumulating the softmax online (running row max m, row sum l, unnormalised
        output o). A custom VJP keeps only q, k, v, the output
        and each row's log-sum-exp lse = m + log l, and the backward recomputes every block's
        probabilities P = exp(S − lse). What a layer keeps is O(T) per row; the (c × c) block of
        the loop is the only score-sized buffer. The price is the backward's recompute of QKᵀ
        (hardware FLOPs above the model FLOPs). On a GPU, with 16-bit inputs, `flash` asks
        `jax.nn.dot_product_attention` for cuDNN's fused kernel and falls back to the blockwise
        one where the platform has none.

The block functions (`attend`, `merge`, `block_grads`) are also ring attention's per-hop kernel
(parex.parallel.context): one kernel, two uses.
Shapes: q (B, T, H, Dh); k, v (B, T, K, Dh), each KV head serving G = H/K query heads; inside
the blocks q is (B, c, K, G, Dh) so a KV head is never repeated.
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

NEG_INF = -1e30  # the masked-score fill: exp(NEG_INF − m) is exactly 0 in float32
BLOCK = 128  # rows per block of the blockwise kernel (queries and keys)


# --- naive: the scores materialised ----------------------------------------------------------

def naive_attention(q, k, v, window: int | None = None, causal: bool = True):
    """Causal softmax(QKᵀ/√Dh)V. q (B, T, H, Dh); k, v (B, T, K, Dh); each KV head serves H/K
    query heads. The (B, H, T, T) scores are what selective recompute drops; a sliding window
    only masks them (all T² are computed)."""
    B, T, H, Dh = q.shape
    K = k.shape[2]
    q = q.reshape(B, T, K, H // K, Dh)
    scores = jnp.einsum("btkgd,bskd->bkgts", q, k).astype(jnp.float32) / math.sqrt(Dh)
    # an additive mask: its backward needs no (T, T) residual, unlike jnp.where's
    rows = jnp.arange(T)
    if causal:
        scores = scores + jnp.where(visible(rows, rows, window), 0.0, NEG_INF)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    return jnp.einsum("bkgts,bskd->btkgd", probs, v).reshape(B, T, H, Dh)


# --- one block: the shared kernel ------------------------------------------------------------

def scores(q, k, mask=None):
    """q (B, Tq, K, G, Dh), k (B, Tk, K, Dh) -> scaled scores (B, K, G, Tq, Tk) in float32;
    where `mask` (Tq, Tk) is False, NEG_INF."""
    s = jnp.einsum("btkgd,bskd->bkgts", q, k).astype(jnp.float32) / math.sqrt(q.shape[-1])
    return s if mask is None else jnp.where(mask, s, NEG_INF)


def causal_mask(c: int):
    """A diagonal block (a chunk against itself): row r sees columns ≤ r."""
    return jnp.tril(jnp.ones((c, c), bool))


def visible(query_pos, key_pos, window: int | None = None):
    """(Tq, Tk) mask of the keys each query sees: key ≤ query, and with a sliding window W the
    query itself and the W − 1 positions before it (query − key < W)."""
    distance = query_pos[:, None] - key_pos[None, :]
    return (distance >= 0) if window is None else (distance >= 0) & (distance < window)


def attend(q, k, v, mask=None):
    """One block's share of the softmax: (row max m, row sum l, unnormalised output o);
    m, l (B, K, G, Tq), o (B, K, G, Tq, Dh) in float32."""
    s = scores(q, k, mask)
    m = s.max(-1)
    p = jnp.exp(s - m[..., None])
    o = jnp.einsum("bkgts,bskd->bkgtd", p.astype(v.dtype), v).astype(jnp.float32)
    return m, p.sum(-1), o


def merge(acc, new):
    """Combine two partial softmaxes over disjoint key sets: rescale both to the larger max."""
    (m1, l1, o1), (m2, l2, o2) = acc, new
    m = jnp.maximum(m1, m2)
    a1, a2 = jnp.exp(m1 - m), jnp.exp(m2 - m)
    return m, l1 * a1 + l2 * a2, o1 * a1[..., None] + o2 * a2[..., None]


def block_grads(rows, k, v, mask=None):
    """(dq, dk, dv) of one block. rows = (q, dO, lse, δ) of its query rows, float32:
    P = exp(S − lse), dV = Pᵀ dO, dS = P ∘ (dO Vᵀ − δ), dQ = dS K / √Dh, dK = dSᵀ Q / √Dh, with
    δ = rowsum(dO ∘ O). q, dO (B, Tq, K, G, Dh); lse, δ (B, K, G, Tq); k, v (B, Tk, K, Dh)."""
    q, do, lse, delta = rows
    p = jnp.exp(scores(q, k, mask) - lse[..., None])  # (B, K, G, Tq, Tk)
    dv = jnp.einsum("bkgts,btkgd->bskd", p, do)
    ds = p * (jnp.einsum("btkgd,bskd->bkgts", do, v) - delta[..., None]) / math.sqrt(q.shape[-1])
    return (jnp.einsum("bkgts,bskd->btkgd", ds, k), jnp.einsum("bkgts,btkgd->bskd", ds, q), dv)


# --- flash: the blocks in loops, under a custom VJP --------------------------------------------

def _blocks(x, c):
    """(B, T, ...) -> (T/c, B, c, ...): the block index first, for the loops."""
    return jnp.moveaxis(x.reshape(x.shape[0], x.shape[1] // c, c, *x.shape[2:]), 1, 0)


def _unblocks(x):
    """(n, B, c, ...) -> (B, n·c, ...)."""
    x = jnp.moveaxis(x, 0, 1)
    return x.reshape(x.shape[0], -1, *x.shape[3:])


def _mask(i, j, c, window):
    """The mask of query block i against key block j ≤ i: causal on the diagonal, the window's
    edge on the farthest blocks, else none."""
    rows = jnp.arange(c)
    return visible(i * c + rows, j * c + rows, window)


def window_blocks(c: int, window: int | None, n: int) -> int:
    """Key blocks before its own that a query block meets: all earlier ones, or under a window
    W those within reach, ⌈(W − 1)/c⌉ (the nearest query of block i is i·c, the farthest key of
    block i − d is (i − d)·c + c − 1)."""
    return n - 1 if window is None else min(n - 1, -(-(window - 1) // c))


def block_pairs(n: int, c: int, window: int | None = None) -> np.ndarray:
    """The (query block i, key block j) pairs that hold a visible score, row by row: those at or
    below the diagonal (n(n + 1)/2 of the n² blocks) and, under a window, within
    `window_blocks` of it, so the fully masked ones are never visited. One loop of a known trip
    count over them (not a loop per row), so that the compiled step's matmuls can be counted
    per step (parex.measure.hlo). Returns (pairs, 2)."""
    i, j = np.tril_indices(n)
    near = i - j <= window_blocks(c, window, n)
    return np.stack([i[near], j[near]], 1)


def _pairs(n: int, c: int, window):
    """block_pairs as arrays (i, j, first): `first` marks each row's first pair."""
    pairs = block_pairs(n, c, window)
    first = np.r_[True, pairs[1:, 0] != pairs[:-1, 0]]
    return jnp.asarray(pairs[:, 0]), jnp.asarray(pairs[:, 1]), jnp.asarray(first)


def _varying(values, *like):
    """`values` (a pytree of constants) varying over the manual mesh axes that any of `like`
    varies over: inside shard_map a loop's carry must vary as its body's output does."""
    axes = set().union(*(_vma(jax.typeof(x)) for x in like))
    if not axes:
        return values
    return jax.tree.map(lambda x: jax.lax.pcast(x, tuple(sorted(axes)), to="varying"), values)


def _vma(aval) -> frozenset:
    """The manual axes an aval varies over (JAX 0.10: manual_axis_type.varying; else .vma)."""
    mat = getattr(aval, "manual_axis_type", None)
    return frozenset(mat.varying if mat is not None else getattr(aval, "vma", ()))


def _flash_forward(q, k, v, c, window):
    """q (B, T, K, G, Dh), k, v (B, T, K, Dh) -> output (B, T, K, G, Dh) in v's dtype and lse
    (n, B, K, G, c) in float32. The loop over the pairs carries one row's accumulators (reset
    at the row's first pair) and writes the row's output and lse at every pair: the last
    write, at j = i, holds all its key blocks."""
    qb, kb, vb = _blocks(q, c), _blocks(k, c), _blocks(v, c)
    n, B, _, K, G, Dh = qb.shape
    empty = (jnp.full((B, K, G, c), NEG_INF), jnp.zeros((B, K, G, c)),
             jnp.zeros((B, K, G, c, Dh)))

    def visit(carry, ij):
        acc, out, lse = carry
        i, j, first = ij
        acc = jax.tree.map(lambda e, a: jnp.where(first, e, a), empty, acc)
        acc = merge(acc, attend(qb[i], kb[j], vb[j], _mask(i, j, c, window)))
        m, l, o = acc
        row = (o / l[..., None]).transpose(0, 3, 1, 2, 4).astype(v.dtype)  # (B, c, K, G, Dh)
        return (acc, out.at[i].set(row), lse.at[i].set(m + jnp.log(l))), None

    init = _varying((empty, jnp.zeros(qb.shape, v.dtype), jnp.zeros((n, B, K, G, c))), q, k, v)
    (_, out, lse), _ = jax.lax.scan(visit, init, _pairs(n, c, window))
    return _unblocks(out), lse


def _flash_backward(c, window, residuals, d_out):
    """FlashAttention-2's backward over the same pairs, in float32: each block (i, j) adds its
    dq into block i and its (dk, dv) into block j of the carried gradients."""
    q, k, v, out, lse = residuals
    f32 = partial(jnp.asarray, dtype=jnp.float32)
    delta = jnp.einsum("btkgd,btkgd->btkg", f32(d_out), f32(out))  # rowsum(dO ∘ O)
    qb, dob, kb, vb = (_blocks(f32(x), c) for x in (q, d_out, k, v))
    deltab = jnp.moveaxis(_blocks(delta, c), 2, -1)  # (n, B, K, G, c), like lse

    def visit(grads, ij):
        dq, dk, dv = grads
        i, j, _ = ij
        rows = (qb[i], dob[i], lse[i], deltab[i])
        dq_ij, dk_ij, dv_ij = block_grads(rows, kb[j], vb[j], _mask(i, j, c, window))
        return (dq.at[i].add(dq_ij), dk.at[j].add(dk_ij), dv.at[j].add(dv_ij)), None

    zeros = _varying(tuple(jnp.zeros(x.shape, x.dtype) for x in (qb, kb, vb)), q, k, v, d_out)
    (dq, dk, dv), _ = jax.lax.scan(visit, zeros, _pairs(qb.shape[0], c, window))
    return (_unblocks(dq).astype(q.dtype), _unblocks(dk).astype(k.dtype),
            _unblocks(dv).astype(v.dtype))


@partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _flash(q, k, v, c, window):
    return _flash_forward(q, k, v, c, window)[0]


def _flash_fwd(q, k, v, c, window):
    out, lse = _flash_forward(q, k, v, c, window)
    return out, (q, k, v, out, lse)  # the backward's residuals: O(T) per row, no scores


_flash.defvjp(_flash_fwd, _flash_backward)


def blockwise_attention(q, k, v, block: int | None = None, window: int | None = None):
    """Causal attention in blocks of `block` rows (BLOCK if None; module docstring), each query
    seeing at most `window` positions (None: all); blocks wholly outside it are skipped.
    q (B, T, H, Dh); k, v (B, T, K, Dh) -> (B, T, H, Dh). A T that is not a multiple of the
    block is padded at the end: padded keys come after every real query, so the causal mask
    already hides them."""
    B, T, H, Dh = q.shape
    K = k.shape[2]
    c = min(block or BLOCK, T)
    pad = -T % c
    if pad:
        q, k, v = (jnp.pad(x, ((0, 0), (0, pad), (0, 0), (0, 0))) for x in (q, k, v))
    out = _flash(q.reshape(B, T + pad, K, H // K, Dh), k, v, c, window)  # kv head h // G
    return out[:, :T].reshape(B, T, H, Dh)


# --- the choice --------------------------------------------------------------------------------

def fused_attention(q, k, v, window: int | None = None):
    """cuDNN's fused kernel through jax.nn.dot_product_attention, or None where the platform
    or the shapes have none (a CPU, float32, a head size cuDNN refuses). A window W is its
    local_window_size (W − 1 positions to the left, none to the right)."""
    if jax.default_backend() != "gpu" or q.dtype not in (jnp.bfloat16, jnp.float16):
        return None
    local = None if window is None else (window - 1, 0)
    try:
        return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="cudnn",
                                            local_window_size=local)
    except (RuntimeError, ValueError, NotImplementedError):
        return None


def flash_attention(q, k, v, window: int | None = None):
    """The fused kernel where the platform has one, else the blockwise one."""
    out = fused_attention(q, k, v, window)
    return blockwise_attention(q, k, v, window=window) if out is None else out


def attention(q, k, v, kernel: str = "naive", window: int | None = None, causal: bool = True):
    """Causal attention with the named kernel (parex.config.ATTENTION_KERNELS), each query
    seeing at most `window` positions (None: all earlier ones). Not causal (a ViT: every query
    sees every key) the scores are materialised whatever the kernel: the blockwise kernel's
    block pairs are the causal ones, and a ViT's sequences are short (T = 65 on CIFAR)."""
    if not causal:
        return naive_attention(q, k, v, causal=False)
    if kernel == "flash":
        return flash_attention(q, k, v, window)
    return naive_attention(q, k, v, window)
