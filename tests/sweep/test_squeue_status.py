"""`parex sweep --status` asks SLURM without submitit's job handles: `squeue` for what is queued
or running, `sacct` for what finished, merged with the store's records; one line when neither
can be asked. The parsers read text in the formats the squeue and sacct man pages document;
the whole path runs against stand-in `squeue` / `sacct` programs on PATH (no SLURM needed)."""

import textwrap

import pytest

from parex.cli.main import main
from parex.sweep import SweepConfig
from parex.sweep.status import (
    ENDED,
    NO_SCHEDULER,
    array_tasks,
    parse_sacct,
    parse_squeue,
    report,
    slurm_states,
)
from parex.sweep.store import append_shard, claim, log_jobs

CONFIGS = [SweepConfig("tiny", layout, global_batch=4, steps=2)
           for layout in ("data=2", "tensor=2", "fsdp=2", "seq=2", "data=2,tensor=2")]

# squeue(1): "%i Job or job step id. In the case of job arrays, the job ID format will be of the
# form <base_job_id>_<index>"; "%T Job state in extended form"; pending tasks of an array show
# as one range unless -r (--array) lists one per line; %N in the range is the array's throttle.
SQUEUE_DOC = """\
1080_[5-7,9%4] PENDING
1080_1 RUNNING
1080_2 COMPLETING
1081 RUNNING
1082_[3-10... PENDING
"""
# sacct(1) with -n -P -X -o JobID,State: '|'-separated, one allocation per line; a cancelled
# job's state carries who cancelled it ("CANCELLED by 1000").
SACCT_DOC = """\
1080_0|COMPLETED
1080_3|CANCELLED by 1000
1080_4|TIMEOUT
1080_[5-7,9%4]|PENDING
1081|RUNNING
"""


def test_parsers_read_the_documented_formats():
    assert array_tasks("1080_[5-7,9%4]") == ["1080_5", "1080_6", "1080_7", "1080_9"]
    assert array_tasks("1080_2") == ["1080_2"] and array_tasks("1081") == ["1081"]
    assert array_tasks("1082_[3-10...") is None  # cut short past SLURM_BITSTR_LEN
    assert parse_squeue(SQUEUE_DOC) == {
        "1080_5": "PENDING", "1080_6": "PENDING", "1080_7": "PENDING", "1080_9": "PENDING",
        "1080_1": "RUNNING", "1080_2": "COMPLETING", "1081": "RUNNING", "1082_*": "PENDING"}
    assert parse_sacct(SACCT_DOC) == {
        "1080_0": "COMPLETED", "1080_3": "CANCELLED", "1080_4": "TIMEOUT", "1080_5": "PENDING",
        "1080_6": "PENDING", "1080_7": "PENDING", "1080_9": "PENDING", "1081": "RUNNING"}
    assert parse_squeue("\n  \n") == {} and parse_sacct("") == {}


# Answers for array 900 as squeue prints them (pending tasks as one range, as without -r);
# array 901 has left the queue and been purged: squeue says "Invalid job id" and exits 1.
FAKE_SQUEUE = textwrap.dedent("""\
    #!/bin/sh
    echo "$@" >> "${0%/*}/squeue.calls"
    case "$*" in
      *"-j 900 "*) echo "900_0 RUNNING"; echo "900_[2-3%1] PENDING" ;;
      *) echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1 ;;
    esac
""")
FAKE_SACCT = textwrap.dedent("""\
    #!/bin/sh
    echo "900_1|CANCELLED by 1000"
""")


def _on_path(monkeypatch, folder, **programs):
    folder.mkdir(exist_ok=True)
    for name, text in programs.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    monkeypatch.setenv("PATH", str(folder))  # only these: no real squeue or sacct answers


def _store(tmp_path):
    """Five configs submitted as tasks of arrays 900 and 901: a claimed and running, b claimed
    and gone from the queue (killed), c pending, d finished with its record, e's array purged
    before it started."""
    store = tmp_path / "runs.jsonl"
    a, b, c, d, e = CONFIGS
    ids = {a: "900_0", b: "900_1", c: "900_2", d: "900_3", e: "901_0"}
    log_jobs(store, [{"key": x.key(), "config": x.__dict__, "job_id": job, "cluster": "slurm",
                      "host": "login1", "time_min": 60, "submitted_at": 1.0}
                     for x, job in ids.items()])
    claim(store, a.key(), "900_0")
    claim(store, b.key(), "900_1")
    append_shard(store, {"key": d.key(), "config": d.__dict__, "status": "ok", "error": None,
                         "measurement": None, "started_at": 5.0, "elapsed_s": 1.0}, "w")
    return store


def test_status_from_squeue_alone(tmp_path, monkeypatch):
    store = _store(tmp_path)
    bin_dir = tmp_path / "bin"
    _on_path(monkeypatch, bin_dir, squeue=FAKE_SQUEUE)
    now, note = report(store)
    assert note == ""
    assert [now[x.key()]["state"] for x in CONFIGS] == [
        "running", "lost", "pending", "done", "lost"]
    assert [now[x.key()]["scheduler"] for x in CONFIGS] == [
        "RUNNING", ENDED, "PENDING", "", ENDED]
    assert now[CONFIGS[1].key()]["detail"] == "its task ended without a record"
    assert now[CONFIGS[4].key()]["detail"] == "its job ended before it started"
    calls = (bin_dir / "squeue.calls").read_text().splitlines()
    assert calls == ["-h -r -j 900 -o %i %T", "-h -r -j 901 -o %i %T"]  # one per array; d's
    # record is in the store, so its task is not asked about


def test_sacct_says_how_a_task_that_left_the_queue_ended(tmp_path, monkeypatch):
    store = _store(tmp_path)
    _on_path(monkeypatch, tmp_path / "bin", squeue=FAKE_SQUEUE, sacct=FAKE_SACCT)
    now, note = report(store)
    assert note == "" and now[CONFIGS[1].key()]["state"] == "lost"
    assert now[CONFIGS[1].key()]["scheduler"] == "CANCELLED"  # sacct over squeue's ENDED
    assert now[CONFIGS[0].key()]["scheduler"] == "RUNNING"  # the queue over sacct's silence


def test_cli_status_merges_squeue_with_the_store(tmp_path, monkeypatch, capsys):
    store = _store(tmp_path)
    _on_path(monkeypatch, tmp_path / "bin", squeue=FAKE_SQUEUE)
    assert main(["sweep", "--status", "--out", str(store)]) == 0
    out = capsys.readouterr().out
    summary = out.strip().splitlines()[-1]
    assert summary.startswith(f"{store}: 5 configurations: ")
    counts = set(summary.split(": ")[-1].split(", "))
    assert counts == {"1 done", "1 running", "2 lost", "1 pending"}
    assert "900_0" in out and "RUNNING" in out and NO_SCHEDULER not in out


@pytest.mark.parametrize("programs, line", [
    ({}, NO_SCHEDULER),
    ({"squeue": "#!/bin/sh\nexit 1\n", "sacct": "#!/bin/sh\nexit 1\n"}, "did not answer")])
def test_one_line_when_slurm_cannot_be_asked(tmp_path, monkeypatch, capsys, programs, line):
    store = _store(tmp_path)
    _on_path(monkeypatch, tmp_path / "bin", **programs)
    now, note = report(store)
    assert line in note and "\n" not in note
    # nothing from SLURM: claims younger than the time limit run, jobs are pending
    assert [now[x.key()]["state"] for x in CONFIGS] == [
        "running", "running", "pending", "done", "pending"]
    assert main(["sweep", "--status", "--out", str(store)]) == 0
    assert capsys.readouterr().out.rstrip().endswith(note)


def test_no_question_and_no_note_without_slurm_jobs(tmp_path, monkeypatch):
    _on_path(monkeypatch, tmp_path / "bin")
    assert slurm_states([]) == ({}, "")
    store = tmp_path / "runs.jsonl"
    append_shard(store, {"key": "k", "config": CONFIGS[0].__dict__, "status": "ok",
                         "error": None, "measurement": None, "started_at": 5.0,
                         "elapsed_s": 1.0}, "w")
    assert report(store)[1] == ""
