"""Run a layout for real and read what XLA did: memory, FLOPs, collectives, step times.

    measure(model, train, layout) -> Measurement

Compile statistics come from the compiled step (per device); step times are medians over timed steps
after one warm-up, each timed with perf_counter around the call plus block_until_ready.
"""

from __future__ import annotations

import statistics

import jax
import numpy as np

from ..config import ModelConfig, TrainConfig
from ..layout import Layout
from ..moe.measure import RouterProbe
from ..record import Measurement
from .compiled import compile_layout, compiled_stats, time_steps


def measure(model: ModelConfig, train: TrainConfig, layout: Layout, *, devices=None,
            data: str = "corpus", warmup: int = 1, progress: bool = False) -> Measurement:
    """Compile and run `train.steps` steps of `layout`; the first `warmup` are not timed."""
    if layout.diloco:  # replicas and their outer synchronisations
        from ..lowcomm.measure import measure_diloco

        return measure_diloco(model, train, layout, devices=devices, data=data, warmup=warmup,
                              progress=progress)
    step, compiled, compile_time = compile_layout(model, train, layout, devices)
    probe = RouterProbe(step) if model.moe else None
    losses, times = time_steps(step, compiled, data, progress, probe=probe)
    timed = times[warmup:] if len(times) > warmup else times
    return Measurement(
        model=model.name, layout=str(layout), n_devices=step.mesh.size,
        platform=step.mesh.devices.flat[0].platform, losses=losses,
        step_time_s={"median": statistics.median(timed), "min": min(timed), "max": max(timed)},
        compile_time_s=compile_time, tokens_per_step=train.tokens_per_step(model),
        moe=probe.block() if probe else None, **compiled_stats(compiled, step))


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
