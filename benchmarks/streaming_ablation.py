"""Benchmark: why Streaming DiLoCo ends ahead of sync DP in the DiLoCo figure, one change at a time.

    python benchmarks/streaming_ablation.py [--seeds 0,1,2] [--runs NAME,...] [--out DIR]

Every run resumes one seed's warm start of the `diloco` figure (parex.figures.lowcomm: its model,
warm-up, batch, schedule and held-out batches) for the figure's 100 steps, so each ratio to sync
DP is paired as the figure pairs its rows. The runs (`ablations`, LR_SCALES; `--runs` picks some):

    sync DP, DiLoCo H=10, streaming H=10 P=2     the figure's rows
    DiLoCo / streaming, averaging only           outer lr 1, momentum 0: θ_sync ← mean_r θ_r
    DiLoCo H=5                                   every fragment synced as often as streaming
                                                 syncs some fragment (H/P)
    sync DP lr x1.5, x0.67, x2                   the baseline's own inner learning rate

Prints, per seed, each run's eval loss every 25 steps (evaluated every 5: the CSV), its final
ratio to sync DP, that ratio averaged over the last 20 steps' evaluations, and over the last
40 steps split by the phase of the sync schedule (phase_ratios); writes
DIR/streaming_ablation_seed{N}.csv. Cost: about 80-120 s a run on the 2 shared cores.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

AVERAGING = dict(lr=1.0, momentum=0.0)  # the outer step reduces to the replicas' mean
EVAL_EVERY = 5  # every H/P steps: after each sync of either fragment, and halfway between
LR_SCALES = {"sync DP lr x1.5": 1.5, "sync DP lr x0.67": 2 / 3, "sync DP lr x2": 2.0}


def ablations(fig) -> dict:
    """name -> StudyRun of the figure's model and workers (sync DP's lr-scaled runs apart)."""
    from parex.config import OuterOptimizer
    from parex.lowcomm.studies import StudyRun

    sync, _, diloco, streaming, _ = fig.diloco_runs()
    plain = OuterOptimizer(**AVERAGING)
    runs = [sync, diloco, streaming,
            StudyRun("DiLoCo H=10 averaging", fig.diloco_layout().replace(outer=plain)),
            StudyRun("streaming H=10 P=2 averaging",
                     fig.diloco_layout(fragments=fig.FRAGMENTS).replace(outer=plain)),
            StudyRun("DiLoCo H=5", fig.diloco_layout(h=fig.DILOCO_H // fig.FRAGMENTS))]
    return {run.name: run for run in runs}


def one_seed(fig, seed: int, names: list[str]):
    """The seed's warm start once, then every named run from it: a frame of eval losses."""
    import pandas as pd

    from parex.config import TrainConfig
    from parex.layout import Layout
    from parex.lowcomm.studies import loss_study, warm_up

    model = fig.diloco_model()
    train = TrainConfig(global_batch=fig.WORKERS * fig.PER_WORKER, seq_len=fig.SEQ_LEN,
                        steps=fig.STEPS, seed=seed)
    start = warm_up(model, train, fig.WARM, layout=Layout(data=1))
    table, frames = ablations(fig), []
    plain = [table[n] for n in names if n in table]
    if plain:
        frames.append(loss_study(model, train, plain, eval_every=EVAL_EVERY,
                                 progress=False, start=start, offset=fig.WARM))
    for name in (n for n in names if n in LR_SCALES):  # sync DP down a scaled cosine
        scaled = train.replace(learning_rate=train.learning_rate * LR_SCALES[name])
        frame = loss_study(model, scaled, [table["sync DP"]], eval_every=EVAL_EVERY,
                           progress=False, start=start, offset=fig.WARM)
        frames.append(frame.assign(run=name))
    frame = pd.concat(frames)
    return frame[frame["eval_loss"].notna()].assign(seed=seed)


def last_steps_ratio(frame, span: int):
    """Per run, its eval loss over sync DP's averaged over the evaluations of the last `span`
    steps (2·H here: two points right after a sync and two halfway through a round, so the
    phase of the sync schedule at the last step drops out)."""
    curves = frame.pivot_table(index="step", columns="run", values="eval_loss")
    ratios = curves.div(curves["sync DP"], axis=0)
    return ratios[ratios.index > ratios.index.max() - span].mean()


def phase_ratios(frame, h: int, span: int) -> dict:
    """Per run, its ratio to sync DP averaged over the last `span` steps' evaluations at steps
    that are multiples of H (after DiLoCo's sync, after streaming fragment 1's) and halfway
    between (DiLoCo mid-round, after streaming fragment 0's sync)."""
    curves = frame.pivot_table(index="step", columns="run", values="eval_loss")
    ratios = curves.div(curves["sync DP"], axis=0)
    ratios = ratios[ratios.index > ratios.index.max() - span]
    at_h = ratios.index % h == 0
    return {"at multiples of H": ratios[at_h].mean(), "halfway": ratios[~at_h].mean()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--runs", default=None, help="comma-separated names; default: all")
    parser.add_argument("--out", default="artifacts", help="output folder (git-ignored)")
    args = parser.parse_args(argv)

    from parex.executor.mesh import emulate_devices  # before anything touches a JAX backend

    emulate_devices(8)
    import pandas as pd

    from parex.figures import lowcomm as fig

    known = [*ablations(fig), *LR_SCALES]
    names = args.runs.split(",") if args.runs else known
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown run(s) {unknown}: choose from {known}")
    if "sync DP" not in names:
        names = ["sync DP", *names]  # every ratio is to the same seed's sync DP
    Path(args.out).mkdir(parents=True, exist_ok=True)
    for seed in (int(s) for s in args.seeds.split(",")):
        began = time.perf_counter()
        frame = one_seed(fig, seed, names)
        frame.to_csv(Path(args.out) / f"streaming_ablation_seed{seed}.csv", index=False)
        curves = frame.pivot_table(index="run", columns="step", values="eval_loss", sort=False)
        curves = curves[[c for c in curves.columns if c % 25 == 0]]
        curves["/ sync DP"] = curves[fig.STEPS] / curves.loc["sync DP", fig.STEPS]
        curves["last 20 steps / sync DP"] = last_steps_ratio(frame, 20)
        phases = pd.DataFrame(phase_ratios(frame, fig.DILOCO_H, 40))
        print(f"seed {seed} ({time.perf_counter() - began:.0f} s)\n{curves.to_string()}\n"
              f"ratio to sync DP over the last 40 steps, by sync phase\n{phases.to_string()}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
