"""fsdp inside pipeline stages, written out: each op gathers its chunk's weights and each
backward op reduce-scatters their gradients, as FSDP does around every layer.

Left to XLA's partitioner inside the stage's shard_map, the tick loop's buffers carried no
batch sharding and XLA chose per layout: gathering the backward's activations over fsdp (tiny
`fsdp=2,stage=2,microbatches=2`: 22.6 MB of all-gathers and 6.3 MB of all-to-alls per device),
or all-reducing every layer's whole gradient once per microbatch. With `fsdp` manual in the
pipeline's shard_map (ZeRO < 3, no SP or seq: `manual_fsdp`) each device holds its rows of the
microbatch and 1/f of each weight's embed dim (the same layout: 6.8 MB of all-gathers, 3.1 MB
of reduce-scatters, 0.3 MB of all-reduces):

    F, B      w = all_gather(w_shard, fsdp)           the chunk's weights, whole, per op
    B, or W   dw_shard = psum_scatter(dw, fsdp)       their gradients, per op
    after     the shards summed over data; the unsharded leaves (biases, norms) over fsdp too

(W gathers nothing: a weight gradient does not read the weight.) The gathered weights enter each
piece's vjp as its parameters, so they are never stashed (stash.Residuals forwards parameter
leaves): B gathers them again. Collectives on a tensor-sharded operand run in a shard_map over
`tensor` too, or XLA would gather the operand whole over tensor first.
"""


from __future__ import annotations

from dataclasses import dataclass

import jax
from jax import lax
from jax.sharding import AxisType, PartitionSpec

from ..model import transformer as gpt
from ..layout import Axis, fsdp_by_hand

FSDP = Axis.FSDP.value


def manual_fsdp(layout) -> int:
    """The fsdp size the pipeline runs by hand (layout.fsdp_by_hand); 1: none, or left to XLA.
    (SP's and seq's nested regions gather the shards themselves: their layers are unrolled, and
    a whole weight sliced from a gathered chunk would be stashed per microbatch in flight.)"""
    by_hand = fsdp_by_hand(layout.fsdp, layout.zero, layout.sp, layout.seq)
    return layout.fsdp if by_hand else 1


def _is_dim(d) -> bool:
    return d is None or isinstance(d, int)


def _is_dims(d) -> bool:
    return isinstance(d, tuple)


def embed_dims(cfg) -> dict:
    """The blocks' pytree with each leaf's embed dim (the one fsdp splits) or None, counted in
    a chunk's (Lmax, ...) leaves, as in the stacked (L, ...) parameters."""
    def index(dims):
        return dims.index("embed") if "embed" in dims else None
    return jax.tree.map(index, gpt.param_dims(cfg)["blocks"], is_leaf=_is_dims)


def block_specs(cfg, stage: str, fsdp: int) -> dict:
    """shard_map specs of the (p, v, Lmax, ...) chunks: stage, and fsdp on the embed dim."""
    def spec(dim):
        entries = [stage, None] + [None] * (0 if dim is None else dim + 1)
        if dim is not None and fsdp > 1:
            entries[2 + dim] = FSDP
        return PartitionSpec(*entries)
    return jax.tree.map(spec, embed_dims(cfg), is_leaf=_is_dim)


def _leaves(fn, tree, dims):
    """fn(leaf, its embed dim) over a blocks tree (dims first: its None leaves are leaves)."""
    return jax.tree.map(lambda d, w: fn(w, d), dims, tree, is_leaf=_is_dim)


def _gather(w, d):
    return w if d is None else lax.all_gather(w, FSDP, axis=d, tiled=True)


def _scatter(g, d):
    return g if d is None else lax.psum_scatter(g, FSDP, scatter_dimension=d, tiled=True)


@dataclass(frozen=True)
class ChunkShards:
    """How one device's chunk is split over a manual fsdp axis, inside the pipeline's body."""

    dims: dict  # each block leaf's embed dim (fsdp splits it) or None
    specs: dict  # each chunk leaf's PartitionSpec over the automatic axes (tensor)
    free: frozenset  # the automatic mesh axes that split something (size > 1)
    mesh: object  # the body's abstract mesh

    @classmethod
    def of(cls, cfg, ops) -> ChunkShards:
        """`ops` as seen inside the body (fsdp=1 in its layout, MeshOps.inside)."""
        sizes = {axis.value: n for axis, n in ops.layout.axis_sizes().items()}
        free = frozenset(name for name, kind in zip(ops.mesh.axis_names, ops.mesh.axis_types)
                         if kind != AxisType.Manual and sizes.get(name, 1) > 1)
        specs = jax.tree.map(lambda d: ops.layout.spec((None,) + tuple(d[1:]), "param"),
                             gpt.param_dims(cfg)["blocks"], is_leaf=_is_dims)
        return cls(embed_dims(cfg), specs, free, ops.mesh)

    def _local(self, fn, tree):
        """fn on each leaf of a blocks tree (or of some of its top-level keys), in a shard_map
        over the automatic axes when there are any: XLA's partitioner meeting a collective on
        a tensor-sharded operand gathers it whole first."""
        dims = {k: self.dims[k] for k in tree}  # tree may hold some of the block's keys
        if not self.free:
            return _leaves(fn, tree, dims)
        specs = {k: self.specs[k] for k in tree}
        return jax.shard_map(lambda t: _leaves(fn, t, dims), mesh=self.mesh,
                             in_specs=(specs,), out_specs=specs,
                             axis_names=set(self.free))(tree)

    def gather(self, chunk):
        """A chunk's weight shards, whole over fsdp."""
        return self._local(_gather, chunk)

    def scatter(self, grads):
        """A chunk's whole weight gradients (this device's rows' partial sums), reduce-scattered
        into the shards it holds; the unsharded leaves stay partial (summed after the loop)."""
        return self._local(_scatter, grads)

    def sum_unsharded(self, grads):
        """After the loop: the leaves fsdp does not split, summed over it."""
        return _leaves(lambda g, d: lax.psum(g, FSDP) if d is None else g, grads, self.dims)


__all__ = ["ChunkShards", "block_specs", "embed_dims", "manual_fsdp"]
