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
    The backward is a custom VJP in the manner of flash attention (Dao 2023): the forward keeps
    only q, k, v, the output and each row's log-sum-exp, and the backward sends k and v around
    the ring again, recomputing each block's probabilities, with each block's dk, dv riding
    along back to its owner. So what a device holds falls as 1/s; differentiated by autodiff,
    the ring kept every hop's keys, values and probabilities, T·(s − 1)/s rows of each.
    Inside pipeline stages (`per_group`) each hop is an all-to-all over the seq group instead of
    a ppermute (`_shift_by_all_to_all`: the stages run different branches of the tick switch).
    Each hop's blocks are computed by parex.model.attention's block functions, the flash kernel's.
ulysses (Jacobs et al. 2023, DeepSpeed-Ulysses): one all-to-all turns a sequence shard of all heads
    into the whole sequence of H/s heads; attention is local (naive or flash, the step's kernel);
    a second all-to-all turns it back.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ..model.attention import attend, attention, block_grads, causal_mask, merge


# --- the zig-zag layout ------------------------------------------------------------------------

def zigzag_chunks(s: int) -> np.ndarray:
    """Chunk order [0, 2s−1, 1, 2s−2, ...]: contiguous shard i then holds chunks i and 2s−1−i."""
    return np.stack([np.arange(s), 2 * s - 1 - np.arange(s)], 1).reshape(-1)


def zigzag_positions(T: int, s: int) -> np.ndarray:
    """The position each stored token has in the zig-zag layout (zigzag of 0..T-1), in numpy:
    known while tracing."""
    return np.arange(T).reshape(2 * s, T // (2 * s))[zigzag_chunks(s)].reshape(T)


def zigzag(x, s: int, axis: int = 1):
    """Reorder the sequence dim of x (length T, a multiple of 2s) into the zig-zag layout."""
    T = x.shape[axis]
    chunks = x.reshape(*x.shape[:axis], 2 * s, T // (2 * s), *x.shape[axis + 1:])
    return jnp.take(chunks, zigzag_chunks(s), axis=axis).reshape(x.shape)


# --- ring attention: the forward --------------------------------------------------------------

def _attend(q, k, v, diagonal: bool = False):
    """One (c × c) block's share of the softmax (parex.model.attention.attend, the flash kernel's
    block): (row max m, row sum l, unnormalised output o); a diagonal block is causal."""
    return attend(q, k, v, causal_mask(q.shape[1]) if diagonal else None)


def _own_chunks(q, k, v):
    """Hop 0, this device's chunks a = i and b = 2s−1−i (1 and 2 below): a sees itself causally;
    b sees a fully and itself causally; a never sees b. Returns the accumulators of a and b."""
    (q1, q2), (k1, k2), (v1, v2) = (_halves(x) for x in (q, k, v))
    return _attend(q1, k1, v1, True), merge(_attend(q2, k1, v1), _attend(q2, k2, v2, True))


def _visiting(acc1, acc2, q, k, v, before):
    """Hop ≥ 1, with the chunks j and 2s−1−j of device j ≠ i. Our second chunk (≥ s) always sees
    their first (< s) in full. If j < i (`before`) our first chunk also sees their first; if j > i
    our second chunk also sees their second; every other pair is masked. So each hop is two
    unmasked (c × c) blocks on every device, the second chosen by selecting operands, not by
    branching (no device-dependent control flow, and no work on masked blocks)."""
    (q1, q2), (k1, k2), (v1, v2) = (_halves(x) for x in (q, k, v))
    acc2 = merge(acc2, _attend(q2, k1, v1))
    pick = partial(jnp.where, before)
    extra = _attend(pick(q1, q2), pick(k1, k2), pick(v1, v2))
    acc1_new, acc2_new = merge(acc1, extra), merge(acc2, extra)
    return (jax.tree.map(pick, acc1_new, acc1), jax.tree.map(pick, acc2, acc2_new))


def _halves(x, axis: int = 1):
    c = x.shape[axis] // 2
    return jax.lax.slice_in_dim(x, 0, c, axis=axis), jax.lax.slice_in_dim(x, c, None, axis=axis)


def _ring_forward(q, k, v, axis_name, s, per_group):
    """q (B, Tl, K, G, Dh), k, v (B, Tl, K, Dh) -> output (B, Tl, K, G, Dh) in v's dtype and the
    rows' log-sum-exp lse = m + log l (B, K, G, Tl), float32. s − 1 hops of k and of v, as a
    loop, so a device holds one visiting block at a time (unrolled, XLA's CPU scheduler issued
    every hop's sends first and held all their blocks)."""
    i, send = jax.lax.axis_index(axis_name), _sender(axis_name, s, per_group)

    def hop(carry, h):
        acc, k, v = carry
        k, v = send((k, v))  # now the chunks of device (i − h) mod s
        return (_visiting(*acc, q, k, v, (i - h) % s < i), k, v), None

    (acc, _, _), _ = jax.lax.scan(hop, (_own_chunks(q, k, v), k, v), jnp.arange(1, s))
    m, l, o = (jnp.concatenate(parts, axis=3) for parts in zip(*acc))  # rows: a, then b
    out = (o / l[..., None]).transpose(0, 3, 1, 2, 4).astype(v.dtype)
    return out, m + jnp.log(l)


def _sender(axis_name, s, per_group: bool):
    """The hop to the next device of the ring, d -> d + 1, of an array or a tuple of arrays: a
    ppermute, or with `per_group` an all-to-all (`_shift_by_all_to_all`)."""
    if per_group:
        return lambda x: jax.tree.map(partial(_shift_by_all_to_all, axis_name=axis_name, s=s), x)
    ring = [(d, (d + 1) % s) for d in range(s)]
    return partial(jax.lax.ppermute, axis_name=axis_name, perm=ring)


def _shift_by_all_to_all(x, axis_name, s):
    """x of device d arrives on d + 1, by an all-to-all of s copies of x (copy j goes to device
    j) of which device i keeps the one from i − 1. Inside pipeline stages each stage takes its
    own branch of the tick switch, and XLA's CPU runtime meets a collective-permute with every
    device of its source-target pairs (the whole mesh), so a permute run by one stage waits for
    the others (an abort) or pairs with another stage's; an all-to-all has a replica group per
    seq group, which only that stage's devices join. For s = 2 it moves what the permute
    would (one block each way); for s > 2 it sends s − 1 blocks, of which s − 2 are unused."""
    copies = jnp.broadcast_to(x, (s, *x.shape))
    arrived = jax.lax.all_to_all(copies, axis_name, 0, 0, tiled=True)  # copy j from device j
    previous = (jax.lax.axis_index(axis_name) - 1) % s
    return jax.lax.dynamic_index_in_dim(arrived, previous, 0, keepdims=False)


# --- ring attention: the backward -------------------------------------------------------------
# Flash attention's backward (Dao 2023) on the ring: nothing of the forward's hops is kept. Each
# hop's probabilities are recomputed from q, the visiting k and the saved lse, so a device holds
# q, k, v, the output and lse, and one visiting block at a time.

def _block_grads(rows, k, v, diagonal: bool = False):
    """(dq, dk, dv) of one (c × c) block (parex.model.attention.block_grads, the flash kernel's), a
    diagonal block causal. rows = (q, dO, lse, δ) of its query chunk, float32."""
    return block_grads(rows, k, v, causal_mask(k.shape[1]) if diagonal else None)


def _own_grads(rows1, rows2, k, v):
    """Hop 0's three blocks (as `_own_chunks`): dq of both query chunks, (dk, dv) of ours."""
    (k1, k2), (v1, v2) = _halves(k), _halves(v)
    dq1, dk11, dv11 = _block_grads(rows1, k1, v1, True)
    dq21, dk21, dv21 = _block_grads(rows2, k1, v1)
    dq22, dk2, dv2 = _block_grads(rows2, k2, v2, True)
    dk, dv = (jnp.concatenate(parts, 1) for parts in ((dk11 + dk21, dk2), (dv11 + dv21, dv2)))
    return (dq1, dq21 + dq22), dk, dv


def _visiting_grads(rows1, rows2, k, v, before):
    """The blocks `_visiting` computed, differentiated: (dq1, dq2) for our query chunks and
    (dk, dv) for the visiting chunks, the second block again chosen by selecting operands."""
    (k1, k2), (v1, v2) = _halves(k), _halves(v)
    dq2, dk1, dv1 = _block_grads(rows2, k1, v1)
    pick = partial(jnp.where, before)
    dqx, dkx, dvx = _block_grads(jax.tree.map(pick, rows1, rows2), pick(k1, k2), pick(v1, v2))
    dq = (pick(dqx, 0.0), dq2 + pick(0.0, dqx))
    dk = jnp.concatenate([dk1 + pick(dkx, 0.0), pick(0.0, dkx)], 1)
    dv = jnp.concatenate([dv1 + pick(dvx, 0.0), pick(0.0, dvx)], 1)
    return dq, dk, dv


def _ring_backward(axis_name, s, per_group, residuals, d_out):
    """Re-run the ring in float32. Hop 1 brings the (k, v) of device i − 1; from hop 2 on each
    visiting block travels with the (dk, dv) its earlier visits gave it, as one (4, ...) buffer
    (a loop, like the forward's); a last hop sends the (dk, dv) home: after s − 1 hops, device
    i holds the chunks of i + 1. Collective-permutes: s, of 2 + 4(s − 2) + 2 = 4(s − 1) blocks.
    The cotangent d_out (B, Tl, K, G, Dh) -> (dq, dk, dv) in the dtypes of q, k, v."""
    q, k, v, out, lse = residuals
    f32 = partial(jnp.asarray, dtype=jnp.float32)
    delta = jnp.einsum("btkgd,btkgd->bkgt", f32(d_out), f32(out))  # (B, K, G, Tl)
    rows1, rows2 = zip(_halves(f32(q)), _halves(f32(d_out)), _halves(lse, 3),
                       _halves(delta, 3))
    dq, dk_own, dv_own = _own_grads(rows1, rows2, f32(k), f32(v))
    i, send = jax.lax.axis_index(axis_name), _sender(axis_name, s, per_group)

    def visit(dq, block, h):  # block (k, v, ...) of device (i − h) mod s: + its (dk, dv)
        hop_dq, dk, dv = _visiting_grads(rows1, rows2, block[0], block[1], (i - h) % s < i)
        return jax.tree.map(jnp.add, dq, hop_dq), jnp.stack([dk, dv])

    def hop(carry, h):
        dq, block = carry
        block = send(block)  # (4, B, Tl, K, Dh): k, v, dk, dv
        dq, grads = visit(dq, block, h)
        return (dq, block.at[2:].add(grads)), None

    block = send(jnp.stack([f32(k), f32(v)]))  # hop 1
    dq, grads = visit(dq, block, 1)
    (dq, block), _ = jax.lax.scan(hop, (dq, jnp.concatenate([block, grads])), jnp.arange(2, s))
    dk_home, dv_home = send(block[2:])
    return (jnp.concatenate(dq, 1).astype(q.dtype), (dk_own + dk_home).astype(k.dtype),
            (dv_own + dv_home).astype(v.dtype))


@partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _ring(q, k, v, axis_name, s, per_group):
    return _ring_forward(q, k, v, axis_name, s, per_group)[0]


def _ring_fwd(q, k, v, axis_name, s, per_group):
    out, lse = _ring_forward(q, k, v, axis_name, s, per_group)
    return out, (q, k, v, out, lse)  # the backward's residuals: O(Tl) per row, no scores


_ring.defvjp(_ring_fwd, _ring_backward)


def ring_attention(q, k, v, axis_name: str, s: int, per_group: bool = False):
    """Causal attention on zig-zag shards. q (B, Tl, H, Dh); k, v (B, Tl, K, Dh) -> (B, Tl, H, Dh).
    Forward: s − 1 hops of (k, v) to the next device. Backward (custom VJP): the ring again, with
    the visiting chunks' (dk, dv); it keeps only q, k, v, the output and lse per row. Each hop is
    a ppermute, or with `per_group` (inside pipeline stages) an all-to-all over the seq group."""
    B, Tl, H, Dh = q.shape
    K = k.shape[2]
    out = _ring(q.reshape(B, Tl, K, H // K, Dh), k, v, axis_name, s, per_group)  # kv h // G
    return out.reshape(B, Tl, H, Dh)


# --- Ulysses -----------------------------------------------------------------------------------

def ulysses_attention(q, k, v, axis_name: str, kernel: str = "naive", window=None):
    """All-to-all attention on contiguous shards. q (B, Tl, H, Dh); k, v (B, Tl, K, Dh).
    Heads are split in contiguous groups, so the kv head of each query head moves with it; the
    local attention is `kernel`'s (parex.model.attention)."""
    def to_heads(x):  # (B, T/s, N, Dh) -> (B, T, N/s, Dh)
        return jax.lax.all_to_all(x, axis_name, 2, 1, tiled=True)

    out = attention(to_heads(q), to_heads(k), to_heads(v), kernel, window)  # (B, T, H/s, Dh)
    return jax.lax.all_to_all(out, axis_name, 1, 2, tiled=True)  # (B, T/s, H, Dh)
