"""Many pipeline schedule tables as one set of op arrays: ticks, peaks and critical paths.

`make_schedule` places its one table with these functions, and the predictor places and times the
few hundred distinct tables of a hundred thousand layouts in one pass: every loop below runs over
ticks (levels of the dependency graph), never over ops, so the cost is a few numpy calls per tick
of the longest table.

Placement: virtual stage k (the k-th of the p·v model chunks a microbatch passes through) runs on
chunk c = k // p of a stage. Looping tables put it on stage k mod p (microbatches loop 0..p−1 v
times); V-shaped tables (`vee`, ZB-V) reverse every odd chunk, so virtual stages p−1 and p share a
stage and the last virtual stage sits on stage 0 beside the first.

Ops are rows, grouped by table, then by stage in that stage's order. Each op waits for at most
three others (`preds`): the previous op on its stage and up to two inputs (`_predecessors`).
Its tick is the longest chain of predecessors before it (every op one tick), so ops on one tick
never depend on each other, and ticks order the timing passes too.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

KINDS = "FBW"  # op kinds as integers: forward, backward (input gradient), weight gradient
F, B, W = range(3)


@dataclass(frozen=True)
class Tables:
    """Per table: p, m, v, whether the backward is split into B and W and whether chunks are
    placed V-wise. Per op: its table, stage, kind, microbatch, chunk, predecessors (index n =
    none), whether each predecessor is on another stage (a hop), and its tick."""

    p: np.ndarray
    m: np.ndarray
    v: np.ndarray
    split: np.ndarray
    vee: np.ndarray
    table: np.ndarray
    stage: np.ndarray
    kind: np.ndarray
    microbatch: np.ndarray
    chunk: np.ndarray
    preds: np.ndarray  # (n, 3)
    cross: np.ndarray  # (n, 3) bool
    tick: np.ndarray

    @classmethod
    def from_orders(cls, orders: list[list[list[tuple]]], p, m, v, split, vee=None) -> Tables:
        """orders[t][s]: stage s's (op, microbatch, chunk) keys in table t, in the order it runs
        them. Raises RuntimeError naming the table when an order deadlocks."""
        p, m, v = (np.asarray(x, np.int64) for x in (p, m, v))
        vee = np.zeros(len(p), bool) if vee is None else np.asarray(vee, bool)
        kind_of = {k: i for i, k in enumerate(KINDS)}
        rows = [(t, s, kind_of[op], mb, c) for t, table in enumerate(orders)
                for s, order in enumerate(table) for op, mb, c in order]
        table, stage, kind, microbatch, chunk = np.array(rows, np.int64).reshape(-1, 5).T
        preds, cross = _predecessors(table, stage, kind, microbatch, chunk, p, m, v, vee)
        tick = _levels(preds, table, p, v)
        return cls(p, m, v, np.asarray(split, bool), vee, table, stage, kind, microbatch, chunk,
                   preds, cross, tick)

    def __len__(self) -> int:
        return len(self.p)

    def _starts(self) -> np.ndarray:
        """Index of each table's first op."""
        return np.searchsorted(self.table, np.arange(len(self)))

    def tick_order(self) -> np.ndarray:
        """Op rows sorted by (table, tick, stage): the order a table lists its ops in."""
        return np.lexsort((self.stage, self.tick, self.table))

    def n_ticks(self) -> np.ndarray:
        return np.maximum.reduceat(self.tick, self._starts()) + 1

    def peak_in_flight(self, end: str | None = None, start: str = "F") -> np.ndarray:
        """(tables, max p): per stage the most microbatch-chunks whose `start` op has run and
        whose `end` op has not (default: F to the end of the backward, B, or W when split), 0
        past a table's last stage. F to B is what a stage stashes for its backward; B to W what a
        split backward keeps for its weight gradients."""
        first_kind = KINDS.index(start)
        last = np.where(self.split[self.table], W, B) if end is None else KINDS.index(end)
        held = np.cumsum((self.kind == first_kind).astype(np.int64) - (self.kind == last))
        group = self.table * (self.p.max() + 1) + self.stage
        first = np.r_[0, np.nonzero(np.diff(group))[0] + 1]  # ops are grouped by stage
        before = np.repeat(np.r_[0, held[first[1:] - 1]], np.diff(np.r_[first, len(held)]))
        peaks = np.maximum.reduceat(held - before, first)
        out = np.zeros((len(self), int(self.p.max())), np.int64)
        out[self.table[first], self.stage[first]] = peaks
        return out

    def buffer_slots(self) -> dict[str, np.ndarray]:
        """Per table and buffer of the executor (parallel.timetable), the most values one stage holds
        at once: each value lives on its stage from the tick it is stored (t0) to the tick it is
        last read (t1), i.e. for ticks (t0, t1]."""
        kind, dep = self.kind, self.preds
        vs = virtual_stage(self.stage, self.chunk, self.p[self.table], self.vee[self.table])
        last = (self.p * self.v - 1)[self.table]
        tick = np.r_[self.tick, -1]  # row n: no such op
        b, w, f = (np.nonzero(kind == k)[0] for k in (B, W, F))
        spans = {  # buffer -> (rows whose op ends the value's life, its start tick)
            "res": (b, tick[dep[b, 1]]),  # a B's own F
            "emb": (b[vs[b] == 0], tick[dep[b[vs[b] == 0], 1]]),
            "head": (b[vs[b] == last[b]], tick[dep[b[vs[b] == last[b]], 1]]),
            "rec": (w, tick[dep[dep[w, 1], 1]]),  # a W's own B's own F
            "dtap": (w, tick[dep[w, 1]]),
        }
        arriving = np.r_[f[vs[f] > 0], b[vs[b] < last[b]]]  # each F's input, each B's cotangent
        spans["inbox"] = (arriving, tick[np.where(kind[arriving] == F, dep[arriving, 1],
                                                  dep[arriving, 2])])
        return {name: self._most_held(rows, t0) for name, (rows, t0) in spans.items()}

    def _most_held(self, rows: np.ndarray, t0: np.ndarray) -> np.ndarray:
        """(tables,): the most intervals (t0, tick[row]] alive at once on one stage. Events
        (+1 at t0 + 1, −1 at tick + 1) sorted by (table, stage, tick), those of one tick summed
        first; every interval closes on its own stage, so one running sum serves all stages."""
        width, p = int(self.tick.max()) + 3, int(self.p.max())
        group = self.table[rows] * p + self.stage[rows]
        keys = np.r_[group * width + t0 + 1, group * width + self.tick[rows] + 1]
        steps, where = np.unique(keys, return_inverse=True)
        held = np.cumsum(np.bincount(where, np.r_[np.ones(len(rows)), -np.ones(len(rows))]))
        out = np.zeros(len(self))
        np.maximum.at(out, steps // width // p, held)
        return out.astype(np.int64)

    def spans(self, costs: np.ndarray, hop: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(start, end) of every op, each (n, k), for k cost sets per table: the one timing
        engine of parex's schedules (the predictor's, the Gantt chart's, a heterogeneous
        pipeline's). costs (tables, k, 3): seconds of the forward, the input gradient and the
        weight gradient of one chunk for one microbatch (an unsplit B does both gradients), or
        (tables, k, p, 3) with each stage's own; hop (tables, k): seconds per stage-to-stage
        send, or (tables, k, p) per boundary (`boundary`). Each op starts when its stage is free
        and its inputs have arrived."""
        n, k = len(self.tick), costs.shape[1]
        end = np.zeros((n + 1, k))  # row n: "no predecessor", ended at 0
        start = np.zeros((n, k))
        op_time = self._op_costs(costs)
        edge_hop = self._edge_hops(hop)  # (n, 3, k)
        order = np.argsort(self.tick, kind="stable")
        bounds = np.searchsorted(self.tick[order], np.arange(self.tick.max() + 2))
        for lo, hi in itertools.pairwise(bounds):
            ops = order[lo:hi]
            ready = end[self.preds[ops]] + self.cross[ops][:, :, None] * edge_hop[ops]
            start[ops] = ready.max(axis=1)
            end[ops] = start[ops] + op_time[ops]
        return start, end[:n]

    def _op_costs(self, costs: np.ndarray) -> np.ndarray:
        """(n, k) seconds of every op: its table's (or its stage's) cost of its kind."""
        per_stage = costs.ndim == 4
        at = (self.table, slice(None), self.stage) if per_stage else (self.table, slice(None))
        op_time = costs[(*at, self.kind)]
        unsplit_b = (self.kind == B) & ~self.split[self.table]
        weight = costs[(*at, np.full(len(self.kind), W))]
        return op_time + np.where(unsplit_b[:, None], weight, 0.0)

    def _edge_hops(self, hop: np.ndarray) -> np.ndarray:
        """(n, 3, k) seconds each op waits for the send from each predecessor on another stage:
        the table's one hop, or the hop of the boundary between the two stages (`boundary`)."""
        if hop.ndim == 2:
            return np.broadcast_to(hop[self.table][:, None, :], (len(self.tick), 3, hop.shape[1]))
        other = np.r_[self.stage, 0][self.preds]  # each predecessor's stage
        link = boundary(other, self.stage[:, None], self.p[self.table][:, None])
        return hop[self.table[:, None], :, link]

    def makespans(self, costs: np.ndarray, hop: np.ndarray) -> np.ndarray:
        """(tables, k): seconds from the first op to the last, for each cost set (`spans`)."""
        _, end = self.spans(costs, hop)
        return np.maximum.reduceat(end, self._starts(), axis=0)


    def tick_loads(self, rows: np.ndarray, t_b: np.ndarray, t_w: np.ndarray
                   ) -> tuple[np.ndarray, ...]:
        """Per (table row, t_B, t_W) combination and tick, the summed and the largest cost of
        the tick's ops over the stages, t_F = 1 (what a tick-synchronous executor's tick costs:
        parex.predict.schedule_stats.lockstep_columns, Schedule.lockstep_makespan): (S, M, each
        combination's first tick in them, its ticks), the combinations' ticks one after
        another."""
        starts = np.searchsorted(self.table, np.arange(len(self) + 1))
        combo, offset = groups(starts[rows + 1] - starts[rows])  # every op of each table
        ops = starts[rows][combo] + offset
        kind = self.kind[ops]
        b_cost = t_b + ~self.split[rows] * t_w  # an unsplit B does both gradients
        cost = np.select([kind == F, kind == B], [1.0, b_cost[combo]], t_w[combo])
        ticks = self.n_ticks()[rows]
        first = np.cumsum(ticks) - ticks
        flat = first[combo] + self.tick[ops]
        total = np.bincount(flat, cost, int(ticks.sum()))
        order = np.lexsort((cost, flat))  # the last op of each (combination, tick) is its largest
        last = np.r_[flat[order][1:] != flat[order][:-1], True]
        largest = np.zeros(len(total))
        largest[flat[order][last]] = cost[order][last]
        return total, largest, first, ticks


def groups(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(owner, offset) of every item of consecutive groups of `lengths` items."""
    owner = np.repeat(np.arange(len(lengths)), lengths)
    return owner, np.arange(len(owner)) - np.repeat(np.cumsum(lengths) - lengths, lengths)


def boundary(a, b, p):
    """The link a send between stages a and b crosses: boundary i joins stages i and i + 1, and
    boundary p − 1 joins stage p − 1 back to stage 0 (a looping schedule's wrap)."""
    low, high = np.minimum(a, b), np.maximum(a, b)
    return np.where(high - low == 1, low, p - 1)


def virtual_stage(stage, chunk, p, vee):
    """The virtual stage that chunk `chunk` of `stage` runs (module docstring)."""
    flip = np.asarray(vee) & (np.asarray(chunk) % 2 == 1)
    return chunk * p + np.where(flip, p - 1 - stage, stage)


def placement(k, p, vee):
    """(stage, chunk) of virtual stage k: the inverse of `virtual_stage`."""
    chunk, offset = k // p, k % p
    return np.where(np.asarray(vee) & (chunk % 2 == 1), p - 1 - offset, offset), chunk


def _predecessors(table, stage, kind, mb, chunk, p, m, v, vee):
    """(preds, cross): the previous op on the stage, then the op's inputs (a forward needs the
    forward of the virtual stage before; a backward its own forward and the backward of the
    virtual stage after; a weight gradient its own backward)."""
    n = len(table)
    tp, tm, tv, tvee = p[table], m[table], v[table], vee[table]
    base = np.r_[0, np.cumsum(p * 3 * m * v)][table]

    lookup = np.full(int((p * 3 * m * v).sum()), n)  # (table, stage, kind, mb, chunk) -> row
    lookup[base + ((stage * 3 + kind) * tm + mb) * tv + chunk] = np.arange(n)

    def find(s, k, j, c):  # row of the op (s, k, j, c) of each op's table
        return lookup[base + ((s * 3 + k) * tm + j) * tv + c]
    vs = virtual_stage(stage, chunk, tp, tvee)
    first, last = vs == 0, vs == tp * tv - 1
    before = placement(np.maximum(vs - 1, 0), tp, tvee)
    after = placement(np.minimum(vs + 1, tp * tv - 1), tp, tvee)
    same_group = np.r_[False, (table[1:] == table[:-1]) & (stage[1:] == stage[:-1])]
    previous = np.where(same_group, np.arange(n) - 1, n)
    own_f, own_b = find(stage, F, mb, chunk), find(stage, B, mb, chunk)
    input_f = np.where(first, n, find(before[0], F, mb, before[1]))
    input_b = np.where(last, n, find(after[0], B, mb, after[1]))
    needs_f, needs_b = kind == F, kind == B
    dep0 = np.select([needs_f, needs_b], [input_f, own_f], own_b)
    dep1 = np.where(needs_b, input_b, n)
    expected = np.select([needs_f, needs_b], [~first, np.ones(n, bool)], True)
    missing = (dep0 == n) & expected | (dep1 == n) & needs_b & ~last
    if missing.any():
        raise ValueError(f"schedule table {table[missing][0]} lacks an op another op needs")
    preds = np.stack([previous, dep0, dep1], 1)
    other = np.r_[stage, -1][preds]  # the predecessor's stage (-1 for none)
    return preds, (other >= 0) & (other != stage[:, None])


def _levels(preds: np.ndarray, table: np.ndarray, p, v) -> np.ndarray:
    """Each op's tick: 1 + the largest tick among its predecessors (0 with none), found level
    by level (Kahn's algorithm, a frontier of ready ops per tick)."""
    n = len(preds)
    waiting = (preds < n).sum(1)
    src, slot = np.nonzero(preds < n)  # edge pred -> op, at most three successors per op
    edges = np.stack([preds[src, slot], src], 1)
    edges = edges[np.argsort(edges[:, 0], kind="stable")]
    rank = np.arange(len(edges)) - np.searchsorted(edges[:, 0], edges[:, 0])
    successors = np.full((n + 1, 3), n)
    successors[edges[:, 0], rank] = edges[:, 1]
    tick = np.full(n, -1)
    ready, level = np.nonzero(waiting == 0)[0], 0
    while len(ready):
        tick[ready] = level
        after = successors[ready].ravel()
        after, counts = np.unique(after[after < n], return_counts=True)
        waiting[after] -= counts
        ready, level = after[waiting[after] == 0], level + 1
    if (tick < 0).any():
        t = int(table[tick < 0][0])
        raise RuntimeError(f"schedule order deadlocks (table {t}: p={p[t]}, v={v[t]})")
    return tick


__all__ = ["KINDS", "Tables", "placement", "virtual_stage"]
