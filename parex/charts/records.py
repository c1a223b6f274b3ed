"""Charts from the tidy Record DataFrame: what was measured beside what is predicted.

Every chart function takes the frame of `parex.record.records_frame` (one row per Measurement or
Prediction, `source` in {"measured", "predicted"}) and returns an altair chart. The `*_long` helpers
reshape that frame into the long form a chart draws, so tests and notebooks can read the numbers
behind a picture. `save` writes PNG or SVG offline through vl-convert.
"""

from __future__ import annotations

from pathlib import Path

import altair as alt
import numpy as np
import pandas as pd

from ..record import KINDS

SOURCES = ("measured", "predicted")
SOURCE_SCALE = alt.Scale(domain=list(SOURCES), range=["#4c78a8", "#f58518"])

# Stacked memory parts. Measured: what XLA's memory analysis reports, with donated outputs
# (alias) reusing argument buffers, so argument + (output − alias) + temp = total.
MEASURED_MEMORY = ("argument", "output − alias", "temp")
PREDICTED_MEMORY = ("params", "grads", "optimizer", "activations", "temp")
STEP_PARTS = ("compute", "exposed_comm", "bubble")
# Fixed colours, so a part looks the same in every chart: measured in blues, predicted in warm
# tones, temp (both sides) grey.
MEMORY_COLORS = {"argument": "#4c78a8", "output − alias": "#9ecae9", "params": "#f58518",
                 "grads": "#e45756", "optimizer": "#eeca3b", "activations": "#b279a2",
                 "temp": "#bab0ac"}
STEP_COLORS = {"measured median": "#4c78a8", "compute": "#f58518", "exposed_comm": "#e45756",
               "bubble": "#bab0ac"}


def _color(field: str, colors: dict, title: str, present) -> alt.Color:
    """A colour per value of `field`, fixed by `colors`; the legend lists the values present."""
    domain = [k for k in colors if k in set(present)]
    return alt.Color(f"{field}:N", title=title, sort=domain,
                     scale=alt.Scale(domain=domain, range=[colors[k] for k in domain]))

# Metrics a measured-vs-predicted scatter can compare: column -> axis title.
METRICS = {
    "step_time_s": "step time (s)",
    "memory_total_bytes": "memory per device (bytes)",
    "memory_argument_bytes": "argument memory per device (bytes)",
    "flops_per_device": "FLOPs per device per step",
    "comm_total_bytes": "collective bytes per device per step",
}


# --- reshaping -------------------------------------------------------------------------------
def _labelled(df: pd.DataFrame) -> pd.DataFrame:
    """Add `label`, the facet title: the layout, prefixed by the model when there are several."""
    out = df.copy()
    several = "model" in out and out["model"].nunique() > 1
    out["label"] = (out["model"] + " " + out["layout"]) if several else out["layout"]
    return out


def _latest(df: pd.DataFrame) -> pd.DataFrame:
    """The last row per (label, source): a layout measured twice is drawn once, not stacked."""
    return _labelled(df).drop_duplicates(["label", "source"], keep="last")


def _value(row: pd.Series, column: str) -> float:
    value = row.get(column, np.nan)
    return float(value) if pd.notna(value) else np.nan


def memory_long(df: pd.DataFrame) -> pd.DataFrame:
    """(label, source, part, bytes): each side's breakdown, plus a `total` part per row."""
    rows = []
    for _, r in _latest(df).iterrows():
        if r["source"] == "measured":
            parts = {"argument": _value(r, "memory_argument_bytes"),
                     "output − alias": _value(r, "memory_output_bytes")
                     - _value(r, "memory_alias_bytes"),
                     "temp": _value(r, "memory_temp_bytes")}
        else:
            parts = {p: _value(r, f"memory_{p}_bytes") for p in PREDICTED_MEMORY}
        parts["total"] = _value(r, "memory_total_bytes")
        rows += [{"label": r["label"], "source": r["source"], "part": part, "bytes": value}
                 for part, value in parts.items() if pd.notna(value)]
    return pd.DataFrame(rows, columns=["label", "source", "part", "bytes"])


def step_time_long(df: pd.DataFrame) -> pd.DataFrame:
    """(label, source, part, ms, lo_ms, hi_ms): the measured median with its min–max, and the
    predicted compute, exposed communication and bubble (milliseconds)."""
    rows = []
    for _, r in _latest(df).iterrows():
        base = {"label": r["label"], "source": r["source"]}
        if r["source"] == "measured":
            rows.append(base | {"part": "measured median", "ms": 1e3 * _value(r, "step_time_s"),
                                "lo_ms": 1e3 * _value(r, "step_time_min_s"),
                                "hi_ms": 1e3 * _value(r, "step_time_max_s")})
            continue
        parts = {p: _value(r, f"step_{p}_s") for p in STEP_PARTS}
        if all(pd.isna(v) for v in parts.values()):  # only a total was predicted
            parts = {"compute": _value(r, "step_time_s")}
        rows += [base | {"part": p, "ms": 1e3 * v, "lo_ms": np.nan, "hi_ms": np.nan}
                 for p, v in parts.items() if pd.notna(v)]
    return pd.DataFrame(rows, columns=["label", "source", "part", "ms", "lo_ms", "hi_ms"])


def collectives_long(df: pd.DataFrame) -> pd.DataFrame:
    """(label, source, kind, bytes) for every collective kind that moves bytes somewhere."""
    rows = []
    for _, r in _latest(df).iterrows():
        for kind in KINDS:
            value = _value(r, f"comm_{kind.replace('-', '_')}_bytes")
            rows.append({"label": r["label"], "source": r["source"], "kind": kind,
                         "bytes": 0.0 if pd.isna(value) else value})
    out = pd.DataFrame(rows, columns=["label", "source", "kind", "bytes"])
    used = out.groupby("kind")["bytes"].transform("sum") > 0
    return out[used].reset_index(drop=True)


def _with_comm_total(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    columns = [f"comm_{k.replace('-', '_')}_bytes" for k in KINDS if
               f"comm_{k.replace('-', '_')}_bytes" in out]
    out["comm_total_bytes"] = out[columns].fillna(0).sum(axis=1) if columns else np.nan
    return out


def pairs(df: pd.DataFrame, metric: str = "step_time_s") -> pd.DataFrame:
    """(label, measured, predicted, error): the last measurement and prediction of each layout
    side by side; error = (predicted − measured) / measured."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}")
    data = _latest(_with_comm_total(df))
    if metric not in data:
        return pd.DataFrame(columns=["label", "measured", "predicted", "error"])
    wide = data.pivot(index="label", columns="source", values=metric)
    for source in SOURCES:
        if source not in wide:
            wide[source] = np.nan
    wide = wide.dropna(subset=list(SOURCES)).reset_index()[["label", *SOURCES]]
    wide["error"] = (wide["predicted"] - wide["measured"]) / wide["measured"]
    return wide


# --- charts ----------------------------------------------------------------------------------
def _source_x() -> alt.X:
    return alt.X("source:N", sort=list(SOURCES), title=None, axis=alt.Axis(labelAngle=-30))


def _facet(layered: alt.LayerChart, title: str, width: int = 110) -> alt.FacetChart:
    column = alt.Column("label:N", title=None, sort=None)
    return layered.properties(width=width).facet(column=column, title=title)


def memory_chart(df: pd.DataFrame, title: str = "memory per device") -> alt.FacetChart:
    """Per layout: the measured breakdown beside the predicted one, a black tick at each total."""
    long = memory_long(df)
    y = alt.Y("sum(bytes):Q", title="bytes per device", axis=alt.Axis(format="~s"))
    bars = alt.Chart().mark_bar().encode(
        x=_source_x(), y=y, color=_color("part", MEMORY_COLORS, "memory part", long["part"]),
        tooltip=["label:N", "source:N", "part:N", alt.Tooltip("bytes:Q", format=",.0f")],
    ).transform_filter(alt.datum.part != "total")
    ticks = alt.Chart().mark_tick(color="black", thickness=2, size=30).encode(
        x=_source_x(), y=alt.Y("bytes:Q"),
        tooltip=["label:N", "source:N", alt.Tooltip("bytes:Q", title="total", format=",.0f")],
    ).transform_filter(alt.datum.part == "total")
    return _facet(alt.layer(bars, ticks, data=long), title)


def step_time_chart(df: pd.DataFrame, title: str = "step time") -> alt.FacetChart:
    """Per layout: the measured median with a min–max rule beside the predicted compute,
    exposed communication and bubble, stacked."""
    long = step_time_long(df)
    bars = alt.Chart().mark_bar().encode(
        x=_source_x(), y=alt.Y("sum(ms):Q", title="step time (ms)"),
        color=_color("part", STEP_COLORS, "step time part", long["part"]),
        tooltip=["label:N", "source:N", "part:N", alt.Tooltip("ms:Q", format=".3g")])
    spread = alt.Chart().mark_rule(color="black").encode(
        x=_source_x(), y="lo_ms:Q", y2="hi_ms:Q",
        tooltip=[alt.Tooltip("lo_ms:Q", title="min ms", format=".3g"),
                 alt.Tooltip("hi_ms:Q", title="max ms", format=".3g")],
    ).transform_filter("isValid(datum.lo_ms)")
    return _facet(alt.layer(bars, spread, data=long), title)


def collectives_chart(df: pd.DataFrame, title: str = "collective bytes per device per step"):
    """Per layout and collective kind: measured bytes beside predicted bytes."""
    long = collectives_long(df)
    bars = alt.Chart().mark_bar().encode(
        x=alt.X("kind:N", title=None, sort=list(KINDS), axis=alt.Axis(labelAngle=-30)),
        xOffset=alt.XOffset("source:N", sort=list(SOURCES)),
        y=alt.Y("bytes:Q", title="bytes per device", axis=alt.Axis(format="~s")),
        color=alt.Color("source:N", scale=SOURCE_SCALE),
        tooltip=["label:N", "source:N", "kind:N", alt.Tooltip("bytes:Q", format=",.0f")])
    return _facet(alt.layer(bars, data=long), title, width=60 * max(1, long["kind"].nunique()))


def overview_chart(df: pd.DataFrame) -> alt.VConcatChart:
    """Memory and step time side by side, collective bytes below: the Explorer's live view."""
    top = alt.hconcat(memory_chart(df), step_time_chart(df)).resolve_scale(color="independent")
    return alt.vconcat(top, collectives_chart(df)).resolve_scale(color="independent")


def scatter_chart(df: pd.DataFrame, metric: str = "step_time_s", log: bool | None = None,
                  title: str | None = None) -> alt.LayerChart:
    """Measured against predicted over every layout tried, with the line y = x and each point
    labelled with its error (predicted − measured) / measured."""
    data = pairs(df, metric)
    values = data[["measured", "predicted"]].to_numpy(float).ravel()
    values = values[np.isfinite(values) & (values > 0)]
    lo, hi = (values.min(), values.max()) if len(values) else (1.0, 10.0)
    if log is None:
        log = hi / lo > 100
    scale = alt.Scale(type="log" if log else "linear", zero=False, nice=False,
                      domain=[lo / 1.5, hi * 1.5] if log else [0, hi * 1.1])
    axis_title = METRICS[metric]
    diagonal = pd.DataFrame({"predicted": [scale.domain[0], scale.domain[1]]})
    diagonal["measured"] = diagonal["predicted"]
    line = alt.Chart(diagonal).mark_line(color="gray", strokeDash=[4, 4], clip=True).encode(
        x=alt.X("predicted:Q", scale=scale), y=alt.Y("measured:Q", scale=scale))
    base = alt.Chart(data).encode(
        x=alt.X("predicted:Q", scale=scale, title=f"predicted {axis_title}"),
        y=alt.Y("measured:Q", scale=scale, title=f"measured {axis_title}"))
    points = base.mark_circle(size=80).encode(
        color=alt.Color("label:N", title="layout"),
        tooltip=["label:N", alt.Tooltip("measured:Q", format=".4g"),
                 alt.Tooltip("predicted:Q", format=".4g"), alt.Tooltip("error:Q", format="+.1%")])
    labels = base.mark_text(align="left", dx=7, dy=-7).encode(
        text=alt.Text("error:Q", format="+.0%"))
    return alt.layer(line, points, labels).properties(
        title=title or f"measured vs predicted: {axis_title}", width=320, height=320)


def regime(df: pd.DataFrame) -> pd.Series:
    """What bounds each predicted row: memory when it does not fit in the device's HBM, else the
    largest part of its step time — compute, exposed communication or the pipeline bubble."""
    parts = {"compute": "compute-bound", "exposed_comm": "communication-bound",
             "bubble": "bubble-bound"}
    times = df[[f"step_{p}_s" for p in parts]].fillna(0.0).to_numpy(float)
    label = np.array(list(parts.values()))[times.argmax(axis=1)]
    fits = df["fits"].fillna(True).astype(bool).to_numpy() if "fits" in df else True
    return pd.Series(np.where(fits, label, "memory-bound (does not fit)"), index=df.index)


def whatif_chart(df: pd.DataFrame, title: str = "predicted step time and what bounds it"):
    """One bar per predicted row (label: model, layout and hardware): compute, exposed
    communication and bubble stacked, annotated with the regime and the MFU."""
    data = _labelled(df[df["source"] == "predicted"])
    data["label"] = data["label"] + " · " + data["hardware"]
    data["regime"] = regime(data)
    data["note"] = data["regime"] + " · MFU " + (100 * data["mfu"]).round(0).astype(int).astype(
        str) + "%"
    long = data.melt(id_vars=["label", "regime", "note", "step_time_s"],
                     value_vars=[f"step_{p}_s" for p in STEP_PARTS], var_name="part",
                     value_name="seconds")
    long["part"] = long["part"].str.removeprefix("step_").str.removesuffix("_s")
    y = alt.Y("label:N", sort=None, title=None)
    bars = alt.Chart(long).mark_bar().encode(
        x=alt.X("sum(seconds):Q", title="predicted step time (s)"), y=y,
        color=_color("part", STEP_COLORS, "step time part", long["part"]),
        tooltip=["label:N", "part:N", alt.Tooltip("seconds:Q", format=".3g"), "regime:N"])
    notes = alt.Chart(data).mark_text(align="left", dx=4).encode(
        x="step_time_s:Q", y=y, text="note:N")
    return (bars + notes).properties(title=title, width=420)


def scaling_chart(df: pd.DataFrame, y: str = "memory_argument_bytes", x: str = "n_devices",
                  by: str = "layout", title: str | None = None) -> alt.Chart:
    """`y` against `x` (e.g. memory per device as the device count grows), one line per value of
    `by`; measured lines solid, predicted dashed. Both axes are log scales."""
    for column in (x, y, by):
        if column not in df:
            raise ValueError(f"the frame has no column {column!r}; add it (df.assign) or pick one "
                             f"of {', '.join(df.columns)}")
    data = df[list(dict.fromkeys([x, y, by, "source", "layout"]))].dropna(subset=[y])
    return alt.Chart(data).mark_line(point=True).encode(
        x=alt.X(f"{x}:Q", scale=alt.Scale(type="log", base=2), title=x.replace("_", " "),
                axis=alt.Axis(values=sorted(data[x].unique().tolist()))),
        y=alt.Y(f"{y}:Q", scale=alt.Scale(type="log"), axis=alt.Axis(format="~s"),
                title=y.replace("_", " ")),
        color=alt.Color(f"{by}:N", sort=None),
        strokeDash=alt.StrokeDash("source:N", sort=list(SOURCES),
                                  legend=alt.Legend(symbolType="stroke")),
        detail="source:N",
        tooltip=["layout:N", "source:N", f"{x}:Q", alt.Tooltip(f"{y}:Q", format=",.4~g")],
    ).properties(title=title or f"{y.replace('_', ' ')} against {x.replace('_', ' ')}",
                 width=360, height=260)


def enable_offline() -> None:
    """Store Vega's JavaScript in the notebook, so charts render in a browser without internet
    (~0.9 MB per chart). Skip it where no browser renders, e.g. when a test executes a notebook."""
    alt.JupyterChart.enable_offline()
    alt.renderers.enable("jupyter", offline=True)


def save(chart: alt.TopLevelMixin, path: str | Path, scale: float = 2.0) -> Path:
    """Write `chart` as PNG or SVG (from the suffix) without a network, via vl-convert."""
    path = Path(path)
    if path.suffix not in (".png", ".svg"):
        raise ValueError(f"cannot export {path.name}: use a .png or .svg file name")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".png":
        chart.save(str(path), scale_factor=scale)
    else:
        chart.save(str(path))
    return path


__all__ = ["METRICS", "collectives_chart", "collectives_long", "enable_offline", "memory_chart",
           "memory_long", "overview_chart", "pairs", "regime", "save", "scaling_chart",
           "scatter_chart", "step_time_chart", "step_time_long", "whatif_chart"]
