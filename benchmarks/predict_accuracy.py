"""How close is the analytic model? Predicted against measured on the emulated mesh, and against
the papers' published tables. Prints every figure, asserts nothing (targets printed beside them).

    python benchmarks/predict_accuracy.py                  # everything (a few minutes on 2 cores)
    python benchmarks/predict_accuracy.py --published      # only the papers' tables (seconds)
    python benchmarks/predict_accuracy.py --calibrate      # re-calibrate cpu-local first
    python benchmarks/predict_accuracy.py --fresh-clone    # calibrate as on first use, then
                                                           # step time: presets, pipelines, CP

What calibrates and what is scored: `parex calibrate` (and --fresh-clone's first-use calibration)
measures kernels, collectives, two 2-layer blocks of width 128 and a probe pipeline of a 4-layer,
width-16 model (calibrate_pipeline.py); the layouts below are only scored, never fitted.

Emulated mesh (8 CPU devices), every layout preset for the tiny and small models, convention
"xla-cpu", hardware "cpu-local". Targets: argument memory within 2 %, total memory within 10 %,
collective bytes per kind equal, FLOPs within 5 %, step time median absolute error <= 20 %.
Published: ZeRO Table 1 and Korthikanti's Table 2 through predict() (state and activation
memory); step time on published A100 runs, one profile, no per-row tuning: leave-one-out on
Megatron-LM's Table 1 (the fit set of the one fitted constant, the step efficiency) and the
held-out runs of other papers (data/reference/heldout_runs.csv), the held-out runs added
after the model was developed (data/reference/added_runs.csv) and those of other clusters and
code (data/reference/other_runs.csv), each set on its own; targets
median <= 5 %, max <= 12 %.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)

import numpy as np  # noqa: E402

from parex.calibrate import run as calibrate
from parex.config import TrainConfig, model_preset  # noqa: E402
from parex.hardware import load_chip  # noqa: E402
from parex.measure.hlo import KINDS
from parex.layout import LAYOUT_PRESETS, Layout  # noqa: E402
from parex.predict import predict, published, published_runs, shared_fields  # noqa: E402
from parex.measure.report import table
from parex.validation import validate

EXTRA_LAYOUTS = ("data=2,tensor=4,sp=on", "data=4,tensor=2,zero=1")


def measure_round_robin(model, train, layouts, references=()) -> tuple[list, list]:
    """Measurements of several layouts whose timed steps alternate (one step of each in turn),
    so that the load of other processes on the shared cores hits every layout alike; the
    `references` (jitted function, arguments) are timed in the same rotation."""
    from parex.data import Batches
    from parex.measure.compiled import compile_layout, compiled_stats
    from parex.record import Measurement

    runs = []
    for layout in layouts:
        step, compiled, seconds = compile_layout(model, train, layout,
                                                 jax.devices()[:layout.n_devices])
        batches = Batches("corpus", train.global_batch, step.seq_len, model.vocab, train.seed)
        runs.append({"step": step, "compiled": compiled, "compile": seconds, "times": [],
                     "losses": [], "state": step.init_state(), "batches": batches})
    reference_times = [[] for _ in references]
    for i in range(train.steps):
        for (fn, args), times in zip(references, reference_times):
            jax.block_until_ready(fn(*args))
            start = time.perf_counter()
            jax.block_until_ready(fn(*args))
            times.append(time.perf_counter() - start)
        for run in runs:
            batch = run["batches"].on_mesh(i, run["step"].batch_sharding)
            start = time.perf_counter()
            run["state"], loss = run["compiled"](run["state"], batch)
            jax.block_until_ready(loss)
            run["times"].append(time.perf_counter() - start)
            run["losses"].append(float(loss))
    out = []
    for run in runs:
        timed, step = run["times"][1:], run["step"]
        out.append(Measurement(
            model=model.name, layout=str(step.layout), n_devices=step.mesh.size, platform="cpu",
            losses=run["losses"], step_time_s={"median": statistics.median(timed),
                                               "min": min(timed), "max": max(timed)},
            compile_time_s=run["compile"], tokens_per_step=train.tokens_per_step(model),
            **compiled_stats(run["compiled"], step)))
        run.clear()
    return out, [statistics.median(times) for times in reference_times]


def emulated(models, steps: int, hardware: str) -> dict:
    rows, errors = [], {"argument": [], "total": [], "flops": [], "step": [], "comm": []}
    for name in models:
        model = model_preset(name)
        train = TrainConfig(global_batch=16, steps=steps)
        layouts = []
        for spec in list(LAYOUT_PRESETS) + list(EXTRA_LAYOUTS):
            layout = Layout.parse(spec, 8)
            try:
                validate(layout, model, train, layout.n_devices)
                layouts.append(layout)
            except ValueError as err:
                print(f"skip {name} {spec}: {err}")
        references = (calibrate.block_step(8), calibrate.block_step(1))
        measured, (t_all, t_one) = measure_round_robin(model, train, layouts, references)
        chip = calibrate.recalibrated(load_chip(hardware), t_all, t_one)
        print(f"{name}: block steps timed between the measured ones -> step efficiency "
              f"{chip.calibration.step_efficiency:.0%}, {chip.calibration.parallel_devices:.2f} "
              f"devices at once")
        for layout, m in zip(layouts, measured):
            p = predict(model, train, layout, chip, convention="xla-cpu")
            f = {x["field"]: x for x in shared_fields(m, p)}
            comm = [f[f"comm_{k.replace('-', '_')}_bytes"] for k in KINDS]
            comm_err = max((abs(c["ratio"] - 1) for c in comm if c["measured"] or c["predicted"]),
                           default=0.0)
            for key, field in (("argument", "memory_argument_bytes"),
                               ("total", "memory_total_bytes"), ("flops", "flops_per_device"),
                               ("step", "step_time_s")):
                errors[key].append(abs(f[field]["ratio"] - 1))
            errors["comm"].append(comm_err)
            rows.append([name, str(layout), f"{f['memory_argument_bytes']['ratio']:.4f}",
                         f"{f['memory_total_bytes']['ratio']:.3f}",
                         f"{f['flops_per_device']['ratio']:.3f}", f"{comm_err:.3f}",
                         f"{m.step_time_s['median'] * 1e3:.1f}",
                         f"{p.step_time_s['total'] * 1e3:.1f}", f"{f['step_time_s']['ratio']:.2f}"])
            print(" ".join(rows[-1]), flush=True)
    print()
    print(table(rows, ["model", "layout", "argument", "total", "FLOPs", "comm max err",
                       "measured ms", "predicted ms", "step ratio"]))
    return errors


# --- a fresh clone: this machine calibrated on first use, its profile taken as it is -------------

PIPELINE_LAYOUTS = ("data=2,stage=4,schedule=gpipe,microbatches=4",
                    "data=2,stage=4,schedule=1f1b,microbatches=4",
                    "data=2,stage=4,schedule=zbh1,microbatches=4",
                    "data=4,stage=2,schedule=gpipe,microbatches=4",
                    "data=4,stage=2,schedule=1f1b,microbatches=4",
                    "data=4,stage=2,schedule=zbh1,microbatches=4",
                    "data=2,tensor=2,stage=2,schedule=interleaved,virtual=2,microbatches=4",
                    "data=2,tensor=2,stage=2,schedule=interleaved,virtual=3,microbatches=4")
CP_LAYOUTS = ("data=2,seq=4,cp=ring", "data=2,seq=4,cp=ulysses", "data=2,tensor=2,seq=2,cp=ring",
              "seq=8,cp=ring")


def fresh_clone(models, steps: int) -> dict:
    """Step-time error as a fresh clone sees it: calibrate this machine in a new process, as
    `parex demo` does on first use (timed), then measure every preset, pipeline and CP layout
    that runs and predict it with that profile as it is (no block timings between the measured
    steps, unlike `emulated`). Returns {group: [|ratio - 1|, ...]}."""
    import json
    import tempfile
    from pathlib import Path

    from parex.hardware import chip_from_json
    from parex.calibrate.local import calibrate_in_subprocess

    with tempfile.TemporaryDirectory() as cache:
        path = Path(cache) / "cpu-local-fresh.json"
        seconds = calibrate_in_subprocess(path, progress=False)
        chip = chip_from_json(json.loads(path.read_text()))
    print(f"fresh calibration in {seconds:.1f} s [target <= 40 s]; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(calibrate.summary(chip))
    groups = {"presets": list(LAYOUT_PRESETS) + list(EXTRA_LAYOUTS),
              "pipeline": list(PIPELINE_LAYOUTS), "cp": list(CP_LAYOUTS)}
    errors, rows = {g: [] for g in groups}, []
    for name in models:
        model, train = model_preset(name), TrainConfig(global_batch=16, steps=steps)
        chosen = []
        for group, specs in groups.items():
            for spec in specs:
                layout = Layout.parse(spec, 8)
                try:
                    validate(layout, model, train, layout.n_devices)
                    chosen.append((group, layout))
                except ValueError as err:
                    print(f"skip {name} {spec}: {str(err)[:90]}")
        measured, (t_blocks,) = measure_round_robin(model, train, [l for _, l in chosen],
                                                    (calibrate.block_step(8),))
        drift = t_blocks / _calibrated_block_seconds(chip)
        print(f"{name}: the calibration's block step now takes {drift:.2f}× what it took while "
              f"calibrating (the machine's load changed by that much)")
        for (group, layout), m in zip(chosen, measured):
            p = predict(model, train, layout, chip, convention="xla-cpu")
            ratio = p.step_time_s["total"] / m.step_time_s["median"]
            errors[group].append(abs(ratio - 1))
            rows.append([name, group, str(layout), f"{m.step_time_s['median'] * 1e3:.1f}",
                         f"{p.step_time_s['total'] * 1e3:.1f}", f"{ratio:.2f}",
                         f"{ratio * drift:.2f}"])
            print(" ".join(rows[-1]), flush=True)
    print()
    print(table(rows, ["model", "group", "layout", "measured ms", "predicted ms", "ratio",
                       "ratio × drift"]))
    every = [e for group in errors.values() for e in group]
    for group, errs in list(errors.items()) + [("all", every)]:
        if errs:
            print(f"  {group:8s} {len(errs):2d} layouts: step time median |error| "
                  f"{statistics.median(errs):.3f}, max {max(errs):.3f}  [median <= 0.15, "
                  f"max <= 0.35]")
    return errors


def _calibrated_block_seconds(chip) -> float:
    """What calibrate.block_step(8) took during the calibration (recalibrated's inverse)."""
    from parex.predict.shapes import Grid, model_sizes
    from parex.predict.time import cpu_layer_seconds

    cal, cfg = chip.calibration, calibrate._block_config()
    grid = Grid.from_columns(TrainConfig(global_batch=calibrate.BLOCK_SEQUENCES), cfg)
    kernels = cfg.layers * cpu_layer_seconds(model_sizes(cfg), grid, "none", cal,
                                             chip.hbm_bandwidth)[0]
    return kernels / cal.step_efficiency + cal.step_overhead_s


def published_tables() -> None:
    """The papers' tables through predict(): ZeRO's state memory, Korthikanti's activations."""
    zero = published.zero_table1()
    digits = zero.gb_per_device.map(_half_unit)
    ok = (zero.parex_gb - zero.gb_per_device).abs() <= np.maximum(0.01 * zero.gb_per_device,
                                                                  digits)
    print(f"ZeRO Table 1 through predict()'s state memory: {ok.sum()} of {len(zero)} entries "
          f"within 1 % or the paper's rounding; the others (ZeRO-3, N_d >= 64) carry parex's "
          f"replicated biases and norms:")
    print(table([[r.model, r.n_d, r.stage, r.gb_per_device, f"{r.parex_gb:.4g}", f"{r.ratio:.3f}"]
                 for r in zero[~ok].itertuples()], ["model", "N_d", "stage", "paper GB",
                                                    "parex GB", "ratio"]))
    k = published.korthikanti_table()
    print(f"Korthikanti Table 2 (component sums) against predict()'s activation memory: {len(k)} "
          f"configuration × model values, max |ratio − 1| {np.abs(k.ratio - 1).max():.2e} "
          f"(target: exact)")


def published_runs_accuracy(hardware: str = "a100-80gb") -> None:
    """Step time on published runs: leave-one-out on the fit set (Megatron-LM Table 1), the
    committed profile on the held-out set (other papers)."""
    result = published_runs.accuracy(hardware)
    print(f"\nstep efficiency: fitted on Megatron-LM Table 1 {result['fitted']:.4f}, profile "
          f"{result['profile']:.3f} (the only fitted constant; matmul and network efficiencies "
          f"come from published benchmarks, see the profile's efficiency_sources)")
    sets = (("FIT set, leave-one-out (Megatron-LM Table 1, Narayanan et al. 2021)", "fit_loo"),
            ("TEST set, held out (Korthikanti et al. 2022 Table 5, MT-NLG 2022)", "test"),
            ("TEST set, ADDED (Narayanan et al. 2021 Table 2, PTD-P rows; typed in and scored "
             "before the latest model changes, which were chosen on the fit set's "
             "leave-one-out error)", "added"),
            ("TEST set, OTHER clusters and code (BigScience BLOOM-176B; the facts parex does not "
             "describe are listed in data/reference/other_runs.csv)", "other"))
    for name, key in sets:
        frame = result[key]
        rows = [[r.run, r.tp, r.pp, r.gpus, r.virtual, r.remat, f"{r.step_s:.2f}",
                 f"{r.parex_step_s:.2f}", f"{r.ratio:.3f}"] for r in frame.itertuples()]
        print(f"\n{name}, seconds per iteration on {hardware}:")
        print(table(rows, ["run", "TP", "PP", "GPUs", "v", "remat", "paper s", "parex s",
                           "ratio"]))
        s = result[{"fit_loo": "fit_summary", "test": "test_summary",
                    "added": "added_summary", "other": "other_summary"}[key]]
        print(f"|ratio − 1|: median {s['median']:.3f}, max {s['max']:.3f} over {s['n']} runs "
              f"[targets: median <= 0.05, max <= 0.12]")
    s = result["all_test_summary"]
    print(f"\nall {s['n']} held-out runs together: |ratio − 1| median {s['median']:.3f}, max "
          f"{s['max']:.3f} [targets: median <= 0.05, max <= 0.12]")


def _half_unit(value: float) -> float:
    """Half a unit of the last digit the paper printed (its rounding)."""
    text = f"{value:g}"
    decimals = len(text.split(".")[1]) if "." in text else 0
    return 0.5 * 10 ** -decimals


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--published", action="store_true", help="only the papers' tables")
    parser.add_argument("--models", default="tiny,small")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--hardware", default="cpu-local")
    parser.add_argument("--calibrate", action="store_true", help="run parex calibrate first")
    parser.add_argument("--fresh-clone", action="store_true",
                        help="only the fresh-clone step-time check (calibrate, then measure)")
    args = parser.parse_args(argv)
    if args.fresh_clone:
        fresh_clone(args.models.split(","), args.steps)
        return 0
    published_tables()
    published_runs_accuracy()
    if args.published:
        return 0
    if args.calibrate:
        chip, path, seconds = calibrate.run(8)
        print(f"\ncalibrated in {seconds:.0f} s -> {path}")
    print()
    errors = emulated(args.models.split(","), args.steps, args.hardware)
    print(f"\nemulated mesh, {len(errors['total'])} layouts (targets in brackets):")
    print(f"  argument memory  max |error| {max(errors['argument']):.4f}  [<= 0.02]")
    print(f"  total memory     max |error| {max(errors['total']):.3f}  [<= 0.10]")
    print(f"  collective bytes max |error| per kind {max(errors['comm']):.3f}  [equal]")
    print(f"  FLOPs            max |error| {max(errors['flops']):.3f}  [<= 0.05]")
    print(f"  step time        median |error| {statistics.median(errors['step']):.3f}, max "
          f"{max(errors['step']):.3f}  [median <= 0.20]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
