"""The Explorer's controls as plain values, and what they describe: a model, a training setup
and a layout. Pure functions, so the fit guide can try changes without touching a widget and
tests can check the Explorer against `parex predict`.

    values = {"model": "tiny", "layers": 4, ..., "tensor": 2, "hardware": "cpu-local"}
    model, train, layout = resolve(values)          # LayoutError when impossible
    cli_command(values)                             # the same prediction on the command line
"""

from __future__ import annotations

import shlex

from ..config import ModelConfig, TrainConfig, model_preset
from ..layout import Axis, Layout, LayoutError
from ..validation import validate

SPLIT_AXES = (Axis.FSDP, Axis.TENSOR, Axis.SEQ, Axis.STAGE)  # data takes the devices left over
DIMS = ("layers", "hidden", "heads", "seq_len")
LARGE_MODEL = 1e9  # parameters from which a preset comes up as real runs train it (below)


def realistic_defaults(model: ModelConfig) -> dict:
    """The dtype and remat that real runs of a model this size use: bfloat16 with selective
    activation recompute (Korthikanti et al. 2022, Megatron-LM's recipe for its 22B–1T runs)
    from 1B parameters on; the preset's float32 without remat below (what the CPU runs)."""
    if model.n_params >= LARGE_MODEL:
        return {"dtype": "bfloat16", "remat": "selective"}
    return {"dtype": model.dtype, "remat": "none"}


def model_of(values: dict) -> ModelConfig:
    """The preset, or a custom model when a dim differs from it (the preset's MLP ratio and GQA
    grouping kept). A sequence length up to the preset's is a training setting (train_of); a
    longer one makes the model's position table longer, as `parex predict --seq` does."""
    preset = model_preset(values["model"])
    dims = {dim: values[dim] for dim in ("layers", "hidden", "heads")}
    seq = max(values["seq_len"], preset.seq_len)
    if all(dims[d] == getattr(preset, d) for d in dims) and seq == preset.seq_len:
        return preset.replace(dtype=values["dtype"])
    ffn = preset.ffn * dims["hidden"] // preset.hidden
    kv = max(1, preset.kv_heads * dims["heads"] // preset.heads)
    return preset.replace(name=f"{preset.name}-custom", ffn=ffn, kv_heads=kv, seq_len=seq,
                          dtype=values["dtype"], **dims)


def train_of(values: dict) -> TrainConfig:
    preset = model_preset(values["model"])
    seq = values["seq_len"] if values["seq_len"] != preset.seq_len else None
    return TrainConfig(global_batch=values["global_batch"], steps=values["steps"],
                       remat=values["remat"], seq_len=seq, warmup_steps=1)


def layout_of(values: dict) -> Layout:
    """The Layout the controls describe; the data axis takes the devices left over, and the
    schedule and virtual stages apply only to pipelines."""
    n = values["devices"]
    sizes = {a.value: values[a.value] for a in SPLIT_AXES}
    split = 1
    for size in sizes.values():
        split *= size
    if n % split:
        named = " × ".join(f"{k}={v}" for k, v in sizes.items() if v > 1)
        raise LayoutError(f"{named} = {split} devices does not divide the {n} devices, so no "
                          f"data-parallel size fills the mesh: lower one of those axes")
    pipeline = sizes[Axis.STAGE.value] > 1
    return Layout(data=n // split, **sizes, zero=values["zero"], sp=values["sp"],
                  cp=values["cp"], microbatches=values["microbatches"],
                  schedule=values["schedule"] if pipeline else "gpipe",
                  virtual_stages=values["virtual"] if pipeline else 1)


def resolve(values: dict) -> tuple[ModelConfig, TrainConfig, Layout]:
    """(model, train, layout), validated for the device count; LayoutError (or ValueError)
    names the problem when they cannot run."""
    model, train, layout = model_of(values), train_of(values), layout_of(values)
    validate(layout, model, train, values["devices"])
    return model, train, layout


def cli_command(values: dict) -> str:
    """The `parex predict` command that predicts what the Explorer shows."""
    model, train, layout = model_of(values), train_of(values), layout_of(values)
    args = ["parex", "predict", "--model", values["model"], "--layout", str(layout),
            "--hardware", values["hardware"], "--global-batch", str(train.global_batch),
            "--remat", train.remat, "--dtype", model.dtype]
    preset = model_preset(values["model"])
    if any(values[d] != getattr(preset, d) for d in ("layers", "hidden", "heads")):
        for flag, name in (("--layers", "layers"), ("--hidden", "hidden"), ("--heads", "heads"),
                           ("--kv-heads", "kv_heads"), ("--ffn", "ffn")):
            args += [flag, str(getattr(model, name))]
    if train.seq_len:
        args += ["--seq", str(train.seq_len)]
    return shlex.join(args)


__all__ = ["DIMS", "LARGE_MODEL", "SPLIT_AXES", "cli_command", "layout_of", "model_of",
           "realistic_defaults", "resolve", "train_of"]
