"""This machine, as the `cpu-local` profile names it: where its profile lives and what decides the
speed of its emulated mesh. Plain reads of the machine, no JAX; nothing here calibrates.

A calibration describes the machine that ran it, so it is never a tracked file: `parex calibrate`
writes `$PAREX_CACHE/hardware/cpu-local-<fingerprint>.json` (default cache `~/.cache/parex`,
or `$XDG_CACHE_HOME/parex`), the fingerprint hashing what decides the speed of the emulated mesh:
OS, architecture, CPU model, usable cores and physical memory.
"""

from __future__ import annotations

import hashlib
import os
import platform
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


SPEED_NOTICE = 0.10  # the block step's drift that merits a notice (the step-time target's size)


def speed_changed(drift: float) -> str | None:
    """A one-line notice when the calibration's block step, timed beside measured steps, takes
    `drift` times what it took while calibrating, more than SPEED_NOTICE away from 1: a shared
    machine's speed moves by ±15 % within minutes at the same load (docs/results/
    2026-12-emulated-step.md), and the predictions keep the calibrated speed. None if not."""
    if abs(drift - 1.0) <= SPEED_NOTICE:
        return None
    return (f"parex: this machine now runs the calibration's block step at {drift:.2f}× the "
            f"time it took while calibrating: expect measured steps ≈ {drift:.2f}× the "
            f"predictions (`parex calibrate` measures this machine again)")


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
