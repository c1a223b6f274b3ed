"""Pipeline schedules as data: one table of (tick, stage, op, microbatch, chunk).

The executor runs the table, the predictor times it and the Gantt chart draws it. Each schedule is
first written as an *order* per stage (the sequence of ops that stage runs); `_place` then gives
every op the earliest tick at which its inputs exist, with every op taking one tick. So a table
always respects its dependencies, and an impossible order shows up as a deadlock here, not on the
mesh.

Ops: "F" forward of one chunk for one microbatch; "B" its backward (input and weight gradients, or
only the input gradient when the schedule splits the backward); "W" the weight gradient of a split
backward. With v chunks per device, chunk c on stage s is virtual stage c·p + s (looping placement),
so microbatch j visits stages 0..p−1 v times.

Published facts the tests check (reference/published_numbers.md):
    GPipe, 1F1B          bubble (p−1)/(m+p−1) of the step; in flight m (GPipe) vs ≤ p (1F1B)
    interleaved 1F1B     bubble (p−1)/(v·m) of the ideal compute time
    ZB-H1                bubble (p−1)(T_F+T_B−T_W) instead of 1F1B's (p−1)(T_F+T_B+T_W)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zbh1", "bfs")
LOOPING = ("interleaved", "bfs")  # the schedules that take v > 1 chunks per device

Key = tuple[str, int, int]  # (op, microbatch, chunk) on one stage


@dataclass(frozen=True)
class Op:
    """One unit of work on one pipeline stage."""

    tick: int  # time step of the tick-synchronous table (every op takes one tick)
    stage: int  # pipeline device, 0..p-1
    op: str  # "F", "B" (input grad, or the whole backward when not split), "W" (weight grad)
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
    split_backward: bool  # True when B and W are separate ops (zbh1)

    @property
    def n_ticks(self) -> int:
        return 1 + max(op.tick for op in self.ops)

    def table(self) -> list[dict]:
        """Rows {tick, stage, op, microbatch, chunk}, for DataFrames and charts."""
        return [dataclasses.asdict(op) for op in self.ops]

    def peak_in_flight(self) -> list[int]:
        """Per stage, the most microbatch-chunks whose F has run and whose backward has not
        finished (B, or W when the backward is split): the activations a stage must hold."""
        last = "W" if self.split_backward else "B"
        peaks = []
        for s in range(self.p):
            held = peak = 0
            for op in self.ops:
                if op.stage == s:
                    held += (op.op == "F") - (op.op == last)
                    peak = max(peak, held)
            peaks.append(peak)
        return peaks

    def idle_fraction(self) -> float:
        """Idle ticks / (p · n_ticks), every op taking one tick."""
        return 1.0 - len(self.ops) / (self.p * self.n_ticks)

    def duration(self, op: str, t_f: float, t_b: float, t_w: float) -> float:
        """Seconds of one op; an unsplit backward does the weight gradient too."""
        if op == "F":
            return t_f
        if op == "B":
            return t_b if self.split_backward else t_b + t_w
        return t_w

    def _spans(self, t_f, t_b, t_w, t_p2p):
        """(op, start, end) in table order: each stage runs its ops in table order, each op as
        soon as its stage is free and its inputs have arrived (t_p2p per stage hop)."""
        end: dict[tuple[int, Key], float] = {}
        free = [0.0] * self.p
        for op in self.ops:  # tick order is a topological order of the dependencies
            start = free[op.stage]
            for stage, key in dependencies(op.op, op.stage, op.microbatch, op.chunk, self.p,
                                           self.v):
                hop = t_p2p if stage != op.stage else 0.0
                start = max(start, end[stage, key] + hop)
            finish = start + self.duration(op.op, t_f, t_b, t_w)
            end[op.stage, (op.op, op.microbatch, op.chunk)] = free[op.stage] = finish
            yield op, start, finish

    def timeline(self, t_f, t_b, t_w=0.0, t_p2p=0.0) -> list[dict]:
        """Table rows with `start` and `end` seconds. Costs are per op on one chunk for one
        microbatch."""
        return [dataclasses.asdict(op) | {"start": start, "end": finish}
                for op, start, finish in self._spans(t_f, t_b, t_w, t_p2p)]

    def makespan(self, t_f, t_b, t_w=0.0, t_p2p=0.0) -> float:
        """Seconds from the first op to the last: the critical path for these costs."""
        return max(finish for _, _, finish in self._spans(t_f, t_b, t_w, t_p2p))


def dependencies(op: str, stage: int, mb: int, chunk: int, p: int, v: int
                 ) -> list[tuple[int, Key]]:
    """The (stage, op key) pairs that must finish before `op` can start."""
    vs, last = chunk * p + stage, p * v - 1  # virtual stage, and the last one (it has the loss)
    if op == "F":
        return [((vs - 1) % p, ("F", mb, (vs - 1) // p))] if vs > 0 else []
    if op == "B":
        after = [(stage, ("F", mb, chunk))]
        return after + ([((vs + 1) % p, ("B", mb, (vs + 1) // p))] if vs < last else [])
    return [(stage, ("B", mb, chunk))]


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


_ORDERS = {"gpipe": _gpipe, "1f1b": _one_f_one_b, "interleaved": _interleaved, "zbh1": _zbh1,
           "bfs": _breadth_first}


# --- placing orders on ticks -------------------------------------------------------------------

def _place(orders: list[list[Key]], p: int, v: int) -> tuple[Op, ...]:
    """Give each op the earliest tick after its dependencies, keeping each stage's order:
    tick = max(previous op on the stage, every dependency) + 1, resolved stage by stage."""
    done: dict[tuple[int, Key], int] = {}
    pos, last, ops = [0] * p, [-1] * p, []
    remaining = sum(len(order) for order in orders)
    while remaining:
        progressed = False
        for s in range(p):
            while pos[s] < len(orders[s]):
                key = op, mb, chunk = orders[s][pos[s]]
                ticks = [done.get(d) for d in dependencies(op, s, mb, chunk, p, v)]
                if None in ticks:
                    break  # an input is not placed yet; come back after the other stages
                tick = max([last[s], *ticks]) + 1
                done[s, key] = last[s] = tick
                ops.append(Op(tick, s, *key))
                pos[s], remaining, progressed = pos[s] + 1, remaining - 1, True
        if not progressed:
            raise RuntimeError(f"schedule order deadlocks (p={p}, v={v})")
    return tuple(sorted(ops, key=lambda op: (op.tick, op.stage)))


# --- the public constructor --------------------------------------------------------------------

def check_schedule(name: str, p: int, m: int, v: int = 1) -> None:
    """Raise ValueError naming the problem and the fix when (name, p, m, v) is impossible."""
    if name not in SCHEDULES:
        raise ValueError(f"unknown pipeline schedule {name!r}: use one of {', '.join(SCHEDULES)}")
    for key, value in (("stages", p), ("microbatches", m), ("virtual", v)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{key}={value!r}: the pipeline needs a whole number >= 1")
    if v > 1 and name not in LOOPING:
        raise ValueError(f"schedule {name} runs one chunk per device but virtual={v}: set "
                         f"virtual=1, or use schedule=interleaved or schedule=bfs for v > 1")
    if name == "interleaved":
        if v < 2:
            raise ValueError("schedule=interleaved needs virtual >= 2 chunks per device: set "
                             "virtual=2 (or more), or use schedule=1f1b for one chunk")
        if m % p:
            low, high = (m // p) * p, (m // p + 1) * p
            hint = f"microbatches={high}" + (f" or {low}" if low else "")
            need = "at least and a multiple of" if m < p else "a multiple of"
            raise ValueError(f"schedule=interleaved needs microbatches {need} stages={p} (it sends "
                             f"microbatches through each chunk in groups of p), got "
                             f"microbatches={m}: use {hint}")


def make_schedule(name: str, p: int, m: int, v: int = 1) -> Schedule:
    """The table of schedule `name` for p stages, m microbatches and v chunks per stage."""
    check_schedule(name, p, m, v)
    ops = _place(_ORDERS[name](p, m, v), p, v)
    return Schedule(name, p, m, v, ops, split_backward=name == "zbh1")
