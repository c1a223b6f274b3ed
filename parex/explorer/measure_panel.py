"""The Explorer's Measure button and history: runs in a background thread (so the button is
disabled at once and a second click is ignored rather than queued), a progress bar over the
compile and each step, and repeated runs of one setup pooled into one row (median, spread, n).
A mixin of parex.explorer.widget.Explorer."""

from __future__ import annotations

import os
import threading
from html import escape

import altair as alt
import pandas as pd

from ..setting import EMULATED, platform_regime
from .. import charts
from ..charts.style import format_bytes, format_count, format_seconds
from ..layout import LayoutError
from ..hardware import load_chip
from ..measure.report import load_note
from ..executor.mesh import devices_for
from ..record import records_frame
from .measuring import Run, measure_run, pooled_row, ratio_text
from .state import predicted

LOCAL_HARDWARE = "cpu-local"  # this machine's profile (parex.machine: calibrated on first use)
# Measuring runs the model for real on this host: 16 bytes of fp32 model state per parameter
# (weights, gradients, two Adam moments) across the emulated devices, plus activations.
MAX_MEASURE_PARAMS = 50_000_000


def run_key(model, train, layout, n_devices) -> tuple:
    """Runs with equal keys are repeats of one setup (the step count only adds samples)."""
    return (model, train.replace(steps=0), str(layout), n_devices)


class MeasurePanel:
    """Needs: controls, model, train, layout, error, n_devices, status, measure_button, progress,
    history_table, history_chart, _show_status, _redraw."""

    runs: list[Run]
    _programs: dict  # compiled programs by setup: repeats measure again without compiling

    # --- measuring ------------------------------------------------------------------------
    def _on_measure_click(self, _=None) -> None:
        """The button: measure in a thread, so the kernel stays free; a click while a run
        holds the lock (taken here, before the thread starts) is ignored."""
        if not self._busy.acquire(blocking=False):
            return
        self.measure_button.disabled = True
        self._thread = threading.Thread(target=self._measure_held, daemon=True)
        self._thread.start()

    @property
    def measuring(self) -> bool:
        return self._busy.locked()

    def measure(self):
        """Compile and run the current layout for real; add it and its prediction to the
        history. Problems show in the status line; returns the Measurement or None (also when
        a run is already going)."""
        if not self._busy.acquire(blocking=False):
            return None
        return self._measure_held()

    def _measure_held(self):
        """measure() with the lock held; releases it."""
        try:
            self.measure_button.disabled = True
            if self.error:
                self._show_status()
                return None
            run = self._measure(self.model, self.train, self.layout, self.n_devices)
            if run is not None:
                self._redraw("overview", "measured", "compare")
            return run.measurement if run else None
        finally:
            self.measure_button.disabled = False
            self._busy.release()

    def _refusal(self, model, n_devices) -> str | None:
        if model.n_params > MAX_MEASURE_PARAMS:
            return (f"{model.name} has {format_count(model.n_params)} parameters, too many to "
                    f"run on this host (Measure takes up to {format_count(MAX_MEASURE_PARAMS)}); "
                    f"predictions still work, or pick a smaller preset or dims")
        try:
            devices_for(n_devices)
        except LayoutError as exc:
            return str(exc)
        return None

    def _measure(self, model, train, layout, n_devices) -> Run | None:
        refusal = self._refusal(model, n_devices)
        if refusal:
            self.status.value = f"<div class='parex-bad'>{escape(refusal)}</div>"
            return None
        self.progress.max = train.steps + 1
        self.load_before = os.getloadavg()[0]  # the other work on this machine, before ours
        try:
            measurement, times, split = measure_run(model, train, layout,
                                                    devices_for(n_devices), self._progress,
                                                    cache=self._programs)
        except Exception as exc:  # shown in the widget; the kernel keeps running
            self._set_progress(0, "failed", "danger")
            self.status.value = ("<div class='parex-bad'><b>measurement failed:</b> "
                                 f"{escape(type(exc).__name__ + ': ' + str(exc))}</div>")
            return None
        # Pair the run with a prediction for the machine it ran on, whatever is explored.
        local = (LOCAL_HARDWARE if platform_regime(measurement.platform) == EMULATED
                 and LOCAL_HARDWARE in self.controls["hardware"].options
                 else self.controls["hardware"].value)
        prediction = predicted(self.values, model, train, layout, local)
        run = Run(measurement, prediction, run_key(model, train, layout, n_devices), times,
                  split)
        self.runs.append(run)
        self._set_progress(self.progress.max, "measured", "success")
        return run

    def _progress(self, done: int, total: int, text: str) -> None:
        self.progress.max = total
        self._set_progress(done, text, "info")

    def _set_progress(self, value: int, text: str, style: str) -> None:
        self.progress.value, self.progress.description = value, text
        self.progress.bar_style = style

    # --- what was measured ----------------------------------------------------------------
    @property
    def history(self) -> list[tuple]:
        """(Measurement, its Prediction on the hardware it ran on), in the order they ran."""
        return [(run.measurement, run.prediction) for run in self.runs]

    @property
    def records(self) -> list:
        """Every Measurement of the history, each followed by its Prediction."""
        return [record for pair in self.history for record in pair]

    def history_frame(self) -> pd.DataFrame:
        """Every measurement and prediction made so far, one tidy row each."""
        return records_frame(self.records) if self.records else pd.DataFrame()

    def pooled(self, key: tuple) -> dict | None:
        """The measured row of every run with this key, pooled; None before any."""
        same = [run for run in self.runs if run.key == key]
        return pooled_row(same) if same else None

    def pooled_frame(self) -> pd.DataFrame:
        """One measured row per setup (runs pooled) followed by its prediction."""
        rows = []
        for key in dict.fromkeys(run.key for run in self.runs):
            last = [run for run in self.runs if run.key == key][-1]
            rows += [self.pooled(key), last.prediction.to_row()]
        return pd.DataFrame(rows)

    def _history_rows(self) -> list[dict]:
        out = []
        for key in dict.fromkeys(run.key for run in self.runs):
            row = self.pooled(key)
            p = [run for run in self.runs if run.key == key][-1].prediction
            spread = (f"{format_seconds(row['step_time_min_s'])} – "
                      f"{format_seconds(row['step_time_max_s'])}")
            out.append({"layout": row["layout"], "model": row["model"],
                        "devices": row["n_devices"], "runs": row["n_runs"],
                        "timed steps": row["n_steps"],
                        "measured step": format_seconds(row["step_time_s"]),
                        "fastest – slowest": spread,
                        f"predicted ({p.hardware})": format_seconds(p.step_time_s["total"]),
                        "predicted / measured": ratio_text(p.step_time_s["total"], row),
                        "measured memory": format_bytes(row["memory_total_bytes"]),
                        "predicted memory": format_bytes(p.memory_bytes_per_device["total"]),
                        "loss (last)": f"{row['loss_last']:.3f}"})
        return out

    def load_note(self) -> str | None:
        """The machine's load before the last run against the cpu-local calibration's, when
        they differ by more than 1.5× (parex.measure.report.load_note)."""
        if LOCAL_HARDWARE not in self.controls["hardware"].options:
            return None
        now = getattr(self, "load_before", None)
        return load_note(load_chip(LOCAL_HARDWARE).calibration, now)

    def _show_history(self) -> None:
        if not self.runs:
            return
        note = self.load_note()
        self.history_note.value = (f"<div class='parex-bad'>{escape(note)}</div>"
                                   if note else "")
        self.history_table.value = pd.DataFrame(self._history_rows()).to_html(
            index=False, classes="parex-table", border=0)
        frame = self.pooled_frame()
        self.history_chart.chart = alt.hconcat(
            charts.step_time_chart(frame, "measured and predicted step time"),
            charts.scatter_chart(frame)).resolve_scale(color="independent")


__all__ = ["LOCAL_HARDWARE", "MAX_MEASURE_PARAMS", "MeasurePanel", "run_key"]
