"""Figure `axonn`'s Frontier rows as functions of the frontier profile's step efficiency e.

A diagnostic, never a fit: the figure's rows are held out of every constant of parex. It answers
whether any e could bring all four Frontier rows within their tolerances, which is what fitting
e on another Frontier run (data/reference/frontier_runs.csv) could at best achieve.

    frontier_rows(e)      {8192, 16384, 32768: weak-scaling efficiency vs 512 GCDs,
                           "sustained": FLOP/s on 32,768 GCDs}, as the figure computes them
    ratios(e)             each row's parex / paper

The trade the e-sweep shows: a lower e slows compute, the sustained rate falls with it, but the
communication of the large runs then hides behind the slower compute, so the 32,768-GCD weak
efficiency rises (docs/tensor3d.md, figure `axonn`).
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

from ..hardware import load_chip
from .axonn import SCRIPTS_BATCH, WEAK_BASE, axonn_model, best_3d_on, paper, weak_model

SCALES = (8192, 16384, 32768)


@lru_cache(maxsize=64)
def frontier_rows(efficiency: float) -> dict:
    """The figure's Frontier rows with the frontier profile's step efficiency set to e."""
    chip = dataclasses.replace(load_chip("frontier"), step_efficiency=efficiency)
    hfu = {n: best_3d_on(axonn_model(weak_model(n)), chip, n, SCRIPTS_BATCH)
           for n in (WEAK_BASE, *SCALES)}
    rows = {n: hfu[n] / hfu[WEAK_BASE] for n in SCALES}
    rows["sustained"] = hfu[32768] * chip.peak("bfloat16") * 32768
    return rows


def ratios(efficiency: float) -> dict:
    """parex / paper of each Frontier row at step efficiency e."""
    rows = frontier_rows(efficiency)
    out = {n: rows[n] / paper(f"frontier_weak_{n}") for n in SCALES}
    out["sustained"] = rows["sustained"] / paper("sustained_frontier_32768")
    return out


__all__ = ["SCALES", "frontier_rows", "ratios"]
