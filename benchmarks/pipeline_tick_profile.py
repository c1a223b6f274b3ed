"""Profile: where a pipeline step's device time goes, per part of the tick loop.

    python benchmarks/pipeline_tick_profile.py [--schedules 1f1b,zbh1] [--runs 3] [--model tiny]
                                               [--batch 16]

At p = 4, m = 8 (the model with layers = 8, data = 2, 8 emulated devices), as pipeline_bubble.py
part 1.
Each compiled step runs `--runs` times under jax.profiler.trace; every XLA:CPU thunk event is
assigned to the part of the program its instruction sits in: a branch kind of the tick switch
(idle, F, B, W), the tick's own ops outside the switch ("tick": scatters into the stash slots,
gradient adds, the ppermutes' selects), the ppermutes, or outside the loop. Printed per device
and step, per part and schedule: the sum of each op's fastest duration times its calls
("min-work", robust to the machine's load), the traced durations themselves (inflated when a
device thread loses its core mid-thunk; the ppermutes' include the wait for the other stages),
and the thunks run.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import tempfile

SKIP = {"get-tuple-element", "tuple", "parameter", "constant", "bitcast"}


def computations(text: str) -> dict[str, list[str]]:
    out, current = {}, None
    for line in text.splitlines():
        header = re.match(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s*\(.*\{\s*$", line)
        if header and not line.startswith(" "):
            current = out.setdefault(header.group(1), [])
        elif current is not None and line.strip() not in ("", "}"):
            current.append(line)
    return out


def parts(text: str, branches: tuple[str, ...], n_ticks: int) -> dict[str, str]:
    """Instruction name -> the part of the program it belongs to (module docstring)."""
    comps, part = computations(text), {}

    def mark(comp, label):
        for line in comps.get(comp, []):
            name = re.match(r"\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=", line)
            if name and name.group(1) not in part:
                part[name.group(1)] = label
            for callee in re.findall(r"(?:calls|body|condition|to_apply|true_computation|"
                                     r"false_computation)=%?([\w.\-]+)", line):
                mark(callee, label)
            for group in re.findall(r"branch_computations=\{([^}]*)\}", line):
                for callee in group.split(","):
                    mark(callee.strip().lstrip("%"), label)

    loop = next(re.search(r"body=%?([\w.\-]+)", line).group(1)
                for lines in comps.values() for line in lines
                if " while(" in line and f'"n":"{n_ticks}"' in line)
    for line in comps[loop]:
        found = re.search(r"branch_computations=\{([^}]*)\}", line)
        if found and len(found.group(1).split(",")) == len(branches):
            for kind, callee in zip(branches, found.group(1).split(",")):
                mark(callee.strip().lstrip("%"), kind.split(".")[0])
    mark(loop, "tick")
    return part


def profile(name: str, runs: int, model_name: str = "tiny", batch: int = 16) -> dict:
    import jax
    from parex.config import TrainConfig, model_preset
    from parex.layout import Layout
    from parex.parallel.pipeline import timetable_for
    from parex.measure.trace import _device_events, load_trace
    from parex.studies.pipeline import _timer, compile_layout

    model, train = model_preset(model_name).replace(layers=8), TrainConfig(global_batch=batch)
    virtual = ",virtual=2" if name == "zbv" else ""
    layout = Layout.parse(f"data=2,stage=4,schedule={name},microbatches=8{virtual}")
    step, compiled, _ = compile_layout(model, train, layout, None)
    plan = timetable_for(step)
    where = parts(compiled.as_text(), plan.branches, plan.schedule.n_ticks)
    run = _timer(model, train, layout, None)
    with tempfile.TemporaryDirectory() as scratch:
        with jax.profiler.trace(scratch):
            for _ in range(runs):
                run()
        groups = _device_events(load_trace(scratch))
    fastest, calls, spent = {}, collections.Counter(), collections.Counter()
    for events in groups.values():
        for e in events:
            if e["_leaf_op"]:
                op = e["args"]["hlo_op"]
                fastest[op] = min(fastest.get(op, float("inf")), e.get("dur", 0))
                calls[op] += 1
                spent[op] += e.get("dur", 0)
    work, thunks, busy = collections.Counter(), collections.Counter(), collections.Counter()
    per_step = len(groups) * runs
    for op, n in calls.items():
        label = "ppermute" if op.startswith(("ppermute", "collective-permute")) else \
            where.get(op, "outside")
        work[label] += fastest[op] * n / per_step * 1e-3  # ms per device-step
        busy[label] += spent[op] / per_step * 1e-3
        thunks[label] += n / per_step
    return {"work": work, "busy": busy, "thunks": thunks, "ticks": plan.schedule.n_ticks}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", default="1f1b,zbh1")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args(argv)
    from parex.executor.mesh import emulate_devices

    emulate_devices(8)
    names = args.schedules.split(",")
    got = {n: profile(n, args.runs, args.model, args.batch) for n in names}
    labels = ["idle", "F", "B", "W", "tick", "ppermute", "outside"]
    print("per device and step: min-work ms, traced ms (thunks)   ticks: "
          + ", ".join(f"{n} {got[n]['ticks']}" for n in names))
    for label in labels + ["total"]:
        cells = []
        for n in names:
            w, b, t = got[n]["work"], got[n]["busy"], got[n]["thunks"]
            ms, real, k = ((sum(w.values()), sum(b.values()), sum(t.values()))
                           if label == "total" else (w[label], b[label], t[label]))
            cells.append(f"{ms:8.1f} {real:8.1f} ({k:6.0f})")
        print(f"{label:9s}" + "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
