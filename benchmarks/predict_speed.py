"""How many layouts per second can the predictor rank? Target: >= 50,000 predictions/s over at
least 100,000 layouts.

    python benchmarks/predict_speed.py         # Megatron's 1T model on 256 to 2048 H100s
    python benchmarks/predict_speed.py --model llama2-70b --hardware a100-80gb --devices 512
    python benchmarks/predict_speed.py --stack nemo    # with NeMo's overlaps priced

Every way of splitting 1/4, 1/2, 1 and 2 times --devices over data × fsdp × seq × tensor × stage
(powers of two), with every ZeRO stage, sequence parallelism on/off, both context-parallel modes,
every pipeline schedule and many microbatch counts and virtual stages, kept where parex.validation
would accept them, as numpy columns (`Grid.from_columns`), then one `predict_batch` call.
Cold = the first call in a fresh process (it places and times every distinct schedule table, all
at once: parallel.tables, unless an earlier process left their numbers in the table store,
predict.table_store; `PAREX_TABLE_STORE=0` places them again), warm = a second call (the tables'
numbers are cached in memory).
A smaller run through `Grid.from_layouts` times the path that starts from Layout objects.

    python benchmarks/predict_speed.py --record docs/results/predict_speed.json

writes what it printed, with the date, the machine's cores and its load, as JSON: the rates
docs/predict.md quotes are checked against that record (tests/figures/test_docs.py).
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from parex.config import TrainConfig, model_preset
from parex.layout import Layout, LayoutError
from parex.layout import CP_MODES
from parex.parallel.schedules import SCHEDULES
from parex.predict import predict_batch
from parex.predict.shapes import Grid
from parex.validation import validate
from parex.validation.checks import valid_columns


def splits(n_devices: int, max_stage: int):
    """(data, fsdp, seq, tensor, stage) with product n_devices, each a power of two."""
    k = int(np.log2(n_devices))
    for parts in itertools.product(range(k + 1), repeat=4):
        rest = k - sum(parts)
        if rest >= 0 and 2 ** rest <= max_stage:
            yield tuple(2 ** p for p in parts) + (2 ** rest,)


def layout_columns(device_counts, max_stage: int = 64) -> dict:
    rows = []
    for n_devices in device_counts:
        for data, fsdp, seq, tensor, stage in splits(n_devices, max_stage):
            for zero, sp, m in itertools.product((0, 1, 2, 3), (0, 1), MICROBATCHES):
                cps = (1, 2) if seq > 1 else (0,)
                pipes = [(0, 1)] if stage == 1 else (
                    [(0, 1), (1, 1), (3, 1)] + [(2, v) for v in (2, 4, 8) if m % stage == 0])
                for cp, (schedule, v) in itertools.product(cps, pipes):
                    rows.append((data, fsdp, seq, tensor, stage, zero, sp, m, cp, schedule, v))
    cols = np.array(rows).T
    names = ("data", "fsdp", "seq", "tensor", "stage", "zero", "sp", "microbatches", "cp",
             "schedule", "virtual_stages")
    return dict(zip(names, cols))


MICROBATCHES = (1, 2, 4, 8, 16, 32, 64, 128)


CPU_SECONDS = {}  # the last timed call's CPU seconds, by name (wall time counts other load)


def timed(fn, name: str = ""):
    start, cpu = time.perf_counter(), time.process_time()
    out = fn()
    CPU_SECONDS[name] = time.process_time() - cpu
    return out, time.perf_counter() - start


def _validated(layout: Layout, model, train) -> bool:
    """parex.validate's verdict on one layout (a real program: executable=False)."""
    try:
        validate(layout, model, train, layout.n_devices, executable=False)
    except LayoutError:
        return False
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="megatron-1008b")
    parser.add_argument("--hardware", default="h100-sxm")
    parser.add_argument("--devices", type=int, default=1024)
    parser.add_argument("--global-batch", type=int, default=8192)
    parser.add_argument("--stack", default=None,
                        help="price a stack's communication overlaps (parex.stacks), e.g. nemo")
    parser.add_argument("--record", type=Path, default=None,
                        help="write the rates as JSON here (e.g. docs/results/predict_speed.json)")
    args = parser.parse_args(argv)
    model = model_preset(args.model).replace(dtype="bfloat16")
    train = TrainConfig(global_batch=args.global_batch, remat="selective")

    counts = [args.devices // 4, args.devices // 2, args.devices, 2 * args.devices]
    columns = layout_columns(counts)
    everything = Grid.from_columns(train, model, **columns)
    keep = valid_columns(model, train, everything)  # the layouts validation accepts
    columns = {k: v[keep] for k, v in columns.items()}
    grid, build = timed(lambda: Grid.from_columns(train, model, **columns))
    n = len(grid)
    _, cold = timed(lambda: predict_batch(model, train, grid, args.hardware, stack=args.stack),
                    "cold")
    out, warm = timed(lambda: predict_batch(model, train, grid, args.hardware, stack=args.stack),
                      "warm")
    print(f"{model.name} on {'/'.join(map(str, counts))} × {args.hardware}, global batch "
          f"{args.global_batch}: {n:,} valid layouts (of {len(everything):,} combinations)")
    print(f"  columns built in {build:.2f} s")
    for name, seconds in (("cold", cold), ("warm", warm)):
        rate = n / seconds
        print(f"  {name} {seconds:.2f} s = {rate:,.0f} predictions/s  [target >= 50,000: "
              f"{'met' if rate >= 50_000 else 'NOT met'}]; "
              f"{n / CPU_SECONDS[name]:,.0f} per CPU second")
    fits = out["fits"]
    best = np.argmax(np.where(fits, out["tokens_per_s"], 0))
    print(f"  {fits.sum():,} fit in memory; fastest that fits: "
          + ", ".join(f"{k}={columns[k][best]}" for k in columns) +
          f" -> {out['tokens_per_s'][best]:,.0f} tokens/s, MFU {out['mfu'][best]:.1%}")

    names = [k for k in columns if k not in ("cp", "schedule", "sp")]
    layouts = [Layout(**{k: int(columns[k][i]) for k in names}, sp=bool(columns["sp"][i]),
                      cp=CP_MODES[columns["cp"][i]], schedule=SCHEDULES[columns["schedule"][i]])
               for i in range(min(n, 20000))]
    _, objects = timed(lambda: predict_batch(model, train, layouts, args.hardware))
    print(f"  from {len(layouts):,} Layout objects: {len(layouts) / objects:,.0f} predictions/s")
    checked = layouts[:1000]
    _, checking = timed(lambda: [_validated(layout, model, train) for layout in checked])
    print(f"  validate(): {checking / len(checked) * 1e6:,.0f} µs per layout (what a planner "
          f"or the Explorer pays before compiling anything)")
    if args.record:
        record = {"date": datetime.date.today().isoformat(), "cores": os.cpu_count(),
                  "load_average": os.getloadavg()[0], "model": model.name,
                  "hardware": args.hardware, "layouts": n, "cold_per_s": n / cold,
                  "warm_per_s": n / warm, "layout_objects_per_s": len(layouts) / objects,
                  "validate_us": checking / len(checked) * 1e6,
                  "cold_per_cpu_s": n / CPU_SECONDS["cold"],
                  "warm_per_cpu_s": n / CPU_SECONDS["warm"],
                  "command": "python benchmarks/predict_speed.py " + " ".join(argv or
                                                                            sys.argv[1:])}
        args.record.write_text(json.dumps(record, indent=1) + "\n")
        print(f"  recorded in {args.record}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
