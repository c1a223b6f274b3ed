"""The Explorer's time-to-train panel: the whole run of the prediction on screen, failures
included (parex.predict.goodput): days, goodput, interruptions expected, the checkpoint
interval chosen (Daly's optimum), device-hours and energy, under a failure rate, a storage
bandwidth and a restart time the panel's controls set.

    explorer.show("time to train")
    explorer.time_to_train            # the TimeToTrain drawn (None until drawn)
"""

from __future__ import annotations

import html

import ipywidgets as w

from ..measure.report import human_bytes
from ..predict.goodput import (CHINCHILLA_TOKENS_PER_PARAM, DEFAULT_FAILURES, FAILURE_RATES,
                               HOUR, RESTART_S, STORAGE_BANDWIDTH, Reliability, of_prediction)
from ..units import format_count, format_seconds
from .view import dropdown

TOKEN_CHOICES = ("Chinchilla (20 per parameter)", 1e9, 1e10, 1e11, 1e12, 1.5e13)


class TimeToTrainPanel:
    """Mixed into the Explorer: `time_controls`, `time_view` and `_show_time_to_train`."""

    def _build_time_views(self) -> None:
        self.time_to_train = None
        tokens = [(c if isinstance(c, str) else f"{format_count(c)} tokens", c)
                  for c in TOKEN_CHOICES]
        self.time_controls = {
            "tokens": dropdown("run", tokens, TOKEN_CHOICES[0]),
            "failures": dropdown("failures", [
                (f"{k}: {v * 1000:.2f} / 1000 node-days", k) for k, v in FAILURE_RATES.items()],
                DEFAULT_FAILURES),
            "storage": w.BoundedFloatText(value=STORAGE_BANDWIDTH / 1e9, min=0.001, max=1e6,
                                          description="storage GB/s",
                                          style={"description_width": "90px"},
                                          layout=w.Layout(width="210px")),
            "restart": w.BoundedFloatText(value=RESTART_S / 60, min=0, max=1e4,
                                          description="restart min",
                                          style={"description_width": "90px"},
                                          layout=w.Layout(width="210px")),
        }
        for control in self.time_controls.values():
            control.observe(lambda _: self._redraw("time to train"), "value")
        self.time_view = w.HTML(layout=w.Layout(width="100%"))

    def time_panel(self) -> w.VBox:
        return w.VBox([w.HBox(list(self.time_controls.values())), self.time_view])

    def _time_run(self) -> dict:
        c = self.time_controls
        tokens = c["tokens"].value
        if isinstance(tokens, str):
            tokens = CHINCHILLA_TOKENS_PER_PARAM * self.setting.model.n_params
        return {"tokens": tokens, "reliability": Reliability.named(
            c["failures"].value, storage_bandwidth=c["storage"].value * 1e9,
            restart_s=c["restart"].value * 60)}

    def _show_time_to_train(self) -> None:
        if self.prediction is None or self.prediction.diloco:
            self.time_to_train = None
            self.time_view.value = "<i>time to train: a synchronous layout's prediction</i>"
            return
        t = self.time_to_train = of_prediction(self.prediction, self.setting.model,
                                               self.setting.cluster, **self._time_run())
        wall = (f"{t.days:,.1f} days" if t.days >= 1 else f"{t.wall_s / HOUR:.2f} hours")
        energy = (f"{t.energy_kwh / 1000:,.1f} MWh ({t.power_w:g} W per device: "
                  f"{html.escape(t.power_source)})" if t.energy_kwh is not None
                  else html.escape(t.power_source))
        rows = [("time to train", f"<b>{wall}</b> for {format_count(t.tokens)} tokens "
                 f"({t.steps:,.0f} steps of {format_seconds(t.step_time_s)})"),
                ("goodput", f"<b>{t.goodput:.1%}</b> of the wall time is training"),
                ("interruptions", f"{t.interruptions:,.0f} expected · MTTF "
                 f"{t.mttf_s / HOUR:.2f} h on {t.nodes:g} nodes"),
                ("checkpoint interval", f"{format_seconds(t.interval_s)} (Daly's optimum) · "
                 f"save {format_seconds(t.save_s)} of {human_bytes(t.checkpoint_bytes)}"),
                ("device-hours", f"{t.gpu_hours:,.0f}"), ("energy", energy)]
        body = "".join(f"<tr><td>{k}</td><td>{v}</td></tr>" for k, v in rows)
        self.time_view.value = (
            f"<table>{body}</table><small>Failures: arXiv 2410.21680's rates; goodput: Daly's "
            f"complete model (parex.predict.goodput); `parex predict --tokens` prints the "
            f"same.</small>")
