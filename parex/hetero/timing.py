"""A pipeline whose stages differ: the 1F1B schedule table timed with each stage's own costs.

The table is the one the homogeneous executor runs and the predictor times
(parex.parallel.schedules); here every op takes its own stage's time (t_F, t_B of that stage's
chip, layers and tensor degree) and every stage-to-stage input waits for the hop across that
boundary, so a slow stage or a slow link shows up where it sits in the schedule:

    start(op) = max(end(previous op on its stage), end(each input) + hop of that boundary)

`closed_form` is the search's shortcut for the same makespan: one microbatch through every stage
and every hop, then m − 1 more at the pace of the slowest stage or link (exact for equal stages
and free hops, where it is 1F1B's (m + p − 1)·(t_F + t_B)).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..parallel.schedules import make_schedule
from ..parallel.tables import B, F


@lru_cache(maxsize=512)
def _table(p: int, m: int):
    return make_schedule("1f1b", p, m, 1)


def peak_in_flight(p: int, m: int) -> np.ndarray:
    """Microbatches whose activations each stage holds at its peak (from the table)."""
    return np.array(_table(p, m).peak_in_flight(), dtype=float)


def pipeline_times(t_f, t_b, hops, m: int) -> dict:
    """Timing of one pipeline: `makespan` and each stage's `last_backward` end (seconds), for
    per-stage t_f, t_b (p,) and per-boundary hops (p − 1,), m microbatches: the schedule
    tables' own timing (parallel.tables.Tables.spans) with each stage's costs."""
    t_f, t_b = np.asarray(t_f, float), np.asarray(t_b, float)
    p = len(t_f)
    arrays = _table(p, m).arrays
    costs = np.zeros((1, 1, p, 3))
    costs[0, 0, :, F], costs[0, 0, :, B] = t_f, t_b
    hop = np.zeros((1, 1, p))
    hop[0, 0, :p - 1] = 0.0 if hops is None else np.asarray(hops, float)
    end = arrays.spans(costs, hop)[1][:, 0]
    last_b = np.zeros(p)
    np.maximum.at(last_b, arrays.stage[arrays.kind == B], end[arrays.kind == B])
    return {"makespan": float(end.max()), "last_backward": last_b}


@lru_cache(maxsize=4096)
def hops_on_path(p: int, m: int) -> float:
    """How many stage-to-stage hops lie on the critical path of the 1F1B table (t_B = 2·t_F,
    probed with a small hop, as parex.predict.schedule_stats does)."""
    if p == 1:
        return 0.0
    table, probe = _table(p, m), 1e-3
    return (table.makespan(1.0, 2.0, 0.0, probe) - table.makespan(1.0, 2.0)) / probe


def closed_form(busy, hops, m, on_path):
    """One microbatch through every stage, the hops the critical path crosses, then m − 1 more
    at the pace of the slowest stage or link. busy: (..., p) t_F + t_B per stage; hops:
    (..., p−1) seconds per send; m and on_path (hops_on_path): (...). Broadcasts."""
    busy, hops = np.asarray(busy, float), np.asarray(hops, float)
    p = busy.shape[-1]
    slowest_hop = hops.max(-1) if hops.shape[-1] else 0.0
    pace = np.maximum(busy.max(-1), slowest_hop)
    mean_hop = hops.sum(-1) / max(p - 1, 1)
    return busy.sum(-1) + np.asarray(on_path) * mean_hop + (np.asarray(m) - 1) * pace


__all__ = ["closed_form", "hops_on_path", "peak_in_flight", "pipeline_times"]
