"""Predicted cost of a local-learning pipeline (schedule=local, parex.parallel.local).

Per device (one stage, one data replica), with m microbatches of b sequences of T tokens, q the
queue depth, P_s the stage's parameters (its L/p layers, the read-in table every stage holds,
its readout: D·V + the final norm, and D² for `recon`'s decoder):

    step (steady state) = m · (t_F + t_B of L/p layers + the readout's 3 passes)   every tick busy
                          + m sends of b·T·D activations to the next stage           forward only
                          + the data-parallel all-reduce of P_s gradients             per stage
                          + the optimizer on P_s + the step's fixed cost
    fill (once per run) = (p − 1)·q · (one tick + one send)        reported apart, bubble = 0
    collective-permute  = m · b·T·D·bytes                          (1F1B: 2 per tick, both ways)
    memory              = P_s · the recipe's bytes of parameters, gradients, AdamW moments
                          + the queue (q·b·T·D) and ⌈q(p−1)/m⌉ steps of targets
                          + one microbatch's activations of L/p layers (activations)
                          + the gradients' sum over ticks (grads) and, beside it, the tick's
                            own gradient and the (b, T, V) logits (temp, as in core's schema:
                            total = argument + grads + activations + temp)

The per-microbatch compute comes from the same formulas as the backprop pipelines (time.py, on
the calibrated CPU or an accelerator) for the same mesh: every stage there already carries a
head, which is what a local stage runs. FLOPs are the 1F1B busiest stage's (its L/p layers and
one head), the count the compiled local step shows too.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..defaults import attention_of
from ..layout import Axis, Layout
from ..record import Prediction
from . import alpha_beta, memory, time
from .comm import Term
from .shapes import Grid, model_sizes


def stage_parameters(sizes, layout: Layout) -> int:
    """P_s: the parameters one stage holds (parallel.local's per-stage tree)."""
    recon = sizes.D * sizes.D if layout.local_loss == "recon" else 0
    return (sizes.layer_params * sizes.L // layout.stage + sum(sizes.embedding) + sum(sizes.head)
            + recon)


def local_terms(sizes, grid: Grid, layout: Layout, act_bytes: int) -> list[Term]:
    """The local step's collectives: m forward sends, one gradient all-reduce over data inside
    the stage, and the reported loss (one float, summed over stages)."""
    one = np.ones(len(grid))
    send = grid.b * grid.T * sizes.D * act_bytes
    grads = 4.0 * stage_parameters(sizes, layout) + 4  # the loss sum rides along (+ one float)
    return [Term("local-forward", "collective-permute", (Axis.STAGE,), grid.microbatches * one,
                 send * one),
            Term("grad-reduce", "all-reduce", (Axis.DATA,), (grid.data > 1) * one, grads * one),
            Term("local-loss", "all-reduce", (Axis.STAGE,), one, 4.0 * one)]


def per_microbatch(model, sizes, grid: Grid, train, chip, rec, elements=0) -> dict:
    """The predictor's compute terms of one stage for this grid: per microbatch (its layers and
    the head: "per_microbatch", "head_per_microbatch"), the optimizer on `elements` parameters,
    the step's fixed cost."""
    act = 2 if model.dtype == "bfloat16" else 4
    if chip.calibration is not None:
        return time.cpu_compute(model, sizes, grid, train.remat, chip.calibration,
                                chip.hbm_bandwidth, elements)
    return time.accelerator_compute(model, sizes, grid, train.remat, chip, model.dtype, act,
                                    elements, rec.activations == "korthikanti")


def _memory(sizes, grid: Grid, layout: Layout, train, act: int, m: int, rec) -> dict:
    P = stage_parameters(sizes, layout)  # the recipe's bytes per parameter, as core's
    params, grads = rec.param_bytes * P, rec.grad_bytes * P
    optimizer = rec.optimizer_bytes * P + rec.counters
    b, T = int(grid.b[0]), grid.T
    history = -(-layout.queue * (layout.stage - 1) // m)
    carried = layout.queue * b * T * sizes.D * act + history * m * b * T * 4 + 8
    batch = 2 * 4 * b * m * T
    layers = sizes.L // layout.stage
    acts = float(memory.layer_bytes(sizes, grid, train.remat, rec, act)[0]) * layers  # one mb
    logits = 3 * 4 * b * T * sizes.V  # the readout's logits, softmax and their gradient (f32)
    temp = logits + grads  # beyond the state, the saved activations and the gradients' sum:
    # the readout's buffers and the tick's own gradient before it is added (as core's schema)
    argument = params + optimizer + carried + batch
    return {"params": params, "grads": grads, "optimizer": optimizer, "activations": acts,
            "temp": temp, "argument": argument, "total": argument + grads + acts + temp}


def predict_local(model, train, layout: Layout, cluster, conv, rec, proxy: Prediction
                  ) -> Prediction:
    """The Prediction of a schedule=local layout; `proxy` is the same mesh's 1F1B prediction
    (its FLOPs and assumptions), the other arguments as predict.core.checked returns them."""
    sizes, chip = model_sizes(model), cluster.chip
    act = 2 if model.dtype == "bfloat16" else 4
    grid = Grid.from_layouts([layout.replace(schedule="1f1b", local_loss="ce", queue=1)],
                             train, model)
    grid = dataclasses.replace(grid, executor=conv.name == "xla-cpu", flash=attention_of(
        train, chip.calibration is not None) == "flash")  # as predict.core.columns
    m = int(grid.microbatches[0])
    compute = per_microbatch(model, sizes, grid, train, chip, rec,
                             stage_parameters(sizes, layout))
    tick = float(compute["per_microbatch"][0])
    if layout.local_loss == "recon":  # the decoder's (b·T, D) @ (D, D), as the head's D·V
        tick += float(np.asarray(compute.get("head_per_microbatch", 0.0)).ravel()[0]) \
            * sizes.D / sizes.V
    terms = local_terms(sizes, grid, layout, act)
    seconds = {t.name: float(alpha_beta.term_seconds(t, grid, chip)[0]) for t in terms}
    sends = seconds["local-forward"]
    exposed = sum(seconds.values())  # nothing overlaps in the local step's program order
    work = m * tick + float(np.asarray(compute["optimizer"]).ravel()[0]) + compute["overhead"]
    fill = (layout.stage - 1) * layout.queue * (tick + sends / m)
    mem = _memory(sizes, grid, layout, train, act, m, rec)
    comm_bytes = {kind: 0.0 for kind in proxy.comm_bytes_per_device}
    for t in terms:
        comm_bytes[t.kind] += float(t.bytes[0])
    collectives = [{"name": t.name, "kind": t.kind, "axes": [a.value for a in t.axes],
                    "count": float(t.count[0]), "bytes": float(t.bytes[0]),
                    "bytes_per_op": float(t.bytes_per_op[0]), "seconds": seconds[t.name]}
                   for t in terms if t.count[0]]
    total = work + exposed
    return dataclasses.replace(
        proxy, layout=str(layout),
        step_time_s={"total": total, "compute": work, "exposed_comm": exposed, "bubble": 0.0,
                     "fill": fill},
        memory_bytes_per_device=mem, comm_bytes_per_device=comm_bytes, collectives=collectives,
        mfu=proxy.mfu * proxy.step_time_s["total"] / total,
        hfu=proxy.hfu * proxy.step_time_s["total"] / total,
        fits=mem["total"] <= chip.hbm_bytes,
        over_capacity_bytes=max(mem["total"] - chip.hbm_bytes, 0.0),
        assumptions=(proxy.assumptions or {}) | {"schedule": "local"})


__all__ = ["local_terms", "per_microbatch", "predict_local", "stage_parameters"]
