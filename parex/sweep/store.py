"""The sweep's results store: one JSONL file, plus one shard per writer that other machines add.

    runs.jsonl                       the local sweep appends here (one writer: `parex sweep`)
    runs.jsonl.d/shards/*.jsonl      each cluster task writes its own shard (one writer each)
    runs.jsonl.d/claims/KEY.json     a task that has started and not yet written its record
    runs.jsonl.d/jobs.jsonl          what was submitted: key, job id, scheduler, time

`read_records(path)` merges the file and every shard, ordered by when each record finished, so
readers (`load`, `latest`, `--resume`, `--status`, `plan --verify`) see one store.

Why shards and not one file under a lock: on a shared filesystem, O_APPEND is atomic only on
a local disk (an NFS client computes the append offset from its own cached file size, so two
hosts can write over each other), and fcntl/flock locks depend on the mount (NFSv3 needs lockd;
Lustre and GPFS mounts often run with locking off or node-local), which fails silently. A shard
has exactly one writer, so it needs no lock on any filesystem: nothing is lost and nothing is
written twice. A writer's name is unique (host, process id, a random suffix), so a requeued or
resumed task never shares a shard with an earlier attempt. Lines are written whole, flushed and
fsynced; a line torn by a kill is skipped on read and cut before the next append.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from pathlib import Path


def side_dir(path) -> Path:
    """The folder beside the store that holds its shards, claims and job log."""
    path = Path(path)
    return path.parent / (path.name + ".d")


def _read_lines(path: Path) -> list[dict]:
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by a kill mid-write
    return records


def _finished_at(record: dict) -> float:
    """When a record was written (by its host's clock: a re-run of a key comes minutes later,
    far past a cluster's clock skew); records without times keep their place at the front."""
    return record.get("started_at", 0.0) + record.get("elapsed_s", 0.0)


def read_records(path) -> list[dict]:
    """Every whole record in the store and its shards, in the order they finished (a torn last
    line is skipped)."""
    path = Path(path)
    records = _read_lines(path) if path.exists() else []
    shards = side_dir(path) / "shards"
    if shards.is_dir():
        for shard in sorted(shards.glob("*.jsonl")):
            records += _read_lines(shard)
        records.sort(key=_finished_at)  # stable: one file's records stay in their order
    return records


def repair_tail(path) -> None:
    """Cut a last line that a kill left without its newline, so appends start on a new line."""
    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if not data.endswith(b"\n"):
        with open(path, "r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)
            os.fsync(f.fileno())


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def append_record(path, record: dict) -> None:
    """One line, flushed and fsynced before returning (one writer per file: see above)."""
    line = json.dumps(record, sort_keys=True) + "\n"
    new = not Path(path).exists()
    with open(path, "a") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())
    if new:  # make the file's own directory entry durable too
        _fsync_dir(Path(path).resolve().parent)


def writer_name() -> str:
    """A name no other writer has: host, process id and a random suffix."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def shard_path(path, writer: str) -> Path:
    shards = side_dir(path) / "shards"
    shards.mkdir(parents=True, exist_ok=True)
    return shards / f"{writer}.jsonl"


def append_shard(path, record: dict, writer: str) -> None:
    """Append `record` to this writer's own shard of the store `path`."""
    shard = shard_path(path, writer)
    repair_tail(shard)
    append_record(shard, record)


# --- claims: which configs a task is measuring now ----------------------------------------------

def claim(path, key: str, job_id: str | None) -> dict:
    """Say that this process measures `key` now (written whole: a temporary file renamed)."""
    claims = side_dir(path) / "claims"
    claims.mkdir(parents=True, exist_ok=True)
    info = {"key": key, "job_id": job_id, "host": socket.gethostname(), "pid": os.getpid(),
            "started_at": time.time()}
    tmp = claims / f".{key}.{uuid.uuid4().hex[:8]}"
    tmp.write_text(json.dumps(info))
    os.replace(tmp, claims / f"{key}.json")
    return info


def release(path, key: str) -> None:
    (side_dir(path) / "claims" / f"{key}.json").unlink(missing_ok=True)


def claims(path) -> dict[str, dict]:
    """The open claims by key (a claim a killed task left behind stays until its key is run)."""
    folder = side_dir(path) / "claims"
    out = {}
    for file in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            info = json.loads(file.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        out[info["key"]] = info
    return out


# --- the job log ---------------------------------------------------------------------------------

def log_jobs(path, entries: list[dict]) -> None:
    """Append what was submitted (key, job id, scheduler) to the store's job log."""
    log = side_dir(path) / "jobs.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as f:
        f.write("".join(json.dumps(e, sort_keys=True) + "\n" for e in entries))
        f.flush()
        os.fsync(f.fileno())


def jobs(path) -> dict[str, dict]:
    """The latest submission of each key."""
    log = side_dir(path) / "jobs.jsonl"
    return {e["key"]: e for e in _read_lines(log)} if log.exists() else {}


__all__ = ["append_record", "append_shard", "claim", "claims", "jobs", "log_jobs",
           "read_records", "release", "repair_tail", "side_dir", "writer_name"]
