"""Keeping a backward's residuals across pipeline ticks, so that B recomputes nothing.

    spec = Residuals.probe(f, params, args)          # once, before the tick loop
    out, aux, kept = spec.forward(f, params, args)   # F: run f, keep what its backward reads
    grads = spec.backward(kept, params, cotangent)   # B: the backward alone

`jax.vjp` returns the backward as a pytree whose leaves are its residuals. For a fixed function and
fixed input shapes those leaves have fixed shapes, so they can live in stash buffers carried by the
tick scan, one slot per microbatch in flight (`Stash`). JAX forwards a primal input that the
backward reads (a weight matrix, for dx = dY·Wᵀ) as a residual leaf itself: those leaves are the
parameters, the same for every microbatch, so they are not stashed; B passes the parameters again.
The remat policy of `f` decides what the residuals are, exactly as in the unpipelined step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax import lax


def varying_axes(value) -> frozenset:
    """The manual mesh axes a traced value varies over (its `vma`)."""
    aval = jax.typeof(value) if not isinstance(value, jax.ShapeDtypeStruct) else value
    mat = getattr(aval, "manual_axis_type", None)
    return frozenset(mat.varying if mat is not None else getattr(aval, "vma", ()))


def vary(tree, axes):
    """Mark values varying over `axes` (those they do not vary over yet), so that a vjp does not
    insert a psum inside a manual region's loop, and scan carries and switch branches agree on
    their types."""
    def one(a):
        missing = tuple(axis for axis in axes if axis not in varying_axes(a))
        return lax.pcast(a, missing, to="varying") if missing else a
    return jax.tree.map(one, tree)


def zeros_like_aval(aval, leading: tuple[int, ...] = ()) -> jax.Array:
    """Zeros of aval's shape (with `leading` dims in front) that vary as aval does, so that a
    scan carry or switch branch holding them agrees with the values stored into them."""
    zeros = jnp.zeros(leading + tuple(aval.shape), aval.dtype)
    axes = tuple(sorted(varying_axes(aval)))
    return lax.pcast(zeros, axes, to="varying") if axes else zeros


def _vjp(f: Callable, params, args: tuple, wrt_params: bool, has_aux: bool):
    """(out, pullback, aux) of f(params, *args), differentiated with respect to args (and params
    when `wrt_params`)."""
    if wrt_params:
        result = jax.vjp(f, params, *args, has_aux=has_aux)
    else:
        result = jax.vjp(lambda *a: f(params, *a), *args, has_aux=has_aux)
    return result if has_aux else (*result, None)


@dataclass(frozen=True)
class Residuals:
    """The backward of one function on fixed shapes: its pytree structure, which of its leaves
    are parameter leaves (index into jax.tree.leaves(params), or None), and the avals of the
    leaves that must be stashed."""

    treedef: Any
    forwarded: tuple[int | None, ...]
    stashed: tuple[jax.ShapeDtypeStruct, ...]
    wrt_params: bool
    has_aux: bool

    @classmethod
    def probe(cls, f: Callable, params, args: tuple | Callable, *, wrt_params: bool = True,
              has_aux: bool = False) -> Residuals:
        """Trace f's vjp abstractly (no computation) and record its residual structure. `args`
        may be a function of params, for arguments that hold some of the parameters
        themselves: built from the traced params, they are forwarded as in `forward`."""
        found = {}

        def run(params, fixed):
            _, pull, _ = _vjp(f, params, args(params) if callable(args) else fixed, wrt_params,
                              has_aux)
            leaves, found["treedef"] = jax.tree.flatten(pull)
            found["forwarded"] = _forwarded(leaves, params)
            return tuple(leaf for leaf, i in zip(leaves, found["forwarded"]) if i is None)

        stashed = jax.eval_shape(run, params, () if callable(args) else args)
        return cls(found["treedef"], found["forwarded"], tuple(stashed), wrt_params, has_aux)

    def forward(self, f: Callable, params, args: tuple):
        """(out, aux, kept): f's result, its auxiliary output (None without has_aux) and the
        residual leaves to stash."""
        out, pull, aux = _vjp(f, params, args, self.wrt_params, self.has_aux)
        leaves = jax.tree.leaves(pull)
        if _forwarded(leaves, params) != self.forwarded:
            raise RuntimeError("the residuals of a pipeline chunk changed between its probe and "
                               "its forward: the chunk function must be traced identically")
        return out, aux, tuple(leaf for leaf, i in zip(leaves, self.forwarded) if i is None)

    def backward(self, kept: list, params, cotangent):
        """The cotangents of f's differentiated inputs, from the stashed leaves."""
        param_leaves, kept = jax.tree.leaves(params), iter(kept)
        leaves = [next(kept) if i is None else param_leaves[i] for i in self.forwarded]
        return jax.tree.unflatten(self.treedef, leaves)(cotangent)


def _forwarded(leaves: list, params) -> tuple[int | None, ...]:
    """For each residual leaf, the index of the parameter leaf it is (by identity), or None."""
    index = {id(p): i for i, p in enumerate(jax.tree.leaves(params))}
    return tuple(index.get(id(leaf)) for leaf in leaves)


# --- slot buffers ----------------------------------------------------------------------------------

class Stash:
    """Slot buffers for a pytree of values of fixed avals: `slots` of each leaf (plus none when
    nothing is stored). Reads and writes index a slot with a traced integer."""

    @staticmethod
    def create(avals, slots: int, leading: tuple[int, ...] = ()):
        """Zeros for `slots` values of each aval (each with `leading` dims in front)."""
        return jax.tree.map(lambda a: zeros_like_aval(a, (slots, *leading)), avals)

    @staticmethod
    def read(buffers, slot):
        return jax.tree.map(lambda b: lax.dynamic_index_in_dim(b, slot, keepdims=False), buffers)

    @staticmethod
    def write(buffers, values, slot):
        return jax.tree.map(lambda b, v: lax.dynamic_update_index_in_dim(b, v.astype(b.dtype),
                                                                         slot, 0),
                            buffers, values)


__all__ = ["Residuals", "Stash", "varying_axes", "zeros_like_aval"]
