"""Parallel techniques that need more than sharding annotations. `schedules` is pure Python (no
JAX); `pipeline` is the executor that runs a schedule table on the `stage` mesh axis."""

from .schedules import SCHEDULES, Op, Schedule, check_schedule, make_schedule

__all__ = ["SCHEDULES", "Op", "Schedule", "check_schedule", "make_schedule"]
