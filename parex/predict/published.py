"""The papers' tables (data/reference/*.csv) beside what predict() says: paper, parex, ratio.

    zero_table1()          ZeRO's model-state memory per device (GB), 3 models × N_d × stage,
                           read off predict()'s params + grads + optimizer
    korthikanti_table()    Korthikanti et al.'s activation bytes per layer, summed from the paper's
                           component list, against predict()'s activation memory
    megatron_table1()      Megatron-LM's achieved TFLOP/s per GPU against the predicted step time
                           (published_runs: the runs the step efficiency is fitted on)

Each returns a pandas DataFrame with the paper's value, parex's value and their ratio.

    stack_accuracy()       the published runs per software stack (the CSVs' `stack` column):
                           each stack's step efficiency fitted on its named fit set (STACKS),
                           scored on the stack's other runs; runs with an unpublished setting
                           (`unknown`) as brackets over its plausible values, never as points
"""

from __future__ import annotations

import numpy as np

from ..config import ModelConfig, TrainConfig
from ..layout import Layout
from .references import megatron_flops, read_reference

STATE_PARTS = ("params", "grads", "optimizer")


def _gpt(name, layers, hidden, heads, seq=2048, vocab=51200) -> ModelConfig:
    return ModelConfig(name=name, family="gpt", layers=int(layers), hidden=int(hidden),
                       heads=int(heads), vocab=vocab, seq_len=seq, dtype="bfloat16")


# --- ZeRO, Table 1 -------------------------------------------------------------------------------

def zero_state_gb(model: ModelConfig, n_d: int, stage: int, psi: float,
                  hardware: str = "a100-80gb") -> float:
    """predict()'s model state per device (params + grads + optimizer, mixed recipe) for data
    parallelism over n_d devices at ZeRO `stage`, per parameter × ψ, in GB."""
    from . import predict

    layout = Layout(data=n_d, zero=stage if n_d > 1 else 0)
    p = predict(model, TrainConfig(global_batch=n_d), layout, hardware, recipe="mixed")
    state = sum(p.memory_bytes_per_device[k] for k in STATE_PARTS)
    return state / model.n_params * psi / 1e9


def zero_table1():
    """Model states per device in GB: the paper's (2 + 2 + 12)·Ψ split by ZeRO's stages beside
    predict()'s for a stand-in GPT of each size (zero_models.csv)."""
    table = read_reference("zero_table1")
    models = {m.model: _gpt(m.model, m.layers, m.hidden, m.heads)
              for m in read_reference("zero_models").itertuples()}
    table["parex_gb"] = [zero_state_gb(models[r.model], r.n_d, r.stage, r.params)
                         for r in table.itertuples()]
    table["ratio"] = table.parex_gb / table.gb_per_device
    return table


# --- Korthikanti et al., Table 2 -----------------------------------------------------------------

CONFIGURATIONS = (  # (name, tensor, sp, remat), as the paper's Table 2 rows
    ("no parallelism", 1, False, "none"), ("tensor parallel", 8, False, "none"),
    ("tensor + sequence parallel", 8, True, "none"),
    ("tensor parallel + selective recompute", 8, False, "selective"),
    ("tensor + sequence parallel + selective recompute", 8, True, "selective"),
    ("full recompute", 8, False, "full"))


def korthikanti_paper_bytes(s, b, h, a, t, sp: bool, remat: str) -> float:
    """One layer's activation bytes, summed from the paper's component list (Section 4.1)."""
    if remat == "full":
        return 2.0 * s * b * h
    total = 0.0
    for c in read_reference("korthikanti_components").itertuples():
        if remat == "selective" and c.as2b:
            continue
        split = t if (c.region == "tensor" or sp) else 1
        total += (c.sbh * s * b * h + c.as2b * a * s * s * b) / split
    return total


def predicted_layer_bytes(model: ModelConfig, t: int, sp: bool, remat: str,
                          hardware: str = "a100-80gb") -> float:
    """predict()'s activation memory per layer (mixed recipe: the Korthikanti path used for
    accelerator predictions) for one sequence on a tensor-parallel group of t."""
    from . import predict

    # the paper's tables materialise the scores: the naive kernel (flash is the accelerator default)
    train = TrainConfig(global_batch=1, remat=remat, attention="naive")
    p = predict(model, train, Layout(tensor=t, sp=sp), hardware, recipe="mixed")
    return p.memory_bytes_per_device["activations"] / model.layers


def korthikanti_table(s: int = 2048, b: int = 1):
    """The paper's six configurations for its four models: the component sum beside predict()."""
    import pandas as pd

    rows = []
    for m in read_reference("korthikanti_models").itertuples():
        model = _gpt(f"korthikanti-{m.model.lower()}", m.layers, m.hidden, m.heads, seq=s)
        for name, t, sp, remat in CONFIGURATIONS:
            paper = korthikanti_paper_bytes(s, b, m.hidden, m.heads, t, sp, remat)
            ours = predicted_layer_bytes(model, t, sp, remat)
            rows.append({"configuration": name, "model": m.model, "paper_bytes": paper,
                         "parex_bytes": ours, "ratio": ours / paper})
    return pd.DataFrame(rows)


# --- Megatron-LM, Table 1 ------------------------------------------------------------------------

def megatron_table1(hardware: str = "a100-80gb"):
    """Achieved TFLOP/s per GPU: the paper's FLOP count over parex's predicted step time (so both
    sides count FLOPs the same way), one profile for every row."""
    from ..hardware import load_chip
    from .published_runs import fit_runs, scored

    table = scored(fit_runs(), load_chip(hardware))
    flops = np.array([megatron_flops(r) for r in table.itertuples()])
    table["parex_tflops_per_gpu"] = flops / table.parex_step_s / table.gpus / 1e12
    table["ratio"] = table.parex_tflops_per_gpu / table.tflops_per_gpu
    return table


# --- software stacks: one step efficiency per stack -----------------------------------------------

# Each stack's fit set, named before any of its runs was scored: Megatron-LM 2021, the paper's
# Table 1 (the committed a100-80gb profile's fit); the others one run each, as a user calibrates
# (`parex calibrate --from-run`): Korthikanti et al.'s first row (the smallest run, the one a
# user can afford to measure), BLOOM-176B, the one fully published DeepSpeed-with-Megatron run,
# and MegaScale's Megatron-LM baseline (January 2023 code on ByteDance's cluster, whose GPU model
# is not named) on its fully published run with the fewest GPUs (the 530B on 2,240): the rest of
# its runs, 256 to 12,288 GPUs, test how the step scales, its cluster's constant taken out.
STACKS = {"megatron-lm-2021": ("megatron-1.7b", "megatron-3.6b", "megatron-7.5b",
                               "megatron-18.4b", "megatron-39.1b", "megatron-76.1b",
                               "megatron-145.6b", "megatron-310.1b", "megatron-529.6b",
                               "megatron-1008b"),
          "megatron-lm-2022": ("korthikanti-22b-full",),
          "megatron-deepspeed": ("bloom-176b",),
          "megatron-lm-2023": ("megascale-mlm-530b-2240",)}
# NVIDIA's DGX H100 releases (data/reference/nemo_runs.csv), each calibrated as a user would
# (`parex calibrate --from-run`): on its run with the fewest GPUs, named before any of its runs
# was scored; the release's other runs test it (h100_accuracy)
H100_STACKS = {"nemo-24.07": ("nemo-24.07-llama2-7b",),
               "megatron-bridge": ("mb-25.11-llama3-70b",)}
FIT_SETS = STACKS | H100_STACKS  # every fit parex makes on a stack's published runs
# Llama 3 405B (Dubey et al. 2024) ran Meta's own stack on H100s: kept out of every fit and test
# set here (a different chip and code, and too few published facts of its step)
EXCLUDED = ("llama3-405b", "llama-3-405b")


def stack_runs():
    """Every published run of the four tables with its stack, table and unknown ('-' if none),
    the excluded runs left out."""
    import pandas as pd

    from .published_runs import added_runs, fit_runs, heldout_runs, other_runs

    tables = {"megatron_table1": fit_runs(), "heldout_runs": heldout_runs(),
              "added_runs": added_runs(), "other_runs": other_runs()}
    runs = pd.concat([t.assign(table=name) for name, t in tables.items()], ignore_index=True)
    runs["unknown"] = runs["unknown"].fillna("-")
    keep = ~runs.run.str.lower().str.startswith(EXCLUDED)
    return runs[keep].reset_index(drop=True)


def unknown_values(run) -> tuple[str, list[int]]:
    """(column, plausible values) of a run's unpublished setting, e.g. ('microbatch', [1, 2, 4])."""
    column, values = run.unknown.split("=")
    return column, [int(v) for v in values.split("/")]


def bracket(run, chip) -> tuple[float, float]:
    """(min, max) predicted seconds of a run over its unknown's plausible values."""
    from .published_runs import predict_run

    column, values = unknown_values(run)
    seconds = [predict_run(run._replace(**{column: v}), chip)["total"] for v in values]
    return min(seconds), max(seconds)


def stack_fit(runs, stack: str, chip):
    """The chip with `stack`'s step efficiency, fitted on its named fit set (FIT_SETS) alone."""
    import dataclasses

    from .published_runs import fit_step_efficiency

    fit = runs[runs.run.isin(FIT_SETS[stack])]
    assert len(fit) == len(FIT_SETS[stack]) and (fit["stack"] == stack).all(), stack
    return dataclasses.replace(chip, step_efficiency=fit_step_efficiency(fit, chip, tol=1e-7))


def stack_accuracy(hardware: str = "a100-80gb") -> dict:
    """Per stack: the fit set, the step efficiency fitted on it, the stack's other fully
    published runs scored as points (`test`, its summary) and those with an unpublished setting
    as brackets (`brackets`: min, max, hit, and `ratio`, the nearer end over the published, 1
    inside); `loo`, where a stack has three or more published
    runs, each scored with the efficiency fitted on the others."""
    from ..hardware import load_chip
    from .published_runs import leave_one_out, scored, summary

    chip, runs, out = load_chip(hardware), stack_runs(), {}
    for stack, fit_set in STACKS.items():
        mine = runs[runs["stack"] == stack]
        tuned = stack_fit(runs, stack, chip)
        points = mine[mine.unknown == "-"]
        test = scored(points[~points.run.isin(fit_set)], tuned)
        brackets = mine[mine.unknown != "-"].copy()
        bounds = [bracket(r, tuned) for r in brackets.itertuples()]
        brackets["parex_min_s"] = [lo for lo, _ in bounds]
        brackets["parex_max_s"] = [hi for _, hi in bounds]
        brackets["hit"] = ((brackets.parex_min_s <= brackets.step_s)
                           & (brackets.step_s <= brackets.parex_max_s))
        # predicted / published as a bracket scores: the published time clamped into the
        # bracket (its nearer end outside, itself inside) over the published
        brackets["ratio"] = (np.clip(brackets.step_s, brackets.parex_min_s, brackets.parex_max_s)
                             / brackets.step_s)
        loo = leave_one_out(points, chip) if len(points) >= 3 else None
        out[stack] = {"fit_set": fit_set, "efficiency": tuned.step_efficiency, "test": test,
                      "test_summary": summary(test.ratio) if len(test) else None,
                      "brackets": brackets, "loo": loo,
                      "loo_summary": summary(loo.ratio) if loo is not None else None}
    return out


def h100_accuracy(chip_name: str = "h100-sxm") -> dict:
    """The DGX H100 runs: every run with the committed profile (`committed`: predicted seconds
    and predicted / published; `committed_summary` per release), and per release the step
    efficiency calibrated on its one fit run (H100_STACKS, stack_fit) with its other runs
    scored (`calibrated`: {release: (efficiency, scored runs, summary)})."""
    from ..hardware import load_chip
    from .published_runs import h100_runs, scored, summary

    chip, runs = load_chip(chip_name), h100_runs()
    committed = scored(runs, chip)
    calibrated = {}
    for release, fit_set in H100_STACKS.items():
        tuned = stack_fit(runs, release, chip)
        test = scored(runs[(runs["stack"] == release) & ~runs.run.isin(fit_set)], tuned)
        calibrated[release] = (tuned.step_efficiency, test, summary(test.ratio))
    return {"committed": committed, "calibrated": calibrated,
            "committed_summary": {release: summary(frame.ratio)
                                  for release, frame in committed.groupby("stack")}}


def blackwell_accuracy() -> "object":
    """The DGX B200 and GB200 runs (data/reference/blackwell_runs.csv), each with its row's
    committed profile as it is: predicted seconds and predicted / published (`ratio`)."""
    import pandas as pd

    from ..hardware import load_chip
    from .published_runs import blackwell_runs, scored

    runs = blackwell_runs()
    return pd.concat([scored(group, load_chip(name)) for name, group in
                      runs.groupby("hardware", sort=False)]).loc[runs.index]


def every_single_run_fit(stack: str, hardware: str = "a100-80gb"):
    """For each fully published run of `stack`: calibrated on it alone, the median and max error
    on the stack's other published runs (how much the choice of the one run matters)."""
    import dataclasses

    import pandas as pd

    from ..hardware import load_chip
    from .published_runs import fit_step_efficiency, scored, summary

    chip, runs = load_chip(hardware), stack_runs()
    points = runs[(runs["stack"] == stack) & (runs.unknown == "-")]
    rows = []
    for i in range(len(points)):
        one = points.iloc[[i]]
        tuned = dataclasses.replace(chip, step_efficiency=fit_step_efficiency(one, chip,
                                                                              tol=1e-7))
        s = summary(scored(points.drop(points.index[i]), tuned).ratio)
        rows.append({"run": one.run.item(), "efficiency": tuned.step_efficiency,
                     "median": s["median"], "max": s["max"]})
    return pd.DataFrame(rows)


__all__ = ["CONFIGURATIONS", "FIT_SETS", "H100_STACKS", "blackwell_accuracy",
           "h100_accuracy", "korthikanti_paper_bytes", "korthikanti_table", "megatron_flops",
           "EXCLUDED", "STACKS", "bracket", "every_single_run_fit", "megatron_table1",
           "predicted_layer_bytes", "read_reference", "stack_accuracy", "stack_fit", "stack_runs",
           "unknown_values", "zero_state_gb", "zero_table1"]
