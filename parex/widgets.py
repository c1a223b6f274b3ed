"""The Explorer: pick a model, a mesh and a layout; see the prediction update as you go, and
measure the real step on the (emulated) mesh with one button.

    from parex.widgets import Explorer
    explorer = Explorer()
    explorer                     # in a notebook: the controls, the live chart and the history

Charts update in place: each is an `alt.JupyterChart` whose `.chart` is replaced, which does not
blank the view (an Output widget would flicker). Everything the widget shows is readable from
Python (`layout`, `error`, `prediction`, `records`, `history_frame()`, `chart_data()`), so tests
drive it without a browser.
"""

from __future__ import annotations

import contextlib
from html import escape

import altair as alt
import ipywidgets as w
import pandas as pd

from . import charts
from .config import DTYPES, REMAT_POLICIES, ModelConfig, TrainConfig, model_preset, preset_names
from .hardware import known_hardware
from .layout import CP_MODES, Axis, Layout, LayoutError
from .measure import measure
from .mesh import devices_for
from .parallel.schedules import SCHEDULES
from .predict import predict
from .record import Measurement, Prediction, records_frame

DEVICE_COUNTS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
SPLIT_AXES = (Axis.FSDP, Axis.TENSOR, Axis.SEQ, Axis.STAGE)  # data takes the devices left over
DIMS = ("layers", "hidden", "heads", "seq_len")
LOCAL_HARDWARE = "cpu-local"  # the profile `parex calibrate` writes for the emulated CPU mesh
# Measuring runs the model for real on this host: 16 bytes of fp32 model state per parameter
# (weights, gradients, two Adam moments) across the emulated devices, plus activations.
MAX_MEASURE_PARAMS = 50_000_000


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _hardware_names() -> list[str]:
    """Known profiles, the local CPU's first (calibrated on first use: local_profile.py)."""
    names = known_hardware()
    return sorted(names, key=lambda name: name != LOCAL_HARDWARE) or [LOCAL_HARDWARE]


def _dropdown(name: str, options, value, **kw) -> w.Dropdown:
    return w.Dropdown(options=list(options), value=value, description=name,
                      layout=w.Layout(width="210px"), style={"description_width": "90px"}, **kw)


def _int_text(name: str, value: int) -> w.BoundedIntText:
    return w.BoundedIntText(value=value, min=1, max=1_000_000, description=name,
                            layout=w.Layout(width="210px"), style={"description_width": "90px"})


class Explorer:
    """Controls → (model, train config, layout) → validation → prediction → live chart;
    the Measure button → real step → history table and chart."""

    def __init__(self, model: str = "tiny", n_devices: int = 8, hardware: str | None = None,
                 global_batch: int = 16, steps: int = 5):
        hardware_names = _hardware_names()
        # (Measurement, its Prediction on the hardware it ran on), in the order they were made
        self.history: list[tuple[Measurement, Prediction]] = []
        self.prediction = None  # the Prediction of the current controls, when there is one
        self.error: str | None = None  # the validation message of the current controls
        self.layout: Layout | None = None
        self._holding = False
        c = self.controls = {
            "model": _dropdown("model", preset_names(), model),
            **{dim: _int_text(dim, getattr(model_preset(model), dim)) for dim in DIMS},
            "dtype": _dropdown("dtype", DTYPES, model_preset(model).dtype),
            "global_batch": _int_text("batch", global_batch),
            "devices": _dropdown("devices", sorted({*DEVICE_COUNTS, n_devices}), n_devices),
            **{a.value: _dropdown(a.value, divisors(n_devices), 1) for a in SPLIT_AXES},
            "zero": _dropdown("ZeRO stage", (0, 1, 2, 3), 0),
            "sp": w.Checkbox(value=False, description="sequence parallel (sp)", indent=False),
            "cp": _dropdown("context par.", CP_MODES, "none"),
            "schedule": _dropdown("schedule", SCHEDULES, SCHEDULES[0]),
            "microbatches": _dropdown("microbatches", (1, 2, 4, 8, 16, 32), 1),
            "virtual": _dropdown("virtual", (1, 2, 3, 4), 1),
            "remat": _dropdown("remat", REMAT_POLICIES, "none"),
            "hardware": _dropdown("hardware", hardware_names, hardware or hardware_names[0]),
            "steps": _int_text("steps", steps),
        }
        self.data_label = w.HTML()
        self.status = w.HTML()
        # SVG puts the chart's text into the page, where a browser test can read it.
        self.chart = alt.JupyterChart(alt.Chart(pd.DataFrame()).mark_point(),
                                      embed_options={"renderer": "svg"})
        self.measure_button = w.Button(description="Measure", button_style="primary",
                                       icon="play", tooltip="compile and run the real step")
        self.progress = w.IntProgress(value=0, min=0, max=2, description="idle")  # run, done
        self.log = w.Output()  # tqdm.auto's per-step bar shows here
        self.history_table = w.HTML()
        self.history_chart = alt.JupyterChart(alt.Chart(pd.DataFrame()).mark_point(),
                                              embed_options={"renderer": "svg"})
        self.measure_button.on_click(lambda _: self.measure())
        c["model"].observe(self._on_preset, "value")
        c["devices"].observe(self._on_devices, "value")
        for name, control in c.items():
            if name not in ("model", "devices", "steps"):
                control.observe(lambda _: self.refresh(), "value")
        self.widget = self._assemble()
        self.refresh()

    # --- the view ---------------------------------------------------------------------------
    def _assemble(self) -> w.VBox:
        c = self.controls

        def column(title: str, names: list[str]) -> w.VBox:
            return w.VBox([w.HTML(f"<b>{title}</b>")] + [c[n] for n in names])

        controls = w.HBox([
            column("model", ["model", *DIMS, "dtype", "global_batch", "remat"]),
            column("mesh", ["devices", *[a.value for a in SPLIT_AXES]]),
            column("technique", ["zero", "sp", "cp", "schedule", "microbatches", "virtual"]),
            column("predict / measure", ["hardware", "steps"]),
        ])
        return w.VBox([controls, self.data_label, self.status, self.chart,
                       w.HBox([self.measure_button, self.progress]), self.log,
                       w.HTML("<b>history</b>"), self.history_table, self.history_chart])

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    @contextlib.contextmanager
    def hold(self):
        """Change several controls and refresh once at the end."""
        self._holding = True
        try:
            yield self
        finally:
            self._holding = False
        self.refresh()

    def set(self, **values) -> "Explorer":
        """Set controls by name, e.g. `explorer.set(tensor=4, zero=1)`, refreshing once."""
        with self.hold():
            for name, value in values.items():
                if name not in self.controls:
                    raise ValueError(f"no control named {name!r}; controls: "
                                     f"{', '.join(self.controls)}")
                self.controls[name].value = value
        return self

    def _on_preset(self, change) -> None:
        preset = model_preset(change.new)
        with self.hold():
            for dim in DIMS:
                self.controls[dim].value = getattr(preset, dim)

    def _on_devices(self, change) -> None:
        """Each split axis offers the divisors of the device count; sizes that no longer
        divide it fall back to 1."""
        with self.hold():
            for axis in SPLIT_AXES:
                control = self.controls[axis.value]
                keep = control.value if change.new % control.value == 0 else 1
                control.options = divisors(change.new)
                control.value = keep

    # --- state ------------------------------------------------------------------------------
    @property
    def model(self) -> ModelConfig:
        c, preset = self.controls, model_preset(self.controls["model"].value)
        dims = {dim: c[dim].value for dim in DIMS}
        if all(dims[d] == getattr(preset, d) for d in DIMS):
            return preset.replace(dtype=c["dtype"].value)
        # Keep the preset's MLP ratio and GQA grouping when the width or head count changes.
        ffn = preset.ffn * dims["hidden"] // preset.hidden
        kv = max(1, preset.kv_heads * dims["heads"] // preset.heads)
        return preset.replace(name=f"{preset.name}-custom", ffn=ffn, kv_heads=kv,
                              dtype=c["dtype"].value, **dims)

    @property
    def train(self) -> TrainConfig:
        c = self.controls
        return TrainConfig(global_batch=c["global_batch"].value, steps=c["steps"].value,
                           remat=c["remat"].value, warmup_steps=1)

    @property
    def n_devices(self) -> int:
        return self.controls["devices"].value

    def _layout(self) -> Layout:
        """The Layout the controls describe; the data axis takes the devices left over."""
        c, n = self.controls, self.n_devices
        sizes = {a.value: c[a.value].value for a in SPLIT_AXES}
        split = 1
        for size in sizes.values():
            split *= size
        if n % split:
            named = " × ".join(f"{k}={v}" for k, v in sizes.items() if v > 1)
            raise LayoutError(f"{named} = {split} devices does not divide the {n} devices, so no "
                              f"data-parallel size fills the mesh: lower one of those axes")
        pipeline = sizes[Axis.STAGE.value] > 1  # schedule and virtual only mean something then
        return Layout(data=n // split, **sizes, zero=c["zero"].value, sp=c["sp"].value,
                      cp=c["cp"].value, microbatches=c["microbatches"].value,
                      schedule=c["schedule"].value if pipeline else "gpipe",
                      virtual_stages=c["virtual"].value if pipeline else 1)

    @property
    def records(self) -> list:
        """Every Measurement of the history, each followed by its Prediction."""
        return [record for pair in self.history for record in pair]

    def history_frame(self) -> pd.DataFrame:
        """Every measurement and prediction made so far, one tidy row each."""
        return records_frame(self.records) if self.records else pd.DataFrame()

    def chart_data(self) -> pd.DataFrame:
        """The rows the live chart draws, read back from its Vega-Lite spec."""
        return _spec_rows(self.chart.spec)

    def history_chart_data(self) -> pd.DataFrame:
        return _spec_rows(self.history_chart.spec)

    # --- reacting to controls ---------------------------------------------------------------
    def refresh(self) -> None:
        """Validate the controls, predict, and replace the live chart (in place)."""
        if self._holding:
            return
        c = self.controls
        pipeline = c[Axis.STAGE.value].value > 1
        c["schedule"].disabled = c["virtual"].disabled = not pipeline
        try:
            model, train = self.model, self.train
            layout = self._layout()
            layout.validate(model, train, self.n_devices)
            prediction = predict(model, train, layout, c["hardware"].value)
        except (LayoutError, ValueError) as exc:
            self.error, self.layout, self.prediction = str(exc), None, None
            self._show_status()
            return
        self.error, self.layout, self.prediction = None, layout, prediction
        self.data_label.value = f"data = {layout.data} (the devices left over)"
        self._show_status()
        self.chart.chart = self._live_chart()

    def _show_status(self) -> None:
        if self.error:
            self.status.value = ("<div style='color:#b00020'><b>invalid layout:</b> "
                                 f"{escape(self.error)}</div>")
            return
        model, layout = self.model, self.layout
        p = self.prediction
        fits = "fits" if p.fits else f"does NOT fit: {p.over_capacity_bytes / 1e9:,.1f} GB over"
        size = (f"{model.n_params / 1e9:,.1f}B" if model.n_params >= 1e9
                else f"{model.n_params / 1e6:,.2f}M")
        text = (f"<b>{escape(str(layout))}</b> on {self.n_devices} devices "
                f"({escape(p.hardware)}) · {model.name}, {size} parameters · predicted "
                f"{_seconds(p.step_time_s['total'])} per step, "
                f"{p.memory_bytes_per_device['total'] / 1e9:,.3g} GB per device ({fits}), "
                f"MFU {p.mfu:.0%}")
        self.status.value = f"<div style='color:#1b5e20'>{text}</div>"

    def _current_records(self) -> list:
        """The prediction for the controls, and the latest measurement of the same setup when
        it ran on the hardware being predicted."""
        same = [m for m, p in self.history if (m.model, m.layout, m.n_devices) == (
            self.model.name, str(self.layout), self.n_devices)
            and p.hardware.split("×")[0] == self.controls["hardware"].value]
        return same[-1:] + [self.prediction]

    def _live_chart(self):
        return charts.overview_chart(records_frame(self._current_records()))

    # --- measuring ----------------------------------------------------------------------------
    def measure(self):
        """Compile and run the current layout for real; append it and its prediction to the
        history. Problems show in the status line; returns the Measurement or None."""
        if self.error:
            self._show_status()
            return None
        model, train, layout = self.model, self.train, self.layout
        try:
            if model.n_params > MAX_MEASURE_PARAMS:
                raise LayoutError(
                    f"{model.name} has {model.n_params / 1e6:,.0f}M parameters, too many to run "
                    f"on this host (Measure takes up to {MAX_MEASURE_PARAMS / 1e6:.0f}M); "
                    f"predictions still work, or pick a smaller preset or dims")
            devices = devices_for(self.n_devices)
        except LayoutError as exc:
            self.status.value = f"<div style='color:#b00020'>{escape(str(exc))}</div>"
            return None
        self._progress(1, f"compile + {train.steps} steps", "info")
        self.log.clear_output()
        try:
            with self.log:
                result = measure(model, train, layout, devices=devices, progress=True)
        except Exception as exc:  # shown in the widget; the kernel keeps running
            self._progress(0, "failed", "danger")
            self.status.value = ("<div style='color:#b00020'><b>measurement failed:</b> "
                                 f"{escape(type(exc).__name__ + ': ' + str(exc))}</div>")
            return None
        # Pair the run with a prediction for the machine it ran on, whatever is being explored.
        local = (LOCAL_HARDWARE if result.platform == "cpu"
                 and LOCAL_HARDWARE in self.controls["hardware"].options
                 else self.controls["hardware"].value)
        self.history.append((result, predict(model, train, layout, local)))
        self._progress(2, "measured", "success")
        self._show_history()
        self.chart.chart = self._live_chart()
        return result

    def _progress(self, value: int, label: str, style: str) -> None:
        self.progress.value, self.progress.description = value, label
        self.progress.bar_style = style

    def _show_history(self) -> None:
        df = self.history_frame()
        columns = [c for c in ("source", "model", "layout", "n_devices", "hardware",
                               "step_time_s", "memory_total_bytes", "tokens_per_s", "loss_last")
                   if c in df]
        self.history_table.value = df[columns].to_html(index=False, float_format="{:.4g}".format,
                                                       na_rep="")
        self.history_chart.chart = alt.hconcat(
            charts.step_time_chart(df, "history: step time"), charts.scatter_chart(df)
        ).resolve_scale(color="independent")


def _seconds(value: float) -> str:
    return f"{value * 1e3:,.3g} ms" if value < 1 else f"{value:,.3g} s"


def _spec_rows(spec: dict | None) -> pd.DataFrame:
    """All inline rows of a Vega-Lite spec (altair puts them under `datasets`)."""
    rows = [row for values in (spec or {}).get("datasets", {}).values() for row in values]
    return pd.DataFrame(rows)


__all__ = ["Explorer", "divisors"]
