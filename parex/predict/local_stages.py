"""When a local-learning pipeline stops beating 1F1B: uneven stages and the cost of its heads.

    layer, head = unit_costs(model, train, layout, "a100-80gb")   # seconds per microbatch
    race(layer, head, partition=(4, 4, 3, 1), m=8)   # {"backprop": s, "local": s, "speed": x}
    losing_frame(model, train, layout, "a100-80gb")  # the sweep: partition × head cost

PPLL is 1.25x the speed of ordinary pipeline parallelism on a ViT and 0.85x on a ResNet (Guo et
al. 2024, arXiv 2411.12780, abstract). The mechanism: in a backprop pipeline only the last stage
carries the model's head, so a tuned pipeline gives that stage fewer layers and every stage
costs about the same, c = (L·t_layer + t_head) / p; a local pipeline gives *every* stage a head
of its own (ViT: a small linear classifier; ResNet: convolutional auxiliary nets on large
feature maps), so with the partition tuned for backprop its slowest stage costs about c + t_head.
Per step of m microbatches, with stage s holding n_s layers:

    backprop (1F1B) = makespan of the 1F1B table with stage s's F = n_s·t_F (+ t_head/3 on
                      the last stage) and B = n_s·t_B (+ 2·t_head/3): (m − 1)·max + the fill
    local           = m · max_s (n_s·(t_F + t_B) + t_head)        no fill after the first step

so local stops winning roughly where m·t_head > (p − 1)·c: heads costlier than the bubble they
remove. A ViT's head classifies one token per image (parex.model.vision), about a tenth of a
block's work, where a language model's projects every token onto the vocabulary (GPT-2 small:
about nine blocks' work); PPLL's local stages may read their output through an auxiliary net
before the classifier, `aux_blocks` blocks of the model's own shape (`auxiliary_race`). Both sides time compute only, from the predictor's per-layer and head costs for the
layout's mesh (parex.predict.time or .accelerator); the sends (forward only for local, both
ways for 1F1B) and the optimizer are left out of this comparison, as in the table above. Both
pipelines are run asynchronously, each stage as soon as its inputs are there, as PPLL's queues
and a 1F1B runtime on separate GPUs do; parex's emulated executor is tick-synchronous instead
(every stage's program has every tick), which this module does not model.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from ..layout import Layout, example_partition
from ..parallel.schedules import make_schedule
from ..setting import resolve
from .core import checked
from .flops import passes_per_layer
from .local import per_microbatch, stage_grid
from .shapes import Grid, model_sizes

HEAD_SCALES = (0.25, 0.5, 1.0, 2.0, 4.0)  # the head's cost as a multiple of the model's own


def unit_costs(model, train, layout: Layout, hardware, **settings) -> tuple[float, float, float]:
    """(one layer's forward, one layer's backward, the head's three passes), seconds per
    microbatch on one device of the layout's mesh, as predict() times them (`settings`:
    predict()'s dtype, recipe and convention)."""
    even = layout.replace(schedule="1f1b", local_loss="ce", queue=1, layers_per_stage=None)
    setting = checked(resolve(model, train, even, hardware, **settings))
    grid = stage_grid(setting, setting.layout)
    compute = per_microbatch(setting, model_sizes(setting.model), grid)
    head = float(np.ravel(compute["head_per_microbatch"])[0])
    layer = (float(np.ravel(compute["per_microbatch"])[0]) - head) / int(grid.stage_layers[0])
    forward = layer / float(np.ravel(passes_per_layer(grid, setting.train.remat))[0])
    return forward, layer - forward, head


def async_makespan(name: str, m: int, forward, backward) -> float:
    """Seconds of the schedule `name`'s table (one chunk per stage) with per-stage costs: each
    op starts when its stage is free and its input is there (the forward of the stage before,
    the backward of the stage after; the last stage's backward follows its own forward)."""
    forward, backward = np.asarray(forward, float), np.asarray(backward, float)
    p = len(forward)
    table, free, done = make_schedule(name, p, m), np.zeros(p), {}
    for op in table.ops:  # in tick order: an op's input ran on an earlier tick
        s, j = op.stage, op.microbatch
        if op.op == "F":
            ready, cost = done.get(("F", s - 1, j), 0.0), forward[s]
        else:
            ready, cost = done.get(("B", s + 1, j), done[("F", s, j)]), backward[s]
        done[(op.op, s, j)] = free[s] = max(free[s], ready) + cost
    return float(free.max())


def race(forward: float, backward: float, head: float, partition, m: int,
         local_head: float | None = None) -> dict:
    """Compute seconds per step of 1F1B and of the local pipeline for `partition` (layers per
    stage), and speed = 1F1B's / local's (module docstring). `local_head`: the readout of every
    local stage but the last (an auxiliary net), if it costs other than the model's head."""
    n = np.asarray(partition, float)
    last = np.arange(len(n)) == len(n) - 1
    backprop = async_makespan("1f1b", m, n * forward + last * head / 3,
                              n * backward + last * 2 * head / 3)
    heads = np.where(last, head, head if local_head is None else local_head)
    local = m * float(np.max(n * (forward + backward) + heads))
    return {"backprop": backprop, "local": local, "speed": backprop / local}


def auxiliary_race(model, train, layout: Layout, hardware, aux_blocks: int = 0,
                   **settings) -> dict:
    """race() with the layers split evenly and every local stage but the last reading its
    output through an auxiliary net of `aux_blocks` blocks shaped as the model's, then the
    classifier (the last stage: the model's head alone), as local-learning methods on vision
    models build them (InfoPro, Wang et al. 2021; AugLocal, Ma et al. 2024, arXiv:2402.17318)."""
    forward, backward, head = unit_costs(model, train, layout, hardware, **settings)
    aux = head + aux_blocks * (forward + backward)
    parts = example_partition(model.layers, layout.stage)
    return race(forward, backward, head, parts, layout.microbatches, aux) | {
        "partition": parts, "block_s": forward + backward,
        "head_over_layer": head / (forward + backward)}


def backprop_partition(forward: float, backward: float, head: float, layers: int, p: int,
                       m: int) -> tuple[int, ...]:
    """The partition a backprop pipeline would pick: the last stage gives up k layers to its
    head (the others split the rest evenly), k chosen for the shortest 1F1B step."""
    options = [example_partition(layers - k, p - 1) + (k,) for k in range(1, layers - p + 2)]
    return min(options, key=lambda parts: race(forward, backward, head, parts, m)["backprop"])


def losing_frame(model, train, layout: Layout, hardware, head_scales=HEAD_SCALES,
                 **settings) -> pd.DataFrame:
    """One row per (partition, head cost): layers split evenly, and split as a backprop pipeline
    would for that head; head_scale multiplies the head's cost (as a vocabulary that much
    larger would). Columns: partition, head_scale, head_over_stage (t_head / an even stage's
    layers), backprop_s, local_s, speed (> 1: local faster)."""
    forward, backward, head = unit_costs(model, train, layout, hardware, **settings)
    p, L = layout.stage, model.layers
    m = layout.microbatches
    stage = (forward + backward) * L / p
    rows = []
    for scale in head_scales:
        h = head * scale
        for kind, parts in (("even", example_partition(L, p)),
                            ("tuned for backprop", backprop_partition(forward, backward, h, L,
                                                                      p, m))):
            r = race(forward, backward, h, parts, m)
            rows.append({"partition": kind, "layers": ",".join(map(str, parts)),
                         "head_scale": scale, "head_over_stage": h / stage,
                         "backprop_s": r["backprop"], "local_s": r["local"],
                         "speed": r["speed"]})
    return pd.DataFrame(rows)


__all__ = ["HEAD_SCALES", "async_makespan", "auxiliary_race", "backprop_partition",
           "losing_frame", "race", "unit_costs"]
