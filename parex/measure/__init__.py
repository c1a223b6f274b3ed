"""Run a layout for real and read what XLA did: memory, FLOPs, collectives, step times.

    measure(model, train, layout) -> Measurement

Compile statistics come from the compiled step (per device); step times are medians over timed steps
after one warm-up, each timed with perf_counter around the call plus block_until_ready.
"""

from __future__ import annotations


import jax
import numpy as np

from ..config import ModelConfig, TrainConfig
from ..errors import InputError
from ..executor.checkpoint import CheckpointPlan, RunCheckpoints
from ..layout import Layout
from ..record import Measurement
from .compiled import compile_layout, compiled_stats, measurement_of, time_steps
from .router import RouterProbe


def measure(model: ModelConfig, train: TrainConfig, layout: Layout, *, devices=None,
            data: str = "corpus", warmup: int = 1, progress: bool = False,
            checkpoint: CheckpointPlan | None = None) -> Measurement:
    """Compile and run `train.steps` steps of `layout`; the first `warmup` are not timed. With
    `checkpoint`, save the run every `checkpoint.every` steps and, resuming, continue from the
    latest save (parex.executor.checkpoint). A DiLoCo layout's replicas are parex.measure
    (parex.entry)'s, which dispatches them to parex.lowcomm."""
    if layout.diloco:
        raise InputError(f"layout {layout} has DiLoCo replicas: measure it with parex.measure "
                         f"(parex.entry), which runs their outer synchronisations")
    opened = []  # the run's checkpoints, opened (and a resume checked) before compiling
    step, compiled, compile_time = compile_layout(
        model, train, layout, devices,
        before=(lambda step: opened.append(RunCheckpoints(checkpoint, step, data)))
        if checkpoint else None)
    model, train, layout = step.model, step.train, step.layout  # resolved (parex.setting)
    probe = RouterProbe(step) if model.moe else None
    saves = opened[0] if opened else None
    losses, times = time_steps(step, compiled, data, progress, probe=probe, checkpoints=saves)
    block = saves.finish() if saves else None
    return measurement_of(model, train, layout, step.mesh, losses, times, compile_time,
                          compiled_stats(compiled, step), warmup,
                          moe=probe.block() if probe else None, checkpoint=block)


def relative_error(tree, reference) -> float:
    """Largest per-leaf ‖a − b‖ / ‖b‖, with ‖b‖ floored at 1e-6 of the whole tree's norm so that
    leaves whose exact gradient is zero (e.g. the key bias) do not divide noise by noise."""
    leaves, refs = jax.tree.leaves(tree), jax.tree.leaves(reference)
    total = np.sqrt(sum(float(np.sum(np.square(np.asarray(r, np.float64)))) for r in refs))
    worst = 0.0
    for a, b in zip(leaves, refs, strict=True):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        worst = max(worst, np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-6 * total))
    return float(worst)
