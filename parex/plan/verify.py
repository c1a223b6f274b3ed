"""`parex plan --verify`: measure the plan's top layouts (and as many random fitting ones) on the
emulated mesh, and compare the predicted order with the measured one.

Each layout runs through a durable sweep (parex.sweep: its own `parex run --json` subprocess,
appended to a JSONL store), so an interrupted verify resumes where it stopped. Reported:
Spearman's rank correlation of predicted against measured step time (and memory), and the
predicted / measured ratio of each layout.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from ..config import preset_names
from ..layout import LayoutError
from ..sweep import SweepConfig, load, run_sweep
from .search import Plan, validated

MAX_VERIFY_PARAMS = 50_000_000  # what this host can train on its emulated devices


def spearman(a, b) -> float:
    """Rank correlation (Pearson's r of the ranks, ties averaged)."""
    import pandas as pd

    ra, rb = pd.Series(a).rank(), pd.Series(b).rank()
    return float(ra.corr(rb)) if len(ra) > 1 else float("nan")


def check_verifiable(plan: Plan) -> None:
    model, chip = plan.model, plan.cluster.chip
    if not plan.setting.emulated:
        raise LayoutError(f"--verify measures layouts on this machine's emulated mesh, so it "
                          f"needs the calibrated profile: plan with --hardware cpu-local, not "
                          f"{chip.name}")
    if model.name not in preset_names() or model.n_params > MAX_VERIFY_PARAMS:
        raise LayoutError(f"--verify runs {model.name} for real; use a preset that runs here "
                          f"(tiny, small, tiny-llama), or drop --verify")


def chosen_rows(plan: Plan, k: int, random_k: int, seed: int) -> list[tuple[int, str]]:
    """(row, "top" or "random"): the top k, then random_k other fitting rows that parex's
    executor runs (a verified plan is on the calibrated profile: search.validated)."""
    rows = [(i, "top") for i in plan.top[:k]]
    rng = np.random.default_rng(seed)
    others = np.setdiff1d(plan.order, plan.top)
    picked, _ = validated(plan, rng.permutation(others), random_k)
    return rows + [(i, "random") for i in picked]


def config_of(plan: Plan, i: int, steps: int) -> SweepConfig:
    train = plan.train_of(i)
    return SweepConfig(model=plan.model.name, layout=str(plan.layout(i)),
                       global_batch=train.global_batch, seq_len=train.seq_len, steps=steps,
                       remat=train.remat, dtype=plan.model.dtype,
                       devices=plan.cluster.n_devices)


def verify(plan: Plan, k: int | None = None, random_k: int | None = None, steps: int = 5,
           out=None, timeout: float | None = 600, seed: int = 0, progress: bool = True) -> dict:
    """Measure the plan's top k and random_k random fitting layouts (k defaults to the plan's
    top); returns the rank correlations, the per-layout ratios and the store's path."""
    check_verifiable(plan)
    k = len(plan.top) if k is None else k
    rows = chosen_rows(plan, k, k if random_k is None else random_k, seed)
    configs = [config_of(plan, i, steps) for i, _ in rows]
    out = Path(out) if out else Path(tempfile.mkdtemp(prefix="parex-verify-")) / "verify.jsonl"
    calibration = plan.cluster.chip.calibration  # the other work on this machine, before ours:
    machine_load = {"now": os.getloadavg()[0], "calibration": calibration.load_average,
                    "cores": calibration.cores}
    run_sweep(configs, out, resume=True, timeout=timeout, progress=progress)
    measured = load(out).set_index("key")
    table = []
    for (i, why), config in zip(rows, configs):
        m = measured.loc[config.key()]
        entry = plan.entry(i)
        ok = m["status"] == "ok"
        table.append({"layout": entry["layout"], "remat": entry["remat"], "chosen": why,
                      "status": m["status"], "error": m["error"],
                      "predicted_step_s": entry["step_time_s"]["total"],
                      "measured_step_s": float(m["step_time_s"]) if ok else float("nan"),
                      "predicted_memory_bytes": entry["memory_bytes_per_device"]["total"],
                      "measured_memory_bytes": (float(m["memory_total_bytes"]) if ok
                                                else float("nan"))})
    return summarise(table) | {"store": str(out), "load_average": machine_load}


def summarise(table: list[dict]) -> dict:
    """Ratios per row; Spearman's rho over the rows that ran."""
    ran = [r for r in table if r["status"] == "ok"]
    for r in table:
        r["step_ratio"] = r["predicted_step_s"] / r["measured_step_s"]
        r["memory_ratio"] = r["predicted_memory_bytes"] / r["measured_memory_bytes"]
    pred = [r["predicted_step_s"] for r in ran]
    meas = [r["measured_step_s"] for r in ran]
    for rows, key in ((table, "predicted_rank"), (ran, "measured_rank")):
        values = [r["predicted_step_s" if key == "predicted_rank" else "measured_step_s"]
                  for r in rows]
        for r, rank in zip(rows, np.argsort(np.argsort(values)) + 1):
            r[key] = int(rank)
    return {"n": len(table), "ran": len(ran),
            "spearman_step_time": spearman(pred, meas),
            "spearman_memory": spearman([r["predicted_memory_bytes"] for r in ran],
                                        [r["measured_memory_bytes"] for r in ran]),
            "median_step_ratio": float(np.median([r["step_ratio"] for r in ran])) if ran
            else float("nan"), "rows": table}


def verify_report(result: dict):
    """The verify table (a TextReport: text, or HTML tables in a notebook), with a note when
    the machine's load differs from the calibration's (parex.measure.report.load_note)."""
    from types import SimpleNamespace

    from ..measure.report import TextReport, load_note, table
    from ..units import format_bytes, format_seconds

    rows = [[r["layout"], r["remat"], r["chosen"], r.get("predicted_rank", ""),
             r.get("measured_rank", "-"), format_seconds(r["predicted_step_s"]),
             format_seconds(r["measured_step_s"]), f"{r['step_ratio']:.2f}",
             format_bytes(r["predicted_memory_bytes"]),
             format_bytes(r["measured_memory_bytes"]) if r["status"] == "ok" else r["status"],
             f"{r['memory_ratio']:.2f}"] for r in result["rows"]]
    head = ["layout", "remat", "chosen", "pred rank", "meas rank", "pred step", "meas step",
            "ratio", "pred mem", "meas mem", "ratio"]
    busy = result.get("load_average") or {}
    note = busy and load_note(SimpleNamespace(load_average=busy["calibration"],
                                              cores=busy["cores"]), busy["now"])
    return TextReport(*[
        f"verify: {result['ran']} of {result['n']} layouts measured on the emulated mesh "
        f"(store {result['store']})", "", table(rows, head), "",
        f"Spearman rank correlation, predicted against measured: step time "
        f"{result['spearman_step_time']:.3f}, memory {result['spearman_memory']:.3f}; "
        f"median step-time ratio predicted/measured {result['median_step_ratio']:.2f}"]
        + ([note] if note else []))


__all__ = ["spearman", "verify", "verify_report"]
