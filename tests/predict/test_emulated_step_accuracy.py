"""The emulated mesh's step time against its prediction, as a fresh clone sees it (issue 48's
flow: `parex calibrate` in a new process, then measured steps). Slow (about three minutes), and
meant for a quiet machine: other work on the shared cores moves the measured steps."""

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import timed_env

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
# one or two layouts of each family whose target the predictor meets (presets by name:
# parex.layout.LAYOUT_PRESETS); sequence parallelism meets it only at its edge (predicted at
# 0.83-0.96 of the measured step: docs/results/2026-12-emulated-step.md), a mixture of experts
# does not
MET = ("single", "dp", "fsdp", "tp", "dp_tp", "data=2,stage=4,schedule=1f1b,microbatches=4",
       "data=4,stage=2,schedule=zbh1,microbatches=4", "data=2,seq=4,cp=ring",
       "data=2,stage=4,schedule=local,microbatches=4", "tensor=2x2x2", "data=2,tensor=1x4x1")
SCRIPT = f"""
import json, sys
sys.path.insert(0, {str(BENCHMARKS)!r})
import predict_accuracy
errors = predict_accuracy.fresh_clone(["tiny"], steps=6, specs={MET!r})
print(json.dumps(errors))
"""


@pytest.mark.slow
def test_a_fresh_calibration_predicts_the_met_families_within_the_target():
    # the benchmark as a user runs it: XLA's CPU code optimised (timed_env), its own process
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         env=timed_env(), timeout=1200, check=True).stdout
    errors = json.loads(out.strip().splitlines()[-1])
    every = [abs(e) for group in errors.values() for e in group]
    assert len(every) == len(MET)
    assert statistics.median(every) <= 0.10, errors
    assert max(every) <= 0.20, errors
