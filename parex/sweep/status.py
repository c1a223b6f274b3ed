"""Where each configuration of a sweep stands, from the store and, where it can be asked, the
scheduler: `parex sweep --status`.

    done      its latest record is ok
    invalid   its latest record says the layout cannot run (never re-run)
    failed    its latest record is an error or a timeout (--resume on SLURM runs it again)
    running   a task has claimed it and the scheduler says the task is alive (or cannot say,
              and the claim is younger than the task's time limit)
    pending   submitted, not started, the job still queued (or the scheduler cannot say)
    lost      claimed or submitted, but the task is gone without a record: killed, preempted
              past its requeues, cancelled (--resume runs it again)

The scheduler: SLURM's `sacct` for array tasks, where it is on PATH; for submitit's local
executor, whether the task's process is still alive on this host.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from .store import claims, jobs, read_records

RERUN = ("new", "failed", "lost")  # what --resume submits again
LIMIT_MARGIN_S = 300  # slack past a task's time limit before an unconfirmed claim is lost
LIVE = {"PENDING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED", "CONFIGURING",
        "COMPLETING", "REQUEUE_HOLD", "REQUEUE_FED", "SIGNALING", "STAGE_OUT"}


def sacct_states(job_ids) -> dict[str, str]:
    """SLURM's state of each array task (e.g. '1234_5': 'RUNNING'); {} where sacct is absent or
    fails. A task still pending shows in sacct only inside its array's range ('1234_[5-9%2]')."""
    job_ids = sorted(set(job_ids))
    if not job_ids or shutil.which("sacct") is None:
        return {}
    try:
        done = subprocess.run(["sacct", "-n", "-P", "-X", "-o", "JobID,State", "-j",
                               ",".join(job_ids)], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if done.returncode != 0:
        return {}
    exact, ranges = {}, {}
    for line in done.stdout.splitlines():
        job, _, state = line.partition("|")
        state = state.split(" ")[0].strip()  # "CANCELLED by 1000" -> CANCELLED
        if "[" in job:
            ranges[job.split("_")[0]] = state
        elif job:
            exact[job] = state
    return {j: exact.get(j) or ranges.get(j.split("_")[0], "") for j in job_ids
            if exact.get(j) or ranges.get(j.split("_")[0])}


def pid_alive(pid: int) -> bool:
    """Whether process `pid` runs on this host (a zombie, ended but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _finished(record: dict | None) -> float:
    return -1.0 if record is None else record.get("started_at", 0) + record.get("elapsed_s", 0)


def _alive(job: dict | None, claimed: dict | None, slurm: dict) -> bool | None:
    """True / False as the scheduler says; None where nothing can say."""
    job_id = (claimed or {}).get("job_id") or (job or {}).get("job_id")
    if job and job.get("cluster") == "slurm":
        state = slurm.get(str(job_id))
        return None if not state else state in LIVE
    here = socket.gethostname()
    if claimed and claimed.get("host") == here:
        return pid_alive(int(claimed["pid"]))
    if job and job.get("host") == here and str(job_id).isdigit():
        return pid_alive(int(job_id))  # the local executor's job id is its process id
    return None


def _outlived(job: dict | None, claimed: dict) -> bool:
    """A claim older than its task's time limit (plus a margin): SLURM has ended that task
    (a requeued task claims again, with a new time)."""
    limit = (job or {}).get("time_min")
    return bool(limit) and time.time() - claimed["started_at"] > 60 * limit + LIMIT_MARGIN_S


def _state(record, job, claimed, slurm) -> tuple[str, str]:
    if claimed is not None:
        alive = _alive(job, claimed, slurm)
        if alive is None and _outlived(job, claimed):
            return "lost", "its claim is older than the task's time limit"
        return ("lost", "its task ended without a record") if alive is False else (
            "running", "" if alive else "not confirmed by a scheduler")
    if job is not None:
        alive = _alive(job, None, slurm)
        return ("lost", "its job ended before it started") if alive is False else (
            "pending", "" if alive else "not confirmed by a scheduler")
    if record is None:
        return "new", ""
    status = record["status"]
    return ({"ok": "done", "invalid": "invalid"}.get(status, "failed"),
            record.get("error") or "" if status != "ok" else "")


def states(out, configs: dict | None = None) -> dict[str, dict]:
    """{key: {state, detail, config, job_id, scheduler}} for every config of the store `out`
    (and of `configs`, a {key: SweepConfig}, those not in it yet as `new`)."""
    out = Path(out)
    latest: dict = {}
    for r in read_records(out):
        latest[r["key"]] = r
    submitted, claimed = jobs(out), claims(out)
    slurm = sacct_states(j["job_id"] for j in submitted.values() if j.get("cluster") == "slurm")
    keys = list(dict.fromkeys([*latest, *submitted, *claimed, *(configs or {})]))
    result = {}
    for key in keys:
        record = latest.get(key)
        job = submitted.get(key)
        job = job if job and job["submitted_at"] > _finished(record) else None
        claim = claimed.get(key)
        claim = claim if claim and claim["started_at"] > _finished(record) else None
        state, detail = _state(record, job, claim, slurm)
        if state == "new" and key not in (configs or {}):
            continue
        config = (record or {}).get("config") or (job or {}).get("config") or (
            dataclasses.asdict(configs[key]) if configs and key in configs else {})
        job_id = (claim or job or record or {}).get("job_id")
        result[key] = {"state": state, "detail": detail, "config": config, "job_id": job_id,
                       "scheduler": slurm.get(str(job_id), "")}
    return result


__all__ = ["LIVE", "RERUN", "pid_alive", "sacct_states", "states"]
