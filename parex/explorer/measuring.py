"""Measuring for the Explorer: progress after the compile and after every step, the argument
buffers split into their parts, and repeated runs of one setup pooled into one honest row.

    run = measure_run(model, train, layout, devices, on_progress=print)
    pooled_row([run, run2])     # median of every timed step of both runs, their spread, n

`measure_run` does what parex.measure.measure does (compile_layout, compiled_stats, steps timed
with perf_counter around the call plus block_until_ready, the first not timed) one step at a
time, so a progress bar can follow; its Measurement is built the same way.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np

from ..config import ModelConfig, TrainConfig
from ..layout import Layout
from ..measure.compiled import (compile_layout, compiled_stats, measurement_of, time_steps,
                               timed_steps)
from ..record import Measurement, Prediction



@dataclass
class Run:
    """One press of Measure: the Measurement, its Prediction on the machine it ran on, every
    timed step, and the argument buffers split by part (bytes per device)."""

    measurement: Measurement
    prediction: Prediction
    key: tuple  # what makes two runs repeats of one setup (model, train, layout, devices)
    step_times: list[float] = field(default_factory=list)
    split: dict = field(default_factory=dict)  # params, optimizer, inputs


def _per_device_bytes(shapes, shardings) -> int:
    """Bytes one device holds of a tree of arrays under their shardings."""
    total = 0
    for shape, sharding in zip(jax.tree.leaves(shapes), jax.tree.leaves(shardings)):
        local = sharding.shard_shape(shape.shape)
        total += math.prod(local) * np.dtype(shape.dtype).itemsize
    return total


def argument_split(step) -> dict[str, int]:
    """The step's arguments per device by part: parameters, optimizer state, inputs. These are
    the buffers XLA's memory analysis counts as `argument`, so the three add up to it."""
    state = jax.eval_shape(step.init_state)
    shardings = step.train_state_shardings()
    batch = step.abstract_batch()
    return {"params": _per_device_bytes(state["params"], shardings["params"]),
            "optimizer": _per_device_bytes(state["opt"], shardings["opt"]),
            "inputs": _per_device_bytes(batch, {k: v.sharding for k, v in batch.items()})}


def program_key(model, train, layout, devices) -> tuple:
    return (model, train.replace(steps=0), str(layout), tuple(devices))


def compiled_program(model, train, layout, devices, cache: dict | None = None):
    """(step, compiled, compile seconds, compile statistics, argument split, a function giving
    the initial state), compiled once per
    setup when a `cache` is given: a repeated Measure runs the same program again, for more
    samples of its step time."""
    key = program_key(model, train, layout, devices)
    if cache is not None and key in cache:
        return cache[key]
    step, compiled, compile_time = compile_layout(model, train, layout, devices)
    program = (step, compiled, compile_time, compiled_stats(compiled, step), argument_split(step),
               initial_state(step))
    if cache is not None:
        cache[key] = program
    return program


def initial_state(step):
    """A function returning a fresh copy of the step's initial state: the step donates its
    state, so each run starts from its own copy of one initialisation (the same values
    step.init_state() gives, without tracing and compiling the initialiser again)."""
    state = step.init_state()
    copy = jax.jit(lambda tree: jax.tree.map(jnp.copy, tree),
                   out_shardings=step.train_state_shardings())
    return lambda: copy(state)


def measure_run(model: ModelConfig, train: TrainConfig, layout: Layout, devices,
                on_progress=None, data: str = "corpus", cache: dict | None = None
                ) -> tuple[Measurement, list, dict]:
    """(Measurement, timed step seconds, argument split). `on_progress(done, total, label)` is
    called after the compile (done = 1) and after each step (total = steps + 1)."""
    report = on_progress or (lambda done, total, text: None)
    total = train.steps + 1
    report(0, total, "compiling")
    fresh = cache is None or program_key(model, train, layout, devices) not in cache
    step, compiled, compile_time, stats, split, fresh_state = compiled_program(
        model, train, layout, devices, cache)
    report(1, total, f"compiled in {compile_time:.1f} s" if fresh else "compiled before")
    losses, times = time_steps(step, compiled, data, False, state=fresh_state(),
                               on_step=lambda i: report(2 + i, total,
                                                        f"step {i + 1} of {train.steps}"))
    measurement = measurement_of(step.model, step.train, step.layout, step.mesh, losses, times,
                                 compile_time, stats)
    return measurement, timed_steps(times), split


def pooled_row(runs: list[Run]) -> dict:
    """One measured row for repeats of one setup: the latest run's compile statistics (they
    are the same program), and the median, fastest and slowest of every timed step of every
    run, with n_steps and n_runs."""
    last = runs[-1]
    times = [t for run in runs for t in run.step_times]
    row = last.measurement.to_row()
    row |= {"step_time_s": statistics.median(times), "step_time_min_s": min(times),
            "step_time_max_s": max(times), "n_steps": len(times), "n_runs": len(runs)}
    row |= {f"memory_{k}_bytes": v for k, v in last.split.items()}
    row["tokens_per_s"] = last.measurement.tokens_per_step / row["step_time_s"]
    return row


def ratio_text(predicted: float, row: dict) -> str:
    """predicted / measured with its range over the measured spread, e.g. "0.85× (0.74–1.01×,
    n=8 steps in 2 runs)"."""
    mid, fast, slow = row["step_time_s"], row["step_time_min_s"], row["step_time_max_s"]
    spread = (f" ({predicted / slow:.2f}–{predicted / fast:.2f}×, n={row['n_steps']} steps in "
              f"{row['n_runs']} run{'s' if row['n_runs'] > 1 else ''})")
    return f"{predicted / mid:.2f}×{spread}"


__all__ = ["Run", "argument_split", "compiled_program", "measure_run", "pooled_row", "ratio_text"]
