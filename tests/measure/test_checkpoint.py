"""Checkpoints on the mesh (parex.executor.checkpoint): a `parex run` killed with SIGKILL after a
checkpoint and resumed with --resume gives the uninterrupted run's losses bit for bit (data,
fsdp, fsdp + tensor, pipeline and DiLoCo layouts)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from parex.cli.main import main

# small and quick: the tiny model on 32-token sequences, 8 sequences a step
RUN = ["run", "--model", "tiny", "--seq", "32", "--global-batch", "8", "--data", "synthetic"]


def _run_json(capsys, *args) -> dict:
    assert main([*RUN, *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _saved_steps(directory: Path) -> list[int]:
    """Steps with a complete checkpoint (Orbax renames a save's folder to its step when the
    save is whole)."""
    return sorted(int(p.name) for p in directory.glob("*") if p.name.isdigit())


def kill_after_a_checkpoint(directory: Path, layout: str, steps: int, every: int) -> int:
    """Start `parex run --checkpoint` in a subprocess, SIGKILL it as soon as a checkpoint is
    complete (at whatever step it has reached), and return that checkpoint's step."""
    cmd = [sys.executable, "-m", "parex.cli", *RUN, "--layout", layout, "--steps", str(steps),
           "--checkpoint", str(directory), "--every", str(every), "--json"]
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             env=os.environ | {"PYTHONPATH": str(Path.cwd())})
    deadline = time.monotonic() + 300
    while not _saved_steps(directory) and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    child.send_signal(signal.SIGKILL)
    _, err = child.communicate()
    assert child.returncode == -signal.SIGKILL, f"the run ended before it was killed: {err}"
    saved = _saved_steps(directory)
    assert saved and saved[-1] < steps, "killed before any checkpoint, or after the last"
    return saved[-1]


def check_kill_and_resume(capsys, tmp_path, layout: str, steps: int = 6, every: int = 2):
    reference = _run_json(capsys, "--layout", layout, "--steps", str(steps))["losses"]
    saved = kill_after_a_checkpoint(tmp_path / "ckpt", layout, steps, every)
    resumed = _run_json(capsys, "--layout", layout, "--steps", str(steps), "--checkpoint",
                        str(tmp_path / "ckpt"), "--every", str(every), "--resume")
    assert resumed["checkpoint"]["resumed_from_step"] == saved
    assert resumed["losses"] == reference  # every bit, the restored steps' and the new ones
    return resumed


def test_fsdp_run_killed_and_resumed_repeats_the_losses(capsys, tmp_path):
    resumed = check_kill_and_resume(capsys, tmp_path, "fsdp=8")
    # each device wrote its eighth of the parameters and AdamW's moments: the step's arguments
    # less the batch (8 x 32 int32 inputs and targets, split eight ways)
    block, memory = resumed["checkpoint"], resumed["memory_bytes_per_device"]
    assert block["saves"] >= 1 and block["save_blocking_s"] > 0
    assert block["bytes_per_device"] == memory["argument"] - 2 * 4 * 8 * 32 // 8


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["data=8", "fsdp=2,tensor=4",
                                    "data=2,stage=4,schedule=1f1b,microbatches=4",
                                    "replica=2,data=4,inner_steps=2"])  # DiLoCo
def test_runs_killed_and_resumed_repeat_the_losses(capsys, tmp_path, layout):
    check_kill_and_resume(capsys, tmp_path, layout)


@pytest.mark.slow
def test_resume_on_another_layout_reshards(capsys, tmp_path):
    """Saved on data=8, resumed on fsdp=2,tensor=4: the state is read into the new shardings
    and the run goes on (the reduction order differs, so the losses agree to fp32 rounding)."""
    reference = _run_json(capsys, "--layout", "data=8", "--steps", "4")["losses"]
    _run_json(capsys, "--layout", "data=8", "--steps", "4", "--checkpoint", str(tmp_path / "r"),
              "--every", "2")
    for step in (4,):  # drop the last save, as if the run had died after step 2
        import shutil

        shutil.rmtree(tmp_path / "r" / str(step))
    resumed = _run_json(capsys, "--layout", "fsdp=2,tensor=4", "--steps", "4", "--checkpoint",
                        str(tmp_path / "r"), "--resume")
    assert resumed["checkpoint"]["resumed_from_step"] == 2
    assert resumed["losses"][:2] == reference[:2]
    assert resumed["losses"][2:] == pytest.approx(reference[2:], rel=1e-5)


def test_resume_with_other_training_options_is_refused_in_one_line(capsys, tmp_path):
    _run_json(capsys, "--layout", "data=8", "--steps", "1", "--checkpoint", str(tmp_path / "o"))
    assert main([*RUN, "--layout", "data=8", "--steps", "2", "--checkpoint",
                 str(tmp_path / "o"), "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "--steps 1" in err and "resume with the same training options" in err


def test_resume_without_a_directory_is_a_usage_error(capsys):
    assert main([*RUN, "--resume"]) == 2
    assert "--resume needs --checkpoint DIR" in capsys.readouterr().err
