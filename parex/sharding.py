"""The model's layout-dependent operations on a mesh: sharding constraints from the Layout's rules,
and the attention core the Layout asks for."""

from __future__ import annotations

import jax
from jax.sharding import Mesh, NamedSharding

from .layout import Layout
from .model import Ops


class MeshOps(Ops):
    """`constrain` pins activations to `layout.spec(dims)`; XLA's SPMD partitioner inserts the
    collectives between differently sharded regions (e.g. Megatron's all-reduce after W_out)."""

    def __init__(self, layout: Layout, mesh: Mesh):
        self.layout, self.mesh = layout, mesh

    def sharding(self, dims, kind: str = "act") -> NamedSharding:
        return NamedSharding(self.mesh, self.layout.spec(dims, kind))

    def constrain(self, x, dims):
        return jax.lax.with_sharding_constraint(x, self.sharding(dims))
