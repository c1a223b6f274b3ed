"""What a sweep asks SLURM for: the job array's options, from flags or a small TOML file.

    partition = "gpu"
    time = 60                 # minutes per task (SLURM's --time); a task past it is requeued
    max_running = 16          # tasks of the array running at once (--array=0-N%16)
    gpus_per_task = 1
    cpus_per_task = 8
    mem_gb = 64
    account = "proj"          # also: qos, constraint
    max_requeue = 3           # times a task that reaches its time limit is requeued
    setup = ["module load cuda", "source ~/venv/bin/activate"]   # shell lines before each task
    cluster = "slurm"         # "local": submitit's LocalExecutor (the array as local processes)
    [sbatch]                  # any other sbatch option, by its long name
    mail_type = "END"

One configuration is one task of the array. submitit asks SLURM to signal each task (USR2) 90 s
before its time limit or at preemption; the task then requeues itself (parex.sweep.executor).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import InputError, did_you_mean
from ..files import read_toml

CLUSTERS = ("slurm", "local")
SIGNAL_DELAY_S = 90  # submitit's warning before the time limit: time to requeue


@dataclass(frozen=True)
class SlurmOptions:
    """The job array's SLURM options (None: the cluster's default)."""

    partition: str | None = None  # SLURM partition (--partition)
    time: int = 60  # minutes per task (--time)
    max_running: int | None = None  # tasks running at once (the array's %K)
    gpus_per_task: int | None = None  # --gpus-per-task
    cpus_per_task: int | None = None  # --cpus-per-task
    mem_gb: float | None = None  # memory per task, GB (--mem)
    account: str | None = None  # --account
    qos: str | None = None  # --qos
    constraint: str | None = None  # --constraint
    max_requeue: int = 3  # requeues of a task that reaches its time limit
    setup: tuple[str, ...] = ()  # shell lines each task runs first
    sbatch: tuple[tuple[str, str], ...] = ()  # other sbatch options (name, value)
    cluster: str = "slurm"  # submitit's executor: slurm, or local processes

    def submitit_parameters(self) -> dict:
        """AutoExecutor.update_parameters's arguments (other clusters ignore the slurm_ ones)."""
        given = {"slurm_partition": self.partition, "slurm_array_parallelism": self.max_running,
                 "slurm_gpus_per_task": self.gpus_per_task, "cpus_per_task": self.cpus_per_task,
                 "mem_gb": self.mem_gb, "slurm_account": self.account, "slurm_qos": self.qos,
                 "slurm_constraint": self.constraint,
                 "slurm_setup": list(self.setup) or None,
                 "slurm_additional_parameters": dict(self.sbatch) or None}
        return {"timeout_min": self.time, "slurm_signal_delay_s": SIGNAL_DELAY_S} | {
            k: v for k, v in given.items() if v is not None}

    def sbatch_lines(self, n_tasks: int) -> list[str]:
        """The array's options as #SBATCH lines (what --dry-run prints)."""
        cap = f"%{self.max_running}" if self.max_running else ""
        opts = [("array", f"0-{n_tasks - 1}{cap}"), ("time", self.time),
                ("partition", self.partition), ("gpus-per-task", self.gpus_per_task),
                ("cpus-per-task", self.cpus_per_task),
                ("mem", f"{self.mem_gb:g}GB" if self.mem_gb else None),
                ("account", self.account), ("qos", self.qos), ("constraint", self.constraint),
                ("signal", f"USR2@{SIGNAL_DELAY_S}"),
                *((k.replace("_", "-"), v) for k, v in self.sbatch)]
        return [f"#SBATCH --{k}={v}" for k, v in opts if v is not None]


FIELDS = {f.name: f for f in dataclasses.fields(SlurmOptions)}
WHOLE = ("time", "max_running", "gpus_per_task", "cpus_per_task")  # ints >= 1
TEXT = ("partition", "account", "qos", "constraint", "cluster")


def _check(key: str, value, source: str) -> None:
    if key not in FIELDS:
        hint = did_you_mean(key, FIELDS)
        raise InputError(f"{source}: unknown SLURM option {key!r}; {hint + ' ' if hint else ''}"
                         f"use {', '.join(FIELDS)} (others go in an [sbatch] table)")
    bad = ((key in WHOLE and (not isinstance(value, int) or isinstance(value, bool)
                              or value < 1))
           or (key == "max_requeue" and (not isinstance(value, int) or value < 0))
           or (key == "mem_gb" and (not isinstance(value, (int, float)) or value <= 0))
           or (key in TEXT and not isinstance(value, str))
           or (key == "setup" and not (isinstance(value, list)
                                       and all(isinstance(x, str) for x in value)))
           or (key == "sbatch" and not isinstance(value, dict)))
    if bad:
        kind = {"setup": "a list of shell lines", "sbatch": "a table of sbatch options",
                "mem_gb": "a number of GB > 0", "max_requeue": "a whole number >= 0"}.get(
            key, "a whole number >= 1" if key in WHOLE else "a string in quotes")
        raise InputError(f"{source}: {key}={value!r}: {key} takes {kind}")
    if key == "cluster" and value not in CLUSTERS:
        raise InputError(f"{source}: cluster={value!r}: use one of {', '.join(CLUSTERS)}")


def slurm_options(spec: dict, source: str = "SLURM options") -> SlurmOptions:
    """SlurmOptions from a parsed table (a TOML file's, or the flags'); bad keys or values
    raise InputError naming `source`."""
    for key, value in spec.items():
        _check(key, value, source)
    values = dict(spec)
    if "setup" in values:
        values["setup"] = tuple(values["setup"])
    if "sbatch" in values:
        values["sbatch"] = tuple((str(k), str(v)) for k, v in values["sbatch"].items())
    return SlurmOptions(**values)


def read_options(path, overrides: dict | None = None) -> SlurmOptions:
    """A TOML file's options (None: none), with `overrides` (from flags) on top."""
    spec: dict = {}
    if path is not None:
        spec = read_toml(path, "SLURM options", "see parex.sweep.slurm for the keys")
    spec |= {k: v for k, v in (overrides or {}).items() if v is not None}
    return slurm_options(spec, f"SLURM options {path}" if path else "SLURM options")


__all__ = ["CLUSTERS", "SlurmOptions", "read_options", "slurm_options"]
