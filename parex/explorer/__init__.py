"""The Explorer and Planner widgets (ipywidgets + altair, the `notebook` extra) and their pieces
that are not widgets: formulas behind each number (explain), ways to fit in memory or out of an
invalid layout (guide), measuring with progress and repeats (measuring), the Gantt chart's op
times (gantt), the sweep of one control (sweep), and a sweep store's runs beside their
predictions (sweep_store, also in the Explorer's measured panel).

    Explorer(model="tiny", n_devices=8)      change a layout, see predicted and measured numbers
    Planner(model="tiny", hardware="cpu-local")   ranked layouts -> Explorer
    gantt_costs(prediction, setting)   a schedule's ops timed for gantt_chart
    load_store("runs.jsonl")   a sweep store's finished runs, measured beside predicted
"""

from .gantt import gantt_costs
from .planner import Planner
from .sweep_store import StoreView, load_store
from .widget import Explorer

__all__ = ["Explorer", "Planner", "StoreView", "gantt_costs", "load_store"]
