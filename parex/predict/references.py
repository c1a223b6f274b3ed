"""The papers' numbers as parex reads them: the reference tables (data/reference/*.csv) and the
FLOP count Megatron-LM reports its throughput with."""

from __future__ import annotations

from pathlib import Path

REFERENCE_DIR = Path(__file__).resolve().parents[2] / "data" / "reference"


def read_reference(name: str):
    import pandas as pd

    return pd.read_csv(REFERENCE_DIR / f"{name}.csv", comment="#", skipinitialspace=True)


def megatron_flops(row, s: int = 2048, V: int = 51200, recompute: bool = True) -> float:
    """The paper's FLOPs per iteration (full recompute): 96·B·s·l·h²·(1 + s/6h + V/16lh); the
    model's FLOPs without the recompute (72·B·s·l·h²·(...), the count behind MFU) where
    `recompute` is False."""
    B, l, h = row.global_batch, row.layers, row.hidden
    passes = 96 if recompute else 72  # 4 or 3 passes of 24·B·s·l·h² (forward twice, backward)
    return passes * B * s * l * h ** 2 * (1 + s / (6 * h) + V / (16 * l * h))
