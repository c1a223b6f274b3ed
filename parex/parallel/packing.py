"""What the branches of a `lax.switch` produce, passed through it as a few flat arrays in which
outputs that no branch produces together share their bytes.

    packer = Packer(templates, producers)        # name -> pytree of arrays; name -> branch ids
    branch i returns packer.pack(i, {name: value for the names it produces})
    got = packer.unpack(lax.switch(index, branches, ...))  # name -> value (garbage where the
                                                            # taken branch did not produce it)

Why: XLA:CPU writes every array a conditional returns in every branch, and each leaf is a thunk
of its own: a pipeline tick whose switch returned ~70 leaves (a value per stash buffer, a chunk's
gradients, the head's, the loss, the value sent) ran ~70 zero fills and copies in every branch,
idle included, on every tick, and wrote the sum of all the outputs' bytes where a branch produces
only some. Packed, one flat array per (dtype, varying axes) group, each output at a fixed offset
chosen so that two outputs share bytes only when no branch produces both (first fit): a branch
writes its outputs and zeros in the gaps with one concatenate, the array is as long as the most
any branch produces, and after the switch each output is a static slice, which XLA fuses into
the ops that read it. The caller must ignore an output on the ticks whose branch did not make it.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax

from .stash import varying_axes


def _group(leaf) -> tuple:
    return jnp.dtype(leaf.dtype).name, tuple(sorted(varying_axes(leaf)))


class Packer:
    """The layout of the packed outputs (static), built from their templates (arrays or avals of
    the outputs' shapes, dtypes and varying axes) and which branches produce each."""

    def __init__(self, templates: dict, producers: dict):
        self.templates, self.producers = templates, producers
        self.trees = {name: jax.tree.structure(t) for name, t in templates.items()}
        self.leaves = {name: [(_group(leaf), tuple(leaf.shape)) for leaf in jax.tree.leaves(t)]
                       for name, t in templates.items()}
        self.groups = tuple(dict.fromkeys(g for ls in self.leaves.values() for g, _ in ls))
        self.offset, self.length = {}, dict.fromkeys(self.groups, 0)
        for group in self.groups:
            self._place(group)

    def _size(self, name, group) -> int:
        return sum(math.prod(shape) for g, shape in self.leaves[name] if g == group)

    def _place(self, group):
        """First fit, largest first: an output never overlaps one a common branch produces."""
        placed = []  # (start, end, producers)
        names = sorted(self.templates, key=lambda n: -self._size(n, group))
        for name in names:
            size, mine = self._size(name, group), self.producers.get(name, frozenset())
            start = 0
            for a, b, theirs in sorted(p for p in placed if p[2] & mine):
                if start + size <= a:
                    break
                start = max(start, b)
            placed.append((start, start + size, mine))
            self.offset[name, group] = start
            self.length[group] = max(self.length[group], start + size)

    def pack(self, branch: int, produced: dict) -> tuple:
        """The flat arrays of one branch: its outputs (those it is listed as producing), zeros
        in between."""
        extra = {n for n in produced if branch not in self.producers.get(n, ())}
        if extra:
            raise ValueError(f"branch {branch} produces {sorted(extra)}, not in its producers")
        flats = []
        for group in self.groups:
            pieces = []
            for name in produced:
                start = self.offset[name, group]
                for (g, _), leaf in zip(self.leaves[name], jax.tree.leaves(produced[name])):
                    if g == group:
                        pieces.append((start, leaf.reshape(-1)))
                        start += leaf.size
            flats.append(self._concatenate(group, pieces))
        return tuple(flats)

    def _concatenate(self, group, pieces):
        dtype, axes = group
        parts, at = [], 0
        for start, flat in sorted(pieces, key=lambda p: p[0]):
            if start > at:
                parts.append(_zeros(start - at, dtype, axes))
            parts.append(flat)
            at = start + flat.size
        if at < self.length[group] or not parts:
            parts.append(_zeros(self.length[group] - at, dtype, axes))
        return jnp.concatenate(parts) if len(parts) > 1 else parts[0]

    def unpack(self, flats: tuple) -> dict:
        """name -> its value read back from the flat arrays."""
        out = {}
        for name, leaves in self.leaves.items():
            starts, values = {g: self.offset[name, g] for g in self.groups}, []
            for group, shape in leaves:
                flat, size = flats[self.groups.index(group)], math.prod(shape)
                values.append(flat[starts[group]:starts[group] + size].reshape(shape))
                starts[group] += size
            out[name] = jax.tree.unflatten(self.trees[name], values)
        return out


def _zeros(n: int, dtype, axes: tuple):
    zeros = jnp.zeros((n,), dtype)
    return lax.pcast(zeros, axes, to="varying") if axes else zeros
