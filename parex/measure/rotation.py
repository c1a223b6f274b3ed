"""Several layouts measured side by side: their timed steps alternate, one step of each in turn.

    measure_rotation(model, train, layouts) -> ([Measurement, ...], [reference seconds, ...])

On a shared machine the speed of the cores moves by ±15 % within minutes (issue 48's drift
experiments, docs/results/2026-12-emulated-step.md): layouts timed one after another each see a
different machine, and two layouts of the same work came out nearly 1.5× apart in one demo.
Compiled first and then stepped in rotation, every layout's steps are spread over the same
minutes, so what slows the machine slows every layout alike and the medians compare the
programs, not the moments. Every layout's state is resident until the last round.
Rotation does not slow the steps it times: alternated and back-to-back medians agree within
0.95-1.04 (the same results page). Each layout runs from its own initial state on its own
batches, exactly as parex.measure runs it alone (same losses; a mixture's router statistics
read the same way, untimed, before each of its steps).
"""

from __future__ import annotations

import statistics
import time

import jax
from tqdm.auto import tqdm

from ..config import ModelConfig, TrainConfig
from ..errors import InputError
from ..executor.data import batches_for
from ..layout import Layout
from ..record import Measurement
from .compiled import (WARMUP, check_fits_host, compile_layout, compiled_stats,
                       measurement_of, run_step)
from .router import RouterProbe


def measure_rotation(model: ModelConfig, train: TrainConfig, layouts: list[Layout], *,
                     devices=None, data: str = "corpus", warmup: int = WARMUP,
                     references=(), progress: bool = False) -> tuple[list[Measurement], list]:
    """(one Measurement per layout, the median seconds of each reference) for `train.steps`
    rounds of one step of every layout; the first `warmup` rounds are not timed. `references`:
    (jitted function, arguments) pairs timed in the same rotation (a calibration's block step,
    to see how far the machine has drifted from it)."""
    if any(layout.diloco for layout in layouts):
        raise InputError("measure_rotation runs synchronous steps; a DiLoCo layout's outer "
                         "synchronisations need parex.measure (parex.entry), one layout at a time")
    if layouts:  # every layout's state stays resident until the last round
        check_fits_host(model, layouts[0], devices, together=layouts[1:])
    runs = []
    for layout in tqdm(layouts, desc="compile", disable=not progress, leave=False):
        step, compiled, seconds = compile_layout(
            model, train, layout, None if devices is None else devices[:layout.n_devices])
        runs.append({"step": step, "compiled": compiled, "compile": seconds,
                     "state": step.init_state(), "losses": [], "times": [],
                     "probe": RouterProbe(step) if step.model.moe else None,
                     "batches": batches_for(step.model, data, step.train.global_batch,
                                            step.seq_len, step.train.seed)})
    reference_times = [[] for _ in references]
    for i in tqdm(range(train.steps), desc="rounds", disable=not progress, leave=False):
        for (fn, args), times in zip(references, reference_times):
            jax.block_until_ready(fn(*args))  # its own warm-up: what ran before was another program
            start = time.perf_counter()
            jax.block_until_ready(fn(*args))
            times.append(time.perf_counter() - start)
        for run in runs:  # each step as parex.measure times it
            run["state"], loss, seconds = run_step(run["step"], run["compiled"], run["state"],
                                                   run["batches"], i, run["probe"])
            run["times"].append(seconds)
            run["losses"].append(loss)
    measured = []
    for run in runs:
        step, probe = run["step"], run["probe"]
        measured.append(measurement_of(step.model, step.train, step.layout, step.mesh,
                                       run["losses"], run["times"], run["compile"],
                                       compiled_stats(run["compiled"], step), warmup,
                                       moe=probe.block() if probe else None))
        run.clear()  # the layout's state and program, freed before the next is summarised
    return measured, [statistics.median(times) for times in reference_times]


__all__ = ["measure_rotation"]
