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
from ..errors import InputError
from .args import DIMS, model_from_args

# --- parex plan ---------------------------------------------------------------------------------

def cmd_plan(args) -> int:
    from ..plan import plan
    from ..plan.names import model_named
    from ..plan.report import plan_json, plan_report

    if args.cluster is not None:  # a heterogeneous cluster file: parex.hetero's search
        from .hetero import cmd_plan_cluster

        return cmd_plan_cluster(args)
    if args.model not in FAMILIES:
        model_named(args.model)  # an unknown name gets the nearest known one
    model, train = model_from_args(args)
    cap = None if args.memory_cap is None else args.memory_cap * 1e9
    ready(args.hardware, progress=not args.json)
    result = plan(model, train, args.hardware, args.nodes, memory_cap=cap,
                  objective=args.objective, top=args.top, recipe=args.recipe,
                  convention=args.convention)
    out = plan_json(result)
    if not args.json:
        print(plan_report(result))
    if args.verify:
        from ..plan.verify import verify, verify_report

        checked = verify(result, steps=args.steps, out=args.verify_out, progress=not args.json)
        out["verify"] = checked
        if not args.json:
            print()
            print(verify_report(checked))
    if args.json:
        print(json.dumps(out, indent=2, default=float))
    return 0


def add_plan(sub) -> None:
    p = sub.add_parser("plan", help="rank every layout of a model on a cluster by the predictor")
    p.add_argument("--model", default="tiny",
                   help="model preset, or a bare family (gpt, llama) with dims from the flags")
    p.add_argument("--hardware", default="cpu-local", help="hardware profile (data/hardware/)")
    p.add_argument("--nodes", type=int, default=1, help="nodes in the cluster (default 1)")
    p.add_argument("--cluster", default=None,
                   help="a cluster file (TOML, data/clusters/): plan across its groups of "
                        "mixed chips instead of --hardware/--nodes")
    p.add_argument("--global-batch", type=int, default=16, help="sequences per step")
    p.add_argument("--seq", type=int, default=None, help="sequence length (default: the model's)")
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16"])
    for name, letter in DIMS:
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=None, help=letter)
    p.add_argument("--memory-cap", type=float, default=None,
                   help="GB (1e9 bytes) per device a layout may use (default: the chip's HBM)")
    p.add_argument("--objective", default="time", choices=["time", "mfu", "memory"])
    p.add_argument("--top", type=int, default=5, help="layouts to print (default 5)")
    p.add_argument("--recipe", default="parex", choices=["parex", "mixed"],
                   help="bytes of model state: parex (fp32) or mixed (ZeRO's 2 + 2 + 12)")
    p.add_argument("--convention", default=None, choices=["gpu", "xla-cpu"])
    p.add_argument("--verify", action="store_true",
                   help="measure the top K and K random fitting layouts on the emulated mesh")
    p.add_argument("--steps", type=int, default=5, help="steps per measured layout (--verify)")
    p.add_argument("--verify-out", default=None,
                   help="JSONL store of the verify runs (default: a temporary file)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_plan, microbatch=None, remat="none")


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
    from ..measure.report import human_bytes, table
    from ..sweep import load, run_sweep

    configs = sweep_configs(args)
    counts = run_sweep(configs, args.out, resume=args.resume, timeout=args.timeout,
                       retry_failed=args.retry_failed, progress=True)
    df = load(args.out)
    rows = [[r.layout, r.model, r.train_remat, r.status,
             f"{r.step_time_s * 1e3:.1f}" if r.status == "ok" else "-",
             human_bytes(r.memory_total_bytes) if r.status == "ok" else "-",
             "" if r.status == "ok" else str(r.error).splitlines()[-1][:60]]
            for r in df.itertuples()]
    print(table(rows, ["layout", "model", "remat", "status", "step ms", "memory/dev", "error"]))
    done = ", ".join(f"{v} {k}" for k, v in counts.items() if v)
    print(f"\nsweep: {done}; {len(df)} configs in {args.out} (parex.sweep.load reads them)")
    return 0


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
    p.set_defaults(func=cmd_sweep)


COMMANDS = [add_plan, add_sweep]
