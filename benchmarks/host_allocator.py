"""Benchmark: what glibc's allocator costs the emulated mesh. Step times and page faults with
its default and with freed memory kept, in alternated processes.

    python benchmarks/host_allocator.py [--model tiny] [--rounds 3] [--steps 7]

XLA:CPU mallocs each step's temp buffers (tens of MB per emulated device) and frees them after
the step. glibc maps any block above its mmap threshold (32 MB at most) afresh, so every step
faults its working set in again and the kernel zeroes each page. "kept" runs the child with
GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1 GiB: large blocks come from
the heaps and freed memory stays for the next step. parex does not set it (it would change the
allocator of the user's whole process); a user on glibc can, in the environment that starts
Python or Jupyter.

The setting is per process, so each round runs one child process per setting (the order
alternating between rounds); a child times `--steps` steps of each layout on 8 emulated
devices, after a warm-up, and counts the process's minor page faults per step. Prints per
layout the median step time of each setting over all rounds, their ratio (kept/default) and
the page faults per step.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
from collections import defaultdict

KEPT = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1073741824"
LAYOUTS = ("data=8", "fsdp=8,zero=3", "data=2,tensor=4,sp=on",
           "data=2,stage=4,schedule=1f1b,microbatches=8",
           "data=2,stage=4,schedule=zbh1,microbatches=8")


def child(model_name: str, steps: int) -> dict:
    """Step times and page faults of every layout in this process."""
    from parex.executor.mesh import emulate_devices

    emulate_devices(8)
    from parex.config import TrainConfig, model_preset
    from parex.layout import Layout
    from parex.studies.pipeline import _timer

    model, train = model_preset(model_name).replace(layers=8), TrainConfig(global_batch=16)
    out = {}
    for name in LAYOUTS:
        run = _timer(model, train, Layout.parse(name), None)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        times = [run() for _ in range(steps)]
        faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / steps
        out[name] = {"times": times, "faults": faults}
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.model, args.steps)))
        return 0
    times, faults = defaultdict(list), defaultdict(list)
    for r in range(args.rounds):
        for setting in (("default", "kept") if r % 2 == 0 else ("kept", "default")):
            env = os.environ | {"PYTHONWARNINGS": "ignore"}
            if setting == "kept":
                env["GLIBC_TUNABLES"] = KEPT
            else:
                env.pop("GLIBC_TUNABLES", None)
            result = subprocess.run([sys.executable, __file__, "--child", "--model", args.model,
                                     "--steps", str(args.steps)], capture_output=True,
                                    text=True, env=env, check=True)
            for name, got in json.loads(result.stdout.strip().splitlines()[-1]).items():
                times[name, setting] += got["times"]
                faults[name, setting].append(got["faults"])
            print(f"round {r + 1}/{args.rounds}: {setting} done", file=sys.stderr, flush=True)
    print(f"{args.model} (8 layers), batch 16, 8 emulated devices; medians of "
          f"{args.rounds} x {args.steps} steps per setting")
    print(f"{'layout':46s} {'default s':>9s} {'kept s':>8s} {'kept/default':>12s} "
          f"{'faults/step default':>19s} {'kept':>7s}")
    for name in LAYOUTS:
        d, k = (statistics.median(times[name, s]) for s in ("default", "kept"))
        fd, fk = (statistics.median(faults[name, s]) for s in ("default", "kept"))
        print(f"{name:46s} {d:9.3f} {k:8.3f} {k / d:12.3f} {fd:19.0f} {fk:7.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
