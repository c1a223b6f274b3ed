"""The Explorer's compare mode and sweep: a pinned baseline with other layouts beside it (their
deltas on axes that stay put while controls move), and one control swept over its values (a
predicted line, measured points). A mixin of parex.explorer.widget.Explorer."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from .. import charts
from ..charts.compare import with_deltas
from ..layout import LayoutError, divisors
from ..record import Prediction
from .guide import MICROBATCHES
from .measure_panel import run_key
from .state import predicted, resolve

SWEEPS = ("tensor", "microbatches", "seq_len")
AXIS_ROOM = 1.15  # a compare axis ends this far above the largest value it has drawn


@dataclass
class Entry:
    """One compared setup: its control values, prediction and measured key."""

    values: dict
    prediction: Prediction
    key: tuple


def sweep_values(control: str, values: dict) -> list[int]:
    if control == "tensor":
        return divisors(values["devices"])
    if control == "microbatches":
        return list(MICROBATCHES)
    if control == "seq_len":
        from ..config import model_preset

        base = model_preset(values["model"]).seq_len
        return [s for s in (base // 8, base // 4, base // 2, base, 2 * base, 4 * base) if s >= 8]
    raise ValueError(f"cannot sweep {control!r}: choose one of {', '.join(SWEEPS)}")


class ComparePanel:
    """Needs: values, prediction, layout, model, train, n_devices, compare_chart, sweep_chart,
    sweep_note, pooled, chip, _measure."""

    baseline: Entry | None
    kept: list[Entry]

    def _entry(self) -> Entry | None:
        if self.prediction is None:
            return None
        return Entry(dict(self.values), self.prediction,
                     run_key(self.model, self.train, self.layout, self.n_devices))

    def pin_baseline(self, _=None) -> None:
        """Compare everything from now on against the current setup."""
        self.baseline, self.kept, self._tops = self._entry(), [], (0.0, 0.0)
        self._redraw("compare")

    def keep(self, _=None) -> None:
        """Keep the current setup beside the baseline."""
        entry = self._entry()
        if entry is not None:
            if self.baseline is None:
                self.baseline = entry
            else:
                self.kept.append(entry)
        self._redraw("compare")

    def clear_compare(self, _=None) -> None:
        self.baseline, self.kept, self._tops = None, [], (0.0, 0.0)
        self._redraw("compare")

    def _label(self, entry: Entry, tag: str = "") -> str:
        base, v = self.baseline.values, entry.values
        extra = [v[k] if k != "remat" else f"remat={v[k]}" for k in
                 ("model", "hardware", "dtype", "remat") if v[k] != base[k]]
        return " · ".join([entry.prediction.layout + tag, *map(str, extra)])

    def compare_frame(self) -> pd.DataFrame:
        """The rows the compare chart draws: baseline, kept setups and the current one."""
        if self.baseline is None:
            return pd.DataFrame()
        current = self._entry()
        entries = [(self.baseline, "baseline · " + self._label(self.baseline))]
        entries += [(e, self._label(e)) for e in self.kept]
        if current is not None:
            entries.append((current, self._label(current, " (now)")))
        rows = []
        for entry, label in entries:
            measured = self.pooled(entry.key)
            if measured and entry.values["hardware"] == "cpu-local":
                rows.append(measured | {"label": label})
            rows.append(entry.prediction.to_row() | {"label": label})
        return with_deltas(pd.DataFrame(rows), entries[0][1])

    def _show_compare(self) -> None:
        frame = self.compare_frame()
        if frame.empty:
            self.compare_note.value = ("<i>Pin a baseline, then change the controls: the "
                                       "current layout stands beside it with its deltas.</i>")
            self.compare_chart.chart = _empty()
            return
        times = [c for c in ("step_time_s", "step_time_max_s") if c in frame]
        tops = (float(frame["memory_total_bytes"].max()), float(frame[times].max().max()))
        # the axes grow when a bar would not fit and otherwise stay put
        self._tops = tuple(max(old, AXIS_ROOM * new) for old, new in zip(self._tops, tops))
        self.compare_note.value = (f"{frame['label'].nunique()} setups, changes against the "
                                   "baseline above the bars; the axes stay put while the bars "
                                   "fit")
        self.compare_chart.chart = charts.compare_chart(
            frame, self.chip.hbm_bytes, self.chip.name, tops=self._tops)

    # --- sweep ------------------------------------------------------------------------------
    def sweep_frame(self, control: str) -> tuple[pd.DataFrame, list[str]]:
        """(rows, skipped): for each value of `control`, the prediction and the pooled
        measurement of the current setup with that value; skipped names the invalid values."""
        rows, skipped = [], []
        for value in sweep_values(control, self.values):
            trial = self.values | {control: value}
            try:
                model, train, layout = resolve(trial)
                p = predicted(trial, model, train, layout)
            except (LayoutError, ValueError) as exc:
                skipped.append(f"{value} ({str(exc).split(':')[0]})")
                continue
            base = {"value": value, "layout": str(layout)}
            rows.append(base | {"source": "predicted", "step_time_s": p.step_time_s["total"],
                                "memory_total_bytes": p.memory_bytes_per_device["total"]})
            measured = self.pooled(run_key(model, train, layout, trial["devices"]))
            if measured:
                rows.append(base | {"source": "measured", "step_time_s": measured["step_time_s"],
                                    "step_time_s_lo": measured["step_time_min_s"],
                                    "step_time_s_hi": measured["step_time_max_s"],
                                    "memory_total_bytes": measured["memory_total_bytes"],
                                    "n": measured["n_steps"]})
        frame = pd.DataFrame(rows)
        for column in ("step_time_s", "memory_total_bytes"):
            for end in ("lo", "hi"):
                name = f"{column}_{end}"
                frame[name] = frame[name] if name in frame else frame[column]
                frame[name] = frame[name].fillna(frame[column])
        frame["n"] = frame["n"] if "n" in frame else None
        return frame, skipped

    def sweep(self, _=None, measure: bool = False) -> pd.DataFrame:
        """Sweep the chosen control; with `measure`, run every value that can run here."""
        control = self.sweep_control.value
        if measure:
            for value in sweep_values(control, self.values):
                try:
                    model, train, layout = resolve(self.values | {control: value})
                except (LayoutError, ValueError):
                    continue
                self._measure(model, train, layout, self.values["devices"])
        frame, skipped = self.sweep_frame(control)
        note = f"skipped: {'; '.join(skipped)}" if skipped else "every value is valid"
        self.sweep_note.value = f"<span class='parex-note'>{note}</span>"
        self.sweep_chart.chart = charts.sweep_chart(frame, control, self.chip.hbm_bytes)
        return frame

    def measure_sweep(self, _=None) -> pd.DataFrame | None:
        """Measure every valid value of the swept control (one at a time), then chart them."""
        if not self._busy.acquire(blocking=False):
            return None
        try:
            self.measure_button.disabled = self.sweep_measure_button.disabled = True
            frame = self.sweep(measure=True)
            self._redraw("overview", "measured", "compare")
            return frame
        finally:
            self.measure_button.disabled = self.sweep_measure_button.disabled = False
            self._busy.release()


def _empty():
    import altair as alt

    return alt.Chart(pd.DataFrame({"x": []})).mark_point()


__all__ = ["ComparePanel", "Entry", "SWEEPS", "sweep_values"]
