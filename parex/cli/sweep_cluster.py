"""`parex sweep --executor slurm`, `--dry-run` and `--status`: the sweep as a SLURM job array
(parex.sweep.executor), what it would submit, and where each configuration stands.

    parex sweep --grid grid.toml --out /shared/runs.jsonl --executor slurm --partition gpu \
        --time 30 --gpus-per-task 1 --max-running 16 --dry-run
    parex sweep --grid grid.toml --out /shared/runs.jsonl --executor slurm --slurm-config s.toml
    parex sweep --status --out /shared/runs.jsonl
    parex sweep --grid grid.toml --out /shared/runs.jsonl --executor slurm --resume
"""

from __future__ import annotations

from ..errors import InputError

SLURM_FLAGS = {"slurm_config": "--slurm-config", "partition": "--partition", "time": "--time",
               "max_running": "--max-running", "gpus_per_task": "--gpus-per-task",
               "cpus_per_task": "--cpus-per-task", "mem_gb": "--mem-gb", "wait": "--wait",
               "dry_run": "--dry-run"}


def add_cluster_args(p) -> None:
    """The sweep's executor flags (the SLURM ones also come from --slurm-config's TOML)."""
    from ..sweep.slurm import SlurmOptions

    p.add_argument("--executor", default="local",
                   help="local (default: one process after another on this machine) or slurm "
                        "(a submitit job array, one configuration per task)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the job array --executor slurm would submit, submit nothing")
    p.add_argument("--status", action="store_true",
                   help="print each configuration's state in --out (done, running, pending, "
                        "failed, lost) from the store and the scheduler, and exit")
    p.add_argument("--wait", action="store_true",
                   help="--executor slurm: wait for the array to end and print the table")
    p.add_argument("--slurm-config", default=None,
                   help="TOML file of SLURM options (keys: see parex.sweep.slurm)")
    p.add_argument("--partition", default=None, help="SLURM partition")
    p.add_argument("--time", type=int, default=None,
                   help=f"minutes per task (default {SlurmOptions.time})")
    p.add_argument("--max-running", type=int, default=None,
                   help="tasks of the array running at once (default: the cluster's cap)")
    p.add_argument("--gpus-per-task", type=int, default=None)
    p.add_argument("--cpus-per-task", type=int, default=None)
    p.add_argument("--mem-gb", type=float, default=None, help="memory per task, GB")


def runs_here(args) -> bool:
    """True for a plain local sweep; slurm-only flags on one are refused, never ignored."""
    if args.executor not in ("local", "slurm"):
        from ..errors import unknown

        raise InputError(unknown("executor", args.executor, ("local", "slurm")))
    if args.status:
        return False
    if args.executor == "local":
        given = [flag for name, flag in SLURM_FLAGS.items() if getattr(args, name)]
        if given:
            raise InputError(f"{' '.join(given)} set how --executor slurm submits the sweep; "
                             f"add --executor slurm or drop {' '.join(given)}")
        return True
    if args.retry_failed:
        raise InputError("--executor slurm: --resume already runs failed configs again; drop "
                         "--retry-failed")
    return False


def options_of(args):
    from ..sweep.slurm import read_options

    flags = {"partition": args.partition, "time": args.time, "max_running": args.max_running,
             "gpus_per_task": args.gpus_per_task, "cpus_per_task": args.cpus_per_task,
             "mem_gb": args.mem_gb}
    return read_options(args.slurm_config, flags)


def cmd_sweep_cluster(args, configs_of, results_table) -> int:
    """--status, --dry-run or a submission; `configs_of(args)` lists the configs and
    `results_table(out)` prints the local sweep's table (parex.cli.plan)."""
    if args.status:
        print(status_report(args.out, configs_of(args) if args.layout or args.grid else []))
        return 0
    from ..sweep.executor import submit_array, wait
    from ..sweep.status import states

    configs, options = configs_of(args), options_of(args)
    if args.dry_run:
        print(dry_run(configs, args.out, options, args.resume))
        return 0
    jobs, skipped = submit_array(configs, args.out, options, resume=args.resume,
                                 timeout=args.timeout)
    print(submitted_line(jobs, skipped, args.out, options.cluster))
    if args.wait and jobs:
        wait(jobs)
        results_table(args.out)
        lost = sum(s["state"] == "lost" for s in states(args.out).values())
        if lost:  # a task killed without its record: it is not in the table
            print(f"{lost} tasks ended without a record (killed or preempted past their "
                  f"requeues): --status lists them, --resume runs them again")
    return 0


def dry_run(configs, out, options, resume: bool) -> str:
    from ..measure.report import table
    from ..sweep import check_names
    from ..sweep.executor import check_devices, pending

    check_names(configs)
    check_devices(configs, options)
    todo, skipped = pending(configs, out, resume)
    if not todo:
        return f"nothing to submit: every configuration is done or running in {out}"
    rows = [[i, c.key(), c.model, c.layout, c.remat, c.steps] for i, c in enumerate(todo)]
    skip = "".join(f", {n} {state}" for state, n in skipped.items())
    return "\n".join([
        f"dry run: a job array of {len(todo)} tasks{skip and ' (skipped' + skip[1:] + ')'}, "
        f"one configuration each, through submitit's {options.cluster} executor:",
        *options.sbatch_lines(len(todo)), "",
        table(rows, ["task", "key", "model", "layout", "remat", "steps"]), "",
        f"each task runs `parex run --json` for its configuration and appends its record to "
        f"its own shard of {out} (parex.sweep.store); a preempted task or one at its time "
        f"limit is requeued (at most {options.max_requeue} time-limit requeues)."])


def submitted_line(jobs, skipped, out, cluster: str) -> str:
    skip = ", ".join(f"{n} {state}" for state, n in skipped.items())
    if not jobs:
        return f"nothing to submit: {skip} in {out}"
    ids = sorted({str(j.job_id).split("_")[0] for j in jobs})
    what = f"job array {ids[0]}" if len(ids) == 1 else f"jobs {', '.join(ids)}"
    skip = f"; skipped {skip}" if skip else ""
    return (f"submitted {len(jobs)} tasks as {what} ({cluster}){skip}. "
            f"`parex sweep --status --out {out}` shows where each stands; rerun with "
            f"--resume to run failed or lost ones again")


def status_report(out, configs) -> str:
    from ..measure.report import table
    from ..sweep import error_line
    from ..sweep.status import report

    now, note = report(out, {c.key(): c for c in configs})
    if not now:
        return f"{out}: no configurations yet"
    rows = [[s["config"].get("layout", "?"), s["config"].get("model", "?"), s["state"],
             s["job_id"] or "-", s["scheduler"] or "-", error_line(s["detail"])]
            for s in now.values()]
    counts: dict = {}
    for s in now.values():
        counts[s["state"]] = counts.get(s["state"], 0) + 1
    summary = ", ".join(f"{n} {state}" for state, n in counts.items())
    note = f"\n{note}" if note else ""  # SLURM could not be asked: say so, once
    return (table(rows, ["layout", "model", "state", "job", "scheduler", "detail"])
            + f"\n\n{out}: {len(now)} configurations: {summary}{note}")
