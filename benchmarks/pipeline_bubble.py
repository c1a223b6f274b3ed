"""Benchmark: the pipeline bubble — measured step time over m = 1..16 at p = 4 against
(p−1)/(m+p−1), plus a Gantt chart of every schedule.

    python benchmarks/pipeline_bubble.py [--out DIR] [--ms 1,2,4,8,16] [--schedules gpipe,1f1b]
                                         [--stages 4] [--data 1] [--seq 64] [--microbatch 2]

Runs (compiles and times) one step per (schedule, m) on the emulated CPU mesh and writes
DIR/pipeline_bubble.csv, .png and .svg, and DIR/gantt_<schedule>.png. The CSV carries the JAX
version, platform and core count: with fewer cores than devices an idle stage lends its core to a
busy one, which hides part of the bubble. Takes a few minutes per schedule on a laptop CPU.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="artifacts", help="output folder (git-ignored)")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--ms", default=",".join(str(m) for m in range(1, 17)))
    parser.add_argument("--schedules", default="gpipe,1f1b")
    parser.add_argument("--stages", type=int, default=4)
    parser.add_argument("--data", type=int, default=1, help="data-parallel replicas")
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--microbatch", type=int, default=2, help="sequences per microbatch")
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args(argv)

    from parex.mesh import emulate_devices  # before anything touches a JAX backend

    emulate_devices(args.stages * args.data)
    import jax
    import pandas as pd

    from parex.charts.pipeline import bubble_chart, gantt_chart
    from parex.config import model_preset
    from parex.parallel.schedules import make_schedule
    from parex.studies_pipeline import bubble_study

    ms = [int(m) for m in args.ms.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frames = []
    for name in args.schedules.split(","):
        frames.append(bubble_study(model_preset(args.model), args.stages, ms, name,
                                   args.microbatch, args.data, args.seq, args.steps,
                                   progress=True))
        gantt_chart(make_schedule(name, args.stages, 8)).save(str(out / f"gantt_{name}.png"))
    df = pd.concat(frames, ignore_index=True)
    df["jax_version"], df["platform"] = jax.__version__, jax.devices()[0].platform
    df["cpu_cores"] = os.cpu_count()
    columns = ["schedule", "m", "step_time_s", "bubble_predicted", "bubble_measured"]
    print(df[columns].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    df.to_csv(out / "pipeline_bubble.csv", index=False)
    chart = bubble_chart(df)
    for suffix in (".png", ".svg"):
        chart.save(str(out / f"pipeline_bubble{suffix}"))
        print("wrote", out / f"pipeline_bubble{suffix}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
