"""The split backward of zero-bubble schedules: B computes input gradients only, W the weight
gradients, and neither recomputes the other's matmuls.

Every place where a block's parameters meet an activation goes through `Ops.weighted(fn, x, w)`,
with `fn` linear or affine in w (a norm's scale and bias, a projection and its bias). Here those
calls are *tapped*: y = _tap(fn(x, w), tap) with tap = 0, which is y + tap in value but adds
nothing in F (an identity whose backward gives the tap y's cotangent), and x is recorded.
- F differentiates the tapped layers with respect to (x, taps) only, the weights held fixed: its
  residuals are what dx needs, and the records (each op's input) are kept for W.
- B's backward returns dx and, for every tap, dY: the cotangent of that op's output.
- W needs only those: dW = Σ_i (∂fn_i(x_i, w)/∂w)ᵀ dY_i, which for a matmul is x_iᵀ·dY_i, one
  matmul; the forward fn_i(x_i, w) feeds nothing that is kept, so XLA drops it. Under sequence
  parallelism fn_i all-gathers x_i again first, as Megatron does for its weight gradients.
- An op whose parameters are all vectors (a norm's scale and bias) is not tapped: its weight
  gradient is a reduction over tokens of what its input gradient reads anyway (dscale = Σ dY·x̂),
  so B forms it, as an unsplit backward does, instead of keeping the op's input and dY for W
  (2·D fewer elements per token and layer in each of the W stash's two buffers). F
  differentiates with respect to those parameters too (`BlockTaps.early`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
from jax import lax

from ..model import transformer as gpt
from .nested import layer_loop
from .stash import zeros_like_aval


@jax.custom_vjp
def _tap(y, tap):
    """y itself, where y + tap (tap = 0) would add zeros in F; its backward hands y's cotangent
    dY to the tap as well."""
    return y


def _tap_forward(y, tap):
    return y, None


def _tap_backward(_, dy):
    return dy, dy


_tap.defvjp(_tap_forward, _tap_backward)


@dataclass(frozen=True)
class WeightedOp:
    """One `Ops.weighted` call of a block: its function, and where its parameters live in the
    block's parameter dict (the op's own name for each -> the path of keys)."""

    fn: Callable
    paths: tuple[tuple[str, tuple[str, ...]], ...]

    def params(self, block_params) -> dict:
        out = {}
        for name, path in self.paths:
            value = block_params
            for key in path:
                value = value[key]
            out[name] = value
        return out


class TapOps:
    """An Ops that taps `weighted` (module docstring); every other operation is the wrapped
    Ops'. mode "probe" records the calls; mode "tap" adds taps[i] to call i's output. Both record
    each call's input."""

    def __init__(self, base, mode: str, taps=None):
        self.base, self.mode, self.taps = base, mode, taps
        self.calls: list[tuple[Callable, dict]] = []  # probe: (fn, params) per call
        self.outputs: list = []  # probe: each call's output (the taps' structure)
        self.records: list = []  # each call's input x
        self.untapped: list = []  # probe: the parameters of the ops B differentiates

    def __getattr__(self, name):
        return getattr(self.base, name)

    def weighted(self, fn, x, params):
        y = fn(x, params)
        if reduced_in_b(params):
            if self.mode == "probe":
                self.untapped.append(params)
            return y
        if self.mode == "probe":
            self.calls.append((fn, params))
            self.outputs.append(y)
        else:
            y = jax.tree.map(_tap, y, self.taps[len(self.records)])
        self.records.append(x)
        return y


def reduced_in_b(params) -> bool:
    """Whether an op's weight gradient is formed in B: all its parameters are vectors (module
    docstring)."""
    return all(leaf.ndim == 1 for leaf in jax.tree.leaves(params))


@dataclass(frozen=True)
class BlockTaps:
    """One block's tapped ops in call order, the avals of their outputs (the taps) and inputs
    (the records) for one layer, and the block's parameters whose gradients B forms."""

    ops: tuple[WeightedOp, ...]
    taps: tuple
    records: tuple
    unroll: bool  # the layers are looped in Python: their ops nest shard_maps (parallel.nested)
    early: tuple[str, ...]  # the block's top-level keys the untapped ops read: B's gradients

    def split(self, blocks) -> tuple[dict, dict]:
        """(late, early): a chunk's parameters W differentiates, and those B does."""
        return ({k: v for k, v in blocks.items() if k not in self.early},
                {k: v for k, v in blocks.items() if k in self.early})

    @classmethod
    def probe(cls, cfg, ops, remat: str, layer_params, x) -> BlockTaps:
        found = {}

        def run(p, x):
            tops = TapOps(ops, "probe")
            gpt.block(x, p, cfg, tops, remat)
            found["ops"] = tuple(WeightedOp(fn, _paths(p, params)) for fn, params in tops.calls)
            found["untapped"] = {path[0] for params in tops.untapped
                                 for _, path in _paths(p, params)}
            return tuple(tops.outputs), tuple(tops.records)

        taps, records = jax.eval_shape(run, layer_params, x)
        tapped = {path[0] for op in found["ops"] for _, path in op.paths}
        if found["untapped"] & tapped:  # B and W each differentiate whole top-level keys
            raise NotImplementedError(
                f"block parameters {sorted(found['untapped'] & tapped)} hold both an op's "
                f"matrix and a vector-only op's parameters; the split backward needs each "
                f"top-level key of the block read by tapped ops only or by vector ops only")
        early = tuple(k for k in layer_params if k in found["untapped"])
        return cls(found["ops"], taps, records, getattr(ops, "nests_shard_maps", False), early)

    def zero_taps(self, layers: int):
        """Zero taps for a chunk of `layers` scanned layers (leading dim), varying as needed."""
        return jax.tree.map(lambda a: zeros_like_aval(a, (layers,)), self.taps)


def _paths(block_params, params: dict) -> tuple:
    """For each of an op's parameters, the path of the block parameter it is (by identity)."""
    where = {id(leaf): tuple(k.key for k in path)
             for path, leaf in jax.tree_util.tree_flatten_with_path(block_params)[0]}
    return tuple((name, where[id(leaf)]) for name, leaf in params.items())


# --- the two halves of the backward -----------------------------------------------------------------

def tapped_layers(blocks, x, taps, mask, cfg, ops, remat: str, spec: BlockTaps):
    """The chunk's layers (scanned) with every weighted op tapped: (y, records), records stacked
    over layers. Padded layers (mask False) record zeros."""
    def layer(h, p, tap):
        tops = TapOps(ops, "tap", tap)
        return gpt.block(h, p, cfg, tops, remat), tuple(tops.records)

    def body(h, xs):
        p, tap, keep = xs
        if keep is None:
            return layer(h, p, tap)
        def skip(h):
            return h, jax.tree.map(zeros_like_aval, spec.records)

        return lax.cond(keep, lambda h: layer(h, p, tap), skip, h)

    if remat == "full":
        body = jax.checkpoint(body, policy=jax.checkpoint_policies.nothing_saveable)
    return layer_loop(body, x, (blocks, taps, mask), unroll=spec.unroll)


def weight_grads(blocks, records, cotangents, spec: BlockTaps):
    """dW of every layer of the chunk from its records and tap cotangents (module docstring),
    the sum over ops of each op's pullback of dY_i with respect to w: the gradients of the
    tapped ops' parameters (`blocks` holds those only, BlockTaps.split). The layers are
    independent, so they are batched (vmap: one batched matmul per weight, no loop) unless
    their ops nest shard_maps."""
    def layer(p, recs, dys):
        # one pullback per op, not the gradient of one summed pairing: under a 3D tensor layout
        # some ops' outputs vary over Y and others do not, and summing them into one scalar
        # would count the invariant ones once per Y device
        grads = jax.tree.map(jnp.zeros_like, p)
        for op, x, dy in zip(spec.ops, recs, dys):
            _, pullback = jax.vjp(lambda w, op=op, x=x: op.fn(x, op.params(w)), p)
            grads = jax.tree.map(jnp.add, grads, pullback(dy)[0])
        return grads

    if not spec.unroll:
        return jax.vmap(layer)(blocks, records, cotangents)
    return layer_loop(lambda _, xs: (None, layer(*xs)), None, (blocks, records, cotangents),
                      unroll=True)[1]


__all__ = ["BlockTaps", "TapOps", "WeightedOp", "reduced_in_b", "tapped_layers", "weight_grads"]
