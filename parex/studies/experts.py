"""Mixtures of experts on the emulated mesh: each layout trained for real, its router and its
all-to-all beside the prediction; and DeepSeek-V3's pipeline schedules timed alike.

    expert_study(model, train, ["data=8", "data=2,expert=4"])   one row per layout
    dualpipe_tables(8, 32)                                      {schedule: timed table}
"""

from __future__ import annotations

import pandas as pd

from ..config import ModelConfig, TrainConfig
from ..layout import Layout
from ..measure import measure
from ..parallel.dualpipe import compare_tables as dualpipe_tables
from ..predict import predict


def expert_study(model: ModelConfig, train: TrainConfig, layouts, hardware: str = "cpu-local",
                 progress: bool = False) -> pd.DataFrame:
    """Per layout: the last loss, the share of assignments dropped and the busiest expert's load
    over the mean (last step), the all-to-all bytes per device measured and predicted (the
    xla-cpu convention: what the emulated mesh compiles), and the memory each side reports."""
    rows = []
    for text in layouts:
        layout = Layout.parse(text) if isinstance(text, str) else text
        m = measure(model, train, layout, progress=progress)
        p = predict(model, train, layout, hardware, convention="xla-cpu")
        rows.append({"layout": str(layout), "loss_last": m.losses[-1],
                     "dropped": m.moe["dropped_fraction"][-1],
                     "busiest_expert": m.moe["max_load_ratio"][-1],
                     "all_to_all_measured": m.comm_bytes_per_device.get("all-to-all", 0),
                     "all_to_all_predicted": p.comm_bytes_per_device.get("all-to-all", 0),
                     "memory_measured": m.memory_bytes_per_device["total"],
                     "memory_predicted": p.memory_bytes_per_device["total"],
                     "expert_load": m.moe["expert_load"][-1]})
    return pd.DataFrame(rows)


__all__ = ["dualpipe_tables", "expert_study"]
