"""Benchmark: DiLoCo's loss against sync data parallelism and a single replica, same tokens.

    python benchmarks/diloco.py [--model tiny] [--steps 200] [--replicas 4] [--hs 10,50,100]
                                [--seq 64] [--global-batch 16] [--out DIR]

Trains, on the shipped corpus and the emulated 8-device mesh: sync DP (data=8), one replica alone
(data=2, B/4 per step, 4× the steps), DiLoCo with R = 4 replicas of data=2 for each H, streaming
(P = 2 fragments) and the int8 exchange at the middle H. Prints the final eval loss of each run,
its gap to sync DP and to the single replica, and the bytes each replica sent to the others (for
DiLoCo read from the compiled outer programs); writes DIR/diloco.csv and a chart (loss against
tokens, eval loss against bytes).

Cost: seven runs of `--steps` steps (the single replica: four times as many, each a quarter of
the batch). `--model tiny --steps 100` took 13 minutes on 2 CPU cores shared with other jobs
(load ≈ 15); the small model (`--model small`) costs about 10× more per step on the emulated
mesh, where every data-parallel device runs the whole AdamW update of its 11M parameters.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--hs", default="10,50,100", help="inner steps H of the DiLoCo runs")
    parser.add_argument("--fragments", type=int, default=2)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--global-batch", type=int, default=16)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--out", default="artifacts", help="output folder (git-ignored)")
    args = parser.parse_args(argv)

    from parex.executor.mesh import emulate_devices  # before anything touches a JAX backend

    emulate_devices(args.devices)
    import pandas as pd

    from parex.config import TrainConfig, model_preset
    from parex.measure.report import human_bytes, table
    from parex.lowcomm.studies import default_runs, final_gaps, loss_study

    model = model_preset(args.model)
    train = TrainConfig(global_batch=args.global_batch, seq_len=args.seq, steps=args.steps)
    hs = tuple(int(h) for h in args.hs.split(","))
    runs = default_runs(args.devices, args.replicas, hs, args.fragments)
    start = time.perf_counter()
    frame = loss_study(model, train, runs, eval_every=args.eval_every)
    seconds = time.perf_counter() - start
    gaps = final_gaps(frame)
    rows = [[r["run"], f"{r['eval_loss']:.4f}", f"{r['gap_vs_sync_DP']:+.4f}",
             f"{r['gap_vs_single_replica']:+.4f}", human_bytes(r["cross_replica_bytes"])]
            for _, r in gaps.iterrows()]
    print(f"\n{model.name} · {args.steps} steps × {args.global_batch} × {args.seq} tokens · "
          f"{args.replicas} replicas of {args.devices // args.replicas} devices · "
          f"{seconds:.0f} s\n")
    print(table(rows, ["run", "final eval loss", "gap vs sync DP", "gap vs single replica",
                       "sent to other replicas"]))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "diloco.csv", index=False)
    pd.DataFrame(gaps).to_csv(out / "diloco_gaps.csv", index=False)
    try:
        from parex.charts.lowcomm import loss_chart
        from parex.charts.records import save

        for suffix in (".png", ".svg"):
            print("wrote", save(loss_chart(frame), out / f"diloco{suffix}"))
    except ImportError as error:  # the notebook extra (altair) is not installed
        print(f"no chart: {error}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
