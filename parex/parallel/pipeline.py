"""The pipeline executor: runs any schedule table on the `stage` mesh axis.

    loss, grads = pipeline_loss_and_grads(step, params, batch)

Shape of the computation (JAX_NOTES "Pipelines"):
- The stacked blocks (L, ...) are regrouped per device as (p, v, Lmax, ...) — v chunks of at most
  Lmax layers, padded for uneven partitions and skipped by a per-layer mask — and the embedding and
  head go to every stage. The `stage` axis is manual (shard_map); fsdp and tensor (and data under
  ZeRO-3) stay with XLA's SPMD partitioner inside each stage, so 3D layouts compose.
- One `lax.scan` over the table's ticks. Each tick every device looks up its op and runs one branch
  of a `lax.switch` (idle, or F/B/W for the first, a middle or the last virtual stage). The branch
  returns the activation and the cotangent it sends; two cyclic `ppermute`s outside the switch move
  them one stage on (forward) and one stage back (backward), and the receiver files them in a slot.
- Each backward op takes its own `jax.vjp` of its chunk, recomputing the chunk's forward from the
  stashed input (stage-level rematerialisation). So a device holds one (b, T, D) input per
  microbatch-chunk in flight, and the buffers are sized from the table: GPipe's stash grows with m,
  1F1B's stays at about p.
- Everything differentiated or carried is varying over the manual axes (pcast before the loop);
  gradients of the stage-shared embedding and head are reduced with one psum after it. With
  replicated parameters (ZeRO < 3) `data` is manual too, so the data-parallel gradient all-reduce
  also happens once, after the loop, instead of once per backward op.
- Traffic: every tick each device sends one (b, T, D) activation forward and one cotangent back
  (zeros when it has nothing to send), so a step runs 2·n_ticks collective-permutes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec

from .. import model as gpt
from ..layout import Axis
from .plan import Plan, make_plan, stage_partition
from .schedules import make_schedule

STAGE, DATA = Axis.STAGE.value, Axis.DATA.value


# --- one chunk of the model, as the branches see it ----------------------------------------------

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
    return lax.scan(body, x, (blocks, mask))[0]


def _chunk_forward(role, blocks, head, x, tokens, targets, mask, cfg, ops, remat):
    """Virtual stage forward: (b, T, D) -> (b, T, D), or the microbatch loss for the last one."""
    dtype = jnp.dtype(cfg.dtype)
    blocks, head = gpt.cast(blocks, dtype), gpt.cast(head, dtype)
    if role == "first":
        # Gather the table's FSDP/ZeRO-3 shards first (vocab stays split over `tensor`): XLA's
        # partitioner aborts on the gather from a table split over both inside the shard_map.
        table = ops.constrain(head["tokens"], ("vocab", "embed"))
        x = gpt.embed(head | {"tokens": table}, tokens, cfg, ops)
    y = _run_layers(x, blocks, mask, cfg, ops, remat)
    if role == "last":
        return gpt.cross_entropy(gpt.unembed(head, y, cfg, ops), targets)
    return y


# --- the per-device program ----------------------------------------------------------------------

@dataclass(frozen=True)
class _Context:
    """What every branch reads: this device's chunks, the shared embedding and head, the data."""

    blocks: dict  # (v, Lmax, ...) this device's chunks, float32
    mask: jax.Array | None  # (v, Lmax) real (True) or padded layers; None: nothing padded
    head: dict  # embedding, final norm and unembedding, varying copies
    tokens: jax.Array  # (m, b, T)
    targets: jax.Array  # (m, b, T)
    cfg: object
    ops: object
    remat: str
    seed: float  # d(mean loss)/d(one microbatch's loss) = 1/(m · replicas)
    manual: tuple  # the shard_map's manual axes: stage, and data when it is manual too


def vary(tree, axes):
    """Mark values invariant over `axes` as varying, so that vjp does not insert a psum inside
    the loop and scan carries and switch branches agree on their types."""
    return jax.tree.map(lambda a: lax.pcast(a, axes, to="varying"), tree)


def _at(tree, i):
    return jax.tree.map(lambda a: lax.dynamic_index_in_dim(a, i, keepdims=False), tree)


def _add_at(tree, i, update):
    return jax.tree.map(lambda a, u: lax.dynamic_update_index_in_dim(
        a, lax.dynamic_index_in_dim(a, i, keepdims=False) + u, i, 0), tree, update)


def _branch(name: str, ctx: _Context):
    """The function one switch branch runs: (state, row) -> (state, act out, cotangent out)."""
    kind, _, role = name.partition(".")

    def run(state, row):
        zeros = jnp.zeros_like(state["acts"][0])  # (b, T, D): what an idle sender sends
        if kind == "idle" or (kind == "Bx" and role == "first"):  # nobody needs dx of the embedding
            return state, zeros, zeros
        c, j = row["chunk"], row["mb"]
        blocks, x = _at(ctx.blocks, c), _at(state["acts"], row["act"])
        mask = None if ctx.mask is None else _at(ctx.mask, c)
        fwd = partial(_chunk_forward, role, tokens=_at(ctx.tokens, j), targets=_at(ctx.targets, j),
                      mask=mask, cfg=ctx.cfg, ops=ctx.ops, remat=ctx.remat)
        if kind == "F":
            out = fwd(blocks, ctx.head, x)
            if role == "last":
                return state | {"loss": state["loss"] + out}, zeros, zeros
            return state, out.astype(zeros.dtype), zeros
        if role == "last":  # the loss seeds its own backward: d(mean over m)/d(loss_j) = 1/m
            g = vary(jnp.float32(ctx.seed), ctx.manual)
        else:
            g = _at(state["grads"], row["grad"])
        if kind == "Bx":
            _, pull = jax.vjp(lambda x: fwd(blocks, ctx.head, x), x)
            return state, zeros, pull(g)[0].astype(zeros.dtype)
        return _weight_grads(kind, role, fwd, blocks, ctx.head, x, g, c, state, zeros)

    return run


def _weight_grads(kind, role, fwd, blocks, head, x, g, c, state, zeros):
    """B (whole backward) or W (weight gradient): accumulate the chunk's (and for the first and
    last virtual stage, the head's) gradients; B also returns dx for the previous stage."""
    send_dx = kind == "B" and role != "first"
    with_head = role != "mid"
    args = (blocks,) + ((head,) if with_head else ()) + ((x,) if send_dx else ())

    def f(*a):
        return fwd(a[0], a[1] if with_head else head, a[-1] if send_dx else x)

    grads = jax.vjp(f, *args)[1](g)
    state = state | {"g_blocks": _add_at(state["g_blocks"], c, grads[0])}
    if with_head:
        state = state | {"g_head": jax.tree.map(jnp.add, state["g_head"], grads[1])}
    return state, zeros, grads[-1].astype(zeros.dtype) if send_dx else zeros


def _per_device(plan: Plan, cfg, ops, remat, replicas, blocks, mask, head, tokens, targets,
                table):
    """The shard_map body: this device's slice of every argument; returns (loss, grads).
    `replicas` is the data-parallel size when `data` is manual here (1 when it is not)."""
    p, m = plan.schedule.p, plan.schedule.m
    data = (DATA,) if replicas > 1 else ()
    manual = (STAGE,) + data
    blocks, mask = jax.tree.map(lambda a: a[0], (blocks, mask))  # drop the stage dim
    mask = None if plan.layer_mask.all() else mask  # no padding: no per-layer cond
    blocks = vary(blocks, data) if data else blocks  # already varying over stage
    table = {k: a[:, 0] for k, a in table.items()}  # (n_ticks,) each
    ctx = _Context(blocks, mask, vary(head, manual), tokens, targets, cfg,
                   ops.inside(bool(data)), remat, 1.0 / (m * replicas), manual)
    b, T = tokens.shape[1:]
    act = (b, T, cfg.hidden)  # one stashed stage input or cotangent
    state = vary({"acts": jnp.zeros((plan.act_slots + 1, *act), jnp.dtype(cfg.dtype)),
                  "grads": jnp.zeros((plan.grad_slots + 1, *act), jnp.dtype(cfg.dtype)),
                  "loss": jnp.zeros((), jnp.float32)}, manual)
    state |= {"g_blocks": jax.tree.map(jnp.zeros_like, blocks),  # varying like their inputs
              "g_head": jax.tree.map(jnp.zeros_like, ctx.head)}
    branches = [_branch(name, ctx) for name in plan.branches]
    forward_perm = [(i, (i + 1) % p) for i in range(p)]
    backward_perm = [(i, (i - 1) % p) for i in range(p)]

    def tick(state, row):
        state, act_out, grad_out = lax.switch(row["branch"], branches, state, row)
        # Outside the switch: every device sends every tick, so no collective is device-dependent.
        act_in = lax.ppermute(act_out, STAGE, forward_perm)
        grad_in = lax.ppermute(grad_out, STAGE, backward_perm)
        state = state | {
            "acts": lax.dynamic_update_index_in_dim(state["acts"], act_in, row["act_in"], 0),
            "grads": lax.dynamic_update_index_in_dim(state["grads"], grad_in, row["grad_in"], 0)}
        return state, None

    state = lax.scan(tick, state, table)[0]
    # One reduction each after the loop: the head's gradients come from the first and last
    # stages only; the data replicas' partial gradients are summed once, not per microbatch.
    loss = lax.psum(state["loss"], manual) / (m * replicas)
    g_head = lax.psum(state["g_head"], manual)
    g_blocks = lax.psum(state["g_blocks"], data) if data else state["g_blocks"]
    return loss, jax.tree.map(lambda a: a[None], g_blocks), g_head


# --- the entry point ------------------------------------------------------------------------------

def plan_for(step) -> Plan:
    """The Plan of a TrainStep's layout (stage, schedule, microbatches, virtual, partition)."""
    layout = step.layout
    schedule = make_schedule(layout.schedule, layout.stage, step.microbatches,
                             layout.virtual_stages)
    partition = stage_partition(step.model.layers, layout.stage, layout.virtual_stages,
                                layout.layers_per_stage)
    return make_plan(schedule, partition)


def _regroup_blocks(blocks, plan: Plan, step):
    """(L, ...) stacked blocks -> (p, v, Lmax, ...) chunks per device, sharded over `stage`."""
    s, index = plan.schedule, plan.layer_index
    contiguous = s.v == 1 and len(set(plan.partition)) == 1  # a reshape, no communication
    dims = gpt.param_dims(step.model)["blocks"]

    def regroup(w, dims):
        y = w.reshape(s.p, 1, -1, *w.shape[1:]) if contiguous else w[index]
        return lax.with_sharding_constraint(
            y, step.sharding(("layers", None, None) + dims[1:], "param"))

    return jax.tree.map(regroup, blocks, dims, is_leaf=lambda x: isinstance(x, jax.Array))


def pipeline_loss_and_grads(step, params, batch):
    """Mean loss and gradients of the global batch, run as `step.layout`'s pipeline schedule.
    `step` is a parex.step.TrainStep; the result matches its unpipelined loss_and_grads."""
    plan = plan_for(step)
    m = plan.schedule.m
    head = {k: v for k, v in params.items() if k != "blocks"}
    staged, unstage = jax.vjp(lambda b: _regroup_blocks(b, plan, step), params["blocks"])

    def split(x):  # (B, T) -> (m, B/m, T); microbatch i takes rows i, i+m, ... as in step.py
        x = x.reshape(x.shape[0] // m, m, *x.shape[1:]).swapaxes(0, 1)
        return step.constrain(x, (None, "batch", None))

    tokens, targets = split(batch["inputs"]), split(batch["targets"])
    table = {k: jnp.asarray(a) for k, a in plan.arrays.items()}
    # With replicated parameters (ZeRO < 3) the data axis is manual too, so each replica keeps
    # its partial gradients until one psum after the loop; otherwise XLA reduces them per op.
    replicas = step.layout.data if step.layout.zero < 3 else 1
    body = partial(_per_device, plan, step.model, step.ops, step.train.remat, replicas)
    stage, everywhere = PartitionSpec(STAGE), PartitionSpec()
    rows = PartitionSpec(None, DATA) if replicas > 1 else everywhere  # (m, b, T)
    run = jax.shard_map(
        body, mesh=step.mesh, axis_names={STAGE} | ({DATA} if replicas > 1 else set()),
        in_specs=(stage, stage, everywhere, rows, rows, PartitionSpec(None, STAGE)),
        out_specs=(everywhere, stage, everywhere))
    loss, g_staged, g_head = run(staged, jnp.asarray(plan.layer_mask), head, tokens, targets, table)
    return loss, {**g_head, "blocks": unstage(g_staged)[0]}
