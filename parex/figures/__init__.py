"""The paper-figure gallery: every reproduced figure with the paper's value, parex's and their
ratio, held to a stated tolerance, and a scoreboard of them all.

    parex figure --list                      the figures, their sources, slow or fast
    parex figure zero-table1 --json          one figure: rows, tolerance, passed
    parex figure --all --out docs/figures    every figure: PNG + SVG each, scoreboard.md/.html

From Python: `FIGURES` (name -> Spec, in the gallery's order) and `compute(name)` ->
FigureResult (in this process: its emulated devices must be there). A figure whose parex feature
is missing raises FeatureMissing and is listed as missing, never faked.
"""

from __future__ import annotations

from . import hetero, pipeline_memory, pipelines, roofline, sequence, tables, training  # noqa: F401
from .core import FeatureMissing, Figure, FigureResult, Row, Spec, Tolerance, run
from .runner import ordered_specs, spec

FIGURES = {s.name: s for s in ordered_specs()}


def compute(name: str) -> FigureResult:
    """Compute the figure `name` in this process (its devices must already be there)."""
    return run(spec(name))


__all__ = ["FIGURES", "FeatureMissing", "Figure", "FigureResult", "Row", "Spec", "Tolerance",
           "compute"]
