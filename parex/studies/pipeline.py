"""The pipeline bubble, measured where it is physical, beside what the schedule table says.

On an emulated CPU mesh with more devices than cores, a stage that idles lends its core to a busy
one, so wall time hides the bubble. With one emulated device per core (p = 2 stages on a 2-core
machine) each stage owns its core and the bubble is real wall time. The study then times, in one
process and alternately, the pipelined step and one stage's work without a pipeline: a model of
L/p layers (with the embedding and the head) as data=p on the same p devices, each device running
m microbatches of the same size through it, so each has one core as a stage has (one device
alone would run its ops on every core: XLA's CPU intra-op threads). The measured bubble is the
share of the pipelined step that is not one stage's work:

    bubble_measured = 1 − t(one stage alone) / t(pipeline)

(the tick-synchronous executor's waits, its overheads, the stage-to-stage sends and the
embedding/head imbalance count in it too; the baseline's one gradient all-reduce counts against).
Beside it: `bubble_table`, the schedule table timed with T_F = T_B = T_W (an unsplit backward
2·T_F), 1 − m·3·T_F / makespan, which is (p−1)/(m+p−1) for GPipe and 1F1B; and `bubble_lockstep`,
the same with every tick as long as its slowest op, as parex's tick-synchronous executor runs it.
Beside them `bubble_modelled`: the same ratio from parex's model of its executor on this machine
(predict() with the calibrated `cpu-local` profile: the lockstep ticks, each tick's copies around
its switch and its sends, parex.predict.ticks), which says how much of the measured bubble the
executor's per-tick costs account for. A GPU profile's prediction has the table's bubble.
"""

from __future__ import annotations

import statistics
import time

import jax
import pandas as pd

from ..config import ModelConfig, TrainConfig
from ..executor.data import batches_for
from ..layout import Layout
from ..measure.compiled import compile_layout
from ..parallel.schedules import LOOPING, VEE, make_schedule


def predicted_bubble(p: int, m: int) -> float:
    """GPipe / 1F1B bubble as a fraction of the step (Huang et al. 2019; Narayanan et al. 2021)."""
    return (p - 1) / (m + p - 1)


def table_bubbles(schedule: str, p: int, m: int) -> tuple[float, float]:
    """(asynchronous, lockstep) bubble of the table with T_F = T_B = T_W per full stage."""
    v = 2 if schedule in LOOPING + VEE else 1
    s = make_schedule(schedule, p, m, v)
    costs = (1 / v, 1 / v, 1 / v)
    work = 3 * m
    return 1 - work / s.makespan(*costs), 1 - work / s.lockstep_makespan(*costs)


def _timer(model, train, layout, devices):
    """A function that runs one step of `layout` and returns its seconds."""
    step, compiled, _ = compile_layout(model, train, layout, devices)
    batches = batches_for(model, "corpus", train.global_batch, step.seq_len, train.seed)
    state = {"state": step.init_state(), "batch": batches.on_mesh(0, step.batch_sharding)}

    def run() -> float:
        start = time.perf_counter()
        state["state"], loss = compiled(state["state"], state["batch"])
        jax.block_until_ready(loss)
        return time.perf_counter() - start

    run()  # warm-up
    return run


def modelled_seconds(model, train, layout) -> float:
    """parex's predicted step time of `layout` on this machine (its cpu-local profile,
    calibrated first if it has none)."""
    from ..calibrate.local import ready
    from ..predict import predict

    ready("cpu-local", progress=False)
    return predict(model, train, layout, "cpu-local").step_time_s["total"]


def _traced(run) -> dict:
    from ..measure.trace import trace_steps

    t = trace_steps(run, repeats=3)
    return {"bubble_traced": t["bubble"], "bubble_traced_max": t["bubble_max"],
            "traced_step_s": t["step_s"], "traced_compute_s": t["compute_s"],
            "traced_wait_s": t["wait_s"], "traced_other_s": t["other_s"]}


def bubble_study(model: ModelConfig, p: int = 2, ms=(2, 4, 8), schedules=("1f1b", "zbh1"),
                 microbatch: int = 1, seq_len: int | None = None, repeats: int = 7,
                 progress: bool = False, trace: bool = False) -> pd.DataFrame:
    """One row per (schedule, m): median step times of the pipeline and of one stage's work,
    and the three bubbles (module docstring). Per m, every schedule's pipeline and the one
    stage-alone baseline they share are timed alternately `repeats` times, so that the
    schedules' bubbles differ exactly as their step times do and a change of load hits all of
    them alike. Needs p devices; run it with one emulated device per free core. With `trace`,
    also the bubble read from a profiler trace of 3 more pipelined steps
    (parex.measure.trace): `bubble_traced` (mean over devices of wait / step),
    `bubble_traced_max`, and the traced step's split into `traced_compute_s`, `traced_wait_s`,
    `traced_other_s`."""
    from tqdm.auto import tqdm

    devices = jax.devices()[:p]
    alone_model = model.replace(layers=model.layers // p)
    rows = []
    for m in tqdm(ms, desc=f"bubble p={p}", disable=not progress):
        train = TrainConfig(global_batch=m * microbatch, seq_len=seq_len)
        alone = train.replace(global_batch=p * m * microbatch)  # m microbatches per device
        layouts = {name: Layout(stage=p, schedule=name, microbatches=m,
                                virtual_stages=2 if name in LOOPING + VEE else 1)
                   for name in schedules}
        timers = {name: _timer(model, train, piped, devices) for name, piped in layouts.items()}
        timers["alone"] = _timer(alone_model, alone, Layout(data=p, microbatches=m), devices)
        times = {key: [] for key in timers}
        for _ in range(repeats):  # alternated, so that the machine's load hits all alike
            for key, run in timers.items():
                times[key].append(run())
        t_alone = statistics.median(times["alone"])
        modelled_alone = modelled_seconds(alone_model, alone, Layout(data=p, microbatches=m))
        for name, piped in layouts.items():
            t_pipe = statistics.median(times[name])
            modelled = modelled_seconds(model, train, piped)
            table, lockstep = table_bubbles(name, p, m)
            row = {"schedule": name, "p": p, "m": m, "layout": str(piped),
                   "step_time_s": t_pipe, "stage_alone_s": t_alone,
                   "bubble_measured": 1 - t_alone / t_pipe, "bubble_table": table,
                   "bubble_lockstep": lockstep, "bubble_predicted": predicted_bubble(p, m),
                   "step_time_modelled_s": modelled, "stage_alone_modelled_s": modelled_alone,
                   "bubble_modelled": 1 - modelled_alone / modelled}
            rows.append(row | (_traced(timers[name]) if trace else {}))
    return pd.DataFrame(rows)


__all__ = ["bubble_study", "predicted_bubble", "table_bubbles"]
