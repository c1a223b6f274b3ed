"""The planner's targets, measured in one run.

    python benchmarks/planner.py                # speed and the papers' layouts
    python benchmarks/planner.py --fits 100     # + fits agreement over 2 × 100 compiled layouts
    python benchmarks/planner.py --verify 5     # + measure the top 5 and 5 random on the mesh

speed   enumerate + predict + rank, in layouts/s (target >= 100,000 on 2 cores): each scenario in
        a fresh process with an empty table store (a machine's first plan: the predictor places
        its pipeline schedule tables), in a second fresh process (the tables' numbers read from
        the store, predict.table_store) and again in the same process (warm: tables in memory);
        wall-clock and CPU-time rates (the CPU rate is what an unshared machine would see when
        other work competes for the cores).
papers  Megatron-LM's Table 1 (Narayanan et al. 2021) and GPT-3 175B on 1,024 A100s: the
        planner's best layout against the paper's own, both predicted with ZeRO's mixed
        recipe on A100-80GB, and the paper layout's rank among all fitting layouts (target:
        the best is predicted no slower than the paper's layout on every row).
fits    random layouts of tiny and small compiled on the emulated mesh (memory only, no
        steps): the planner's fits/does-not-fit under a cap at the median measured total
        against XLA's (target: >= 95% agreement over >= 200 layouts); precision and recall.
verify  `parex plan --verify` on the tiny model: Spearman's rank correlation of predicted
        against measured step time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SCENARIOS = [  # (model, hardware, nodes, global batch, seq)
    ("gpt3-175b", "a100-80gb", 128, 1536, None),
    ("llama3-70b", "h100-sxm", 64, 1024, 8192),
    ("megatron-1008b", "a100-80gb", 384, 3072, None),
    ("tiny", "cpu-local", 1, 16, None),
]
# GPT-3 175B as Megatron-LM trains it: examples/gpt3/train_gpt3_175b_distributed.sh
# (TP 8, PP 16, micro-batch 1, global batch 1536), on 1,024 GPUs (the paper's 34-day estimate).
GPT3 = {"model": "gpt3-175b", "gpus": 1024, "global_batch": 1536, "tp": 8, "pp": 16,
        "microbatch": 1, "virtual": 1}

TIMING = """
import json, sys, time
from parex.config import TrainConfig, model_preset
from parex.plan import plan
name, hw, nodes, batch, seq = {args!r}
model = model_preset(name)
model = model.replace(dtype="bfloat16") if hw != "cpu-local" else model
train = TrainConfig(global_batch=batch, seq_len=seq)
runs = []
for _ in range(4):
    wall, cpu = time.perf_counter(), time.process_time()
    p = plan(model, train, hw, nodes, top=5, recipe="mixed" if hw != "cpu-local" else "parex")
    runs.append((p.layouts_considered, time.perf_counter() - wall, time.process_time() - cpu))
print(json.dumps(runs))
"""


def speed() -> None:
    print("speed: enumerate + predict + rank (target >= 100,000 layouts/s on 2 cores)")
    import tempfile

    with tempfile.TemporaryDirectory() as store:  # an empty table store: a machine's first plan
        env = dict(os.environ, PYTHONPATH=str(ROOT), PAREX_TABLE_STORE=store)
        for args in SCENARIOS:
            first, later = (json.loads(subprocess.run(
                [sys.executable, "-c", TIMING.format(args=args)], env=env, capture_output=True,
                text=True, check=True).stdout) for _ in range(2))
            n = first[0][0]
            wall = statistics.median(r[1] for r in first[1:])
            cpu = statistics.median(r[2] for r in first[1:])
            print(f"  {args[0]} on {args[2]} × {args[1]}, batch {args[3]}: {n:,} layouts · "
                  f"first on this machine {n / first[0][1]:,.0f}/s wall, "
                  f"{n / first[0][2]:,.0f}/s CPU · a later process (tables stored) "
                  f"{n / later[0][1]:,.0f}/s wall · warm (median of 3) {n / wall:,.0f}/s wall, "
                  f"{n / cpu:,.0f}/s CPU")


def paper_rank(model, train, layout, cluster):
    """(paper layout's predicted step, its memory, the plan, its rank among the fitting rows,
    its rank among their distinct predicted step times)."""
    import numpy as np

    from parex.plan import plan
    from parex.plan.search import RECIPES
    from parex.predict import predict_batch

    paper = predict_batch(model, train, [layout], cluster, recipe=RECIPES["mixed"])
    step, memory = float(paper["step_time_s"][0]), float(paper["memory_total_bytes"][0])
    p = plan(model, train, cluster, top=1, recipe="mixed")
    faster = p.columns["step_time_s"][p.fits]
    faster = faster[faster < step * (1 - 1e-9)]
    return step, memory, p, 1 + len(faster), 1 + len(np.unique(faster.round(9)))


def papers() -> bool:
    from parex.config import TrainConfig, model_preset
    from parex.hardware import load_cluster
    from parex.layout import Layout
    from parex.predict.published import read_reference
    from parex.predict.published_runs import megatron_row_setup

    print("\npapers: the planner's best against the paper's layout (A100-80GB, mixed recipe)")
    table = read_reference("megatron_table1")
    rows = [(f"Megatron {r.params_b:g}B", r.gpus, *megatron_row_setup(r))
            for r in table.itertuples()]
    g = GPT3
    dp = g["gpus"] // (g["tp"] * g["pp"])
    rows.append(("GPT-3 175B", g["gpus"], model_preset(g["model"]).replace(dtype="bfloat16"),
                 TrainConfig(global_batch=g["global_batch"], microbatch=g["microbatch"],
                             remat="full"),
                 Layout(data=dp, tensor=g["tp"], stage=g["pp"], schedule="1f1b")))
    all_ok = True
    for name, gpus, model, train, layout in rows:
        cluster = load_cluster("a100-80gb", gpus // 8)
        step, memory, p, rank, distinct = paper_rank(model, train, layout, cluster)
        b = f"b={train.microbatch}"
        best = p.top[0]
        ok = p.columns["step_time_s"][best] <= step * (1 + 1e-9)
        all_ok &= ok
        fits = "fits" if memory <= p.memory_cap else f"does NOT fit ({memory / 1e9:.0f} GB)"
        print(f"  {name} on {gpus}: paper {layout},{b},remat=full {step:.2f} s ({fits}), rank "
              f"{rank:,} of {int(p.fits.sum()):,} fitting ({distinct:,} among distinct "
              f"predictions) · best {p.layout(best)},"
              f"remat={p.train_of(best).remat} {p.columns['step_time_s'][best]:.2f} s "
              f"({step / p.columns['step_time_s'][best]:.2f}x faster) · "
              f"{p.layouts_considered:,} layouts in {p.seconds:.1f} s  "
              f"[{'met' if ok else 'NOT met'}]")
    return all_ok


def fits(count: int) -> None:
    import parex
    from parex.plan.fits import agreement_of, check_fits

    parex.emulate_devices(8)
    print(f"\nfits: {count} random compiled layouts each of tiny and small, cap at each model's "
          f"median measured total")
    everything = []
    for name in ("tiny", "small"):
        result = check_fits(name, count)
        everything += [(r["predicted_bytes"] <= result["cap_bytes"],
                        r["measured_bytes"] <= result["cap_bytes"]) for r in result["rows"]]
        print(f"  {name}: cap {result['cap_bytes'] / 1e6:.2f} MB · n {result['n']} · agreement "
              f"{result['agreement']:.1%} · precision {result['precision']:.1%} · recall "
              f"{result['recall']:.1%}")
        for r in result["rows"]:
            said = r["predicted_bytes"] <= result["cap_bytes"]
            if said != (r["measured_bytes"] <= result["cap_bytes"]):
                print(f"    disagree: {r['layout']} remat={r['remat']} predicted "
                      f"{r['predicted_bytes'] / 1e6:.2f} MB, measured "
                      f"{r['measured_bytes'] / 1e6:.2f} MB")
    total = agreement_of(*zip(*everything))
    print(f"  both: n {total['n']} · agreement {total['agreement']:.1%} [target >= 95%: "
          f"{'met' if total['agreement'] >= 0.95 else 'NOT met'}] · precision "
          f"{total['precision']:.1%} · recall {total['recall']:.1%}")


def verify(k: int) -> None:
    from parex.config import TrainConfig, model_preset
    from parex.plan import plan
    from parex.plan.verify import verify as run_verify, verify_report

    print(f"\nverify: the top {k} and {k} random fitting layouts of tiny, measured")
    p = plan(model_preset("tiny"), TrainConfig(global_batch=16), "cpu-local", top=k)
    print(verify_report(run_verify(p, steps=6)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fits", type=int, default=0, help="layouts per model (>= 100)")
    parser.add_argument("--verify", type=int, default=0, help="top K to measure")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-papers", action="store_true")
    args = parser.parse_args(argv)
    if not args.skip_speed:
        speed()
    ok = True if args.skip_papers else papers()
    if args.fits:
        fits(args.fits)
    if args.verify:
        verify(args.verify)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
