"""The `parex` command: `parex run`, `parex demo`, and the commands of other modules
(`predict`, `calibrate`, `compare`, `seqstudy`, `plan`, `sweep`, `lowcomm`, `launch`,
`figure`).

Emulated CPU devices must be requested before JAX touches a backend, so every command parses its
arguments, calls `emulate_devices`, and only then builds meshes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..calibrate.local import hold_notices, release_notices
from ..errors import InputError, UsageError, one_line
from ..layout import Layout, LayoutError
from ..units import format_count
from ..validation import validate
from .args import (
    Parser,
    add_device_args,
    add_model_args,
    at_least,
    configs_from_args,
    positive_list,
    setup_devices,
)

# --- parex run ----------------------------------------------------------------------------------

def cmd_run(args) -> int:
    from ..entry import measure
    from ..measure.report import measurement_report
    from ..measure.router import router_report

    if args.study == "long-sequence":  # the same table as `parex seqstudy`
        from ..studies.sequence import DEFAULT_LENGTHS, STUDY_MODES
        from .seqstudy import cmd_seqstudy

        return cmd_seqstudy(argparse.Namespace(
            model=args.model, devices=args.devices, platform=args.platform,
            lengths=args.lengths or ",".join(map(str, DEFAULT_LENGTHS)),
            modes=",".join(STUDY_MODES), global_batch=1, csv=None, chart=None))

    n = setup_devices(args, args.layout)
    model, train = configs_from_args(args)
    import jax

    layout = validate(Layout.parse(args.layout, n), model, train, n,
                      platform=jax.devices()[0].platform)

    m = measure(model, train, layout, devices=jax.devices()[:n], data=args.data,
                progress=not args.json, checkpoint=checkpoint_plan(args))
    print(m.dumps() if args.json else measurement_report(m, model.n_params))
    if m.checkpoint and not args.json:
        print(checkpoint_report(m.checkpoint, model, train, layout))
    if m.diloco and not args.json:
        from .lowcomm import diloco_report

        print(diloco_report(m.diloco))
    if m.moe and not args.json:
        print(router_report(m.moe))
    return 0


def checkpoint_plan(args):
    """The run's CheckpointPlan, or None; --every and --resume need --checkpoint."""
    from ..executor.checkpoint import CheckpointPlan

    if args.checkpoint is None:
        if args.resume:
            raise UsageError("parex run: --resume needs --checkpoint DIR (where the run was "
                             "saved)")
        return None
    return CheckpointPlan(Path(args.checkpoint), args.every, args.resume)


def checkpoint_report(block: dict, model, train, layout) -> str:
    """The checkpoint line: bytes per device against the predictor's (parameters + optimizer
    state, parex.predict on the reference CPU profile: bytes do not depend on the chip)."""
    from ..entry import predict
    from ..measure.report import human_bytes
    from ..units import format_seconds

    if layout.diloco:  # the replicas' states and the outer state: no one-step prediction
        predicted = ""
    else:
        p = predict(model, train, layout, "cpu-reference", convention="xla-cpu")
        memory = p.memory_bytes_per_device
        predicted = f" (predicted {human_bytes(memory['params'] + memory['optimizer'])})"
    resumed = (f"resumed after step {block['resumed_from_step']} · "
               if block["resumed_from_step"] is not None else "")
    blocking = block["save_blocking_s"]
    return (f"checkpoint   {block['directory']} · {resumed}{block['saves']} saves every "
            f"{block['every']} steps · {human_bytes(block['bytes_per_device'])}/device"
            f"{predicted} · save "
            f"{format_seconds(blocking) if blocking is not None else '-'} blocking, then "
            f"written in the background")


def add_run(sub) -> None:
    p = sub.add_parser("run", help="train one layout for real and report what XLA did")
    add_model_args(p)
    add_device_args(p)
    p.add_argument("--layout", default="dp",
                   help="e.g. data=2,tensor=4,zero=1,sp=on or a preset name (default dp)")
    p.add_argument("--steps", type=at_least(1), default=20)
    p.add_argument("--data", default="corpus", choices=["corpus", "synthetic"])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--checkpoint", default=None, metavar="DIR",
                   help="save the sharded train state, data position and losses in DIR "
                        "(Orbax, asynchronously)")
    p.add_argument("--every", type=at_least(1), default=10, metavar="N",
                   help="with --checkpoint: save after every N steps and the last (default 10)")
    p.add_argument("--resume", action="store_true",
                   help="with --checkpoint: continue from DIR's latest checkpoint, on this "
                        "layout (resharded when it differs)")
    p.add_argument("--study", choices=["long-sequence"], default=None,
                   help="instead of one layout, print the long-sequence study (see seqstudy)")
    p.add_argument("--lengths", type=positive_list, default=None,
                   help="sequence lengths for --study long-sequence")
    p.set_defaults(func=cmd_run)


# --- parex demo ---------------------------------------------------------------------------------

DEMO_LAYOUTS = ("dp", "zero1", "zero2", "fsdp", "tp", "tp_sp", "dp_tp", "fsdp_tp")


def cmd_demo(args) -> int:
    from ..entry import predict
    from ..machine import speed_changed
    from ..measure.report import comparison_table
    from ..setting import resolve

    n = setup_devices(args, None)
    model, train = configs_from_args(args)
    import jax

    from ..calibrate.local import ensure_local
    from .args import assumptions_line

    ensure_local()  # the predictions need this machine's calibration: measured on first use
    setting = resolve(model, train, Layout.preset("dp", n), "cpu-local")
    print(f"parex demo · {model.name} ({format_count(model.n_params)} parameters) · global batch "
          f"{setting.train.global_batch} × {setting.seq_len} tokens · {args.steps} steps · "
          f"{n} {jax.devices()[0].platform} devices")
    print(assumptions_line(setting.to_json()) + " (predictions; measured: the same program)\n")
    layouts = [Layout.preset(name, n) for name in DEMO_LAYOUTS]
    results, drift = demo_measurements(model, train, layouts, jax.devices()[:n])
    predictions = [predict(model, train, layout, "cpu-local") for layout in layouts]
    print()
    print(comparison_table(results, predictions))
    print("\nstep: measured median, the layouts' steps taken in turn; pred step: the analytic "
          "model with this machine's calibrated cpu-local profile.\nstate/dev: parameters + "
          "optimizer state per device (the step's arguments); memory/dev: arguments + outputs "
          "− donated + temporaries.\nCommunication is per device per step, read from the "
          "compiled HLO (the CPU compiler keeps all-reduces where a GPU would "
          "reduce-scatter).\nNext: `parex compare --layout dp_tp` for every field, `parex "
          "predict --model gpt3-175b ...` at scale, notebooks/ for the charts.")
    notice = drift is not None and speed_changed(drift)
    if notice:
        print(notice)
    return 0


def demo_measurements(model, train, layouts, devices) -> tuple[list, float | None]:
    """(the layouts' Measurements, how many times its calibrated time the calibration's block
    step takes now, or None). Every layout compiled first, then stepped in rotation, so that the
    machine's moments of load hit all alike (parex.measure.rotation), with the block step on as
    many devices as the calibration ran on in the same rotation (emulated CPU devices only: the
    calibration is theirs); where the layouts' states do not fit in memory together, one layout
    after another (and no drift)."""
    import jax
    from tqdm.auto import tqdm

    from ..calibrate.run import block_step, calibrated_block_seconds
    from ..entry import measure
    from ..hardware import load_chip
    from ..measure.compiled import fits_host
    from ..measure.rotation import measure_rotation
    from ..setting import EMULATED, platform_regime

    if not fits_host(model, layouts, devices):
        return [measure(model, train, layout, devices=devices)
                for layout in tqdm(layouts, desc="layouts")], None
    chip = load_chip("cpu-local")
    calibrated = chip.calibration.n_devices
    emulated = platform_regime(devices[0].platform) == EMULATED  # the profile's own machine
    probe = (block_step(calibrated),) if emulated and len(jax.devices()) >= calibrated else ()
    results, block = measure_rotation(model, train, layouts, devices=devices, progress=True,
                                      references=probe)
    return results, (block[0] / calibrated_block_seconds(chip) if block else None)


def add_demo(sub) -> None:
    p = sub.add_parser("demo", help="train the layout presets on an emulated mesh and compare")
    add_model_args(p)
    add_device_args(p)
    p.add_argument("--steps", type=at_least(1), default=10)
    p.set_defaults(func=cmd_demo)


def commands() -> list:
    """Each entry adds one subcommand; each group of commands is a module of this package."""
    from . import figure as cli_figure
    from . import launch as cli_launch
    from . import lowcomm as cli_lowcomm
    from . import plan as cli_plan
    from . import predict as cli_predict
    from . import seqstudy

    return [add_run, add_demo, *cli_predict.COMMANDS, seqstudy.add_seqstudy,
            *cli_plan.COMMANDS, *cli_lowcomm.COMMANDS, cli_launch.add_launch,
            *cli_figure.COMMANDS]


def main(argv: list[str] | None = None) -> int:
    """Run one command. Bad input (InputError, LayoutError) prints one line and returns 2; any
    other exception is a bug and propagates with its traceback (exit status 1)."""
    parser = Parser(prog="parex", description=__doc__.splitlines()[0])
    parser.set_defaults(run=main)  # `parex launch --cluster` runs its command through it
    sub = parser.add_subparsers(dest="command", required=True)
    for add in commands():
        add(sub)
    hold_notices()  # the machine's load notice after the output, never beside an error
    try:
        args = parser.parse_args(argv)
        status = args.func(args)
    except (LayoutError, InputError) as err:  # the message names the fix, in one whole line
        release_notices(show=False)
        text = one_line(str(err))
        print(text if isinstance(err, UsageError) else f"parex: {text}", file=sys.stderr)
        return 2
    finally:
        release_notices()  # (a no-op after bad input, whose notices were dropped)
    return status


if __name__ == "__main__":
    sys.exit(main())
