"""Altair charts (the `notebook` extra) over parex's tidy record DataFrame, measured beside
predicted: memory, step time and collectives (`overview_chart`), scaling and what-if charts,
predicted scaling efficiency against device count (`efficiency_chart`), the
pipeline schedules' Gantt charts and bubbles, the mesh diagram, comparisons and sweeps, the
long-sequence study, the planner's Pareto front and DiLoCo's loss and WAN charts. `save`
exports any of them offline; `enable_offline` stores Vega's JavaScript in the notebook and a
picture beside each chart, and `export_notebook` writes an executed notebook as a page or a
notebook whose charts are pictures (parex.charts.export). Units, colours and labels:
parex.charts.style."""

from .compare import compare_chart, sweep_chart
from .efficiency import efficiency_chart
from .experts import expert_load_chart
from .export import enable_offline, export_notebook
from .lowcomm import loss_chart, wan_chart
from .mesh import mesh_chart, mesh_frame
from .pipeline import bubble_chart, dual_gantt_chart, gantt_chart, gantt_stack, schedule_frame
from .planner import pareto_chart
from .records import (METRICS, collectives_chart, collectives_long, memory_chart, memory_long,
                      overview_chart, pairs, regime, save, scaling_chart, scatter_chart,
                      step_time_chart, step_time_long, whatif_chart)
from .sequence import long_sequence_chart, sequence_long
from .style import format_bytes, format_seconds

__all__ = ["METRICS", "bubble_chart", "collectives_chart", "collectives_long", "compare_chart",
           "dual_gantt_chart", "efficiency_chart", "enable_offline", "expert_load_chart",
           "export_notebook",
           "format_bytes", "format_seconds", "gantt_chart", "gantt_stack", "long_sequence_chart",
           "loss_chart", "memory_chart", "memory_long", "mesh_chart", "mesh_frame",
           "overview_chart", "pairs", "pareto_chart", "regime", "save", "scaling_chart",
           "scatter_chart", "schedule_frame", "sequence_long", "step_time_chart", "step_time_long",
           "sweep_chart", "wan_chart", "whatif_chart"]
