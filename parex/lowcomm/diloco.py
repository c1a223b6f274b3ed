"""DiLoCo on the `replica` mesh axis: R replicas of any inner layout, synchronised every H steps.

    run = DiLoCo(model, train, layout, mesh).start()
    for t in range(1, train.steps + 1):
        losses = run.inner_step(batches[t - 1])      # one AdamW step on every replica
        run.sync_due(t)                              # the outer step of the fragments due now

Programs (Douillard et al. 2023; Streaming DiLoCo, Douillard et al. 2025; DiLoCoX, 2025):
- inner: replica r runs the ordinary parex TrainStep of the inner layout (data, fsdp, tensor, sp,
  seq, stage: anything) on its own sub-mesh `mesh.devices[r]`, on rows r·B/R … (r+1)·B/R of the
  global batch. The program is compiled for those devices only, so it cannot talk to another
  replica; the inner optimizer state never leaves the replica.
- outer (one program per fragment): a shard_map with every mesh axis manual, so each device works
  on its own shard and the only collectives are over `replica`:
      Δ_r = θ_sync − θ_r                     pseudo-gradient of replica r (this fragment)
      Δ̄  = mean_r Δ_r                        exchanged in f32, bf16, int8 or int4 (exchange.py)
      m  ← μ·m + Δ̄ ;  θ_sync ← θ_sync − η·(Δ̄ + μ·m)        Nesterov SGD, η = 0.7, μ = 0.9
      θ_r ← θ_sync
  With overlap (one-step delay, as DiLoCoX): the Δ̄ exchanged at a sync is applied at the
  fragment's next sync, one round later, so the exchange can run behind that round's inner steps;
  each replica keeps the progress it made meanwhile:  Δ_r = θ_start,r − θ_r (this round),
  θ_sync ← Nesterov(θ_sync, Δ̄ of the previous round),  θ_r ← θ_sync − Δ_r,  θ_start,r ← θ_r.

Arrays: replica r's state lives on its sub-mesh; the outer program sees every replica's parameter
leaf (d0, ...) as one global array (R·d0, ...) whose first dim is split over `replica` first, so
the per-device shards are the replicas' own buffers and are reassembled without a copy
(`jax.make_array_from_single_device_arrays`). θ_sync and m are replicated over `replica`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ..model import transformer as gpt
from ..config import ModelConfig, TrainConfig
from ..layout import MESH_AXES, Axis, Layout, inner_layout, spec_axes
from ..executor.mesh import make_mesh
from ..executor.step import TrainStep
from ..setting import resolve_run
from ..validation import validate
from .exchange import replica_mean
from .rounds import fragment_of, syncs_after

REPLICA = Axis.REPLICA.value


def stacked_spec(spec: PartitionSpec) -> PartitionSpec:
    """The spec of R replicas' leaves concatenated on dim 0, replica-major."""
    first = spec[0] if len(spec) else None
    first = () if first is None else (first,) if isinstance(first, str) else tuple(first)
    return PartitionSpec((REPLICA, *first), *spec[1:])


def _paths(tree) -> list[tuple[str, ...]]:
    return [tuple(k.key for k in path) for path, _ in jax.tree.flatten_with_path(tree)[0]]


@dataclass
class DiLoCo:
    """The inner TrainSteps (one per replica), the outer programs, and the arrays' shardings."""

    model: ModelConfig
    train: TrainConfig
    layout: Layout
    mesh: Mesh
    inner: list = field(init=False)  # TrainStep per replica, on its sub-mesh

    def __post_init__(self):
        validate(self.layout, self.model, self.train, self.mesh.size)
        # what the run leaves unnamed (its global batch, ...) resolved for this platform, as
        # TrainStep does (parex.setting.resolve_run), before the batch is split over replicas
        platform = self.mesh.devices.flat[0].platform
        self.train = resolve_run(self.model, self.train, self.layout, platform).train
        lay, R = self.layout, self.layout.replica
        self.R, self.H, self.P = R, lay.inner_steps, lay.fragments
        self.inner_layout = inner_layout(lay)
        self.inner_train = self.train.replace(global_batch=self.train.global_batch // R)
        devices = self.mesh.devices  # (replica, stage, data, fsdp, seq, tensor)
        self.inner = [TrainStep(self.model, self.inner_train, self.inner_layout,
                                make_mesh(self.inner_layout, devices[r].flat)) for r in range(R)]
        me = jax.process_index()
        self.local = [r for r in range(R) if any(d.process_index == me for d in devices[r].flat)]
        specs = jax.tree.map(lambda s: s.spec, self.inner[0].state_shardings("param"))
        self.param_specs = specs
        self.stacked = jax.tree.map(lambda s: NamedSharding(self.mesh, stacked_spec(s)), specs)
        self.synced = jax.tree.map(lambda s: NamedSharding(self.mesh, s), specs)
        self.paths = _paths(specs)
        # the inner axes in use, in mesh order: a leaf not split over one is copied along it
        self.inner_axes = tuple(a.value for a in MESH_AXES
                                if a is not Axis.REPLICA and self.inner_layout.axis_sizes()[a] > 1)
        self._init, self._outer = None, {}  # jitted programs, built once

    # --- moving parameters between the replicas' sub-meshes and the whole mesh ----------------
    def gather(self, per_replica: dict) -> dict:
        """{r: params on replica r's sub-mesh} -> (R·d0, ...) arrays on the whole mesh."""
        def one(sharding, *leaves):
            shape = (self.R * leaves[0].shape[0], *leaves[0].shape[1:])
            shards = [s.data for leaf in leaves for s in leaf.addressable_shards]
            return jax.make_array_from_single_device_arrays(shape, sharding, shards)

        return jax.tree.map(one, self.stacked, *[per_replica[r] for r in self.local])

    def scatter(self, stacked: dict) -> dict:
        """The inverse of `gather`: {r: params of replica r on its sub-mesh}."""
        out = {}
        for r in self.local:
            shardings = self.inner[r].state_shardings("param")
            devices = set(self.inner[r].mesh.devices.flat)

            def one(sharding, x):
                shape = (x.shape[0] // self.R, *x.shape[1:])
                shards = [s.data for s in x.addressable_shards if s.device in devices]
                return jax.make_array_from_single_device_arrays(shape, sharding, shards)

            out[r] = jax.tree.map(one, shardings, stacked)
        return out

    def init_outer(self, per_replica: dict) -> dict:
        """The outer state from the replicas' (equal) initial parameters: θ_sync, zero momentum,
        and under overlap a zero pending mean and each replica's round start."""
        def one(sharding, *leaves):  # every replica supplies its own shards of the same values
            shards = [s.data for leaf in leaves for s in leaf.addressable_shards]
            return jax.make_array_from_single_device_arrays(leaves[0].shape, sharding, shards)

        synced = jax.tree.map(one, self.synced, *[per_replica[r] for r in self.local])
        stacked = self.gather(per_replica)
        overlap = self.layout.overlap

        def init(synced, stacked):  # copies: the inner steps donate the replicas' buffers
            out = {"synced": jax.tree.map(jnp.copy, synced),
                   "momentum": jax.tree.map(jnp.zeros_like, synced)}
            if overlap:
                out |= {"pending": jax.tree.map(jnp.zeros_like, synced),
                        "start": jax.tree.map(jnp.copy, stacked)}
            return out

        if self._init is None:
            self._init = jax.jit(init, out_shardings=self.outer_shardings())
        return self._init(synced, stacked)

    # --- the outer program -----------------------------------------------------------------------
    def _fragment(self, f: int):
        """take(tree) -> the fragment's local arrays; put(tree, arrays) -> tree updated; and
        the mesh axes each taken array is split over (quantisation buckets group by them)."""
        rows = slice(f, None, self.P)  # strided over this stage's local layers (rounds.py)
        chosen = [(i, p[0] == "blocks" and self.P > 1) for i, p in enumerate(self.paths)
                  if p[0] == "blocks" or fragment_of(p, self.P) == f]
        specs = jax.tree.leaves(self.param_specs, is_leaf=lambda x: isinstance(x, PartitionSpec))
        axes = [frozenset(a for entry in specs[i] for a in spec_axes(entry)) for i, _ in chosen]
        split = {key: tuple(a for a in self.inner_axes if a not in key) for key in axes}

        def take(tree):
            leaves = jax.tree.leaves(tree)
            return [leaves[i][rows] if blocks else leaves[i] for i, blocks in chosen]

        def put(tree, new):
            leaves = jax.tree.leaves(tree)
            for (i, blocks), x in zip(chosen, new):
                leaves[i] = leaves[i].at[rows].set(x) if blocks else x
            return jax.tree.unflatten(jax.tree.structure(tree), leaves)

        return take, put, axes, split

    def _outer_body(self, f: int):
        lay, (take, put, groups, split) = self.layout, self._fragment(f)
        lr, mu = lay.outer.lr, lay.outer.momentum

        def nesterov(m, theta, g):  # m ← μ·m + g ; θ ← θ − η·(g + μ·m)
            m = [mu * a + b for a, b in zip(m, g)]
            return m, [t - lr * (b + mu * a) for t, a, b in zip(theta, m, g)]

        def body(params, outer):
            theta, synced, m = take(params), take(outer["synced"]), take(outer["momentum"])
            if not lay.overlap:
                delta = replica_mean([s - t for s, t in zip(synced, theta)], REPLICA, self.R,
                                     lay.outer_dtype, groups, split)
                m, synced = nesterov(m, synced, delta)
                new = {"synced": put(outer["synced"], synced),
                       "momentum": put(outer["momentum"], m)}
                return put(params, synced), new
            start = take(outer["start"])
            local = [s - t for s, t in zip(start, theta)]  # this round's progress
            in_flight = replica_mean(local, REPLICA, self.R, lay.outer_dtype, groups, split)
            m, synced = nesterov(m, synced, take(outer["pending"]))  # last round's mean lands
            theta = [s - d for s, d in zip(synced, local)]
            new = {"synced": put(outer["synced"], synced), "momentum": put(outer["momentum"], m),
                   "pending": put(outer["pending"], in_flight), "start": put(outer["start"], theta)}
            return put(params, theta), new

        return body

    def outer_shardings(self) -> dict:
        out = {"synced": self.synced, "momentum": self.synced}
        if self.layout.overlap:
            out |= {"pending": self.synced, "start": self.stacked}
        return out

    def outer_program(self, f: int):
        """The jitted outer step of fragment f: (stacked params, outer state) -> both updated."""
        if f not in self._outer:
            self._outer[f] = self._jit_outer(f)
        return self._outer[f]

    def _jit_outer(self, f: int):
        specs = jax.tree.map(lambda s: s.spec, (self.stacked, self.outer_shardings()))
        body = jax.shard_map(self._outer_body(f), mesh=self.mesh, in_specs=specs,
                             out_specs=specs)
        shardings = (self.stacked, self.outer_shardings())
        return jax.jit(body, in_shardings=shardings, out_shardings=shardings, donate_argnums=(0, 1))

    def lower_outer(self, f: int):
        abstract = jax.tree.map(
            lambda sh, shape: jax.ShapeDtypeStruct(shape, jnp.float32, sharding=sh),
            (self.stacked, self.outer_shardings()), self._global_shapes())
        return self.outer_program(f).lower(*abstract)

    def _global_shapes(self):
        shapes = jax.tree.map(lambda s: s.shape, gpt.param_shapes(self.model))
        stacked = jax.tree.map(lambda s: (self.R * s[0], *s[1:]), shapes,
                               is_leaf=lambda x: isinstance(x, tuple))
        outer = {"synced": shapes, "momentum": shapes}
        if self.layout.overlap:
            outer |= {"pending": shapes, "start": stacked}
        return stacked, outer

    # --- running -------------------------------------------------------------------------------
    def start(self, inner_programs=None, outer_programs=None, states=None) -> "DiLoCoRun":
        """A run from every replica's initial TrainStep state (by default each replica's
        `init_state()`: the same parameters, from the train seed)."""
        return DiLoCoRun(self, inner_programs, outer_programs, states)


class DiLoCoRun:
    """The live state of a DiLoCo run: each local replica's TrainStep state, the outer state,
    and the programs (compiled ones may be passed in, e.g. by the measurement)."""

    def __init__(self, dl: DiLoCo, inner_programs=None, outer_programs=None, states=None):
        self.dl = dl
        self.states = states or {r: dl.inner[r].init_state() for r in dl.local}
        self.outer = dl.init_outer({r: s["params"] for r, s in self.states.items()})
        self.inner_programs = inner_programs or {r: dl.inner[r].jitted_step() for r in dl.local}
        self.outer_programs = outer_programs or {}
        self.syncs = 0

    def inner_step(self, batch: dict) -> list:
        """One inner step on every local replica; `batch` is the global (B, T) host batch.
        Returns the replicas' loss arrays (not yet on the host)."""
        dl, rows, losses = self.dl, self.dl.inner_train.global_batch, []
        for r in dl.local:
            part = {k: v[r * rows:(r + 1) * rows] for k, v in batch.items()}
            self.states[r], loss = self.inner_programs[r](self.states[r],
                                                          place(part, dl.inner[r].batch_sharding))
            losses.append(loss)
        return losses

    def sync(self, f: int) -> None:
        dl = self.dl
        if f not in self.outer_programs:
            self.outer_programs[f] = dl.outer_program(f)
        stacked = dl.gather({r: s["params"] for r, s in self.states.items()})
        stacked, self.outer = self.outer_programs[f](stacked, self.outer)
        for r, params in dl.scatter(stacked).items():
            self.states[r] = self.states[r] | {"params": params}
        self.syncs += 1

    def sync_due(self, step: int) -> list[int]:
        """Run the outer step of every fragment due after inner step `step` (from 1)."""
        due = syncs_after(step, self.dl.H, self.dl.P)
        for f in due:
            self.sync(f)
        return due


def place(batch: dict, sharding) -> dict:
    """Host arrays -> global arrays in `sharding`; each process supplies the rows it holds."""
    return {k: jax.make_array_from_callback(v.shape, sharding, lambda index, v=v: v[index])
            for k, v in batch.items()}
