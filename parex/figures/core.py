"""What every reproduced figure is: rows of (quantity, paper, parex, ratio) held to a stated
tolerance, and a registry of the functions that compute them.

    @figure("zero-table1", title=..., source=..., tolerance=Tolerance(0.99, 1.01, "…"))
    def zero_table1() -> Figure: ...

A figure function returns a `Figure` (its rows and, optionally, a chart of its own). `run`
calls it and judges it into a `FigureResult`: a row is *within* when lo ≤ parex / paper ≤ hi
(its own tolerance, or the figure's); the figure *passes* when every row is within, except the
rows marked `known` — a deviation whose cause is named (e.g. "parex keeps biases replicated"),
shown on the scoreboard beside its reason and never counted as a pass or hidden. A function that
raises `FeatureMissing` marks its figure *missing*: listed, never faked.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

KINDS = ("predicted", "measured")


class FeatureMissing(RuntimeError):
    """The parex feature a figure needs is not there (yet): the figure is listed as missing."""


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


@dataclass(frozen=True)
class Row:
    """One number of the paper beside parex's."""

    quantity: str  # what is compared, with its unit, e.g. "7.5B · N_d=64 · ZeRO-3 (GB)"
    paper: float
    parex: float
    kind: str = "predicted"  # "predicted" (analytic model, schedule table) or "measured"
    tolerance: Tolerance | None = None  # this row's own bounds (else the figure's)
    known: str | None = None  # a named deviation: why this row is not expected to agree
    note: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"row kind {self.kind!r}: use one of {', '.join(KINDS)}")
        for name in ("paper", "parex"):  # numpy scalars become plain floats (JSON)
            object.__setattr__(self, name, float(getattr(self, name)))

    @property
    def ratio(self) -> float:
        if self.paper == 0:
            return 1.0 if self.parex == 0 else math.inf
        return self.parex / self.paper


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
    """A registered figure: its name, what it reproduces and how costly it is."""

    name: str
    title: str
    source: str  # paper, table/figure, page or section
    tolerance: Tolerance
    fn: Callable[[], Figure]
    slow: bool = False  # compiles or trains: minutes on 2 cores
    devices: int = 0  # emulated devices the figure needs in its process (0: no JAX devices)


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

    def within(self, row: Row) -> bool:
        return (row.tolerance or self.spec.tolerance).holds(row.ratio)

    def held_rows(self) -> list[Row]:
        return [r for r in self.rows if r.known is None]

    def worst(self, rows=None) -> Row | None:
        """The row farthest from the paper (largest |log ratio|)."""
        rows = self.rows if rows is None else rows
        finite = [r for r in rows if r.paper and r.ratio > 0 and math.isfinite(r.ratio)]
        return max(finite, key=lambda r: abs(math.log(r.ratio)), default=None)

    def kinds(self) -> list[str]:
        return [k for k in KINDS if any(r.kind == k for r in self.rows)]

    def to_json(self) -> dict:
        worst = self.worst(self.held_rows())
        return {
            "name": self.spec.name, "title": self.spec.title, "source": self.spec.source,
            "rows": [{"quantity": r.quantity, "paper": r.paper, "parex": r.parex,
                      "ratio": r.ratio, "kind": r.kind, "within": self.within(r),
                      "known": r.known, "note": r.note,
                      **({"tolerance": r.tolerance.to_json()} if r.tolerance else {})}
                     for r in self.rows],
            "tolerance": self.spec.tolerance.to_json(), "passed": self.passed,
            "status": self.status, "reason": self.reason, "kinds": self.kinds(),
            "worst_ratio": worst.ratio if worst else None,
            "known_deviations": sum(r.known is not None for r in self.rows),
            "slow": self.spec.slow, "seconds": round(self.seconds, 2),
            "notes": self.notes, "files": {k: str(v) for k, v in self.files.items()}}


REGISTRY: dict[str, Spec] = {}


def figure(name: str, *, title: str, source: str, tolerance: Tolerance, slow: bool = False,
           devices: int = 0):
    """Register the decorated function as the figure `name`."""
    def register(fn: Callable[[], Figure]) -> Callable[[], Figure]:
        if name in REGISTRY:
            raise ValueError(f"figure {name!r} is registered twice")
        REGISTRY[name] = Spec(name, title, source, tolerance, fn, slow, devices)
        return fn
    return register


def judge(spec: Spec, fig: Figure, seconds: float) -> FigureResult:
    if not fig.rows:
        raise ValueError(f"figure {spec.name} returned no rows: a figure compares numbers")
    result = FigureResult(spec, list(fig.rows), "passed", seconds, fig.chart, list(fig.notes))
    held = result.held_rows()
    if not held or not all(result.within(r) for r in held):
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
    rows = [Row(r["quantity"], r["paper"], r["parex"], r["kind"],
                Tolerance(**r["tolerance"]) if r.get("tolerance") else None, r.get("known"),
                r.get("note", "")) for r in data["rows"]]
    return FigureResult(spec, rows, data["status"], data["seconds"], None, data["notes"],
                        data.get("reason", ""), dict(data.get("files", {})))


__all__ = ["FeatureMissing", "Figure", "FigureResult", "KINDS", "REGISTRY", "Row", "Spec",
           "Tolerance", "figure", "from_json", "judge", "run"]
