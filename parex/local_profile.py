"""Where the `cpu-local` profile lives: in the user's cache, one file per machine.

A calibration describes the machine that ran it, so it is never a tracked file: `parex calibrate`
writes `$PAREX_CACHE/hardware/cpu-local-<fingerprint>.json` (default cache `~/.cache/parex`,
or `$XDG_CACHE_HOME/parex`), the fingerprint hashing what decides the speed of the emulated mesh:
OS, architecture, CPU model, usable cores and physical memory. Loading `cpu-local` reads the file
of this machine; when there is none, it calibrates once, first (about half a minute: a progress
bar and a one-line notice), in a fresh process so that the caller's JAX devices are untouched.

data/hardware/cpu-reference.json is a calibration of the machine parex was developed on, kept as
an example and for tests that need fixed numbers; nothing writes it.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

PROFILE = "cpu-local"
CALIBRATION_DEVICES = 8  # emulated devices the profile is measured on (the default mesh)


def cache_dir() -> Path:
    """The folder of machine profiles: $PAREX_CACHE/hardware, else the user's cache."""
    root = os.environ.get("PAREX_CACHE")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        root = Path(base) / "parex"
    return Path(root) / "hardware"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _usable_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def machine_description() -> str:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return (f"{platform.system()} {platform.machine()} · {_cpu_model()} · {_usable_cores()} "
            f"cores · {memory / 2 ** 30:.0f} GiB")


def fingerprint() -> str:
    """12 hex digits naming this machine's CPU setup (machine_description, hashed)."""
    return hashlib.sha256(machine_description().encode()).hexdigest()[:12]


def profile_path() -> Path:
    return cache_dir() / f"{PROFILE}-{fingerprint()}.json"


def load_local(calibrate_if_missing: bool = True):
    """This machine's cpu-local Chip, calibrating it first when there is none."""
    from .errors import InputError
    from .hardware import chip_from_json

    if not calibrate_if_missing and not _current(profile_path()):
        raise InputError(f"no current cpu-local profile for this machine "
                         f"({machine_description()}) "
                         f"in {cache_dir()}: run `parex calibrate`")
    return chip_from_json(json.loads(ensure_local().read_text()))


def ensure_local(progress: bool = True) -> Path:
    """The path of this machine's profile, calibrated now if missing (demo, compare); a profile
    measured at another load says so (load_changed)."""
    path = profile_path()
    if not _current(path):
        calibrate_in_subprocess(path, progress)
    else:
        warn_if_load_changed(path)
    return path


def load_changed(calibration, now: float | None = None) -> str | None:
    """A one-line notice when other work on this machine now takes a core (or a quarter of the
    cores) more or less than while the profile was measured: its rates are per device with the
    cores the emulated mesh then had. None if not, or if the profile predates the record."""
    then = calibration.load_average
    now = os.getloadavg()[0] if now is None else now
    if then is None or abs(now - then) < max(1.0, calibration.cores / 4):
        return None
    return (f"parex: the cpu-local profile was measured at load {then:.1f}, the load is "
            f"{now:.1f} now on {calibration.cores} cores: predicted step times assume the "
            f"calibration's load (`parex calibrate` measures this machine again)")


_NOTIFIED: set = set()  # profiles whose load notice this process has printed


def warn_if_load_changed(path: Path) -> None:
    from .hardware import chip_from_json

    if path in _NOTIFIED:
        return
    notice = load_changed(chip_from_json(json.loads(path.read_text())).calibration)
    if notice:
        _NOTIFIED.add(path)
        print(notice, file=sys.stderr, flush=True)


def _current(path: Path) -> bool:
    """Whether `path` holds a profile with everything this version of parex measures (one
    written before a new measurement was added is calibrated again)."""
    from .errors import InputError
    from .hardware import chip_from_json

    if not path.exists():
        return False
    try:
        chip_from_json(json.loads(path.read_text()))
    except (InputError, ValueError, KeyError, TypeError):
        return False
    return True


def calibrate_in_subprocess(path: Path, progress: bool = True) -> float:
    """Run the calibration in a fresh Python process (it needs 8 emulated CPU devices, which
    the caller's JAX may not have) and write it to `path`; a progress bar follows the child's
    tasks. Returns the seconds it took."""
    from tqdm.auto import tqdm

    print(f"parex: no cpu-local profile for this machine yet ({machine_description()}): "
          f"calibrating it once, about half a minute, into {path}", file=sys.stderr, flush=True)
    start = time.perf_counter()
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    cmd = [sys.executable, "-m", "parex.local_profile", str(path), str(CALIBRATION_DEVICES)]
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
    from . import calibrate

    def report(done: int, total: int) -> None:
        print(done, total, flush=True)

    calibrate.run(devices, directory=None, progress=False, on_task=report, path=Path(path))


if __name__ == "__main__":
    _child(sys.argv[1], int(sys.argv[2]))
