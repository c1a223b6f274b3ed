"""An MPMD stage runner: a heterogeneous plan (parex.hetero.plan) run on jax.devices().

    runner = MpmdRunner(model, train, plan, cluster)
    loss, grads = runner.loss_and_grads(params, batch)     # grads: the whole model's tree

Every stage is its own jitted program on its own sub-mesh: the stage's devices (its group's
devices, groups laid out over jax.devices() in the cluster's order) in a mesh whose tensor axis
is the stage's tensor degree, so stages of one pipeline may split their blocks t = 1, 2, 4 ways
(parex.parallel.sharding.MeshOps with Layout(tensor=t): Megatron's column/row splits, vocab-parallel
embedding and logits). Activations move between sub-meshes with jax.device_put; the backward is
a per-stage jax.vjp that recomputes the stage's forward from the stashed input (as the SPMD
executor does). Each pipeline runs its 1F1B table (parex.parallel.schedules) over its own rows of
the batch — its own share and microbatch count — and dispatch is asynchronous, so stages on
different devices run at the same time. Attention runs the train config's kernel (naive or
flash, parex.model.attention), by default the platform's, as in TrainStep.

The loss is the mean over the global batch: microbatch j of pipeline i weighs b_i / B, seeded
into its last stage's backward. The gradients of every block are then summed over the pipelines
that hold it (the data-parallel all-reduce, here moves to one device and adds): with layers split
differently per pipeline, block ℓ comes from a different stage in each.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding

from ..model import transformer as gpt
from ..config import ModelConfig, TrainConfig
from ..layout import Layout, LayoutError, is_dims
from ..executor.mesh import make_mesh
from ..parallel.sharding import MeshOps
from ..parallel.schedules import make_schedule
from ..setting import resolve_run

RESIDUAL = ("batch", "seq_res", "hidden")
ROWS = ("batch", None)


def device_map(cluster, devices=None) -> dict:
    """(group name, device in group) -> a JAX device: groups over jax.devices() in order."""
    devices = list(jax.devices() if devices is None else devices)
    need = cluster.n_devices
    if len(devices) < need:
        raise LayoutError(f"cluster {cluster.name} has {need} devices but JAX sees "
                          f"{len(devices)}: call parex.emulate_devices({need}) first, or run a "
                          f"smaller cluster")
    out, k = {}, 0
    for group in cluster.groups:
        for d in range(group.n_devices):
            out[(group.name, d)] = devices[k]
            k += 1
    return out


@dataclass
class StageProgram:
    """One stage: its sub-mesh, its slice of the parameters and its two jitted functions."""

    first: bool
    last: bool
    layers: range
    layout: Layout
    mesh: object
    forward: object  # (params, x or tokens[, targets]) -> activation or loss
    backward: object  # (params, x or tokens[, targets], cotangent) -> (grads, dx)

    def sharding(self, dims, kind: str = "act") -> NamedSharding:
        return NamedSharding(self.mesh, self.layout.spec(dims, kind))


def stage_params(params: dict, layers: range | None, first: bool, last: bool) -> dict:
    """The stage's slice of a params-shaped tree: its blocks (all of them when `layers` is
    None, for a tree of dims), the embedding on the first, the final norm and head on the
    last."""
    blocks = params["blocks"]
    if layers is not None:
        blocks = jax.tree.map(lambda a: a[layers.start:layers.stop], blocks)
    out = {"blocks": blocks}
    if first:
        out |= {k: params[k] for k in ("tokens", "positions") if k in params}
    if last:
        out |= {k: params[k] for k in ("final_norm", "unembed") if k in params}
    return out


def _stage_fn(cfg: ModelConfig, ops, remat: str, first: bool, last: bool):
    """The stage's forward: tokens (first) or activation in; activation or loss out."""
    def fn(params, x, targets=None):
        params = gpt.cast(params, jnp.dtype(cfg.dtype))
        if first:
            x = gpt.embed(params, x, cfg, ops)
        x = gpt.run_blocks(ops.constrain(x, RESIDUAL), params["blocks"], cfg, ops, remat)
        if not last:
            return ops.constrain(x, RESIDUAL)
        return gpt.cross_entropy(gpt.unembed(params, x, cfg, ops), targets)
    return fn


def _program(cfg, remat, attention, layout, mesh, first, last, layers) -> StageProgram:
    ops = MeshOps(layout, mesh).with_kernel(attention)
    fn = _stage_fn(cfg, ops, remat, first, last)

    def forward(params, x, targets=None):
        return fn(params, x, targets)

    def backward(params, x, targets, cotangent):
        if first:  # token ids are not differentiated
            _, pull = jax.vjp(lambda p: fn(p, x, targets), params)
            return pull(cotangent)[0], None
        _, pull = jax.vjp(lambda p, h: fn(p, h, targets), params, x)
        return pull(cotangent)

    return StageProgram(first, last, layers, layout, mesh, jax.jit(forward), jax.jit(backward))


class MpmdRunner:
    """A HeteroPlan's stages as jitted programs on sub-meshes of jax.devices()."""

    def __init__(self, model: ModelConfig, train: TrainConfig, plan, cluster, devices=None):
        from .validate import check_plan

        # an entry point: the train config's defaults filled as TrainStep fills them, by the
        # platform's regime (the plan's stages are Layouts of their own: the settings that
        # matter here, batch, remat and kernel, do not depend on them)
        setting = resolve_run(model, train, Layout(), jax.devices()[0].platform)
        model, train = setting.model, setting.train
        check_plan(plan, cluster, model, train.global_batch)
        if plan.zero:
            raise LayoutError(f"zero={plan.zero} between pipelines: parex's MPMD runner keeps a "
                              f"whole replica per pipeline (ZeRO between pipelines is predicted "
                              f"only); drop 'zero={plan.zero}' to run the plan")
        if model.tied_embeddings and any(len(pipe.stages) > 1 for pipe in plan.pipelines):
            raise LayoutError("tied_embeddings across pipeline stages: the first and last "
                              "stages would each hold the token table, which parex's MPMD "
                              "runner does not keep in step (predicted only); untie them, or "
                              "give each pipeline one stage")
        self.model, self.train, self.plan, self.cluster = model, train, plan, cluster
        where = device_map(cluster, devices)
        self.attention = setting.attention
        self.programs = []
        for pipe in plan.pipelines:
            row = []
            for j, (stage, layers) in enumerate(zip(pipe.stages, pipe.layer_ranges())):
                layout = Layout(tensor=stage.tensor)
                mesh = make_mesh(layout, [where[(stage.group, d)] for d in stage.devices])
                row.append(_program(model, train.remat, self.attention, layout, mesh, j == 0,
                                    j == len(pipe.stages) - 1, layers))
            self.programs.append(row)
        self.dims = gpt.param_dims(model)

    def place(self, program: StageProgram, params: dict) -> dict:
        """The stage's parameters on its sub-mesh, split as Layout(tensor=t) says."""
        mine = stage_params(params, program.layers, program.first, program.last)
        dims = stage_params(self.dims, None, program.first, program.last)
        shardings = jax.tree.map(lambda d: program.sharding(d, "param"), dims, is_leaf=is_dims)
        return jax.device_put(mine, shardings)

    def loss_and_grads(self, params: dict, batch: dict):
        """Mean loss over the global batch and the whole model's gradients (module docstring)."""
        B, start = self.train.global_batch, 0
        total, grads = 0.0, []
        for pipe, row in zip(self.plan.pipelines, self.programs):
            rows = {k: v[start:start + pipe.batch] for k, v in batch.items()}
            start += pipe.batch
            loss, stage_grads = self._run_pipeline(pipe, row, params, rows, pipe.microbatch / B)
            total = total + loss
            grads.append(self._assemble(row, stage_grads))
        return total, self._reduce(grads)

    def _run_pipeline(self, pipe, row, params, rows, weight: float):
        """Run one pipeline's 1F1B table; (its weighted loss, per-stage gradient sums)."""
        m, b = pipe.microbatches, pipe.microbatch
        placed = [self.place(prog, params) for prog in row]
        micro = [{k: v[j * b:(j + 1) * b] for k, v in rows.items()} for j in range(m)]
        inputs, cotangents, losses = {}, {}, []
        sums = [None] * len(row)
        schedule = make_schedule("1f1b", len(row), m)
        for op in schedule.ops:  # in tick order: each op's inputs already dispatched
            s, j, prog = op.stage, op.microbatch, row[op.stage]
            targets = (jax.device_put(micro[j]["targets"], prog.sharding(ROWS))
                       if prog.last else None)
            if op.op == "F":
                x = (jax.device_put(micro[j]["inputs"], prog.sharding(ROWS)) if prog.first
                     else jax.device_put(inputs[(s - 1, j)], prog.sharding(RESIDUAL)))
                inputs[(s, j, "in")] = x
                out = prog.forward(placed[s], x, targets)
                if prog.last:
                    losses.append(out)
                else:
                    inputs[(s, j)] = out
            else:
                ct = (jnp.float32(weight) if prog.last
                      else jax.device_put(cotangents[(s + 1, j)], prog.sharding(RESIDUAL)))
                g, dx = prog.backward(placed[s], inputs.pop((s, j, "in")), targets, ct)
                inputs.pop((s, j), None)
                cotangents[(s, j)] = dx
                cotangents.pop((s + 1, j), None)
                sums[s] = g if sums[s] is None else jax.tree.map(jnp.add, sums[s], g)
        loss = sum(jax.device_put(l, jax.devices()[0]) for l in losses) * weight
        return loss, sums

    def _assemble(self, row, stage_grads) -> dict:
        """One pipeline's gradients as the whole model's tree (blocks concatenated)."""
        home = jax.devices()[0]
        parts = [jax.device_put(g, home) for g in stage_grads]
        out = {"blocks": jax.tree.map(lambda *a: jnp.concatenate(a, 0),
                                      *[p["blocks"] for p in parts])}
        for key in ("tokens", "positions"):
            if key in parts[0]:
                out[key] = parts[0][key]
        out |= {k: parts[-1][k] for k in ("final_norm", "unembed") if k in parts[-1]}
        return out

    def _reduce(self, grads: list[dict]) -> dict:
        """The data-parallel sum over pipelines."""
        return jax.tree.map(lambda *a: sum(a[1:], a[0]), *grads)


__all__ = ["MpmdRunner", "StageProgram", "device_map", "stage_params"]
