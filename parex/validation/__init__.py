"""Is a layout a real training program, and does parex's executor run it? Two levels, each rule
written once on columns (rules.py) so that one layout and a planner's hundred thousand get the
same verdict (checks.py).

    validate(layout, model, train, n_devices)   -> layout, or LayoutError naming the fix
"""

from __future__ import annotations

from ..config import ModelConfig, TrainConfig
from ..layout import Layout
from ..setting import resolve_run
from .checks import (
    check_layout,
    check_valid,
    executable_columns,
    executable_reason,
    nearest_executable,
    valid_columns,
)


def validate(layout: Layout, model: ModelConfig, train: TrainConfig, n_devices: int,
             executable: bool = True, platform: str = "cpu") -> Layout:
    """Raise LayoutError naming the problem and the fix; return the layout, resolved (its
    schedule and microbatch count named: parex.setting.resolve_run on `platform`, the emulated
    mesh by default), when it is a real program for (model, train) on n_devices and, with
    `executable`, parex's executor runs it today. Runs before anything is traced."""
    setting = resolve_run(model, train, layout, platform)
    (check_layout if executable else check_valid)(setting.layout, setting.model, setting.train,
                                                  n_devices)
    return setting.layout


__all__ = ["check_layout", "check_valid", "executable_columns", "executable_reason",
           "nearest_executable", "valid_columns", "validate"]
