"""Benchmark: the DiLoCo figure's protocol over seeds and outer learning rates.

    python benchmarks/diloco_protocol.py [--seeds 0,1,2] [--outer-lrs 0.7] [--h 10]
                                         [--warm 100] [--steps 100] [--per-worker 4]
                                         [--out DIR]

For each seed (parameters and batches, `TrainConfig.seed`): the figure's warm-up (sync DP on one
device), then from that checkpoint sync DP, one worker alone and DiLoCo's 8 workers (one
emulated device each, PER_WORKER sequences per inner step, H inner steps) for every outer
learning rate given, on the same tokens, all on the figure's model and batch
(parex.figures.lowcomm.diloco_study). Prints each run's final eval loss and its ratio to sync DP
per seed, then each run's seed-to-seed spread (standard deviation / mean) of both: the ratio's is
the paired spread the figure's loss tolerance is built from (parex.figures.lowcomm.PAIRED_RATIOS);
writes DIR/diloco_protocol.csv.

Cost: per seed one warm-up and 2 + (outer lrs) runs of `--steps` steps: 3 minutes per seed on
2 CPU cores at load 3–6, 5–7 minutes at load 5–10 (docs/results/2026-12-diloco-protocol.md).
`--noise-scale`: B_simple at each seed's warm start (parex.lowcomm.noise_scale), about a minute
per seed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--outer-lrs", default=None, help="default: the figure's")
    parser.add_argument("--h", type=int, default=None, help="default: the figure's H")
    parser.add_argument("--warm", type=int, default=None, help="default: the figure's")
    parser.add_argument("--steps", type=int, default=None, help="default: the figure's")
    parser.add_argument("--per-worker", type=int, default=None,
                        help="sequences per worker per step; default: the figure's")
    parser.add_argument("--noise-scale", action="store_true",
                        help="only the gradient noise scale at each seed's warm start")
    parser.add_argument("--sync-only", action="store_true", help="sync DP alone: its spread")
    parser.add_argument("--only", default=None,
                        help="comma-separated run names of the figure's (e.g. 'sync DP,"
                             "streaming H=10 P=2'): those runs alone")
    parser.add_argument("--out", default="artifacts", help="output folder (git-ignored)")
    args = parser.parse_args(argv)

    from parex.executor.mesh import emulate_devices  # before anything touches a JAX backend

    emulate_devices(8)
    import pandas as pd

    from parex.figures import lowcomm as fig
    from parex.lowcomm.studies import StudyRun

    h = args.h or fig.DILOCO_H
    lrs = [float(x) for x in (args.outer_lrs or str(fig.OUTER_LR)).split(",")]
    warm, steps = args.warm or fig.WARM, args.steps or fig.STEPS
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if args.noise_scale:
        return noise_scales(fig, [int(s) for s in args.seeds.split(",")], warm)
    frames = []
    for seed in (int(s) for s in args.seeds.split(",")):
        runs = fig.diloco_runs(h=h, outer_lr=lrs[0])[:3]  # sync DP, one worker, DiLoCo
        runs += [StudyRun(f"DiLoCo H={h} outer lr {lr:g}",
                          fig.diloco_layout(h, lr)) for lr in lrs[1:]]
        runs = runs[:1] if args.sync_only else runs
        if args.only:
            names = args.only.split(",")
            runs = [r for r in fig.diloco_runs(h=h, outer_lr=lrs[0]) if r.name in names]
        start = time.perf_counter()
        gaps, _ = fig.diloco_study(runs, steps, warm, eval_every=steps, seed=seed,
                                   per_worker=args.per_worker or fig.PER_WORKER)
        gaps = gaps.assign(seed=seed, seconds=time.perf_counter() - start)
        sync = gaps.set_index("run").loc["sync DP", "eval_loss"]
        frames.append(gaps.assign(ratio_to_sync_dp=gaps["eval_loss"] / sync))
        frames[-1].to_csv(Path(args.out) / f"diloco_protocol_seed{seed}.csv", index=False)
        print(frames[-1][["seed", "run", "eval_loss", "ratio_to_sync_dp", "seconds"]]
              .to_string(index=False), flush=True)
    frame = pd.concat(frames)
    spread = frame.groupby("run", sort=False).agg(
        mean_eval=("eval_loss", "mean"), std_eval=("eval_loss", "std"),
        mean_ratio=("ratio_to_sync_dp", "mean"), std_ratio=("ratio_to_sync_dp", "std"))
    spread["std_over_mean"] = spread["std_eval"] / spread["mean_eval"]
    print("\nover seeds (std: sample standard deviation, n − 1)")
    print(spread.to_string())
    frame.to_csv(Path(args.out) / "diloco_protocol.csv", index=False)
    return 0


def noise_scales(fig, seeds: list[int], warm: int) -> int:
    """B_simple (parex.lowcomm.noise_scale) at each seed's warm start, in 64-token sequences."""
    from parex.config import TrainConfig
    from parex.layout import Layout
    from parex.lowcomm.noise_scale import model_noise_scale
    from parex.lowcomm.studies import warm_up

    model = fig.diloco_model()
    for seed in seeds:
        train = TrainConfig(global_batch=fig.WORKERS * fig.PER_WORKER, seq_len=fig.SEQ_LEN,
                            steps=fig.STEPS, seed=seed)
        start = warm_up(model, train, warm, layout=Layout(data=1))
        est = model_noise_scale(model, start["params"], seq_len=fig.SEQ_LEN)
        print(f"seed {seed}: |G|² {est.gradient_sq:.4g}, tr(Σ) {est.trace:.4g}, B_simple "
              f"{est.b_simple:.1f} sequences (B_small {est.small}, B_big {est.big})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
