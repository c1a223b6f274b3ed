"""The paper-figure gallery: every reproduced figure with the paper's value, parex's and their
ratio, held to a stated tolerance, and a scoreboard of them all.

    parex figure --list                      the figures, their sources, slow or fast
    parex figure zero-table1 --json          one figure: rows, tolerance, passed
    parex figure --all --out docs/figures    every figure: PNG + SVG each, scoreboard.md/.html

From Python: `FIGURES` (name -> Spec, in the gallery's order) and `compute(name)` ->
FigureResult (in this process: its emulated devices must be there); `text_report(result)` and
`figure_chart(result)` show it, `summary_frame(load_scoreboard(path))` reads a committed
scoreboard. A figure whose parex feature is missing raises FeatureMissing and is listed as
missing, never faked; every figure's rows are scored by one rule (parex.figures.scoring). The
papers' tables beside parex's predictions, as DataFrames (paper, parex, ratio): `zero_table1()`,
`korthikanti_table()`, `megatron_table1(hardware)`.
"""

from __future__ import annotations

from . import (axonn, goodput, hetero, lowcomm, moe, pipeline_memory, pipelines,  # noqa: F401
               roofline, sequence, tables, training)
from .ppll import eval_batches, local_vs_1f1b, loss_run, losing_frame  # noqa: F401 (PPLL)
from ..predict.published import korthikanti_table, megatron_table1, zero_table1
from .charts import figure_chart
from .core import FeatureMissing, Figure, FigureResult, Row, Spec, Tolerance, run
from .runner import ordered_specs, spec
from .scoreboard import load as load_scoreboard
from .scoreboard import summary_frame, text_report

FIGURES = {s.name: s for s in ordered_specs()}


def compute(name: str) -> FigureResult:
    """Compute the figure `name` in this process (its devices must already be there)."""
    return run(spec(name))


__all__ = ["FIGURES", "FeatureMissing", "Figure", "FigureResult", "Row", "Spec", "Tolerance",
           "compute", "figure_chart", "korthikanti_table", "load_scoreboard", "megatron_table1",
           "summary_frame", "text_report", "zero_table1"]
