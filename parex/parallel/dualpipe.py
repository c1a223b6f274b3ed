"""DualPipe and DualPipeV (DeepSeek-V3, arXiv 2412.19437 §3.2.1) as timed schedule tables.

DualPipe feeds microbatches from both ends of a p-device pipeline (p even). Every device holds
two model chunks: stage i of the direction that enters at device 0 (chunk 0) and stage p−1−i of
the direction that enters at device p−1 (chunk 1), so it keeps two copies of its share of the
parameters. Each direction carries m/2 of the m microbatches. In the steady state a device runs
the forward of one direction paired with the backward of the other as one overlapped "F&B" unit,
whose communication hides behind the other's compute. DualPipeV (the DualPipe repository's
"cut-in-half" variant) keeps one direction on p devices with 2p virtual stages placed V-wise:
chunk 0 of device r is virtual stage r, chunk 1 virtual stage 2p−1−r.

Both follow the same eight steps on every device, r steps from its nearer end (DualPipe: r =
min(i, p−1−i), n = p/2 devices per half, m/2 microbatches per direction; DualPipeV: r = i, n = p,
m microbatches). "Near" is the chunk fed from the device's own end, "far" the other one:

    1  2(n−r−1) × F near             5  n−r−1 × (B far, F far & B near)
    2  r+1 × (F near, F far)         6  r+1 × (B far, B near), the later half split (zero bubble)
    3  n−r−1 × (B far split, W, F far) 7  n−r−1 × (W, B near split)
    4  m_dir−2n+r+1 × (F near & B far, F far & B near)   8  r+1 × W

A split backward B runs the input gradient and leaves its weight gradient to a later W; an
unsplit one (every B inside an F&B unit) runs both. On the middle devices (r = n−1) the first
unit of step 4 runs F and B one after the other instead of overlapped.

Costs follow DeepSeek-V3 Table 2: F a forward chunk, B a *full* backward chunk (input and weight
gradients), W its weight-gradient part (so a split B takes B − W), F&B an overlapped forward and
backward pair (default F + B: on one device nothing overlaps in compute). The published bubbles,
with PP pipeline stages (`published_bubble`):

    1F1B       (PP−1)(F+B)               parameters 1×, activations PP
    ZB1P       (PP−1)(F+B−2W)            parameters 1×, activations PP
    DualPipe   (PP/2−1)(F&B+B−3W)        parameters 2×, activations PP+1   (PP devices)
    DualPipeV  (PP/2−1)(F&B+B−3W)        parameters 2×, activations PP+1   (PP/2 devices)

Bubble here is a device's idle time between 0 and the makespan, makespan − its busy time (an
F&B unit counted once); the table's bubble is the most idle device's (`DualTable.bubble`). With
it, 1F1B's table (schedules.make_schedule) idles exactly (PP−1)(F+B) and ZB-H1's (PP−1)(F+B−2W)
whenever W ≤ B − W. DualPipe's and DualPipeV's tables, timed from the orders above, idle exactly
(PP/2−1)(F&B+B−3W) when a forward takes as long as an input gradient (F = B − W), W ≤ F and
B ≤ F&B, for every p and m ≥ 2p, whatever F&B; otherwise the bubble is another piecewise-linear
function of the costs (F=1, B=2, W=0.8: 2.4·(PP/2−1) against the formula's 2.6·(PP/2−1)).
Activations count chunk-microbatches whose F has run and whose backward has not finished (the W,
or an unsplit B): one unit is one stage's activations for one microbatch, 1/PP of the model's;
every device peaks at PP+1. Parameters are chunks held per device, in units of one stage's.

These tables are timed and drawn (`gantt_rows`, charts.pipeline.dual_gantt_chart), not executed:
DualPipe is not a `schedule=` of a Layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from .schedules import Schedule

SCHEDULES = ("dualpipe", "dualpipev")

Key = tuple[str, int, int]  # (kind "F"/"B"/"W", microbatch, chunk) on one device


class Unit(NamedTuple):
    """What a device runs at once: one op, or the F and B of an overlapped F&B pair."""

    keys: tuple[Key, ...]
    late: bool = False  # an F whose output is sent only after the device's next unit, as
    # DualPipe does in its warm-up (step 2) and on the middle devices' first unit of step 4


@dataclass(frozen=True)
class DualOp:
    """One op of a timed table. The two ops of an F&B unit share their device and span."""

    device: int  # 0..p-1
    kind: str  # "F", "B" (input gradient; the whole backward when `full`), "W" (weight gradient)
    microbatch: int  # 0..m-1; DualPipe: 0..m/2-1 enter at device 0, m/2..m-1 at device p-1
    chunk: int  # DualPipe: the direction (0 from device 0, 1 from device p-1); DualPipeV: 0/1
    start: float
    end: float
    pair: bool  # one half of an overlapped F&B unit
    full: bool  # a B that also forms its weight gradient (no W follows)


@dataclass(frozen=True)
class DualTable:
    """A timed schedule: ops sorted by (device, start), with the costs they were timed with."""

    name: str  # "dualpipe", "dualpipev", or a parex schedule timed here ("1f1b", "zbh1")
    p: int  # devices
    m: int  # microbatches
    stages: int  # PP: pipeline stages of the model (DualPipeV: 2p)
    costs: tuple[float, float, float, float]  # (F, B full backward, W, F&B)
    ops: tuple[DualOp, ...]

    def makespan(self) -> float:
        return max(op.end for op in self.ops)

    def busy(self) -> list[float]:
        """Per device, the time it computes (an F&B unit once)."""
        out = [0.0] * self.p
        for op in self.ops:
            if not (op.pair and op.kind == "B"):
                out[op.device] += op.end - op.start
        return out

    def idle(self) -> list[float]:
        """Per device, makespan − busy time."""
        span = self.makespan()
        return [span - b for b in self.busy()]

    def bubble(self) -> float:
        """The most idle device's idle time (the definition that gives Table 2's bubbles)."""
        return max(self.idle())

    def peak_in_flight(self) -> list[int]:
        """Per device, the most chunk-microbatches between F and the end of their backward."""
        peaks, held = [0] * self.p, [0] * self.p
        for op in sorted(self.ops, key=lambda o: (o.device, o.start, "FBW".index(o.kind))):
            held[op.device] += (op.kind == "F") - (op.kind == "W" or op.kind == "B" and op.full)
            peaks[op.device] = max(peaks[op.device], held[op.device])
        return peaks

    def parameters(self) -> list[int]:
        """Per device, the chunks it holds, each one stage's parameters."""
        return [len({op.chunk for op in self.ops if op.device == d}) for d in range(self.p)]


# --- orders per device ---------------------------------------------------------------------------

def _steps(n: int, m_dir: int, r: int) -> list[tuple]:
    """The eight steps (module docstring) of the device r steps from its end, over phases
    0 (near chunk) and 1 (far chunk): ("F", ph[, late]), ("B", ph, split), ("W",) and the F&B
    pair ("FB", ph_f, ph_b)."""
    rest = n - r - 1
    seq = [("F", 0)] * (2 * rest)
    for i in range(r + 1):
        seq += [("F", 0, rest > 0), ("F", 1, rest == 0 and i == r)]
    seq += [("B", 1, True), ("W",), ("F", 1)] * rest
    for i in range(m_dir - 2 * n + r + 1):
        first = [("F", 0, True), ("B", 1, False)] if i == 0 and rest == 0 else [("FB", 0, 1)]
        seq += first + [("FB", 1, 0)]
    seq += [("B", 1, False), ("FB", 1, 0)] * rest
    half = (r + 1) // 2  # step 6: the backwards from here on are split
    for i in range(r + 1):
        seq += [("B", 1, i > half or i == half and r % 2 == 1), ("B", 0, i >= half)]
    return seq + [("W",), ("B", 0, True)] * rest + [("W",)] * (r + 1)


def _resolve(steps: list[tuple], chunk_of: tuple[int, int], first_mb: tuple[int, int]
             ) -> list[Unit]:
    """Steps over phases to units: each phase runs its F's and B's in microbatch order; W's take
    the split B's first in, first out."""
    next_f, next_b, waiting, units = [0, 0], [0, 0], [], []

    def key(kind, counter, ph):
        counter[ph] += 1
        return (kind, first_mb[ph] + counter[ph] - 1, chunk_of[ph])

    for step in steps:
        if step[0] == "F":
            units.append(Unit((key("F", next_f, step[1]),), late=len(step) > 2 and step[2]))
        elif step[0] == "B":
            units.append(Unit((key("B", next_b, step[1]),)))
            if step[2]:
                waiting.append(units[-1].keys[0])
        elif step[0] == "W":
            units.append(Unit((("W",) + waiting.pop(0)[1:],)))
        else:
            units.append(Unit((key("F", next_f, step[1]), key("B", next_b, step[2]))))
    return units


def dualpipe_orders(p: int, m: int) -> list[list[Unit]]:
    """DualPipe's units per device. Devices i < p/2 take direction 0 as their near chunk, the
    others direction 1; direction 1 carries microbatches m/2..m−1."""
    _check("dualpipe", p, m)
    n, m_dir = p // 2, m // 2
    orders = []
    for i in range(p):
        near = int(i >= n)
        steps = _steps(n, m_dir, min(i, p - 1 - i))
        orders.append(_resolve(steps, (near, 1 - near), (near * m_dir, (1 - near) * m_dir)))
    return orders


def dualpipev_orders(p: int, m: int) -> list[list[Unit]]:
    """DualPipeV's units per device: chunk 0 (virtual stage r) is near, chunk 1 far."""
    _check("dualpipev", p, m)
    return [_resolve(_steps(p, m, r), (0, 1), (0, 0)) for r in range(p)]


def _check(name: str, p: int, m: int) -> None:
    if name == "dualpipe" and (p < 2 or p % 2 or m % 2 or m < 2 * p):
        raise ValueError(f"dualpipe needs an even p >= 2 and an even m >= 2p (m/2 per "
                         f"direction), got p={p}, m={m}")
    if name == "dualpipev" and (p < 1 or m < 2 * p):
        raise ValueError(f"dualpipev needs m >= 2p microbatches, got p={p}, m={m}")


def path(name: str, p: int, m: int, microbatch: int) -> list[tuple[int, int]]:
    """(device, chunk) of each virtual stage microbatch `microbatch` passes, in forward order."""
    if name == "dualpipe":
        direction = int(microbatch >= m // 2)
        return [(p - 1 - s if direction else s, direction) for s in range(p)]
    if name == "dualpipev":
        return [(k, 0) for k in range(p)] + [(p - 1 - k, 1) for k in range(p)]
    raise ValueError(f"no path for {name!r}; time parex's tables with time_schedule")


# --- timing ---------------------------------------------------------------------------------------

def time_orders(name: str, p: int, m: int, stages: int, orders: list[list[Unit]], paths,
                F: float, B: float, W: float, FB: float | None = None) -> DualTable:
    """The schedule timing's event-driven mode, for what parex's tick tables cannot hold (an
    F&B unit pairing two microbatches' ops, a send delayed past the next unit; parex's own
    tables are timed by parallel.tables.Tables.spans). Each device runs its units in order,
    each as soon as the device is free and its inputs
    exist: F after the previous virtual stage's F, B after its own F and the next virtual stage's
    B, W after its B; an output exists when its unit ends (a `late` F's when the next unit ends).
    `paths(mb)` lists (device, chunk) per virtual stage. A split B (one a W follows) takes B − W,
    an unsplit one B, an F&B unit FB (default F + B)."""
    FB = F + B if FB is None else FB
    split = {(d, mb, c) for d, order in enumerate(orders)
             for unit in order for kind, mb, c in unit.keys if kind == "W"}
    route = {mb: paths(mb) for mb in range(m)}
    stage_of = {(mb, *place): k for mb, places in route.items() for k, place in enumerate(places)}

    def needs(d, kind, mb, c):  # (kind, mb, device, chunk) of the ops this op waits for
        k, last = stage_of[mb, d, c], len(route[mb]) - 1
        if kind == "F":
            return [("F", mb, *route[mb][k - 1])] if k else []
        if kind == "B":
            return [("F", mb, d, c)] + ([("B", mb, *route[mb][k + 1])] if k < last else [])
        return [("B", mb, d, c)]

    def cost(d, keys):
        kind, mb, c = keys[0]
        if len(keys) == 2:
            return FB
        return {"F": F, "W": W, "B": B - W if (d, mb, c) in split else B}[kind]

    end, free, pos, ops, late = {}, [0.0] * p, [0] * p, [], [None] * p
    while any(pos[d] < len(orders[d]) for d in range(p)):
        moved = False
        for d in range(p):
            while pos[d] < len(orders[d]):
                unit = orders[d][pos[d]]
                inputs = [key for kind, mb, c in unit.keys for key in needs(d, kind, mb, c)]
                if any(key not in end for key in inputs):
                    break
                start = max([free[d]] + [end[key] for key in inputs])
                free[d] = start + cost(d, unit.keys)
                if late[d]:  # the previous unit's output is sent now
                    end[late[d]] = free[d]
                late[d] = None
                for kind, mb, c in unit.keys:
                    if unit.late:
                        late[d] = (kind, mb, d, c)
                    else:
                        end[kind, mb, d, c] = free[d]
                    ops.append(DualOp(d, kind, mb, c, start, free[d], len(unit.keys) == 2,
                                      kind == "B" and (d, mb, c) not in split))
                pos[d], moved = pos[d] + 1, True
        if not moved:
            raise RuntimeError(f"{name} order deadlocks at p={p}, m={m}")
    ops.sort(key=lambda o: (o.device, o.start, "FBW".index(o.kind)))
    return DualTable(name, p, m, stages, (F, B, W, FB), tuple(ops))


def dualpipe(p: int, m: int, F: float = 1.0, B: float = 2.0, W: float = 1.0,
             FB: float | None = None) -> DualTable:
    """DualPipe on p devices (PP = p stages) with m microbatches, m/2 from each end, timed."""
    return time_orders("dualpipe", p, m, p, dualpipe_orders(p, m),
                       lambda mb: path("dualpipe", p, m, mb), F, B, W, FB)


def dualpipev(p: int, m: int, F: float = 1.0, B: float = 2.0, W: float = 1.0,
              FB: float | None = None) -> DualTable:
    """DualPipeV on p devices (PP = 2p half-size stages, placed V-wise) with m microbatches."""
    return time_orders("dualpipev", p, m, 2 * p, dualpipev_orders(p, m),
                       lambda mb: path("dualpipev", p, m, mb), F, B, W, FB)


def time_schedule(schedule: Schedule, F: float, B: float, W: float) -> DualTable:
    """A parex table (schedules.make_schedule) timed by the tables' own engine
    (Schedule.timeline: parallel.tables.Tables.spans), B the full backward (an unsplit B takes
    B, a split one B − W then W), as a DualTable for comparing with DualPipe."""
    split = schedule.split_backward
    ops = [DualOp(row["stage"], row["op"], row["microbatch"], row["chunk"], row["start"],
                  row["end"], False, row["op"] == "B" and not split)
           for row in schedule.timeline(F, B - W, W)]  # an unsplit B takes both: B
    ops.sort(key=lambda o: (o.device, o.start, "FBW".index(o.kind)))
    return DualTable(schedule.name, schedule.p, schedule.m, schedule.p * schedule.v,
                     (F, B, W, F + B), tuple(ops))


# --- the published numbers (DeepSeek-V3 Table 2) -------------------------------------------------

PUBLISHED = ("1f1b", "zb1p", "dualpipe", "dualpipev")


def published_bubble(schedule: str, pp: int, F: float, B: float, W: float,
                     FB: float | None = None) -> float:
    """Table 2's bubble for PP = pp stages; B is the full backward, FB defaults to F + B."""
    FB = F + B if FB is None else FB
    bubbles = {"1f1b": (pp - 1) * (F + B), "zb1p": (pp - 1) * (F + B - 2 * W),
               "dualpipe": (pp / 2 - 1) * (FB + B - 3 * W),
               "dualpipev": (pp / 2 - 1) * (FB + B - 3 * W)}
    return bubbles[_published(schedule)]


def published_parameters(schedule: str) -> int:
    """Parameters per device, in units of one of the PP stages' parameters."""
    return 2 if _published(schedule) in SCHEDULES else 1


def published_activations(schedule: str, pp: int) -> int:
    """Microbatches' stage activations a device holds at most, in units of one stage's."""
    return pp + 1 if _published(schedule) in SCHEDULES else pp


def published_devices(schedule: str, pp: int) -> int:
    """Devices that run PP stages: DualPipeV puts two on each."""
    return pp // 2 if _published(schedule) == "dualpipev" else pp


def _published(schedule: str) -> str:
    if schedule not in PUBLISHED:
        raise ValueError(f"unknown schedule {schedule!r}: Table 2 lists {', '.join(PUBLISHED)}")
    return schedule


# --- drawing -------------------------------------------------------------------------------------

def gantt_rows(table: DualTable) -> list[dict]:
    """One row per op in the format of Schedule.timeline, which charts.pipeline's Gantt charts
    read (tick, stage, op, microbatch, chunk, start, end), with `overlapped` and `full` (a B that
    also forms its weight gradient). An F&B unit is drawn as its F, then its B, its span split
    in proportion F : B, as DeepSeek-V3's Figure 5 draws the pair side by side; `tick` is the
    op's place in its device's order."""
    F, B, _, _ = table.costs
    rows, rank = [], [0] * table.p
    for op in table.ops:
        start, end = op.start, op.end
        if op.pair:
            cut = start + (end - start) * F / (F + B)
            start, end = (start, cut) if op.kind == "F" else (cut, end)
        rows.append({"tick": rank[op.device], "stage": op.device, "op": op.kind,
                     "microbatch": op.microbatch, "chunk": op.chunk, "start": start,
                     "end": end, "overlapped": op.pair, "full": op.full})
        rank[op.device] += 1
    return rows


__all__ = ["PUBLISHED", "SCHEDULES", "DualOp", "DualTable", "compare_tables", "dualpipe",
           "dualpipe_orders",
           "dualpipev", "dualpipev_orders", "gantt_rows", "path", "published_activations",
           "published_bubble", "published_devices", "published_parameters", "time_orders",
           "time_schedule"]


def compare_tables(pp: int, m: int, F: float = 1.0, B: float = 1.8, W: float = 0.8,
                   FB: float | None = None) -> dict[str, DualTable]:
    """Table 2's four schedules for PP = pp stages and m microbatches, timed alike: parex's
    1F1B and ZB-H1 tables, DualPipe on pp devices, DualPipeV on pp/2."""
    from .schedules import make_schedule

    return {"1f1b": time_schedule(make_schedule("1f1b", pp, m), F, B, W),
            "zb1p": time_schedule(make_schedule("zbh1", pp, m), F, B, W),
            "dualpipe": dualpipe(pp, m, F, B, W, FB),
            "dualpipev": dualpipev(pp // 2, m, F, B, W, FB)}
