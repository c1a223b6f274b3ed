"""Benchmark: the long-sequence study (tiny model, T = 256 … 4096, 8 devices by default).

    python benchmarks/long_sequence.py [--out DIR] [--lengths 256,512] [--devices 8] [--model tiny]

Compiles (does not run) the step of every (T, mode) and writes DIR/long_sequence.csv, .png and
.svg beside the printed table; the CSV carries the JAX version and platform so that runs on the
emulated CPU mesh and on accelerators can be told apart. Takes a few minutes on a laptop CPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="artifacts", help="output folder (git-ignored)")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--lengths", default="256,512,1024,2048,4096")
    parser.add_argument("--devices", type=int, default=8)
    args = parser.parse_args(argv)

    from parex.executor.mesh import emulate_devices  # before anything touches a JAX backend

    emulate_devices(args.devices)
    import jax

    from parex.charts.records import save
    from parex.charts.sequence import long_sequence_chart
    from parex.config import model_preset
    from parex.studies.sequence import long_sequence_study, study_table

    lengths = [int(t) for t in args.lengths.split(",")]
    df = long_sequence_study(model_preset(args.model), lengths, n=args.devices, progress=True)
    df["jax_version"], df["platform"] = jax.__version__, jax.devices()[0].platform
    print(study_table(df))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "long_sequence.csv", index=False)
    chart = long_sequence_chart(df)
    for suffix in (".png", ".svg"):
        print("wrote", save(chart, out / f"long_sequence{suffix}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
