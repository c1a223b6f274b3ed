"""FP8 matmuls as the precision recipes run them (parex.precision): quantise, matmul, dequantise.

    y = fp8.einsum(eq, x, w, recipe, state, gather)     # y = einsum(eq, x, w), FP8 operands

Forward: x and W are scaled (s = fp8_max / amax), saturated and cast to the recipe's forward format
(E4M3), and the product of the dequantised operands is taken in the compute dtype. Backward: the
output gradient dY is quantised in the backward format (E5M2 for HYBRID, E4M3 otherwise) and both
GEMMs, dX = dY·Wᵀ and dW = Xᵀ·dY, read FP8 operands, as Transformer Engine's and torchao's FP8
Linear layers do; the straight-through estimator carries dX and dW past the casts. Which amax:

    tensor   one scale per tensor: the current amax, or (delayed) the max of the amax history
    row      one scale per row along each GEMM's contraction axes (each GEMM requantises)
    block    one scale per 1 x tile tile along the contraction axes (each GEMM requantises);
             W's per tile x tile block where the recipe says so (fp8-blockwise: 128, 128 x
             128; mxfp8: 32, W's blocks one-dimensional too, power-of-two scales)

Every amax is taken over the whole logical tensor (XLA reduces the shards'), so each shard of a
layout quantises with the scale one device would use. A tensor-scaled weight is cast to FP8 on
its shards and `gather` all-gathers the FP8 bytes (FSDP's FP8 all-gather, twice: forward and
backward); the forward saves X and W in FP8 (TE's and torchao's residuals), row and block
recipes save them in the compute dtype (each GEMM quantises them along its own axes).

XLA:CPU has no FP8 dot: it converts the FP8 operands to float32 for the product, which is exact
(an FP8 value is a float32 value), so the emulated numbers are the FP8 numbers up to the order of
the float32 accumulation. Delayed scaling's new amaxes leave through the cotangent of its state
(the history rolled by one, the new amax first: Flax's "overwrite with gradient" trick), which
the train step stores as the next step's state.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from ..precision import FP8_MAX, Precision


def scale_from_amax(amax, fmt: str, power_of_two: bool = False):
    """s = fp8_max / amax (1 where amax is 0, TE's convention), optionally rounded down to a
    power of two (torchao's rowwise recipe: exact in any format)."""
    s = jnp.where(amax > 0, FP8_MAX[fmt] / jnp.maximum(amax, 1e-30), 1.0)
    return jnp.exp2(jnp.floor(jnp.log2(s))) if power_of_two else s


def quantize(a, scale, fmt: str):
    """a · scale saturated to ±fp8_max and cast to `fmt` (E4M3 has no infinity: unsaturated
    overflow would be NaN)."""
    big = FP8_MAX[fmt]
    return jnp.clip(a.astype(jnp.float32) * scale, -big, big).astype(jnp.dtype(fmt))


def dequantize(a8, scale, dtype):
    return (a8.astype(jnp.float32) / scale).astype(dtype)


def amax(a, axes: tuple, recipe: Precision, square: bool = False):
    """|a|'s maximum per scaling group: the whole tensor, each row along `axes`, or each
    1 x tile tile along `axes` (`square`, a weight, under a recipe with weight_blocks: each
    tile x tile block); broadcastable to a."""
    a = jnp.abs(a.astype(jnp.float32))
    if recipe.scaling == "tensor":
        return jnp.max(a)
    if recipe.scaling == "row":
        return jnp.max(a, axis=axes, keepdims=True)
    return _tile_amax(a, axes, recipe.tile, square and recipe.weight_blocks)


def _tile_amax(a, axes: tuple, tile: int, square: bool):
    """Each tile's amax, broadcast over its tile: the contraction axes flattened to C and cut in
    tiles of `tile` (the last padded with zeros); `square` cuts the other axes too."""
    others = tuple(i for i in range(a.ndim) if i not in axes)
    perm = others + tuple(axes)
    b = jnp.transpose(a, perm)
    shape = b.shape
    n, c = math.prod(shape[:len(others)]), math.prod(shape[len(others):])
    rows = -(-n // tile) * tile if square else n
    cols = -(-c // tile) * tile
    b = jnp.pad(b.reshape(n, c), ((0, rows - n), (0, cols - c)))
    if square:
        g = b.reshape(rows // tile, tile, cols // tile, tile).max(axis=(1, 3), keepdims=True)
        g = jnp.broadcast_to(g, (rows // tile, tile, cols // tile, tile))
    else:
        g = jnp.broadcast_to(b.reshape(rows, cols // tile, tile).max(-1, keepdims=True),
                             (rows, cols // tile, tile))
    g = g.reshape(rows, cols)[:n, :c].reshape(shape)
    return jnp.transpose(g, tuple(sorted(range(a.ndim), key=perm.__getitem__)))


def _axes(sub: str, letters) -> tuple:
    return tuple(i for i, ch in enumerate(sub) if ch in letters)


def roll_history(history, new_amax):
    """An amax history with `new_amax` first and the oldest dropped (TE's roll)."""
    return jnp.roll(history, 1).at[0].set(new_amax)


def einsum(eq: str, x, w, recipe: Precision, state=None, gather=None):
    """einsum(eq, x, w) with FP8 operands by `recipe`; `state`: delayed scaling's histories
    {"x", "w", "dy"} (each (H,) float32), else None; `gather`: the FP8 weight's all-gather
    (tensor scaling under FSDP), else None."""
    ins, out = eq.split("->")
    xs, ws = ins.split(",")
    contract = set(xs) & set(ws) - set(out)
    w_only, x_only = set(ws) & set(out), set(xs) & set(out)  # dgrad's and wgrad's contractions
    fwd_fmt, bwd_fmt = recipe.forward_format, recipe.backward_format
    dtype = x.dtype
    gather = gather or (lambda a: a)

    def product(a, b):
        return jnp.einsum(eq, a, b, preferred_element_type=jnp.float32)

    def q(a, axes, fmt, history=None, square=False):
        """(a in fmt, its scale) from the history's max (delayed) or a's amax."""
        found = jnp.max(history) if history is not None else amax(a, axes, recipe, square)
        s = scale_from_amax(found, fmt, recipe.power_of_two)
        return quantize(a, s, fmt), s

    def new_state(state, seen, dy):
        """The histories with this step's amaxes of x, W (`seen`, taken before the cast: a
        saturated value would hide the true one) and dY."""
        if state is None:
            return None
        found = {"x": seen[0], "w": seen[1], "dy": amax(dy, (), recipe)}
        return {k: roll_history(state[k], found[k]) for k in ("x", "w", "dy")}

    def forward(x, w, state):
        h = state or {}
        x8, sx = q(x, _axes(xs, contract), fwd_fmt, h.get("x"))
        w8, sw = q(w, _axes(ws, contract), fwd_fmt, h.get("w"), square=True)
        y = product(dequantize(x8, sx, dtype), dequantize(gather(w8), sw, dtype)).astype(dtype)
        kept = (x8, sx, w8, sw) if recipe.scaling == "tensor" else (x, w)
        seen = None if state is None else (amax(x, (), recipe), amax(w, (), recipe))
        return y, (kept, state, seen)

    def backward(res, dy):
        kept, state, seen = res
        h = state or {}
        if recipe.scaling == "tensor":  # one scale each: the forward's FP8 X and W serve both
            x8, sx, w8, sw = kept
            dy8, sdy = q(dy, (), bwd_fmt, h.get("dy"))
            xd, wd = dequantize(x8, sx, dtype), dequantize(gather(w8), sw, dtype)
            dyd = dequantize(dy8, sdy, dtype)
            dx_in = dw_in = (xd, wd, dyd)
            w = wd
        else:  # each GEMM quantises along its own contraction axes
            x, w = kept
            dx_in = (x, _qd(q, w, _axes(ws, w_only), fwd_fmt, dtype, square=True),
                     _qd(q, dy, _axes(out, w_only), bwd_fmt, dtype))
            dw_in = (_qd(q, x, _axes(xs, x_only), fwd_fmt, dtype), w,
                     _qd(q, dy, _axes(out, x_only), bwd_fmt, dtype))
        dx = jax.vjp(product, dx_in[0], dx_in[1])[1](dx_in[2].astype(jnp.float32))[0]
        dw = jax.vjp(product, dw_in[0], dw_in[1])[1](dw_in[2].astype(jnp.float32))[1]
        return dx.astype(dtype), dw.astype(w.dtype), new_state(state, seen, dy)

    @jax.custom_vjp
    def run(x, w, state):
        return forward(x, w, state)[0]

    run.defvjp(forward, backward)
    return run(x, w, state)


def _qd(q, a, axes, fmt, dtype, square=False):
    """a quantised along `axes` and dequantised: the FP8 values a GEMM reads."""
    a8, s = q(a, axes, fmt, square=square)
    return dequantize(a8, s, dtype)


def history_state(layers: int, history: int) -> dict:
    """One matmul's delayed-scaling state, stacked over layers: zeros (scale 1 on the first
    step, as TE starts)."""
    zeros = jnp.zeros((layers, history), jnp.float32)
    return {"x": zeros, "w": zeros, "dy": zeros}


__all__ = ["amax", "dequantize", "einsum", "history_state", "quantize", "roll_history",
           "scale_from_amax"]
