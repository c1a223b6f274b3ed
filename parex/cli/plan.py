"""`parex plan` and `parex sweep`: which layout to run, and measurements that survive failures.

    parex plan --model gpt3-175b --dtype bfloat16 --hardware a100-80gb --nodes 128 \
        --global-batch 1536 --top 5
    parex plan --model tiny --hardware cpu-local --global-batch 16 --verify
    parex sweep --model tiny --layout dp --layout data=2,tensor=4 --steps 5 --out runs.jsonl
    parex sweep --grid grid.toml --out runs.jsonl --resume --timeout 600
"""

from __future__ import annotations

import dataclasses
import json

from ..calibrate.local import ready
from ..config import FAMILIES, REMAT_POLICIES
from ..defaults import MODEL
from ..errors import InputError
from ..plan.rank import OBJECTIVES
from ..units import format_seconds
from ..precision import PRECISION_NAMES
from ..setting import RECIPE_NAMES
from .args import (DIMS, GLOBAL_BATCH_HELP, add_hardware_arg, at_least, choice_list, defaulted,
                   hardware_of, is_model_file, model_from_args, positive_number)

# --- parex plan ---------------------------------------------------------------------------------

def cmd_plan(args) -> int:
    from ..plan import plan
    from ..plan.names import model_named
    from ..plan.report import plan_json, plan_report

    from ..plan.names import cluster_of

    refuse_unused(args)
    if args.model not in FAMILIES and not is_model_file(args.model):
        model_named(args.model)  # an unknown name gets the nearest known one
    if args.cluster is not None:  # a heterogeneous cluster file: parex.hetero's search
        return plan_cluster(args)
    hardware = hardware_of(args)
    ready(hardware, progress=not args.json)
    cluster = cluster_of(hardware, args.nodes or 1)
    cap = None if args.memory_cap is None else args.memory_cap * 1e9
    remats = (args.remat,) if args.remat else REMAT_POLICIES
    results = []
    for name in (args.precision.split(",") if args.precision else [None]):
        args.precision = name  # each recipe its own search: its rates, bytes and memory
        model, train = model_from_args(args)
        results.append(plan(model, train.replace(remat=None), cluster, memory_cap=cap,
                            objective=args.objective, top=args.top, recipe=args.recipe,
                            convention=args.convention, dtype=args.dtype, remats=remats))
    result = _best_precision(results, args.json)
    if args.emit:  # the best row's options for another framework, instead of the report
        from .interop import plan_emitted

        print(plan_emitted(args.emit, result))
        return 0
    out = plan_json(result)
    if not args.json:
        print(plan_report(result, defaulted(args)))
    if args.objective == "time-to-train":  # the job sizes, failures included
        from .goodput import time_to_train_plan

        out["time_to_train"] = time_to_train_plan(args, result, show=not args.json)
    if args.allow_local:  # ranked beside, never picked: they change the optimisation
        from ..plan.local import local_alternatives, local_report

        out["local"] = local_alternatives(result, args.top)
        if not args.json:
            print()
            print(local_report(out["local"]))
    if args.verify:
        from ..plan.verify import verify, verify_report

        checked = verify(result, steps=args.steps or VERIFY_STEPS, out=args.verify_out,
                         progress=not args.json)
        out["verify"] = checked
        if not args.json:
            print()
            print(verify_report(checked))
    if args.json:
        print(json.dumps(out, indent=2, default=float))
    return 0


VERIFY_STEPS = 5  # steps per measured layout of --verify


def _best_precision(results: list, quiet: bool):
    """The plan of the precision whose best row wins the objective; with several precisions
    searched, one line per precision first (its best row's step time)."""
    if len(results) == 1:
        return results[0]
    column, sign = {"time": ("step_time_s", 1), "mfu": ("mfu", -1),
                    "memory": ("memory_total_bytes", 1)}[results[0].objective]

    def best(result):
        row = result.top[0] if result.top else None
        return (float("inf") if row is None else sign * result.columns[column][row]), row

    if not quiet:
        for result in results:
            score, row = best(result)
            where = "nothing fits" if row is None else (
                f"best {result.layout(row)}: {result.columns['step_time_s'][row]:.3f} s/step")
            print(f"precision {result.setting.train.precision:<14} {where}")
        print()
    return min(results, key=lambda r: best(r)[0])


def refuse_unused(args) -> None:
    """Flags this plan cannot use are errors that say why, never silently ignored."""
    if args.objective != "time-to-train" and (args.tokens is not None or args.price is not None):
        raise InputError("--tokens and --price size the run of --objective time-to-train; add "
                         "it or drop them")
    if not args.verify:
        for flag, value in (("--steps", args.steps), ("--verify-out", args.verify_out)):
            if value is not None:
                raise InputError(f"{flag} sets how --verify measures; add --verify or drop "
                                 f"{flag}")
    if args.cluster is None and args.zero is not None:
        raise InputError("--zero is the ZeRO stage between the pipelines of a --cluster plan; "
                         "on one kind of chip the search tries every ZeRO stage itself: add "
                         "--cluster FILE or drop --zero")
    if args.cluster is not None and args.allow_local:
        raise InputError("--allow-local ranks local pipelines on one kind of chip (--hardware);"
                         " the --cluster search has none: drop one of them")
    if args.cluster is not None:
        given = [f"--{k.replace('_', '-')}" for k in ("hardware", "nodes", "recipe",
                                                      "convention", "remat")
                 if getattr(args, k) is not None]
        if given:
            raise InputError(f"--cluster names its own chips and node counts and plans bf16 "
                             f"training with the mixed recipe on the gpu convention, searching "
                             f"every remat: drop {' '.join(given)}")


def plan_cluster(args) -> int:
    """parex.hetero's search, with the global batch defaulted as on any accelerator."""
    from ..cluster import load_hetero_cluster
    from ..defaults import default_global_batch
    from ..plan.names import model_named
    from .hetero import cmd_plan_cluster

    if args.global_batch is None:
        model, n = model_named(args.model), load_hetero_cluster(args.cluster).n_devices
        args.global_batch = default_global_batch(model, args.seq or model.seq_len, n, False)
    return cmd_plan_cluster(args)


def add_plan(sub) -> None:
    p = sub.add_parser("plan", help="rank every layout of a model on a cluster by the predictor")
    p.add_argument("--model", default=MODEL,
                   help="model preset, or a bare family (gpt, llama) with dims from the flags")
    add_hardware_arg(p)
    p.add_argument("--nodes", type=at_least(1), default=None,
                   help="nodes in the cluster (default 1)")
    p.add_argument("--cluster", default=None,
                   help="a cluster file (TOML, data/clusters/): plan across its groups of "
                        "mixed chips instead of --hardware/--nodes")
    p.add_argument("--global-batch", type=at_least(1), default=None, help=GLOBAL_BATCH_HELP)
    p.add_argument("--seq", type=at_least(1), default=None,
                   help="sequence length (default: the model's)")
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16"],
                   help="compute dtype (default: bfloat16 on an accelerator profile, the "
                   "preset's on cpu-local)")
    p.add_argument("--remat", default=None, choices=REMAT_POLICIES,
                   help="plan with this remat policy only (default: search every policy)")
    p.add_argument("--precision", default=None, type=choice_list(PRECISION_NAMES),
                   help="matmul precision recipe(s): one, or a comma list to search them all "
                        "and keep the best (e.g. bf16,fp8-delayed); default: the dtype's")
    for name, letter in DIMS:
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=None, help=letter)
    p.add_argument("--memory-cap", type=positive_number, default=None,
                   help="GB (1e9 bytes) per device a layout may use (default: the chip's HBM)")
    p.add_argument("--zero", type=int, default=None, choices=[0, 1, 3],
                   help="with --cluster: the ZeRO stage of the data parallelism between the "
                        "pipelines (1: optimizer state sharded, as HexiScale's FSDP runs; 3: "
                        "all state; default 0, a replica per pipeline)")
    p.add_argument("--objective", default="time", choices=OBJECTIVES,
                   help="rank by step time, MFU, memory per device, or time-to-train: the "
                   "cluster and its halves down to an eighth, failures and checkpoints "
                   "included (see --tokens)")
    from .goodput import add_run_length_args

    add_run_length_args(p, steps=False, tokens_help=" with --objective time-to-train "
                        "(default: 20 per parameter, Chinchilla)")
    p.add_argument("--top", type=int, default=5, help="layouts to print (default 5)")
    p.add_argument("--recipe", default=None, choices=RECIPE_NAMES,
                   help="bytes of model state: parex (fp32), mixed (ZeRO's 2 + 2 + 12), "
                   "mixed-fp32-grads (Megatron-LM's bf16: 2 + 4 + 12, gradients reduced in "
                   "fp32) or fsdp2 (torchtitan's: 4 + 4 + 8, gathered in bf16, reduced in "
                   "fp32); default mixed on an accelerator profile, parex on cpu-local")
    p.add_argument("--convention", default=None, choices=["gpu", "xla-cpu"])
    p.add_argument("--allow-local", action="store_true",
                   help="also rank local-learning pipelines (schedule=local) beside the "
                        "backprop layouts; they change the optimisation and are never picked")
    p.add_argument("--verify", action="store_true",
                   help="measure the top K and K random fitting layouts on the emulated mesh")
    p.add_argument("--steps", type=at_least(1), default=None,
                   help=f"steps per measured layout (--verify; default {VERIFY_STEPS})")
    p.add_argument("--verify-out", default=None,
                   help="JSONL store of the verify runs (default: a temporary file)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    from .interop import add_emit_arg

    add_emit_arg(p, "the top row the framework can express")
    p.set_defaults(func=cmd_plan, microbatch=None)


# --- parex sweep --------------------------------------------------------------------------------

def sweep_configs(args) -> list:
    from ..sweep import SweepConfig
    from ..sweep.grid import read_grid

    base = SweepConfig(model=args.model, layout="single", global_batch=args.global_batch,
                       microbatch=args.microbatch, seq_len=args.seq, steps=args.steps,
                       remat=args.remat, dtype=args.dtype, devices=args.devices, data=args.data)
    configs = read_grid(args.grid, base) if args.grid else []
    configs += [dataclasses.replace(base, layout=text) for text in args.layout]
    if not configs:
        raise InputError("nothing to sweep: give --layout (repeatable) or --grid FILE")
    return configs


def cmd_sweep(args) -> int:
    from ..sweep import run_sweep
    from .sweep_cluster import cmd_sweep_cluster, runs_here

    if not runs_here(args):  # --executor slurm, --dry-run, --status
        return cmd_sweep_cluster(args, sweep_configs, sweep_table)
    configs = sweep_configs(args)
    counts = run_sweep(configs, args.out, resume=args.resume, timeout=args.timeout,
                       retry_failed=args.retry_failed, progress=True)
    sweep_table(args.out, counts)
    return 0


def sweep_table(out, counts: dict | None = None) -> None:
    """The store's table: one row per config, each failure's whole line below it."""
    from ..measure.report import human_bytes, table
    from ..sweep import error_notes, load

    df = load(out)
    marks, notes = error_notes([None if r.status == "ok" else r.error for r in df.itertuples()])
    rows = [[r.layout, r.model, r.train_remat, r.status,
             format_seconds(r.step_time_s) if r.status == "ok" else "-",
             human_bytes(r.memory_total_bytes) if r.status == "ok" else "-", mark]
            for r, mark in zip(df.itertuples(), marks)]
    print(table(rows, ["layout", "model", "remat", "status", "step", "memory/dev", "error"]))
    if notes:  # each failure's whole line, below the table
        print("\n" + "\n".join(notes))
    done = ", ".join(f"{v} {k}" for k, v in (counts or {}).items() if v)
    print(f"\nsweep: {done + '; ' if done else ''}{len(df)} configs in {out} (parex.sweep.load "
          f"reads them)")


def add_sweep(sub) -> None:
    p = sub.add_parser("sweep", help="measure many configurations, each in its own process, "
                                     "into a resumable JSONL store")
    p.add_argument("--model", default="tiny", help="model preset (default tiny)")
    p.add_argument("--layout", action="append", default=[], help="a layout (repeatable)")
    p.add_argument("--grid", default=None, help="TOML file listing models, layouts or axis "
                                                "ranges, remat, microbatches, sequence lengths")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--out", required=True, help="JSONL store (appended, one record per line)")
    p.add_argument("--resume", action="store_true", help="skip configs already in --out")
    p.add_argument("--retry-failed", action="store_true",
                   help="with --resume, run again the configs whose record is a failure")
    p.add_argument("--timeout", type=float, default=None, help="seconds per configuration")
    p.add_argument("--global-batch", type=int, default=16)
    p.add_argument("--microbatch", type=int, default=None)
    p.add_argument("--seq", type=int, default=None)
    p.add_argument("--remat", default="none", choices=list(REMAT_POLICIES))
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16"])
    p.add_argument("--devices", type=int, default=None,
                   help="device count (default: what each layout uses)")
    p.add_argument("--data", default="corpus", choices=["corpus", "synthetic"])
    from .sweep_cluster import add_cluster_args

    add_cluster_args(p)  # --executor slurm, --dry-run, --status and the SLURM options
    p.set_defaults(func=cmd_sweep)


COMMANDS = [add_plan, add_sweep]
