"""The pipeline bubble study: measured step time over m microbatches at fixed p, against the
bubble (p−1)/(m+p−1) of GPipe and 1F1B.

Each microbatch has the same size, so the step's useful work grows as m while the fill and drain
of the pipeline stay p−1 ticks: t(m) = t_mb·(m + p − 1). The measured bubble is the share of the
step not proportional to m: fit t(m) = s·m + c over the study, then bubble(m) = 1 − s·m / t(m),
which equals (p−1)/(m+p−1) when the schedule behaves as its table says.

On an emulated CPU mesh the devices share the machine's cores: an idle stage hands its core to a
busy one, which hides part of the bubble when there are fewer cores than devices.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .config import ModelConfig, TrainConfig
from .layout import Layout
from .measure import measure
from .parallel.schedules import make_schedule


def predicted_bubble(p: int, m: int) -> float:
    """GPipe / 1F1B bubble as a fraction of the step (Huang et al. 2019; Narayanan et al. 2021)."""
    return (p - 1) / (m + p - 1)


def measured_bubble(m, step_time) -> np.ndarray:
    """1 − s·m/t(m) with s the least-squares slope of step time over m."""
    m, t = np.asarray(m, float), np.asarray(step_time, float)
    if len(m) < 2 or np.ptp(m) == 0:
        raise ValueError("the bubble fit needs step times for at least two different m")
    slope, _ = np.polyfit(m, t, 1)
    return 1.0 - slope * m / t


def bubble_study(model: ModelConfig, p: int = 4, ms=range(1, 17), schedule: str = "1f1b",
                 microbatch: int = 1, data: int = 1, seq_len: int | None = None, steps: int = 4,
                 devices=None, progress: bool = False) -> pd.DataFrame:
    """One row per m: median step time, the table's idle fraction, predicted and measured
    bubble. Every microbatch holds `microbatch` sequences per data replica."""
    from tqdm.auto import tqdm

    rows = []
    for m in tqdm(list(ms), desc=f"{schedule} p={p}", disable=not progress):
        layout = Layout(stage=p, data=data, schedule=schedule, microbatches=m)
        train = TrainConfig(global_batch=m * microbatch * data, seq_len=seq_len, steps=steps)
        result = measure(model, train, layout, devices=devices)
        rows.append({"schedule": schedule, "p": p, "m": m, "layout": str(layout),
                     "step_time_s": result.step_time_s["median"],
                     "idle_fraction": make_schedule(schedule, p, m).idle_fraction(),
                     "bubble_predicted": predicted_bubble(p, m)})
    frame = pd.DataFrame(rows)
    frame["bubble_measured"] = measured_bubble(frame["m"], frame["step_time_s"])
    return frame
