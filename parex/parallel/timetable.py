"""The timetable of a pipeline step: the schedule table compiled, on the host, into per-tick
integer arrays that tell each device which branch (idle, or F, B, W of a first, middle or last
virtual stage) it runs at every tick, for which microbatch and chunk, which slot of each buffer
it reads and writes, and where the value it produces goes. Pure numpy: the executor
(pipeline.py) only indexes these.

Buffers, each a set of slots per device, one per value alive at once (interval colouring):
    res    the chunk's residuals, from its F to its B (what the backward reads)
    emb    the embedding's residuals (first virtual stage), F to B
    head   the head's and loss's residuals (last virtual stage), F to B
    rec    a split backward's records (each weighted op's input), F to W
    dtap   a split backward's tap cotangents (each weighted op's dY), B to W
    inbox  activations and cotangents received from a neighbour (or handed on locally), from
           their arrival to the F or B that reads them
Every value produced for another virtual stage travels one way: up (stage s to s+1, cyclic), down
(s to s−1) or stays on the device (V-shaped placement: virtual stages p−1 and p share a stage).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .schedules import Schedule
from .tables import virtual_stage

BUFFERS = ("res", "emb", "head", "rec", "dtap", "inbox")
NONE, UP, DOWN, SELF = range(4)  # where the value a tick produces goes


@dataclass(frozen=True)
class Timetable:
    """The schedule table compiled into per-tick integer arrays of shape (n_ticks, p), with the
    slots of each buffer and the layers of each chunk: what the executor indexes at trace time."""

    schedule: Schedule
    partition: tuple[int, ...]  # layers of each virtual stage k
    branches: tuple[str, ...]  # branch names, e.g. "F.first", in switch-index order
    arrays: dict  # name -> (n_ticks, p) int32
    slots: dict  # buffer -> slots per device (the inbox has one more: the trash slot)

    def branch_shares(self) -> list[tuple[float, ...]]:
        """Per stage, the share of ticks on which it takes each switch branch: how often the
        collectives and matmuls inside a branch really run."""
        branch, n = self.arrays["branch"], len(self.branches)
        return [tuple(np.bincount(branch[:, s], minlength=n) / len(branch))
                for s in range(self.schedule.p)]

    def _chunks(self):
        """(stage, chunk, layers) of every virtual stage."""
        return [(*self.schedule.place(k), n) for k, n in enumerate(self.partition)]

    @property
    def layer_index(self) -> np.ndarray:
        """(p, v, Lmax) index into the stacked layers; padding repeats layer 0 (masked out)."""
        s = self.schedule
        return chunk_layers(self.partition, s.p, s.v, s.vee)

    @property
    def layer_mask(self) -> np.ndarray:
        s = self.schedule
        mask = np.zeros((s.p, s.v, max(self.partition)), bool)
        for stage, chunk, n in self._chunks():
            mask[stage, chunk, :n] = True
        return mask

    @property
    def even(self) -> bool:
        """Every chunk has the same layer count: in their storage order (`storage_order`)
        stage s's rows s·L/p … (s+1)·L/p − 1 are its chunks, so regrouping is a reshape."""
        return len(set(self.partition)) == 1


def stage_partition(layers: int, p: int, v: int, partition: tuple[int, ...] | None):
    """Layers of each virtual stage k: the explicit partition, else even."""
    if partition is None:
        return (layers // (p * v),) * (p * v)
    return tuple(partition)


def chunk_layers(partition: tuple[int, ...], p: int, v: int, vee: bool) -> np.ndarray:
    """(p, v, Lmax): the stacked layers chunk c of stage s runs, virtual stage k holding
    partition[k] consecutive layers; padding repeats layer 0 (masked out)."""
    starts = np.cumsum((0,) + tuple(partition))
    index = np.zeros((p, v, max(partition)), np.int32)
    for stage in range(p):
        for chunk in range(v):
            k = int(virtual_stage(np.asarray(stage), np.asarray(chunk), p, vee))
            index[stage, chunk, :partition[k]] = np.arange(starts[k], starts[k + 1])
    return index


def storage_order(layers: int, p: int, v: int, vee: bool,
                  partition: tuple[int, ...] | None) -> np.ndarray | None:
    """The order in which to store the stacked layers so that stage s's contiguous L/p rows
    are its chunks' layers, chunk by chunk: regrouping them per device (p, v, Lmax) is then a
    reshape, where in the natural order XLA would move each chunk to its stage by collectives
    every step. Rows stored[i] = natural[order[i]]. None where the natural order already is
    that (one chunk per stage, even) or no order can be (uneven chunks: stages hold different
    layer counts, so the regrouping pads them and gathers)."""
    partition = stage_partition(layers, p, v, partition)
    if v == 1 or len(set(partition)) > 1:
        return None
    return chunk_layers(partition, p, v, vee).reshape(-1).astype(np.int64)


def _slots(intervals: list[tuple[int, int, int, tuple]], p: int) -> tuple[dict, int]:
    """Slots per device by interval colouring. Each interval (stage, t0, t1, key) holds its value
    on `stage` for ticks (t0, t1]: stored during (or at the end of) tick t0, last read at tick
    t1, so a slot read at t1 can be stored again at t1. Returns each key's slot and the most slots
    any stage needs."""
    slot_of, most = {}, 0
    for stage in range(p):
        free_at = []  # per slot, the tick from which it is free
        for t0, t1, key in sorted((a, b, k) for s, a, b, k in intervals if s == stage):
            slot = next((i for i, t in enumerate(free_at) if t <= t0), len(free_at))
            if slot == len(free_at):
                free_at.append(0)
            free_at[slot], slot_of[key] = t1, slot
        most = max(most, len(free_at))
    return slot_of, most


def _intervals(s: Schedule, tick: dict) -> dict[str, list]:
    """Per buffer, the (stage, t0, t1, key) of every value it holds."""
    last = s.p * s.v - 1
    out = {name: [] for name in BUFFERS}
    for j in range(s.m):
        for k in range(last + 1):
            stage = s.place(k)[0]
            f, b = tick["F", j, k], tick["B", j, k]
            out["res"].append((stage, f, b, (j, k)))
            if k == 0:
                out["emb"].append((stage, f, b, (j, k)))
            if k == last:
                out["head"].append((stage, f, b, (j, k)))
            if s.split_backward:
                w = tick["W", j, k]
                out["rec"].append((stage, f, w, (j, k)))
                out["dtap"].append((stage, b, w, (j, k)))
            if k > 0:  # the activation from virtual stage k − 1
                out["inbox"].append((stage, tick["F", j, k - 1], f, ("act", j, k)))
            if k < last:  # the cotangent from virtual stage k + 1
                out["inbox"].append((stage, tick["B", j, k + 1], b, ("grad", j, k)))
    return out


def _direction(source: int, dest: int, p: int) -> int:
    if dest == source:
        return SELF
    if dest == (source + 1) % p:
        return UP
    if dest == (source - 1) % p:
        return DOWN
    raise ValueError(f"stage {source} sends to stage {dest}: only neighbours are connected")


def make_timetable(schedule: Schedule, partition: tuple[int, ...]) -> Timetable:
    """The Timetable of `schedule` with virtual stage k holding partition[k] layers."""
    s, last = schedule, schedule.p * schedule.v - 1
    tick = {}
    for op in s.ops:
        tick[op.op, op.microbatch, s.virtual_stage(op.stage, op.chunk)] = op.tick
    slot_of, slots = {}, {}
    for name, intervals in _intervals(s, tick).items():
        slot_of[name], slots[name] = _slots(intervals, s.p)
    trash = slots["inbox"]  # the inbox slot that receives what nobody sent
    fields = ("branch", "mb", "chunk", "send") + BUFFERS
    arrays = {n: np.zeros((s.n_ticks, s.p), np.int32) for n in fields}
    for name in ("in_up", "in_down", "in_self"):
        arrays[name] = np.full((s.n_ticks, s.p), trash, np.int32)
    names = ["idle"]
    for op in s.ops:
        k = s.virtual_stage(op.stage, op.chunk)
        name = f"{op.op}.{'first' if k == 0 else 'last' if k == last else 'mid'}"
        if name not in names:
            names.append(name)
        row = {"branch": names.index(name), "mb": op.microbatch, "chunk": op.chunk}
        key = (op.microbatch, k)
        for buffer in BUFFERS[:-1]:
            row[buffer] = slot_of[buffer].get(key, 0)
        inbox_key = ("act", *key) if op.op == "F" else ("grad", *key)
        row["inbox"] = slot_of["inbox"].get(inbox_key, trash)
        to = k + 1 if op.op == "F" else k - 1  # the virtual stage that reads the result
        if op.op != "W" and 0 <= to <= last:
            dest = s.place(to)[0]
            row["send"] = _direction(op.stage, dest, s.p)
            kind = "act" if op.op == "F" else "grad"
            inbox = {UP: "in_up", DOWN: "in_down", SELF: "in_self"}[row["send"]]
            arrays[inbox][op.tick, dest] = slot_of["inbox"][kind, op.microbatch, to]
        for field, value in row.items():
            arrays[field][op.tick, op.stage] = value
    return Timetable(s, tuple(partition), tuple(names), arrays, slots)
