"""Benchmark tool: what fills a compiled step's temp buffer, read off XLA's buffer assignment.

    python benchmarks/buffer_peak.py "data=2,stage=4,schedule=1f1b,microbatches=4"
        [--model heavy] [--batch 8] [--remat none] [--min-mb 0.5]

Compiles the step on 8 emulated devices with XLA's dumps on (`--xla_dump_to`, the step's module
only) and prints the compiled and predicted memory, then the temp allocation as XLA laid it out:
every offset that holds a value of at least `--min-mb`, with the largest value placed there (its
size, HLO name, shape, live range in the module's instruction order and the JAX op it came
from). A value lives at one offset for its whole range and values of disjoint ranges share
offsets, so the allocation can exceed what is live at any one instruction; the live peak is
printed beside it. The pipeline's memory terms (parex.predict.stash) were read off this way.

`heavy` is the held-out weight-heavy model (8 layers, hidden 512, 4 heads, vocab 256, 16
tokens); any other name is a preset (parex.config.model_preset).
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import tempfile
from collections import defaultdict

VALUE = re.compile(r"value: <\d+ (\S+?)(?: \(phi\))? @0> \(size=(\d+),offset=(\d+)\): (\S+)")
RANGE = re.compile(r"^\s+(\S+?\{[\d,]*\}):(\d+)-(\d+)", re.M)
PEAK = re.compile(r"^\s+\S+\{[\d,]*\}: (\d+) bytes", re.M)


def temp_values(dump: str) -> tuple[int, list]:
    """(the temp allocation's size, its values as (offset, size, name, shape))."""
    text = open(_one(dump, "buffer-assignment.txt")).read()
    head = re.search(r"allocation \d+: size (\d+), preallocated-temp:\n", text)
    values = []
    for line in text[head.end():].splitlines():
        found = VALUE.search(line)
        if not line.startswith(" value:") or not found:
            break
        name, size, offset, shape = found.groups()
        values.append((int(offset), int(size), name if "{" in name else name + "{}", shape))
    return int(head.group(1)), values


def live_peak(dump: str) -> tuple[dict, int]:
    """(each value's live range, the bytes live at the module's peak, arguments included)."""
    text = open(_one(dump, "live-range.txt")).read()
    ranges = {n: (int(a), int(b)) for n, a, b in RANGE.findall(text)}
    peak = text[text.index("(peak):"):text.index("Stack trace")]
    return ranges, sum(int(b) for b in PEAK.findall(peak))


def op_names(dump: str) -> dict:
    """Each HLO instruction's JAX op name (its metadata), where it has one."""
    names = {}
    for line in open(_one(dump, "cpu_after_optimizations.txt")):
        found = re.match(r"\s*(?:ROOT )?%(\S+) = .*?op_name=\"([^\"]*)\"", line)
        if found:
            names[found.group(1)] = found.group(2)
    return names


def offset_map(values: list, ranges: dict, names: dict, min_bytes: int) -> list[str]:
    """One line per offset holding a value of at least `min_bytes`: its largest value."""
    at = defaultdict(list)
    for offset, size, name, shape in values:
        at[offset].append((size, name, shape))
    lines = []
    for offset in sorted(at):
        size, name, shape = max(at[offset])
        if size >= min_bytes:
            start, end = ranges.get(name, (-1, -1))
            op = names.get(name.split("{")[0], "")[-70:]
            lines.append(f"{offset / 1e6:8.2f} {size / 1e6:7.2f} {len(at[offset]):4d}  "
                         f"{name:34s} {shape:34s} {start:5d}-{end:<5d} {op}")
    return lines


def _one(dump: str, suffix: str) -> str:
    return glob.glob(os.path.join(dump, f"*jit__step*{suffix}"))[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("layout")
    parser.add_argument("--model", default="heavy")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--remat", default="none")
    parser.add_argument("--min-mb", type=float, default=0.5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as dump:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={dump}"
                                   " --xla_dump_hlo_pass_re=NONE"
                                   " --xla_dump_hlo_module_re=.*jit__step.*")
        from parex.executor.mesh import emulate_devices

        emulate_devices(8)
        from parex.config import ModelConfig, TrainConfig, model_preset
        from parex.layout import Layout
        from parex.measure.compiled import compile_layout, memory_stats
        from parex.predict import predict

        model = (ModelConfig("heavy", layers=8, hidden=512, heads=4, vocab=256, seq_len=16)
                 if args.model == "heavy" else model_preset(args.model))
        train, layout = TrainConfig(global_batch=args.batch, remat=args.remat), \
            Layout.parse(args.layout, 8)
        _, compiled, _ = compile_layout(model, train, layout)
        measured = memory_stats(compiled)
        predicted = predict(model, train, layout, "cpu-local").memory_bytes_per_device
        size, values = temp_values(dump)
        ranges, peak = live_peak(dump)
        print(f"{model.name} {layout} remat={args.remat}: compiled {measured['total'] / 1e6:.2f}"
              f" MB, predicted {predicted['total'] / 1e6:.2f} MB "
              f"({predicted['total'] / measured['total']:.3f})")
        print(f"temp allocation {size / 1e6:.2f} MB; live at the peak {peak / 1e6:.2f} MB, "
              f"arguments {measured['argument'] / 1e6:.2f} MB of it")
        print("  offset    size    n  largest value                      shape"
              + " " * 30 + "live        op")
        print("\n".join(offset_map(values, ranges, op_names(dump), int(args.min_mb * 1e6))))


if __name__ == "__main__":
    main()
