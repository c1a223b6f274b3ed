"""The shared store of cluster sweeps: many writers at once lose and duplicate nothing, readers
see the file and its shards as one store ordered by finish time, and `--status` / `--resume`
read each configuration's state from records, claims, the job log and the scheduler."""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from parex.sweep import SweepConfig, append_record, latest
from parex.sweep.executor import pending
from parex.sweep.status import sacct_states, states
from parex.sweep.store import (
    append_shard,
    claim,
    claims,
    log_jobs,
    read_records,
    release,
    side_dir,
)

ROOT = Path(__file__).resolve().parents[2]
WRITER = textwrap.dedent("""
    import os, sys, time
    from parex.sweep.store import append_shard, writer_name
    store, tag, n, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    open(f"{go}-{tag}", "w").close()
    while not os.path.exists(go):  # both writers start appending at the same moment
        time.sleep(0.001)
    me = writer_name()
    for i in range(n):
        append_shard(store, {"key": f"{tag}-{i}", "status": "ok", "started_at": time.time(),
                             "elapsed_s": 0.0, "pad": "x" * 3000}, me)
""")


def test_two_writers_at_once_lose_and_duplicate_nothing(tmp_path):
    """Two processes append to one store at the same time (records larger than a pipe's atomic
    write, so interleaved bytes would tear lines): every record arrives, each once, whole."""
    store, n, go = tmp_path / "runs.jsonl", 150, tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(store), tag, str(n), str(go)],
                              env=dict(os.environ, PYTHONPATH=str(ROOT)))
             for tag in ("a", "b")]
    deadline = time.monotonic() + 120
    while not all(Path(f"{go}-{tag}").exists() for tag in "ab"):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.01)
    go.touch()
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    keys = [r["key"] for r in read_records(store)]
    assert len(keys) == 2 * n and len(set(keys)) == 2 * n
    assert set(keys) == {f"{t}-{i}" for t in "ab" for i in range(n)}
    shards = list((side_dir(store) / "shards").glob("*.jsonl"))
    assert len(shards) == 2  # one per writer: no file has two writers
    assert all(len(line) > 3000 for s in shards for line in s.read_text().splitlines())


def test_file_and_shards_read_as_one_store_in_finish_order(tmp_path):
    store = tmp_path / "runs.jsonl"
    append_record(store, {"key": "a", "status": "error", "started_at": 10.0, "elapsed_s": 1.0})
    append_shard(store, {"key": "a", "status": "ok", "started_at": 20.0, "elapsed_s": 1.0}, "w1")
    append_shard(store, {"key": "b", "status": "ok", "started_at": 5.0, "elapsed_s": 1.0}, "w2")
    with open(side_dir(store) / "shards" / "w2.jsonl", "a") as f:
        f.write('{"key": "c", "sta')  # a task killed mid-write
    assert [(r["key"], r["status"]) for r in read_records(store)] == [
        ("b", "ok"), ("a", "error"), ("a", "ok")]
    assert [r["status"] for r in latest(read_records(store))] == ["ok", "ok"]
    append_shard(store, {"key": "c", "status": "ok", "started_at": 30.0, "elapsed_s": 0.0}, "w2")
    assert [r["key"] for r in read_records(store)][-1] == "c"  # the torn line was cut first


def _record(config, status, at):
    return {"key": config.key(), "config": config.__dict__, "status": status, "error": None
            if status == "ok" else f"{status}: it broke", "measurement": None,
            "started_at": at, "elapsed_s": 1.0}


CONFIGS = [SweepConfig("tiny", layout, global_batch=4, steps=2)
           for layout in ("data=2", "tensor=2", "fsdp=2", "seq=2", "data=2,tensor=2")]


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True)
    return int(done.stdout)


def test_status_and_resume_from_records_claims_and_local_processes(tmp_path):
    """done, failed, invalid from records; running (a live process) and lost (a dead one)
    from claims; resume re-runs failed, lost and new, never done, invalid or running."""
    store = tmp_path / "runs.jsonl"
    ok, failed, invalid, running, lost = CONFIGS
    append_record(store, _record(ok, "ok", 1.0))
    append_shard(store, _record(failed, "timeout", 2.0), "w")
    append_shard(store, _record(invalid, "invalid", 3.0), "w")
    claim(store, running.key(), None)  # this test's own process: alive
    claim(store, lost.key(), None)
    info = json.loads((side_dir(store) / "claims" / f"{lost.key()}.json").read_text())
    info["pid"] = _dead_pid()
    (side_dir(store) / "claims" / f"{lost.key()}.json").write_text(json.dumps(info))
    new = SweepConfig("tiny", "fsdp=4", global_batch=4, steps=2)
    now = states(store, {c.key(): c for c in [*CONFIGS, new]})
    assert {now[c.key()]["state"] for c in (ok, failed, invalid, running, lost, new)} == {
        "done", "failed", "invalid", "running", "lost", "new"}
    assert [now[c.key()]["state"] for c in CONFIGS] == [
        "done", "failed", "invalid", "running", "lost"]
    assert "timeout: it broke" in now[failed.key()]["detail"]
    todo, skipped = pending([*CONFIGS, new], store, resume=True)
    assert {c.layout for c in todo} == {failed.layout, lost.layout, new.layout}
    assert skipped == {"done": 1, "invalid": 1, "running": 1}
    with pytest.raises(ValueError, match="--resume"):
        pending(CONFIGS, store, resume=False)
    release(store, running.key())
    assert running.key() not in claims(store)


FAKE_SACCT = textwrap.dedent("""\
    #!/bin/sh
    echo "900_0|RUNNING"
    echo "900_1|CANCELLED by 1000"
    echo "900_[2-3%1]|PENDING"
""")


def test_status_asks_slurm_through_sacct(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sacct").write_text(FAKE_SACCT)
    (bin_dir / "sacct").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert sacct_states(["900_0", "900_1", "900_3", "901_0"]) == {
        "900_0": "RUNNING", "900_1": "CANCELLED", "900_3": "PENDING"}
    store = tmp_path / "runs.jsonl"
    a, b, c, d = CONFIGS[:4]
    log_jobs(store, [{"key": x.key(), "config": x.__dict__, "job_id": f"900_{i}",
                      "cluster": "slurm", "host": "login1", "submitted_at": 1.0}
                     for i, x in enumerate((a, b, c, d))])
    claim(store, a.key(), "900_0")
    append_shard(store, _record(d, "ok", 5.0), "w")  # finished after it was submitted
    # sacct does not know 901_*: a claim younger than the time limit runs, an older one is lost
    young, old = CONFIGS[4], SweepConfig("tiny", "fsdp=4", global_batch=4, steps=2)
    log_jobs(store, [{"key": x.key(), "config": x.__dict__, "job_id": f"901_{i}",
                      "cluster": "slurm", "host": "login1", "time_min": 10,
                      "submitted_at": 1.0} for i, x in enumerate((young, old))])
    claim(store, young.key(), "901_0")
    claim(store, old.key(), "901_1")
    path = side_dir(store) / "claims" / f"{old.key()}.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"started_at": time.time() - 1200}))
    now = states(store)
    assert [now[x.key()]["state"] for x in (a, b, c, d, young, old)] == [
        "running", "lost", "pending", "done", "running", "lost"]
    assert now[c.key()]["scheduler"] == "PENDING"
    assert "not confirmed" in now[young.key()]["detail"]
    assert [r["config"]["layout"] for r in read_records(store)] == [d.layout]
