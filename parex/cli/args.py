"""Argument helpers every `parex` subcommand shares: argparse types, the model and device
arguments, and turning them into configs. They sit below the commands, which import them."""

from __future__ import annotations

import argparse

from ..config import FAMILIES, ModelConfig, TrainConfig, model_preset
from ..defaults import DEVICES as DEFAULT_DEVICES
from ..errors import InputError
from ..layout import LAYOUT_PRESETS, Layout


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are InputErrors: `main` prints them in one line, exit 2."""

    def error(self, message: str):
        raise InputError(f"{self.prog}: {message} (see {self.prog} --help)")


def at_least(low: int):
    """An argparse type: a whole number >= low."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, not {value}")
        return value

    parse.__name__ = f"whole number >= {low}"
    return parse


def positive_list(text: str) -> str:
    """An argparse type: comma-separated whole numbers >= 1 (kept as the text)."""
    for item in text.split(","):
        at_least(1)(item.strip())
    return text


def choice_list(choices):
    """An argparse type: a comma-separated subset of `choices` (kept as the text)."""
    def parse(text: str) -> str:
        unknown = [m.strip() for m in text.split(",") if m.strip() not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown)}; use some of "
                                             f"{', '.join(choices)}")
        return text

    return parse


def preset(name: str):
    """model_preset, with an unknown name as bad input."""
    try:
        return model_preset(name)
    except ValueError as err:
        raise InputError(str(err)) from None


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="tiny", help="model preset (default tiny)")
    p.add_argument("--global-batch", type=at_least(1), default=16,
                   help="sequences per step (default 16)")
    p.add_argument("--microbatch", type=at_least(1), default=None,
                   help="sequences per data-parallel replica per microbatch")
    p.add_argument("--seq", type=at_least(1), default=None,
                   help="sequence length (default: the model's)")
    p.add_argument("--remat", default="none", choices=["none", "selective", "full"])
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16"])


def add_device_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--devices", type=at_least(1), default=None,
                   help="device count (default: what the layout uses, or 8); emulated on a CPU")
    p.add_argument("--platform", default=None, choices=["cpu", "gpu", "tpu"],
                   help="force a JAX platform (default: the best available)")


def setup_devices(args, layout_text: str | None) -> int:
    """Parse the layout's device count, then ask JAX for that many devices."""
    import jax

    n = args.devices
    if n is None:
        n = DEFAULT_DEVICES
        if layout_text and layout_text.strip() not in LAYOUT_PRESETS:
            n = Layout.parse(layout_text).n_devices
    if args.platform:
        jax.config.update("jax_platforms", args.platform)
    from ..mesh import emulate_devices

    emulate_devices(n)
    return n


def configs_from_args(args):
    model = preset(args.model)
    if args.dtype:
        model = model.replace(dtype=args.dtype)
    train = TrainConfig(global_batch=args.global_batch, microbatch=args.microbatch,
                        seq_len=args.seq, steps=getattr(args, "steps", 20), remat=args.remat)
    return model, train


DIMS = (("layers", "L"), ("hidden", "D"), ("heads", "H"), ("kv_heads", "K"), ("ffn", "F"),
        ("vocab", "V"))


def add_predict_model_args(p) -> None:
    p.add_argument("--model", default="tiny",
                   help="model preset, or a bare family (gpt, llama) with dims from the flags")
    p.add_argument("--global-batch", type=at_least(1), default=16,
                   help="sequences per step (default 16)")
    p.add_argument("--microbatch", type=at_least(1), default=None,
                   help="sequences per data-parallel replica per microbatch")
    p.add_argument("--seq", type=at_least(1), default=None,
                   help="sequence length (default: the model's)")
    p.add_argument("--remat", default="none", choices=["none", "selective", "full"])
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16"],
                   help="compute dtype (default for predict: bfloat16 on an accelerator profile, "
                   "the preset's on cpu-local; bfloat16 for a bare family)")
    for name, letter in DIMS:
        p.add_argument(f"--{name.replace('_', '-')}", type=at_least(1), default=None,
                       help=f"{letter}: overrides the preset's, required for a bare family"
                       if name in ("layers", "hidden", "heads") else f"{letter}")


def model_from_args(args) -> tuple[ModelConfig, TrainConfig]:
    """A preset with optional dim overrides, or a bare family built from the flags."""
    dims = {name: getattr(args, name) for name, _ in DIMS if getattr(args, name) is not None}
    if args.model in FAMILIES:
        missing = [n for n in ("layers", "hidden", "heads") if n not in dims]
        if missing:
            raise InputError(f"--model {args.model} is a bare family: give its size with "
                             f"{' '.join('--' + n for n in missing)} (and optionally --kv-heads, "
                             f"--ffn, --vocab, --seq)")
        model = ModelConfig(name=args.model, family=args.model, dtype=args.dtype or "bfloat16",
                            seq_len=args.seq or 2048, **dims)
    else:
        model = preset(args.model)
        if dims or args.seq and args.seq > model.seq_len:
            model = model.replace(name=f"{model.name}*", seq_len=max(model.seq_len, args.seq or 0),
                                  **dims)
        if args.dtype:
            model = model.replace(dtype=args.dtype)
    train = TrainConfig(global_batch=args.global_batch, microbatch=args.microbatch,
                        seq_len=args.seq, remat=args.remat)
    return model, train
