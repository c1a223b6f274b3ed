"""What the predictor reads from pipeline schedule tables, for every distinct table of a grid at
once: its ticks, the most microbatch-chunks a stage holds, and its makespan in units of t_F with
the makespan's growth per second of stage-to-stage hop.

A planner's grid of a hundred thousand layouts has a few hundred distinct tables; the missing ones
are placed and timed together (parallel.tables, a few numpy calls per tick) and cached, so later
calls only look them up; the cache is kept on disk for later processes (predict.table_store).
"""

from __future__ import annotations

import numpy as np

from ..parallel.timetable import BUFFERS
from ..parallel.schedules import SCHEDULES, schedule_arrays
from ..parallel.tables import groups
from . import table_store
from .shapes import Grid

HOP = 1e-3  # the probe hop (in units of t_F) that measures the makespan's growth per hop
_TABLES: dict[tuple, tuple] = {}  # (code, p, m, v) -> (ticks, peak in flight, buffer slots...)
_MAKESPANS: dict[tuple, tuple[float, float]] = {}  # key + (t_B, t_W) -> (makespan, per hop)
_LAST: dict = {"rows": {}}  # the tables built last (for makespans) and each key's row in them
_LIMIT = 1 << 16  # entries a cache keeps; past it, it starts over
_STORE = {"read": False}


def _read_store() -> None:
    """Fill the caches from the disk store, once per process."""
    if not _STORE["read"]:
        _STORE["read"] = True
        saved = table_store.load()
        for cache, kind in ((_TABLES, "tables"), (_MAKESPANS, "makespans")):
            if len(cache) + len(saved[kind]) <= _LIMIT:
                cache.update(saved[kind])


def _distinct(grid: Grid) -> tuple[np.ndarray, list[tuple], np.ndarray, np.ndarray]:
    """(pipelined rows, their distinct (code, p, m, v) keys, each row's key index, one row per
    key)."""
    rows = np.nonzero(grid.stage > 1)[0]
    cols = [c[rows].astype(np.int64) for c in (grid.schedule, grid.stage, grid.microbatches,
                                                grid.virtual_stages)]
    code = ((cols[0] * 4096 + cols[1]) * (1 << 24) + cols[2]) * 1024 + cols[3]
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    keys = [tuple(int(c[i]) for c in cols) for i in first]
    return rows, keys, inverse.ravel(), rows[first]


def _build(keys: list[tuple]) -> None:
    """Place the tables of `keys` together; keep their ticks and peaks."""
    if not keys:
        return
    tables = schedule_arrays([(SCHEDULES[c], p, m, v) for c, p, m, v in keys])
    ticks, peaks = tables.n_ticks(), tables.peak_in_flight().max(1)
    slots = tables.buffer_slots()
    for i, key in enumerate(keys):
        _TABLES[key] = (int(ticks[i]), int(peaks[i])) + tuple(int(slots[b][i]) for b in BUFFERS)
    _LAST.update(tables=tables, rows={key: i for i, key in enumerate(keys)})
    table_store.save({key: _TABLES[key] for key in keys}, {})


def _make_room(cache: dict, keys: list, missing: list) -> list:
    """The keys to compute: the missing ones, or all of `keys` when the cache would grow past
    _LIMIT and is emptied first (so every key a call needs is in the cache when it reads)."""
    if len(cache) + len(missing) > _LIMIT:
        cache.clear()
        return list(keys)
    return missing


def _table_values(grid: Grid) -> np.ndarray:
    """(layouts, 2 + len(BUFFERS)) of _TABLES' values; zeros without a pipeline."""
    out = np.zeros((len(grid), 2 + len(BUFFERS)))
    rows, keys, inverse, _ = _distinct(grid)
    if len(rows):
        _read_store()
        _build(_make_room(_TABLES, keys, [k for k in keys if k not in _TABLES]))
        out[rows] = np.array([_TABLES[k] for k in keys], float)[inverse]
    return out


def table_columns(grid: Grid) -> tuple[np.ndarray, np.ndarray]:
    """(ticks, peak microbatch-chunks in flight) per layout; (0, 1) without a pipeline, where
    microbatches of gradient accumulation run one after another."""
    values = _table_values(grid)
    return values[:, 0], np.where(grid.stage > 1, values[:, 1], 1.0)


def buffer_columns(grid: Grid) -> dict[str, np.ndarray]:
    """Per layout, the slots of each buffer of the pipeline executor (parallel.timetable): the most
    values one stage holds at once; zeros without a pipeline."""
    values = _table_values(grid)
    return {name: values[:, 2 + i] for i, name in enumerate(BUFFERS)}


def _placed(keys: list[tuple]):
    """(the tables of the keys' (code, p, m, v), each table key's row in them): the last tables
    built, or these placed together when those lack one."""
    needed = list(dict.fromkeys(k[:4] for k in keys))
    if any(k not in _LAST["rows"] for k in needed):
        _build(needed)
    return _LAST["tables"], _LAST["rows"]


def _time(keys: list[tuple]) -> None:
    """Makespans of (key, t_B, t_W) with t_F = 1, without and with the probe hop. A table may
    be timed for several (t_B, t_W) at once: cost sets 2j (no hop) and 2j + 1 (the probe)."""
    if not keys:
        return
    tables, rows = _placed(keys)
    column, used = {}, {}  # key -> its cost set j in its table; table -> sets used
    for key in keys:
        i = rows[key[:4]]
        column[key] = used.get(i, 0)
        used[i] = column[key] + 1
    costs = np.ones((len(tables), 2 * max(used.values()), 3))
    for key, j in column.items():
        costs[rows[key[:4]], 2 * j:2 * j + 2, 1:] = key[4:]  # (t_F = 1, t_B, t_W)
    hops = np.tile([0.0, HOP], (len(tables), max(used.values())))
    span = tables.makespans(costs, hops)
    for key, j in column.items():
        i = rows[key[:4]]
        _MAKESPANS[key] = (float(span[i, 2 * j]),
                           float((span[i, 2 * j + 1] - span[i, 2 * j]) / HOP))
    table_store.save({}, {key: _MAKESPANS[key] for key in keys})


def _with_costs(keys: list[tuple], inverse: np.ndarray, *columns) -> tuple[list, np.ndarray]:
    """(distinct table key + per-row values, each row's index among them): rows of one table may
    differ in their costs (t_B under remat, Ulysses' explicit backward), so each distinct
    combination is a key of its own. `inverse`: each row's table key; `columns`: one per value."""
    import pandas as pd

    # a hash factorisation (no sort of the rows): each column's codes, then their combination's
    key = np.zeros(len(inverse), np.int64)
    for column in (inverse, *columns):
        codes, values = pd.factorize(np.asarray(column))
        key = key * len(values) + codes
    back, first = pd.factorize(key)
    rows = np.zeros(len(first), np.int64)
    rows[back[::-1]] = np.arange(len(back))[::-1]  # each combination's first row
    distinct = np.stack([inverse, *columns], 1)[rows]
    return [keys[int(c[0])] + tuple(float(x) for x in c[1:]) for c in distinct], back.ravel()


def makespan_columns(grid: Grid, t_b: np.ndarray, t_w: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(makespan with t_F = 1 and free hops, its growth per second of hop) per layout, for
    t_B and t_W in units of t_F (columns; layouts of one table may differ in them)."""
    base, per_hop = np.zeros(len(grid)), np.zeros(len(grid))
    rows, keys, inverse, _ = _distinct(grid)
    if len(rows):
        _read_store()
        t_b, t_w = (np.broadcast_to(c, len(grid))[rows] for c in (t_b, t_w))
        timed, back = _with_costs(keys, inverse, t_b, t_w)
        _time(_make_room(_MAKESPANS, timed, [k for k in timed if k not in _MAKESPANS]))
        values = np.array([_MAKESPANS[k] for k in timed])[back]
        base[rows], per_hop[rows] = values[:, 0], values[:, 1]
    return base, per_hop


# --- the tick-synchronous executor: every tick lasts as long as its slowest stage -----------------

_LOCKSTEP: dict[tuple, float] = {}  # key + (t_B, t_W, r) -> Σ_ticks max(S_t, r·M_t)


def _lockstep(keys: list[tuple]) -> None:
    if not keys:
        return
    tables, rows = _placed(keys)
    combos = list(dict.fromkeys((rows[k[:4]], k[4], k[5]) for k in keys))
    index = {c: i for i, c in enumerate(combos)}
    total, largest, first, ticks = tables.tick_loads(*(np.array([c[i] for c in combos])
                                                        for i in range(3)))
    which = np.array([index[(rows[k[:4]], k[4], k[5])] for k in keys])
    key, offset = groups(ticks[which])
    at = first[which][key] + offset
    ratio = np.array([k[6] for k in keys])[key]
    sums = np.bincount(key, np.maximum(total[at], ratio * largest[at]), len(keys))
    _LOCKSTEP.update(zip(keys, sums.tolist()))


def lockstep_columns(grid: Grid, t_b: np.ndarray, t_w: np.ndarray, ratio: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ticks, Σ_t S_t, Σ_t max(S_t, ratio·M_t)) per layout, in units of t_F, over the table's
    ticks t: S_t the costs of tick t's ops summed over stages, M_t the largest. A tick of the
    emulated executor lasts max(d·S_t, P·M_t)·t_F/n (the tick's work over the cores, or its
    slowest op when fewer busy devices than the P that run at once share them); ratio = P/d.
    Σ_t S_t is every op once, p·m·v·(1 + t_B + t_W); with ratio ≤ 1 the two sums agree (S_t ≥
    M_t), so only rows with ratio > 1 read the tables. Zeros without a pipeline."""
    busy = np.where(grid.stage > 1, grid.stage * grid.microbatches * grid.virtual_stages
                    * (1 + t_b + t_w), 0.0)
    ticks = table_columns(grid)[0]
    lock = busy.copy()
    rows, keys, inverse, _ = _distinct(grid)
    r = np.round(np.asarray(ratio, float)[rows], 3)
    slow = r > 1
    if slow.any():
        rows, inverse = rows[slow], inverse[slow]
        full, back = _with_costs(keys, inverse, t_b[rows], t_w[rows], r[slow])
        _lockstep(_make_room(_LOCKSTEP, full, [k for k in full if k not in _LOCKSTEP]))
        lock[rows] = np.array([_LOCKSTEP[k] for k in full])[back]
    return ticks, busy, lock


__all__ = ["buffer_columns", "lockstep_columns", "makespan_columns", "table_columns"]
