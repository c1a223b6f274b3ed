"""Running figures: the fast ones in this process, each slow one in its own `parex figure NAME
--json` subprocess with the emulated devices it needs (a process's device count is fixed when JAX
starts, the measured bubble needs one device per core, and XLA can abort a process), with a
timeout; a subprocess that fails becomes an *error* on the scoreboard, never a pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from ..errors import InputError, unknown
from .core import REGISTRY, FigureResult, Spec, from_json, run

ORDER = ("zero-table1", "korthikanti-table2", "korthikanti-measured", "megatron-table1",
         "pipeline-bubble", "pipeline-memory", "zero-bubble", "interleaved-bubble",
         "ring-ulysses", "diloco", "dilocox", "dilocox-mechanisms", "hexiscale",
         "scaling-book-roofline", "axonn", "ppll", "moe", "llama3-goodput")


def ordered_specs() -> list[Spec]:
    rest = [name for name in REGISTRY if name not in ORDER]
    return [REGISTRY[name] for name in (*ORDER, *rest) if name in REGISTRY]


def spec(name: str) -> Spec:
    """The registered figure `name`; an unknown name lists the known ones."""
    if name not in REGISTRY:
        known = [s.name for s in ordered_specs()]
        raise InputError(unknown("figure", name, known) + " (parex figure --list)")
    return REGISTRY[name]


def compute_and_save(s: Spec, out: Path | None, scale: float = 1.0) -> FigureResult:
    """Compute in this process; write its PNG and SVG to `out` (when given and drawable). A
    chart that cannot be drawn is a note: the numbers are kept."""
    result = run(s)
    if out is not None and result.status in ("passed", "failed"):
        try:
            from .charts import save_figure

            result.files = save_figure(result, out, scale)
        except Exception as error:  # altair / vl-convert missing, or a chart bug
            result.notes.append(f"no chart written: {type(error).__name__}: {error}")
    return result


def guarded(s: Spec, out: Path | None) -> FigureResult:
    """compute_and_save, with a figure that raises recorded as an error (the run goes on)."""
    start = time.perf_counter()
    try:
        return compute_and_save(s, out)
    except Exception as error:
        return FigureResult(s, [], "error", time.perf_counter() - start,
                            reason=f"{type(error).__name__}: {error}")


def in_subprocess(s: Spec, out: Path | None, timeout: float) -> FigureResult:
    """`parex figure NAME --json [--out DIR]` in a fresh process, read back."""
    command = [sys.executable, "-m", "parex.cli", "figure", s.name, "--json"]
    if out is not None:
        command += ["--out", str(out)]
    start = time.perf_counter()
    env = os.environ | {"PYTHONWARNINGS": "ignore"}
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return FigureResult(s, [], "error", time.perf_counter() - start,
                            reason=f"did not finish within {timeout:.0f} s")
    lines = done.stdout.strip().splitlines()
    try:
        return from_json(json.loads(lines[-1]))
    except (IndexError, json.JSONDecodeError, KeyError):
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return FigureResult(s, [], "error", time.perf_counter() - start,
                            reason=f"exit {done.returncode}: {' / '.join(tail)}")


def run_all(out: Path | None, *, fast: bool = False, timeout: float = 1800,
            done=None) -> list[FigureResult]:
    """Every figure in the gallery's order, each slow one (or one that needs devices) in its
    own process; `fast` leaves the slow ones out (listed as not run). `done(results)` is
    called after each figure with the results so far (to save them as they come)."""
    from tqdm.auto import tqdm

    results = []
    bar = tqdm(ordered_specs(), desc="figures", unit="figure")
    for s in bar:
        bar.set_postfix_str(s.name)
        if fast and s.slow:
            results.append(FigureResult(s, [], "skipped", 0.0, reason="slow: not run (--fast)"))
        elif s.slow or s.devices:
            results.append(in_subprocess(s, out, timeout))
        else:
            results.append(guarded(s, out))
        if done:
            done(results)
    return results
