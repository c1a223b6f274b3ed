"""AxoNN's 3D tensor parallelism (Singh et al., arXiv 2305.13525; AxoNN SC'24, arXiv 2502.08145),
written out with `jax.shard_map` so that every collective is visible.

The layout `tensor=XxYxZ` puts three groups on the mesh (parex.layout.Axis): X, the inner group
(Gc, axis `tensor`, innermost), Y, the outer group (Gr, `tensor_y`) and Z, the depth group (Gd,
`tensor_z`). Every linear layer W[in, out] has `in` split over X and `out` over Y, and its
local block sharded again over Z along D; the second layer of each pair (the attention
out-projection, FC2) is transposed, so the pair needs no re-layout between its two matmuls:

    W_qkv[D_XZ, (K·(G+2)·Dh)_Y]   W_o[(H·Dh)_Y, D_XZ]   W_in[D_XZ, F_Y]   W_out[F_Y, D_XZ]
    x[B_{data,Z}, T, D]  -> x[B, T, D_X] -> u[B, T, F_Y] (all-reduce over X)
                                        -> y[B, T, D_X] (all-reduce over Y) -> all-gather over X

Per layer, forward: all-gather W over Z, the local matmul, all-reduce the output over X (over Y
for the transposed layer). Backward (JAX's transpose of the same program): the input gradient
all-reduced over Y (over X for the transposed layer), W's gradient reduce-scattered over Z (the
transpose of the forward all-gather) and all-reduced over data. The gathered weight is not kept
for the backward: `jax.checkpoint` gathers it again (keeping it, which saves that gather at the
memory of a gathered block per layer, is not built), so a device holds 1/(XYZ) of each weight
between layers.

Beside data parallelism: fsdp=F cuts each block's D again, W_in[D_(X,Z,fsdp), F_Y], and the
block is gathered over Z·F at once (one all-gather, its gradient one reduce-scatter), the batch
split over data × fsdp × Z; ZeRO-1 splits the optimizer state's D over data as well
(Layout's rules for "opt"), so the update runs on 1/data of it and XLA all-gathers the updated
parameters over data once per step. ZeRO-2/3 and ZeRO-1 beside fsdp are refused
(parex.validation.rules.tensor3d_limit).

Between the pairs the residual stream, the norms and the attention core hold D whole
(x[B_{data,Z}, T, D]), so the norms need no collective: entering a pair slices D over X (no
communication; backward: an all-gather of dX over X), leaving it all-gathers over X (backward:
a slice), each gather laid into D once (gather_hidden). Heads: a device holds whole heads, the
fused QKV grouped by KV head (parex.model.transformer) split over Y, so a GQA group's query
heads sit with their key and value head (Y divides kv_heads). The embedding table
E[V_Y, D_XZ] is vocab-parallel over Y (masked lookup, all-reduce over Y, the rows' D split over
X); the head W_head[D_XZ, V_Y] is a first-of-pair layer whose logits stay split over Y for the
vocab-parallel cross-entropy.
"""

from __future__ import annotations

import copy

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from ..layout import Axis, Layout, spec_axes
from ..model.transformer import cross_entropy
from .sharding import MeshOps, gather_along
from .stash import vary

X, Y, Z = Axis.TENSOR.value, Axis.TENSOR_Y.value, Axis.TENSOR_Z.value
_RESIDUAL = ("batch", "seq", "hidden")  # a pair's input and output, (B, T, D)


def _all_gather_invariant():
    """all_gather that leaves the result invariant over the axis, its transpose a local slice.
    JAX 0.10.2 has no public form (jax.lax has only all_gather, whose result varies over the
    axis and whose transpose is a reduce-scatter: the residual stream would then be summed
    over X in the backward), so the private one is taken where the public one is missing."""
    public = getattr(jax.lax, "all_gather_invariant", None)
    if public is not None:
        return public
    from jax._src.lax.parallel import all_gather_invariant

    return all_gather_invariant


gather_whole = _all_gather_invariant()


def gather_hidden(y):
    """y[..., D_X] -> y[..., D] over X, invariant over X (its transpose a local slice), laid
    into D once (sharding.gather_along)."""
    return gather_along(y, X, y.ndim - 1, gather=gather_whole)


@jax.custom_vjp
def drop_x(x):
    """x[B, T, D] whole -> x[B, T, D_X], this device's slice (AxoNN's Drop): no communication;
    backward: all-gather the input gradient over X."""
    width = x.shape[-1] // jax.lax.axis_size(X)
    return jax.lax.dynamic_slice_in_dim(x, jax.lax.axis_index(X) * width, width, axis=-1)


def _drop_fwd(x):
    return drop_x(x), None


def _drop_bwd(_, ct):
    return (gather_hidden(ct),)


drop_x.defvjp(_drop_fwd, _drop_bwd)


def per_device_batch(layout: Layout, global_batch: int, microbatches: int = 1) -> int:
    """Sequences each device computes per microbatch: B / (data · fsdp · Z · m). The batch is
    split over data, fsdp and Z only, so the X (column) and Y (row) devices of a 3D group see
    the same shard: multiply the per-device batch by data · fsdp · Z, not by the device count,
    to get the global batch (AxoNN's users ask; tensor_z is 1 in every other layout)."""
    rows = layout.data * layout.fsdp * layout.tensor_z * microbatches
    if global_batch % rows:
        raise ValueError(f"global batch {global_batch} is not divisible by data × fsdp × Z × "
                         f"microbatches = {rows}: use a multiple of {rows}")
    return global_batch // rows


def mesh_ops(layout: Layout, mesh: Mesh) -> MeshOps:
    """The model's ops for a layout: the 3D executor's for `tensor=XxYxZ`, else MeshOps."""
    return Tensor3DOps(layout, mesh) if layout.tensor3d else MeshOps(layout, mesh)


class Tensor3DOps(MeshOps):
    """MeshOps whose tensor-parallel matmuls and embedding lookup run AxoNN's 3D algorithm;
    everything else (norms, attention, the loss) follows the Layout's rules under XLA's
    partitioner.

    Inside a pipeline stage (`inside`, parex.parallel.pipeline) X, Y and Z are manual axes of
    the pipeline's shard_map with data, fsdp and stage: the ops run their local programs as
    they are (no shard_map of their own), nothing is left to XLA's partitioner (which would
    reshard weights inside the schedule's switch branches, where the other stage's devices
    never join the collective), and the loss is the vocab-parallel cross-entropy over Y."""

    manual = False  # whether an enclosing shard_map holds X, Y and Z manual

    def inside(self, manual_data: bool = False, manual_fsdp: bool = False) -> MeshOps:
        """In a shard_map whose manual axes include the 3D groups: the whole layout is kept
        (the ops gather over Z, fsdp and data themselves); otherwise MeshOps.inside."""
        mesh = jax.sharding.get_abstract_mesh()
        kinds = dict(zip(mesh.axis_names, mesh.axis_types))
        if all(kinds.get(a) != jax.sharding.AxisType.Manual for a in (X, Y, Z)):
            return super().inside(manual_data, manual_fsdp)
        inner = copy.copy(self)
        inner.mesh, inner.manual = mesh, True
        return inner

    def constrain(self, x, dims):
        # inside a pipeline every axis that splits something is manual: nothing to pin
        return x if self.manual else super().constrain(x, dims)

    def _size(self, axis: str) -> int:
        return self.layout.axis_sizes()[Axis(axis)]

    def _enter(self, x):
        """The residual x[B, T, D] -> x[B, T, D_X] (backward: all-gather over X)."""
        return drop_x(x) if self._size(X) > 1 else x

    def _leave(self, y):
        """y[B, T, D_X] -> the residual y[B, T, D] (backward: a slice)."""
        return gather_hidden(y) if self._size(X) > 1 else y

    def _gather_z(self, w, w_dims):
        """W's local block, all-gathered along D over the axes its parameter sharding adds to X:
        Z, and fsdp when there is one (backward: reduce-scatter over them, then the shard
        all-reduced over data). W is made varying over data first: otherwise JAX would sum the
        gathered block's gradient over data, Z·fsdp times the bytes."""
        entry = self.layout.spec(w_dims, "param")[w_dims.index("embed")]
        split = tuple(a for a in spec_axes(entry) if a != X)
        replicas = tuple(a for a in (Axis.DATA.value, Axis.FSDP.value)
                         if self._size(a) > 1 and a not in split)
        w = vary(w, replicas)
        if not split:
            return w
        return jax.lax.all_gather(w, split, axis=w_dims.index("embed"), tiled=True)

    def _psum(self, y, axis: str):
        return jax.lax.psum(y, axis) if self._size(axis) > 1 else y

    def _shard_map(self, fn, in_specs, out_specs):
        # the gathered weight is gathered again in the backward, not stored (as FSDP does)
        if self.manual:
            return jax.checkpoint(fn)
        return jax.shard_map(jax.checkpoint(fn), mesh=self.mesh, in_specs=in_specs,
                             out_specs=out_specs)

    def column_parallel(self, eq, x, ws, w_dims, out_dims, states=None):
        """First of a pair: x[B, T, D_X] @ W[D_X(Z), out_Y] -> all-reduce over X."""
        def local(x, *ws):
            x = self._enter(x)
            # varying over Y once, so that its gradient from every W is summed over Y once
            x = jax.lax.pcast(x, (Y,), to="varying") if self._size(Y) > 1 else x
            return tuple(self._psum(jnp.einsum(eq, x, self._gather_z(w, w_dims)), X)
                         for w in ws)

        w_spec = self.layout.spec(w_dims, "param")
        out = self.layout.spec(out_dims)
        fn = self._shard_map(local, (self.layout.spec(_RESIDUAL),) + (w_spec,) * len(ws),
                             (out,) * len(ws))
        return fn(x, *ws)

    def row_parallel(self, eq, u, w, u_dims, w_dims, state=None):
        """Second of a pair, transposed: u[.., in_Y] @ W[in_Y, D_X(Z)] -> all-reduce over Y;
        the result D_X returns to the residual stream (an all-gather over X)."""
        def local(u, w):
            return self._leave(self._psum(jnp.einsum(eq, u, self._gather_z(w, w_dims)), Y))

        fn = self._shard_map(local, (self.layout.spec(u_dims), self.layout.spec(w_dims, "param")),
                             self.layout.spec(_RESIDUAL))
        return fn(u, w)

    def lookup(self, table, tokens):
        """Vocab-parallel lookup in E[V_Y, D_XZ]: each Y shard looks up the tokens whose rows it
        holds (zeros for the rest) and the partial rows are summed over Y (backward: a local
        scatter-add, reduce-scattered over Z)."""
        dims = ("vocab", "embed")

        def local(table, tokens):  # table (V/Y, D/(XZ)), tokens (B/(data·Z), T) -> (B, T, D)
            table = self._gather_z(table, dims)
            rows = table.shape[0]
            if self._size(Y) == 1:
                return self._leave(table[tokens])
            ids = tokens - jax.lax.axis_index(Y) * rows
            held = (ids >= 0) & (ids < rows)
            x = jnp.where(held[..., None], table[jnp.clip(ids, 0, rows - 1)], 0)
            return self._leave(jax.lax.psum(x, Y))

        fn = self._shard_map(local, (self.layout.spec(dims, "param"),
                                     self.layout.spec(("batch", "seq"))),
                             self.layout.spec(_RESIDUAL))
        return fn(table, tokens)

    # --- inside a pipeline stage (manual) ------------------------------------------------------

    def stage_tables(self, params: dict, length: int) -> dict:
        """The embedding's parameters as the pipeline's first virtual stage hands them to
        parex.model.transformer.embed: the token table stays split (`lookup` gathers it over Z), the
        position table's first `length` rows are made whole."""
        if not self.manual or "positions" not in params:
            return super().stage_tables(params, length)
        # D_(X,Z): gathered over Z (fsdp, ZeRO-3's data) as a varying value, whose backward
        # reduce-scatters the rows' partial sums, then over X invariantly (backward: a slice)
        rows = self._gather_z(params["positions"][:length], (None, "embed"))
        return params | {"positions": self._leave(rows)}

    def cross_entropy(self, logits, targets):
        """The mean loss of logits (B, T, V_Y) split over Y (Megatron's vocab-parallel
        cross-entropy): the max and the sum of exponentials reduced over Y, the target's logit
        taken on the Y device that holds its row."""
        if not self.manual or self._size(Y) == 1:
            return cross_entropy(logits, targets)
        logits = logits.astype(jnp.float32)
        rows = logits.shape[-1]
        top = jax.lax.pmax(jax.lax.stop_gradient(logits).max(-1), Y)
        total = jax.lax.psum(jnp.exp(logits - top[..., None]).sum(-1), Y)
        ids = targets - jax.lax.axis_index(Y) * rows
        held = (ids >= 0) & (ids < rows)
        picked = jnp.take_along_axis(logits, jnp.clip(ids, 0, rows - 1)[..., None], -1)[..., 0]
        target_logit = jax.lax.psum(jnp.where(held, picked, 0.0), Y)
        return jnp.mean(jnp.log(total) + top - target_logit)
