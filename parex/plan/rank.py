"""Ranking predicted layouts: what fits, in which order, what limits each one, the Pareto front.

Everything here reads plain columns (one entry per (layout, remat) row: the predictor's
`step_*_s`, `memory_*_bytes` and `mfu` columns plus a few layout columns), never how the rows
were produced, so an enumerated grid and a hand-written candidate list rank the same way.

    objective "time"    shortest predicted step first
    objective "mfu"     highest model FLOPs utilisation first
    objective "memory"  least memory per device first
    objective "time-to-train"  as "time" on one cluster size, where every row shares the
                        failure rate and the checkpoint; parex.plan.time_to_train ranks sizes
Ties go to the faster, then the leaner, then the simpler layout (fewer techniques switched on).
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..layout import Axis
from ..record import bound

OBJECTIVES = ("time", "mfu", "memory", "time-to-train")
TIME_PARTS = ("compute", "exposed_comm", "bubble")
MEMORY_PARTS = ("params", "grads", "optimizer", "activations", "temp", "argument", "total")


def check_objective(objective: str) -> None:
    if objective not in OBJECTIVES:
        raise InputError(f"unknown objective {objective!r}; use one of {', '.join(OBJECTIVES)}")


def simplicity(cols: dict) -> np.ndarray:
    """How many techniques a row switches on beyond plain data parallelism (lower is simpler)."""
    count = np.zeros(len(cols["step_time_s"]), np.int64)
    axes = [(a.value, 1) for a in (Axis.FSDP, Axis.TENSOR, Axis.SEQ, Axis.STAGE)]
    for name, plain in axes + [("zero", 0), ("sp", 0), ("virtual_stages", 1),
                               ("microbatches", 1), ("remat", 0)]:
        if name in cols:
            count += cols[name] != plain
    return count


def ranked(cols: dict, fits: np.ndarray, objective: str = "time") -> np.ndarray:
    """Indices of the fitting rows, best first."""
    check_objective(objective)
    rows = np.nonzero(fits)[0]
    step, memory = cols["step_time_s"][rows], cols["memory_total_bytes"][rows]
    primary = {"time": step, "mfu": -cols["mfu"][rows], "memory": memory,
               "time-to-train": step}[objective]
    order = np.lexsort((simplicity(cols)[rows], memory, step, primary))
    return rows[order]


def pareto_front(cols: dict, fits: np.ndarray) -> np.ndarray:
    """Fitting rows that no other fitting row beats on both step time and memory per device,
    by increasing memory."""
    rows = np.nonzero(fits)[0]
    if not len(rows):
        return rows
    step, memory = cols["step_time_s"][rows], cols["memory_total_bytes"][rows]
    by_memory = np.lexsort((step, memory))
    best_before = np.minimum.accumulate(np.r_[np.inf, step[by_memory][:-1]])
    return rows[by_memory[step[by_memory] < best_before]]


def bottleneck(cols: dict, i: int, cap: float) -> str:
    """What bounds row i (record.bound, against the plan's cap)."""
    step = {p: float(cols[f"step_{p}_s"][i]) for p in TIME_PARTS}
    return bound(step, float(cols["memory_total_bytes"][i]), cap)


def entry(cols: dict, i: int, cap: float) -> dict:
    """One ranked row as JSON: step time and memory broken down, MFU, fit and bottleneck."""
    total = float(cols["step_time_s"][i])
    memory = {p: float(cols[f"memory_{p}_bytes"][i]) for p in MEMORY_PARTS}
    return {
        "step_time_s": {"total": total} | {p: float(cols[f"step_{p}_s"][i]) for p in TIME_PARTS},
        "memory_bytes_per_device": memory,
        "memory_headroom_bytes": cap - memory["total"],
        "mfu": float(cols["mfu"][i]),
        "tokens_per_s": float(cols["tokens_per_s"][i]),
        "fits": bool(memory["total"] <= cap),
        "bottleneck": bottleneck(cols, i, cap),
    }


def distinct(cols: dict, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first row of each run of equally predicted rows in `order`, the run lengths): layouts
    the predictor cannot tell apart (data=N,zero=3 and fsdp=N, say) count once."""
    if not len(order):
        return order, order
    key = np.stack([cols["step_time_s"][order], cols["memory_total_bytes"][order]], 1)
    new = np.r_[True, ~np.isclose(key[1:], key[:-1], rtol=1e-9, atol=0).all(1)]
    starts = np.nonzero(new)[0]
    return order[starts], np.diff(np.r_[starts, len(order)])


__all__ = ["MEMORY_PARTS", "OBJECTIVES", "TIME_PARTS", "bottleneck", "distinct", "entry", "pareto_front",
           "ranked", "simplicity"]
