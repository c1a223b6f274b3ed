"""Measure a DiLoCo layout: compile the replicas' inner programs and the outer programs, read
their traffic from the HLO, run the inner steps and the synchronisations, time both.

    measure_diloco(model, train, layout) -> Measurement with a `diloco` block

The Measurement's own fields describe one inner step of one replica (memory, FLOPs, collectives:
its program, which spans that replica's devices only). The `diloco` block adds the outer side,
per device:
    cross_replica_bytes_per_step     Σ_fragments outer bytes / H: the WAN traffic amortised
    outer_bytes_per_sync             one synchronisation (one fragment under streaming)
    inner_bytes_per_device_per_step  every collective of the inner program, per step
Both programs are checked: the inner one has no collective over `replica`; the outer one only
exchanges over `replica`, plus the all-gathers inside a replica that rebuild an exchange split
over the devices holding copies (exchange.replica_mean), counted as outer_intra_bytes_per_sync.
"""

from __future__ import annotations

import statistics
import time

import jax
import numpy as np
from tqdm.auto import tqdm

from ..config import ModelConfig, TrainConfig
from ..executor.data import Batches
from ..layout import Axis, Layout
from ..measure.compiled import check_fits_host, compiled_stats, measurement_of, memory_stats
from ..measure.hlo import parse_collectives
from ..executor.mesh import make_mesh
from ..record import Measurement, wire_bytes
from ..validation import validate
from .diloco import DiLoCo

REPLICA = Axis.REPLICA.value


def compile_diloco(model: ModelConfig, train: TrainConfig, layout: Layout, devices=None):
    """(DiLoCo, {replica: compiled inner step}, {fragment: compiled outer step}, inner compile
    seconds, outer compile seconds), for the replicas this process holds."""
    validate(layout, model, train, layout.n_devices if devices is None else len(devices))
    check_fits_host(model, layout, devices)
    dl = DiLoCo(model, train, layout, make_mesh(layout, devices))
    start = time.perf_counter()
    inner = {r: dl.inner[r].lower().compile() for r in dl.local}
    middle = time.perf_counter()
    outer = {f: dl.lower_outer(f).compile() for f in range(dl.P)}
    return dl, inner, outer, middle - start, time.perf_counter() - middle


def check_isolated(dl: DiLoCo, inner: dict, outer: dict) -> tuple[list, dict]:
    """The inner programs' collectives never cross `replica`, the outer ones only cross it.
    Returns (one inner program's collectives, {fragment: outer collectives})."""
    for r, compiled in inner.items():
        used = {d for s in jax.tree.leaves(compiled.input_shardings) for d in s.device_set}
        if not used <= set(dl.inner[r].mesh.devices.flat):
            raise AssertionError(f"replica {r}'s inner program uses other replicas' devices")
    r0 = dl.local[0]
    mesh = dl.inner[r0].mesh
    inner_cols = parse_collectives(inner[r0].as_text(), mesh.devices.shape, mesh.axis_names)
    if any(REPLICA in c.axes for c in inner_cols):
        raise AssertionError("the inner program has a collective over the replica axis")
    outer_cols = {f: parse_collectives(c.as_text(), dl.mesh.devices.shape, dl.mesh.axis_names)
                  for f, c in outer.items()}
    stray = [c for cs in outer_cols.values() for c in cs
             if c.axes != (REPLICA,) and (REPLICA in c.axes or c.kind != "all-gather")]
    if stray:  # besides the exchange: only the all-gathers that rebuild a split exchange
        raise AssertionError(f"unexpected collectives in the outer program: {stray}")
    return inner_cols, outer_cols


def _crossing(cols) -> list:
    return [c for c in cols if c.axes == (REPLICA,)]


def diloco_block(dl: DiLoCo, inner_cols, outer_cols: dict, outer_times=(),
                 outer_memory=None) -> dict:
    """The `diloco` entry of a Measurement, from the programs' collectives (hlo.py's byte
    convention; the `wire` entries count what each device sends)."""
    per_sync = {f: sum(c.total_bytes for c in _crossing(cs)) for f, cs in outer_cols.items()}
    wire = {f: wire_bytes(_crossing(cs)) for f, cs in outer_cols.items()}
    intra = {f: sum(c.total_bytes for c in cs) - per_sync[f] for f, cs in outer_cols.items()}
    lay = dl.layout
    return {"inner_steps": dl.H, "replicas": dl.R, "fragments": dl.P,
            "outer_dtype": lay.outer_dtype, "overlap": lay.overlap,
            "cross_replica_bytes_per_step": sum(per_sync.values()) / dl.H,
            "outer_bytes_per_sync": max(per_sync.values()),
            "outer_bytes_per_round": sum(per_sync.values()),
            "cross_replica_wire_bytes_per_step": sum(wire.values()) / dl.H,
            "outer_wire_bytes_per_sync": max(wire.values()),
            "outer_intra_bytes_per_sync": max(intra.values()),  # rebuilding inside a replica
            "inner_bytes_per_device_per_step": sum(c.total_bytes for c in inner_cols),
            "inner_wire_bytes_per_device_per_step": wire_bytes(inner_cols),
            "outer_collectives": [c.to_json() for c in outer_cols[0]],
            "outer_step_time_s": statistics.median(outer_times) if outer_times else None,
            "outer_memory_bytes_per_device": outer_memory, "syncs": len(outer_times)}


def run_rounds(dl: DiLoCo, inner: dict, outer: dict, data: str, progress: bool,
               checkpoints=None):
    """Train `train.steps` inner steps with their synchronisations. Returns (mean loss over the
    replicas per step, inner step seconds, outer step seconds, the run). `checkpoints`
    (parex.executor.checkpoint.RunCheckpoints): save every replica's train state and the outer
    state (θ_sync, the Nesterov momentum, overlap's pending mean) after the steps it names, and
    resume from its latest save."""
    model, train = dl.model, dl.train
    batches = Batches(data, train.global_batch, dl.inner[0].seq_len, model.vocab, train.seed)
    run = dl.start(inner, outer)
    losses, times, outer_times, start_at = [], [], [], 0
    if checkpoints is not None:
        def state():
            return {"replicas": {str(r): s for r, s in run.states.items()}, "outer": run.outer}

        shardings = {"replicas": {str(r): dl.inner[r].train_state_shardings()
                                  for r in run.states}, "outer": dl.outer_shardings()}
        saved, start_at, losses = checkpoints.restore_or(state, shardings)
        run.states = {int(r): s for r, s in saved["replicas"].items()}
        run.outer = saved["outer"]
    for t in tqdm(range(start_at + 1, train.steps + 1), desc=f"{model.name} {dl.layout}",
                  disable=not progress, leave=False):
        batch = batches[t - 1]
        start = time.perf_counter()
        step_losses = run.inner_step(batch)
        jax.block_until_ready(step_losses)
        times.append(time.perf_counter() - start)
        losses.append([float(x) for x in step_losses])
        start = time.perf_counter()
        if run.sync_due(t):
            jax.block_until_ready(run.outer)
            outer_times.append(time.perf_counter() - start)
        if checkpoints is not None:  # after the sync: the state at the end of step t
            checkpoints.after_step(t - 1, state(), losses)
    return replica_mean_losses(np.array(losses)), times, outer_times, run


def replica_mean_losses(local: np.ndarray) -> list[float]:
    """(steps, local replicas) losses -> the mean over all replicas, across processes too."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        local = multihost_utils.process_allgather(local, tiled=False)  # (processes, steps, n)
        local = np.concatenate(list(local), axis=-1)
    return [float(x) for x in local.mean(-1)]


def measure_diloco(model: ModelConfig, train: TrainConfig, layout: Layout, *, devices=None,
                   data: str = "corpus", warmup: int = 1, progress: bool = False,
                   checkpoint=None) -> Measurement:
    """Compile and run a DiLoCo layout for `train.steps` inner steps (see the module doc);
    `checkpoint`: a CheckpointPlan (parex.executor.checkpoint) to save and resume it."""
    dl, inner, outer, inner_compile, outer_compile = compile_diloco(model, train, layout, devices)
    inner_cols, outer_cols = check_isolated(dl, inner, outer)
    saves = None
    if checkpoint is not None:
        from ..executor.checkpoint import RunCheckpoints

        saves = RunCheckpoints(checkpoint, dl.inner[dl.local[0]], data,
                               extra={"diloco": str(dl.layout)})
    losses, times, outer_times, _ = run_rounds(dl, inner, outer, data, progress, saves)
    r0 = dl.local[0]
    stats = compiled_stats(inner[r0], dl.inner[r0])
    block = diloco_block(dl, inner_cols, outer_cols, outer_times,
                         memory_stats(outer[0])["total"])
    block["outer_compile_time_s"] = outer_compile
    return measurement_of(model, dl.train, layout, dl.mesh, losses, times,
                          inner_compile + outer_compile, stats, warmup, diloco=block,
                          checkpoint=saves.finish() if saves else None)
