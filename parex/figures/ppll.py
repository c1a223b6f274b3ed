"""PPLL: a local-learning pipeline against 1F1B at p = 4 (step time, memory, loss).

    parex figure ppll --json

Guo et al. 2024 (arXiv:2411.12780) run local learning as a pipeline on 4 GPUs: 1.25x the speed
of ordinary pipeline parallelism on a ViT, 0.85x on a ResNet, "without sacrificing model
performance" (data/reference/ppll.csv). parex's rows (schedule=local against schedule=1f1b):

- speed, predicted, on the paper's own model: a 12-block ViT on CIFAR-10 (32×32 images, 4×4
  patches, 10 classes: parex.config.ppll_vit), p = 4 stages of 3 blocks, m = 8 microbatches of
  16 images, on A100s; compute per step from the predictor's per-block and head costs
  (parex.predict.local_stages.auxiliary_race). The paper's body (widths, its local heads'
  auxiliary nets, batch, microbatches, GPUs) was not in reach of this reproduction, so the row
  is a bracket over what it leaves open here: DeiT's widths Ti, S, B (192, 384, 768) and a
  local head that is the classifier alone or one block of the model's shape before it (the
  auxiliary nets of InfoPro and AugLocal); and the whole predicted step (predict(): sends,
  optimizer) of ViT-S over the same two heads.
- ResNet (0.85x): out of scope. parex models transformers; a ResNet's convolutional stages and
  its auxiliary nets on large feature maps are not in its model.
- speed, measured: the compiled steps of tiny-vit (VIT_IMAGES synthetic images per step) and of
  the GPT `tiny`, at data=2,stage=4,m=8 on the emulated mesh, timed in alternation.
- memory: the busiest stage's activations (predicted, ViT-S) and the compiled step's
  temporaries (measured, tiny) against 1/p, what PPLL's design implies: the paper gives no
  number, so these rows are wiring checks of parex's own derivation, not reproductions.
- loss: the model's loss on held-out batches after STEPS steps of tiny on the corpus, local
  (each objective) over 1F1B at equal tokens (the run of benchmarks/local_learning_gap.py, short).

Tolerances state a direction and a band. Speed where local wins: 1 < speed ≤ (m + p − 1)/m =
1.375 at m = 8, the most a pipeline without a flush can gain over one with a bubble of
(p−1)/(m+p−1): parex/paper in [0.8, 1.1]; a bracket hits when it contains 1.25. Memory: within
a factor 1.5 of 1/p (the heads' logits and the queue move it). Loss: "comparable", within 10 %.
"""

from __future__ import annotations

import math
import os
import time

from ..config import PPLL_VIT_WIDTHS, TrainConfig, model_preset, ppll_vit
from ..layout import Layout
from ..predict.local_stages import auxiliary_race, losing_frame
from ..predict.references import read_reference
from ..setting import resolve_run
from .core import Figure, Row, Tolerance, figure
from .tables import evaluate_formula

P, M = 4, 8
HARDWARE, PREDICTED_BATCH = "a100-80gb", 128  # images per step: 8 microbatches of 16
AUX_BLOCKS = (0, 1)  # a local head: the classifier alone, or one block before it
MEASURED = "data=2,stage=4,microbatches=8"  # tiny and tiny-vit on the 8 emulated devices
STEPS, EVAL_EVERY, EVAL_BATCHES = 100, 50, 8
VIT_STEPS, VIT_IMAGES = 20, 128  # tiny-vit's runs: 8 microbatches of 16 images, as predicted
WINS = Tolerance(0.8, 1.1, "local faster (speed > 1) and at most the flush-free bound "
                           "(m+p−1)/m = 1.375 at p = 4, m = 8")
MEMORY = Tolerance(1 / 1.5, 1.5, "within a factor 1.5 of 1/p (heads' logits, the queue)")
LOSS = Tolerance(0.9, 1.1, "'without sacrificing model performance': within 10 %")
SHARED_CORES = ("the emulated mesh runs 8 devices on {cores} shared cores: a stage idle in "
                "1F1B's bubble lends its core to a busy one (cpu-local predicts 1F1B's bubble "
                "at {bubble_ms:.0f} ms here), so the bubble local removes costs little there")
OWN_DERIVATION = "wiring"  # 1/p: parex's reading of PPLL's design, not a number of the paper
RESNET = ("parex models transformers: a ResNet's convolutional stages and its auxiliary nets on "
          "large feature maps are not in its model")


def paper(quantity: str) -> float:
    table = read_reference("ppll").set_index("quantity")
    return evaluate_formula(str(table.loc[quantity, "value"]), p=P)


def source(quantity: str) -> str:
    return read_reference("ppll").set_index("quantity").loc[quantity, "source"]


# --- predicted ------------------------------------------------------------------------------------

def predicted_rows() -> list[Row]:
    """The rows from the predictor alone (fast): the ViT's speed (compute, then the whole step),
    its activation memory, and the ResNet's row, out of scope."""
    from ..predict import predict

    train = TrainConfig(global_batch=PREDICTED_BATCH)
    layout = Layout(stage=P, microbatches=M, schedule="local")
    races = {(w, a): auxiliary_race(ppll_vit(w), train, layout, HARDWARE, a)
             for w in PPLL_VIT_WIDTHS for a in AUX_BLOCKS}
    vit = ppll_vit()
    parts = ",".join(map(str, races["s", 0]["partition"]))
    where = (f"ViT, 12 blocks as {parts}, CIFAR-10 (T = {vit.seq_len}), p={P}, m={M}, "
             f"{PREDICTED_BATCH} images, {HARDWARE}")
    ends = ", ".join(f"{w.upper()}/{a} block{'s' * (a != 1)}: {r['speed']:.3f}"
                     for (w, a), r in races.items())
    rows = [Row.bracket("speed 1F1B/local · ViT Ti–B, local heads classifier to block + "
                        "classifier · compute", paper("speed_vit"),
                        [r["speed"] for r in races.values()],
                        note=f"{where}; {ends}; the classifier is "
                             f"{races['s', 0]['head_over_layer']:.2f} block's work; "
                             f"{source('speed_vit')}")]
    runs = {s: predict(vit, train, layout.replace(schedule=s), HARDWARE)
            for s in ("local", "1f1b")}
    backprop, local = runs["1f1b"].step_time_s["total"], runs["local"].step_time_s["total"]
    # a block before each local classifier adds one block's work per tick to the busiest stage
    whole = [backprop / (local + M * a * races["s", 0]["block_s"]) for a in AUX_BLOCKS]
    rows.append(Row.bracket("speed 1F1B/local · ViT-S, local heads classifier to block + "
                            "classifier · whole step", paper("speed_vit"), whole,
                            note=f"{where}: parex predict, sends and optimizer included; "
                                 f"{whole[0]:.3f} (classifier) to {whole[1]:.3f} (a block "
                                 f"before it); local's one-time fill "
                                 f"{runs['local'].step_time_s['fill'] * 1e3:.2f} ms left out"))
    acts = {s: r.memory_bytes_per_device["activations"] for s, r in runs.items()}
    rows.append(Row("activations local/1F1B · busiest stage", paper("activations"),
                    acts["local"] / acts["1f1b"], "predicted", MEMORY,
                    note=f"ViT-S; {where}; {source('activations')}", evidence=OWN_DERIVATION))
    rows.append(Row("speed 1F1B/local · ResNet", paper("speed_resnet"), math.nan, scope="resnet",
                    note=source("speed_resnet")))
    return rows


# --- measured -------------------------------------------------------------------------------------

def loss_run(model, train, layout: Layout, every: int, evals) -> dict:
    """Train `layout` for train.steps steps on the corpus; every `every` steps the model's loss
    (parex.model.transformer.loss_fn of the assembled parameters: for local, stage 0's read-in, every
    stage's layers, the last stage's head) on `evals`. {"eval": {step: loss}, "step_s":
    median step seconds, "stats": the compiled step's statistics, "timer": a function of n
    that times n more steps (seconds each), to time layouts in alternation}."""
    import jax
    import numpy as np

    from ..model import transformer as gpt
    from ..executor.data import batches_for
    from ..measure.compiled import compile_layout, compiled_stats
    from ..parallel.local import model_params

    step, compiled, _ = compile_layout(model, train, layout)
    data = batches_for(model, "corpus", train.global_batch, step.seq_len, train.seed)
    loss_fn = jax.jit(lambda p, b: gpt.loss_fn(p, b, model))
    state, times, curve = step.init_state(), [], {}
    for i in range(train.steps):
        start = time.perf_counter()
        state, loss = compiled(state, data.on_mesh(i, step.batch_sharding))
        jax.block_until_ready(loss)
        times.append(time.perf_counter() - start)
        if (i + 1) % every == 0:
            params = model_params(state) if step.local else step.natural_params(state["params"])
            params = jax.device_get(params)
            curve[i + 1] = float(np.mean([loss_fn(params, b) for b in evals]))
    def timer(n: int) -> list[float]:
        nonlocal state
        out = []
        for i in range(n):
            batch = data.on_mesh(train.steps + i, step.batch_sharding)
            start = time.perf_counter()
            state, loss = compiled(state, batch)
            jax.block_until_ready(loss)
            out.append(time.perf_counter() - start)
        return out

    return {"eval": curve, "step_s": float(np.median(times[1:])),
            "stats": compiled_stats(compiled, step), "timer": timer}


def eval_batches(model, train, n: int = EVAL_BATCHES) -> list:
    """n fixed batches of the model's data (the corpus, a ViT's images) drawn with another seed
    than training's."""
    from ..executor.data import batches_for

    seq = train.seq_len or model.seq_len
    return [batches_for(model, "corpus", train.global_batch, seq, seed=12345)[i]
            for i in range(n)]


def alternate(runs: dict, rounds: int = 5, steps: int = 2) -> None:
    """Each run's "step_s" as the median of `rounds` rounds of `steps` steps per run, the runs
    taking turns: a change in the machine's load falls on all of them alike."""
    import numpy as np

    times = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            times[name] += run["timer"](steps)
    for name, run in runs.items():
        run["step_s"] = float(np.median(times[name]))


def local_vs_1f1b(model, train, layout: str = MEASURED, objectives=("ce", "recon"),
                  every: int = EVAL_EVERY, rounds: int = 5):
    """1F1B and the local pipeline with each objective, trained on the same tokens from the
    same initial parameters: (curves, summary, runs). curves: one row per (run, step), the
    model's eval loss; summary: one row per run, its median step time (timed in alternation),
    speed over 1F1B's, collective-permute and temp bytes per device of the compiled step, the
    last eval loss and its gap to 1F1B's; runs: loss_run's results by name."""
    import pandas as pd

    from ..record import bytes_by_kind

    base = Layout.parse(layout)
    train = resolve_run(model, train, base, "cpu").train  # the batch it leaves unnamed, resolved
    evals = eval_batches(model, train)
    specs = [("1f1b", "1f1b", "ce")] + [(f"local {o}", "local", o) for o in objectives]
    runs = {name: loss_run(model, train, base.replace(schedule=s, local_loss=o), every, evals)
            for name, s, o in specs}
    alternate(runs, rounds)
    curves = pd.DataFrame([{"run": name, "step": k, "eval_loss": v}
                           for name, r in runs.items() for k, v in r["eval"].items()])
    last, ref = max(runs["1f1b"]["eval"]), runs["1f1b"]
    summary = pd.DataFrame([{
        "run": name, "step_s": r["step_s"], "speed_vs_1f1b": ref["step_s"] / r["step_s"],
        "permute_bytes": bytes_by_kind(r["stats"]["collectives"]).get("collective-permute", 0),
        "temp_bytes": r["stats"]["memory_bytes_per_device"]["temp"],
        "eval_loss": r["eval"][last], "gap_vs_1f1b": r["eval"][last] - ref["eval"][last]}
        for name, r in runs.items()])
    return curves, summary, runs


def measured_rows(runs: dict) -> list[Row]:
    """Rows from loss_run results {"1f1b", "local ce", "local recon"}."""
    ref, local = runs["1f1b"], runs["local ce"]
    temp = {k: runs[k]["stats"]["memory_bytes_per_device"]["temp"] for k in ("1f1b", "local ce")}
    rows = [Row("speed 1F1B/local · emulated mesh, tiny", paper("speed_vit"),
                ref["step_s"] / local["step_s"], "measured", WINS,
                note=f"median step {ref['step_s'] * 1e3:.0f} ms (1F1B), "
                     f"{local['step_s'] * 1e3:.0f} ms (local)"),
            Row("temporaries local/1F1B · compiled step, tiny", paper("activations"),
                temp["local ce"] / temp["1f1b"], "measured", MEMORY, evidence=OWN_DERIVATION)]
    last = max(ref["eval"])
    for name in ("local ce", "local recon"):
        rows.append(Row(f"loss {name}/1F1B · step {last}, equal tokens", paper("loss"),
                        runs[name]["eval"][last] / ref["eval"][last], "measured", LOSS,
                        note=f"eval loss {runs[name]['eval'][last]:.3f} against "
                             f"{ref['eval'][last]:.3f}; {source('loss')}"))
    return rows


def vit_speed_row(runs: dict, images: int) -> Row:
    """The measured speed row of tiny-vit, from local_vs_1f1b's runs {"1f1b", "local ce"}."""
    ref, local = runs["1f1b"], runs["local ce"]
    last = max(ref["eval"])
    return Row("speed 1F1B/local · emulated mesh, tiny-vit", paper("speed_vit"),
               ref["step_s"] / local["step_s"], "measured", WINS,
               note=f"{MEASURED}, {images} synthetic images per step; median step "
                    f"{ref['step_s'] * 1e3:.0f} ms (1F1B), {local['step_s'] * 1e3:.0f} ms "
                    f"(local), timed in alternation; held-out loss after {last} steps "
                    f"{ref['eval'][last]:.3f} (1F1B), {local['eval'][last]:.3f} (local)")


@figure("ppll", title="PPLL: a local-learning pipeline against 1F1B (p = 4)",
        source="Guo et al. 2024, PPLL (arXiv:2411.12780), abstract",
        tolerance=WINS, evidence="measurement", slow=True, devices=8,
        scopes={"resnet": RESNET})
def ppll() -> Figure:
    from ..calibrate.local import ready
    from ..predict import predict
    from ..setting import resolve

    ready("cpu-local", progress=False)  # the shared cores' note reads this machine's profile
    base = Layout.parse(MEASURED)
    model = model_preset("tiny")
    train = resolve(model, TrainConfig(steps=STEPS), base, "cpu-local").train  # its batch
    _, _, runs = local_vs_1f1b(model, train)
    vit = model_preset("tiny-vit")
    _, _, vit_runs = local_vs_1f1b(vit, TrainConfig(steps=VIT_STEPS, global_batch=VIT_IMAGES),
                                   objectives=("ce",), every=VIT_STEPS)
    bubble = predict(model, train, base.replace(schedule="1f1b"), "cpu-local").step_time_s
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    measured = (f"measured: tiny, {MEASURED}, {STEPS} steps × {train.global_batch} × "
                f"{model.seq_len} tokens of the corpus, eval on {EVAL_BATCHES} held-out "
                f"batches, step times alternated; load average {load:.1f} on {os.cpu_count()} "
                "cores; the longer study is docs/results/2026-12-local-learning.md; tiny-vit: "
                f"{VIT_STEPS} steps × {VIT_IMAGES} synthetic images each way, then alternated")
    predicted = ("predicted speeds time compute (parex.predict.local_stages) or the whole "
                 "step (parex predict), both pipelines asynchronous as on separate GPUs, on "
                 "the paper's model: a ViT (parex.config.ppll_vit); ResNet out of scope: "
                 + RESNET)
    cores = SHARED_CORES.format(cores=os.cpu_count() or 0, bubble_ms=bubble["bubble"] * 1e3)
    rows = predicted_rows() + [vit_speed_row(vit_runs, VIT_IMAGES)] + measured_rows(runs)
    return Figure(rows, None, [measured, predicted, cores])


__all__ = ["alternate", "eval_batches", "local_vs_1f1b", "losing_frame", "loss_run",
           "measured_rows", "paper", "predicted_rows", "vit_speed_row"]
