"""Published training runs against the predicted step time, with fitting and testing kept apart.

    FIT   Megatron-LM's Table 1 (Narayanan et al. 2021, data/reference/megatron_table1.csv):
          10 weak-scaling runs on A100. The committed profiles' fitted constant, the chips'
          `step_efficiency`, comes from these rows only (`fit_step_efficiency`); `leave_one_out`
          scores each row with the constant fitted on the other nine.
    TEST  data/reference/heldout_runs.csv: runs from other papers (Korthikanti et al. 2022,
          MT-NLG 2022), held out of that fit and scored with the profile as committed. One of
          them, korthikanti-22b-full, is the fit set of the megatron-lm-2022 stack.
    ADDED data/reference/added_runs.csv: runs added late (Narayanan et al. 2021, Table 2), held
          out of every fit, scored and reported on their own.
    OTHER data/reference/other_runs.csv: runs of other clusters and code (BigScience's
          BLOOM-176B; MegaScale's Megatron-LM baseline on 256 to 12,288 GPUs), held out of the
          profile's fit, scored with the committed profile and reported on their own, with
          the facts of each run the model does not describe listed beside it. bloom-176b is
          the fit set of the megatron-deepspeed stack, megascale-mlm-530b-2240 of
          megatron-lm-2023.
    H100  data/reference/nemo_runs.csv: NVIDIA's published NeMo and Megatron-Bridge runs on DGX
          H100 in FP8 (2024-26 releases, 8 to 1,024 GPUs), held out of the A100 fits and
          scored with the committed h100-sxm profile; each release is also calibrated on one
          of its runs and scored on its others (published.H100_STACKS, h100_accuracy).
    BLACKWELL data/reference/blackwell_runs.csv: Megatron-Bridge's DGX B200 and GB200 runs,
          each layout in FP8 with current scaling and in MXFP8, held out of every fit and
          scored with the committed b200 and gb200-nvl72 profiles (published.blackwell_accuracy).

Each software stack fits a step efficiency of its own on a named fit set
(parex.predict.published.FIT_SETS); every CSV's `fitted_by` column names the fits that use a run,
and its `# held out of:` line the fits that use none of its runs (both checked against this code
by tests/predict/test_predict_published.py).

Each run's implementation facts (its code's data-parallel gradient reduction during or after the
backward, `grad_overlap`; its tensor-parallel backward beside the weight-gradient GEMMs or not,
`tp_overlap`) are columns of the CSVs, with sources, and become the Convention it is predicted
under (comm.Convention: overlaps_grad_reduce, overlaps_tp_backward).

Every run is predicted with its chip's profile as is (no per-row tuning), the mixed recipe
(float32 gradients where its code reduces them so: the `grads` column), bf16 and its code's
attention kernel (naive, materialised scores, for every run here: none of these codes had a
fused one), through the predictor's own columns (`predict.columns`, the
formulas predict() and predict_batch() evaluate), many rows at once.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..config import ModelConfig, TrainConfig
from ..hardware import Cluster, load_chip
from ..layout import parse_partition
from ..stacks import parse_overlaps, stack
from .references import megatron_flops, read_reference

FIT_SET, TEST_SET, ADDED_SET, OTHER_SET, H100_SET, BLACKWELL_SET = (
    "megatron_table1", "heldout_runs", "added_runs", "other_runs", "nemo_runs", "blackwell_runs")


def fit_runs():
    """Megatron-LM Table 1 as runs: the published seconds per iteration are the paper's FLOPs
    per iteration over its TFLOP/s per GPU."""
    table = read_reference(FIT_SET)
    runs = table.copy()
    runs["run"] = [f"megatron-{b:g}b" for b in table.params_b]
    runs["vocab"], runs["seq"], runs["sp"], runs["remat"] = 51200, 2048, "off", "full"
    runs["step_s"] = [megatron_flops(r) / (r.gpus * r.tflops_per_gpu * 1e12)
                      for r in table.itertuples()]
    return runs


def heldout_runs():
    """Runs held out of the committed profile's fit (data/reference/heldout_runs.csv), seconds
    per iteration as published."""
    return read_reference(TEST_SET)


MFU_PEAK = 312e12  # the A100's dense bf16 FLOP/s behind MegaScale's MFU column (its Table 2's
#   seconds and MFU agree through megatron_flops(recompute=False) within 0.5 %)


def other_runs():
    """Runs of other clusters and code (data/reference/other_runs.csv), held out of the
    committed profile's fit: seconds per iteration as published, or from a published MFU (the
    `mfu` column) through the model FLOPs it counts."""
    runs = read_reference(OTHER_SET)
    from_mfu = runs.step_s.isna()
    runs.loc[from_mfu, "step_s"] = [
        megatron_flops(r, s=int(r.seq), V=int(r.vocab), recompute=False)
        / (r.gpus * r.mfu * MFU_PEAK) for r in runs[from_mfu].itertuples()]
    return runs


def added_runs():
    """Runs added late, held out of every fit (data/reference/added_runs.csv): the published
    TFLOP/s per GPU turned into seconds per iteration with the paper's FLOP count."""
    runs = read_reference(ADDED_SET)
    runs["step_s"] = [megatron_flops(r, s=int(r.seq), V=int(r.vocab))
                      / (r.gpus * r.tflops_per_gpu * 1e12) for r in runs.itertuples()]
    return runs


def h100_runs():
    """NeMo's and Megatron-Bridge's published DGX H100 runs (data/reference/nemo_runs.csv): the
    published tokens per second per GPU turned into seconds per step."""
    return _per_step(read_reference(H100_SET))


def blackwell_runs():
    """Megatron-Bridge's published DGX B200 and GB200 runs (data/reference/blackwell_runs.csv),
    each row's profile in its `hardware` column, seconds per step as h100_runs'."""
    return _per_step(read_reference(BLACKWELL_SET))


def _per_step(runs):
    runs["step_s"] = runs.global_batch * runs.seq / (runs.gpus * runs.tokens_per_gpu_s)
    return runs


def _given(run, column: str, default=None):
    """A row's optional column: its value, or `default` where the table has no such column or
    the row leaves it empty ('-' or blank)."""
    value = getattr(run, column, None)
    return default if value is None or value == "-" or value != value else value


def run_setup(run) -> tuple[ModelConfig, TrainConfig, dict]:
    """(model, train config, layout columns) of one published run. The A100 tables' runs are
    GPT models on tensor, pipeline and data parallelism; a row may add its model family, key /
    value heads, head and MLP widths, a mixture's experts (`experts`, `top_k`, `expert_ffn`) and
    their axis (`expert`, `expert_tensor`), context parallelism (`cp`, ring attention), a ZeRO
    stage, the layers of each pipeline chunk (`partition`), a precision recipe and its attention
    kernel."""
    sizes = {key: int(value) for key in ("kv_heads", "ffn", "head_dim", "experts", "top_k",
                                         "expert_ffn")
             if (value := _given(run, key)) is not None}
    model = ModelConfig(name=run.run, family=_given(run, "family", "gpt"),
                        layers=int(run.layers), hidden=int(run.hidden), heads=int(run.heads),
                        vocab=int(run.vocab), seq_len=int(run.seq), dtype="bfloat16", **sizes)
    # every A100 run here predates a fused attention kernel in its code (Megatron-LM 2021-22 and
    # the Megatron-DeepSpeed of MT-NLG and BLOOM: fused masked softmax over materialised
    # scores): the naive kernel, unless a row names its own (an `attention` column)
    train = TrainConfig(global_batch=int(run.global_batch), microbatch=int(run.microbatch),
                        remat=run.remat, attention=_given(run, "attention", "naive"),
                        precision=_given(run, "precision"))
    p, v, cp = int(run.pp), int(run.virtual), int(_given(run, "cp", 1))
    # a mixture of experts' expert axis comes out of the data-parallel devices (parex.layout:
    # `expert`; folded over tensor too where `expert_tensor` is 1)
    ep, etp = int(_given(run, "expert", 1)), _given(run, "expert_tensor")
    layout = {"data": int(run.gpus) // (int(run.tp) * p * cp * ep), "tensor": int(run.tp),
              "stage": p, "virtual_stages": v, "sp": int(run.sp == "on"), "seq": cp,
              "cp": "ring" if cp > 1 else "none", "zero": int(_given(run, "zero", 0)),
              "schedule": "interleaved" if v > 1 else ("1f1b" if p > 1 else "gpipe")}
    if ep > 1:
        layout["expert"] = ep
        layout["expert_tensor"] = int(run.tp) if etp is None else int(etp)
    partition = _given(run, "partition")
    if partition is not None:
        layout["partition"] = [parse_partition(partition)]
    return model, train, layout


def megatron_row_setup(row):
    """(model, train config, Layout) of one row of Megatron-LM's Table 1: the paper's own
    layout."""
    from ..layout import Layout

    run = next(r for r in fit_runs().itertuples() if r.params_b == row.params_b)
    model, train, columns = run_setup(run)
    return model, train, Layout(**columns | {"sp": bool(columns["sp"])})


def predict_run(run, chip) -> dict:
    """Predicted step-time parts (seconds) of one run on `chip` (a Chip), and its predicted
    memory per device (`memory_bytes`)."""
    from ..setting import resolve
    from .core import columns
    from .shapes import Grid

    model, train, layout = run_setup(run)
    cluster = Cluster(chip, max(1, -(-int(run.gpus) // chip.devices_per_node)))
    # the run's software: a framework's overlaps (parex.stacks) where the row names it, else
    # its own facts: gradients reduced during the backward or after it, and the column-parallel
    # input gradients' all-reduce beside the weight gradients' GEMM or not
    framework = _given(run, "framework")
    overlaps = {"overlaps_grad_reduce": getattr(run, "grad_overlap", "on") == "on",
                "overlaps_tp_backward": getattr(run, "tp_overlap", "off") == "on"}
    if framework is not None:  # its list, and any overlap the run adds to it
        added = _given(run, "overlaps")
        overlaps = stack(framework).overlaps + (() if added is None else
                                                parse_overlaps(added.replace("+", ",")))
    # a mixture's tokens as its row says they were routed (`expert_imbalance`: the busiest
    # expert's load over the mean; 1 where the benchmark forces a balanced routing)
    imbalance = _given(run, "expert_imbalance")
    # the code's gradient dtype where its row names one (`grads`: fp32 for Megatron-LM's and
    # DeepSpeed's bfloat16, which accumulate and reduce float32 gradients), else 16-bit
    recipe = "mixed-fp32-grads" if _given(run, "grads") == "fp32" else "mixed"
    setting = resolve(model, train, None, cluster, convention="gpu", recipe=recipe,
                      overlaps=overlaps, stack=framework,
                      expert_imbalance=None if imbalance is None else float(imbalance))
    cols, _ = columns(setting, Grid.from_columns(setting.train, setting.model, **layout))
    return {part: float(cols[f"step_{part}_s"][0])
            for part in ("total", "compute", "exposed_comm", "bubble")} | {
        "memory_bytes": float(cols["memory_total_bytes"][0])}


def scored(runs, chip) -> "object":
    """The runs with predicted seconds and predicted / published."""
    runs = runs.copy()
    parts = [predict_run(r, chip) for r in runs.itertuples()]
    runs["parex_step_s"] = [p["total"] for p in parts]
    runs["parex_bubble_fraction"] = [p["bubble"] / p["total"] for p in parts]
    runs["parex_memory_bytes"] = [p["memory_bytes"] for p in parts]
    runs["ratio"] = runs.parex_step_s / runs.step_s
    return runs


FD_STEP = 1e-4  # the forward difference's step in log e (fit_step_efficiency)


def fit_step_efficiency(runs, chip, lo: float = 0.3, hi: float = 1.0, tol: float = 1e-4):
    """The step efficiency e in [lo, hi] that minimises Σ rᵢ² over `runs`, rᵢ = log(predicted /
    published), within tol/2. Gauss-Newton in x = log e: compute scales as 1/e, so each rᵢ is
    close to linear in x and the step −Σ rᵢJᵢ / Σ Jᵢ² (Jᵢ = drᵢ/dx by a forward difference)
    lands next to the minimum at once; a step that does not lower the error is halved, and one
    past a bound stops there. Four to six passes over the runs, where a golden-section search
    took twenty (35 at tol 1e-7)."""
    rows = list(runs.itertuples())
    published = np.log([r.step_s for r in rows])

    def residuals(x: float) -> np.ndarray:
        tuned = dataclasses.replace(chip, step_efficiency=math.exp(x))
        return np.log([predict_run(r, tuned)["total"] for r in rows]) - published

    lo_x, hi_x = math.log(lo), math.log(hi)
    x = min(max(math.log(chip.step_efficiency), lo_x), hi_x)  # start from the profile's own
    r = residuals(x)
    for _ in range(100):
        jacobian = (residuals(x + FD_STEP) - r) / FD_STEP
        if not float(jacobian @ jacobian) > 0:
            raise ValueError("no run's predicted step time depends on the step efficiency "
                             "(no runs, or their compute hidden behind communication): fit "
                             "on runs whose compute is on the critical path")
        to = min(max(x - float(r @ jacobian) / float(jacobian @ jacobian), lo_x), hi_x)
        if abs(math.exp(to) - math.exp(x)) < tol / 2:
            return math.exp(to)
        while True:  # halve a step that does not lower the error
            r_to = residuals(to)
            if r_to @ r_to <= r @ r or abs(math.exp(to) - math.exp(x)) < tol / 2:
                break
            to = (x + to) / 2
        x, r = to, r_to
    return math.exp(x)


def leave_one_out(runs, chip):
    """Each run predicted with the step efficiency fitted on all the others."""
    out = runs.copy()
    fitted, predicted = [], []
    for i in range(len(runs)):
        efficiency = fit_step_efficiency(runs.drop(runs.index[i]), chip)
        tuned = dataclasses.replace(chip, step_efficiency=efficiency)
        fitted.append(efficiency)
        predicted.append(predict_run(runs.iloc[i], tuned)["total"])
    out["fitted_efficiency"] = fitted
    out["parex_step_s"] = predicted
    out["ratio"] = out.parex_step_s / out.step_s
    return out


def summary(ratio) -> dict:
    """Median and max |predicted / published − 1|."""
    err = np.abs(np.asarray(ratio) - 1)
    return {"median": float(np.median(err)), "max": float(err.max()), "n": int(err.size)}


def accuracy(chip_name: str = "a100-80gb") -> dict:
    """The fit set scored leave-one-out, the sets held out of its fit with the committed
    profile."""
    chip = load_chip(chip_name)
    loo = leave_one_out(fit_runs(), chip)
    held, added = scored(heldout_runs(), chip), scored(added_runs(), chip)
    other = scored(other_runs(), chip)
    return {"fit_loo": loo, "test": held, "added": added, "other": other,
            "fit_summary": summary(loo.ratio), "test_summary": summary(held.ratio),
            "added_summary": summary(added.ratio), "other_summary": summary(other.ratio),
            "all_test_summary": summary(np.concatenate([held.ratio, added.ratio,
                                                        other.ratio])),
            "fitted": fit_step_efficiency(fit_runs(), chip), "profile": chip.step_efficiency}


__all__ = ["ADDED_SET", "BLACKWELL_SET", "FIT_SET", "H100_SET", "OTHER_SET", "TEST_SET",
           "accuracy", "added_runs", "blackwell_runs", "fit_runs", "fit_step_efficiency",
           "h100_runs", "heldout_runs", "leave_one_out", "other_runs", "predict_run",
           "run_setup", "scored", "summary"]
