"""The Explorer and Planner widgets (ipywidgets + altair, the `notebook` extra) and their pieces
that are not widgets: formulas behind each number (explain), ways to fit in memory or out of an
invalid layout (guide), measuring with progress and repeats (measuring), the Gantt chart's op
times (gantt), and the sweep of one control (sweep).

    Explorer(model="tiny", n_devices=8)      change a layout, see predicted and measured numbers
    Planner(model="tiny", hardware="cpu-local", global_batch=16)   ranked layouts -> Explorer
    gantt_costs(prediction, model, train, layout, chip)   a schedule's ops timed for gantt_chart
"""

from .gantt import gantt_costs
from .planner import Planner
from .widget import Explorer

__all__ = ["Explorer", "Planner", "gantt_costs"]
