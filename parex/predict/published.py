"""The papers' tables (data/reference/*.csv) beside what predict() says: paper, parex, ratio.

    zero_table1()          ZeRO's model-state memory per device (GB), 3 models × N_d × stage,
                           read off predict()'s params + grads + optimizer
    korthikanti_table()    Korthikanti et al.'s activation bytes per layer, summed from the paper's
                           component list, against predict()'s activation memory
    megatron_table1()      Megatron-LM's achieved TFLOP/s per GPU against the predicted step time
                           (published_runs: the runs the step efficiency is fitted on)

Each returns a pandas DataFrame with the paper's value, parex's value and their ratio.
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
    from .core import predict_synchronous as predict

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
    from .core import predict_synchronous as predict

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


__all__ = ["CONFIGURATIONS", "korthikanti_paper_bytes", "korthikanti_table", "megatron_flops",
           "megatron_table1", "predicted_layer_bytes", "read_reference", "zero_state_gb",
           "zero_table1"]
