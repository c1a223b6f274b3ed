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
from ..precision import PRECISION_NAMES, PRECISIONS
from ..predict import CONVENTIONS, RECIPES, predict_setting
from ..setting import Setting
from ..setting import resolve as resolve_setting
from ..record import Prediction
from ..validation import validate

# data takes the devices left over; tensor_y and tensor_z are AxoNN's Y and Z (tensor=XxYxZ:
# the tensor control is then X; with both at 1 it is Megatron's tensor=N); expert splits a
# mixture of experts' routed experts (validation refuses it on a dense model)
SPLIT_AXES = (Axis.FSDP, Axis.EXPERT, Axis.TENSOR, Axis.TENSOR_Y, Axis.TENSOR_Z, Axis.SEQ,
              Axis.STAGE)
DIMS = ("layers", "hidden", "heads", "seq_len")
DTYPE_OWN = "dtype's"  # the precision control's first choice: no FP8, the dtype's own matmuls
PRECISION_CHOICES = (DTYPE_OWN, *(n for n in PRECISION_NAMES if PRECISIONS[n].fp8))


def control_defaults(hardware: str, model: ModelConfig, n_devices: int) -> dict:
    """The controls' values where the user has said nothing: what `parex predict` resolves for
    `model` on `n_devices` of the profile `hardware` (parex.setting.resolve): on an
    accelerator bfloat16 under the mixed recipe and the ideal gpu program, the global batch of
    published runs of its size and 1F1B; on the calibrated CPU what the emulated mesh runs."""
    s = resolve_setting(model, TrainConfig(), Layout(data=n_devices), hardware)
    return {"dtype": s.dtype, "remat": s.train.remat, "recipe": s.recipe,
            "convention": s.convention, "global_batch": s.train.global_batch,
            "schedule": s.schedule}


def profile_defaults(hardware: str, model: ModelConfig, dtype: str) -> dict:
    """The recipe and convention predict() resolves on a profile for a model trained in
    `dtype` when none is given (parex.setting.resolve)."""
    s = resolve_setting(model, TrainConfig(), None, hardware, dtype=dtype)
    return {"recipe": s.recipe, "convention": s.convention}


def setting_of(values: dict, model: ModelConfig, train: TrainConfig, layout: Layout,
               hardware: str | None = None) -> Setting:
    """The Setting predict() resolves under the controls: their hardware (or `hardware`),
    dtype, recipe, convention and stack (another profile than the controls', a measurement's,
    gets its own defaults)."""
    hardware = hardware or values["hardware"]
    chosen = profile_defaults(hardware, model, model.dtype)
    if hardware == values["hardware"]:
        chosen = {name: values.get(name, value) for name, value in chosen.items()}
    # the stack's overlaps (parex.stacks) describe a GPU program: the emulated mesh's has none
    stack = values.get("stack")
    if stack == "parex" or chosen["convention"] == "xla-cpu":
        stack = None
    return resolve_setting(model, train, layout, hardware, dtype=model.dtype, stack=stack,
                           **chosen)


def predicted(values: dict, model: ModelConfig, train: TrainConfig, layout: Layout,
              hardware: str | None = None) -> Prediction:
    """predict() of the controls' Setting (setting_of), so that every number the Explorer
    shows is `parex predict`'s: parex.predict is predict_setting of the resolved inputs."""
    return predict_setting(setting_of(values, model, train, layout, hardware))


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
    """The train config of the controls; a global batch of None is the regime's default,
    which the Explorer shows until the user sets one (and which brings its default microbatch
    size: parex.setting)."""
    preset = model_preset(values["model"])
    seq = values["seq_len"] if values["seq_len"] != preset.seq_len else None
    precision = values.get("precision", DTYPE_OWN)
    return TrainConfig(global_batch=values["global_batch"], steps=values["steps"],
                       remat=values["remat"], seq_len=seq, warmup_steps=1,
                       precision=None if precision == DTYPE_OWN else precision)


def values_of(model: str, layout: Layout, n_devices: int, hardware: str, **settings) -> dict:
    """The control values that describe `layout` of preset `model` on n_devices of `hardware`
    (the inverse of layout_of; a pipeline that names no schedule shows the one it resolves to
    there), with `settings` naming other controls (remat, global_batch, seq_len, ...)."""
    if layout.stage > 1 and layout.schedule is None:
        named = resolve_setting(model_preset(model), TrainConfig(), layout, hardware).layout
        layout = layout.replace(schedule=named.schedule)
    return {"model": model, "devices": n_devices, "hardware": hardware, "zero": layout.zero,
            "sp": layout.sp, "cp": layout.cp, "schedule": layout.schedule,
            "microbatches": layout.microbatches, "virtual": layout.virtual_stages,
            "expert_fold": layout.folds_experts,
            **{a.value: getattr(layout, a.value) for a in SPLIT_AXES}, **settings}


def layout_of(values: dict) -> Layout:
    """The Layout the controls describe; the data axis takes the devices left over, and the
    schedule and virtual stages apply only to pipelines; `expert_fold` folds the tensor axis into
    the expert group (expert_tensor=1, MoE parallel folding)."""
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
                  schedule=values["schedule"] if pipeline else None,
                  virtual_stages=values["virtual"] if pipeline else 1,
                  expert_tensor=1 if values.get("expert_fold") else None)


def resolve(values: dict) -> tuple[ModelConfig, TrainConfig, Layout]:
    """(model, train, layout) as the controls give them, once the Setting they resolve to
    (setting_of) is a real program on the device count, as predict() requires (one parex's
    executor cannot run yet is shown with that note); LayoutError (or ValueError) names the
    problem when it is not."""
    model, train, layout = model_of(values), train_of(values), layout_of(values)
    s = setting_of(values, model, train, layout)
    validate(s.layout, s.model, s.train, values["devices"], executable=False)
    return model, train, layout


def cli_command(values: dict) -> str:
    """The `parex predict` command that predicts what the Explorer shows."""
    model, train, layout = model_of(values), train_of(values), layout_of(values)
    args = ["parex", "predict", "--model", values["model"], "--layout", str(layout),
            "--hardware", values["hardware"], "--remat", train.remat, "--dtype", model.dtype]
    if train.global_batch is not None:  # else the default, which the command resolves too
        args += ["--global-batch", str(train.global_batch)]
    if train.precision is not None:  # an FP8 recipe; else the dtype's own
        args += ["--precision", train.precision]
    for name in ("recipe", "convention"):
        if name in values:
            args += [f"--{name}", values[name]]
    stack = setting_of(values, model, train, layout).stack
    if stack:
        args += ["--stack", stack]
    preset = model_preset(values["model"])
    if any(values[d] != getattr(preset, d) for d in ("layers", "hidden", "heads")):
        for flag, name in (("--layers", "layers"), ("--hidden", "hidden"), ("--heads", "heads"),
                           ("--kv-heads", "kv_heads"), ("--ffn", "ffn")):
            args += [flag, str(getattr(model, name))]
    if train.seq_len:
        args += ["--seq", str(train.seq_len)]
    return shlex.join(args)


__all__ = ["CONVENTIONS", "DIMS", "RECIPES", "SPLIT_AXES", "cli_command", "control_defaults",
           "layout_of", "model_of", "predicted", "profile_defaults", "resolve", "setting_of",
           "train_of", "values_of"]
