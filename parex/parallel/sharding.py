"""The model's layout-dependent operations on a mesh: sharding constraints from the Layout's rules,
the attention core the Layout asks for, and the explicit collectives of sequence parallelism."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, Mesh, NamedSharding

from ..layout import Axis, Layout, is_dims, spec_axes
from ..model.transformer import Ops
from ..model.moe.layer import COMBINE, DISPATCH, MASKS, SLOTS, TOKENS
from .context import ring_attention, ulysses_attention, zigzag, zigzag_positions
from .nested import nested_shard_map

RESIDUAL = ("batch", "seq_res", "hidden")  # the residual stream (B, T, D)
QUERY = ("batch", "seq", "heads", "head_dim")
KEY_VALUE = ("batch", "seq", "kv_heads", "head_dim")


def gather_along(x, axis: str, dim: int, gather=jax.lax.all_gather):
    """x gathered over mesh `axis` along its dim `dim`, as a tiled all-gather gives it: the
    pieces gathered along a new leading axis and laid into `dim` once. Gathered along `dim` in
    place, XLA:CPU lays the result out with that dim major and every fusion that reads it
    transposes it again (measure.hlo.transposing_reads). `gather`: jax.lax.all_gather, or an
    invariant one (parallel.tensor3d.gather_whole)."""
    parts = gather(x, axis, axis=0, tiled=False)  # (n, *x.shape)
    return jnp.moveaxis(parts, 0, dim).reshape(*x.shape[:dim], -1, *x.shape[dim + 1:])


def scatter_along(y, axis: str, dim: int):
    """Partial sums y summed over mesh `axis` and scattered along its dim `dim`, as a tiled
    reduce-scatter gives them: the dim's pieces moved to a leading axis first, so that the
    backward's gather is laid out as gather_along's."""
    n = jax.lax.axis_size(axis)
    pieces = y.reshape(*y.shape[:dim], n, y.shape[dim] // n, *y.shape[dim + 1:])
    return jax.lax.psum_scatter(jnp.moveaxis(pieces, dim, 0), axis, scatter_dimension=0)


@dataclass(frozen=True)
class Weight:
    """A manual region's operand that is a parameter: it comes in with its parameter sharding."""

    dims: tuple


class MeshOps(Ops):
    """`constrain` pins activations to `layout.spec(dims)`; XLA's SPMD partitioner inserts the
    collectives between differently sharded regions (e.g. Megatron's all-reduce after W_out).
    Where the partitioner would pick the wrong collective or none exists (sequence parallelism's
    reduce-scatter on the CPU, ring and all-to-all attention), the op runs in `shard_map` with
    the collective written out."""

    def __init__(self, layout: Layout, mesh: Mesh):
        self.layout, self.mesh = layout, mesh

    def inside(self, manual_data: bool = False, manual_fsdp: bool = False) -> MeshOps:
        """These ops as seen inside a shard_map (the pipeline's over `stage`, the accumulation
        loop's over `data`): constraints and nested shard_maps name only the axes still auto,
        and with `data` (`fsdp`) manual each device's layout has data=1 (fsdp=1: the pipeline
        hands the ops whole weights, parallel.fsdp_stage)."""
        inner = copy.copy(self)
        inner.mesh = jax.sharding.get_abstract_mesh()
        if manual_data:
            inner.layout = inner.layout.replace(data=1, zero=0)
        if manual_fsdp:
            inner.layout = inner.layout.replace(fsdp=1)
        return inner

    @property
    def nests_shard_maps(self) -> bool:
        """Whether these ops run shard_maps (sp, seq) inside another's manual region."""
        manual = any(kind == AxisType.Manual for kind in self.mesh.axis_types)
        return manual and (self.layout.sp or self.layout.seq > 1)

    @property
    def in_pipeline_stage(self) -> bool:
        """Whether these ops run inside the pipeline executor's shard_map (its `stage` axis is
        manual), where each stage takes its own branch of the tick switch: a collective there
        must rendezvous per group (ring attention's hops become all-to-alls)."""
        kinds = dict(zip(self.mesh.axis_names, self.mesh.axis_types))
        return kinds.get(Axis.STAGE.value) == AxisType.Manual

    def sharding(self, dims, kind: str = "act") -> NamedSharding:
        return NamedSharding(self.mesh, self.layout.spec(dims, kind))

    def constrain(self, x, dims):
        return jax.lax.with_sharding_constraint(x, self.sharding(dims))

    def manual(self, fn, in_dims, out_dims):
        """fn on each device's blocks: operands and results named by logical dims (a `Weight`
        operand comes in with its parameter sharding). Axes that an enclosing shard_map already
        made manual (a pipeline's stage axis) are left to it."""
        def spec(dims):
            if isinstance(dims, Weight):
                return self.layout.spec(dims.dims, "param")
            return self.layout.spec(dims)

        specs = partial(jax.tree.map, spec, is_leaf=lambda d: is_dims(d) or isinstance(d, Weight))
        free = frozenset(name for name, kind in zip(self.mesh.axis_names, self.mesh.axis_types)
                         if kind != AxisType.Manual)
        nested = len(free) < len(self.mesh.axis_names)  # inside another shard_map
        return (nested_shard_map if nested else jax.shard_map)(
            fn, mesh=self.mesh, in_specs=specs(tuple(in_dims)), out_specs=specs(out_dims),
            axis_names=free)

    def stage_tables(self, params: dict, length: int) -> dict:
        """The token table with its FSDP/ZeRO-3 shards gathered (vocab stays split over
        tensor), as a pipeline's first stage uses it; a ViT's read-in as it is."""
        if "tokens" not in params:
            return params
        return params | {"tokens": self.constrain(params["tokens"], ("vocab", "embed"))}

    def gather_weight(self, w, dims):
        """Inside a manual region: the weight whole over the axes that only its parameter
        sharding splits (W[D_fsdp, F_tensor] -> W[D, F_tensor]: fsdp, and data under ZeRO-3).
        The gradient then leaves reduce-scattered over those axes, and only its shard is summed
        over the other replicas (data, seq): the shard is made varying over them first."""
        param, act = self.layout.spec(dims, "param"), self.layout.spec(dims)
        if param == act:
            return w
        split = {name for entry in param for name in spec_axes(entry)}
        replicas = tuple(a.value for a in (Axis.DATA, Axis.FSDP, Axis.EXPERT, Axis.SEQ)
                         if self.layout.axis_sizes()[a] > 1 and a.value not in split)
        w = jax.lax.pcast(w, replicas, to="varying") if replicas else w
        for i, (entry, used) in enumerate(zip(param, act)):
            if entry != used:  # only `embed` differs: split over the batch axes, used whole
                w = jax.lax.all_gather(w, entry, axis=i, tiled=True)
        return w

    # --- FP8 weights (parex.model.fp8) ----------------------------------------------------------
    def weight_whole(self, w, w_dims):
        """A row- or block-scaled weight gathered in the compute dtype before it is quantised
        (torchao all-gathers those in bfloat16)."""
        return self.constrain(w, w_dims)

    def fp8_gather(self, w_dims):
        """FSDP's FP8 all-gather of a tensor-scaled weight cast on its shards: the FP8 bytes,
        as uint8, gathered over the axes that only the parameter sharding splits (XLA:CPU would
        otherwise widen an FP8 all-gather to 16 or 32 bits); None where the weight is whole."""
        param, act = self.layout.spec(w_dims, "param"), self.layout.spec(w_dims)
        if param == act:
            return None

        def local(bits):
            for i, (entry, used) in enumerate(zip(param, act)):
                if entry != used:  # only `embed` differs: split over the batch axes, used whole
                    bits = jax.lax.all_gather(bits, entry, axis=i, tiled=True)
            return bits

        gather = jax.shard_map(local, mesh=self.mesh, in_specs=param, out_specs=act,
                               check_vma=False)
        return lambda w8: jax.lax.bitcast_convert_type(
            gather(jax.lax.bitcast_convert_type(w8, jnp.uint8)), w8.dtype)

    def gathers_weights(self, w_dims) -> bool:
        return self.layout.spec(w_dims, "param") != self.layout.spec(w_dims)

    # --- Megatron sequence parallelism (Korthikanti et al. 2022) --------------------------------
    # Under sp=on the residual stream is x[B, T_tensor, D]. Entering a tensor-parallel region
    # all-gathers T (backward: reduce-scatter of the input gradient); leaving it reduce-scatters
    # the partial sums of the row-parallel matmul (backward: all-gather). Same bytes as TP's one
    # all-reduce, but the LayerNorm/dropout regions hold 1/t of the activations. What is saved
    # for the backward is Megatron's: the sequence-split input of each column-parallel matmul,
    # all-gathered again in the backward (jax.checkpoint around gather + matmul, whose inputs
    # are then its only residuals; the recomputed matmul is dead code). XLA merges the head's
    # re-gather with its forward gather, which its backward follows at once. Weights enter with
    # their parameter sharding and are all-gathered over fsdp (ZeRO-3: data) inside, as FSDP
    # does: again in the backward, their gradients reduce-scattered, never kept gathered. The
    # lookup's backward needs only the token ids, so it saves nothing gathered.

    def column_parallel(self, eq, x, ws, w_dims, out_dims, states=None):
        if not self.layout.sp:
            return super().column_parallel(eq, x, ws, w_dims, out_dims, states)
        tensor = Axis.TENSOR.value

        @jax.checkpoint  # residuals: x (B, T/(s·t), D) and the weights' shards
        def local(x, *ws):  # x (B, T/(s·t), D) -> (B, T/s, D), then W_in[D, F_tensor]
            x = gather_along(x, tensor, 1)
            return tuple(jnp.einsum(eq, x, self.gather_weight(w, w_dims)) for w in ws)

        fn = self.manual(local, (RESIDUAL,) + (Weight(w_dims),) * len(ws), (out_dims,) * len(ws))
        return fn(x, *ws)

    def lookup(self, table, tokens):
        """Megatron's vocab-parallel embedding under SP: each tensor shard looks up the tokens
        whose rows it holds (zeros for the rest), and the partial sums are reduce-scattered over
        T into the residual region (backward: all-gather, then a local scatter-add). Left to XLA
        it would all-gather the whole table and all-reduce its gradient instead."""
        if not self.layout.sp:
            return super().lookup(table, tokens)
        tensor, dims = Axis.TENSOR.value, ("vocab", "embed")

        def local(table, tokens):  # table (V/t, D), tokens (B, T/s) -> (B, T/(s·t), D)
            table = self.gather_weight(table, dims)  # the backward needs only the ids
            rows = table.shape[0]
            ids = tokens - jax.lax.axis_index(tensor) * rows
            held = (ids >= 0) & (ids < rows)
            x = jnp.where(held[..., None], table[jnp.clip(ids, 0, rows - 1)], 0)
            return scatter_along(x, tensor, 1)

        return self.manual(local, (Weight(dims), ("batch", "seq")), RESIDUAL)(table, tokens)

    def row_parallel(self, eq, u, w, u_dims, w_dims, state=None):
        if not self.layout.sp:
            return super().row_parallel(eq, u, w, u_dims, w_dims, state)
        tensor = Axis.TENSOR.value

        def local(u, w):  # partial sums (B, T/s, D) -> summed and scattered (B, T/(s·t), D)
            y = jnp.einsum(eq, u, self.gather_weight(w, w_dims))
            return scatter_along(y, tensor, 1)

        if self.gathers_weights(w_dims):  # keep the weight's shard, not the gathered weight
            local = jax.checkpoint(local)
        return self.manual(local, (u_dims, Weight(w_dims)), RESIDUAL)(u, w)

    # --- expert parallelism (parex.model.moe.layer) ---------------------------------------------------

    def dispatch(self, mask, x):
        """Under seq, each device holds T/s of the tokens and the slots are split over seq
        (SLOTS' `capacity`): its partial sums of the whole buffer, reduce-scattered over seq,
        leave it C/s of the slots, whose experts only it runs. XLA's partitioner would
        all-reduce the partial sums and slice them instead (twice the bytes on the CPU)."""
        if self.layout.seq == 1:
            return super().dispatch(mask, x)
        seq = Axis.SEQ.value

        def local(mask, x):  # (b, T/s, E, C), (b, T/s, D) -> (E, b, C/s, D)
            partial_slots = jnp.einsum(DISPATCH, mask.astype(x.dtype), x)  # (E, b, C, D)
            return scatter_along(partial_slots, seq, 2)

        return self.manual(local, (MASKS, TOKENS), SLOTS)(mask, x)

    def combine(self, mask, out):
        """Under seq: the experts' outputs of all C slots gathered over seq, each device
        combining them into its own T/s tokens (the backward reduce-scatters their gradient)."""
        if self.layout.seq == 1:
            return super().combine(mask, out)
        seq = Axis.SEQ.value

        def local(mask, out):  # (b, T/s, E, C), (E, b, C/s, D) -> (b, T/s, D)
            whole = gather_along(out, seq, 2)  # (E, b, C, D)
            return jnp.einsum(COMBINE, mask.astype(out.dtype), whole)

        return self.manual(local, (MASKS, SLOTS), TOKENS)(mask, out)

    def experts(self, ffn, slots, weights, dims):
        """The dispatch buffer x_e[E, B, C, D] (B split over data, fsdp and expert) to the
        devices that hold each expert and back: an all-to-all over the expert group splits E and
        gathers B (x_e[E/ep, ep·B_local, C, D]), each device runs its experts, and the transposed
        all-to-all returns the slots. Unfolded, the group is `expert` and F_e is split over
        tensor (the partial outputs psum'd); folded (expert_tensor=1) the group is expert ×
        tensor, each tensor device sending its C/t of the slots (SLOTS' `capacity`), and every
        expert is whole on one device."""
        group = tuple(a.value for a in self.layout.expert_axes
                      if self.layout.axis_sizes()[a] > 1)
        group = group[0] if len(group) == 1 else group  # one axis: by name, as unfolded always was
        split_f = self.layout.tensor > 1 and not self.layout.folds_experts

        def reduce(y):
            return jax.lax.psum(y, Axis.TENSOR.value) if split_f else y

        def local(slots, weights):
            weights = {n: self.gather_weight(w, dims[n]) for n, w in weights.items()}
            if group:  # (E, b, C, D) -> (E/ep, ep·b, C, D)
                slots = jax.lax.all_to_all(slots, group, 0, 1, tiled=True)
            out = ffn(slots, weights, reduce)
            return jax.lax.all_to_all(out, group, 1, 0, tiled=True) if group else out

        w_dims = {n: Weight(d) for n, d in dims.items()}
        return self.manual(local, (SLOTS, w_dims), SLOTS)(slots, weights)

    # --- context parallelism on the seq axis ----------------------------------------------------

    def attention(self, q, k, v, window=None, causal=True):
        cp, seq = self.layout.cp, Axis.SEQ.value
        if cp == "ring":  # no window: validation's sliding-window-ring refuses one
            core = partial(ring_attention, axis_name=seq, s=self.layout.seq,
                           per_group=self.in_pipeline_stage)
        elif cp == "ulysses":
            core = partial(ulysses_attention, axis_name=seq, kernel=self.kernel, window=window)
        else:
            return super().attention(q, k, v, window, causal)
        return self.manual(core, (QUERY, KEY_VALUE, KEY_VALUE), QUERY)(q, k, v)

    def seq_order(self, x, axis: int = 1):
        """Ring attention stores positions zig-zag, so each seq shard gets equal causal work."""
        return zigzag(x, self.layout.seq, axis) if self.layout.cp == "ring" else x

    def seq_positions(self, T: int):
        if self.layout.cp != "ring":
            return None
        return zigzag_positions(T, self.layout.seq)
