"""Local-learning pipelines (PPLL): every stage learns from its own loss; nothing flows back.

    layout = Layout.parse("data=2,stage=4,schedule=local,microbatches=8")   # local_loss=ce
    step = TrainStep(model, train, layout, mesh)   # TrainStep hands its state and step to here

PPLL (Guo et al. 2024, "Faster Multi-GPU Training with PPLL", arXiv 2411.12780) cuts the network
into one block per device; each block trains on a local loss of its own output, queues carry the
activations forward, and no gradient crosses a device boundary, so no stage waits for a backward
from downstream (local learning as in Belilovsky et al. 2020, "Decoupled Greedy Learning").

The step, per device of the `stage` (and `data`, `fsdp`) mesh axes, manual in one shard_map;
`tensor` stays with XLA inside it, so Megatron's split runs inside each stage through the
model's own ops, as in the backprop pipeline (parallel.pipeline). fsdp gathers the stage's
weights once per step and reduce-scatters their gradients once (local_grads); ZeRO-1 splits the
AdamW moments over `data` (state_shardings). seq, sp and ZeRO-2/3 are refused
(validation.rules.local_fold names the nearest layout that runs).
- m ticks. On tick t stage s runs one "L" op (schedules.LOCAL): the forward of its L/p layers on
  its input, its readout and local loss, and the backward of that loss to its own parameters.
  Stage 0's input is the embedding of microbatch t; stage s > 0 reads the oldest activation of
  its queue, cut from the graph (`stop_gradient`): its gradients come from its own loss only.
- After the op, one `ppermute` sends the stage's output to stage s + 1's queue (q slots, the
  layout's `queue`). Nothing else leaves a stage but the data-parallel gradient all-reduce,
  inside the stage's own group, once per step.
- The queue is part of the train state, so the pipeline is never flushed: microbatch j reaches
  stage s at tick j + s·q (possibly in the next step), and after the first step every stage is
  busy on every tick. The first step's first s·q ticks of stage s see an empty queue; they run
  and are masked out of its loss and gradient (`valid`). Stage s's targets at tick t belong to
  the microbatch it holds, up to ⌈q(p−1)/m⌉ steps old: the state keeps those steps' targets.
- Each stage updates its own parameters with its own AdamW state (the optimizer runs on the
  stacked per-stage tree, sharded over `stage`; gradient clipping is per stage).

Readouts: stage s < p−1 has its own final norm and vocabulary projection (per stage, not shared).
A readout shared by all stages would need its gradient summed over stages every step, a backward
collective across stage boundaries that local learning exists to avoid, and would couple the
stages' objectives. Cost per stage and microbatch: 2·b·T·D·V FLOPs forward and 4·b·T·D·V
backward (6·b·T·D·V, as the model's head), (D·V + D) parameters with their gradient and two
AdamW moments, and the (b, T, V) logits as the step's temporaries (parex.predict.local). The
last stage's readout is the model's real head and its loss the model's loss.

Objectives (`local_loss`):
- `ce`: next-token cross-entropy of the stage's readout.
- `recon`: ce plus the reconstruction of the stage's (cut) input activation from its output by a
  per-stage linear decoder (D × D, zero-initialised), ‖h·W − x‖² / ‖x‖² per sequence averaged
  over the microbatch, weight 1. InfoPro (Wang et al. 2021, "Revisiting Locally Supervised
  Learning", ICLR) showed that greedy local losses discard input information later layers need
  and that a reconstruction term beside the task loss closes part of the gap to end-to-end
  training; here the reconstructed input is the stage's boundary activation (as LoPT's boundary
  reconstruction), not the raw tokens. The last stage keeps the model's loss alone.

The SPMD program gives every stage the same shapes: each holds a token (and position) table,
used by stage 0 only (the others' copies get zero gradients), so the read-in costs V·D (+ T·D)
parameters with their AdamW state on every stage. The state's `stages` tree has a leading stage
dim; `model_params(state)` gives the model's parameters back (stage 0's table, the blocks, the
last stage's head).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec

from ..model import transformer as gpt
from ..layout import Axis, LayoutError, is_dims, state_dim
from .fsdp_stage import ChunkShards
from .stash import vary

STAGE, DATA, FSDP = Axis.STAGE.value, Axis.DATA.value, Axis.FSDP.value
HEAD = ("final_norm", "unembed")
RECON_WEIGHT = 1.0  # the reconstruction term's weight beside the cross-entropy (`recon`)


def stage_dims(model, layout) -> dict:
    """The dims of the per-stage parameter tree (a leading "stage" dim on every leaf): what the
    optimizer's weight-decay mask reads ("embed" in dims)."""
    dims = gpt.param_dims(model)

    def staged(tree):
        return jax.tree.map(lambda d: ("stage", *d), tree, is_leaf=is_dims)

    tree = {"blocks": staged(dims["blocks"]),
            "readin": staged({k: dims[k] for k in gpt.read_in_names(model) if k in dims}),
            "readout": staged({k: dims[k] for k in HEAD})}
    if layout.local_loss == "recon":
        tree["decoder"] = ("stage", "embed", "hidden")
    return tree


def model_params(state) -> dict:
    """The model's parameters in a local train state: stage 0's read-in, every stage's layers
    in order, the last stage's readout (the model's head)."""
    stages = state["stages"]
    blocks = jax.tree.map(lambda w: w.reshape(-1, *w.shape[2:]), stages["blocks"])
    return ({k: v[0] for k, v in stages["readin"].items()} | {"blocks": blocks}
            | jax.tree.map(lambda w: w[-1], stages["readout"]))


def clip_per_stage(grads, max_norm: float):
    """Each stage's gradients scaled by min(1, max_norm / ‖its gradients‖): the global-norm clip
    of one stage, which would otherwise read every stage's norm (a collective across them)."""
    leaves = jax.tree.leaves(grads)
    # summed over every dim but the stage's: a reshape to (p, -1) would gather fsdp's shards
    sq = sum(jnp.sum(jnp.square(g), axis=tuple(range(1, g.ndim))) for g in leaves)  # (p,)
    norm = jnp.sqrt(sq)
    scale = jnp.where(norm < max_norm, 1.0, max_norm / norm)
    return jax.tree.map(lambda g: g * scale.reshape(-1, *[1] * (g.ndim - 1)).astype(g.dtype),
                        grads)


def stage_loss(params, x_in, tokens, targets, stage, p: int, cfg, remat: str, objective: str,
               ops=gpt.SINGLE_DEVICE):
    """One stage's local loss on one microbatch, and its output (b, T, D). Stage 0 embeds the
    tokens; every other stage starts from x_in, cut from the graph. `ops`: the model's ops as
    seen inside the local shard_map (Megatron's tensor split left to XLA there)."""
    c = gpt.cast(params, jnp.dtype(cfg.dtype))
    embedded = gpt.embed(c["readin"], tokens, cfg, ops)
    x = jnp.where(stage == 0, embedded, lax.stop_gradient(x_in).astype(embedded.dtype))
    h = gpt.run_blocks(x, c["blocks"], cfg, ops, remat)  # (b, T, D)
    loss = gpt.cross_entropy(gpt.unembed(c["readout"], h, cfg, ops), targets)
    if objective == "recon":  # ‖h·W − x‖² / ‖x‖² per sequence, the input as the target
        target = lax.stop_gradient(x).astype(jnp.float32)
        error = jnp.einsum("btd,de->bte", h, c["decoder"]).astype(jnp.float32) - target
        # per sequence, then the mean: a data shard's mean is then its share of the
        # microbatch's, as the cross-entropy's (a ratio of whole-microbatch sums is not)
        rec = jnp.mean(jnp.sum(jnp.square(error), axis=(1, 2))
                       / (jnp.sum(jnp.square(target), axis=(1, 2)) + 1e-6))
        loss = loss + jnp.where(stage == p - 1, 0.0, RECON_WEIGHT * rec)
    return loss, h


class LocalPipeline:
    """The train state and step of a schedule=local TrainStep (`step`), with `optimizer` built
    over the per-stage tree (stage_dims)."""

    def __init__(self, step, optimizer):
        ly = step.layout
        self.owner, self.optimizer = step, optimizer
        self.p, self.q, self.m, self.dp = ly.stage, ly.queue, step.microbatches, ly.data
        # the manual batch axes inside a stage (each device its rows) and their device count
        self.batch_axes = tuple(a for a, n in ((DATA, ly.data), (FSDP, ly.fsdp)) if n > 1)
        self.replicas = ly.data * ly.fsdp
        # steps of targets kept: a microbatch reaches the last stage q·(p−1) ticks after stage 0
        self.history = -(-self.q * (self.p - 1) // self.m)
        self.rows = step.train.global_batch // self.m  # sequences of one microbatch (B/m)

    def refuse(self, what: str):
        raise LayoutError(f"schedule=local has no end-to-end gradient for {what}: each stage's "
                          f"gradient is of its own loss (parex.parallel.local.local_grads)")

    # --- the state ------------------------------------------------------------------------------
    def _stage_params(self, key):
        """The per-stage tree: the model's initial parameters, layers split over stages, the
        read-in and the readouts copied to every stage (stage p−1's is the model's head)."""
        full, p = gpt.init_params(self.owner.model, key), self.p

        def copies(w):
            return jnp.broadcast_to(w, (p, *w.shape))

        tree = {"blocks": jax.tree.map(lambda w: w.reshape(p, -1, *w.shape[1:]), full["blocks"]),
                "readin": {k: copies(full[k]) for k in gpt.read_in_names(self.owner.model)
                           if k in full},
                "readout": jax.tree.map(copies, {k: full[k] for k in HEAD})}
        if self.owner.layout.local_loss == "recon":
            D = self.owner.model.hidden
            tree["decoder"] = jnp.zeros((p, D, D), jnp.float32)
        return tree

    def state_shardings(self):
        mesh, ly = self.owner.mesh, self.owner.layout
        staged, replicated = NamedSharding(mesh, PartitionSpec(STAGE)), NamedSharding(
            mesh, PartitionSpec())
        dims = stage_dims(self.owner.model, ly)

        def stored(kind):  # per leaf: stage, then the layout's rules (stage_spec)
            return jax.tree.map(lambda d: NamedSharding(mesh, stage_spec(ly, d, kind)), dims,
                                is_leaf=is_dims)

        shapes = jax.eval_shape(self._stage_params, jax.random.key(0))
        opt = optax.tree_map_params(self.optimizer, lambda _, s: s,
                                    jax.eval_shape(self.optimizer.init, shapes), stored("opt"),
                                    transform_non_params=lambda _: replicated)
        rows = ly.spec(("batch",))[0]  # (data, fsdp): each device its rows
        return {"stages": stored("param"), "opt": opt,
                "queue": NamedSharding(mesh, PartitionSpec(STAGE, None, rows)),
                "targets": NamedSharding(mesh, PartitionSpec(None, rows)),
                "steps": replicated, "local_losses": staged}

    def init_state(self, key):
        step, p = self.owner, self.p
        T, D = step.seq_len, step.model.hidden

        def init(key):
            stages = self._stage_params(key)
            return {"stages": stages, "opt": self.optimizer.init(stages),
                    "queue": jnp.zeros((p, self.q, self.rows, T, D), jnp.dtype(step.model.dtype)),
                    "targets": jnp.zeros((self.history * self.m, self.rows,
                                          gpt.labels_per_sequence(step.model, T)), jnp.int32),
                    "steps": jnp.zeros((), jnp.int32),
                    "local_losses": jnp.zeros((p,), jnp.float32)}

        return jax.jit(init, out_shardings=self.state_shardings())(key)

    # --- the step -------------------------------------------------------------------------------
    def split(self, x):
        """(B, T) -> (m, B/m, T); microbatch i takes rows i, i+m, ... as parex.executor.step does."""
        x = x.reshape(x.shape[0] // self.m, self.m, *x.shape[1:]).swapaxes(0, 1)
        return lax.with_sharding_constraint(
            x, NamedSharding(self.owner.mesh, self.owner.layout.spec((None, "batch"))))

    def step(self, state, batch):
        """(state, batch) -> (state, the last stage's mean loss over the microbatches it
        finished this step: the model's loss)."""
        tokens, targets = self.split(batch["inputs"]), self.split(batch["targets"])
        known = jnp.concatenate([state["targets"], targets])  # (H·m + m, B/m, T)
        grads, queue, losses, loss = local_grads(self, state, tokens, known)
        grads = clip_per_stage(grads, self.owner.train.grad_clip)
        updates, opt = self.optimizer.update(grads, state["opt"], state["stages"])
        stages = optax.apply_updates(state["stages"], updates)
        return {"stages": stages, "opt": opt, "queue": queue,
                "targets": known[known.shape[0] - self.history * self.m:],
                "steps": state["steps"] + 1, "local_losses": losses}, loss


def _leaf_dims(dims) -> tuple:
    """A per-stage leaf's dims as the layout's rules read them: the leading stage dim dropped,
    `layers` (the stage's own L/p, never split again) unnamed."""
    return tuple(None if d == "layers" else d for d in dims[1:])


def stage_spec(layout, dims, kind: str = "param") -> PartitionSpec:
    """How a per-stage leaf is stored: stage first, then the layout's rules for the rest
    (W_in[stage, D_fsdp, F_tensor]; ZeRO-1's optimizer state split over data too)."""
    return PartitionSpec(STAGE, *layout.spec(_leaf_dims(dims), kind))


def _manual_only(spec, manual) -> PartitionSpec:
    """`spec` naming only the shard_map's manual axes (the others stay with XLA inside)."""
    def keep(entry):
        names = (entry,) if isinstance(entry, str) else tuple(entry or ())
        names = tuple(n for n in names if n in manual)
        return None if not names else names[0] if len(names) == 1 else names
    return PartitionSpec(*(keep(e) for e in spec))


def _stage_shards(cfg, ops, dims) -> ChunkShards:
    """How this device's per-stage tree is split over a manual fsdp axis: each leaf's dim that
    fsdp splits (layout.state_dim: a weight's embed dim, a norm's or D-sized bias's D;
    fsdp_stage.ChunkShards, over the whole stage rather than one pipeline chunk) and its
    tensor split, which the gathers and reduce-scatters keep (a shard_map over tensor)."""
    plain = jax.tree.map(_leaf_dims, dims, is_leaf=is_dims)
    embed = jax.tree.map(state_dim, plain, is_leaf=is_dims)
    specs = jax.tree.map(lambda d: ops.layout.spec(d, "param"), plain, is_leaf=is_dims)
    base = ChunkShards.of(cfg, ops)  # its automatic axes and mesh; the trees are the stage's
    return ChunkShards(embed, specs, base.free, base.mesh)


def local_grads(pipe: LocalPipeline, state, tokens, known):
    """(per-stage gradients (p, ...), the new queue, each stage's mean local loss (p,), the last
    stage's) for one step: m ticks of L ops in one shard_map over stage and the batch axes.
    `tokens` (m, B/m, T) are this step's inputs, `known` the targets of the last H steps and
    this one.

    Inside a stage: `data` and `fsdp` are manual (each device its rows), `tensor` is XLA's
    (the model's Megatron ops: W_in[D, F_tensor], all-reduces after W_out and W_o forward and
    before W_in and W_qkv backward). fsdp gathers the stage's weights once per step and
    reduce-scatters their gradients once: the parameters do not change between ticks.

        before the ticks   W = all_gather(W[D_fsdp], fsdp)
        after the ticks    dW[D_fsdp] = psum_scatter(Σ_ticks dW, fsdp); psum over data
    """
    step, p, q, m = pipe.owner, pipe.p, pipe.q, pipe.m
    first = pipe.history * m  # index of this step's first microbatch in `known`
    cfg, remat, objective = step.model, step.train.remat, step.layout.local_loss
    batch = pipe.batch_axes  # a manual axis of one device would add a collective
    manual = (STAGE, *batch)
    dims = stage_dims(cfg, step.layout)

    def per_device(stages, queue, tokens, known, steps):
        s = lax.axis_index(STAGE)
        ops = step.ops.inside(DATA in batch, manual_fsdp=FSDP in batch)
        shards = _stage_shards(cfg, ops, dims) if FSDP in batch else None
        params = jax.tree.map(lambda a: a[0], stages)
        params = vary(params if shards is None else shards.gather(params), manual)
        lag = s * q  # microbatch j reaches stage s at tick j + s·q

        def tick(carry, t):
            queue, grads, total = carry
            target = lax.dynamic_index_in_dim(known, first + t - lag, keepdims=False)
            (loss, h), g = jax.value_and_grad(stage_loss, has_aux=True)(
                params, queue[0], tokens[t], target, s, p, cfg, remat, objective, ops)
            valid = (steps * m + t - lag >= 0).astype(jnp.float32)  # an empty slot (1st step)
            grads = jax.tree.map(lambda a, b: a + valid * b, grads, g)
            sent = lax.ppermute(h.astype(queue.dtype), STAGE, [(i, i + 1) for i in range(p - 1)])
            queue = jnp.concatenate([queue[1:], sent[None]])
            return (queue, grads, total + valid * loss), None

        zeros = jax.tree.map(jnp.zeros_like, params)
        total = vary(jnp.zeros((), jnp.float32), manual)
        (queue, grads, total), _ = lax.scan(tick, (queue[0], zeros, total), jnp.arange(m))
        count = m - jnp.clip(lag - steps * m, 0, m)  # valid ticks of this stage this step
        norm = pipe.replicas * jnp.maximum(count, 1)
        if shards is not None:  # dW -> dW[D_fsdp]; the leaves fsdp does not split summed
            grads = shards.sum_unsharded(shards.scatter(grads))
        if DATA in batch:
            grads = lax.psum(grads, DATA)
        grads = jax.tree.map(lambda g: g / norm, grads)
        mean = jnp.where(count > 0, (lax.psum(total, batch) if batch else total) / norm, jnp.nan)
        last = lax.psum(jnp.where(s == p - 1, mean, 0.0), STAGE)
        return jax.tree.map(lambda g: g[None], grads), queue[None], mean[None], last

    held = jax.tree.map(lambda d: _manual_only(stage_spec(step.layout, d), manual), dims,
                        is_leaf=is_dims)
    entry = None if not batch else batch[0] if len(batch) == 1 else batch
    staged, rows, queued = PartitionSpec(STAGE), PartitionSpec(None, entry), PartitionSpec(
        STAGE, None, entry)
    run = jax.shard_map(per_device, mesh=step.mesh, axis_names=set(manual),
                        in_specs=(held, queued, rows, rows, PartitionSpec()),
                        out_specs=(held, queued, staged, PartitionSpec()))
    return run(state["stages"], state["queue"], tokens, known, state["steps"])


__all__ = ["LocalPipeline", "clip_per_stage", "local_grads", "model_params", "stage_dims",
           "stage_loss", "stage_spec"]
