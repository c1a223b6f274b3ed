"""The tick switch's outputs, in positions that outputs no branch produces together share.

    positions = Positions.plan(outputs)             # once, at trace time
    values = positions.fill(produced)               # in a branch: a tuple, one array per position
    value = positions.read(values, key)             # after the switch: one output's value

Every branch of a `lax.switch` returns the same structure, so a branch writes zeros into every
output it does not produce (XLA materialises them: a conditional's outputs are buffers of their
own). Outputs of one size, dtype and varying axes that no single branch produces together (F's
residual and record leaves, B's tap cotangents, W's weight gradients) can use one position: each
branch then zero-fills only the positions it does not use. The puts after the switch read their
output's position and keep dropping it (an out-of-range slot) on ticks whose branch does not
produce it, so what another branch left in a shared position is never stored. Nothing is
concatenated: a position is one flat array, an output its reshape (no copy); where XLA partitions
axes inside the stage, each output keeps its own position and shape (`Positions.plan`).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax import lax


@dataclass(frozen=True)
class Output:
    """One value a branch may produce: its key, aval (shape, dtype), the manual axes it varies
    over, and the indices of the branches that produce it."""

    key: tuple
    shape: tuple
    dtype: object
    axes: tuple
    producers: frozenset

    @property
    def kind(self) -> tuple:
        """What a position holds: a flat array of so many elements of one dtype and axes."""
        return ((_size(self.shape),), jnp.dtype(self.dtype), self.axes)


@dataclass(frozen=True)
class Positions:
    """The switch's output positions (each an Output's kind) and each key's position. Keys that
    no branch produces have none."""

    kinds: tuple  # (shape, dtype, axes) per position
    of: dict  # key -> position
    producers: dict  # key -> the indices of the branches that produce it
    shapes: dict  # key -> its shape

    @classmethod
    def plan(cls, outputs: list[Output], share: bool = True) -> Positions:
        """Greedy colouring per kind: an output takes the first position of its kind that holds
        no output sharing a producer with it (outputs produced by one branch never share).
        `share` False, where XLA partitions axes inside the stage (tensor, seq, fsdp): every
        output keeps a position of its own shape, since flattening a value sharded over such an
        axis would be a collective inside the device-dependent switch (an abort on CPU)."""
        kinds, of, users = [], {}, []  # users: per position, the producers of its outputs
        for out in outputs:
            if not out.producers:
                continue
            kind = out.kind if share else (out.shape, jnp.dtype(out.dtype), out.axes)
            free = next((i for i, k in enumerate(kinds)
                         if share and k == kind and not users[i] & out.producers), None)
            if free is None:
                free = len(kinds)
                kinds.append(kind)
                users.append(frozenset())
            users[free] = users[free] | out.producers
            of[out.key] = free
        return cls(tuple(kinds), of, {o.key: o.producers for o in outputs if o.producers},
                   {o.key: o.shape for o in outputs})

    def fill(self, produced: dict) -> tuple:
        """A branch's outputs: its produced values (key -> array) in their positions, zeros in
        the others, each in its position's dtype and varying over its axes."""
        values = [None] * len(self.kinds)
        for key, value in produced.items():
            i = self.of[key]
            assert values[i] is None, f"{key} shares a position with a value of its branch"
            values[i] = _as(value.reshape(self.kinds[i][0]), self.kinds[i])
        return tuple(_zeros(kind) if v is None else v for v, kind in zip(values, self.kinds))

    def read(self, values: tuple, key):
        """The value at `key`'s position (what its producer wrote, when the tick's branch is one)."""
        return values[self.of[key]].reshape(self.shapes[key])

    @property
    def bytes(self) -> int:
        """Bytes of one branch's outputs: every position once."""
        return sum(int(jnp.dtype(d).itemsize * _size(shape)) for shape, d, _ in self.kinds)


def _size(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _zeros(kind):
    shape, dtype, axes = kind
    zeros = jnp.zeros(shape, dtype)
    return lax.pcast(zeros, axes, to="varying") if axes else zeros


def _as(value, kind):
    """value in the position's dtype, varying over (at least) its axes."""
    from .stash import varying_axes

    shape, dtype, axes = kind
    if tuple(value.shape) != tuple(shape):
        raise ValueError(f"a switch output of shape {value.shape} in a position of {shape}")
    value = value.astype(dtype)
    missing = tuple(sorted(set(axes) - varying_axes(value)))
    return lax.pcast(value, missing, to="varying") if missing else value


def leaf_outputs(name: str, tree, producers: frozenset, drop_leading: bool = True) -> list:
    """An Output per leaf of `tree` (a buffer's or accumulator's leaves; their leading slot dim
    dropped when `drop_leading`), keyed (name, leaf index)."""
    from .stash import varying_axes

    out = []
    for i, leaf in enumerate(jax.tree.leaves(tree)):
        shape = tuple(leaf.shape[1:] if drop_leading else leaf.shape)
        out.append(Output((name, i), shape, leaf.dtype, tuple(sorted(varying_axes(leaf))),
                          producers))
    return out


__all__ = ["Output", "Positions", "leaf_outputs"]
