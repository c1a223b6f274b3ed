"""A sweep store in the Explorer's terms: each finished configuration of a store (a local sweep's,
a SLURM array's, `plan --verify`'s) as a measured row beside its prediction, in the frame, table
and charts the Explorer's "measured" panel shows for its own runs.

    rows = load_store("/shared/runs.jsonl")        # .frame: measured, then predicted, per config
    rows.frame, rows.table(), rows.notes           # .notes: what was left out, and why
    StoreView("/shared/runs.jsonl")                # in a notebook: path, hardware, Load

Each record is predicted the way `parex run` measured it (the preset, its dtype, batch, sequence,
remat and the measured layout on the measured device count), on the profile of the machine it
ran on: `cpu-local` for the emulated mesh, a named profile for accelerators.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape

import ipywidgets as w
import pandas as pd

from ..setting import EMULATED, platform_regime
from .. import charts
from ..charts.style import format_bytes, format_seconds
from ..config import TrainConfig, model_preset
from ..errors import InputError
from ..layout import Layout, LayoutError
from ..predict import predict
from ..record import Measurement, Prediction
from ..sweep import latest, measurement_of, read_records
from ..measure.compiled import WARMUP
from .measuring import ratio_text
from .state import profile_defaults
from .view import LOCAL, STYLE, chart_view, dropdown, hardware_names, html_view

SETTINGS = ("model", "global_batch", "microbatch", "seq_len", "remat", "dtype", "steps")


def setup_of(config: dict, m: Measurement):
    """(model, train, layout) that `parex run` measured for a sweep config (parex.cli.args's
    configs_from_args): a longer sequence than the preset's grows GPT's position table."""
    model = model_preset(config["model"])
    if config.get("dtype"):
        model = model.replace(dtype=config["dtype"])
    seq = config.get("seq_len")
    if seq and seq > model.seq_len:
        model = model.replace(name=model.name + ("*" if model.family == "gpt" else ""),
                              seq_len=seq)
    train = TrainConfig(global_batch=config["global_batch"], microbatch=config.get("microbatch"),
                        seq_len=seq, steps=config["steps"], remat=config.get("remat", "none"))
    return model, train, Layout.parse(m.layout, m.n_devices)


def prediction_of(config: dict, m: Measurement, hardware: str | None = None) -> Prediction:
    """The prediction beside a measured record, under the profile's defaults (as the Explorer
    pairs its own runs): `hardware`, else cpu-local for a run on the emulated CPU mesh."""
    if hardware is None:
        if platform_regime(m.platform) != EMULATED:
            raise InputError(f"{m.layout} was measured on {m.platform}: name the hardware "
                             f"profile it ran on, e.g. hardware='h100-sxm'")
        hardware = LOCAL
    model, train, layout = setup_of(config, m)
    return predict(model, train, layout, hardware, dtype=model.dtype,
                   **profile_defaults(hardware, model, model.dtype))


def _labels(configs: list[dict]) -> list[str]:
    """Each config's layout, and the settings that differ across the store where layouts
    repeat (the charts draw one panel per label)."""
    layouts = [c["layout"] for c in configs]
    if len(set(layouts)) == len(layouts):
        return layouts
    varying = [k for k in SETTINGS if len({str(c.get(k)) for c in configs}) > 1]
    return [" · ".join([c["layout"], *(f"{k}={c.get(k)}" for k in varying)]) for c in configs]


@dataclass
class StoreRows:
    """A store's finished configurations beside their predictions."""

    frame: pd.DataFrame  # measured row, then its predicted row, per finished config
    notes: list[str] = field(default_factory=list)  # what was left out, and why

    def table(self) -> pd.DataFrame:
        """One row per config: the measured panel's columns (MeasurePanel._history_rows)."""
        rows = []
        frame = self.frame
        for label in dict.fromkeys(frame["label"]) if len(frame) else []:
            m = frame[(frame["label"] == label) & (frame["source"] == "measured")].iloc[-1]
            m = m.to_dict() | {k: int(m[k]) for k in ("n_steps", "n_runs")}  # NaN on
            # predicted rows made these columns float
            p = frame[(frame["label"] == label) & (frame["source"] == "predicted")].iloc[-1]
            spread = (f"{format_seconds(m['step_time_min_s'])} – "
                      f"{format_seconds(m['step_time_max_s'])}")
            rows.append({"config": label, "model": m["model"], "devices": m["n_devices"],
                         "timed steps": m["n_steps"],
                         "measured step": format_seconds(m["step_time_s"]),
                         "fastest – slowest": spread,
                         f"predicted ({p['hardware']})": format_seconds(p["step_time_s"]),
                         "predicted / measured": ratio_text(p["step_time_s"], m),
                         "measured memory": format_bytes(m["memory_total_bytes"]),
                         "predicted memory": format_bytes(p["memory_total_bytes"]),
                         "loss (last)": f"{m['loss_last']:.3f}"})
        return pd.DataFrame(rows)

    def chart(self, title: str = "measured and predicted step time"):
        """The measured panel's charts: step time by part, and measured against predicted."""
        import altair as alt

        return alt.hconcat(charts.step_time_chart(self.frame, title),
                           charts.scatter_chart(self.frame)).resolve_scale(color="independent")


def load_store(path, hardware: str | None = None) -> StoreRows:
    """The finished (status ok) configurations of the store at `path` (its file and the
    shards cluster tasks add), each its latest record: a measured row (Measurement.to_row(),
    with n_steps timed and n_runs = 1) then its prediction's row, both with the config's
    `key` and a `label`. Failed and unpredictable configs are left out and named in `notes`."""
    records = latest(read_records(path))
    if not records:
        raise InputError(f"{path}: no records (is it a sweep store? `parex sweep --status "
                         f"--out {path}` shows where a sweep stands)")
    done = [r for r in records if r["status"] == "ok"]
    notes = []
    if len(done) < len(records):
        counts: dict = {}
        for r in records:
            if r["status"] != "ok":
                counts[r["status"]] = counts.get(r["status"], 0) + 1
        notes.append("not finished: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    rows = []
    for r, label in zip(done, _labels([r["config"] for r in done])):
        m = measurement_of(r["measurement"])
        try:
            p = prediction_of(r["config"], m, hardware)
        except (LayoutError, ValueError) as exc:  # InputError is a ValueError
            notes.append(f"{label}: not predicted: {str(exc).splitlines()[0]}")
            continue
        steps = r["config"]["steps"]
        timed = steps - WARMUP if steps > WARMUP else steps  # parex.measure.measure's
        tags = {"key": r["key"], "label": label}
        rows += [m.to_row() | {"n_steps": timed, "n_runs": 1} | tags, p.to_row() | tags]
    return StoreRows(pd.DataFrame(rows), notes)


def store_frame(path, hardware: str | None = None) -> pd.DataFrame:
    """load_store(path, hardware).frame."""
    return load_store(path, hardware).frame


class StoreView:
    """A sweep store's results in a notebook: its path, the hardware to predict on (auto: the
    machine the runs say they ran on), Load; the table and charts of the Explorer's measured
    panel below. `rows` holds what was loaded (None before a load, or after one failed)."""

    def __init__(self, path: str = "", hardware: str | None = None):
        self.rows: StoreRows | None = None
        self.path = w.Text(value=str(path), description="store", placeholder="runs.jsonl",
                           layout=w.Layout(width="420px"), style={"description_width": "60px"})
        self.hardware = dropdown("hardware", ["auto", *hardware_names()], hardware or "auto")
        self.button = w.Button(description="Load", icon="folder-open")
        self.button.on_click(lambda _: self.load())
        self.note, self.table = html_view(), html_view()
        self.charts = chart_view()
        self.widget = w.VBox([w.HTML(STYLE), w.HBox([self.path, self.hardware, self.button]),
                              self.note, self.table, self.charts])
        if path:
            self.load()

    def load(self, path=None) -> StoreRows | None:
        """Read the store (at `path`, else the path box) into the table and charts; a problem
        shows in the note line."""
        if path is not None:
            self.path.value = str(path)
        hardware = None if self.hardware.value == "auto" else self.hardware.value
        try:
            rows = load_store(self.path.value, hardware)
        except (OSError, ValueError) as exc:
            self.rows = None
            self.note.value = f"<div class='parex-bad'>{escape(str(exc))}</div>"
            return None
        self.rows = rows
        done = rows.frame["label"].nunique() if len(rows.frame) else 0
        text = "; ".join([f"{done} finished configurations", *rows.notes])
        self.note.value = f"<span class='parex-note'>{escape(text)}</span>"
        self.table.value = rows.table().to_html(index=False, classes="parex-table", border=0)
        self.charts.chart = rows.chart() if done else _empty()
        return rows

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)


def _empty():
    import altair as alt

    return alt.Chart(pd.DataFrame()).mark_point()


__all__ = ["StoreRows", "StoreView", "load_store", "prediction_of", "setup_of", "store_frame"]
