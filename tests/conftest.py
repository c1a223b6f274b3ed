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
os.environ["PAREX_CACHE"] = tempfile.mkdtemp(prefix="parex-test-cache-")

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)

from parex.hardware import HARDWARE_DIR  # noqa: E402
from parex.calibrate.local import PROFILE, profile_path

_reference = json.loads((Path(HARDWARE_DIR) / "cpu-reference.json").read_text())
profile_path().parent.mkdir(parents=True, exist_ok=True)
profile_path().write_text(json.dumps(_reference | {"name": PROFILE}, indent=2))


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
