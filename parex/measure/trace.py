"""The pipeline bubble read from a per-device profiler trace: the time each device waits.

parex's pipeline executor is tick-synchronous: every tick ends in ppermutes, so a stage whose op
finishes early waits in the collective for its peer. On XLA:CPU a collective thunk (ppermute,
all-reduce, ...) is a `Rendezvous` event (nesting `Wait: pending_threads=k/n`, `Wait for
rendezvous callback`) and a memcpy of the peer's buffer (µs at parex's sizes); after the
rendezvous a third of the thunks run on for 1–8 ms with nothing traced in them, where other ops
almost never take over 1 ms (presumably the peer, woken from its wait, waiting for a core on the
loaded machine). So the bubble each device sees is

    bubble = wait / step,   wait = |∪ collective-thunk intervals|,   step = the device's span

and `rendezvous_s` (|∪ Rendezvous|) is its lower bound. The trace splits the rest of the step
into `compute` (thunks that do work: op events with no op nested in them, less the waits) and
`other` (step − compute − wait: the thunk executor's dispatch between thunks, loop and switch
bookkeeping). Wall time per step, unlike the trace, counts the executor's per-tick costs as
bubble too (parex.studies.pipeline).

XLA:CPU tags each thunk event with `device_ordinal` and `run_id` (one id per execution); events
nested in one (Rendezvous, Wait) inherit its tags. Events with neither (the python thread, the
thread pool's own wrappers) are not any device's. Only meaningful with one emulated device per
free core: a device that waits with more devices than cores lends its core to another.
"""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path

import jax
import pandas as pd

WAIT_EVENT = "Rendezvous"  # XLA:CPU collectives wait for their peers in it
COLLECTIVES = ("ppermute", "collective-permute", "all-reduce", "all-gather", "reduce-scatter",
               "all-to-all", "psum")  # hlo_op name prefixes, "_" read as "-" (XLA writes
#   all_gather.3, reduce_scatter.5, psum_invariant.8 and all_gather_invariant.2 as well)


def load_trace(directory: str | Path) -> dict:
    """The newest `*.trace.json.gz` that jax.profiler.trace wrote under `directory`."""
    paths = sorted(Path(directory).glob("plugins/profile/*/*.trace.json.gz"))
    if not paths:
        raise FileNotFoundError(f"no plugins/profile/*/*.trace.json.gz under {directory}: run the "
                                f"step inside jax.profiler.trace({str(directory)!r}) first")
    with gzip.open(paths[-1]) as f:
        return json.load(f)


def _device_events(trace: dict) -> dict[tuple[str, str], list[dict]]:
    """Complete ("X") events grouped by (run_id, device_ordinal), with each event's nesting known.

    Per thread, events sorted by (start, −duration) nest as a stack; an event without tags takes
    its nearest tagged ancestor's. Sets e["_leaf_op"]: an op (hlo_op) with no op nested in it."""
    threads: dict[tuple, list[dict]] = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "X":
            threads.setdefault((e["pid"], e["tid"]), []).append(dict(e, _leaf_op="hlo_op" in
                                                                      e.get("args", {})))
    groups: dict[tuple[str, str], list[dict]] = {}
    for events in threads.values():
        events.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
        stack: list[dict] = []
        for e in events:
            while stack and stack[-1]["ts"] + stack[-1].get("dur", 0) <= e["ts"]:
                stack.pop()
            args = e.get("args", {})
            tag = (args["run_id"], args["device_ordinal"]) if "device_ordinal" in args else None
            if tag is None and stack:
                tag = stack[-1]["_tag"]
            if e["_leaf_op"]:
                for ancestor in stack:
                    ancestor["_leaf_op"] = False
            e["_tag"] = tag
            stack.append(e)
            if tag is not None:
                groups.setdefault(tag, []).append(e)
    return groups


def _union(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end) intervals."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def _is_collective(event: dict) -> bool:
    return event.get("args", {}).get("hlo_op", "").replace("_", "-").startswith(COLLECTIVES)


def device_table(trace: dict) -> pd.DataFrame:
    """One row per (run, device): step, compute, wait, rendezvous and other seconds, and
    bubble = wait / step (module docstring)."""
    rows = []
    for (run, device), events in _device_events(trace).items():
        span = [(e["ts"], e["ts"] + e.get("dur", 0)) for e in events]
        rendezvous = [s for s, e in zip(span, events) if e["name"] == WAIT_EVENT]
        collective = [s for s, e in zip(span, events) if _is_collective(e)]
        ops = [s for s, e in zip(span, events) if e["_leaf_op"]]
        step = max(end for _, end in span) - min(start for start, _ in span)
        wait = _union(collective + rendezvous)
        compute = _union(ops + collective + rendezvous) - wait  # |ops \ waits|
        rows.append({"run": run, "device": int(device), "step_s": step * 1e-6,
                     "compute_s": compute * 1e-6, "wait_s": wait * 1e-6,
                     "rendezvous_s": _union(rendezvous) * 1e-6,
                     "other_s": (step - compute - wait) * 1e-6, "bubble": wait / step})
    if not rows:
        raise ValueError("the trace has no events tagged with device_ordinal: was a compiled "
                         "XLA:CPU step run inside the trace?")
    return pd.DataFrame(rows).sort_values(["run", "device"], ignore_index=True)


def summarize(table: pd.DataFrame) -> dict:
    """Per device the mean over runs (so compute + wait + other = step still) and its bubble
    = wait / step; then the mean over devices, and the largest device bubble."""
    per_device = table.groupby("device")[["step_s", "compute_s", "wait_s", "rendezvous_s",
                                          "other_s"]].mean()
    bubbles = per_device.wait_s / per_device.step_s
    summary = per_device.mean().to_dict()
    summary |= {"bubble": float(bubbles.mean()), "bubble_max": float(bubbles.max()),
                "runs": int(table.run.nunique())}
    return summary


def trace_steps(run, repeats: int = 3, directory: str | Path | None = None) -> dict:
    """Run `run()` (one compiled, warmed-up step) `repeats` times under jax.profiler.trace and
    summarize its per-device trace (summarize)."""
    with tempfile.TemporaryDirectory() as scratch:
        directory = directory or scratch
        with jax.profiler.trace(str(directory)):
            for _ in range(repeats):
                run()
        return summarize(device_table(load_trace(directory)))


__all__ = ["COLLECTIVES", "WAIT_EVENT", "device_table", "load_trace", "summarize", "trace_steps"]
