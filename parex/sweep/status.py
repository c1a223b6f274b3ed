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

The scheduler: for SLURM array tasks `squeue` (what is queued or running now) and `sacct` (what
has finished, where accounting is on), whichever are on PATH; the job ids come from the store's
job log, so a new login shell needs no submitit handle. For submitit's local executor: whether
the task's process is still alive on this host.
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
ENDED = "ENDED"  # squeue answered for the array and no longer lists the task: it has left
# the queue (sacct, where accounting is on, says how it ended)


def array_tasks(job: str) -> list[str] | None:
    """The task ids a JobID field names: '12_3' -> ['12_3'], '12' -> ['12'], a pending range
    '12_[4-6,9%2]' -> ['12_4', '12_5', '12_6', '12_9'] (%2 is the array's throttle); None where
    the range cannot be read (cut short past SLURM_BITSTR_LEN: '12_[4-1...')."""
    base, _, index = job.partition("_")
    if not index.startswith("["):
        return [job]
    if not index.endswith("]"):
        return None
    tasks = []
    for part in index[1:-1].split("%")[0].split(","):
        first, _, last = part.partition("-")
        if not first.isdigit() or not (last or first).isdigit():
            return None
        tasks += [f"{base}_{i}" for i in range(int(first), int(last or first) + 1)]
    return tasks


def _parse(lines, sep: str | None) -> dict[str, str]:
    """{task id: state} from 'JobID<sep>State' lines; a range no one can read gives its
    array's state under 'BASE_*' (what its tasks not listed on their own are)."""
    out: dict[str, str] = {}
    for line in lines:
        job, state = (line.split(sep, 1) + ["", ""])[:2]  # sep None: any run of spaces
        job, state = job.strip(), (state.split() or [""])[0]  # "CANCELLED by 1000" -> CANCELLED
        if not job or not state:
            continue
        tasks = array_tasks(job)
        for task in tasks if tasks is not None else [job.split("_")[0] + "_*"]:
            out[task] = state
    return out


def parse_squeue(text: str) -> dict[str, str]:
    """`squeue -h -r -o "%i %T"`'s lines ('1080_2 RUNNING', '1080_[5-9%2] PENDING' without
    -r) as {task id: state}."""
    return _parse(text.splitlines(), None)


def parse_sacct(text: str) -> dict[str, str]:
    """`sacct -n -P -X -o JobID,State`'s lines ('1080_1|COMPLETED', '1080_3|CANCELLED by
    1000', '1080_[5-9]|PENDING') as {task id: state}."""
    return _parse(text.splitlines(), "|")


def _state_of(task: str, states: dict) -> str:
    return states.get(task) or states.get(task.split("_")[0] + "_*", "")


def _ask(argv) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None


def sacct_states(job_ids) -> dict[str, str]:
    """SLURM's state of each array task (e.g. '1234_5': 'RUNNING') from its accounting; {}
    where sacct is absent or fails. A task still pending shows in sacct only inside its
    array's range ('1234_[5-9%2]')."""
    return _sacct(job_ids) or {}


def _sacct(job_ids) -> dict[str, str] | None:
    job_ids = sorted(set(job_ids))
    if not job_ids or shutil.which("sacct") is None:
        return None
    done = _ask(["sacct", "-n", "-P", "-X", "-o", "JobID,State", "-j", ",".join(job_ids)])
    if done is None or done.returncode != 0:
        return None
    answer = parse_sacct(done.stdout)
    return {j: _state_of(j, answer) for j in job_ids if _state_of(j, answer)}


def squeue_states(job_ids) -> dict[str, str] | None:
    """Each array task's state in the queue now, one `squeue -h -r -j ARRAY -o "%i %T"` per
    array; a task of an array squeue answered for but no longer lists is ENDED (left the
    queue). None where squeue is absent or answered for no array."""
    job_ids = sorted(set(job_ids))
    if not job_ids or shutil.which("squeue") is None:
        return None
    out: dict[str, str] = {}
    answered = False
    for array in sorted({j.split("_")[0] for j in job_ids}):
        done = _ask(["squeue", "-h", "-r", "-j", array, "-o", "%i %T"])
        if done is None:
            continue
        if done.returncode != 0 and "invalid job id" not in done.stderr.lower():
            continue  # the controller did not answer: say nothing about this array
        # rc 0, or "Invalid job id": the whole array has left the queue (and been purged)
        answered = True
        listed = parse_squeue(done.stdout) if done.returncode == 0 else {}
        for j in job_ids:
            if j.split("_")[0] == array:
                out[j] = _state_of(j, listed) or ENDED
    return out if answered else None


NO_SCHEDULER = ("neither squeue nor sacct is on PATH here: running, pending and lost come from "
                "the store's claims and job log alone (run --status on the cluster's login node "
                "to ask SLURM)")


def slurm_states(job_ids) -> tuple[dict[str, str], str]:
    """({task id: state}, note): squeue's answer for what is still queued or running, sacct's
    for what has finished (squeue's ENDED says only that the task left the queue), and a line
    saying why SLURM could not be asked ('' where it answered)."""
    job_ids = sorted(set(job_ids))
    if not job_ids:
        return {}, ""
    queue, accounting = squeue_states(job_ids), _sacct(job_ids)
    if queue is None and accounting is None:
        here = [tool for tool in ("squeue", "sacct") if shutil.which(tool)]
        if not here:
            return {}, NO_SCHEDULER
        return {}, (f"{' and '.join(here)} did not answer: running, pending and lost come from "
                    f"the store's claims and job log alone")
    queue, accounting = queue or {}, accounting or {}
    merged = {}
    for j in job_ids:
        live = queue.get(j, "")
        state = live if live and live != ENDED else accounting.get(j) or live
        if state:
            merged[j] = state
    return merged, ""


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


def report(out, configs: dict | None = None) -> tuple[dict[str, dict], str]:
    """(states(out, configs), a line saying why SLURM could not be asked, or '')."""
    out = Path(out)
    latest: dict = {}
    for r in read_records(out):
        latest[r["key"]] = r
    submitted, claimed = jobs(out), claims(out)
    current = {}  # the job and claim of each key that no record has superseded
    for key in dict.fromkeys([*submitted, *claimed]):
        done_at = _finished(latest.get(key))
        job, claim = submitted.get(key), claimed.get(key)
        current[key] = (job if job and job["submitted_at"] > done_at else None,
                        claim if claim and claim["started_at"] > done_at else None)
    # ask SLURM only about tasks whose outcome the store does not hold yet
    asked = {str((claim or {}).get("job_id") or job["job_id"])
             for job, claim in current.values() if job and job.get("cluster") == "slurm"}
    slurm, note = slurm_states(asked)
    keys = list(dict.fromkeys([*latest, *submitted, *claimed, *(configs or {})]))
    result = {}
    for key in keys:
        record = latest.get(key)
        job, claim = current.get(key, (None, None))
        state, detail = _state(record, job, claim, slurm)
        if state == "new" and key not in (configs or {}):
            continue
        config = (record or {}).get("config") or (job or {}).get("config") or (
            dataclasses.asdict(configs[key]) if configs and key in configs else {})
        job_id = (claim or job or record or {}).get("job_id")
        result[key] = {"state": state, "detail": detail, "config": config, "job_id": job_id,
                       "scheduler": slurm.get(str(job_id), "")}
    return result, note


def states(out, configs: dict | None = None) -> dict[str, dict]:
    """{key: {state, detail, config, job_id, scheduler}} for every config of the store `out`
    (and of `configs`, a {key: SweepConfig}, those not in it yet as `new`)."""
    return report(out, configs)[0]


__all__ = ["ENDED", "LIVE", "RERUN", "array_tasks", "parse_sacct", "parse_squeue", "pid_alive",
           "report", "sacct_states", "slurm_states", "squeue_states", "states"]
