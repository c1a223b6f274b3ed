"""The low-communication study: loss curves of DiLoCo (several H, streaming, int8) against
synchronous data parallelism and a single replica, on the same tokens, with the bytes each
replica sends to the others.

    runs = default_runs(n_devices=8, replicas=4)
    frame = loss_study(model, train, runs)          # one row per run and step
    final_gaps(frame)                                # final eval loss and its gap per run

Same token budget: every run sees the global batch stream of `train` (B sequences per step for
`train.steps` steps) in the same order. Sync DP takes B per step on all devices; the single
replica takes B/R per step for R·steps steps on one replica's devices; DiLoCo's replica r takes
rows r·B/R … of each batch. Eval loss: the mean of the replicas' parameters (after a full sync,
θ_sync itself) on fixed batches drawn with another seed.

Warm start (DiLoCo's protocol, Douillard et al. 2023, §3): `warm_up(model, train, steps)` trains
sync DP for `steps` steps and returns its train state; `loss_study(..., start=state,
offset=steps)` then starts every run from it, as a checkpoint resumes: the parameters, the
AdamW moments and step count (each DiLoCo worker its own copy, its inner optimizer), and one
learning-rate schedule over warm-up and run, on the batches that follow the warm-up's, so no
run sees a warm-up batch again.

Bytes between replicas, per replica: DiLoCo's are read from the outer programs' HLO (wire bytes
of the collectives over `replica`, summed over a replica's devices); sync DP's are what its
gradient all-reduce sends across R groups of devices if reduced hierarchically, 2·(R−1)/R·4·|θ|
per step (parex.lowcomm.predict); the single replica sends nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import numpy as np

from ..model import transformer as gpt
from ..config import ModelConfig, TrainConfig
from ..executor.data import Batches
from ..layout import Axis, Layout, inner_layout
from ..measure.hlo import parse_collectives
from ..executor.mesh import make_mesh
from ..executor.step import TrainStep
from ..studies.sequence import wire_bytes
from ..validation import validate
from .diloco import DiLoCo, place
from .predict import ring_factor


@dataclass(frozen=True)
class StudyRun:
    name: str
    layout: Layout  # a DiLoCo layout, or the plain layout of a sync-DP / single-replica run
    batch_split: int = 1  # the single replica: each global batch taken in this many pieces
    first_piece_only: bool = False  # one worker alone: only the first piece of each batch, so
    # the same number of steps as the others on 1/batch_split of their tokens (DiLoCo's baseline)


def default_runs(n_devices: int = 8, replicas: int = 4, hs=(10, 50, 100),
                 fragments: int = 2) -> list[StudyRun]:
    inner = n_devices // replicas
    mid = hs[len(hs) // 2]
    runs = [StudyRun("sync DP", Layout(data=n_devices)),
            StudyRun("single replica", Layout(data=inner), batch_split=replicas)]
    runs += [StudyRun(f"DiLoCo H={h}", Layout(data=inner, replica=replicas, inner_steps=h))
             for h in hs]
    runs.append(StudyRun(f"streaming H={mid} P={fragments}",
                         Layout(data=inner, replica=replicas, inner_steps=mid,
                                fragments=fragments)))
    runs.append(StudyRun(f"int8 H={mid}", Layout(data=inner, replica=replicas, inner_steps=mid,
                                                 outer_dtype="int8")))
    return runs


@dataclass
class _Study:
    """What every run reads: the model, the token stream, the devices, the evaluation."""

    model: ModelConfig
    train: TrainConfig
    devices: list
    replicas: int  # R, for sync DP's bytes between R groups
    eval_every: int
    eval_batches: list  # fixed batches, another seed
    progress: object  # a tqdm bar or None
    inner_cache: dict  # compiled inner steps, shared by runs with the same inner layout
    start: dict | None = None  # the host train state every run starts from (warm_up's; None:
    # the seed's init)
    offset: int = 0  # batches already consumed (by the warm-up): run step t reads offset + t − 1

    def __post_init__(self):
        self._loss = jax.jit(partial(gpt.loss_fn, cfg=self.model))

    def evaluate(self, params) -> float:
        """Mean loss of host parameters on the eval batches, on one device."""
        params = jax.device_put(params, self.devices[0])
        return float(np.mean([self._loss(params, b) for b in self.eval_batches]))

    def row(self, run: StudyRun, step: int, loss: float, cross: float, params=None) -> dict:
        seq = self.train.seq_len or self.model.seq_len
        evaluate = step % self.eval_every == 0 or step == self.train.steps
        share = run.batch_split if run.first_piece_only else 1  # one worker's tokens
        if self.progress:
            self.progress.update(1)
        return {"run": run.name, "layout": str(run.layout), "step": step,
                "tokens": step * self.train.global_batch * seq // share, "loss": loss,
                "cross_replica_bytes": cross,
                "eval_loss": self.evaluate(params()) if evaluate else np.nan}

    def batches(self, seq: int) -> Batches:
        return Batches("corpus", self.train.global_batch, seq, self.model.vocab,
                       self.train.seed)

    def batch(self, data: Batches, t: int) -> dict:
        return data[self.offset + t - 1]

    def initial_state(self, step: TrainStep):
        """A TrainStep state: the seed's init, or `start` (parameters and optimizer state)."""
        return step.init_state() if self.start is None else state_from(step, self.start)


def _blocks_in_order(tree, order):
    """Every leaf under a "blocks" key (the parameters' and the optimizer's moments alike)
    with its layer rows taken in `order` (None: unchanged)."""
    if order is None:
        return tree
    return jax.tree_util.tree_map_with_path(
        lambda path, x: x[order] if any(getattr(k, "key", None) == "blocks" for k in path)
        else x, tree)


def natural_state(step: TrainStep, state) -> dict:
    """A train state on the host with its blocks in the model's layer order."""
    order = step.block_order
    return jax.device_get(_blocks_in_order(state, None if order is None else np.argsort(order)))


def state_from(step: TrainStep, state: dict) -> dict:
    """`step`'s train state from a host one (natural_state's): the same parameters and
    optimizer state (moments and step count), placed in the state's shardings."""
    return jax.jit(lambda s: _blocks_in_order(s, step.block_order),
                   out_shardings=step.train_state_shardings())(state)


def _plain(study: _Study, run: StudyRun) -> list:
    """Sync DP (k = 1) or the single replica (each global batch in k pieces, k·steps steps)."""
    model, train, k = study.model, study.train, run.batch_split
    piece_train = train.replace(global_batch=train.global_batch // k, steps=train.steps * k)
    if run.first_piece_only:  # as many steps as the others, on one piece of each batch
        piece_train = piece_train.replace(steps=train.steps)
    piece_train = schedule_config(piece_train, study.offset)
    step = TrainStep(model, piece_train, run.layout,
                     make_mesh(run.layout, study.devices[:run.layout.n_devices]))
    fn, state, data = step.jitted_step(), study.initial_state(step), study.batches(step.seq_len)
    per_step = ring_factor(study.replicas) * 4 * model.n_params if k == 1 else 0.0
    rows, b = [], piece_train.global_batch
    for t in range(1, train.steps + 1):
        losses = []
        for piece in range(1 if run.first_piece_only else k):
            batch = {key: v[piece * b:(piece + 1) * b] for key, v in study.batch(data, t).items()}
            state, loss = fn(state, place(batch, step.batch_sharding))
            losses.append(float(loss))
        rows.append(study.row(run, t, float(np.mean(losses)), per_step * t,
                              lambda: jax.device_get(step.natural_params(state["params"]))))
    return rows


def _outer_bytes(dl: DiLoCo, outer: dict) -> dict:
    """Wire bytes each replica sends per sync of each fragment, from the outer programs."""
    replica, n_inner = Axis.REPLICA.value, dl.mesh.size // dl.R
    shape, names = dl.mesh.devices.shape, dl.mesh.axis_names
    return {f: wire_bytes([c for c in parse_collectives(compiled.as_text(), shape, names)
                           if c.axes == (replica,)]) * n_inner for f, compiled in outer.items()}


def _diloco(study: _Study, run: StudyRun) -> list:
    layout = run.layout
    dl = DiLoCo(study.model, schedule_config(study.train, study.offset), layout,
                make_mesh(layout, study.devices[:layout.n_devices]))
    key = (inner_layout(layout), layout.replica)
    if key not in study.inner_cache:  # the inner programs depend on the inner layout only
        study.inner_cache[key] = {r: dl.inner[r].jitted_step() for r in dl.local}
    outer = {f: dl.lower_outer(f).compile() for f in range(dl.P)}
    per_sync = _outer_bytes(dl, outer)
    states = None if study.start is None else {
        r: state_from(dl.inner[r], study.start) for r in dl.local}
    state = dl.start(study.inner_cache[key], outer, states)
    data = study.batches(dl.inner[0].seq_len)
    rows, cross = [], 0.0

    def mean_params():  # after a full sync this is θ_sync itself
        params = [jax.device_get(dl.inner[r].natural_params(s["params"]))
                  for r, s in state.states.items()]
        return jax.tree.map(lambda *p: np.mean(p, 0), *params)

    for t in range(1, study.train.steps + 1):
        losses = [float(x) for x in state.inner_step(study.batch(data, t))]
        cross += sum(per_sync[f] for f in state.sync_due(t))
        rows.append(study.row(run, t, float(np.mean(losses)), cross, mean_params))
    return rows


def warm_up(model: ModelConfig, train: TrainConfig, steps: int, *, devices=None,
            layout: Layout | None = None) -> dict:
    """The host train state (natural_state) after `steps` steps of sync DP (`layout`, default
    data over every device) on the first `steps` batches of `train`'s stream, its learning rate
    scheduled over the warm-up and the `train.steps` that follow (schedule_config)."""
    devices = list(devices or jax.devices())
    layout = layout or Layout(data=len(devices))
    whole = schedule_config(train, steps)
    validate(layout, model, whole, layout.n_devices)
    step = TrainStep(model, whole, layout, make_mesh(layout, devices[:layout.n_devices]))
    fn, state = step.jitted_step(), step.init_state()
    data = Batches("corpus", train.global_batch, step.seq_len, model.vocab, train.seed)
    for t in range(steps):  # one step at a time: queued steps' collectives can starve the
        state, loss = fn(state, place(data[t], step.batch_sharding))  # CPU's thread pool
        loss.block_until_ready()
    return natural_state(step, state)


def schedule_config(train: TrainConfig, offset: int) -> TrainConfig:
    """`train` with one learning-rate schedule over the warm-up's `offset` steps and its own:
    a run that carries the warm-up's step count goes on down the same cosine."""
    return train.replace(steps=offset + train.steps)


def loss_study(model: ModelConfig, train: TrainConfig, runs: list[StudyRun], *, devices=None,
               eval_every: int = 50, eval_batches: int = 4, progress: bool = True,
               start=None, offset: int = 0):
    """Train every run on the same token stream; a DataFrame with one row per run and step
    (columns run, layout, step, tokens, loss, eval_loss, cross_replica_bytes). `start`: the
    host train state every run starts from (warm_up's), `offset`: the steps it took."""
    import pandas as pd
    from tqdm.auto import tqdm

    for run in runs:  # every run checked before anything compiles
        piece = train.replace(global_batch=train.global_batch // run.batch_split)
        validate(run.layout, model, piece, run.layout.n_devices)
    replicas = max([r.layout.replica for r in runs] + [r.batch_split for r in runs])
    seq = train.seq_len or model.seq_len
    held_out = Batches("corpus", train.global_batch, seq, model.vocab, train.seed + 1000)
    bar = tqdm(total=train.steps * len(runs), desc="loss study", disable=not progress)
    rows = []
    study = _Study(model, train, list(devices or jax.devices()), replicas, eval_every,
                   [held_out[i] for i in range(eval_batches)], bar if progress else None, {},
                   start, offset)
    if start is not None:  # the warm-up's point itself: step 0 of every run
        warm = study.evaluate(start["params"])
        rows += [{"run": run.name, "layout": str(run.layout), "step": 0, "tokens": 0,
                  "loss": np.nan, "cross_replica_bytes": 0.0, "eval_loss": warm} for run in runs]
    for run in runs:
        bar.set_postfix_str(run.name)
        rows += (_diloco if run.layout.diloco else _plain)(study, run)
    bar.close()
    return pd.DataFrame(rows)


def final_gaps(frame):
    """Per run: the final eval loss, its gap to sync DP and to the single replica, and the bytes
    each replica sent to the others."""
    last = frame.groupby("run", sort=False).tail(1).set_index("run")  # rows are in step order
    out = last[["eval_loss", "loss", "cross_replica_bytes"]].copy()
    for ref in ("sync DP", "single replica"):
        if ref in out.index:
            out[f"gap_vs_{ref.replace(' ', '_')}"] = out["eval_loss"] - out.loc[ref, "eval_loss"]
    return out.reset_index()
