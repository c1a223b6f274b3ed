"""Pipeline schedules as data: one table of (tick, stage, op, microbatch, chunk).

The executor runs the table, the predictor times it and the Gantt chart draws it. Each schedule is
first written as an *order* per stage (the sequence of ops that stage runs); `tables.Tables` then
gives every op the earliest tick at which its inputs exist, with every op taking one tick. So a
table always respects its dependencies, and an impossible order shows up as a deadlock here, not
on the mesh.

Ops: "F" forward of one chunk for one microbatch; "B" its backward (input and weight gradients, or
only the input gradient when the schedule splits the backward); "W" the weight gradient of a split
backward; "L" (schedule `local` only) the forward and the *local* backward of one microbatch on one
stage, against that stage's own loss, with no cotangent sent back (parex.parallel.local).
With v chunks per device, chunk c on stage s is virtual stage c·p + s (looping placement), so
microbatch j visits stages 0..p−1 v times; ZB-V places its two chunks V-wise instead (chunk 1 of
stage s is virtual stage 2p−1−s, `tables.placement`).

Published facts the tests check (GPipe arXiv 1811.06965, PipeDream-Flush/1F1B arXiv 2006.09503,
Megatron-LM interleaving arXiv 2104.04473, Zero Bubble arXiv 2401.10241):
    GPipe, 1F1B          bubble (p−1)/(m+p−1) of the step; in flight m (GPipe) vs ≤ p (1F1B)
    interleaved 1F1B     bubble (p−1)/(v·m) of the ideal compute time
    ZB-H1                bubble (p−1)(T_F+T_B−T_W) instead of 1F1B's (p−1)(T_F+T_B+T_W)
    ZB-V                 about zero bubble for m ≥ 2p at 1F1B's activation memory (2p half chunks)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..errors import InputError, unknown
from .tables import KINDS, Tables, placement, virtual_stage

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zbh1", "bfs", "zbv")
LOOPING = ("interleaved", "bfs")  # the schedules that take v > 1 chunks per device
SPLIT = ("zbh1", "zbv")  # backward split into B (input gradient) and W (weight gradient)
VEE = ("zbv",)  # two chunks per device placed V-wise
LOCAL = "local"  # local learning (PPLL): every stage learns from its own loss, no backward sends
ALL_SCHEDULES = SCHEDULES + (LOCAL,)  # SCHEDULES are end-to-end backprop; LOCAL changes the model

Key = tuple[str, int, int]  # (op, microbatch, chunk) on one stage


@dataclass(frozen=True)
class Op:
    """One unit of work on one pipeline stage."""

    tick: int  # time step of the tick-synchronous table (every op takes one tick)
    stage: int  # pipeline device, 0..p-1
    op: str  # "F", "B" (input grad, or the whole backward when not split), "W" (weight grad),
    # "L" (local: forward + local backward)
    microbatch: int  # 0..m-1
    chunk: int  # model chunk on this device, 0..v-1 (virtual stage chunk·p + stage)


@dataclass(frozen=True)
class Schedule:
    """A pipeline schedule for p stages, m microbatches and v chunks per stage."""

    name: str
    p: int
    m: int
    v: int
    ops: tuple[Op, ...]  # sorted by (tick, stage)
    split_backward: bool  # True when B and W are separate ops (SPLIT)
    arrays: Tables = dataclasses.field(repr=False, compare=False)  # the same ops as arrays

    @property
    def vee(self) -> bool:
        """Chunks placed V-wise (ZB-V) rather than looping."""
        return self.name in VEE

    def place(self, k: int) -> tuple[int, int]:
        """(stage, chunk) that runs virtual stage k."""
        stage, chunk = placement(np.asarray(k), self.p, self.vee)
        return int(stage), int(chunk)

    def virtual_stage(self, stage: int, chunk: int) -> int:
        """The virtual stage that chunk `chunk` of `stage` runs."""
        return int(virtual_stage(np.asarray(stage), np.asarray(chunk), self.p, self.vee))

    @property
    def n_ticks(self) -> int:
        return 1 + max(op.tick for op in self.ops)

    def table(self) -> list[dict]:
        """Rows {tick, stage, op, microbatch, chunk}, for DataFrames and charts."""
        return [dataclasses.asdict(op) for op in self.ops]

    def peak_in_flight(self) -> list[int]:
        """Per stage, the most microbatch-chunks whose F has run and whose backward has not
        finished (B, or W when the backward is split): the activations a stage must hold."""
        if self.name == LOCAL:  # an L op ends its own backward: one microbatch, its own tick
            return [1] * self.p
        return [int(n) for n in self.arrays.peak_in_flight()[0]]

    def idle_fraction(self) -> float:
        """Idle ticks / (p · n_ticks), every op taking one tick."""
        return 1.0 - len(self.ops) / (self.p * self.n_ticks)

    def _spans(self, t_f, t_b, t_w, t_p2p) -> tuple[np.ndarray, np.ndarray]:
        """(start, end) of each op of `ops`: each stage runs its ops in table order, each op as
        soon as its stage is free and its inputs have arrived (t_p2p per stage hop); an unsplit
        backward takes t_b + t_w."""
        if self.name == LOCAL:  # the table's F rows are L ops: forward and local backward
            t_f, t_b, t_w = t_f + t_b + t_w, 0.0, 0.0
        costs = np.array([t_f, t_b, t_w], float).reshape(1, 1, 3)
        start, end = self.arrays.spans(costs, np.full((1, 1), float(t_p2p)))
        rows = self.arrays.tick_order()  # the array row of each op in `ops`
        return start[rows, 0], end[rows, 0]

    def timeline(self, t_f, t_b, t_w=0.0, t_p2p=0.0) -> list[dict]:
        """Table rows with `start` and `end` seconds. Costs are per op on one chunk for one
        microbatch."""
        start, end = self._spans(t_f, t_b, t_w, t_p2p)
        return [dataclasses.asdict(op) | {"start": float(a), "end": float(b)}
                for op, a, b in zip(self.ops, start, end)]

    def makespan(self, t_f, t_b, t_w=0.0, t_p2p=0.0) -> float:
        """Seconds from the first op to the last: the critical path for these costs."""
        return float(self._spans(t_f, t_b, t_w, t_p2p)[1].max())

    def lockstep_makespan(self, t_f, t_b, t_w=0.0) -> float:
        """Seconds when every tick lasts as long as its slowest op, as a tick-synchronous
        executor (parex's) runs the table (Tables.tick_loads); an unsplit backward takes
        t_b + t_w."""
        if self.name == LOCAL:  # the table's F rows are L ops: forward and local backward
            t_f, t_b, t_w = t_f + t_b + t_w, 0.0, 0.0
        if t_f <= 0:
            raise ValueError("lockstep_makespan needs a forward of some duration (t_f > 0)")
        _, largest, _, _ = self.arrays.tick_loads(np.zeros(1, np.int64),
                                                  np.array([t_b / t_f]), np.array([t_w / t_f]))
        return float(largest.sum() * t_f)


# --- orders per stage --------------------------------------------------------------------------

def _gpipe(p: int, m: int, v: int) -> list[list[Key]]:
    """All forwards, then all backwards (what jax.grad over a scan of ticks gives)."""
    return [[("F", j, 0) for j in range(m)] + [("B", j, 0) for j in reversed(range(m))]
            for _ in range(p)]


def _one_f_one_b(p: int, m: int, v: int) -> list[list[Key]]:
    """PipeDream-Flush: p−1−s warm-up forwards, then alternate F and B, then drain the B's."""
    orders = []
    for s in range(p):
        warm = min(p - 1 - s, m)
        order = [("F", j, 0) for j in range(warm)]
        for j in range(m - warm):
            order += [("F", warm + j, 0), ("B", j, 0)]
        orders.append(order + [("B", j, 0) for j in range(m - warm, m)])
    return orders


def _interleaved(p: int, m: int, v: int) -> list[list[Key]]:
    """Megatron's interleaved 1F1B: microbatches go through each chunk in groups of p; stage s
    warms up with 2(p−1−s) + (v−1)p forwards."""
    total = m * v

    def group(k):  # the k-th microbatch-chunk in a stage's forward (or backward) sequence
        return (k // (p * v)) * p + k % p, (k // p) % v

    def fwd(k):
        j, c = group(k)
        return ("F", j, c)

    def bwd(k):
        j, c = group(k)
        return ("B", j, v - 1 - c)

    orders = []
    for s in range(p):
        warm = min(2 * (p - 1 - s) + (v - 1) * p, total)
        order = [fwd(k) for k in range(warm)]
        for k in range(total - warm):
            order += [fwd(warm + k), bwd(k)]
        orders.append(order + [bwd(k) for k in range(total - warm, total)])
    return orders


def _breadth_first(p: int, m: int, v: int) -> list[list[Key]]:
    """Looping breadth-first (Lamy-Poirier 2022): every microbatch through chunk 0, then chunk 1,
    ...; the backward runs the chunks in reverse, again all microbatches per chunk."""
    forward = [("F", j, c) for c in range(v) for j in range(m)]
    backward = [("B", j, c) for c in reversed(range(v)) for j in range(m)]
    return [forward + backward for _ in range(p)]


def _zbh1(p: int, m: int, v: int) -> list[list[Key]]:
    """ZB-H1 (Qi et al. 2023): 1F1B with the backward split into B (input gradient, on the
    critical path) and W (weight gradient, free to move). Stage s runs its W passes s behind its
    B passes, so the last stages end on W's that fill the tail bubble 1F1B leaves: the bubble
    shrinks from (p−1)(T_F+T_B+T_W) to (p−1)(T_F+T_B−T_W) and every stage holds at most p
    microbatches between F and W, 1F1B's peak."""
    orders = []
    for s, order in enumerate(_one_f_one_b(p, m, 1)):
        split, n_b = [], 0
        for key in order:
            split.append(key)
            if key[0] == "B":
                n_b += 1
                if n_b > s:  # W of the microbatch whose B ran s B-passes ago
                    split.append(("W", n_b - 1 - s, 0))
        orders.append(split + [("W", j, 0) for j in range(max(0, n_b - s), m)])
    return orders


def _zbv(p: int, m: int, v: int) -> list[list[Key]]:
    """ZB-V (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory"): two chunks per
    stage placed V-wise, so the last virtual stage sits on stage 0 and the loss's backward starts
    where the forward began. Built tick by tick at unit op costs: every stage runs, of its ready
    ops, a B first (input gradients are on the critical path), else a forward while fewer than 2p
    chunk-microbatches wait for their W (2p half-size chunks: 1F1B's activation memory, chunk 1
    before chunk 0), else its oldest pending W. The bubble is about zero once m ≥ 2p."""
    K = 2 * p
    chunks = [(s, K - 1 - s) for s in range(p)]  # virtual stages of chunk 0 and chunk 1
    f_done, b_done = {}, {}  # (microbatch, virtual stage) -> tick
    next_f, next_b = [[0, 0] for _ in range(p)], [[0, 0] for _ in range(p)]
    waiting_w = [[] for _ in range(p)]  # (microbatch, chunk) whose B ran, oldest first
    live, orders, tick = [0] * p, [[] for _ in range(p)], 0

    def before(table, key):
        return table.get(key, tick) < tick

    while any(next_b[s][c] < m or waiting_w[s] for s in range(p) for c in (0, 1)):
        picks = []
        for s in range(p):
            ready_b = [(j, -k, c) for c, k in enumerate(chunks[s]) if (j := next_b[s][c]) < m
                       and before(f_done, (j, k)) and (k == K - 1 or before(b_done, (j, k + 1)))]
            ready_f = [c for c in (1, 0) if (j := next_f[s][c]) < m
                       and (chunks[s][c] == 0 or before(f_done, (j, chunks[s][c] - 1)))]
            if ready_b:
                picks.append((s, "B", min(ready_b)[2]))
            elif ready_f and live[s] < 2 * p:
                picks.append((s, "F", ready_f[0]))
            elif waiting_w[s] and waiting_w[s][0][2] < tick:
                picks.append((s, "W", None))
        for s, op, c in picks:
            if op == "W":
                j, c, _ = waiting_w[s].pop(0)
                live[s] -= 1
            else:
                counter = next_f if op == "F" else next_b
                j = counter[s][c]
                counter[s][c] += 1
                (f_done if op == "F" else b_done)[j, chunks[s][c]] = tick
                live[s] += op == "F"
                if op == "B":
                    waiting_w[s].append((j, c, tick))
            orders[s].append((op, j, c))
        tick += 1
    return orders


def _local(p: int, m: int, v: int) -> list[list[Key]]:
    """Local learning (PPLL, Guo et al. 2024, arXiv 2411.12780): stage s runs microbatch j at
    tick j + s, forward and its local backward in one op, and sends nothing back. Written with
    F keys, whose dependencies (the previous op on the stage, the forward of the stage before)
    are exactly L's; make_schedule names them "L". This is one step's m microbatches from an
    empty pipeline: the fill of p − 1 ticks is paid once per run, because the executor carries
    the queue across steps and every later step starts where this one left off (steady state:
    m ticks per step, every stage busy on every tick, bubble 0). With a queue of depth q a
    microbatch reaches stage s at tick j + s·q; the steady state is the same."""
    return [[("F", j, 0) for j in range(m)] for _ in range(p)]


_ORDERS = {"gpipe": _gpipe, "1f1b": _one_f_one_b, "interleaved": _interleaved, "zbh1": _zbh1,
           "bfs": _breadth_first, "zbv": _zbv, LOCAL: _local}


# --- the public constructor --------------------------------------------------------------------

def check_schedule(name: str, p: int, m: int, v: int = 1) -> None:
    """Raise InputError (a ValueError) naming the problem and the fix when (name, p, m, v) is
    impossible; an unknown name gets the nearest known ones."""
    if name not in ALL_SCHEDULES:
        raise InputError(unknown("pipeline schedule", name, ALL_SCHEDULES))
    for key, value in (("stages", p), ("microbatches", m), ("virtual", v)):
        if not isinstance(value, int) or value < 1:
            raise InputError(f"{key}={value!r}: the pipeline needs a whole number >= 1")
    if name in VEE and v != 2:
        raise InputError(f"schedule={name} places two chunks per device V-wise: set virtual=2")
    if v > 1 and name not in LOOPING + VEE:
        raise InputError(f"schedule {name} runs one chunk per device but virtual={v}: set "
                         f"virtual=1, or use schedule=interleaved, bfs or zbv for v > 1")
    if name == "interleaved":
        if v < 2:
            raise InputError("schedule=interleaved needs virtual >= 2 chunks per device: set "
                             "virtual=2 (or more), or use schedule=1f1b for one chunk")
        if m % p:
            low, high = (m // p) * p, (m // p + 1) * p
            hint = f"microbatches={high}" + (f" or {low}" if low else "")
            need = "at least and a multiple of" if m < p else "a multiple of"
            raise InputError(f"schedule=interleaved needs microbatches {need} stages={p} (it sends "
                             f"microbatches through each chunk in groups of p), got "
                             f"microbatches={m}: use {hint}")


def make_schedule(name: str, p: int, m: int, v: int = 1) -> Schedule:
    """The table of schedule `name` for p stages, m microbatches and v chunks per stage."""
    check_schedule(name, p, m, v)
    arrays = schedule_arrays([(name, p, m, v)])
    fields = ("tick", "stage", "kind", "microbatch", "chunk")
    columns = [getattr(arrays, f)[arrays.tick_order()].tolist() for f in fields]
    kinds = "L" * len(KINDS) if name == LOCAL else KINDS  # local: its F rows are L ops
    ops = tuple(Op(t, s, kinds[k], j, c) for t, s, k, j, c in zip(*columns))
    return Schedule(name, p, m, v, ops, split_backward=name in SPLIT, arrays=arrays)


def schedule_arrays(keys) -> Tables:
    """Many tables at once, each key (name, p, m, v) already checked (`check_schedule`)."""
    names, p, m, v = zip(*keys)
    orders = [_ORDERS[name](*args) for name, *args in keys]
    return Tables.from_orders(orders, p, m, v, [name in SPLIT for name in names],
                              [name in VEE for name in names])
