"""Altair charts over parex's tidy Record DataFrame (measured beside predicted), the pipeline
schedule charts and the long-sequence study charts; `save` exports any of them offline."""

from .pipeline import bubble_chart, gantt_chart, schedule_frame
from .records import (METRICS, collectives_chart, collectives_long, enable_offline, memory_chart,
                      memory_long, overview_chart, pairs, regime, save, scaling_chart,
                      scatter_chart, step_time_chart, step_time_long, whatif_chart)
from .sequence import long_sequence_chart, sequence_long

__all__ = ["METRICS", "bubble_chart", "collectives_chart", "collectives_long", "enable_offline",
           "gantt_chart", "long_sequence_chart", "memory_chart", "memory_long", "overview_chart",
           "pairs", "regime", "save", "scaling_chart", "scatter_chart", "schedule_frame",
           "sequence_long", "step_time_chart", "step_time_long", "whatif_chart"]
