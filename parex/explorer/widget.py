"""The Explorer: pick a model, a mesh and a layout; see the prediction update as you go, with
the formula behind each number, what bounds the step, what to change when it does not fit, the
schedule's Gantt chart and the mesh; pin a baseline to compare against, sweep one control, and
measure the real step on the (emulated) mesh.

    from parex.explorer.widget import Explorer
    explorer = Explorer()
    explorer                     # in a notebook: controls, status, guidance and the panels

Charts update in place: each is an `alt.JupyterChart` whose `.chart` is replaced, which does not
blank the view (an Output widget would flicker); panels out of sight are drawn when opened.
Everything the widget shows is readable from Python (`layout`, `error`, `prediction`, `fixes`,
`ways`, `runs`, `history_frame()`, `chart_data()`, ...), so tests drive it without a browser.

Defaults that follow the hardware and the preset: dtype, remat, recipe, convention, global batch
and pipeline schedule come up as `parex predict` resolves them for the model on the profile
(state.control_defaults, from parex.setting.resolve): on an accelerator bfloat16 under the mixed
recipe, the batch of published runs and 1F1B (what runs there use; every control can be
switched back), on cpu-local the preset's own float32, which is what the emulated mesh runs.
The status line's second line states the prediction's Setting; while the controls are invalid,
every view of the last valid setup's numbers is faded (view.STALE).
"""

from __future__ import annotations

import contextlib
import threading

import ipywidgets as w
import pandas as pd

from ..calibrate.local import ready
from ..config import DTYPES, REMAT_POLICIES, model_preset, preset_names
from ..hardware import load_chip
from ..interop import FRAMEWORKS
from ..layout import CP_MODES, Layout, LayoutError, divisors
from ..parallel.schedules import ALL_SCHEDULES
from ..predict import predict_setting
from ..stacks import STACKS
from .compare_panel import SWEEPS, ComparePanel
from .explain import explain
from .guide import MICROBATCHES, fit_fixes, ways_out
from .live_panel import LivePanel
from .measure_panel import MeasurePanel
from .state import (CONVENTIONS, DIMS, DTYPE_OWN, PRECISION_CHOICES, RECIPES, SPLIT_AXES,
                    cli_command, control_defaults, model_of, resolve, setting_of, train_of,
                    values_of)
from .sweep_store import StoreView
from .time_panel import TimeToTrainPanel
from .view import (
    GPU_FOR_BUBBLE,
    STYLE,
    DefaultedInt,
    chart_view,
    dropdown,
    hardware_names,
    html_view,
    int_text,
    pane,
    spec_rows,
)

DEVICE_COUNTS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
PANELS = ("overview", "pipeline and mesh", "compare", "sweep", "measured", "explain",
          "time to train")


class Explorer(LivePanel, MeasurePanel, ComparePanel, TimeToTrainPanel):
    """Controls → (model, train config, layout) → validation → prediction → status, guidance
    and charts; Measure → real step → pooled history."""

    def __init__(self, model: str = "tiny", n_devices: int = 8, hardware: str | None = None,
                 global_batch: int | None = None, steps: int = 5):
        ready(hardware or "cpu-local")  # this machine's profile, calibrated on first use
        names = hardware_names()
        preset = model_preset(model)
        hardware = hardware or names[0]
        real = control_defaults(hardware, preset, n_devices)
        self.runs, self.baseline, self.kept, self._tops = [], None, [], (0.0, 0.0)
        self._programs = {}
        self.prediction = self.layout = self.error = None
        self.fixes, self.ways, self.explained = [], [], {}
        self._busy, self._holding, self._drawn = threading.Lock(), 0, set()
        self._shown = False  # displayed in a notebook: draw eagerly
        self.batch = DefaultedInt("batch", real["global_batch"], global_batch)
        c = self.controls = {
            "model": dropdown("model", preset_names(), model),
            **{dim: int_text(dim, getattr(preset, dim)) for dim in DIMS},
            "dtype": dropdown("dtype", DTYPES, real["dtype"]),
            # the matmul recipe: the dtype's own, or an FP8 one (parex.precision)
            "precision": dropdown("precision", PRECISION_CHOICES, DTYPE_OWN),
            "global_batch": self.batch.widget,
            "devices": dropdown("devices", sorted({*DEVICE_COUNTS, n_devices}), n_devices),
            **{a.value: dropdown(a.value, divisors(n_devices), 1) for a in SPLIT_AXES},
            "zero": dropdown("ZeRO stage", (0, 1, 2, 3), 0),
            "sp": w.Checkbox(value=False, description="sequence parallel (sp)", indent=False),
            # MoE parallel folding: the experts over expert × tensor, each whole (ETP 1)
            "expert_fold": w.Checkbox(value=False, description="experts over tensor too "
                                      "(expert_tensor=1)", indent=False),
            "cp": dropdown("context par.", CP_MODES, "none"),
            "schedule": dropdown("schedule", ALL_SCHEDULES, real["schedule"]),  # + local (PPLL)
            "microbatches": dropdown("microbatches", MICROBATCHES, 1),
            "virtual": dropdown("virtual", (1, 2, 3, 4), 1),
            "remat": dropdown("remat", REMAT_POLICIES, real["remat"]),
            "hardware": dropdown("hardware", names, hardware),
            # the bytes of model state and the program's convention: the profile's defaults
            "recipe": dropdown("recipe", RECIPES, real["recipe"]),
            "convention": dropdown("convention", CONVENTIONS, real["convention"]),
            # the framework whose communication overlaps are priced (gpu convention only)
            "stack": dropdown("stack", tuple(STACKS), "parex"),
            "steps": int_text("steps", steps),
        }
        self._build_views()
        c["model"].observe(self._on_preset, "value")
        c["devices"].observe(self._on_devices, "value")
        c["hardware"].observe(self._on_hardware, "value")
        for name, control in c.items():
            if name not in ("model", "devices", "hardware", "steps"):
                control.observe(lambda _: self.refresh(), "value")
        self.widget = self._assemble()
        self.refresh()

    # --- the view ---------------------------------------------------------------------------
    def _build_views(self) -> None:
        self.chart, self.pictures, self.compare_chart = chart_view(), chart_view(), chart_view()
        self.sweep_chart, self.history_chart = chart_view(), chart_view()
        self.data_label, self.status, self.notes, self.cli_line = (html_view() for _ in "1234")
        self.compare_note, self.sweep_note = html_view(), html_view()
        self.history_table, self.explain_table = html_view(), html_view()
        self.history_note = html_view()  # the machine's load against the calibration's
        self.guide = w.HBox(layout=w.Layout(flex_flow="row wrap"))
        self.measure_button = w.Button(description="Measure", button_style="primary",
                                       icon="play", tooltip="compile and run the real step")
        self.progress = w.IntProgress(value=0, min=0, max=2, description="idle",
                                      style={"description_width": "140px"})
        self.measure_button.on_click(self._on_measure_click)
        self.gpu_button = w.Button(description=f"see it on {GPU_FOR_BUBBLE}", icon="eye",
                                   layout=w.Layout(display="none", width="auto"))
        self.gpu_button.on_click(lambda _: self.set(hardware=GPU_FOR_BUBBLE))
        # the printed command: parex's own, or the same Setting as another framework's options
        self.command_for = dropdown("command for", [("parex", "parex")] + [
            (name, key) for key, name in FRAMEWORKS.items()], "parex")
        self.command_for.observe(lambda _: self._show_command(), "value")
        buttons = {"pin": ("Pin as baseline", self.pin_baseline), "keep": ("Keep beside it",
                   self.keep), "clear": ("Clear", self.clear_compare)}
        self.compare_buttons = {}
        for key, (text, action) in buttons.items():
            self.compare_buttons[key] = w.Button(description=text, layout=w.Layout(width="auto"))
            self.compare_buttons[key].on_click(action)
        self.sweep_control = dropdown("sweep", SWEEPS, SWEEPS[0])
        self.sweep_control.observe(lambda _: self._redraw("sweep"), "value")
        self.sweep_button = w.Button(description="Sweep", icon="line-chart")
        self.sweep_button.on_click(self.sweep)
        self.sweep_measure_button = w.Button(description="Measure the sweep", icon="play")
        self.sweep_measure_button.on_click(lambda _: threading.Thread(
            target=self.measure_sweep, daemon=True).start())
        self._build_time_views()

    def _assemble(self) -> w.VBox:
        c = self.controls

        def column(title: str, names: list[str]) -> w.VBox:
            return w.VBox([w.HTML(f"<b>{title}</b>")] + [c[n] for n in names])

        controls = w.HBox([
            column("model", ["model", *DIMS, "dtype", "precision", "global_batch", "remat"]),
            column("mesh", ["devices", *[a.value for a in SPLIT_AXES]]),
            column("technique", ["zero", "sp", "cp", "schedule", "microbatches", "virtual",
                                 "expert_fold"]),
            column("predict / measure", ["hardware", "recipe", "convention", "stack",
                                         "steps"]),
        ])
        b = self.compare_buttons
        # what shows the current controls' numbers: faded (view.STALE) while they are invalid.
        # The class goes on plain boxes: a JupyterChart's element does not take classes added
        # after it is drawn (checked in a browser, tests/test_browser.py).
        self.stale_views = [pane(self.chart), pane(self.pictures),
                            pane(self.compare_note, self.compare_chart),
                            pane(self.sweep_note, self.sweep_chart), pane(self.explain_table),
                            self.data_label, self.cli_line, self.time_view]
        overview, pictures, compare, sweep, explained = self.stale_views[:5]
        self.store_view = StoreView()  # a sweep's results, read into the measured panel
        self.tabs = w.Tab(children=[
            overview, pictures,
            w.VBox([w.HBox([b["pin"], b["keep"], b["clear"]]), compare]),
            w.VBox([w.HBox([self.sweep_control, self.sweep_button, self.sweep_measure_button]),
                    sweep]),
            w.VBox([self.history_note, self.history_table, self.history_chart,
                    w.HTML("<b>A sweep's store</b> (<code>parex sweep --out</code>): its runs "
                           "beside their predictions"), self.store_view.widget]), explained,
            self.time_panel()])
        for i, title in enumerate(PANELS):
            self.tabs.set_title(i, title)
        self.tabs.observe(lambda _: self._draw_visible(), "selected_index")
        return w.VBox([w.HTML(STYLE), controls, self.data_label, self.status,
                       self.notes, self.gpu_button, self.guide,
                       w.HBox([self.measure_button, self.progress]),
                       w.HBox([self.command_for, self.cli_line]), self.tabs],
                      layout=w.Layout(width="100%"))

    def _repr_mimebundle_(self, **kwargs):
        self._shown = True  # from now on every change redraws what is in view
        self._draw_visible()
        return self.widget._repr_mimebundle_(**kwargs)

    def show(self, panel: str) -> "Explorer":
        """Open a panel by name (PANELS), drawing it if it is out of date."""
        self.tabs.selected_index = PANELS.index(panel)
        return self.draw()

    def draw(self) -> "Explorer":
        """Draw what is in view if it is out of date. A displayed Explorer does this on every
        change; one driven only from Python (a test) draws when its charts are read."""
        self._draw_visible(force=True)
        return self

    # --- setting controls -------------------------------------------------------------------
    @contextlib.contextmanager
    def hold(self):
        """Change several controls and refresh once at the end."""
        self._holding += 1  # nested holds (a preset inside set()) refresh once, at the outermost
        try:
            yield self
        finally:
            self._holding -= 1
        self.refresh()

    def set(self, **values) -> "Explorer":
        """Set controls by name, e.g. `explorer.set(tensor=4, zero=1)`, refreshing once."""
        with self.hold():
            for name in ("model", "devices", "hardware"):  # they reset others: first
                if name in values:
                    self.controls[name].value = values[name]
            for name, value in values.items():
                if name not in self.controls:
                    raise ValueError(f"no control named {name!r}; controls: "
                                     f"{', '.join(self.controls)}")
                self._set_control(name, value)
        return self

    def _set_control(self, name: str, value) -> None:
        """One control's value; global_batch=None goes back to the regime's default."""
        if name == "global_batch":
            self.batch.set(value, self._defaults()["global_batch"])
        else:
            self.controls[name].value = value

    def load(self, model: str, layout: Layout, n_devices: int, **settings) -> "Explorer":
        """Show `layout` of preset `model` on `n_devices` (a planner row, say): every control
        set at once, choices widened where the layout needs a value they lack. `settings`
        names other controls (remat, global_batch, hardware, seq_len, ...)."""
        settings.setdefault("hardware", self.controls["hardware"].value)
        values = values_of(model, layout, n_devices, **settings)
        values["schedule"] = values["schedule"] or self.controls["schedule"].value
        first = {name: values.pop(name) for name in ("devices", "hardware") if name in values}
        with self.hold():
            self.controls["model"].value = model  # resets the dims to the preset's
            for name, value in (first | values).items():  # devices, hardware reset others
                control = self.controls[name]
                if isinstance(control, w.Dropdown) and value not in control.options:
                    control.options = sorted({*control.options, value})
                self._set_control(name, value)
        return self

    def load_layout(self, text: str, **settings) -> "Explorer":
        """The same from a layout string, on the current model: "data=2,tensor=4,zero=1" (the
        device count follows the layout)."""
        layout = Layout.parse(text)
        return self.load(self.controls["model"].value, layout, layout.n_devices, **settings)

    def _on_preset(self, change) -> None:
        preset = model_preset(change.new)
        with self.hold():
            for dim in DIMS:
                self.controls[dim].value = getattr(preset, dim)
            self._set_defaults(self.controls["hardware"].value, preset)

    def _on_devices(self, change) -> None:
        """Each split axis offers the divisors of the device count; sizes that no longer
        divide it fall back to 1."""
        with self.hold():
            for axis in SPLIT_AXES:
                control = self.controls[axis.value]
                keep = control.value if change.new % control.value == 0 else 1
                control.options = divisors(change.new)
                control.value = keep

    def _on_hardware(self, change) -> None:
        """Accelerators predict in bfloat16, cpu-local in what the emulated mesh runs."""
        with self.hold():
            self._set_defaults(change.new, model_preset(self.controls["model"].value))

    def _defaults(self) -> dict:
        c = self.controls
        return control_defaults(c["hardware"].value, model_preset(c["model"].value),
                                c["devices"].value)

    def _set_defaults(self, hardware: str, preset) -> None:
        for name, value in control_defaults(hardware, preset,
                                            self.controls["devices"].value).items():
            if name == "global_batch":
                self.batch.show_default(value)
            else:
                self.controls[name].value = value

    # --- state ------------------------------------------------------------------------------
    @property
    def values(self) -> dict:
        """The controls' values; global_batch is None while it shows the default."""
        values = {name: control.value for name, control in self.controls.items()}
        return values | {"global_batch": self.batch.value}

    @property
    def model(self):
        return model_of(self.values)

    @property
    def train(self):
        return train_of(self.values)

    @property
    def n_devices(self) -> int:
        return self.controls["devices"].value

    @property
    def chip(self):
        return load_chip(self.controls["hardware"].value)

    @property
    def stale(self) -> bool:
        """True while the charts show the last valid setup, not the current controls."""
        return self.error is not None

    def cli_command(self) -> str:
        return cli_command(self.values)

    def chart_data(self) -> pd.DataFrame:
        """The rows the live chart draws, read back from its Vega-Lite spec."""
        return self.spec_rows("chart")

    def history_chart_data(self) -> pd.DataFrame:
        return self.spec_rows("history_chart")

    def spec_rows(self, view: str) -> pd.DataFrame:
        """The rows a chart view draws: "chart", "pictures", "compare_chart", "sweep_chart" or
        "history_chart" (drawn first if out of date)."""
        self.draw()
        return spec_rows(getattr(self, view).spec)

    # --- reacting to controls ---------------------------------------------------------------
    def refresh(self) -> None:
        """Validate the controls, predict, explain, guide, and redraw what is in view."""
        if self._holding:
            return
        c = self.controls
        c["schedule"].disabled = c["virtual"].disabled = c["stage"].value == 1
        values = self.values
        try:
            model, train, layout = resolve(values)
            setting = setting_of(values, model, train, layout)
            p = predict_setting(setting)
        except (LayoutError, ValueError) as exc:
            self.error, self.fixes = str(exc), []
            self.ways = ways_out(values)
            self._show_status()
            return
        self.error, self.ways, self.prediction = None, [], p
        self.setting, self.layout = setting, setting.layout
        self.explained = explain(p, setting)
        self.fixes = [] if p.fits else fit_fixes(values)
        self.data_label.value = f"data = {layout.data} (the devices left over)"
        self._show_status()
        self._drawn = set()
        self._draw_visible()

    def _draw_visible(self, force: bool = False) -> None:
        """Draw the open panel (and the overview) if the controls changed since."""
        if self.error or not (self._shown or force):
            return
        panel = PANELS[self.tabs.selected_index or 0] if hasattr(self, "tabs") else "overview"
        for name in dict.fromkeys(("overview", panel)):
            if name not in self._drawn:
                self._drawn.add(name)
                {"overview": self._show_live, "pipeline and mesh": self._show_pictures,
                 "compare": self._show_compare, "sweep": self.sweep,
                 "measured": self._show_history, "explain": self._show_explain,
                 "time to train": self._show_time_to_train}[name]()

    def _redraw(self, *panels: str) -> None:
        self._drawn -= set(panels)
        self._draw_visible()


__all__ = ["Explorer", "PANELS", "divisors"]
