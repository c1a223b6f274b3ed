"""A sweep as a SLURM job array through submitit: one configuration per task, each task's record
in its own shard of the store (parex.sweep.store), requeued when preempted or out of time.

    options = read_options("slurm.toml", {"partition": "gpu", "time": 30})
    jobs = submit_array(configs, "runs.jsonl", options, timeout=600)   # returns at once
    wait(jobs)                                                         # optional

Each task runs the same `parex run --json` child as a local sweep (parex.sweep.run_config), so a
crash or a timeout is a record, not a lost task. A task first claims its key (the store's
claims/), then appends its record to its shard and drops the claim; a task killed in between
leaves the claim, which `--status` reports as lost and `--resume` runs again. When SLURM (or the
local executor) signals a task before its time limit or at preemption, submitit calls
`Task.checkpoint`, which requeues the same task: the measuring child is stopped with it and the
configuration starts over (a measurement of a few steps has nothing worth saving midway).
"""

from __future__ import annotations

import dataclasses
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from . import SweepConfig, check_names, run_config
from .slurm import SlurmOptions
from .status import RERUN, states
from .store import append_shard, claim, log_jobs, release, side_dir, writer_name


@dataclass
class Task:
    """One task of the array: measure `config` with `argv` and add its record to `store`."""

    config: SweepConfig
    store: str  # absolute path of the store, on a filesystem every node sees
    argv: list[str]  # the measuring child's command, made where the array was submitted
    timeout: float | None  # seconds the child may run

    def __call__(self) -> str:
        job_id = _job_id()
        key = self.config.key()
        claim(self.store, key, job_id)
        record = run_config(self.config, self.timeout, lambda _: self.argv)
        record |= {"job_id": job_id, "host": socket.gethostname()}
        append_shard(self.store, record, writer_name())
        release(self.store, key)
        return record["status"]

    def checkpoint(self, *args, **kwargs):
        """submitit calls this at preemption or near the time limit: run this task again."""
        import submitit

        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


def _job_id() -> str | None:
    try:
        import submitit

        return str(submitit.JobEnvironment().job_id)
    except (ImportError, RuntimeError, KeyError):
        return None


def pending(configs, out, resume: bool) -> tuple[list[SweepConfig], dict]:
    """The configs to submit and how many of the others are done or running. Without `resume`
    a store that already holds results is refused; with it, configs whose latest record is a
    failure (error, timeout) or that were lost (killed, preempted past requeue) run again."""
    out = Path(out)
    unique = list({c.key(): c for c in configs}.values())
    now = states(out, {c.key(): c for c in unique})
    if any(s["state"] != "new" for s in now.values()) and not resume:
        raise InputError(f"{out} already holds results: pass --resume to continue that sweep "
                         f"(done and running configs are skipped), or choose another --out")
    todo = [c for c in unique if now.get(c.key(), {"state": "new"})["state"] in RERUN]
    skipped: dict = {}
    for c in unique:
        if c not in todo:
            state = now[c.key()]["state"]
            skipped[state] = skipped.get(state, 0) + 1
    return todo, skipped


def check_devices(configs, options: SlurmOptions) -> None:
    """Each task measures on its own GPUs: a layout needing more than a task gets is refused."""
    if not options.gpus_per_task:
        return  # no GPUs asked for: each task emulates its layout's devices on its CPU
    need = max(configs, key=lambda c: c.n_devices())
    if need.n_devices() > options.gpus_per_task:
        raise InputError(f"layout {need.layout} uses {need.n_devices()} devices but each task "
                         f"gets {options.gpus_per_task} GPUs: ask for gpus_per_task = "
                         f"{need.n_devices()}, or sweep layouts of at most "
                         f"{options.gpus_per_task} devices")


def executor_of(out, options: SlurmOptions):
    """submitit's executor for the store `out` (its logs in the store's side folder)."""
    try:
        import submitit
    except ImportError:
        raise InputError("--executor slurm needs submitit: pip install -e '.[cluster]' (or "
                         "pip install submitit), or use --dry-run to see the array") from None
    folder = side_dir(out) / "submitit"
    try:
        executor = submitit.AutoExecutor(folder=folder, cluster=options.cluster,
                                         slurm_max_num_timeout=options.max_requeue)
    except RuntimeError as err:  # no srun / sbatch on this machine
        raise InputError(f"no SLURM on this machine ({err}): submit from the cluster's login "
                         f"node, or use --dry-run to see the job array") from None
    executor.update_parameters(name="parex-sweep", **options.submitit_parameters())
    return executor


def submit_array(configs, out, options: SlurmOptions, *, resume: bool = False,
                 timeout: float | None = None, argv_of=SweepConfig.argv) -> tuple[list, dict]:
    """Submit one task per config still to run; returns (submitit jobs, skipped counts)."""
    out = Path(out).resolve()
    check_names(configs)
    check_devices(configs, options)
    todo, skipped = pending(configs, out, resume)
    if not todo:
        return [], skipped
    executor = executor_of(out, options)
    with executor.batch():
        jobs = [executor.submit(Task(c, str(out), argv_of(c), timeout)) for c in todo]
    now = time.time()
    log_jobs(out, [{"key": c.key(), "config": dataclasses.asdict(c), "job_id": str(j.job_id),
                    "cluster": options.cluster, "host": socket.gethostname(),
                    "time_min": options.time, "submitted_at": now}
                   for c, j in zip(todo, jobs)])
    return jobs, skipped


def wait(jobs, poll_s: float = 1.0) -> None:
    """Until every job has ended (its record, if it wrote one, is in the store)."""
    while not all(j.done() for j in jobs):
        time.sleep(poll_s)


__all__ = ["Task", "check_devices", "executor_of", "pending", "submit_array", "wait"]
