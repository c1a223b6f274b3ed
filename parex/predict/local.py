"""Predicted cost of a local-learning pipeline (schedule=local, parex.parallel.local).

Per device (one stage, one data replica), with m microbatches of b sequences of T tokens, q the
queue depth, P_s the stage's parameters (its L/p layers, the read-in table every stage holds,
its readout: D·V + the final norm, and D² for `recon`'s decoder), split over tensor (the leaves
with a heads, mlp or vocab dim) and, at rest, over fsdp (those with an embed dim):

    step (steady state) = m · (t_F + t_B of L/p layers + the readout's 3 passes)   every tick busy
                          + m sends of b·T·D activations to the next stage           forward only
                          + m · (4·L/p + 2) tensor all-reduces of b·T·D            inside the stage
                          + fsdp: one gather of P_s, one reduce-scatter of its gradients
                          + the data-parallel all-reduce of P_s gradients (shards)   per stage
                          + the optimizer on P_s + the step's fixed cost
    fill (once per run) = (p − 1)·q · (one tick + one send)        reported apart, bubble = 0
    collective-permute  = m · b·T·D·bytes                          (1F1B: 2 per tick, both ways)
    (every collective, term by term: local_terms)
    memory              = P_s · the recipe's bytes of parameters (/t, /f), AdamW moments (ZeRO-1:
                          /d too) and gradients (summed whole over fsdp: /t only)
                          + the queue (q·b·T·D) and ⌈q(p−1)/m⌉ steps of targets
                          + one microbatch's activations of L/p layers (activations)
                          + the gradients' sum over ticks (grads) and, beside it, the tick's
                            own gradient, the (b, T, V/t) logits and fsdp's gathered weights
                            (temp, as in core's schema: total = argument + grads + activations
                            + temp)

The per-microbatch compute comes from the same formulas as the backprop pipelines (time.py, on
the calibrated CPU or an accelerator) for the same mesh: every stage there already carries a
head, which is what a local stage runs. FLOPs are the 1F1B busiest stage's (its L/p layers and
one head), the count the compiled local step shows too.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np

from ..model import transformer as gpt
from ..layout import Axis, Layout, state_dim
from ..record import Prediction
from . import alpha_beta, memory, time
from .comm import Term
from .shapes import TENSOR_DIMS, Grid, model_sizes


def stage_parameters(sizes, layout: Layout) -> int:
    """P_s: the parameters one stage holds (parallel.local's per-stage tree)."""
    recon = sizes.D * sizes.D if layout.local_loss == "recon" else 0
    return (sizes.layer_params * sizes.L // layout.stage + sum(sizes.embedding) + sum(sizes.head)
            + recon)


def stage_leaves(model, layout: Layout) -> list[tuple[int, bool, bool]]:
    """(elements, split by the state axes (layout.state_dim: an embed dim, or a norm's or
    D-sized bias's D), has a tensor-split dim) of each leaf of one stage's tree (parallel.local:
    its L/p layers, the read-in, the readout, recon's D × D decoder)."""
    table = gpt.param_table(model)
    entries = [(shape[0] // layout.stage * math.prod(shape[1:]), dims)
               for shape, dims in jax.tree.leaves(table["blocks"], is_leaf=_is_entry)]
    entries += [(math.prod(shape), dims) for k, v in table.items() if k != "blocks"
                for shape, dims in jax.tree.leaves(v, is_leaf=_is_entry)]
    if layout.local_loss == "recon":
        entries.append((model.hidden * model.hidden, ("embed", "hidden")))
    return [(n, state_dim(dims) is not None, any(d in TENSOR_DIMS for d in dims))
            for n, dims in entries]


def _is_entry(x) -> bool:
    return isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], tuple)


def local_terms(sizes, grid: Grid, layout: Layout, act_bytes: int, model) -> list[Term]:
    """The local step's collectives (float32 master weights and gradients, 4 bytes):

        local-forward   m sends of b·T·D to the next stage                      permute, stage
        tensor          m · (4·L/p + 2) all-reduces of b·T·D: per layer after W_o and W_out
                        (forward) and before W_qkv and W_in (backward); the vocab-split
                        embedding's lookup; the readout's input gradient        tensor
        cross-entropy   m · 3 of b·T floats: the vocab-split logits' max, sum, target
        fsdp-gather     the stage's leaves fsdp splits, whole, once per step   all-gather, fsdp
        grad-reduce     their gradients reduce-scattered once (fsdp); the other leaves all-
                        reduced over fsdp; every shard all-reduced over data
        zero-gather     ZeRO-1: the updated parameters gathered from the data shards
        clip-norm       one float per leaf split over fsdp, and per leaf split over tensor
                        (each stage's gradient norm, read outside the shard_map)
        local-loss      one float over data × fsdp, and the last stage's over stage
    """
    one, t, f = np.ones(len(grid)), layout.tensor, layout.fsdp
    send = grid.b * grid.T * sizes.D * act_bytes
    leaves = stage_leaves(model, layout)

    def total(embed=None):  # bytes per device of the leaves (with / without an embed dim)
        return 4.0 * sum(n / (t if split else 1) for n, e, split in leaves
                         if embed is None or e == embed)

    shard = total(True) / f + total(False)  # what the data all-reduce carries per device
    rows = grid.b * grid.T
    layers = sizes.L // layout.stage
    replicas = layout.data * f
    return [Term("local-forward", "collective-permute", (Axis.STAGE,), grid.microbatches * one,
                 send * one),
            Term("tensor", "all-reduce", (Axis.TENSOR,),
                 grid.microbatches * (4 * layers + 2) * (t > 1) * one, send * one),
            Term("cross-entropy", "all-reduce", (Axis.TENSOR,),
                 grid.microbatches * 3 * (t > 1) * one, 4.0 * rows * one),
            Term("fsdp-gather", "all-gather", (Axis.FSDP,), (f > 1) * one, total(True) * one),
            Term("grad-reduce", "reduce-scatter", (Axis.FSDP,), (f > 1) * one,
                 total(True) * one),
            Term("grad-reduce", "all-reduce", (Axis.FSDP,), (f > 1) * one, total(False) * one),
            Term("grad-reduce", "all-reduce", (Axis.DATA,), (layout.data > 1) * one,
                 shard * one),
            Term("zero-gather", "all-gather", (Axis.DATA,), (layout.zero >= 1) * one,
                 total(True) / f * one),
            Term("clip-norm", "all-reduce", (Axis.FSDP,), (f > 1) * one,
                 4.0 * sum(e for _, e, _ in leaves) * one),
            Term("clip-norm", "all-reduce", (Axis.TENSOR,), (t > 1) * one,
                 4.0 * sum(split for _, _, split in leaves) * one),
            Term("local-loss", "all-reduce", (Axis.DATA, Axis.FSDP), (replicas > 1) * one,
                 4.0 * one),
            Term("local-loss", "all-reduce", (Axis.STAGE,), one, 4.0 * one)]


def stage_grid(setting, layout: Layout) -> Grid:
    """The one-layout grid of `layout` (a local layout's 1F1B stand-in) under the setting's
    program and kernel, as predict.core.columns builds its grids."""
    grid = Grid.from_layouts([layout], setting.train, setting.model)
    return dataclasses.replace(grid, executor=setting.convention == "xla-cpu",
                               flash=setting.flash)


def tick_activation_bytes(sizes, grid: Grid, remat: str, rec, act_bytes: int) -> np.ndarray:
    """What a tick holds from its forward to its backward: one microbatch's saved activations
    of the stage's layers."""
    return memory.layer_bytes(sizes, grid, remat, rec, act_bytes) * grid.stage_layers


def per_microbatch(setting, sizes, grid: Grid, elements=0, temp_bytes=0.0) -> dict:
    """The predictor's compute terms of one stage for this grid: per microbatch (its layers and
    the head: "per_microbatch", "head_per_microbatch"), the optimizer on `elements` parameters,
    the step's fixed cost (and on the emulated mesh its page faults, of the tick's activations
    and `temp_bytes` more). A tick holds one microbatch's activations of its stage's layers."""
    model, chip, remat = setting.model, setting.cluster.chip, setting.train.remat
    if setting.emulated:
        held = tick_activation_bytes(sizes, grid, remat, memory.recipe(setting.recipe),
                                     setting.act_bytes)
        return time.cpu_compute(model, sizes, grid, remat, chip.calibration,
                                chip.hbm_bandwidth, elements,
                                {"activations": held, "temp": temp_bytes})
    korthikanti = memory.recipe(setting.recipe).activations == "korthikanti"
    return time.accelerator_compute(model, sizes, grid, remat, chip, model.dtype,
                                    setting.act_bytes, elements, korthikanti)


def stage_counts(model, layout: Layout) -> dict:
    """Parameters per device of one stage's tree: "stored" (split over tensor, and over fsdp
    along their state dim, layout.state_dim), "held" during the step (fsdp's gathered whole: the
    weights and the gradients' sum), "opt" (ZeRO-1: those leaves' AdamW moments split over data
    too)."""
    t, f, d = layout.tensor, layout.fsdp, layout.data if layout.zero >= 1 else 1
    leaves = [(n / (t if split else 1), e) for n, e, split in stage_leaves(model, layout)]
    return {"stored": sum(n / (f if e else 1) for n, e in leaves),
            "held": sum(n for n, _ in leaves),
            "opt": sum(n / (f * d if e else 1) for n, e in leaves)}


def _memory(model, sizes, grid: Grid, layout: Layout, train, act: int, m: int, rec) -> dict:
    P = stage_counts(model, layout)  # the recipe's bytes per parameter, as core's
    params, grads = rec.param_bytes * P["stored"], rec.grad_bytes * P["held"]
    optimizer = rec.optimizer_bytes * P["opt"] + rec.counters
    b, T = int(grid.b[0]), grid.T
    history = -(-layout.queue * (layout.stage - 1) // m)
    carried = layout.queue * b * T * sizes.D * act + history * m * b * T * 4 + 8
    batch = 2 * 4 * b * m * T
    acts = float(tick_activation_bytes(sizes, grid, train.remat, rec, act)[0])
    rows = sizes.readout_rows or T  # a ViT reads its class token out, a language model every token
    logits = 3 * 4 * b * rows * sizes.V / layout.tensor  # the readout's logits, softmax and
    # their gradient (f32, vocab split over tensor)
    gathered = rec.gathered_bytes(act) * P["held"] if layout.fsdp > 1 else 0.0  # W whole
    temp = logits + grads + gathered  # beyond the state, the saved activations and the
    # gradients' sum: the readout's buffers and the tick's own gradient before it is added (as
    # core's schema), and under fsdp the stage's gathered weights
    argument = params + optimizer + carried + batch
    return {"params": params, "grads": grads, "optimizer": optimizer, "activations": acts,
            "temp": temp, "argument": argument, "total": argument + grads + acts + temp}


def predict_local(setting, proxy: Prediction) -> Prediction:
    """The Prediction of the setting's schedule=local layout; `proxy` is the same mesh's 1F1B
    prediction (its FLOPs and assumptions)."""
    model, train, layout = setting.model, setting.train, setting.layout
    sizes, chip, act = model_sizes(model), setting.cluster.chip, setting.act_bytes
    rec = memory.recipe(setting.recipe)
    grid = stage_grid(setting, layout.replace(schedule="1f1b", local_loss="ce", queue=1))
    m = int(grid.microbatches[0])
    mem = _memory(model, sizes, grid, layout, train, act, m, rec)
    compute = per_microbatch(setting, sizes, grid, stage_counts(model, layout)["opt"],
                             mem["temp"])
    tick = float(compute["per_microbatch"][0])
    if layout.local_loss == "recon":  # the decoder's (b·T, D) @ (D, D), as the head's D·V
        tick += float(np.asarray(compute.get("head_per_microbatch", 0.0)).ravel()[0]) \
            * sizes.D / sizes.V
    terms = local_terms(sizes, grid, layout, act, model)
    seconds = {t.name: float(alpha_beta.term_seconds(t, grid, chip)[0]) for t in terms}
    sends = seconds["local-forward"]
    exposed = sum(seconds.values())  # nothing overlaps in the local step's program order
    work = (m * tick + float(np.asarray(compute["optimizer"]).ravel()[0]) + compute["overhead"]
            + float(np.asarray(compute.get("page_faults", 0.0)).ravel()[0]))
    fill = (layout.stage - 1) * layout.queue * (tick + sends / m)
    comm_bytes = {kind: 0.0 for kind in proxy.comm_bytes_per_device}
    for t in terms:
        comm_bytes[t.kind] += float(t.bytes[0])
    collectives = [{"name": t.name, "kind": t.kind,
                    "axes": [a.value for a in t.axes  # those the layout has
                             if alpha_beta.group_shape(grid, (a,))[0][0] > 1],
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
        assumptions=setting.to_json())


__all__ = ["local_terms", "per_microbatch", "predict_local", "stage_counts", "stage_leaves",
           "stage_parameters", "tick_activation_bytes"]
