"""Eight emulated CPU devices for every test: set before any test touches a JAX backend.

The `cpu-local` profile is this machine's calibration in the user's cache (parex.machine),
measured on first use. Tests must neither wait for a calibration nor depend on one machine's
noise, so the whole session (subprocesses too) gets a cache of its own holding the tracked
reference calibration (data/hardware/cpu-reference.json) as this machine's profile.
"""

import json
import os
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Tests compile hundreds of small programs and run each for a step or two: LLVM's optimisation
# of the generated CPU code is a third of a compile and none of what a test checks (the HLO,
# XLA's buffer assignment, the collectives, the numbers, which need no fast-math either way).
# Wall-clock measurements leave it out (timed_env: the gallery's measured figures).
COMPILE_FAST = "--xla_backend_optimization_level=0"
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {COMPILE_FAST}".strip()
os.environ["PAREX_CACHE"] = tempfile.mkdtemp(prefix="parex-test-cache-")

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)

from parex.hardware import HARDWARE_DIR  # noqa: E402
from parex.calibrate.local import PROFILE, profile_path

_reference = json.loads((Path(HARDWARE_DIR) / "cpu-reference.json").read_text())
profile_path().parent.mkdir(parents=True, exist_ok=True)
profile_path().write_text(json.dumps(_reference | {"name": PROFILE}, indent=2))


def timed_env() -> dict:
    """The environment for a subprocess that measures wall time: XLA's CPU code optimised."""
    return os.environ | {"XLA_FLAGS": os.environ["XLA_FLAGS"].replace(COMPILE_FAST, "").strip()}


@pytest.fixture
def stand_in_calibration(monkeypatch):
    """`parex calibrate`'s subprocess replaced by one that writes the reference calibration
    where it was asked to; the list of the targets it was called with."""
    from parex.calibrate import local as local_profile
    from parex.hardware import load_chip, save_chip

    calls = []

    def stand_in(target, progress=True):
        calls.append(target)
        save_chip(load_chip("cpu-reference"), path=target)
        return 0.0

    monkeypatch.setattr(local_profile, "calibrate_in_subprocess", stand_in)
    return calls
