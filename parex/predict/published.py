"""The papers' tables (data/reference/*.csv) beside what the predictor says: paper, parex, ratio.

    zero_table1()          ZeRO's model-state memory per device (GB) for 3 models × N_d × stage
    korthikanti_table()    Korthikanti et al.'s activation formulas against predict.memory's
    megatron_table1()      Megatron-LM's achieved TFLOP/s per GPU, one A100 profile for every row

Each returns a pandas DataFrame with the paper's value, parex's value and their ratio.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..config import TrainConfig, model_preset
from ..layout import Layout
from .memory import RECIPES, korthikanti_layer_bytes, zero_state_bytes

REFERENCE_DIR = Path(__file__).resolve().parents[2] / "data" / "reference"


def read_reference(name: str):
    import pandas as pd

    return pd.read_csv(REFERENCE_DIR / f"{name}.csv", comment="#", skipinitialspace=True)


def zero_table1():
    """Model states per device with ZeRO's 2 + 2 + 12 bytes per parameter, in GB."""
    table = read_reference("zero_table1")
    table["parex_gb"] = [zero_state_bytes(row.params, row.n_d, row.stage, RECIPES["mixed"]) / 1e9
                         for row in table.itertuples()]
    table["ratio"] = table.parex_gb / table.gb_per_device
    return table


def korthikanti_table(s: int = 2048, b: int = 1, t: int = 8):
    """Each formula of the paper's Table 2, typed in as text, evaluated for the paper's four
    models, beside predict.memory.korthikanti_layer_bytes for the same configuration."""
    formulas = read_reference("korthikanti_activations")
    models = read_reference("korthikanti_models")
    rows = []
    for f in formulas.itertuples():
        tp = 1 if f.configuration == "no parallelism" else t
        for m in models.itertuples():
            values = {"s": s, "b": b, "h": m.hidden, "a": m.heads, "t": tp}
            paper = eval(f.formula, {"__builtins__": {}}, values)  # typed-in arithmetic only
            ours = korthikanti_layer_bytes(s, b, m.hidden, m.heads, tp, f.sp == "on", f.remat)
            rows.append({"configuration": f.configuration, "model": m.model, "paper_bytes": paper,
                         "parex_bytes": ours, "ratio": ours / paper})
    import pandas as pd

    return pd.DataFrame(rows)


def megatron_row_setup(row):
    """(model, train config, layout) of one row of Megatron-LM's Table 1."""
    model = model_preset(f"megatron-{row.params_b:g}b").replace(dtype="bfloat16")
    dp = row.gpus // (row.tp * row.pp)
    schedule = "interleaved" if row.virtual > 1 else ("1f1b" if row.pp > 1 else "gpipe")
    layout = Layout(data=dp, tensor=row.tp, stage=row.pp, schedule=schedule,
                    virtual_stages=row.virtual)
    train = TrainConfig(global_batch=row.global_batch, microbatch=row.microbatch, remat="full")
    return model, train, layout


def megatron_flops(row, s: int = 2048, V: int = 51200) -> float:
    """The paper's FLOPs per iteration (full recompute): 96·B·s·l·h²·(1 + s/6h + V/16lh)."""
    B, l, h = row.global_batch, row.layers, row.hidden
    return 96 * B * s * l * h ** 2 * (1 + s / (6 * h) + V / (16 * l * h))


def megatron_table1(hardware: str = "a100-80gb"):
    """Achieved TFLOP/s per GPU: the paper's FLOP count over parex's predicted step time (so both
    sides count FLOPs the same way), with ZeRO-free mixed precision (2-byte weights and grads)."""
    from . import predict

    table = read_reference("megatron_table1")
    tflops, step, bubble = [], [], []
    for row in table.itertuples():
        model, train, layout = megatron_row_setup(row)
        p = predict(model, train, layout, hardware, recipe="mixed")
        step.append(p.step_time_s["total"])
        bubble.append(p.step_time_s["bubble"] / p.step_time_s["total"])
        tflops.append(megatron_flops(row) / p.step_time_s["total"] / row.gpus / 1e12)
    table["parex_step_s"] = step
    table["parex_bubble_fraction"] = bubble
    table["parex_tflops_per_gpu"] = tflops
    table["ratio"] = np.asarray(tflops) / table.tflops_per_gpu
    return table


__all__ = ["korthikanti_table", "megatron_table1", "read_reference", "zero_table1"]
