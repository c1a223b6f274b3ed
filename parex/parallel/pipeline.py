"""The pipeline executor: runs any schedule table on the `stage` mesh axis.

    loss, grads = pipeline_loss_and_grads(step, params, batch)

Shape of the computation:
- The stacked blocks (L, ...) are regrouped per device as (p, v, Lmax, ...) — v chunks of at most
  Lmax layers, padded for uneven partitions and skipped by a per-layer mask. With even chunks
  the train state already stores them in that order (TrainStep.block_order), so this is a
  reshape; uneven ones are gathered. The `stage` axis is manual (shard_map), and so are data
  (ZeRO < 3) and fsdp (fsdp_stage.manual_fsdp: each op gathers its chunk's fsdp shards, each
  backward op reduce-scatters their gradients), and every axis of a 3D tensor layout
  (`ManualAxes`: its ops run their collectives as written, parallel.tensor3d). seq and
  Megatron's tensor (and data under ZeRO-3, fsdp with SP or seq) stay with XLA's partitioner
  inside each stage, so sequence, context and tensor parallelism run inside stages.
- One `lax.scan` over the table's ticks. Each tick every device looks up its op and runs one branch
  of a `lax.switch`: idle, or F, B or W of its first, a middle or its last virtual stage. What a
  branch produces travels up, down or stays on the device (timetable.py), by two cyclic `ppermute`s
  outside the switch, so no collective depends on the device. The branches read the buffers in
  place and return only what they produce; the tick scatters each value into its slot after the
  switch (nowhere when the branch did not produce it), so a tick copies only the slots it uses.
- Activations are kept, not recomputed: F runs its virtual stage under `jax.vjp` and stashes the
  backward's residuals (stash.py) in a slot per microbatch in flight; B runs only the backward. A
  virtual stage is up to three pieces, each with its own vjp and stash: the embedding (first
  virtual stage), the chunk's layers, the head and loss (last). The remat policy decides what is
  recomputed, exactly as in the unpipelined step; GPipe holds m microbatches' residuals and 1F1B at
  most p.
- Zero-bubble schedules split the backward (split.py): F runs the layers with every weighted op
  tapped and keeps each op's input; B returns dx, the taps' cotangents dY and the norms' weight
  gradients; W forms the other weight gradients from the records and dY. Each matmul runs once in
  F, once in B and once in W, as in 1F1B.
- The embedding and head are stored sharded over `stage` too (their parameters, gradients and
  optimizer state fall with p): XLA gathers them before the loop, and their gradients, produced on
  the first and last virtual stages, are summed over stages after it.
- Everything differentiated or carried varies over the manual axes that split the rows (pcast
  before the loop; a 3D group's X and Y devices hold the same rows, so values are invariant over
  them). With replicated parameters (ZeRO < 3) `data` is manual too, so the data-parallel
  gradient all-reduce happens once, after the loop, instead of once per backward op.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec

from ..model import transformer as gpt
from ..layout import Axis, is_dims, spec_axes
from . import fsdp_stage
from .nested import layer_loop
from .outputs import Positions, leaf_outputs
from .timetable import BUFFERS, DOWN, UP, Timetable, make_timetable, stage_partition
from .schedules import make_schedule
from .split import BlockTaps, tapped_layers, weight_grads
from .stash import Residuals, Stash, vary, varying_axes

STAGE, DATA = Axis.STAGE.value, Axis.DATA.value
HEAD = ("final_norm", "unembed")  # read by the last


def _run_layers(x, blocks, mask, cfg, ops, remat):
    """Scan the chunk's layers over x (b, T, D); padded layers (mask False) are skipped.
    `mask` is None when no chunk is padded."""
    def body(h, layer):
        p, keep = layer
        if keep is None:
            return gpt.block(h, p, cfg, ops, remat), None
        return lax.cond(keep, lambda h: gpt.block(h, p, cfg, ops, remat), lambda h: h, h), None

    if remat == "full":
        body = jax.checkpoint(body, policy=jax.checkpoint_policies.nothing_saveable)
    return layer_loop(body, x, (blocks, mask), unroll=nests(ops))[0]


def nests(ops) -> bool:
    """Whether the ops run shard_maps nested in the pipeline's (sp, seq): parallel.nested."""
    return getattr(ops, "nests_shard_maps", False)


def _at(tree, i):
    return jax.tree.map(lambda a: lax.dynamic_index_in_dim(a, i, keepdims=False), tree)


def _put(tree, values, slot, add=False):
    """Store (or add) values at `slot` of each leaf's leading dim, in place; nothing happens when
    slot is out of range (a scatter that drops it), so a tick that produces nothing writes
    nothing."""
    def one(buffer, value):
        at = buffer.at[slot]
        value = value.astype(buffer.dtype)
        return at.add(value, mode="drop") if add else at.set(value, mode="drop")
    return jax.tree.map(one, tree, values)


# --- the pieces of a virtual stage ---------------------------------------------------------------

@dataclass(frozen=True)
class _Context:
    """What every branch reads: this device's chunks (compute copies), the embedding and head,
    the data, and the residual structure of each piece."""

    blocks: dict  # (1, v·Lmax, ...) this device's chunks' layers, chunk i at rows i·Lmax…
    lmax: int  # the layers of a chunk (padded)
    mask: jax.Array | None  # (v, Lmax) real (True) or padded layers; None: nothing padded
    embedding: dict  # token (and GPT's position) table, varying copies
    head: dict  # final norm and unembedding, varying copies
    tokens: jax.Array  # (m, b, T)
    targets: jax.Array  # (m, b, T)
    cfg: object
    ops: object
    remat: str
    seed: float  # d(mean loss)/d(one microbatch's loss) = 1/(m · ManualAxes.count)
    varying: tuple  # the manual axes every value varies over (ManualAxes.varying)
    taps: BlockTaps | None  # the split backward's taps (zero-bubble schedules), else None
    shards: fsdp_stage.ChunkShards | None  # manual fsdp: how the chunks are split, else None
    specs: dict | None = None  # piece -> Residuals ("embedding", "layers", "head")

    def chunk(self, i):
        """Chunk i's weights (Lmax, ...) as its ops use them: gathered over fsdp when it is
        manual."""
        n = self.lmax
        rows = jax.tree.map(lambda a: lax.dynamic_slice_in_dim(a, i * n, n, axis=1)[0],
                            self.blocks)
        return _gathered(rows, self.shards, self.varying)

    def block_grads(self, grads):
        """A chunk's weight gradients as the accumulator holds them (fsdp: its shards)."""
        return grads if self.shards is None else self.shards.scatter(grads)

    def embed(self, tokens):
        return lambda params: gpt.embed(self.ops.stage_tables(params, tokens.shape[1]), tokens,
                                        self.cfg, self.ops)

    def layers(self, mask):
        if self.taps is None:
            return lambda blocks, x: _run_layers(x, blocks, mask, self.cfg, self.ops, self.remat)

        def tapped(blocks, x, taps, early):  # differentiated: x, the taps and B's parameters,
            late, _ = self.taps.split(blocks)  # which replace the chunk's own copies
            return tapped_layers(late | early, x, taps, mask, self.cfg, self.ops, self.remat,
                                 self.taps)
        return tapped

    def head_loss(self, targets):
        return lambda params, y: self.ops.cross_entropy(
            gpt.unembed(params, y, self.cfg, self.ops), targets)

    def layer_args(self, x, blocks):
        """The layers piece's differentiated inputs: x, and when split the taps and the
        parameters whose gradients B forms (split.BlockTaps.early)."""
        if self.taps is None:
            return (x,)
        return (x, self.taps.zero_taps(self.lmax), self.taps.split(blocks)[1])

    def grad_kind(self, key: str) -> str:
        """Which op forms the gradient of the blocks' parameters `key`: "blocks.early" (B) or
        "blocks.late" (W, or B when the backward is not split)."""
        early = self.taps is not None and key in self.taps.early
        return "blocks.early" if early else "blocks.late"

    def probe(self, x, i) -> dict:
        """The residual structure of each piece, traced abstractly for microbatch and chunk i
        (a traced index, as the branches use, so that both trace the same program)."""
        mask = None if self.mask is None else _at(self.mask, i)
        tokens, targets, chunk = _at(self.tokens, i), _at(self.targets, i), self.chunk(i)
        return {"embedding": Residuals.probe(self.embed(tokens), self.embedding, ()),
                "layers": Residuals.probe(self.layers(mask), chunk,
                                          lambda blocks: self.layer_args(x, blocks),
                                          wrt_params=self.taps is None,
                                          has_aux=self.taps is not None),
                "head": Residuals.probe(self.head_loss(targets), self.head, (x,))}


# --- the branches ---------------------------------------------------------------------------------
# A branch sees the buffers whole but only reads them: it returns what it produces (a value per
# stash buffer, a chunk's weight gradients, the embedding's and head's gradients, its loss) and
# the tick stores those after the switch, each into its slot, or nowhere when this branch does not
# produce it (`WRITES`). Nothing a branch leaves alone passes through the switch, so XLA copies
# nothing on its behalf (a conditional's outputs never share its operands' buffers).

def _store(state, name, values, slot):
    return state | {"put." + name: values}


def _add_head(state, grads: dict):
    return state | {"d_head": state.get("d_head", {}) | grads}


def _forward(role, ctx: _Context, state, row, blocks, mask):
    """F: run the virtual stage, stash its residuals; send the activation on (or add the loss)."""
    specs, j = ctx.specs, row["mb"]
    if role == "first":
        x, _, kept = specs["embedding"].forward(ctx.embed(_at(ctx.tokens, j)), ctx.embedding, ())
        state = _store(state, "emb", kept, row["emb"])
    else:
        x = _at(state["inbox"], row["inbox"])
    y, records, kept = specs["layers"].forward(ctx.layers(mask), blocks,
                                               ctx.layer_args(x, blocks))
    state = _store(state, "res", kept, row["res"])
    if ctx.taps is not None:
        state = _store(state, "rec", records, row["rec"])
    if role != "last":
        return state, y
    loss, _, kept = specs["head"].forward(ctx.head_loss(_at(ctx.targets, j)), ctx.head, (y,))
    state = _store(state, "head", kept, row["head"])
    return state | {"d_loss": loss}, jnp.zeros_like(y)


def _backward(role, ctx: _Context, state, row, blocks):
    """B: the backward from the stashed residuals; send the input's cotangent back."""
    specs = ctx.specs
    if role == "last":  # the loss seeds its own backward: d(mean over m)/d(loss_j)
        kept = Stash.read(state["head"], row["head"])
        d_head, g = specs["head"].backward(kept, ctx.head, vary(jnp.float32(ctx.seed),
                                                                ctx.varying))
        state = _add_head(state, d_head)
    else:
        g = _at(state["inbox"], row["inbox"])
    kept = Stash.read(state["res"], row["res"])
    if ctx.taps is None:
        d_blocks, dx = specs["layers"].backward(kept, blocks, g)
        state = state | {"d_blocks": ctx.block_grads(d_blocks)}
    else:
        dx, d_taps, d_early = specs["layers"].backward(kept, blocks, g)
        state = _store(state, "dtap", d_taps, row["dtap"]) | {
            "d_blocks": ctx.block_grads(d_early)}
    if role != "first":
        return state, dx
    kept = Stash.read(state["emb"], row["emb"])
    d_embedding, = specs["embedding"].backward(kept, ctx.embedding, dx)
    return _add_head(state, d_embedding), jnp.zeros_like(dx)


def _weights(ctx: _Context, state, row, blocks, like):
    """W: weight gradients of a split backward from its records and tap cotangents."""
    records = Stash.read(state["rec"], row["rec"])
    d_taps = Stash.read(state["dtap"], row["dtap"])
    d_blocks = weight_grads(ctx.taps.split(blocks)[0], records, d_taps, ctx.taps)
    return state | {"d_blocks": ctx.block_grads(d_blocks)}, like


def _writes(name: str, split: bool) -> frozenset:
    """What branch `name` produces: stash buffers, and for gradients "blocks.early" (those of
    the parameters B differentiates when split, _Context.grad_kind), "blocks.late" (the
    others) and "head_grads"."""
    kind, _, role = name.partition(".")
    if kind == "F":
        return frozenset({"res"} | ({"rec"} if split else set())
                         | ({"emb"} if role == "first" else set())
                         | ({"head"} if role == "last" else set()))
    if kind == "B":
        return frozenset(({"dtap", "blocks.early"} if split else {"blocks.early", "blocks.late"})
                         | ({"head_grads"} if role in ("first", "last") else set()))
    return frozenset({"blocks.late"} if kind == "W" else set())


def _produced(state, buffers, accumulators) -> dict:
    """What a branch produced, keyed as its switch outputs (outputs.Output keys): (buffer, leaf)
    for the stash values, ("blocks.<key>", leaf) for a chunk's gradients (each top-level key of
    the block), ("head_grads.<param>", leaf) for the embedding's and head's."""
    out = {}
    for name in buffers:
        if "put." + name in state:
            out |= {(name, i): v for i, v in enumerate(jax.tree.leaves(state["put." + name]))}
    for prefix, grads in (("blocks.", state.get("d_blocks", {})),
                          ("head_grads.", state.get("d_head", {}))):
        for k, g in grads.items():
            out |= {(prefix + k, i): v for i, v in enumerate(jax.tree.leaves(g))}
    return out


def _switch_outputs(timetable: Timetable, ctx: _Context, stashes: dict, accumulators,
                    share: bool) -> Positions:
    """The switch's output positions (outputs.py): every stash value, one chunk's gradients and
    the embedding's and head's, each with the branches that produce it (`_writes`); shared
    between branches unless XLA partitions axes inside the stage (`share`)."""
    split = timetable.schedule.split_backward
    writes = [_writes(name, split) for name in timetable.branches]
    g_blocks, g_head, _ = accumulators

    def producers(what, role=None):
        return frozenset(b for b, (w, name) in enumerate(zip(writes, timetable.branches))
                         if what in w and (role is None or name.endswith("." + role)))

    outputs = []
    for name, buffer in stashes.items():
        outputs += leaf_outputs(name, buffer, producers(name))
    for k, g in g_blocks.items():
        outputs += leaf_outputs("blocks." + k, g, producers(ctx.grad_kind(k)))
    for k, g in g_head.items():
        role = "first" if k in gpt.read_in_names(ctx.cfg) else "last"
        outputs += leaf_outputs("head_grads." + k, g, producers("head_grads", role),
                                drop_leading=False)
    return Positions.plan(outputs, share)


def _like(value, ref):
    """value in ref's dtype, varying over (at least) the axes ref varies over."""
    return vary(value.astype(ref.dtype), tuple(sorted(varying_axes(ref))))


def _branch(index: int, name: str, ctx: _Context, positions: Positions, like):
    """The function one switch branch runs: (buffers, accumulators, row) -> (its outputs in
    their positions, d_loss, the value it sends)."""
    kind, _, role = name.partition(".")
    expected = {key for key, who in positions.producers.items() if index in who}

    def run(buffers, accumulators, row):
        state = dict(buffers)
        stashes = [k for k in buffers if k != "inbox"]
        out = like
        if kind != "idle":
            blocks = ctx.chunk(row["chunk"])
            if kind == "F":
                mask = None if ctx.mask is None else _at(ctx.mask, row["chunk"])
                state, out = _forward(role, ctx, state, row, blocks, mask)
            elif kind == "B":
                state, out = _backward(role, ctx, state, row, blocks)
            else:
                state, out = _weights(ctx, state, row, blocks, like)
        produced = _produced(state, stashes, accumulators)
        if set(produced) != expected:
            raise RuntimeError(f"branch {name} produced {sorted(produced)}, its timetable says "
                               f"{sorted(expected)} (pipeline._writes)")
        loss = accumulators[2]
        d_loss = _like(state["d_loss"], loss) if "d_loss" in state else jnp.zeros_like(loss)
        return positions.fill(produced), d_loss, _like(out, like)

    return run


# --- the per-device program ----------------------------------------------------------------------

def _initial_state(timetable: Timetable, ctx: _Context, act, varying, blocks32, head32):
    """Buffers sized from the table (timetable.slots), each varying as the values stored in
    it."""
    specs, slots = ctx.specs, timetable.slots
    state = {"inbox": vary(jnp.zeros((slots["inbox"] + 1, *act.shape), act.dtype), varying),
             # varying as the inbox: a residual the probe traced as invariant over stage (RoPE's
             # zig-zag positions under ring attention and full remat) is varying when stored
             "res": vary(Stash.create(specs["layers"].stashed, slots["res"]), varying),
             "emb": Stash.create(specs["embedding"].stashed, slots["emb"]),
             "head": Stash.create(specs["head"].stashed, slots["head"]),
             "loss": vary(jnp.zeros((), jnp.float32), varying),
             "g_blocks": jax.tree.map(jnp.zeros_like, blocks32),  # varying like their inputs
             "g_head": jax.tree.map(jnp.zeros_like, head32)}
    if ctx.taps is not None:
        layers = (ctx.lmax,)
        state["rec"] = Stash.create(ctx.taps.records, slots["rec"], layers)
        state["dtap"] = Stash.create(ctx.taps.taps, slots["dtap"], layers)
    return state


def _gathered(chunk, shards, varying):
    """A chunk's weights whole over a manual fsdp axis, varying over `varying` (so that its
    vjp returns this device's partial gradients, reduced by fsdp_stage.scatter)."""
    if shards is None:
        return chunk
    return vary(shards.gather(chunk), varying)


def _per_device(timetable: Timetable, cfg, ops, remat, axes: ManualAxes, blocks, mask, head,
                tokens, targets, table):
    """The shard_map body: this device's slice of every argument; returns (loss, grads).
    Three phases: the context every branch reads (`_context`), the scan of the table's ticks
    (`_Tick`), one reduction each after the loop (`_reduce_after_loop`)."""
    blocks, mask = jax.tree.map(lambda a: a[0], (blocks, mask))  # drop the stage dim
    mask = None if timetable.layer_mask.all() else mask  # no padding: no per-layer cond
    blocks = vary(blocks, axes.varying)  # already varying over stage (and the axes splitting it)
    head = vary(head, axes.varying)
    inner = ops.inside(DATA in axes.rows, manual_fsdp=axes.fsdp > 1)
    count = timetable.schedule.m * axes.count  # the loss is the mean over these
    ctx, act = _context(timetable, cfg, inner, remat, 1.0 / count, axes,
                        (blocks, mask, head, tokens, targets), table["mb"][0, 0])
    state = _initial_state(timetable, ctx, act, axes.varying, blocks, head)
    tick = _Tick.build(timetable, ctx, state, act, axes)
    state = lax.scan(tick, state, {k: a[:, 0] for k, a in table.items()})[0]
    return _reduce_after_loop(state, ctx, axes, count)


def _context(timetable: Timetable, cfg, ops, remat, seed, axes: ManualAxes, inputs,
             mb) -> tuple[_Context, jax.Array]:
    """Phase 1: what every branch reads, and one activation's (or cotangent's) zeros `act`.
    The chunks and the embedding and head are cast to the compute dtype; a split backward's taps
    are probed on one layer's weights; each piece's residual structure on microbatch `mb`.
    `inputs` are this device's (blocks, mask, head, tokens, targets); `seed` is
    d(mean loss)/d(one microbatch's loss)."""
    blocks, mask, head, tokens, targets = inputs
    compute = jnp.dtype(cfg.dtype)
    shards = fsdp_stage.ChunkShards.of(cfg, ops) if axes.fsdp > 1 else None
    b, T = tokens.shape[1], gpt.positions_of(cfg, tokens)
    act = vary(jnp.zeros((b, T, cfg.hidden), compute), axes.varying)  # an activation or its
    # cotangent: a 3D group's X and Y devices hold the same one, so it is invariant over them
    # the chunks' layers in one dim (chunk i at rows i·Lmax) behind a unit dim, as the stage
    # dim was: XLA gave a (v, 1, ...) view of the stored layers (one layer per chunk) a layout
    # of its own and copied them all into the tick loop (25 MB of the weight-heavy model's
    # stage=4,schedule=interleaved,virtual=2); without the unit dim it laid the stored layers
    # out for fsdp's gathers for the whole loop instead of per op (25 MB of fsdp=2,stage=2)
    lmax = jax.tree.leaves(blocks)[0].shape[1]
    flat = jax.tree.map(lambda a: a.reshape(1, -1, *a.shape[2:]), gpt.cast(blocks, compute))
    cast_head = gpt.cast(head, compute)
    read_in = gpt.read_in_names(cfg)
    ctx = _Context(flat, lmax, mask, {k: cast_head[k] for k in read_in if k in cast_head},
                   {k: cast_head[k] for k in HEAD}, tokens, targets, cfg, ops, remat, seed,
                   axes.varying, None, shards)
    if timetable.schedule.split_backward:
        first = _at(ctx.chunk(0), 0)  # one layer's weights
        ctx = dataclasses.replace(ctx, taps=BlockTaps.probe(cfg, ops, remat, first, act))
    return dataclasses.replace(ctx, specs=ctx.probe(act, mb)), act


@dataclass(frozen=True, eq=False)  # hashed by identity, as lax.scan caches its body
class _Tick:
    """Phase 2, the scan's body: one tick of the table. The switch reads the buffers and returns
    what its branch produces, in positions that outputs no branch produces together share
    (outputs.py); each value is then scattered into its slot (`_store`, `_accumulate`), or
    dropped (an out-of-range slot) when the branch did not produce it, so a value another branch
    left in a shared position is never stored; last, the activations move (`_exchange`)."""

    timetable: Timetable
    positions: Positions
    branches: tuple  # one function per timetable.branches entry (_branch)
    stashes: tuple  # the stash buffers' names (BUFFERS but the inbox, those in use)

    @classmethod
    def build(cls, timetable: Timetable, ctx: _Context, state, act,
              axes: ManualAxes) -> "_Tick":
        stashes = {name: state[name] for name in BUFFERS if name in state and name != "inbox"}
        positions = _switch_outputs(timetable, ctx, stashes,
                                    (state["g_blocks"], state["g_head"], state["loss"]),
                                    share=not axes.partitioned)
        branches = tuple(_branch(i, name, ctx, positions, act)
                         for i, name in enumerate(timetable.branches))
        return cls(timetable, positions, branches, tuple(stashes))

    def __call__(self, state, row):
        buffers = {name: state[name] for name in BUFFERS if name in state}
        accumulators = (state["g_blocks"], state["g_head"], state["loss"])
        values, d_loss, out = lax.switch(row["branch"], list(self.branches), buffers,
                                         accumulators, row)
        state = self._accumulate(self._store(state, values, row), values, d_loss, row)
        return self._exchange(state, out, row), None

    def _made(self, key, branch):
        """Whether the tick's branch produces output `key` (static flags, a traced index)."""
        who = self.positions.producers.get(key, frozenset())
        return jnp.asarray([i in who for i in range(len(self.timetable.branches))])[branch]

    def _read(self, values, name, tree):
        """The tree of outputs (name, leaf) from their positions."""
        leaves = [self.positions.read(values, (name, i))
                  for i in range(len(jax.tree.leaves(tree)))]
        return jax.tree.unflatten(jax.tree.structure(tree), leaves)

    def _store(self, state, values, row):
        """Each stash value into its slot; slot timetable.slots[name] (one past the end) drops
        it."""
        for name in self.stashes:
            if (name, 0) in self.positions.of:
                slot = jnp.where(self._made((name, 0), row["branch"]), row[name],
                                 self.timetable.slots[name])
                state = state | {name: _put(state[name], self._read(values, name, state[name]),
                                            slot)}
        return state

    def _accumulate(self, state, values, d_loss, row):
        """A chunk's weight gradients added at the chunk's index (or dropped at v), the
        embedding's and head's at index 0 of a one-slot view (or dropped at 1), and the loss."""
        branch = row["branch"]
        g_blocks = dict(state["g_blocks"])
        for k, g in g_blocks.items():
            if ("blocks." + k, 0) in self.positions.of:
                chunk = jnp.where(self._made(("blocks." + k, 0), branch), row["chunk"],
                                  self.timetable.schedule.v)
                g_blocks[k] = _put(g, self._read(values, "blocks." + k, g), chunk, add=True)
        g_head = dict(state["g_head"])
        for k, g in g_head.items():
            if ("head_grads." + k, 0) in self.positions.of:
                at = jnp.where(self._made(("head_grads." + k, 0), branch), 0, 1)
                one = jax.tree.map(lambda a: a[None], g)
                g_head[k] = jax.tree.map(lambda a: a[0], _put(
                    one, self._read(values, "head_grads." + k, g), at, add=True))
        return state | {"g_blocks": g_blocks, "g_head": g_head, "loss": state["loss"] + d_loss}

    def _exchange(self, state, out, row):
        """Outside the switch: every device sends every tick, up and down the cyclic stage
        ring, so no collective is device-dependent; what arrives (and what stays) lands in
        the inbox slots the table names."""
        p = self.timetable.schedule.p
        up = [(i, (i + 1) % p) for i in range(p)]
        down = [(i, (i - 1) % p) for i in range(p)]
        from_below = lax.ppermute(jnp.where(row["send"] == UP, out, 0), STAGE, up)
        from_above = lax.ppermute(jnp.where(row["send"] == DOWN, out, 0), STAGE, down)
        inbox = state["inbox"]
        for value, slot in ((from_below, row["in_up"]), (from_above, row["in_down"]),
                            (out, row["in_self"])):
            inbox = lax.dynamic_update_index_in_dim(inbox, value, slot, 0)
        return state | {"inbox": inbox}


def _reduce_after_loop(state, ctx: _Context, axes: ManualAxes, count: int):
    """Phase 3, one reduction each after the loop: the loss is the mean over `count` (m
    microbatches · the devices holding distinct rows); the embedding's and head's gradients
    come from the first and last virtual stages only, so they are summed over stages too; each
    gradient is summed over the row-splitting axes that do not split it (those that do were
    reduce-scattered per op). Returns (loss, the chunks' gradients (1, v, Lmax, ...), the
    embedding's and head's)."""
    loss = lax.psum(state["loss"], axes.varying) / count
    g_head = _sum_partials(state["g_head"], axes.head, axes.varying)
    g_blocks = _sum_partials(state["g_blocks"], axes.chunks, axes.rows)
    return loss, jax.tree.map(lambda a: a[None], g_blocks), g_head


def _sum_partials(grads, specs, axes: tuple):
    """Each gradient summed over those of `axes` its PartitionSpec does not name."""
    def one(g, spec):
        split = {a for entry in spec for a in spec_axes(entry)}
        over = tuple(a for a in axes if a not in split)
        return lax.psum(g, over) if over else g
    return jax.tree.map(one, grads, specs)


# --- the entry point ------------------------------------------------------------------------------

@dataclass(frozen=True)
class ManualAxes:
    """The pipeline shard_map's manual axes and how its arguments are split over them.

    `stage` always. `rows`, the axes that split the batch: data with replicated parameters
    (ZeRO < 3), so each replica keeps its partial gradients until one psum after the loop
    (under ZeRO-3 XLA reduces them per op), and fsdp where fsdp_stage.manual_fsdp says so (each
    op gathers its chunk's shards). A 3D tensor layout (parallel.tensor3d) makes all of its
    axes manual, or XLA's partitioner would reshard the Z-split weights inside the schedule's
    switch branches, where the other stage's devices never join the collective: data, fsdp
    and Z split the rows, and `tensor` holds X and Y, over which a group's devices hold the
    same rows (values are invariant over them). Everything else (seq, Megatron's tensor,
    data under ZeRO-3) is left to XLA's partitioner inside each stage."""

    rows: tuple
    tensor: tuple
    count: int  # the devices of a stage holding distinct rows: the product of the rows' sizes
    partitioned: bool  # whether an axis that splits something is left to XLA inside the stage
    fsdp: int  # the fsdp size the pipeline gathers by hand (fsdp_stage), else 1
    chunks: dict  # the (p, v, Lmax, ...) chunks' PartitionSpecs (and their gradients')
    head: dict  # the embedding's and head's PartitionSpecs inside the loop

    @property
    def names(self) -> tuple:
        return (STAGE,) + self.rows + self.tensor

    @property
    def varying(self) -> tuple:
        """The axes every activation, loss and gradient varies over."""
        return (STAGE,) + self.rows

    @classmethod
    def of(cls, step) -> ManualAxes:
        layout, cfg = step.layout, step.model
        sizes = {axis.value: n for axis, n in layout.axis_sizes().items()}

        def left_to_xla(names):
            return any(n > 1 for a, n in sizes.items() if a not in (STAGE, *names))

        dims = gpt.param_dims(cfg)
        tables = {k: d for k, d in dims.items() if k != "blocks"}
        if layout.tensor3d:
            rows = tuple(a for a in spec_axes(layout.spec(("batch",))[0]))
            tensor = tuple(a for a in (Axis.TENSOR.value, Axis.TENSOR_Y.value) if sizes[a] > 1)
            chunks = jax.tree.map(lambda d: layout.spec(("layers", None, None) + d[1:], "param"),
                                  dims["blocks"], is_leaf=is_dims)
            head = jax.tree.map(lambda d: layout.spec(d, "param"), tables, is_leaf=is_dims)
            return cls(rows, tensor, math.prod(sizes[a] for a in rows),
                       left_to_xla(rows + tensor), 1, chunks, head)
        fsdp = fsdp_stage.manual_fsdp(layout)
        rows = (((DATA,) if layout.zero < 3 and layout.data > 1 else ())
                + ((fsdp_stage.FSDP,) if fsdp > 1 else ()))
        head = jax.tree.map(lambda d: PartitionSpec(), tables, is_leaf=is_dims)
        return cls(rows, (), math.prod(sizes[a] for a in rows), left_to_xla(rows), fsdp,
                   fsdp_stage.block_specs(cfg, STAGE, fsdp), head)


def timetable_for(step) -> Timetable:
    """The Timetable of a TrainStep's layout (stage, schedule, microbatches, virtual, partition)."""
    layout = step.layout
    schedule = make_schedule(layout.schedule, layout.stage, step.microbatches,
                             layout.virtual_stages)
    partition = stage_partition(step.model.layers, layout.stage, layout.virtual_stages,
                                layout.layers_per_stage)
    return make_timetable(schedule, partition)


def _regroup_blocks(blocks, timetable: Timetable, step):
    """(L, ...) stacked blocks, in the step's storage order (step.block_order) -> (p, v, Lmax,
    ...) chunks per device, sharded over `stage`: a reshape for even chunks, else a gather."""
    s, index = timetable.schedule, timetable.layer_index
    dims = gpt.param_dims(step.model)["blocks"]

    def regroup(w, dims):
        y = w.reshape(s.p, s.v, -1, *w.shape[1:]) if timetable.even else w[index]
        return lax.with_sharding_constraint(
            y, step.sharding(("layers", None, None) + dims[1:], "param"))

    return jax.tree.map(regroup, blocks, dims, is_leaf=lambda x: isinstance(x, jax.Array))


def _gather_over_stages(head, step):
    """The embedding and head, stored split over `stage` (Layout.storage_spec), whole on every
    stage for the step."""
    dims = {k: v for k, v in gpt.param_dims(step.model).items() if k != "blocks"}
    return jax.tree.map(lambda a, d: lax.with_sharding_constraint(a, step.sharding(d, "param")),
                        head, dims, is_leaf=lambda x: isinstance(x, jax.Array))


def pipeline_loss_and_grads(step, params, batch):
    """Mean loss and gradients of the global batch, run as `step.layout`'s pipeline schedule.
    `step` is a parex.executor.step.TrainStep; params and gradients have the blocks in the step's
    storage order (TrainStep.block_order); the result matches its unpipelined loss_and_grads."""
    timetable = timetable_for(step)
    m = timetable.schedule.m
    head = _gather_over_stages({k: v for k, v in params.items() if k != "blocks"}, step)
    staged, unstage = jax.vjp(lambda b: _regroup_blocks(b, timetable, step), params["blocks"])

    def split(x):  # (B, T) -> (m, B/m, T); microbatch i takes rows i, i+m, ... as in step.py
        x = x.reshape(x.shape[0] // m, m, *x.shape[1:]).swapaxes(0, 1)
        return step.constrain(x, (None, "batch", None))

    # positions in the layout's order (zig-zag under ring attention), as parex.model.transformer.loss_fn does
    tokens, targets = (split(step.ops.seq_order(batch[k])) for k in ("inputs", "targets"))
    table = {k: jnp.asarray(a) for k, a in timetable.arrays.items()}
    axes = ManualAxes.of(step)
    body = partial(_per_device, timetable, step.model, step.ops, step.train.remat, axes)
    stage, everywhere = PartitionSpec(STAGE), PartitionSpec()
    rows = PartitionSpec(None, axes.rows) if axes.rows else everywhere  # (m, b, T)
    run = jax.shard_map(
        body, mesh=step.mesh, axis_names=set(axes.names),
        in_specs=(axes.chunks, stage, axes.head, rows, rows, PartitionSpec(None, STAGE)),
        out_specs=(everywhere, axes.chunks, axes.head))
    mask = jnp.asarray(timetable.layer_mask)
    loss, g_staged, g_head = run(staged, mask, head, tokens, targets, table)
    return loss, {**g_head, "blocks": unstage(g_staged)[0]}
