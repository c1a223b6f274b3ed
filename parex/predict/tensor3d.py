"""Predicted collectives of AxoNN's 3D tensor parallelism (`tensor=XxYxZ`,
parex.parallel.tensor3d), one family per line, b = B/(data·fsdp·Z) rows of T tokens per device;
with fsdp the "Z" families run over Z·fsdp (ZF: W's block is gathered over both at once):

    t3d-gather-z    all-gather W's block over Z, per layer and weight in the forward and again in
                    the backward (the gathered block is not kept); the tables once each (XLA
                    merges the head's backward re-gather with its forward gather: xla-cpu)
    t3d-scatter-z   reduce-scatter dW over Z, once per weight and step
    t3d-x           all-reduce over X: the outputs of the first layer of each pair (QKV, the MLP
                    inputs: XLA combines SwiGLU's two into one op) and the head's logits in the
                    forward, the transposed layers' input gradients (W_o, W_out) in the backward
    t3d-y           all-reduce over Y: the transposed layers' outputs and the embedding's rows in
                    the forward, the first layers' input gradients (one per layer and input: x
                    is made varying over Y once, so every W's contribution is summed first) and
                    the head's in the backward: 4L + 2 of (b, T, D/X)
    t3d-gather-x    all-gather over X where a pair hands D_X back to the residual stream (its two
                    exits and the embedding's in the forward, its two entries and the head's in
                    the backward): 4L + 2 of (b, T, D)
    t3d-grads       the weight shards' gradients over data (after the Z reduce-scatter), per
                    layer and once for the tables; the norms' and biases' over data × Z, per
                    layer and once (the final norm, GPT's used position rows and the loss);
                    with Z = 1 both ride one all-reduce over data (XLA's combiner)
    t3d-positions   xla-cpu, GPT: XLA gathers the used position rows over Z and adds them after
                    an all-gather over X of (b, T, D)
    cross-entropy   vocab-parallel over Y: 3 all-reduces of (b·T,) float32
    zero-gather     ZeRO-1 (data > 1): the updated parameters with a D dim back from their data
                    shards, once per step: all-gather over data of the device's XYZ shard
                    (L·layer_w/Z + the two tables + GPT's T_max·D/(X·Z) positions)

Under the gpu convention (Convention.axonn_overlaps) the step time prices AxoNN's three overlaps
(`overlaps`): the backward all-reduce of dX over Y beside dW's GEMM, the reduce-scatter of dW
over Z deferred behind the next block's backward, the next block's all-gather of W over Z
prefetched behind the current block's compute.

The terms are one microbatch's (the executor runs 3D layouts with one). The few scalars of the
global gradient norm (reduced over the axes each weight is split on) are left out, as comm.py
leaves out the loss scalars XLA fuses. The counts are parex's program's; XLA's all-reduce
combiner may merge two ops over the same group (the cross-entropy's with a gradient's), which
changes a count but never the bytes per kind and axes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..layout import Axis, Layout
from . import accelerator, memory
from .alpha_beta import term_seconds
from .comm import Convention, Term
from .shapes import Grid, ModelSizes

X, Y, Z, DATA, FSDP = Axis.TENSOR, Axis.TENSOR_Y, Axis.TENSOR_Z, Axis.DATA, Axis.FSDP
ZF = (FSDP, Z)  # the axes W's block is sharded over along D beside X: Z, and fsdp (Z·fsdp)


def _zf_axes(layout: "Sizes3D") -> tuple:
    """The Z families' axes: (Z,) where no layout has fsdp (the planner's grids), else ZF."""
    return ZF if np.any(np.asarray(layout.fsdp) > 1) else (Z,)
# How the step time (predict.time) treats each family: the activations' collectives sit on the
# critical path as Megatron's do; the Z gathers can be prefetched as FSDP's; the gradients'
# reduce-scatters and all-reduces hide behind the backward.
TIME_FAMILY = {"t3d-x": "tp", "t3d-y": "tp", "t3d-gather-x": "tp", "t3d-positions": "tp",
               "t3d-gather-z": "fsdp-gather", "t3d-scatter-z": "grad-reduce",
               "t3d-grads": "grad-reduce"}
# AxoNN's data-parallel gradient all-reduce (gpu convention): Megatron-AxoNN's DDP keeps every
# gradient in one contiguous buffer and all-reduces it in buckets of 40,000,000 elements
# (github.com/axonn-ai/Megatron-AxoNN, megatron/model/distributed.py, DistributedDataParallel's
# bucket_size default), not one call per layer: each call's chunk per rank is what decides
# whether RCCL stalls on it (data/networks/frontier-unconfigured.toml)
AXONN_GRAD_BUCKET = 40e6
# ... in float32: Megatron-LM's arguments.py sets accumulate_allreduce_grads_in_fp32 for bf16
# ("accumulate and all-reduce gradients in fp32 for bfloat16 data type"), Megatron-AxoNN's too
AXONN_GRAD_BUFFER_BYTES = 4
# AxoNN's overlaps (SC'24, arXiv 2502.08145), each with the family whose seconds it hides
OVERLAPS = {"dx-y-beside-dw": "t3d-y", "scatter-z-deferred": "t3d-scatter-z",
            "gather-z-prefetched": "t3d-gather-z"}


def hidden_column(overlap: str) -> str:
    """The columns' name of the seconds an overlap hides, e.g. hidden_dx_y_beside_dw_s."""
    return f"hidden_{overlap.replace('-', '_')}_s"


def dw_seconds(sizes: ModelSizes, grid: Grid, chip, dtype: str, act_bytes: int) -> tuple:
    """(QKV's, the MLP input's (SwiGLU: both), the head's) weight-gradient GEMM seconds per
    block and step at the sustained rate: predict.accelerator's roofline of the forward shape
    (grid: the `equivalent` layout, the same per-device FLOPs)."""
    rate, bandwidth = chip.peak(dtype) * chip.matmul_efficiency, chip.achievable_bandwidth()
    shapes = accelerator.matmul_shapes(sizes, grid)
    head = (grid.tokens, sizes.D, sizes.V / grid.tensor, 1)
    return tuple(accelerator.gemm_seconds(*shape, rate, bandwidth, act_bytes)
                 / chip.step_efficiency for shape in (shapes[0], shapes[2], head))


def overlaps(by_name: dict, y_ops, dw: tuple, work, L, heads=1) -> dict:
    """Seconds each of AxoNN's overlaps hides per step (columns), each min(the collective's
    time, the compute it runs behind), from the families' α-β seconds (`by_name`), the Y
    all-reduces per step (`y_ops`), `dw_seconds` and the step's compute `work`; L is the
    blocks a device runs backward per step (inside pipeline stages: its layers × m) and
    `heads` the head's backward passes (m):

        dx-y-beside-dw       L·[min(a, dW_qkv) + min(a, dW_mlp_in)] + heads·min(a, dW_head),
                             a = one all-reduce of (b, T, D/X) over Y: t3d-y / its ops
        scatter-z-deferred   (L−1)·min(S/L, ⅔·work/L): block l's dW reduce-scatter runs
                             during block l−1's backward; the last one has none after it
        gather-z-prefetched  (L−1)·min(G/L, work/L): block l+1's W gathers run during block
                             l's compute; the first block's has nothing before it

    The last two are the 1D prefetch and gradient-reduce formulas (time.step_time) per family:
    the Z scatters get their own window beside the data all-reduces (other links)."""
    a = by_name.get("t3d-y", 0.0) / np.maximum(y_ops, 1)
    qkv, mlp_in, head = dw
    gather, scatter = by_name.get("t3d-gather-z", 0.0), by_name.get("t3d-scatter-z", 0.0)
    return {"dx-y-beside-dw": L * (np.minimum(a, qkv) + np.minimum(a, mlp_in))
            + heads * np.minimum(a, head),
            "scatter-z-deferred": (L - 1) * np.minimum(scatter / L, 2 / 3 * work / L),
            "gather-z-prefetched": (L - 1) * np.minimum(gather / L, work / L)}


def with_overlaps(seconds: dict, terms: list[Term], on_axes, chip, sizes: ModelSizes,
                  grid: Grid, dtype: str, act_bytes: int, work) -> tuple[dict, dict]:
    """(family seconds for time.step_time, seconds each overlap hides): the three overlapped
    families leave their 1D families and what they do not hide is exposed ("tp": on the
    critical path, as time.EXPOSED; a 3D layout has no pipeline bubble it would lengthen)."""
    by_name: dict = {}
    for term in terms:
        by_name[term.name] = by_name.get(term.name, 0.0) + term_seconds(term, on_axes, chip)
    y_ops = sum(term.count for term in terms if term.name == "t3d-y")
    blocks = grid.stage_layers * grid.microbatches  # L without stages (one microbatch)
    hidden = overlaps(by_name, y_ops, dw_seconds(sizes, grid, chip, dtype, act_bytes), work,
                      blocks, grid.microbatches)
    out = dict(seconds)
    for overlap, name in OVERLAPS.items():
        t = by_name.get(name, 0.0)
        out[TIME_FAMILY[name]] = out.get(TIME_FAMILY[name], 0.0) - t
        out["tp"] = out.get("tp", 0.0) + t - hidden[overlap]
    return out, hidden


def annotate(collectives: list[dict], hidden: dict) -> None:
    """Each overlapped family's entries (Prediction.collectives) get `overlap` and
    `hidden_s`, their share (by seconds) of what the overlap hides."""
    for overlap, name in OVERLAPS.items():
        if overlap not in hidden:
            continue
        entries = [c for c in collectives if c["name"] == name]
        total = sum(c["seconds"] for c in entries)
        for c in entries:
            share = c["seconds"] / total if total else 0.0
            c |= {"overlap": overlap, "hidden_s": float(hidden[overlap]) * share}


@dataclass(frozen=True)
class AxesGrid(Grid):
    """A Grid that also has a 3D layout's Y and Z columns, so that the seconds of a term over
    them see the right group size and stride (alpha_beta.group_shape reads axes by name)."""

    tensor_y: np.ndarray | None = None
    tensor_z: np.ndarray | None = None


@dataclass(frozen=True)
class Sizes3D:
    """3D layouts as columns (one entry per layout): the fields of Layout that the terms read,
    so that the planner predicts many at once (one Layout gives columns of length 1)."""

    data: np.ndarray
    fsdp: np.ndarray
    tensor: np.ndarray  # X
    tensor_y: np.ndarray  # Y
    tensor_z: np.ndarray  # Z
    zero: np.ndarray | None = None  # ZeRO stage (None: 0, the planner's grids)

    @classmethod
    def of(cls, layout) -> "Sizes3D":
        if isinstance(layout, Sizes3D):
            return layout
        return cls(*(np.array([getattr(layout, f)], np.int64)
                     for f in ("data", "fsdp", "tensor", "tensor_y", "tensor_z", "zero")))

    @property
    def data_parallel(self) -> np.ndarray:
        return self.data * self.fsdp

    def on(self) -> dict:
        """1.0 where an axis has more than one device, per layout."""
        return {X: (self.tensor > 1) * 1.0, Y: (self.tensor_y > 1) * 1.0,
                Z: (self.tensor_z > 1) * 1.0, DATA: (self.data > 1) * 1.0,
                ZF: (self.tensor_z * self.fsdp > 1) * 1.0}


def equivalent(layout: Layout) -> Layout:
    """The 1D layout whose linear layers' FLOPs and model state equal a 3D one's: batch over
    data × fsdp × Z, weights over X·Y·Z·fsdp (fsdp=Z·fsdp, tensor=X·Y), the pipeline (stage,
    schedule, microbatches) and ZeRO as they are. The predictor's compute and memory read it,
    with its heads and MLP activations split over Y alone (heads_columns); the collectives are
    this module's (tensor3d_stages' inside stages)."""
    return layout.replace(fsdp=layout.tensor_z * layout.fsdp,
                          tensor=layout.tensor * layout.tensor_y, tensor_y=1, tensor_z=1)


def heads_columns(layout, n: int) -> np.ndarray:
    """Grid.heads_tensor of 3D layouts' equivalent grids: Y. A pair's first matmul leaves its
    output split over Y only (the all-reduce over X sums it whole on every X device), so the
    attention core and the MLP's activation run on H/Y heads and F/Y units, X times over."""
    return np.broadcast_to(Sizes3D.of(layout).tensor_y, (n,)).astype(np.int64)


def equivalent_columns(sizes: Sizes3D) -> dict:
    """`equivalent` as Grid columns (data, fsdp, tensor) for many layouts."""
    return {"data": sizes.data, "fsdp": sizes.tensor_z * sizes.fsdp,
            "tensor": sizes.tensor * sizes.tensor_y}


def axes_grid(grid: Grid, layout) -> AxesGrid:
    """`grid` (of `equivalent(layout)`) with the 3D layout's own axis sizes as columns."""
    n, s = len(grid), Sizes3D.of(layout)
    cols = {f.name: getattr(grid, f.name) for f in dataclasses.fields(grid)}
    sizes = {"data": s.data, "fsdp": s.fsdp, "tensor": s.tensor, "tensor_y": s.tensor_y,
             "tensor_z": s.tensor_z, "expert_tensor": s.tensor}  # no expert folding in 3D
    return AxesGrid(**(cols | {k: np.broadcast_to(v, (n,)).astype(np.int64)
                               for k, v in sizes.items()}))


def memory_parts(sizes: ModelSizes, grid: Grid, layout, remat: str, rec, act_bytes: int,
                 compute_bytes: int, precision=None) -> dict:
    """Memory.memory_parts of 3D layouts (grid: their `equivalent` 1D layouts). The model state
    is the equivalent's (every weight over X·Y·Z); the saved activations and the transients
    of the layer being differentiated are those of the layout whose activations split alike,
    tensor=Y with the batch over data × Z: after the all-reduce over X each X device holds
    the first layer's whole output u[b, T, F_Y], so X splits no activation."""
    parts = memory.memory_parts(sizes, grid, remat, rec, act_bytes, compute_bytes, precision)
    y = dataclasses.replace(grid, tensor=np.broadcast_to(Sizes3D.of(layout).tensor_y,
                                                         (len(grid),)))
    acts = memory.activation_bytes(sizes, y, remat, rec, act_bytes, precision)
    transient = np.maximum(memory.temp_bytes(sizes, y, remat, rec, act_bytes, compute_bytes,
                                             precision),
                           memory.sharded_layer_bytes(sizes, grid, rec, compute_bytes))
    transient = transient + memory.gathered_chunk_bytes(sizes, grid, act_bytes)
    temp = np.maximum(acts + transient, memory.update_bytes(sizes, grid, rec)) - acts
    total = parts["argument"] + parts["grads"] + acts + temp
    return parts | {"activations": acts, "temp": temp, "total": total}


@dataclass(frozen=True)
class _Shapes:
    """Per-device sizes (elements) of one 3D layout's blocks."""

    tok: np.ndarray  # tokens per device: b·T
    Dx: np.ndarray  # D / X
    qkv: np.ndarray  # fused QKV outputs per Y shard: K/Y · (G + 2) · Dh
    heads: np.ndarray  # H/Y · Dh
    Fy: np.ndarray  # F / Y
    Vy: np.ndarray  # V / Y
    small: np.ndarray  # a layer's norms and biases on a device
    once: int  # the final norm's and GPT's used position rows' (their gradients: whole)


def _shapes(sizes: ModelSizes, layout: Sizes3D, B: int, T: int) -> _Shapes:
    X_, Y_, Z_ = layout.tensor, layout.tensor_y, layout.tensor_z
    qkv = sizes.K // Y_ * (sizes.H // sizes.K + 2) * sizes.Dh
    Fy, D = sizes.F // Y_, sizes.D
    gpt = sizes.family == "gpt"
    small = 2 * 2 * D + D + D + qkv + Fy if gpt else 2 * D  # norms; bo, b_out, bqkv, b_in
    positions = T * D if gpt else 0
    return _Shapes(B // (layout.data_parallel * Z_) * T, D // X_, qkv, sizes.H // Y_ * sizes.Dh,
                   Fy, sizes.V // Y_, small, sizes.head[1] + positions)


def layer_weights(s: _Shapes, n_in: int) -> dict:
    """Each weight of a block: (how many, elements of its X·Y shard before Z)."""
    return {"qkv": (1, s.Dx * s.qkv), "out-proj": (1, s.heads * s.Dx),
            "mlp-in": (n_in, s.Dx * s.Fy), "mlp-out": (1, s.Fy * s.Dx)}


def terms(sizes: ModelSizes, layout, B: int, T: int, remat: str, conv: Convention,
          act_bytes: int, grad_bytes: float, n: int = 1) -> list[Term]:
    """Every collective family of 3D layouts' steps: a Layout (columns of length n, all alike)
    or Sizes3D columns (one entry per layout, n of them). Full
    remat recomputes each block's forward in its backward: the first layers' all-reduces over X
    (one op per block for both), the attention pair's over Y and its exit's gather over X run
    again (the MLP pair's output is the block's, dead code there); the Z gathers are the
    backward's own."""
    layout = Sizes3D.of(layout)
    s, L, n_in = _shapes(sizes, layout, B, T), sizes.L, sizes.n_mlp_in
    on = layout.on()
    a, gpt, xla = act_bytes, sizes.family == "gpt", conv.name == "xla-cpu"
    again = L if remat == "full" else 0  # blocks whose forward runs again
    weights = layer_weights(s, n_in)
    table = s.Vy * s.Dx
    out = []

    def term(name, kind, axes, count, elements, unit):
        out.append(Term(name, kind, axes, np.broadcast_to(np.asarray(count, float), (n,)),
                        np.broadcast_to(np.asarray(elements * unit, float), (n,))))

    zf_axes = _zf_axes(layout)
    for per_layer, w in weights.values():  # activations and weights in the compute dtype
        term("t3d-gather-z", "all-gather", zf_axes, 2 * L * per_layer * on[ZF], w, a)
        term("t3d-scatter-z", "reduce-scatter", zf_axes, L * per_layer * on[ZF], w, a)
    term("t3d-gather-z", "all-gather", zf_axes, (2 if xla else 3) * on[ZF], table, a)
    term("t3d-scatter-z", "reduce-scatter", zf_axes, 2 * on[ZF], table, a)

    term("t3d-x", "all-reduce", (X,), L * on[X], s.tok * s.qkv, a)
    term("t3d-x", "all-reduce", (X,), L * on[X], s.tok * n_in * s.Fy, a)
    # full remat: the recomputed QKV and MLP inputs' all-reduces ride one op per block (XLA)
    term("t3d-x", "all-reduce", (X,), again * on[X], s.tok * (s.qkv + n_in * s.Fy), a)
    term("t3d-x", "all-reduce", (X,), L * on[X], s.tok * s.heads, a)
    term("t3d-x", "all-reduce", (X,), L * on[X], s.tok * s.Fy, a)
    term("t3d-x", "all-reduce", (X,), on[X], s.tok * s.Vy, a)
    term("t3d-y", "all-reduce", (Y,), (4 * L + 2 + again) * on[Y], s.tok * s.Dx, a)
    term("t3d-gather-x", "all-gather", (X,), (4 * L + 2 + again) * on[X], s.tok * sizes.D, a)
    term("cross-entropy", "all-reduce", (Y,), 3 * on[Y], s.tok, 4)
    if gpt and xla:
        term("t3d-positions", "all-gather", zf_axes, on[ZF], T * s.Dx, a)
        term("t3d-positions", "all-gather", (X,), on[X], s.tok * sizes.D, a)
    layer_w = sum(k * w for k, w in weights.values())
    zf = layout.tensor_z * layout.fsdp
    bucket = 0.0 if xla else AXONN_GRAD_BUCKET  # XLA's program reduces per layer
    out += _grad_terms(s, L, layer_w, table, zf, zf_axes, on[DATA], a, grad_bytes, n,
                       bucket=bucket)
    zero1 = on[DATA] * (np.asarray(0 if layout.zero is None else layout.zero) >= 1)
    positions = sizes.T_max * s.Dx if gpt else 0  # GPT's whole table, D over X·Z
    shard = (L * layer_w + 2 * table + positions) / zf
    # the master parameters' bytes: grad_bytes, equal to the recipe's param_bytes in both
    term("zero-gather", "all-gather", (DATA,), zero1, shard, grad_bytes)
    return out


def _grad_terms(s: _Shapes, L: int, layer_w, table, z, z_axes: tuple, data, a: int,
                grad_bytes: float, n: int, once: bool = True, bucket: float = 0.0
                ) -> list[Term]:
    """t3d-grads: the weight shards (1/(Z·fsdp) of the blocks, z = Z·fsdp) over data; the norms
    and biases, and once the final norm, GPT's position rows and the loss (4 bytes), over
    data × fsdp × Z. Where Z·fsdp = 1 XLA's combiner puts both on one all-reduce over data.
    `once`: False inside pipeline stages, whose tables are summed over stages too
    (predict.tensor3d_stages). `bucket` > 0: the reductions of a contiguous gradient buffer in
    calls of `bucket` elements (`_bucketed`) instead of one per layer."""
    shards = {"layer": (L, layer_w * a / z)} | ({"once": (1, 2 * table * a / z)} if once else {})
    small = {"layer": s.small * grad_bytes, "once": s.once * grad_bytes + 4}
    alone = (np.asarray(z) == 1) * 1.0  # Z = 1: one all-reduce over data carries both

    def column(v):
        return np.broadcast_to(np.asarray(v, float), (n,))

    if bucket > 0:
        return _bucketed(shards, small, alone, z_axes, data, a, grad_bytes, bucket, column)
    out = []
    for key, (count, shard) in shards.items():
        out.append(Term("t3d-grads", "all-reduce", (DATA,), column(count * data),
                        column(shard + small[key] * alone)))
        out.append(Term("t3d-grads", "all-reduce", (DATA,) + z_axes, column(count * (1 - alone)),
                        column(small[key])))
    return out


def _bucketed(shards: dict, small: dict, alone, z_axes: tuple, data, a: int, grad_bytes: float,
              bucket: float, column) -> list[Term]:
    """t3d-grads as Megatron-AxoNN's data-parallel DDP issues them: every weight shard's
    gradient in one contiguous buffer, all-reduced over data in ceil(E / bucket) equal calls
    of E / calls elements (E: the buffer's elements per device); the norms' and biases'
    gradients, reduced over data × Z, flattened into one call (where Z = 1 they ride the
    buffer)."""
    weights = sum(count * shard for count, shard in shards.values()) / a  # elements
    norms = sum(count * small[key] for key, (count, _) in shards.items())  # bytes
    alone = np.asarray(alone, float)
    elements = weights + alone * norms / grad_bytes
    calls = np.maximum(np.ceil(elements / bucket), 1.0)
    unit = AXONN_GRAD_BUFFER_BYTES
    return [Term("t3d-grads", "all-reduce", (DATA,), column(calls * data),
                 column(elements * unit / calls)),
            Term("t3d-grads", "all-reduce", (DATA,) + z_axes, column(1 - alone),
                 column(norms))]


def zero3_as_fsdp(layout: Layout) -> Layout:
    """A 3D layout under ZeRO-3 as the program it compiles to: data=N,zero=3 shards each
    weight's block over data and gathers it with Z's as fsdp=N does (the same collectives and
    bytes, over the data axis; tests/parallel/test_tensor3d.py)."""
    if layout.zero < 3:
        return layout
    return layout.replace(fsdp=layout.fsdp * layout.data, data=1, zero=0)
