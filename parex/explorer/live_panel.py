"""The Explorer's live view: the status line with its fit badge and regime, the notes on what a
profile hides, the suggestion buttons, and the overview, pipeline-and-mesh and explain panels.
A mixin of parex.explorer.widget.Explorer."""

from __future__ import annotations

from html import escape

import altair as alt
import pandas as pd

from .. import charts
from ..charts.style import FIT_COLORS, format_bytes, format_count, format_seconds, label
from ..interop import Unexpressible, emit
from ..measure.report import load_note
from ..record import KINDS
from ..setting import describe
from .gantt import gantt_costs
from .guide import regime_of
from .measure_panel import LOCAL_HARDWARE, run_key
from .view import GPU_FOR_BUBBLE, set_stale, suggestion_buttons


class LivePanel:
    """Needs: controls, prediction, explained, error, ways, fixes, layout, model, train, chip,
    n_devices, pooled and the views (status, notes, gpu_button, guide, command_for, cli_line,
    chart, pictures, compare_chart, explain_table)."""

    def _predicted_row(self) -> dict:
        return self.prediction.to_row() | {f"formula_{k}": v for k, v in self.explained.items()}

    def _live_frame(self) -> pd.DataFrame:
        """The prediction, and the pooled measurement of the same setup when it ran on the
        hardware being predicted."""
        rows = [self._predicted_row()]
        measured = self.pooled(run_key(self.model, self.train, self.layout, self.n_devices))
        if measured and self.controls["hardware"].value == LOCAL_HARDWARE:
            rows.insert(0, measured)
        return pd.DataFrame(rows)

    def _show_live(self) -> None:
        if self.prediction is None:
            return
        self.chart.chart = charts.overview_chart(self._live_frame(), self.chip.hbm_bytes,
                                                 f"{self.chip.name} memory")

    def _show_pictures(self) -> None:
        mesh = charts.mesh_chart(self.layout, self.chip.devices_per_node)
        timed = gantt_costs(self.prediction, self.setting)
        if timed is None:
            self.pictures.chart = mesh
            return
        schedule, costs, note = timed
        gantt = charts.gantt_chart(schedule, costs, width=620, subtitle=note)
        self.pictures.chart = alt.vconcat(gantt, mesh).resolve_scale(color="independent")

    def _show_explain(self) -> None:
        rows = [{"number": label(name) + (" bytes" if name in KINDS else ""),
                 "formula, values plugged in": text} for name, text in self.explained.items()]
        self.explain_table.value = pd.DataFrame(rows).to_html(index=False, border=0,
                                                              classes="parex-formulas")

    def _show_status(self) -> None:
        set_stale(self.stale_views, self.error is not None)
        self.guide.children = suggestion_buttons(self.ways or self.fixes, self)
        if self.error:
            self.status.value = ("<div class='parex-bad'><b>invalid layout:</b> "
                                 f"{escape(self.error)}<br><i>the charts below show the last "
                                 "valid layout</i></div>")
            self.notes.value, self.gpu_button.layout.display = "", "none"
            return
        self.status.value = self._status_text()
        self._show_command()
        self._show_notes()

    def _show_command(self) -> None:
        """The command that predicts what the Explorer shows: `parex predict ...`, or the
        framework's options for the same resolved Setting (parex.interop.emit; what the
        framework cannot express is said, with the nearest layout it can run)."""
        framework = self.command_for.value
        if framework == "parex":
            text = self.cli_command()
        elif self.error is not None:
            return
        else:
            try:
                text = emit(framework, self.setting)
            except Unexpressible as refusal:  # it names the framework and the nearest layout
                text = str(refusal)
        code = f"<code class='parex-note'>{escape(text)}</code>"
        self.cli_line.value = f"<pre>{code}</pre>" if "\n" in text else code  # a TOML: lines

    def _status_text(self) -> str:
        s, p = self.setting, self.prediction
        model, cluster = s.model, s.cluster
        total, capacity = p.memory_bytes_per_device["total"], p.memory_capacity_bytes
        fit = ("fits" if p.fits else
               f"does not fit: {format_bytes(p.over_capacity_bytes)} over")
        badge = (f"<span class='parex-badge' style='background:"
                 f"{FIT_COLORS['fits' if p.fits else 'does not fit']}'>{fit}</span>")
        used = (f"{p.n_devices} devices" if p.n_devices == cluster.n_devices else
                f"{p.n_devices} of the {cluster.n_devices} devices")
        return (f"<div><b>{escape(str(self.layout))}</b> on {used} of {escape(cluster.name)} · "
                f"{escape(model.name)}, {format_count(model.n_params)} "
                f"parameters, {model.dtype}, remat {s.train.remat} · predicted "
                f"<b>{format_seconds(p.step_time_s['total'])}</b> per step, "
                f"<b>{format_bytes(total)}</b> of {format_bytes(capacity)} per device {badge} "
                f"· <b>{regime_of(p)}</b> · MFU {p.mfu:.0%}</div>"
                f"<div class='parex-note'>assumes {escape(assumptions_line(p))}</div>")

    def _show_notes(self) -> None:
        """One line on what the profile hides, and what an executable check says."""
        notes, emulated = [], self.setting.emulated
        bubble = getattr(self.prediction, "step_time_s", {}).get("bubble", 0.0)
        if emulated and self.layout.stage > 1 and bubble == 0:  # no lockstep loss (ticks.py)
            notes.append("On cpu-local the predicted bubble is 0: the emulated devices share "
                         "the host's cores, so an idle stage's core serves another stage. "
                         "A GPU profile shows the bubble.")
        if emulated and (load := load_note(self.chip.calibration)):
            notes.append(load)  # a busy machine: measured steps will not match the prediction
        if not getattr(self.prediction, "executable", True):
            reason = getattr(self.prediction, "executable_reason", "")
            notes.append(f"Valid, but parex cannot run it: {reason}")
        self.notes.value = "".join(f"<div class='parex-note'>{escape(n, quote=False)}</div>"
                                   for n in notes)
        show = emulated and self.layout.stage > 1 and GPU_FOR_BUBBLE in \
            self.controls["hardware"].options
        self.gpu_button.layout.display = "" if show else "none"


def assumptions_line(p) -> str:
    """The Setting the prediction was made under, besides the model and layout, in one line."""
    a = getattr(p, "assumptions", None)
    if not a:
        return f"{p.hardware} · convention {p.convention}"
    return describe(a)


__all__ = ["LivePanel", "assumptions_line"]
