"""The Planner widget: model, cluster, batch and memory cap in; the ranked layouts, a chart of
predicted step time against memory per device (Pareto front highlighted) out. Each row's button
loads that layout into an Explorer, where it can be changed by hand and measured.

    from parex.explorer.planner import Planner
    planner = Planner(model="tiny", hardware="cpu-local")
    planner                      # the controls, the ranked table and the chart
    planner.explorer             # the Explorer the rows load into

Like the Explorer, everything it shows is readable from Python (`plan`, `error`,
`table_frame()`, `chart_data()`), so tests drive it without a browser.
"""

from __future__ import annotations

from html import escape

import ipywidgets as w
import pandas as pd

from ..calibrate.local import ready
from ..charts.planner import pareto_chart
from ..config import TrainConfig, preset_names
from ..layout import LayoutError
from ..plan import OBJECTIVES, NoFit, plan
from ..plan.names import model_named
from ..plan.report import chart_frame, plan_frame
from ..setting import resolve
from ..units import format_bytes, format_seconds
from .view import (STYLE, DefaultedInt, chart_view, dropdown, hardware_names, int_text,
                   set_stale, spec_rows)
from .widget import Explorer

COLUMNS = ("layout", "remat", "microbatch", "step_total_s", "step_compute_s",
           "step_exposed_comm_s", "step_bubble_s", "memory_total_bytes", "mfu", "bottleneck")


class Planner:
    """Controls → parex.plan.plan → ranked rows and the Pareto chart; a row's button →
    Explorer.load."""

    def __init__(self, model: str = "tiny", hardware: str = "cpu-local", nodes: int = 1,
                 global_batch: int | None = None, memory_cap_gb: float = 0.0,
                 objective: str = "time", top: int = 8, explorer: Explorer | None = None):
        ready(hardware)  # this machine's profile, calibrated on first use
        self.plan = None  # the last Plan, when planning worked
        self.error: str | None = None  # why it did not, with the nearest setting that works
        self._explorer = explorer
        self.batch = DefaultedInt("batch", self._default_batch(model, hardware, nodes),
                                  global_batch)
        c = self.controls = {
            "model": dropdown("model", preset_names(), model),
            "hardware": dropdown("hardware", hardware_names(), hardware),
            "nodes": int_text("nodes", nodes),
            "global_batch": self.batch.widget,
            "memory_cap_gb": w.BoundedFloatText(value=memory_cap_gb, min=0, max=1e6,
                                                description="cap GB (0=HBM)",
                                                style={"description_width": "90px"},
                                                layout=w.Layout(width="210px")),
            # one cluster size: time-to-train ranks as time there (the size search, parex
            # plan --objective time-to-train, and the Explorer's time-to-train tab show the rest)
            "objective": dropdown("objective", [o for o in OBJECTIVES if o != "time-to-train"],
                                  objective),
            "top": int_text("top K", top),
        }
        for control in c.values():  # the rows below are the last plan's until Plan is pressed
            control.observe(lambda _: self._mark_stale(), "value")
        for name in ("model", "hardware", "nodes"):  # a batch left at the default follows them
            c[name].observe(lambda _: self.batch.show_default(self._default_batch()), "value")
        self.plan_button = w.Button(description="Plan", button_style="primary", icon="search")
        self.plan_button.on_click(lambda _: self.run())
        self.status, self.assumptions = w.HTML(), w.HTML()
        self.table = w.VBox()
        self.chart = chart_view()
        self.result = w.VBox([self.assumptions, self.table, self.chart])  # faded when stale
        self.stale = False  # the rows shown are not the controls' plan
        self.widget = w.VBox([w.HTML(STYLE),
                              w.HBox([w.VBox(list(c.values())[:4]),
                                      w.VBox(list(c.values())[4:] + [self.plan_button])]),
                              self.status, self.result])
        self.run()

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    def _default_batch(self, model=None, hardware=None, nodes=None) -> int:
        """The global batch plan() resolves when none is given (parex.setting)."""
        c = getattr(self, "controls", {})
        model = model or c["model"].value
        hardware, nodes = hardware or c["hardware"].value, nodes or c["nodes"].value
        return resolve(model_named(model), TrainConfig(), None, hardware,
                       nodes=nodes).train.global_batch

    def set(self, **values) -> "Planner":
        """Set controls by name (global_batch=None: back to the default) and plan again."""
        for name, value in values.items():
            if name == "global_batch":
                self.batch.set(value, self._default_batch())
            else:
                self.controls[name].value = value
        self.run()
        return self

    @property
    def explorer(self) -> Explorer:
        """The Explorer rows load into (made on first use, on this plan's hardware)."""
        if self._explorer is None:
            c = self.controls
            self._explorer = Explorer(model=c["model"].value, hardware=c["hardware"].value,
                                      global_batch=self.batch.value)
        return self._explorer

    # --- planning ---------------------------------------------------------------------------
    def run(self) -> None:
        """Plan with the current controls; show the ranked rows and the chart, or the error."""
        c = self.controls
        cap = c["memory_cap_gb"].value * 1e9 or None
        try:
            model = model_named(c["model"].value)
            self.plan = plan(model, TrainConfig(global_batch=self.batch.value),
                             c["hardware"].value, c["nodes"].value, memory_cap=cap,
                             objective=c["objective"].value, top=c["top"].value)
            self.error = None
        except (NoFit, LayoutError, ValueError) as exc:
            self.plan, self.error = None, str(exc)
            self.status.value = f"<div class='parex-bad'>{escape(self.error)}</div>"
            self.table.children = ()
            self._set_stale(True)  # the chart is the last plan's
            return
        p = self.plan
        self.status.value = (f"<div style='color:#1b5e20'>{p.layouts_considered:,} layouts "
                             f"considered, {int(p.fits.sum()):,} fit under "
                             f"{format_bytes(p.memory_cap)} per device; planned in "
                             f"{format_seconds(p.seconds)}</div>")
        described = p.describe()
        self.assumptions.value = f"<div class='parex-note'>assumes {escape(described)}</div>"
        self.table.children = self._rows()
        self.chart.chart = pareto_chart(chart_frame(p), p.memory_cap)
        self._set_stale(False)

    def _set_stale(self, stale: bool) -> None:
        self.stale = stale
        set_stale([self.result], stale)

    def _mark_stale(self) -> None:
        """A control moved: the rows are the last plan's until Plan runs again."""
        if self.plan is not None and not self.stale:
            self._set_stale(True)
            self.status.value = ("<div class='parex-note'>the controls changed: press Plan "
                                 "(the faded rows are the last plan's)</div>")

    def table_frame(self) -> pd.DataFrame:
        """The ranked rows the table shows."""
        return plan_frame(self.plan, self.plan.top)[list(COLUMNS)] if self.plan else \
            pd.DataFrame()

    def chart_data(self) -> pd.DataFrame:
        return spec_rows(self.chart.spec)

    def _rows(self) -> tuple:
        df = self.table_frame()
        header = w.HTML("<b>" + " · ".join(["rank", "layout", "remat", "b", "step",
                                             "memory/dev", "MFU", "bottleneck"]) + "</b>")
        rows = [header]
        for rank, r in enumerate(df.itertuples(), start=1):
            button = w.Button(description=f"#{rank} → Explorer", layout=w.Layout(width="130px"),
                              tooltip="load this layout into the Explorer")
            button.on_click(lambda _, rank=rank: self.load(rank))
            text = (f"<code>{escape(r.layout)}</code> · {r.remat} · b={r.microbatch} · "
                    f"<span class='parex-step'>{format_seconds(r.step_total_s)}</span> · "
                    f"<span class='parex-memory'>{format_bytes(r.memory_total_bytes)}</span> · "
                    f"{r.mfu:.0%} · {r.bottleneck}")
            rows.append(w.HBox([button, w.HTML(text)]))
        return tuple(rows)

    def load(self, rank: int) -> Explorer:
        """Load the layout ranked `rank` (1 = best) into the Explorer."""
        p = self.plan
        i = p.top[rank - 1]
        layout = p.layout(i)
        if layout.layers_per_stage:
            raise LayoutError(f"{layout} has an uneven partition, which the Explorer has no "
                              f"control for; run it with `parex run --layout {layout}`")
        return self.explorer.load(p.model.name, layout, p.cluster.n_devices,
                                  **handed_over(p, i))


def handed_over(p, i: int) -> dict:
    """The Explorer controls that reproduce row i's prediction: its Setting (hardware, dtype,
    recipe, convention, global batch, sequence length, remat); the layout carries the schedule
    and the microbatch count, from which b follows."""
    s = p.setting_of(i)
    return {"hardware": p.cluster.chip.name, "dtype": s.dtype, "remat": s.train.remat,
            "global_batch": s.train.global_batch, "seq_len": s.seq_len,
            "recipe": s.recipe, "convention": s.convention}


__all__ = ["Planner", "handed_over"]
