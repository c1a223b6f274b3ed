"""Benchmark: the loss a local-learning pipeline (schedule=local) reaches against 1F1B.

    PYTHONPATH=. python benchmarks/local_learning_gap.py [--model tiny] [--steps 400]
                                                         [--layout TEXT] [--every 50]

Same model, tokens (the shipped corpus, TrainConfig's seed), optimizer and initial parameters;
`--layout` is the pipeline without its schedule (default data=2,stage=4,microbatches=8). Every
`--every` steps it evaluates the *model's* loss (parex.model.transformer.loss_fn of the assembled parameters:
for local, stage 0's read-in, every stage's layers and the last stage's head) on 8 fixed batches
drawn with another seed (parex.figures.ppll.loss_run), so that local's reported training loss,
whose first p − 1 microbatches per step the earlier stages already trained on, is not what is
compared. Step times are timed after training with the runs taking turns (parex.figures.ppll.
alternate: 10 rounds of 3 steps each), so that a change in the machine's load falls on all
alike. Prints, per objective, the eval loss at each checkpoint, its gap to 1F1B at equal tokens,
the median step time and its ratio to 1F1B's, and the gap at equal wall time: both losses after
the shorter of the two runs' time (each curve interpolated between its checkpoints at the step
it reaches by then).

The corpus is 300 kB: a few hundred steps of 16 × 128 tokens see it several times, so the eval
windows overlap what was trained on. The numbers compare optimisers on this data, not
generalisation.
"""

from __future__ import annotations

import argparse

import jax

jax.config.update("jax_num_cpu_devices", 8)

import numpy as np

from parex.config import TrainConfig, model_preset
from parex.figures.ppll import alternate, eval_batches, loss_run
from parex.layout import Layout

RUNS = (("1f1b", "1f1b", "ce"), ("local ce", "local", "ce"), ("local recon", "local", "recon"))


def loss_at(run: dict, step: float) -> float:
    """The run's eval loss at `step`, interpolated between its checkpoints."""
    points = np.array(sorted(run["eval"]))
    return float(np.interp(step, points, [run["eval"][k] for k in points]))


def at_equal_time(run: dict, ref: dict, steps: int) -> tuple[float, float, float]:
    """(seconds, run's eval loss then, ref's then) at equal wall time: the shorter of the two
    runs' time, steps · the faster step, so that both stay inside their runs."""
    seconds = steps * min(run["step_s"], ref["step_s"])
    return (seconds, loss_at(run, seconds / run["step_s"]),
            loss_at(ref, seconds / ref["step_s"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--layout", default="data=2,stage=4,microbatches=8")
    args = ap.parse_args()
    model, train = model_preset(args.model), TrainConfig(steps=args.steps)
    evals, base = eval_batches(model, train), Layout.parse(args.layout)
    runs = {name: loss_run(model, train, base.replace(schedule=s, local_loss=loss), args.every,
                           evals) for name, s, loss in RUNS}
    alternate(runs, rounds=10, steps=3)
    ref = runs["1f1b"]
    print(f"{args.model}, {args.layout}, {args.steps} steps × {train.global_batch} sequences; "
          f"eval loss of the model on {len(evals)} held-out batches")
    for name, r in runs.items():
        curve = " ".join(f"{k}:{v:.3f}" for k, v in r["eval"].items())
        gaps = " ".join(f"{k}:{r['eval'][k] - ref['eval'][k]:+.3f}" for k in r["eval"])
        seconds, mine, theirs = at_equal_time(r, ref, args.steps)
        print(f"{name:12s} step {r['step_s'] * 1e3:.0f} ms ({ref['step_s'] / r['step_s']:.2f}x "
              f"1F1B's speed)\n  eval {curve}\n  gap at equal tokens {gaps}\n  at equal time "
              f"({seconds:.0f} s: step {seconds / r['step_s']:.0f} against 1F1B's "
              f"{seconds / ref['step_s']:.0f}): loss {mine:.3f} against {theirs:.3f}, gap "
              f"{mine - theirs:+.3f}")


if __name__ == "__main__":
    main()
