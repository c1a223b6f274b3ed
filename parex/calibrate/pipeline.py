"""The pipeline executor's fixed cost per tick on this machine, for `parex calibrate`.

parex's executor (parallel/pipeline.py) is tick-synchronous: one scan over the schedule table's
ticks, each tick a switch over idle/F/B/W (its outputs scattered into the stash slots) and two
ppermutes after which every stage waits for the others. Besides the arithmetic of the tick's ops
and the bytes its copies and sends move (predicted from the kernel rates, the copy bandwidth and
the collective-permute fit), a tick costs a fixed amount: the switch's dispatch, the loop's
bookkeeping and the rendezvous of every device at the ppermutes.

It is measured on the real executor, on a probe model too small for its arithmetic or bytes to
matter (PROBE_MODEL: 4 layers of width 16 on 16 tokens), not on any layout the accuracy benchmark
scores: the loss and gradients of the pipeline `PROBE_LAYOUT` at two microbatch counts, timed
alternately, and the difference divided by the difference in ticks. Fixed per-step costs (the
embedding gather, the reductions after the loop, dispatch) cancel in the difference. When the
executor's tick gets cheaper, this number falls with it.
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor

PROBE_LAYOUT = "data=2,stage=4,schedule=1f1b"
PROBE_MICROBATCHES = (2, 10)  # the two runs: 10 and 26 ticks of 1F1B at p = 4
SEQUENCES_PER_MICROBATCH = 2  # over data = 2: one sequence per device


def probe_model():
    from ..config import ModelConfig

    return ModelConfig("tick-probe", layers=4, hidden=16, heads=2, vocab=32, seq_len=16)


def _probe_run(m: int, devices: int):
    """(jitted loss-and-gradients of the probe pipeline with m microbatches, its arguments, its
    ticks)."""
    import jax
    import numpy as np

    from ..model import transformer as gpt
    from ..config import TrainConfig
    from ..layout import Layout
    from ..executor.mesh import make_mesh
    from ..parallel.pipeline import timetable_for
    from ..executor.step import TrainStep

    model = probe_model()
    layout = Layout.parse(f"{PROBE_LAYOUT},microbatches={m}", devices)
    train = TrainConfig(global_batch=SEQUENCES_PER_MICROBATCH * m, steps=1)
    step = TrainStep(model, train, layout, make_mesh(layout, jax.devices()[:layout.n_devices]))
    # zeros from the host: no initialisation to compile (the timing does not depend on values)
    params = jax.tree.map(lambda s, sharding: jax.device_put(np.zeros(s.shape, s.dtype), sharding),
                          gpt.param_shapes(model), step.state_shardings("param"))
    tokens = jax.device_put(np.zeros((train.global_batch, model.seq_len), np.int32),
                            step.batch_sharding)
    batch = {"inputs": tokens, "targets": tokens}
    compiled = step.jitted_loss_and_grads().lower(params, batch).compile()
    return compiled, (params, batch), timetable_for(step).schedule.n_ticks


def tick_seconds(devices: int = 8, repeats: int = 7) -> float:
    """Seconds of one tick of the executor beyond its ops' arithmetic and bytes (module
    docstring): the two probe runs' medians, alternated, differenced per tick."""
    import jax

    with ThreadPoolExecutor(len(PROBE_MICROBATCHES)) as pool:  # XLA compiles off the GIL
        runs = list(pool.map(lambda m: _probe_run(m, devices), PROBE_MICROBATCHES))
    for fn, args, _ in runs:
        jax.block_until_ready(fn(*args))  # warm-up
    differences = []  # per alternated pair, so that a change of load hits both runs alike
    for _ in range(repeats):
        pair = []
        for fn, args, _ in runs:
            start = time.perf_counter()
            jax.block_until_ready(fn(*args))
            pair.append(time.perf_counter() - start)
        differences.append(pair[1] - pair[0])
    ticks = runs[1][2] - runs[0][2]
    return max(statistics.median(differences), 1e-7) / ticks


__all__ = ["PROBE_LAYOUT", "probe_model", "tick_seconds"]
