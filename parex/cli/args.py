"""Argument helpers every `parex` subcommand shares: argparse types, the model and device
arguments, and turning them into configs. They sit below the commands, which import them."""

from __future__ import annotations

import argparse

from ..config import ATTENTION_KERNELS, FAMILIES, ModelConfig, TrainConfig, model_preset
from ..config import REMAT_POLICIES as REMATS
from ..defaults import DEVICES as DEFAULT_DEVICES
from ..defaults import HARDWARE, LOCAL_GLOBAL_BATCH, MODEL
from ..errors import InputError, UsageError, did_you_mean
from ..layout import LAYOUT_PRESETS, Layout
from ..precision import PRECISION_NAMES, compute_dtype
from ..setting import describe
from ..stacks import OVERLAPS, STACKS


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are UsageErrors: `main` prints them in one line, exit 2,
    with the command's name once ("parex predict: ...") and the nearest choice to a typo."""

    def error(self, message: str):
        raise UsageError(f"{self.prog}: {_with_suggestion(message)} (see {self.prog} --help)")

    def parse_args(self, args=None, namespace=None):
        """argparse's, except that a flag no command knows is blamed on the subcommand it was
        given to ("parex predict: unrecognized arguments: --hardwre; did you mean ...")."""
        known, extras = self.parse_known_args(args, namespace)
        if extras:
            parser = self._subcommand(known) or self
            flags = [f for f in getattr(parser, "_option_string_actions", {}) if len(f) > 2]
            hint = did_you_mean(extras[0].partition("=")[0], flags) if extras[0][:1] == "-" \
                else ""
            parser.error(f"unrecognized arguments: {' '.join(extras)}"
                         + (f"; {hint}" if hint else ""))
        return known

    def _subcommand(self, namespace):
        """The subparser that read `namespace`'s command, if any."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                return action.choices.get(getattr(namespace, action.dest, None))
        return None


def _with_suggestion(message: str) -> str:
    """argparse's "invalid choice: 'x' (choose from 'a', 'b')", with did_you_mean added."""
    head, sep, rest = message.partition("invalid choice: ")
    if not sep or " (choose from " not in rest:
        return message
    word, _, choices = rest.partition(" (choose from ")
    known = [c.strip().strip("'\"") for c in choices.rstrip(")").split(",")]
    hint = did_you_mean(word.strip("'\""), known)
    return f"{head}{sep}{word}; {hint + ' ' if hint else ''}choose from {', '.join(known)}"


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


def positive_number(text: str) -> float:
    """An argparse type: a number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, not {text}")
    return value


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


def is_model_file(name: str | None) -> bool:
    """Whether --model names a Hugging Face config.json (a path ending in .json), not a preset."""
    return bool(name) and name.endswith(".json")


def preset(name: str):
    """model_preset, with an unknown name as bad input; a path ending in .json is a Hugging
    Face config.json (parex.interop.hf)."""
    if is_model_file(name):
        from ..interop import from_hf_config

        return from_hf_config(name).model
    try:
        return model_preset(name)
    except ValueError as err:
        raise InputError(str(err)) from None


GLOBAL_BATCH_HELP = (f"sequences per step (default: {LOCAL_GLOBAL_BATCH} on cpu-local; on an "
                     "accelerator the tokens per step of published runs of the model's size, "
                     "0.5M-4M, as a multiple of the device count: parex.defaults)")
MICROBATCH_HELP = ("sequences per data-parallel replica per microbatch (default: the layout's "
                   "microbatches; on an accelerator from 1B parameters, 1)")
REMAT_HELP = ("activation recompute (default: none; selective from 1B parameters on an "
              "accelerator with --attention naive, whose scores it saves: parex.defaults)")
ATTENTION_HELP = ("attention kernel: flash (blockwise, keeps no scores; cuDNN's fused kernel on "
                  "a GPU) or naive (materialised scores); default flash on an accelerator, "
                  "naive on the CPU (parex.defaults)")


def add_attention_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--attention", default=None, choices=ATTENTION_KERNELS, help=ATTENTION_HELP)


PRECISION_HELP = ("matmul precision recipe (parex.precision): fp32, bf16, fp8-delayed (Transformer "
                  "Engine), fp8-current (torchao tensorwise), fp8-rowwise (torchao), "
                  "fp8-blockwise (DeepSeek-V3), mxfp8 (OCP MX, Blackwell); an FP8 recipe "
                  "computes the rest in bfloat16 unless --dtype says otherwise; default: the "
                  "dtype's")


def add_precision_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--precision", default=None, choices=PRECISION_NAMES, help=PRECISION_HELP)


def with_precision_dtype(model: ModelConfig, args) -> ModelConfig:
    """The model in the compute dtype --precision implies where --dtype is not given
    (parex.precision.compute_dtype: bfloat16 under FP8 recipes)."""
    name = getattr(args, "precision", None)
    if name is None:
        return model
    dtype = compute_dtype(name, args.dtype)
    return model if model.dtype == dtype else model.replace(dtype=dtype)


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=MODEL,
                   help=f"model preset (default {MODEL}) or a Hugging Face config.json's path")
    p.add_argument("--global-batch", type=at_least(1), default=None, help=GLOBAL_BATCH_HELP)
    p.add_argument("--microbatch", type=at_least(1), default=None, help=MICROBATCH_HELP)
    p.add_argument("--seq", type=at_least(1), default=None,
                   help="sequence length (default: the model's)")
    p.add_argument("--remat", default=None, choices=REMATS, help=REMAT_HELP)
    add_attention_arg(p)
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16"])
    add_precision_arg(p)
    add_moe_args(p)
    add_shape_args(p)


def add_moe_args(p: argparse.ArgumentParser) -> None:
    """A mixture of experts' routing (parex.model.moe), overriding the preset's."""
    p.add_argument("--experts", type=int, default=None, help="routed experts per block (E)")
    p.add_argument("--top-k", type=int, default=None, help="experts per token (k)")
    p.add_argument("--expert-ffn", type=at_least(1), default=None,
                   help="each expert's MLP width (F_e)")
    p.add_argument("--bias-rate", type=float, default=None,
                   help="DeepSeek-V3's loss-free balancing: the router bias's step γ (0: off)")
    p.add_argument("--capacity-factor", type=_capacity, default=None,
                   help="C = ceil(cf·k·T/E) slots per expert per sequence, the rest dropped; "
                   "'dropless' for room for every token (the presets' default)")


def add_shape_args(p: argparse.ArgumentParser) -> None:
    """The shapes other frameworks' configurations name (docs/models.md), overriding the
    preset's."""
    p.add_argument("--head-dim", type=at_least(1), default=None,
                   help="each head's width Dh (default hidden / heads; Gemma names its own)")
    p.add_argument("--parallel-block", action="store_true", default=None,
                   help="attention and MLP side by side on one norm (GPT-J, PaLM)")
    p.add_argument("--tied-embeddings", action="store_true", default=None,
                   help="the output layer reads the token table (no unembedding matrix)")
    p.add_argument("--sliding-window", type=at_least(1), default=None,
                   help="each query sees its W latest positions (Mistral)")


def with_shape_args(model: ModelConfig, args) -> ModelConfig:
    """`model` with the --head-dim, --parallel-block, --tied-embeddings, --sliding-window
    given."""
    changes = {name: getattr(args, name, None) for name in ("head_dim", "parallel_block",
                                                             "tied_embeddings", "sliding_window")}
    changes = {k: v for k, v in changes.items() if v is not None}
    return model.replace(name=f"{model.name}*", **changes) if changes else model


def _capacity(text: str):
    if text == "dropless":
        return "dropless"
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number (e.g. 1.25) or 'dropless'")


def with_moe_args(model: ModelConfig, args) -> ModelConfig:
    """`model` with the --experts, --top-k, --expert-ffn, --capacity-factor given."""
    changes = {name: getattr(args, name, None) for name in ("experts", "top_k", "expert_ffn",
                                                             "capacity_factor", "bias_rate")}
    changes = {k: v for k, v in changes.items() if v is not None}
    if changes.get("capacity_factor") == "dropless":
        changes["capacity_factor"] = None
    return model.replace(name=f"{model.name}*", **changes) if changes else model


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
    from ..executor.mesh import emulate_devices

    emulate_devices(n)
    return n


def configs_from_args(args):
    """(model, train) of a command that runs on this machine's mesh: what the flags say, None
    where they say nothing (the executor's Setting fills it: parex.setting.resolve_run)."""
    model = with_shape_args(with_moe_args(preset(args.model), args), args)
    if args.dtype:
        model = model.replace(dtype=args.dtype)
    if args.seq and args.seq > model.seq_len:  # a longer context: GPT's position table grows
        star = "*" if model.family == "gpt" else ""  # Llama's RoPE has no table: same model
        model = model.replace(name=f"{model.name}{star}", seq_len=args.seq)
    return with_precision_dtype(model, args), _train_from_args(args)


def _train_from_args(args) -> TrainConfig:
    """The TrainConfig of the flags, None where a flag was not given."""
    given = {"global_batch": args.global_batch, "microbatch": getattr(args, "microbatch", None),
             "seq_len": args.seq, "steps": getattr(args, "steps", None),
             "remat": getattr(args, "remat", None), "attention": getattr(args, "attention", None),
             "precision": getattr(args, "precision", None)}
    return TrainConfig(**{name: value for name, value in given.items() if value is not None})


def layout_from_args(text: str, n_devices: int | None, microbatch: int | None = None) -> Layout:
    """The layout of --layout, as written (a pipeline that names no schedule gets the regime's
    when the Setting is resolved); --microbatch beside a layout's own microbatches=M is
    refused, as both would set the microbatch count."""
    layout = Layout.parse(text, n_devices)
    if microbatch and layout.microbatches != 1:
        raise InputError(f"--microbatch {microbatch} and the layout's "
                         f"microbatches={layout.microbatches} both set the microbatch count: "
                         f"give one of them")
    return layout


def assumptions_line(stated: dict, defaulted: list[str] = ()) -> str:
    """The header line every command prints: the Setting the numbers were made under, and
    which of it are defaults (parex.defaults) rather than flags."""
    text = f"assumptions  {describe(stated)}"
    return text + (f" (defaults: {', '.join(defaulted)})" if defaulted else "")


def defaulted(args, flags=("hardware", "dtype", "recipe", "convention", "global_batch",
                           "remat")) -> list[str]:
    """The flags of `flags` the command has and the user left out."""
    return [f.replace("_", " ") for f in flags if getattr(args, f, 0) is None]


DIMS = (("layers", "L"), ("hidden", "D"), ("heads", "H"), ("kv_heads", "K"), ("ffn", "F"),
        ("vocab", "V"))


def add_overlap_args(p: argparse.ArgumentParser) -> None:
    """--stack and --overlap: the communication overlaps an accelerator prediction prices."""
    p.add_argument("--stack", default=None, choices=list(STACKS),
                   help="the software stack whose communication overlaps are priced "
                   "(parex.stacks; default: parex's own program)")
    p.add_argument("--overlap", default=None, metavar="LIST",
                   help="the overlaps on, replacing the stack's: a comma list of "
                   f"{', '.join(OVERLAPS)}, or none (e.g. tp-comm,grad-reduce,param-gather; "
                   "deepep: a mixture's tokens sent once per remote node, DeepEP/HybridEP)")


def add_hardware_arg(p, help: str = "hardware profile (data/hardware/)") -> None:
    p.add_argument("--hardware", default=None, help=f"{help}; default {HARDWARE}")


def hardware_of(args) -> str:
    """--hardware, or every command's default profile (parex.defaults.HARDWARE)."""
    return args.hardware or HARDWARE


def add_predict_model_args(p) -> None:
    p.add_argument("--model", default=None,
                   help=f"model preset (default {MODEL}), a Hugging Face config.json's path, or "
                   f"a bare family (gpt, llama) with dims from the flags")
    p.add_argument("--global-batch", type=at_least(1), default=None, help=GLOBAL_BATCH_HELP)
    p.add_argument("--microbatch", type=at_least(1), default=None, help=MICROBATCH_HELP)
    p.add_argument("--seq", type=at_least(1), default=None,
                   help="sequence length (default: the model's)")
    p.add_argument("--remat", default=None, choices=REMATS, help=REMAT_HELP)
    add_attention_arg(p)
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16"],
                   help="compute dtype (default: bfloat16 on an accelerator profile, the "
                   "preset's on cpu-local; bfloat16 for a bare family)")
    add_precision_arg(p)
    for name, letter in DIMS:
        p.add_argument(f"--{name.replace('_', '-')}", type=at_least(1), default=None,
                       help=f"{letter}: overrides the preset's, required for a bare family"
                       if name in ("layers", "hidden", "heads") else f"{letter}")
    add_moe_args(p)
    add_shape_args(p)


def model_from_args(args) -> tuple[ModelConfig, TrainConfig]:
    """A preset with optional dim overrides, or a bare family built from the flags; the train
    config of the flags (None where not given)."""
    dims = {name: getattr(args, name) for name, _ in DIMS if getattr(args, name) is not None}
    args.model = args.model or MODEL
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
    model = with_precision_dtype(with_shape_args(with_moe_args(model, args), args), args)
    return model, _train_from_args(args)

