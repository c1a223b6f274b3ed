"""How many of the machine's cores a layout's emulated step keeps busy: wall seconds and process
CPU seconds (getrusage) per step, medians of 7 after 2 warm-up steps. A step bound by CPU work
keeps nearly every core busy; one bound by waiting (devices idle at collectives, a pipeline's
bubble) keeps fewer (docs/results/2026-12-emulated-step.md).

    python benchmarks/cpu_utilisation.py tiny single data=8 tensor=8 tensor=8,sp=on
"""

from __future__ import annotations

import os
import resource
import statistics
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)

from parex.config import TrainConfig, model_preset  # noqa: E402
from parex.executor.data import Batches  # noqa: E402
from parex.layout import Layout  # noqa: E402
from parex.measure.compiled import compile_layout  # noqa: E402


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def utilisation(model, train, layout: Layout, steps: int = 7) -> tuple[float, float]:
    """(median wall seconds, median CPU seconds) of one step."""
    step, compiled, _ = compile_layout(model, train, layout, jax.devices()[:layout.n_devices])
    batches = Batches("corpus", train.global_batch, step.seq_len, model.vocab, train.seed)
    state, batch = step.init_state(), batches.on_mesh(0, step.batch_sharding)
    walls, cpus = [], []
    for i in range(steps + 2):
        cpu, wall = cpu_seconds(), time.perf_counter()
        state, loss = compiled(state, batch)
        jax.block_until_ready(loss)
        if i >= 2:
            walls.append(time.perf_counter() - wall)
            cpus.append(cpu_seconds() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    model, train = model_preset(argv[0]), TrainConfig(global_batch=16)
    print(f"{'layout':40s} {'wall ms':>8s} {'CPU ms':>8s} {'cores busy':>10s}  "
          f"(of {os.cpu_count()})")
    for spec in argv[1:]:
        wall, cpu = utilisation(model, train, Layout.parse(spec, 8))
        print(f"{spec:40s} {wall * 1e3:8.1f} {cpu * 1e3:8.1f} {cpu / wall:10.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
