"""This machine's `cpu-local` profile, calibrated when asked: `ensure_local()` measures it once
when there is none (about a minute and a half: a progress bar and a one-line notice), in a fresh
process so that the caller's JAX devices are untouched. Loading a profile never calibrates
(parex.hardware reads it; parex.machine says where it lives); the commands and widgets that
predict this machine call `ensure_local` first.

data/hardware/cpu-reference.json is a calibration of the machine parex was developed on, kept as
an example and for tests that need fixed numbers; nothing writes it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from ..hardware import chip_from_json, profile_is_current
from ..machine import CALIBRATION_DEVICES, PROFILE, load_changed, machine_description, profile_path


def ensure_local(progress: bool = True) -> Path:
    """The path of this machine's profile, calibrated now if missing (demo, compare); a profile
    measured at another load says so (load_changed)."""
    path = profile_path()
    if not profile_is_current(path):
        calibrate_in_subprocess(path, progress)
    else:
        warn_if_load_changed(path)
    return path


def ready(hardware, progress: bool = True) -> None:
    """Calibrate this machine first when `hardware` names its cpu-local profile and it has none:
    what every entry point that predicts calls before loading a profile."""
    if isinstance(hardware, str) and hardware.lower() == PROFILE:
        ensure_local(progress)


_NOTIFIED: set = set()  # profiles whose load notice this process has printed
_HELD: list[str] | None = None  # notices held back until a command has printed its output


def warn_if_load_changed(path: Path) -> None:
    if path in _NOTIFIED:
        return
    notice = load_changed(chip_from_json(json.loads(path.read_text())).calibration)
    if notice:
        _NOTIFIED.add(path)
        if _HELD is None:
            print(notice, file=sys.stderr, flush=True)
        else:
            _HELD.append(notice)


def hold_notices() -> None:
    """Hold load notices back (the CLI: a command that fails on bad input prints one line,
    the error, and a command that succeeds prints them after its output)."""
    global _HELD
    _HELD = []


def release_notices(show: bool = True) -> None:
    global _HELD
    held, _HELD = _HELD or [], None
    for notice in held if show else ():
        print(notice, file=sys.stderr, flush=True)


def calibrate_in_subprocess(path: Path, progress: bool = True) -> float:
    """Run the calibration in a fresh Python process (it needs 8 emulated CPU devices, which
    the caller's JAX may not have) and write it to `path`; a progress bar follows the child's
    tasks. Returns the seconds it took."""
    from tqdm.auto import tqdm

    print(f"parex: no cpu-local profile for this machine yet ({machine_description()}): "
          f"calibrating it once, about a minute and a half, into {path}", file=sys.stderr,
          flush=True)
    start = time.perf_counter()
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    cmd = [sys.executable, "-m", "parex.calibrate.local", str(path), str(CALIBRATION_DEVICES)]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env) as child:
        bar = None
        for line in child.stdout:  # "done total" after each task
            done, total = map(int, line.split())
            if bar is None:
                bar = tqdm(total=total, desc="calibrating cpu-local", disable=not progress)
            bar.update(done - bar.n)
        errors = child.stderr.read()
        if bar is not None:
            bar.close()
    if child.returncode != 0 or not path.exists():
        raise RuntimeError(f"the calibration process failed (exit {child.returncode}):\n{errors}")
    return time.perf_counter() - start


def _child(path: str, devices: int) -> None:
    """The calibration process: emulate the devices, measure, write the profile."""
    import jax

    jax.config.update("jax_num_cpu_devices", devices)
    from .run import run

    def report(done: int, total: int) -> None:
        print(done, total, flush=True)

    run(devices, directory=None, progress=False, on_task=report, path=Path(path))


if __name__ == "__main__":
    _child(sys.argv[1], int(sys.argv[2]))
