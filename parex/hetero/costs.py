"""What one stage costs on its own chip, read off the homogeneous predictor (parex.predict).

A heterogeneous stage is a homogeneous model slice: `tensor` devices of one chip running some
blocks (and the embedding on a pipeline's first stage, the head on its last). Its costs come from
the homogeneous predictor's own functions on a one-stage grid of that tensor degree and
microbatch, so no formula is restated here:

    compute      predict.accelerator.accelerator_compute with 0 and 1 blocks: the head alone,
                 and one block more (kernel by kernel on the chip's roofline, over its step
                 efficiency); the optimizer's cost per element of state
    tensor comm  predict.comm.terms' "tp" and "cross-entropy" families, timed by
                 alpha_beta.term_seconds on the group's links: per block, plus the embedding's and
                 the head's
    memory       parameters per device (their bytes: the recipe's and the plan's ZeRO stage,
                 sharding.py), saved activations per block from predict.memory.layer_bytes
                 (Korthikanti et al.), the working set of the block being differentiated,
                 the float32 logits

Every cost is a numpy column over the tensor degrees asked for (`unit_costs`), per microbatch of
`b` sequences; a stage with L blocks costs L × the per-block terms plus its first/last extras.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..config import ModelConfig, TrainConfig
from ..errors import InputError
from ..hardware import Chip
from ..setting import ACCELERATOR, Setting, resolve_regime
from ..predict import alpha_beta, comm, flops, memory
from ..predict.accelerator import accelerator_compute
from ..predict.core import program
from ..predict.shapes import GROUPS, Grid, ModelSizes, model_sizes

def stage_setting(model: ModelConfig, seq_len: int | None = None, remat: str = "none",
                  recipe: str = "mixed", dtype: str = "bfloat16") -> Setting:
    """What every stage of a plan shares, as parex.setting resolves it for an accelerator (each
    stage runs on its own chip, so the setting names no cluster): the model in its compute
    dtype, the sequence, the remat policy, the bytes of model state, the ideal ("gpu") program
    and the kernel real runs there use."""
    if model.moe:  # its costs count a dense block's parameter groups
        raise InputError(f"{model.name} is a mixture of experts: heterogeneous plans cost "
                         f"dense models only; plan it on one kind of device (parex plan) or "
                         f"use a dense model")
    if memory.recipe(recipe).gathers_compute_dtype:  # sharding.py gathers the stored bytes
        raise InputError(f"recipe {recipe}: heterogeneous plans price ZeRO's stages over the "
                         f"stored parameters; use recipe mixed or mixed-fp32-grads")
    train = TrainConfig(seq_len=seq_len or model.seq_len, remat=remat)
    return resolve_regime(model, train, ACCELERATOR, dtype=dtype, recipe=recipe,
                          convention="gpu")


def stage_grid(setting: Setting, tensors, b: int, layers) -> Grid:
    """A one-stage grid: tensor degrees `tensors`, one microbatch of b sequences, `layers`
    blocks (columns broadcast together)."""
    train = TrainConfig(global_batch=b, seq_len=setting.seq_len, remat=setting.train.remat)
    tensors, layers = np.broadcast_arrays(np.asarray(tensors), np.asarray(layers))
    grid = Grid.from_columns(train, setting.model, tensor=tensors, stage_layers=layers)
    # the ideal program of a GPU cluster, with its attention kernel
    return dataclasses.replace(grid, executor=False, flash=setting.flash)


def _elements(sizes: ModelSizes, tensors: np.ndarray) -> dict:
    """Parameters one device holds per block, and of the first and the last stage's extras:
    the token table (and GPT's positions) first; the final norm and the head last."""
    g = dict(zip(GROUPS, sizes.groups))  # (embed, tensor, layers) -> parameters
    t = tensors.astype(float)
    split, whole = g[(1, 1, 1)] + g[(0, 1, 1)], g[(1, 0, 1)] + g[(0, 0, 1)]  # by tensor or not
    per_block = (split / t + whole) / sizes.L
    table = g[(1, 1, 0)] / 2 / t  # the token table and the head: (V, D) each, vocab-split
    return {"block": per_block, "first": table + g[(1, 0, 0)],
            "last": table + g[(0, 0, 0)] + g[(0, 1, 0)] / t}


def _tp_seconds(setting: Setting, sizes, grid: Grid, chip: Chip) -> dict:
    """Seconds per step of the grid's tensor-parallel all-reduces and its loss's, by family."""
    rec = memory.recipe(setting.recipe)
    out = {"tp": np.zeros(len(grid)), "cross-entropy": np.zeros(len(grid))}
    for term in comm.terms(sizes, grid, setting.train.remat, program(setting), setting.act_bytes,
                           rec.param_bytes, rec.grad_bytes):
        if term.name in out:
            out[term.name] = out[term.name] + alpha_beta.term_seconds(term, grid, chip)
    return out


def chip_key(chip: Chip) -> tuple:
    """What of a chip profile the costs read, as a hashable key (profiles hold dicts)."""
    return (chip.name, chip.intra_node, chip.inter_node, chip.scaleup_domain,
            chip.devices_per_node, chip.network_efficiency, chip.hbm_bytes)


_CACHE: dict = {}


def unit_costs(setting: Setting, chip: Chip, tensors, b: int) -> dict:
    """unit_costs_uncached, remembered per (setting, chip, tensor degrees, b)."""
    key = (setting, chip_key(chip), tuple(np.atleast_1d(tensors).tolist()), int(b))
    if key not in _CACHE:
        if len(_CACHE) > 4096:
            _CACHE.clear()
        _CACHE[key] = unit_costs_uncached(setting, chip, tensors, b)
    return _CACHE[key]


def unit_costs_uncached(setting: Setting, chip: Chip, tensors, b: int) -> dict:
    """Per tensor degree (columns), for one microbatch of b sequences on `chip`: seconds of a
    block (`block_s`, compute; `tp_block_s`, its tensor-parallel all-reduces), of the head
    (`head_s`), of the first stage's all-reduces (`tp_first_s`: the embedding's) and the
    last's (`tp_last_s`: the head's and the loss's), of the optimizer per element of state
    (`opt_s_per_element`); parameters per device of a block and of the first/last extras
    (their state's bytes: sharding.py), saved activations per block per microbatch in flight,
    the working set and logits transients, and the activation a stage sends (`send_bytes`)."""
    model, sizes = setting.model, model_sizes(setting.model)
    tensors = np.atleast_1d(np.asarray(tensors, dtype=np.int64))
    zero, one = stage_grid(setting, tensors, b, 0), stage_grid(setting, tensors, b, 1)
    with np.errstate(divide="ignore", invalid="ignore"):  # fsdp terms of a 0-block grid
        tp0 = _tp_seconds(setting, sizes, zero, chip)
    tp1 = _tp_seconds(setting, sizes, one, chip)
    remat, rec = setting.train.remat, memory.recipe(setting.recipe)
    megatron = rec.activations == "korthikanti"
    head = accelerator_compute(model, sizes, zero, remat, chip, model.dtype,
                               setting.act_bytes, 1.0, megatron)
    with_block = accelerator_compute(model, sizes, one, remat, chip, model.dtype,
                                     setting.act_bytes, 1.0, megatron)
    ends = tp0["tp"] / 2  # the embedding's all-reduce and the head's (forward + backward)
    elements = _elements(sizes, tensors)
    act = setting.act_bytes
    return {
        "tensor": tensors,
        "block_s": with_block["per_microbatch"] - head["per_microbatch"],
        "tp_block_s": tp1["tp"] - tp0["tp"],
        "head_s": head["per_microbatch"],
        "tp_first_s": ends,
        "tp_last_s": ends + tp0["cross-entropy"],
        "opt_s_per_element": np.full(len(tensors), head["optimizer"]),
        "passes": flops.passes_per_layer(one, remat),
        "block_elements": elements["block"],
        "first_elements": elements["first"],
        "last_elements": elements["last"],
        "block_act_bytes": memory.layer_bytes(sizes, one, remat, rec, act),
        "working_bytes": memory.layer_bytes(sizes, one, "none", rec, act),
        "logits_bytes": memory.LOGIT_COPIES * one.tokens * sizes.V / one.tensor * 4.0,
        "send_bytes": np.full(len(tensors), float(b * setting.seq_len * sizes.D * act)),
    }


def block_grad_bytes(setting: Setting) -> float:
    """Gradient bytes of one whole block (before any tensor split)."""
    sizes = model_sizes(setting.model)
    return memory.recipe(setting.recipe).grad_bytes * sizes.layer_params


__all__ = ["block_grad_bytes", "chip_key", "stage_grid", "stage_setting",
           "unit_costs", "unit_costs_uncached"]
