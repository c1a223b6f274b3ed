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
from ..defaults import assume
from ..predict import CONVENTIONS, RECIPES, as_cluster, predict
from ..record import Prediction
from ..validation import validate

# data takes the devices left over; tensor_y and tensor_z are AxoNN's Y and Z (tensor=XxYxZ:
# the tensor control is then X; with both at 1 it is Megatron's tensor=N); expert splits a
# mixture of experts' routed experts (validation refuses it on a dense model)
SPLIT_AXES = (Axis.FSDP, Axis.EXPERT, Axis.TENSOR, Axis.TENSOR_Y, Axis.TENSOR_Z, Axis.SEQ,
              Axis.STAGE)
DIMS = ("layers", "hidden", "heads", "seq_len")


def control_defaults(hardware: str, model: ModelConfig) -> dict:
    """The dtype, remat, recipe and convention that `parex predict` assumes for `model` on the
    profile `hardware` (parex.defaults.assume, the one home of defaults): on an accelerator
    bfloat16 under the mixed recipe and the ideal gpu program, with selective recompute from 1B
    parameters (Korthikanti et al. 2022); on the calibrated CPU what the emulated mesh runs."""
    a = assume(as_cluster(hardware, 1), model)
    return {"dtype": a.dtype, "remat": a.remat, "recipe": a.recipe, "convention": a.convention}


def profile_defaults(hardware: str, model: ModelConfig, dtype: str) -> dict:
    """The recipe and convention predict() assumes on a profile for a model trained in `dtype`
    when none is given (parex.defaults.assume)."""
    a = assume(as_cluster(hardware, 1), model, dtype=dtype)
    return {"recipe": a.recipe, "convention": a.convention}


def predicted(values: dict, model: ModelConfig, train: TrainConfig, layout: Layout,
              hardware: str | None = None) -> Prediction:
    """predict() under the controls' assumptions: their hardware (or `hardware`), dtype,
    recipe and convention, so every number the Explorer shows is `parex predict`'s."""
    hardware = hardware or values["hardware"]
    chosen = profile_defaults(hardware, model, model.dtype)
    if hardware == values["hardware"]:  # else another profile (a measurement's): its defaults
        chosen = {name: values.get(name, value) for name, value in chosen.items()}
    return predict(model, train, layout, hardware, dtype=model.dtype, **chosen)


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
    sizes = {a.value: values.get(a.value, 1) for a in SPLIT_AXES}
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
    for name in ("recipe", "convention"):
        if name in values:
            args += [f"--{name}", values[name]]
    preset = model_preset(values["model"])
    if any(values[d] != getattr(preset, d) for d in ("layers", "hidden", "heads")):
        for flag, name in (("--layers", "layers"), ("--hidden", "hidden"), ("--heads", "heads"),
                           ("--kv-heads", "kv_heads"), ("--ffn", "ffn")):
            args += [flag, str(getattr(model, name))]
    if train.seq_len:
        args += ["--seq", str(train.seq_len)]
    return shlex.join(args)


__all__ = ["CONVENTIONS", "DIMS", "RECIPES", "SPLIT_AXES", "cli_command", "control_defaults",
           "layout_of", "model_of", "predicted", "profile_defaults", "resolve", "train_of"]
