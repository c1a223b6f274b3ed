"""A pytree passed through a `lax.switch` as a few flat arrays instead of one array per leaf.

    packer = Packer()
    branches = [lambda *a: packer.pack(f(*a)) for f in fs]   # every branch, the same pytree
    tree = packer.unpack(lax.switch(i, branches, *args))

Why: XLA:CPU runs every array a conditional returns as separate thunks: each branch writes each
leaf (a zero fill where it does not produce it, and a copy when zeros are shared), so a pipeline
tick whose switch returns ~70 leaves (stash values, a chunk's gradients, the head's) pays ~70
small thunks in every branch, idle included, on every tick. Packed, a branch writes one array
per (dtype, varying axes) group: one concatenate fusion; the leaves come back after the switch
as static slices, which XLA fuses into the ops that read them. The bytes are the same.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from .stash import varying_axes


def _group(leaf) -> tuple:
    return (jnp.dtype(leaf.dtype).name, tuple(sorted(varying_axes(leaf))))


class Packer:
    """Records the pytree's structure the first time a branch packs it (static, at trace time);
    every later pack must have the same structure and avals, as lax.switch requires anyway."""

    def __init__(self):
        self.layout = None  # (treedef, ((group, shape), ...) per leaf, groups in order)

    def pack(self, tree) -> tuple:
        leaves, treedef = jax.tree.flatten(tree)
        metas = tuple((_group(leaf), tuple(leaf.shape)) for leaf in leaves)
        groups = tuple(dict.fromkeys(group for group, _ in metas))
        layout = (treedef, metas, groups)
        if self.layout is None:
            self.layout = layout
        elif self.layout != layout:
            raise ValueError("switch branches return different pytrees: cannot pack them alike")
        return tuple(jnp.concatenate([leaf.reshape(-1) for leaf, (g, _) in zip(leaves, metas)
                                      if g == group]) for group in groups)

    def unpack(self, flats: tuple):
        treedef, metas, groups = self.layout
        offsets = dict.fromkeys(groups, 0)
        leaves = []
        for group, shape in metas:
            flat, start = flats[groups.index(group)], offsets[group]
            size = math.prod(shape)
            leaves.append(flat[start:start + size].reshape(shape))
            offsets[group] = start + size
        return jax.tree.unflatten(treedef, leaves)
