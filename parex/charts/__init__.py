"""Altair charts over parex's tidy Record DataFrame (measured beside predicted), the pipeline
schedule charts, the mesh diagram, comparisons and sweeps, and the long-sequence study charts;
`save` exports any of them offline. Units, colours and labels: parex.charts.style."""

from .compare import compare_chart, sweep_chart
from .mesh import mesh_chart, mesh_frame
from .pipeline import bubble_chart, gantt_chart, gantt_stack, schedule_frame
from .records import (METRICS, collectives_chart, collectives_long, enable_offline, memory_chart,
                      memory_long, overview_chart, pairs, regime, save, scaling_chart,
                      scatter_chart, step_time_chart, step_time_long, whatif_chart)
from .sequence import long_sequence_chart, sequence_long
from .style import format_bytes, format_seconds

__all__ = ["METRICS", "bubble_chart", "collectives_chart", "collectives_long", "compare_chart",
           "enable_offline", "format_bytes", "format_seconds", "gantt_chart", "gantt_stack",
           "long_sequence_chart", "memory_chart", "memory_long", "mesh_chart", "mesh_frame",
           "overview_chart", "pairs", "regime", "save", "scaling_chart", "scatter_chart",
           "schedule_frame", "sequence_long", "step_time_chart", "step_time_long", "sweep_chart",
           "whatif_chart"]
