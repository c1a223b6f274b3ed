"""What every reproduced figure is: rows of (quantity, paper, parex, ratio) held to a stated
tolerance, and a registry of the functions that compute them.

    @figure("zero-table1", title=..., source=..., tolerance=Tolerance(0.99, 1.01, "…"),
            evidence="analysis")
    def zero_table1() -> Figure: ...

A figure function returns a `Figure` (its rows and, optionally, a chart of its own). `run`
calls it and judges it into a `FigureResult` by the one scoring rule (parex.figures.scoring):
a point is within its tolerance or not, a bracket hits only when it contains the paper's value,
and a row is out of scope only for a reason the figure declared in its decorator
(`scopes={name: reason}`, before anything is computed); out-of-scope rows are counted apart,
never as passes. A function that raises `FeatureMissing` marks its figure *missing*: listed,
never faked.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

from .scoring import (EVIDENCE, OUTSIDE, WITHIN, Tally, Tolerance, check_evidence, tally,
                      verdict)

KINDS = ("predicted", "measured")


class FeatureMissing(RuntimeError):
    """The parex feature a figure needs is not there (yet): the figure is listed as missing."""


@dataclass(frozen=True)
class Row:
    """One number of the paper beside parex's: a point, or a bracket (`Row.bracket`)."""

    quantity: str  # what is compared, with its unit, e.g. "7.5B · N_d=64 · ZeRO-3 (GB)"
    paper: float
    parex: float  # a bracket's: the point of [low, high] nearest the paper's value
    kind: str = "predicted"  # "predicted" (analytic model, schedule table) or "measured"
    tolerance: Tolerance | None = None  # this point's own bounds (else the figure's)
    scope: str | None = None  # out of scope: a name the figure declared (Spec.scopes)
    note: str = ""
    low: float | None = None  # a bracket's ends
    high: float | None = None
    evidence: str | None = None  # what the paper's number is, if weaker than the figure's

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"row kind {self.kind!r}: use one of {', '.join(KINDS)}")
        for name in ("paper", "parex", "low", "high"):  # numpy scalars become floats (JSON)
            if getattr(self, name) is not None:
                object.__setattr__(self, name, float(getattr(self, name)))
        if (self.low is None) != (self.high is None):
            raise ValueError(f"row {self.quantity!r}: a bracket has both ends")

    @classmethod
    def bracket(cls, quantity: str, paper: float, values, kind: str = "predicted",
                note: str = "", evidence: str | None = None) -> "Row":
        """parex's values over the settings the paper did not publish, as [min, max]; no
        values (nothing fits) gives NaN ends, which never hit."""
        values = [float(v) for v in values]
        low, high = (min(values), max(values)) if values else (math.nan, math.nan)
        nearest = min(max(float(paper), low), high) if values else math.nan
        return cls(quantity, paper, nearest, kind, None, None, note, low, high, evidence)

    @property
    def is_bracket(self) -> bool:
        return self.low is not None

    @property
    def ratio(self) -> float:
        if self.paper == 0:
            return 1.0 if self.parex == 0 else math.inf
        return self.parex / self.paper

    def to_json(self) -> dict:
        out = {"quantity": self.quantity, "paper": self.paper, "parex": self.parex,
               "ratio": self.ratio, "kind": self.kind, "scope": self.scope, "note": self.note}
        if self.is_bracket:
            out |= {"low": self.low, "high": self.high}
        if self.tolerance:
            out["tolerance"] = self.tolerance.to_json()
        if self.evidence:
            out["evidence"] = self.evidence
        return out

    @classmethod
    def from_json(cls, r: dict) -> "Row":
        tolerance = Tolerance(**r["tolerance"]) if r.get("tolerance") else None
        return cls(r["quantity"], r["paper"], r["parex"], r["kind"], tolerance, r.get("scope"),
                   r.get("note", ""), r.get("low"), r.get("high"), r.get("evidence"))


@dataclass
class Figure:
    """What a figure function returns: its rows, optionally a function that draws a chart of
    its own (altair, imported only when drawn), and notes (how it was measured, what the
    paper's number assumes)."""

    rows: list[Row]
    chart: Callable[[], object] | None = None
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Spec:
    """A registered figure: its name, what it reproduces, what its agreement is evidence of,
    the out-of-scope reasons it declares, and how costly it is."""

    name: str
    title: str
    source: str  # paper, table/figure, page or section
    tolerance: Tolerance
    fn: Callable[[], Figure]
    evidence: str  # a key of scoring.EVIDENCE: its strongest row's
    slow: bool = False  # compiles or trains: minutes on 2 cores
    devices: int = 0  # emulated devices the figure needs in its process (0: no JAX devices)
    scopes: Mapping[str, str] = field(default_factory=dict)  # name -> why out of scope

    def __post_init__(self):
        if self.evidence not in EVIDENCE:
            raise ValueError(f"figure {self.name}: evidence {self.evidence!r}, use one of "
                             f"{', '.join(EVIDENCE)}")


@dataclass
class FigureResult:
    spec: Spec
    rows: list[Row]
    status: str  # "passed", "failed", "missing", "error", "skipped"
    seconds: float
    chart: Callable[[], object] | None = None
    notes: list[str] = field(default_factory=list)
    reason: str = ""  # why missing, or the error
    files: dict = field(default_factory=dict)  # "png", "svg" -> path

    @property
    def passed(self) -> bool | None:
        return self.status == "passed" if self.status in ("passed", "failed") else None

    def verdict(self, row: Row) -> str:
        return verdict(row, self.spec.tolerance)

    def within(self, row: Row) -> bool:
        return self.verdict(row) == WITHIN

    def scored_rows(self) -> list[Row]:
        return [r for r in self.rows if r.scope is None]

    def tally(self) -> Tally:
        return tally(self.rows, self.spec.tolerance)

    def scope_reason(self, row: Row) -> str | None:
        return None if row.scope is None else self.spec.scopes[row.scope]

    def evidence(self, row: Row) -> str:
        return check_evidence(row.evidence, self.spec.evidence)

    def worst(self, rows=None) -> Row | None:
        """The scored row farthest from the paper (largest |log ratio|; a bracket by its
        nearer end)."""
        rows = self.scored_rows() if rows is None else rows
        finite = [r for r in rows if r.paper and r.ratio > 0 and math.isfinite(r.ratio)]
        return max(finite, key=lambda r: abs(math.log(r.ratio)), default=None)

    def kinds(self) -> list[str]:
        return [k for k in KINDS if any(r.kind == k for r in self.rows)]

    def to_json(self) -> dict:
        worst, t = self.worst(), self.tally()
        return {
            "name": self.spec.name, "title": self.spec.title, "source": self.spec.source,
            "evidence": self.spec.evidence,
            "rows": [r.to_json() | {"verdict": self.verdict(r), "within": self.within(r),
                                    "evidence": self.evidence(r),
                                    "out_of_scope": self.scope_reason(r)} for r in self.rows],
            "tolerance": self.spec.tolerance.to_json(), "passed": self.passed,
            "status": self.status, "reason": self.reason, "kinds": self.kinds(),
            "within": t.within, "scored": t.scored, "out_of_scope": t.out_of_scope,
            "worst_ratio": worst.ratio if worst else None,
            "slow": self.spec.slow, "seconds": round(self.seconds, 2),
            "notes": self.notes, "files": {k: str(v) for k, v in self.files.items()}}


REGISTRY: dict[str, Spec] = {}


def figure(name: str, *, title: str, source: str, tolerance: Tolerance, evidence: str,
           slow: bool = False, devices: int = 0, scopes: Mapping[str, str] | None = None):
    """Register the decorated function as the figure `name`. `evidence`: what its agreement
    shows (scoring.EVIDENCE); `scopes`: the out-of-scope reasons its rows may name, declared
    here, before anything is computed."""
    def register(fn: Callable[[], Figure]) -> Callable[[], Figure]:
        if name in REGISTRY:
            raise ValueError(f"figure {name!r} is registered twice")
        REGISTRY[name] = Spec(name, title, source, tolerance, fn, evidence, slow, devices,
                              dict(scopes or {}))
        return fn
    return register


def judge(spec: Spec, fig: Figure, seconds: float) -> FigureResult:
    """The figure's rows scored (scoring.verdict): passed when every scored row is within."""
    if not fig.rows:
        raise ValueError(f"figure {spec.name} returned no rows: a figure compares numbers")
    result = FigureResult(spec, list(fig.rows), "passed", seconds, fig.chart, list(fig.notes))
    for row in result.rows:
        if row.scope is not None and row.scope not in spec.scopes:
            raise ValueError(f"figure {spec.name}: row {row.quantity!r} names scope "
                             f"{row.scope!r}, which the figure does not declare")
        result.evidence(row)  # a row claims no more than its figure
    if not result.tally().passed:
        result.status = "failed"
    return result


def run(spec: Spec) -> FigureResult:
    """Compute one figure and judge it. FeatureMissing marks it missing; any other exception
    propagates (runner.guarded records it as an error in `parex figure --all`)."""
    start = time.perf_counter()
    try:
        fig = spec.fn()
    except FeatureMissing as missing:
        return FigureResult(spec, [], "missing", time.perf_counter() - start, reason=str(missing))
    return judge(spec, fig, time.perf_counter() - start)


def from_json(data: dict) -> FigureResult:
    """A FigureResult read back from `to_json` (e.g. from a subprocess)."""
    spec = REGISTRY[data["name"]]
    rows = [Row.from_json(r) for r in data["rows"]]
    result = FigureResult(spec, rows, data["status"], data["seconds"], None, data["notes"],
                          data.get("reason", ""), dict(data.get("files", {})))
    if result.status in ("passed", "failed"):  # judged again: the rule, not the file, decides
        result.status = "passed" if result.tally().passed else "failed"
    return result


__all__ = ["FeatureMissing", "Figure", "FigureResult", "KINDS", "OUTSIDE", "REGISTRY", "Row",
           "Spec", "Tolerance", "WITHIN", "figure", "from_json", "judge", "run"]
