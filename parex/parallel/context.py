"""Context parallelism: causal attention over a sequence split across one mesh axis.

Both functions run inside `shard_map`, on one device's blocks, and take the axis name from the
caller (only parex.layout spells mesh-axis names). Shapes are local: Tl = T/s tokens, s devices.

ring (Liu et al. 2023, "Ring Attention"): every device keeps its queries and passes its keys and
    values around the ring with `ppermute`, s − 1 hops; the softmax is accumulated online
    (running row max m, row sum l, unnormalised output o), so no device ever holds a (T, T) score
    matrix. Causal attention does half the work, and with a contiguous split device 0 would idle
    while device s−1 attends to everything. The zig-zag split fixes that: the sequence is cut into
    2s chunks and device i holds chunks i and 2s−1−i (`zigzag`). Then, at each hop, a device
    attends either with all its queries to the first visiting chunk (the keys came from an earlier
    device) or with its second query chunk to both visiting chunks (a later device): 2c² scores
    either way, c = T/2s. With hop 0 (three c × c blocks of its own chunks) every device computes
    (2s + 1)·c² scores per head, against T²/2s = 2s·c² for a perfectly even causal split.
ulysses (Jacobs et al. 2023, DeepSpeed-Ulysses): one all-to-all turns a sequence shard of all heads
    into the whole sequence of H/s heads; attention is local; a second all-to-all turns it back.
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ..model import attention_core

NEG_INF = -1e30  # the masked-score fill of parex.model.attention_core


# --- the zig-zag layout ------------------------------------------------------------------------

def zigzag_chunks(s: int) -> np.ndarray:
    """Chunk order [0, 2s−1, 1, 2s−2, ...]: contiguous shard i then holds chunks i and 2s−1−i."""
    return np.stack([np.arange(s), 2 * s - 1 - np.arange(s)], 1).reshape(-1)


def zigzag(x, s: int, axis: int = 1):
    """Reorder the sequence dim of x (length T, a multiple of 2s) into the zig-zag layout."""
    T = x.shape[axis]
    chunks = x.reshape(*x.shape[:axis], 2 * s, T // (2 * s), *x.shape[axis + 1:])
    return jnp.take(chunks, zigzag_chunks(s), axis=axis).reshape(x.shape)


# --- ring attention ----------------------------------------------------------------------------

def _scores(q, k):
    """q (B, Tq, K, G, Dh), k (B, Tk, K, Dh) -> scaled scores (B, K, G, Tq, Tk) in float32."""
    return jnp.einsum("btkgd,bskd->bkgts", q, k).astype(jnp.float32) / math.sqrt(q.shape[-1])


def _partial(scores, v):
    """One block's share of the softmax: (row max m, row sum l, unnormalised output o).
    m is a constant to autodiff: the final o/l does not depend on it, so gradients stay exact."""
    m = jax.lax.stop_gradient(scores.max(-1))  # (B, K, G, Tq)
    p = jnp.exp(scores - m[..., None])
    o = jnp.einsum("bkgts,bskd->bkgtd", p.astype(v.dtype), v).astype(jnp.float32)
    return m, p.sum(-1), o  # o (B, K, G, Tq, Dh)


def _merge(acc, new):
    """Combine two partial softmaxes over disjoint key sets: rescale both to the larger max."""
    (m1, l1, o1), (m2, l2, o2) = acc, new
    m = jnp.maximum(m1, m2)
    a1, a2 = jnp.exp(m1 - m), jnp.exp(m2 - m)
    return m, l1 * a1 + l2 * a2, o1 * a1[..., None] + o2 * a2[..., None]


def _attend(q, k, v, diagonal: bool = False):
    """Partial softmax of one (c × c) block; a diagonal block (a chunk against itself) is causal."""
    scores = _scores(q, k)  # (B, K, G, c, c)
    if diagonal:
        c = scores.shape[-1]
        scores = jnp.where(jnp.tril(jnp.ones((c, c), bool)), scores, NEG_INF)
    return _partial(scores, v)


def _own_chunks(q, k, v):
    """Hop 0, this device's chunks a = i and b = 2s−1−i (1 and 2 below): a sees itself causally;
    b sees a fully and itself causally; a never sees b. Returns the accumulators of a and b."""
    (q1, q2), (k1, k2), (v1, v2) = (_halves(x) for x in (q, k, v))
    return _attend(q1, k1, v1, True), _merge(_attend(q2, k1, v1), _attend(q2, k2, v2, True))


def _visiting(acc1, acc2, q, k, v, before):
    """Hop ≥ 1, with the chunks j and 2s−1−j of device j ≠ i. Our second chunk (≥ s) always sees
    their first (< s) in full. If j < i (`before`) our first chunk also sees their first; if j > i
    our second chunk also sees their second; every other pair is masked. So each hop is two
    unmasked (c × c) blocks on every device, the second chosen by selecting operands, not by
    branching (no device-dependent control flow, and no work on masked blocks)."""
    (q1, q2), (k1, k2), (v1, v2) = (_halves(x) for x in (q, k, v))
    acc2 = _merge(acc2, _attend(q2, k1, v1))
    pick = partial(jnp.where, before)
    extra = _attend(pick(q1, q2), pick(k1, k2), pick(v1, v2))
    acc1_new, acc2_new = _merge(acc1, extra), _merge(acc2, extra)
    return (jax.tree.map(pick, acc1_new, acc1), jax.tree.map(pick, acc2, acc2_new))


def _halves(x):
    c = x.shape[1] // 2
    return x[:, :c], x[:, c:]


def ring_attention(q, k, v, axis_name: str, s: int):
    """Causal attention on zig-zag shards. q (B, Tl, H, Dh); k, v (B, Tl, K, Dh) -> (B, Tl, H, Dh).
    Each hop sends (k, v) to the next device: s − 1 collective-permutes forward, as many back."""
    B, Tl, H, Dh = q.shape
    K = k.shape[2]
    q = q.reshape(B, Tl, K, H // K, Dh)  # query head h uses kv head h // G
    i = jax.lax.axis_index(axis_name)
    acc1, acc2 = _own_chunks(q, k, v)
    ring = [(d, (d + 1) % s) for d in range(s)]
    for hop in range(1, s):  # unrolled: s is small
        k, v = jax.lax.ppermute((k, v), axis_name, ring)
        source = (i - hop) % s  # whose chunks we now hold
        acc1, acc2 = _visiting(acc1, acc2, q, k, v, source < i)
    m, l, o = (jnp.concatenate(parts, axis=3) for parts in zip(acc1, acc2))  # rows: a, then b
    out = (o / l[..., None]).transpose(0, 3, 1, 2, 4)  # (B, Tl, K, G, Dh)
    return out.reshape(B, Tl, H, Dh).astype(v.dtype)


# --- Ulysses -----------------------------------------------------------------------------------

def ulysses_attention(q, k, v, axis_name: str):
    """All-to-all attention on contiguous shards. q (B, Tl, H, Dh); k, v (B, Tl, K, Dh).
    Heads are split in contiguous groups, so the kv head of each query head moves with it."""
    def to_heads(x):  # (B, T/s, N, Dh) -> (B, T, N/s, Dh)
        return jax.lax.all_to_all(x, axis_name, 2, 1, tiled=True)

    out = attention_core(to_heads(q), to_heads(k), to_heads(v))  # (B, T, H/s, Dh)
    return jax.lax.all_to_all(out, axis_name, 1, 2, tiled=True)  # (B, T/s, H, Dh)
