"""The replicas' mean pseudo-gradient, exchanged in f32, bf16, int8 or int4.

Runs inside a shard_map where every mesh axis is manual (parex.lowcomm.diloco's outer program),
on one device's local shards; `axis` is the replica axis and R its size.

    f32    one all-reduce of the float32 pseudo-gradient            4 bytes per element
    bf16   one all-reduce in bfloat16 (bf16 accumulation over R)     2
    int8   a quantised all-reduce in two phases, int8 on the wire    1 (+ 4/QUANT_BLOCK for scales)
    int4   the same with 4-bit values, two to a byte                 0.5 (+ 4/QUANT_BLOCK)

The quantised all-reduce is a reduce-scatter then an all-gather, each over the low-precision
payload: every replica cuts its flattened pseudo-gradient into R chunks, quantises them with one
float32 scale per block of QUANT_BLOCK values (scale = max|x| / qmax, round to nearest), and an
all-to-all hands chunk j of every replica to replica j. Replica j dequantises, averages its chunk in
float32, quantises the mean again, and an all-gather returns every mean chunk to everyone. So each
device sends 2·(R−1)/R of the payload, as a ring all-reduce would, at 1/4 or 1/8 of the f32 bytes.
Error: each quantisation is off by at most half a step (scale / 2) per element, so the result is
within  mean_r(s_r) / 2 + s' / 2  of the exact mean, s_r the first-phase scales of the block on
each replica and s' the scale of the mean's block (tests/test_diloco.py checks this bound).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

QUANT_BLOCK = 256  # values per float32 scale
QMAX = {"int8": 127, "int4": 7}  # symmetric ranges, so that zero stays exact


def quantize(x, dtype: str):
    """x (..., n) with n a multiple of QUANT_BLOCK -> (int8 values, float32 scales (..., n/blk))."""
    blocks = x.reshape(*x.shape[:-1], -1, QUANT_BLOCK)
    scale = jnp.max(jnp.abs(blocks), -1) / QMAX[dtype]
    safe = jnp.where(scale > 0, scale, 1.0)
    q = jnp.clip(jnp.round(blocks / safe[..., None]), -QMAX[dtype], QMAX[dtype])
    return q.astype(jnp.int8).reshape(x.shape), scale


def dequantize(q, scale):
    blocks = q.reshape(*q.shape[:-1], -1, QUANT_BLOCK).astype(jnp.float32)
    return (blocks * scale[..., None]).reshape(q.shape)


def pack_int4(q):
    """int8 values in [-7, 7] (..., n), n even -> uint8 (..., n/2), two nibbles a byte."""
    u = (q.astype(jnp.int32) + 8).astype(jnp.uint8)
    pairs = u.reshape(*u.shape[:-1], -1, 2)
    return pairs[..., 0] | (pairs[..., 1] << 4)


def unpack_int4(packed):
    low = (packed & 0xF).astype(jnp.int32) - 8
    high = (packed >> 4).astype(jnp.int32) - 8
    return jnp.stack([low, high], -1).reshape(*packed.shape[:-1], -1).astype(jnp.int8)


def _wire(q, dtype: str):
    return pack_int4(q) if dtype == "int4" else q


def _unwire(payload, dtype: str):
    return unpack_int4(payload) if dtype == "int4" else payload


def quantized_mean(flat, axis: str, R: int, dtype: str):
    """Mean over the replica axis of a float32 vector (n,), exchanged as `dtype` (int8/int4)."""
    n = flat.shape[0]
    chunk = -(-n // (R * QUANT_BLOCK)) * QUANT_BLOCK  # each replica owns one chunk of the mean
    padded = jnp.pad(flat, (0, R * chunk - n)).reshape(R, chunk)
    q, scale = quantize(padded, dtype)  # (R, chunk), (R, chunk / QUANT_BLOCK)
    # reduce-scatter phase: chunk j of every replica goes to replica j
    q = jax.lax.all_to_all(_wire(q, dtype), axis, 0, 0, tiled=True)
    scale = jax.lax.all_to_all(scale, axis, 0, 0, tiled=True)
    mine = dequantize(_unwire(q, dtype), scale).mean(0)  # (chunk,): this replica's mean chunk
    q, scale = quantize(mine, dtype)
    # all-gather phase: every replica's mean chunk to everyone
    q = jax.lax.all_gather(_wire(q, dtype), axis, tiled=True, to="invarying")
    scale = jax.lax.all_gather(scale, axis, tiled=True, to="invarying")
    return dequantize(_unwire(q, dtype), scale)[:n]


def _mean(x, axis: str, R: int, dtype: str):
    """Mean over the replica axis of one float32 vector, exchanged as `dtype`."""
    if R == 1 or dtype == "f32":  # R = 1: nothing is sent (XLA drops the psum); invariant type
        return jax.lax.psum(x, axis) / R
    if dtype == "bf16":
        return jax.lax.psum(x.astype(jnp.bfloat16), axis).astype(jnp.float32) / R
    return quantized_mean(x, axis, R, dtype)


def replica_mean(leaves: list, axis: str, R: int, dtype: str, groups: list | None = None,
                 split: dict | None = None) -> list:
    """Mean over the replica axis of each float32 array in `leaves`, exchanged as `dtype`.

    Leaves are flattened into one bucket per group (`groups[i]`: a hashable key per leaf, the
    mesh axes its shard is split over, so that a bucket never mixes leaves sharded differently).
    `split[key]` names the other axes over which that bucket's devices hold identical copies
    (e.g. `data` for replicated parameters): each of those devices exchanges only its 1/n slice
    and an all-gather over them (inside the replica, on the fast links) rebuilds the rest, so
    every element crosses between replicas once per replica, not once per copy."""
    groups = groups or [0] * len(leaves)
    out = [None] * len(leaves)
    for key in dict.fromkeys(groups):
        members = [i for i, g in enumerate(groups) if g == key]
        flat = jnp.concatenate([leaves[i].reshape(-1) for i in members])
        axes = (split or {}).get(key, ()) if R > 1 else ()
        mean = _split_mean(flat, axes, axis, R, dtype) if axes else _mean(flat, axis, R, dtype)
        start = 0
        for i in members:
            out[i] = mean[start:start + leaves[i].size].reshape(leaves[i].shape)
            start += leaves[i].size
    return out


def _split_mean(flat, axes: tuple, axis: str, R: int, dtype: str):
    """`_mean` of a vector held identically by the devices of `axes`: each takes one slice."""
    n = 1
    for a in axes:
        n *= jax.lax.axis_size(a)
    piece = -(-flat.shape[0] // n)
    padded = jnp.pad(flat, (0, n * piece - flat.shape[0]))
    mine = jax.lax.dynamic_slice_in_dim(padded, jax.lax.axis_index(axes) * piece, piece)
    mean = _mean(mine, axis, R, dtype)
    return jax.lax.all_gather(mean, axes, tiled=True, to="invarying")[:flat.shape[0]]


def error_bound(x_by_replica, dtype: str):
    """The elementwise bound on |quantized_mean − exact mean| stated above, for float32 inputs
    x_by_replica (R, n): mean_r(s_r)/2 + s'/2, with s' bounded through the exact mean's block max
    plus the first phase's error."""
    R, n = x_by_replica.shape
    chunk = -(-n // (R * QUANT_BLOCK)) * QUANT_BLOCK
    padded = jnp.pad(x_by_replica, ((0, 0), (0, R * chunk - n)))
    blocks = padded.reshape(R, -1, QUANT_BLOCK)
    first = (jnp.max(jnp.abs(blocks), -1) / QMAX[dtype]).mean(0) / 2  # (n_blocks,)
    mean_max = jnp.max(jnp.abs(blocks.mean(0)), -1)
    second = (mean_max + first) / QMAX[dtype] / 2
    return jnp.repeat(first + second, QUANT_BLOCK)[:n]
