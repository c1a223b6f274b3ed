"""The `parex` command: `parex run`, `parex demo`, and the commands of other modules
(`predict`, `calibrate`, `compare`, `seqstudy`, `plan`, `sweep`, `lowcomm`, `launch`,
`figure`).

Emulated CPU devices must be requested before JAX touches a backend, so every command parses its
arguments, calls `emulate_devices`, and only then builds meshes.
"""

from __future__ import annotations

import argparse
import sys

from .config import TrainConfig, model_preset
from .errors import InputError
from .layout import LAYOUT_PRESETS, Layout, LayoutError

DEFAULT_DEVICES = 8


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
    from .mesh import emulate_devices

    emulate_devices(n)
    return n


def configs_from_args(args):
    model = preset(args.model)
    if args.dtype:
        model = model.replace(dtype=args.dtype)
    train = TrainConfig(global_batch=args.global_batch, microbatch=args.microbatch,
                        seq_len=args.seq, steps=getattr(args, "steps", 20), remat=args.remat)
    return model, train


# --- parex run ----------------------------------------------------------------------------------

def cmd_run(args) -> int:
    from .measure import measure
    from .report import measurement_report

    if args.study == "long-sequence":  # the same table as `parex seqstudy`
        from .studies_sequence import DEFAULT_LENGTHS, STUDY_MODES, cmd_seqstudy

        return cmd_seqstudy(argparse.Namespace(
            model=args.model, devices=args.devices, platform=args.platform,
            lengths=args.lengths or ",".join(map(str, DEFAULT_LENGTHS)),
            modes=",".join(STUDY_MODES), global_batch=1, csv=None, chart=None))

    n = setup_devices(args, args.layout)
    model, train = configs_from_args(args)
    layout = Layout.parse(args.layout, n)
    layout.validate(model, train, n)
    import jax

    m = measure(model, train, layout, devices=jax.devices()[:n], data=args.data,
                progress=not args.json)
    print(m.dumps() if args.json else measurement_report(m, model.n_params))
    if m.diloco and not args.json:
        from .cli_lowcomm import diloco_report

        print(diloco_report(m.diloco))
    return 0


def add_run(sub) -> None:
    p = sub.add_parser("run", help="train one layout for real and report what XLA did")
    add_model_args(p)
    add_device_args(p)
    p.add_argument("--layout", default="dp",
                   help="e.g. data=2,tensor=4,zero=1,sp=on or a preset name (default dp)")
    p.add_argument("--steps", type=at_least(1), default=20)
    p.add_argument("--data", default="corpus", choices=["corpus", "synthetic"])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--study", choices=["long-sequence"], default=None,
                   help="instead of one layout, print the long-sequence study (see seqstudy)")
    p.add_argument("--lengths", type=positive_list, default=None,
                   help="sequence lengths for --study long-sequence")
    p.set_defaults(func=cmd_run)


# --- parex demo ---------------------------------------------------------------------------------

DEMO_LAYOUTS = ("dp", "zero1", "zero2", "fsdp", "tp", "tp_sp", "dp_tp", "fsdp_tp")


def cmd_demo(args) -> int:
    from tqdm.auto import tqdm

    from .measure import measure
    from .predict import predict
    from .report import comparison_table

    n = setup_devices(args, None)
    model, train = configs_from_args(args)
    import jax

    from .local_profile import ensure_local

    ensure_local()  # the predictions need this machine's calibration: measured on first use
    print(f"parex demo · {model.name} ({model.n_params / 1e6:.2f}M parameters) · global batch "
          f"{train.global_batch} × {train.seq_len or model.seq_len} tokens · {args.steps} steps · "
          f"{n} {jax.devices()[0].platform} devices\n")
    results, predictions = [], []
    for name in tqdm(DEMO_LAYOUTS, desc="layouts"):
        layout = Layout.preset(name, n)
        results.append(measure(model, train, layout, devices=jax.devices()[:n]))
        predictions.append(predict(model, train, layout, "cpu-local"))
    print()
    print(comparison_table(results, predictions))
    print("\nstep ms: measured median; pred ms: the analytic model with this machine's calibrated "
          "cpu-local profile.\nstate/dev: parameters + optimizer state per device (the step's "
          "arguments); memory/dev: arguments + outputs − donated + temporaries.\nCommunication is "
          "per device per step, read from the compiled HLO (the CPU compiler keeps all-reduces "
          "where a GPU would reduce-scatter).\nNext: `parex compare --layout dp_tp` for every "
          "field, `parex predict --model gpt3-175b ...` at scale, notebooks/ for the charts.")
    return 0


def add_demo(sub) -> None:
    p = sub.add_parser("demo", help="train the layout presets on an emulated mesh and compare")
    add_model_args(p)
    add_device_args(p)
    p.add_argument("--steps", type=at_least(1), default=10)
    p.set_defaults(func=cmd_demo)


def commands() -> list:
    """Each entry adds one subcommand. Modules with their own commands are imported here, when
    the parser is built, because they reuse this module's argument helpers."""
    from . import cli_figure, cli_lowcomm, cli_plan, cli_predict, studies_sequence

    return [add_run, add_demo, *cli_predict.COMMANDS, studies_sequence.add_seqstudy,
            *cli_plan.COMMANDS, *cli_lowcomm.commands(), *cli_figure.COMMANDS]


def main(argv: list[str] | None = None) -> int:
    """Run one command. Bad input (InputError, LayoutError) prints one line and returns 2; any
    other exception is a bug and propagates with its traceback (exit status 1)."""
    parser = Parser(prog="parex", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for add in commands():
        add(sub)
    try:
        args = parser.parse_args(argv)
        return args.func(args)
    except (LayoutError, InputError) as err:  # the message names the fix
        print(f"parex: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
