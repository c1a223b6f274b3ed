"""Figure `axonn`'s Frontier rows against the frontier profile's step efficiency e (parex.figures.
axonn_efficiency): the sweep reproduces the figure at the committed e, and no e brings all four
Frontier rows within their tolerances (docs/tensor3d.md) - so fitting e on another Frontier run
could not either."""

import numpy as np
import pytest

from parex.figures import axonn
from parex.figures.axonn_efficiency import SCALES, frontier_rows, ratios
from parex.hardware import load_chip

GRID = np.round(np.arange(0.40, 1.0001, 0.01), 2)  # e from 0.40 to 1.00, the range a fit searches


def test_the_sweep_at_the_committed_efficiency_is_the_figure():
    chip = load_chip("frontier")
    rows = frontier_rows(chip.step_efficiency)
    for n in SCALES:
        assert rows[n] == pytest.approx(axonn.weak_scaling(n), rel=1e-9)
    top = axonn.best_3d(axonn.axonn_model("gpt-320b"), "frontier", 32768, axonn.SCRIPTS_BATCH)
    assert rows["sustained"] == pytest.approx(top * chip.peak("bfloat16") * 32768, rel=1e-9)


def within(efficiency: float) -> dict:
    """Which Frontier rows lie inside the figure's tolerances at step efficiency e (the test
    scores them: figure modules never apply a tolerance themselves)."""
    return {row: (axonn.SUSTAINED if row == "sustained" else axonn.WEAK).holds(ratio)
            for row, ratio in ratios(efficiency).items()}


def test_no_step_efficiency_brings_every_frontier_row_within():
    inside = {float(e): within(float(e)) for e in GRID}
    assert not any(all(rows.values()) for rows in inside.values())
    sustained = [e for e, rows in inside.items() if rows["sustained"]]
    weak_32k = [e for e, rows in inside.items() if rows[32768]]
    # each row alone is reachable, at opposite ends: a slower step (lower e) lowers the sustained
    # rate, and hides more of the 32,768-GCD run's communication, raising its weak efficiency
    assert sustained and weak_32k
    assert max(sustained) < min(weak_32k)
