"""Benchmark: pipeline schedules against each other, measured.

    python benchmarks/pipeline_bubble.py [--model tiny] [--ms 2,4,8] [--repeats 7] [--batch 16]
                                         [--processes 3] [--out DIR]

Two parts, each in its own process (the emulated device count is fixed per process):
1. Equal work: ZB-H1 and ZB-V against 1F1B at p = 4, m = 8 on 8 emulated devices (data = 2), step
   times alternated in one process, in each of `--processes` processes (one process's ratio
   scatters by a few per cent: the median over processes is the figure). Their matmul FLOPs are
   equal, and with more emulated devices than cores an idle stage's core serves another stage,
   so the step times should be too (ratio ≈ 1).
2. The bubble where it is physical: p = 2 stages on 2 emulated devices, one per core of a 2-core
   machine. Per schedule and m: the pipelined step against one stage's work done alone on one
   device (parex.studies.pipeline), so bubble = 1 − t(alone)/t(pipeline), beside the table's
   bubble (T_F = T_B = T_W) and the lockstep executor's. ZB-H1's should be below 1F1B's.
   Beside them the bubble read from a per-device profiler trace (parex.measure.trace): the
   share of each device's step spent waiting in collectives, and the wall-time bubble split into
   that idle time and the rest (per-tick overhead, imbalance, the baseline's differences).
Prints medians and ratios; writes DIR/pipeline_bubble.csv and the chart.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def equal_work(model_name: str, repeats: int, batch: int = 16) -> dict:
    """Median step times (wall, and this process's CPU time) of 1F1B, ZB-H1 and ZB-V at
    p = 4, m = 8, alternated."""
    from parex.config import model_preset
    from parex.executor.mesh import emulate_devices

    emulate_devices(8)
    from parex.studies.pipeline import _timer
    from parex.config import TrainConfig
    from parex.layout import Layout

    model = model_preset(model_name).replace(layers=8)
    train = TrainConfig(global_batch=batch)
    layouts = {"1f1b": "data=2,stage=4,schedule=1f1b,microbatches=8",
               "zbh1": "data=2,stage=4,schedule=zbh1,microbatches=8",
               "zbv": "data=2,stage=4,schedule=zbv,virtual=2,microbatches=8"}
    timers = {k: _timer(model, train, Layout.parse(v), None) for k, v in layouts.items()}
    times = {k: [] for k in timers}
    cpu = {k: [] for k in timers}
    for _ in range(repeats):
        for k, run in timers.items():
            start = time.process_time()
            times[k].append(run())
            cpu[k].append(time.process_time() - start)
    return {k: statistics.median(v) for k, v in times.items()} | {
        "cpu_" + k: statistics.median(v) for k, v in cpu.items()}


def physical_bubble(model_name: str, ms, repeats: int, out: Path) -> None:
    from parex.executor.mesh import emulate_devices

    emulate_devices(2)
    from parex.config import model_preset
    from parex.studies.pipeline import bubble_study

    df = bubble_study(model_preset(model_name), p=2, ms=ms, schedules=("gpipe", "1f1b", "zbh1"),
                      repeats=repeats, progress=True, trace=True)
    df["wall_minus_traced"] = df.bubble_measured - df.bubble_traced  # overhead, not idle
    df.to_csv(out / "pipeline_bubble.csv", index=False)
    print(df.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    for m in ms:
        rows = df[df.m == m].set_index("schedule")
        print(f"m={m}: ZB-H1/1F1B step time {rows.step_time_s['zbh1'] / rows.step_time_s['1f1b']:.3f}"
              f", bubble measured 1F1B {rows.bubble_measured['1f1b']:.3f} ZB-H1 "
              f"{rows.bubble_measured['zbh1']:.3f} (table {rows.bubble_table['1f1b']:.3f} / "
              f"{rows.bubble_table['zbh1']:.3f}, lockstep {rows.bubble_lockstep['1f1b']:.3f} / "
              f"{rows.bubble_lockstep['zbh1']:.3f}), traced {rows.bubble_traced['1f1b']:.3f} / "
              f"{rows.bubble_traced['zbh1']:.3f}")
    try:
        from parex.charts.pipeline import bubble_chart

        bubble_chart(df).save(str(out / "pipeline_bubble.png"))
    except ImportError:  # the notebook extra is not installed
        pass


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--ms", default="2,4,8")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default="artifacts")
    parser.add_argument("--part", choices=["equal-work", "bubble"], default=None)
    parser.add_argument("--processes", type=int, default=3,
                        help="equal-work processes (each alternates the schedules; a process's "
                             "ratio scatters by a few per cent between processes)")
    parser.add_argument("--batch", type=int, default=16,
                        help="global batch of the equal-work part (16: one sequence per "
                             "microbatch and replica, so per-op overheads weigh most)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.part == "equal-work":
        print(json.dumps(equal_work(args.model, args.repeats, args.batch)))
        return 0
    if args.part == "bubble":
        physical_bubble(args.model, [int(m) for m in args.ms.split(",")], args.repeats, out)
        return 0
    me = [sys.executable, __file__, "--model", args.model, "--repeats", str(args.repeats),
          "--out", args.out, "--ms", args.ms]
    ratios = []  # per process: wall ("zbh1", "zbv") and CPU ("cpu_zbh1", ...) time over 1F1B's
    for i in range(args.processes):
        result = subprocess.run(me + ["--part", "equal-work", "--batch", str(args.batch)],
                                capture_output=True, text=True,
                                env=os.environ | {"PYTHONWARNINGS": "ignore"}, check=True)
        times = json.loads(result.stdout.strip().splitlines()[-1])
        ratios.append({key + name: times[key + name] / times[key + "1f1b"]
                       for key in ("", "cpu_") for name in ("zbh1", "zbv")})
        print(f"equal work, process {i + 1}/{args.processes}: 1F1B {times['1f1b'] * 1e3:.1f} ms, "
              + ", ".join(f"{k} {r:.3f}" for k, r in ratios[-1].items()), flush=True)
    for kind, key in (("wall", ""), ("CPU", "cpu_")):
        zbh1, zbv = ([r[key + name] for r in ratios] for name in ("zbh1", "zbv"))
        print(f"p=4, m=8, 8 emulated devices, batch {args.batch}, {kind} time per step over 1F1B's "
              f"(median of {args.processes} processes, each the median of {args.repeats} "
              f"alternated runs; range): ZB-H1 {statistics.median(zbh1):.3f} "
              f"({min(zbh1):.3f}–{max(zbh1):.3f}), ZB-V {statistics.median(zbv):.3f} "
              f"({min(zbv):.3f}–{max(zbv):.3f}) (equal matmul FLOPs)")
    subprocess.run(me + ["--part", "bubble"], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
