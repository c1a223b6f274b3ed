"""How every figure's rows are scored: one rule, in one place.

A row sets parex's number beside the paper's. It is one of

    a point        *within* when lo ≤ parex / paper ≤ hi (the row's tolerance, or the
                   figure's), else *outside*;
    a bracket      parex's [low, high] over settings the paper did not publish: *within* only
                   when it contains the paper's value, else *outside*, off by the nearer end
                   (its parex number is the point of [low, high] nearest the paper's, so its
                   ratio is 1 inside and nearer end / paper outside);
    out of scope   a row whose reason the figure declared before computing anything
                   (`figure(..., scopes={name: reason})`: a named mode or model feature, never
                   decided from the row's result); listed and counted apart, never a pass.

A figure *passes* when it scores at least one row and every scored row is within.

What a figure's agreement is evidence of (EVIDENCE) is declared beside it: a paper's
measurement, a paper's analysis that parex computes its own way, or a wiring check, where
parex's number is the paper's own formula or constants. Only the first two are reproductions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

WITHIN, OUTSIDE, OUT_OF_SCOPE = "within", "outside", "out of scope"

# strongest first: a row may claim less than its figure, never more
EVIDENCE = {
    "measurement": "the paper's number was measured on its hardware (a time, a throughput, a "
                   "loss): agreement reproduces a measurement",
    "analysis": "the paper's number is a closed form or an analytic table, which parex computes "
                "its own way (schedule tables, compiled programs, its predictor's accounting)",
    "wiring": "parex's number is the paper's own formula or constants, or the paper's side is "
              "parex's own derivation: agreement shows the wiring, not a reproduction",
}


@dataclass(frozen=True)
class Tolerance:
    """parex / paper must lie in [lo, hi]; `rule` says why those bounds, in words."""

    lo: float
    hi: float
    rule: str = ""

    def holds(self, ratio: float) -> bool:
        return bool(math.isfinite(ratio) and self.lo <= ratio <= self.hi)

    def to_json(self) -> dict:
        return {"lo": self.lo, "hi": self.hi, "rule": self.rule}


def contains(low: float, high: float, value: float) -> bool:
    """A bracket's hit: the paper's value inside [low, high] (NaN ends never hit)."""
    return bool(low <= value <= high)


def verdict(row, tolerance: Tolerance) -> str:
    """WITHIN, OUTSIDE or OUT_OF_SCOPE for one row (`tolerance`: the figure's)."""
    if row.scope is not None:
        return OUT_OF_SCOPE
    if row.is_bracket:
        hit = contains(row.low, row.high, row.paper)
    else:
        hit = (row.tolerance or tolerance).holds(row.ratio)
    return WITHIN if hit else OUTSIDE


@dataclass(frozen=True)
class Tally:
    """A figure's (or the gallery's) rows: within, scored (within + outside), out of scope."""

    within: int = 0
    scored: int = 0
    out_of_scope: int = 0

    @property
    def passed(self) -> bool:
        return self.scored > 0 and self.within == self.scored

    def __add__(self, other: "Tally") -> "Tally":
        return Tally(self.within + other.within, self.scored + other.scored,
                     self.out_of_scope + other.out_of_scope)

    def text(self) -> str:
        """"47/54" or "6/6 (+4 out of scope)"."""
        extra = f" (+{self.out_of_scope} out of scope)" if self.out_of_scope else ""
        return f"{self.within}/{self.scored}{extra}"


def tally(rows, tolerance: Tolerance) -> Tally:
    verdicts = [verdict(r, tolerance) for r in rows]
    return Tally(verdicts.count(WITHIN), verdicts.count(WITHIN) + verdicts.count(OUTSIDE),
                 verdicts.count(OUT_OF_SCOPE))


def check_evidence(row_evidence: str | None, figure_evidence: str) -> str:
    """A row's evidence (the figure's unless it names a weaker one)."""
    names = list(EVIDENCE)
    evidence = row_evidence or figure_evidence
    if evidence not in EVIDENCE:
        raise ValueError(f"evidence {evidence!r}: use one of {', '.join(names)}")
    if names.index(evidence) < names.index(figure_evidence):
        raise ValueError(f"a row of a {figure_evidence!r} figure claims {evidence!r}: declare "
                         "the figure's evidence as its strongest row's")
    return evidence


__all__ = ["EVIDENCE", "OUTSIDE", "OUT_OF_SCOPE", "Tally", "Tolerance", "WITHIN", "contains",
           "check_evidence", "tally", "verdict"]
