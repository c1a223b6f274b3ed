"""Durable sweeps: records survive kills, resume loses and duplicates nothing, failures are
recorded and the sweep goes on, grid files expand to the configs they list.

The default-suite tests run the real store and the real subprocess machinery with a stand-in
child (a short Python program that prints a Measurement's JSON), so a kill lands in a known
state within seconds; the slow test does the same with real `parex run --json` measurements."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from parex.sweep import (SweepConfig, append_record, load, read_records, repair_tail,
                         run_sweep)
from parex.sweep.grid import grid_configs, read_grid

ROOT = Path(__file__).resolve().parents[2]
# A stand-in measuring child: sleeps, then prints a Measurement's JSON (or fails, or hangs).
STAND_IN = textwrap.dedent("""
    import json, sys, time
    layout, seconds = sys.argv[1], float(sys.argv[2])
    if layout.startswith("seq="):
        sys.exit("XLA aborted (stand-in)")
    time.sleep(seconds)
    print(json.dumps({"model": "tiny", "layout": layout, "n_devices": 2, "platform": "cpu",
        "losses": [5.5, 5.4], "step_time_s": {"median": 0.01, "min": 0.01, "max": 0.02},
        "compile_time_s": 1.0, "flops_per_device": 1e6, "bytes_accessed_per_device": 1e6,
        "memory_bytes_per_device": {"argument": 10, "output": 10, "alias": 5, "temp": 5,
                                    "total": 20}, "collectives": [], "tokens_per_step": 64}))
""")


def stand_in(seconds: float):
    def argv_of(config: SweepConfig) -> list[str]:
        return [sys.executable, "-c", STAND_IN, config.layout, str(seconds)]
    return argv_of


CONFIGS = [SweepConfig("tiny", layout, global_batch=4, steps=2)
           for layout in ("data=2", "tensor=2", "fsdp=2")]


def test_torn_last_line_is_skipped_and_cut(tmp_path):
    store = tmp_path / "s.jsonl"
    append_record(store, {"key": "a", "status": "ok"})
    with open(store, "a") as f:
        f.write('{"key": "b", "sta')  # a kill mid-write
    assert [r["key"] for r in read_records(store)] == ["a"]
    repair_tail(store)
    append_record(store, {"key": "c", "status": "ok"})
    assert [r["key"] for r in read_records(store)] == ["a", "c"]
    assert store.read_text().count("\n") == 2


def test_keys_are_stable_and_distinct():
    assert CONFIGS[0].key() == SweepConfig("tiny", "data=2", global_batch=4, steps=2).key()
    assert len({c.key() for c in CONFIGS}) == 3
    assert CONFIGS[0].key() != SweepConfig("tiny", "data=2", global_batch=4, steps=3).key()


def _kill_after_first_record(script: str, store: Path) -> bytes:
    """Start `script` in its own process group, SIGKILL it once the store holds one record;
    return the store's bytes at that moment."""
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    deadline = time.monotonic() + 240
    while not read_records(store):
        assert proc.poll() is None, "the sweep ended before it was killed"
        assert time.monotonic() < deadline, "no record appeared"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return store.read_bytes()


def test_sigkill_mid_sweep_then_resume_loses_and_duplicates_nothing(tmp_path):
    store = tmp_path / "s.jsonl"
    # the first child finishes at once, every later one sleeps until it is killed: the kill
    # lands while the second child runs however slowly the poll below comes round
    first = CONFIGS[0].layout
    script = textwrap.dedent(f"""
        import sys
        from parex.sweep import SweepConfig, run_sweep
        configs = [SweepConfig("tiny", layout, global_batch=4, steps=2)
                   for layout in {[c.layout for c in CONFIGS]!r}]
        run_sweep(configs, {str(store)!r}, progress=False,
                  argv_of=lambda c: [sys.executable, "-c", {STAND_IN!r}, c.layout,
                                     "0" if c.layout == {first!r} else "600"])
    """)
    before = _kill_after_first_record(script, store)
    assert len(read_records(store)) == 1  # killed while the second child ran
    counts = run_sweep(CONFIGS, store, resume=True, argv_of=stand_in(0.0), progress=False)
    assert counts["skipped"] == 1 and counts["ok"] == 2
    assert store.read_bytes().startswith(before)  # the finished record is untouched
    keys = [r["key"] for r in read_records(store)]
    assert sorted(keys) == sorted(c.key() for c in CONFIGS)  # each exactly once
    again = run_sweep(CONFIGS, store, resume=True, argv_of=stand_in(0.0), progress=False)
    assert again["skipped"] == 3 and len(read_records(store)) == 3


def test_failures_are_recorded_and_the_sweep_goes_on(tmp_path):
    store = tmp_path / "s.jsonl"
    configs = [SweepConfig("tiny", "tensor=3", global_batch=4),  # invalid: never launched
               SweepConfig("tiny", "seq=2,cp=ring", global_batch=4),  # the child aborts
               SweepConfig("tiny", "data=2", global_batch=4, steps=3),  # hangs past timeout
               SweepConfig("tiny", "data=2", global_batch=4)]
    argv = stand_in(0.0)

    def argv_of(config):  # the third one hangs past any timeout
        return stand_in(600.0)(config) if config.steps == 3 else argv(config)
    # a quick child must finish within the timeout on a loaded machine (a Python start can
    # take seconds there): 15 s, which the hanging one waits out once
    counts = run_sweep(configs, store, timeout=15, argv_of=argv_of, progress=False)
    assert counts == {"ok": 1, "error": 1, "timeout": 1, "invalid": 1, "skipped": 0}
    df = load(store)
    assert list(df["status"]) == ["invalid", "error", "timeout", "ok"]
    assert "heads=8 is not divisible by tensor=3" in df["error"][0]
    assert "XLA aborted" in df["error"][1] and "15 s timeout" in df["error"][2]
    ok = df.iloc[3]
    assert ok["memory_total_bytes"] == 20 and ok["loss_last"] == 5.4
    assert ok["source"] == "measured" and ok["train_global_batch"] == 4
    with pytest.raises(ValueError, match="--resume"):
        run_sweep(configs, store, argv_of=argv_of, progress=False)
    retried = run_sweep(configs, store, resume=True, retry_failed=True, timeout=15,
                        argv_of=argv, progress=False)
    assert retried["skipped"] == 1 and retried["ok"] == 1  # the hang, now quick
    assert list(load(store)["status"]) == ["invalid", "error", "ok", "ok"]


def test_grid_file_lists_models_layouts_axes_remat_microbatches_seq(tmp_path):
    grid = tmp_path / "grid.toml"
    grid.write_text(textwrap.dedent("""
        models = ["tiny", "small"]
        layouts = ["dp", "data=2,tensor=4"]
        devices = 8
        remat = ["none", "full"]
        microbatches = [1, 2]
        seq = [64, 128]
        steps = 3
        [axes]
        fsdp = [1, 2, 8]
        tensor = [1, 4]
    """))
    configs = read_grid(grid)
    layouts = {c.layout for c in configs}
    # dp, data=2,tensor=4, and the axes' combinations on 8 devices (fsdp=8; fsdp=2,tensor=4)
    assert layouts == {"data=8", "data=2,tensor=4", "fsdp=8", "fsdp=2,tensor=4",
                       "data=8,microbatches=2", "data=2,tensor=4,microbatches=2",
                       "fsdp=8,microbatches=2", "fsdp=2,tensor=4,microbatches=2"}
    assert len(configs) == 2 * 8 * 2 * 2 and len({c.key() for c in configs}) == len(configs)
    assert {(c.remat, c.seq_len, c.steps, c.devices) for c in configs} == {
        (r, s, 3, 8) for r in ("none", "full") for s in (64, 128)}
    with pytest.raises(ValueError, match="unknown sweep grid keys"):
        grid_configs({"layout": "dp"})


@pytest.mark.slow
def test_sigkill_real_parex_run_sweep_then_resume(tmp_path):
    """The same kill and resume with real measurements: `parex sweep` on the tiny model."""
    store = tmp_path / "runs.jsonl"
    layouts = ["data=2", "tensor=2", "data=2,tensor=2"]
    args = [a for layout in layouts for a in ("--layout", layout)]
    cmd = ["--model", "tiny", *args, "--steps", "2", "--global-batch", "4", "--seq", "32",
           "--data", "synthetic", "--out", str(store)]
    script = f"import sys; from parex.cli import main; sys.exit(main({['sweep', *cmd]!r}))"
    before = _kill_after_first_record(script, store)
    from parex.cli.main import main

    assert main(["sweep", *cmd, "--resume"]) == 0
    records = read_records(store)
    assert store.read_bytes().startswith(before)
    assert sorted(r["config"]["layout"] for r in records) == sorted(layouts)
    for r in records:
        assert r["status"] == "ok", r["error"]
        m = r["measurement"]
        assert m["step_time_s"]["median"] > 0 and m["memory_bytes_per_device"]["total"] > 0
        assert len(m["losses"]) == 2 and all(5 < loss < 6 for loss in m["losses"])
    assert json.loads(store.read_text().splitlines()[0])["key"] == records[0]["key"]


def test_cli_sweep_records_what_cannot_run_and_prints_the_table(tmp_path, capsys):
    """`parex sweep` with a grid and a --layout: impossible configs become records (nothing
    launched), and the table names each problem."""
    from parex.cli.main import main

    grid = tmp_path / "grid.toml"
    grid.write_text('layouts = ["tensor=3"]\nremat = ["none", "full"]\n')
    store = tmp_path / "runs.jsonl"
    args = ["sweep", "--grid", str(grid), "--layout", "seq=3,cp=ring", "--out", str(store)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "3 invalid" in out and "heads=8 is not divisible by tensor=3" in out
    assert list(load(store)["status"]) == ["invalid"] * 3
    assert main(args) == 2 and "--resume" in capsys.readouterr().err
