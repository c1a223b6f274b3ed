"""`parex sweep --executor slurm`: the job array through submitit's LocalExecutor (no SLURM
needed), a task killed mid-run and one preempted, `--resume`, `--dry-run` and bad input.

The array tests run stand-in measuring children (a short Python program that prints a
Measurement's JSON) so a kill lands in a known state; the end-to-end test with real
`parex run --json` children is marked slow."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from parex.cli.main import main
from parex.sweep import SweepConfig, load, read_records
from parex.sweep.slurm import SlurmOptions, read_options
from parex.sweep.status import states
from parex.sweep.store import side_dir

ROOT = Path(__file__).resolve().parents[2]
# The first run of each flag file sleeps (and is killed or preempted there); later runs finish.
STAND_IN = textwrap.dedent("""
    import json, os, sys, time
    layout, flag = sys.argv[1], sys.argv[2]
    if not os.path.exists(flag):
        open(flag, "w").close()
        time.sleep(120)
    print(json.dumps({"model": "tiny", "layout": layout, "n_devices": 2, "platform": "cpu",
        "losses": [5.5, 5.4], "step_time_s": {"median": 0.01, "min": 0.01, "max": 0.02},
        "compile_time_s": 1.0, "flops_per_device": 1e6, "bytes_accessed_per_device": 1e6,
        "memory_bytes_per_device": {"argument": 10, "output": 10, "alias": 5, "temp": 5,
                                    "total": 20}, "collectives": [], "tokens_per_step": 64}))
""")
CONFIGS = [SweepConfig("tiny", layout, global_batch=4, steps=2)
           for layout in ("data=2", "tensor=2", "fsdp=2")]
LOCAL = SlurmOptions(cluster="local", time=5)


def _until(condition, what: str, seconds: float = 120):
    deadline = time.monotonic() + seconds
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


@pytest.mark.slow
def test_array_through_local_executor_killed_and_preempted_tasks_then_resume(tmp_path):
    """3 configs, one task each: the first finishes, the second is SIGKILLed mid-measurement
    (lost: no record), the third is preempted (SIGUSR2: submitit checkpoints and requeues it,
    and the requeued task finishes). --resume runs the lost one again: exactly 3 records."""
    from parex.sweep.executor import submit_array, wait

    store = tmp_path / "runs.jsonl"
    flags = {c.layout: tmp_path / f"flag-{i}" for i, c in enumerate(CONFIGS)}
    flags["data=2"].touch()  # the first runs straight through

    def argv_of(config):
        return [sys.executable, "-c", STAND_IN, config.layout, str(flags[config.layout])]
    jobs, skipped = submit_array(CONFIGS, store, LOCAL, argv_of=argv_of, timeout=300)
    assert len(jobs) == 3 and skipped == {}
    killed, preempted = CONFIGS[1], CONFIGS[2]
    claims = side_dir(store) / "claims"
    _until(lambda: all(flags[c.layout].exists() for c in CONFIGS), "the children to start")
    pids = {c.layout: json.loads((claims / f"{c.key()}.json").read_text())["pid"]
            for c in (killed, preempted)}
    os.kill(pids[killed.layout], signal.SIGKILL)  # the task and its measuring child die
    os.kill(pids[preempted.layout], signal.SIGUSR2)  # what SLURM sends at preemption
    wait(jobs, poll_s=0.2)
    now = states(store)
    assert [now[c.key()]["state"] for c in CONFIGS] == ["done", "lost", "done"]
    assert len(read_records(store)) == 2
    assert "Requeued" in jobs[2].stderr() + jobs[2].stdout()  # the same task ran again

    jobs, skipped = submit_array(CONFIGS, store, LOCAL, resume=True, argv_of=argv_of)
    assert len(jobs) == 1 and skipped == {"done": 2}
    wait(jobs, poll_s=0.2)
    records = read_records(store)
    assert sorted(r["key"] for r in records) == sorted(c.key() for c in CONFIGS)
    df = load(store)
    assert len(df) == 3 and set(df["status"]) == {"ok"} and set(df["loss_last"]) == {5.4}
    again, skipped = submit_array(CONFIGS, store, LOCAL, resume=True, argv_of=argv_of)
    assert again == [] and skipped == {"done": 3}


def test_dry_run_prints_the_job_array_and_submits_nothing(tmp_path, capsys, monkeypatch):
    import parex.sweep.executor as executor

    def refuse(*_):
        raise AssertionError("--dry-run reached submitit")
    monkeypatch.setattr(executor, "executor_of", refuse)
    options = tmp_path / "slurm.toml"
    options.write_text('partition = "batch"\naccount = "proj"\nsetup = ["module load cuda"]\n'
                       '[sbatch]\nmail_type = "END"\n')
    store = tmp_path / "runs.jsonl"
    args = ["sweep", "--layout", "data=2", "--layout", "tensor=2", "--layout", "fsdp=2",
            "--out", str(store), "--executor", "slurm", "--slurm-config", str(options),
            "--partition", "gpu", "--time", "30", "--gpus-per-task", "2", "--max-running", "2",
            "--dry-run"]
    assert main(args) == 0
    out = capsys.readouterr().out
    for line in ("#SBATCH --array=0-2%2", "#SBATCH --time=30", "#SBATCH --partition=gpu",
                 "#SBATCH --gpus-per-task=2", "#SBATCH --account=proj",
                 "#SBATCH --mail-type=END", "#SBATCH --signal=USR2@90"):
        assert line in out.splitlines()
    assert "a job array of 3 tasks" in out
    for c in (SweepConfig("tiny", layout) for layout in ("data=2", "tensor=2", "fsdp=2")):
        assert c.key() in out and c.layout in out
    assert not store.exists() and not side_dir(store).exists()


def test_slurm_options_from_toml_and_flags():
    assert read_options(None, {"time": 10, "partition": None}) == SlurmOptions(time=10)
    params = SlurmOptions(partition="gpu", max_running=4, gpus_per_task=2, mem_gb=32,
                          setup=("module load cuda",)).submitit_parameters()
    assert params == {"timeout_min": 60, "slurm_signal_delay_s": 90, "slurm_partition": "gpu",
                      "slurm_array_parallelism": 4, "slurm_gpus_per_task": 2, "mem_gb": 32,
                      "slurm_setup": ["module load cuda"]}


@pytest.mark.parametrize("extra, toml, message", [
    (["--executor", "pbs"], None, "unknown executor 'pbs'"),
    (["--partition", "gpu"], None, "--partition set how --executor slurm submits"),
    (["--dry-run"], None, "--dry-run set how --executor slurm submits"),
    (["--executor", "slurm", "--dry-run"], "partition = \n", "fix the TOML"),
    (["--executor", "slurm", "--dry-run"], 'partiton = "gpu"\n', "did you mean 'partition'?"),
    (["--executor", "slurm", "--dry-run"], "time = -5\n", "time takes a whole number >= 1"),
    (["--executor", "slurm", "--dry-run", "--time", "0"], None, "time=0"),
    (["--executor", "slurm", "--retry-failed"], None, "drop --retry-failed"),
    (["--executor", "slurm", "--dry-run", "--gpus-per-task", "4"], None,
     "layout dp uses 8 devices but each task gets 4 GPUs"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, extra, toml, message):
    if toml is not None:
        (tmp_path / "s.toml").write_text(toml)
        extra = [*extra, "--slurm-config", str(tmp_path / "s.toml")]
    args = ["sweep", "--layout", "dp", "--out", str(tmp_path / "runs.jsonl"), *extra]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("parex: ") and message in err[0], err


@pytest.mark.slow
def test_cli_sweep_on_local_executor_with_real_runs_killed_then_resumed(tmp_path):
    """`parex sweep --executor slurm --wait` with real `parex run --json` children through
    submitit's local executor; one task is killed mid-run; `--resume` completes the grid with
    exactly 3 records, and `--status` tells them done."""
    store, options = tmp_path / "runs.jsonl", tmp_path / "local.toml"
    options.write_text('cluster = "local"\ntime = 20\n')
    grid = tmp_path / "grid.toml"
    grid.write_text('layouts = ["data=2", "tensor=2", "data=2,tensor=2"]\nsteps = 2\n'
                    'seq = 32\nglobal_batch = 4\ndata = "synthetic"\n')
    cmd = [sys.executable, "-m", "parex.cli", "sweep", "--grid", str(grid), "--out", str(store),
           "--executor", "slurm", "--slurm-config", str(options), "--wait"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
    claims = side_dir(store) / "claims"
    first = _until(lambda: sorted(claims.glob("*.json")) if claims.is_dir() else [], "a claim")
    os.kill(json.loads(first[0].read_text())["pid"], signal.SIGKILL)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0 and "submitted 3 tasks" in out
    assert len(read_records(store)) == 2
    done = subprocess.run([*cmd, "--resume"], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    assert "submitted 1 tasks" in done.stdout and "skipped 2 done" in done.stdout
    records = read_records(store)
    assert len(records) == 3 and {r["status"] for r in records} == {"ok"}, records
    assert all(5 < loss < 6 for r in records for loss in r["measurement"]["losses"])
    status = subprocess.run([sys.executable, "-m", "parex.cli", "sweep", "--status", "--out",
                             str(store)], env=env, capture_output=True, text=True)
    assert "3 configurations: 3 done" in status.stdout


def test_one_config_through_local_executor_lands_in_its_shard(tmp_path):
    """The array's plumbing in the default suite: one task, its record in its own shard with
    the job id that ran it, the job log and no claim left behind."""
    from parex.sweep.executor import submit_array, wait

    store, flag = tmp_path / "runs.jsonl", tmp_path / "flag"
    flag.touch()
    config = CONFIGS[0]
    jobs, _ = submit_array([config], store, LOCAL,
                           argv_of=lambda c: [sys.executable, "-c", STAND_IN, c.layout, str(flag)])
    wait(jobs, poll_s=0.1)
    [record] = read_records(store)
    assert record["status"] == "ok" and record["key"] == config.key()
    assert record["job_id"] == str(jobs[0].job_id) and not store.exists()
    assert len(list((side_dir(store) / "shards").glob("*.jsonl"))) == 1
    assert not list((side_dir(store) / "claims").glob("*.json"))
    assert states(store)[config.key()]["state"] == "done"
