"""The host-side plan of a pipeline step: the schedule table compiled into per-tick integer arrays
that tell each device which branch (idle, F, B, W of a first/middle/last chunk), microbatch, chunk and
buffer slots it uses at every tick. Pure numpy: the executor (pipeline.py) only indexes these arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .schedules import Schedule


@dataclass(frozen=True)
class Plan:
    """The schedule table compiled into per-tick integer arrays of shape (n_ticks, p)."""

    schedule: Schedule
    partition: tuple[int, ...]  # layers of each virtual stage k = chunk·p + stage
    branches: tuple[str, ...]  # branch names, e.g. "F.first", in switch-index order
    arrays: dict  # name -> (n_ticks, p) int32: branch, mb, chunk, act, grad, act_in, grad_in
    act_slots: int  # stashed stage inputs per device (one extra trash slot is added)
    grad_slots: int  # received cotangents per device

    def branch_shares(self) -> list[tuple[float, ...]]:
        """Per stage, the share of ticks on which it takes each switch branch: how often the
        collectives and matmuls inside a branch really run."""
        branch, n = self.arrays["branch"], len(self.branches)
        return [tuple(np.bincount(branch[:, s], minlength=n) / len(branch))
                for s in range(self.schedule.p)]

    @property
    def layer_index(self) -> np.ndarray:
        """(p, v, Lmax) index into the stacked layers; padding repeats layer 0 (masked out)."""
        s = self.schedule
        lmax, starts = max(self.partition), np.cumsum((0,) + self.partition)
        index = np.zeros((s.p, s.v, lmax), np.int32)
        for k, n in enumerate(self.partition):
            index[k % s.p, k // s.p, :n] = np.arange(starts[k], starts[k] + n)
        return index

    @property
    def layer_mask(self) -> np.ndarray:
        s = self.schedule
        mask = np.zeros((s.p, s.v, max(self.partition)), bool)
        for k, n in enumerate(self.partition):
            mask[k % s.p, k // s.p, :n] = True
        return mask


def stage_partition(layers: int, p: int, v: int, partition: tuple[int, ...] | None):
    """Layers of each virtual stage k = chunk·p + stage: the explicit partition, else even."""
    if partition is None:
        return (layers // (p * v),) * (p * v)
    return tuple(partition)


def _slots(intervals: list[tuple[int, int, tuple]], p: int) -> tuple[dict, int]:
    """Slots per device by interval colouring: the value for key (microbatch, virtual stage k)
    lives on stage k mod p, stored at the end of tick t0 and last read at tick t1, so it holds its
    slot for ticks (t0, t1]; within a tick reads come before stores. Returns the slot of each key
    and the most slots any stage needs."""
    slot_of, most = {}, 0
    for stage in range(p):
        free_at = []  # per slot, the tick after which it is free again
        for t0, t1, key in sorted(i for i in intervals if i[2][1] % p == stage):
            slot = next((i for i, t in enumerate(free_at) if t <= t0), len(free_at))
            if slot == len(free_at):
                free_at.append(0)
            free_at[slot], slot_of[key] = t1, slot
        most = max(most, len(free_at))
    return slot_of, most


def make_plan(schedule: Schedule, partition: tuple[int, ...]) -> Plan:
    s, last_vs = schedule, schedule.p * schedule.v - 1
    when = {(op.op, op.microbatch, op.chunk * s.p + op.stage): op.tick for op in s.ops}
    done = "W" if s.split_backward else "B"  # the last op that reads a stashed input / cotangent
    acts, grads = [], []
    for (kind, j, k), tick in when.items():
        if kind == "F" and k > 0:  # input arrives after the previous virtual stage's F
            acts.append((when["F", j, k - 1], when[done, j, k], (j, k)))
        if kind == "B" and k < last_vs:  # cotangent arrives after the next virtual stage's B
            grads.append((when["B", j, k + 1], when[done, j, k], (j, k)))
    act_slot, n_act = _slots(acts, s.p)
    grad_slot, n_grad = _slots(grads, s.p)
    names, arrays = ["idle"], {n: np.zeros((s.n_ticks, s.p), np.int32) for n in
                               ("branch", "mb", "chunk", "act", "grad")}
    arrays["act_in"] = np.full((s.n_ticks, s.p), n_act, np.int32)  # default: the trash slot
    arrays["grad_in"] = np.full((s.n_ticks, s.p), n_grad, np.int32)
    for op in s.ops:
        k = op.chunk * s.p + op.stage
        role = "first" if k == 0 else "last" if k == last_vs else "mid"
        kind = "Bx" if op.op == "B" and s.split_backward else op.op  # Bx: input gradient only
        name = f"{kind}.{role}"
        if name not in names:
            names.append(name)
        t, key = op.tick, (op.microbatch, k)
        row = {"branch": names.index(name), "mb": op.microbatch, "chunk": op.chunk,
               "act": act_slot.get(key, 0), "grad": grad_slot.get(key, 0)}
        for field, value in row.items():
            arrays[field][t, op.stage] = value
        if op.op == "F" and k < last_vs:
            arrays["act_in"][t, (op.stage + 1) % s.p] = act_slot[op.microbatch, k + 1]
        if op.op == "B" and k > 0:
            arrays["grad_in"][t, (op.stage - 1) % s.p] = grad_slot[op.microbatch, k - 1]
    return Plan(s, partition, tuple(names), arrays, n_act, n_grad)
