"""Charts from the tidy Record DataFrame: what was measured beside what is predicted.

Every chart function takes the frame of `parex.record.records_frame` (one row per Measurement or
Prediction, `source` in {"measured", "predicted"}) and returns an altair chart. The `*_long` helpers
reshape that frame into the long form a chart draws, so tests and notebooks can read the numbers
behind a picture. Units, colours and labels follow parex.charts.style everywhere. `save` writes
PNG or SVG offline through vl-convert.
"""

from __future__ import annotations

from pathlib import Path

import altair as alt
import numpy as np
import pandas as pd

from ..record import KINDS
from .parts import (SOURCES, facet, labelled, latest, memory_chart, memory_long,
                    step_time_chart, step_time_long)
from .style import (MEASURED, NEUTRAL, SPAN_FOR_LOG, TIME_COLORS, bytes_unit, color,
                    format_bytes, format_count, format_flops, format_seconds, label, seconds_unit,
                    source_color)

# Metrics a measured-vs-predicted scatter can compare: column -> (axis title, kind of unit).
METRICS = {
    "step_time_s": ("step time", "seconds"),
    "memory_total_bytes": ("memory per device", "bytes"),
    "memory_argument_bytes": ("argument memory per device", "bytes"),
    "flops_per_device": ("FLOPs per device per step", "flops"),
    "comm_total_bytes": ("collective bytes per device per step", "bytes"),
}


def _unit(kind: str, magnitude: float) -> tuple[str, float]:
    if kind == "bytes":
        return bytes_unit(magnitude)
    if kind == "seconds":
        return seconds_unit(magnitude)
    return "", 1.0


def _formatter(kind: str):
    return {"bytes": format_bytes, "seconds": format_seconds, "flops": format_flops}.get(
        kind, format_count)


def _value(row: pd.Series, column: str) -> float:
    value = row.get(column, np.nan)
    return float(value) if pd.notna(value) else np.nan


# --- reshaping -------------------------------------------------------------------------------
def collectives_long(df: pd.DataFrame) -> pd.DataFrame:
    """(label, source, kind, bytes, formula) for every collective kind that moves bytes."""
    rows = []
    for _, r in latest(df).iterrows():
        for kind in KINDS:
            value = _value(r, f"comm_{kind.replace('-', '_')}_bytes")
            note = r.get(f"formula_{kind}")
            rows.append({"label": r["label"], "source": r["source"], "kind": kind,
                         "bytes": 0.0 if pd.isna(value) else value,
                         "formula": note if isinstance(note, str) else
                         ("from the compiled HLO" if r["source"] == "measured" else "")})
    out = pd.DataFrame(rows, columns=["label", "source", "kind", "bytes", "formula"])
    used = out.groupby("kind")["bytes"].transform("sum") > 0
    return out[used].reset_index(drop=True)


def _with_comm_total(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    columns = [f"comm_{k.replace('-', '_')}_bytes" for k in KINDS if
               f"comm_{k.replace('-', '_')}_bytes" in out]
    out["comm_total_bytes"] = out[columns].fillna(0).sum(axis=1) if columns else np.nan
    return out


def pairs(df: pd.DataFrame, metric: str = "step_time_s") -> pd.DataFrame:
    """(label, measured, predicted, error, ratio, lo, hi): the last measurement and prediction
    of each layout side by side; error = (predicted − measured) / measured, ratio = predicted /
    measured, lo and hi the measured spread (step time: the fastest and slowest step)."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}")
    data = latest(_with_comm_total(df))
    columns = ["label", "measured", "predicted", "error", "ratio", "lo", "hi"]
    if metric not in data:
        return pd.DataFrame(columns=columns)
    wide = data.pivot(index="label", columns="source", values=metric)
    for source in SOURCES:
        if source not in wide:
            wide[source] = np.nan
    wide = wide.dropna(subset=list(SOURCES)).reset_index()[["label", *SOURCES]]
    wide["error"] = (wide["predicted"] - wide["measured"]) / wide["measured"]
    wide["ratio"] = wide["predicted"] / wide["measured"]
    measured = data[data["source"] == "measured"].set_index("label")
    for end, column in (("lo", "step_time_min_s"), ("hi", "step_time_max_s")):
        spread = measured[column] if metric == "step_time_s" and column in measured else None
        wide[end] = wide["label"].map(spread) if spread is not None else wide["measured"]
    return wide[columns]


# --- charts ----------------------------------------------------------------------------------
def collectives_chart(df: pd.DataFrame, title: str = "collective bytes per device per step"):
    """Per layout and collective kind: measured bytes beside predicted, in the measured and
    predicted colours of parex.charts.style (the legend lists only the sides drawn)."""
    long = collectives_long(df)
    unit, size = bytes_unit(float(long["bytes"].max()) if len(long) else 0.0)
    long["value"] = long["bytes"] / size
    long["amount"] = long["bytes"].map(format_bytes)
    bars = alt.Chart().mark_bar().encode(
        x=alt.X("kind:N", title=None, sort=list(KINDS), axis=alt.Axis(labelAngle=-30)),
        xOffset=alt.XOffset("source:N", sort=list(SOURCES)),
        y=alt.Y("value:Q", title=f"bytes per device ({unit})"),
        color=source_color(long["source"], title="side"),
        tooltip=["label:N", "source:N", "kind:N", "amount:N",
                 alt.Tooltip("formula:N", title="how")])
    return facet(alt.layer(bars, data=long), title,
                 width=max(110, 60 * long["kind"].nunique()))


def overview_chart(df: pd.DataFrame, capacity: float | None = None,
                   capacity_name: str = "HBM") -> alt.VConcatChart:
    """Memory (with the device's capacity), step time and collective bytes side by side: the
    Explorer's live view. With several layouts the collectives go below."""
    panels = [memory_chart(df, capacity=capacity, capacity_name=capacity_name),
              step_time_chart(df)]
    comm = None if collectives_long(df).empty else collectives_chart(df)
    if comm is not None and latest(df)["label"].nunique() == 1:
        return alt.hconcat(*panels, comm).resolve_scale(color="independent")
    top = alt.hconcat(*panels).resolve_scale(color="independent")
    if comm is None:
        return alt.vconcat(top)
    return alt.vconcat(top, comm).resolve_scale(color="independent")


def scatter_chart(df: pd.DataFrame, metric: str = "step_time_s", log: bool | None = None,
                  title: str | None = None) -> alt.LayerChart:
    """Measured against predicted over every layout tried, with the line y = x, the measured
    spread as an error bar, and each point labelled with predicted / measured."""
    data = pairs(df, metric)
    name, kind = METRICS[metric]
    values = data[["measured", "predicted", "lo", "hi"]].to_numpy(float).ravel()
    values = values[np.isfinite(values) & (values > 0)]
    lo, hi = (values.min(), values.max()) if len(values) else (1.0, 10.0)
    unit, size = _unit(kind, hi)
    for column in ("measured", "predicted", "lo", "hi"):
        data[f"{column}_v"] = data[column] / size
    fmt = _formatter(kind)
    data["measured_text"] = data["measured"].map(fmt)
    data["predicted_text"] = data["predicted"].map(fmt)
    data["ratio_text"] = data["ratio"].map(lambda r: f"{r:.2f}×")
    lo, hi = lo / size, hi / size
    if log is None:
        log = hi / lo >= SPAN_FOR_LOG
    scale = alt.Scale(type="log" if log else "linear", zero=False, nice=False,
                      domain=[lo / 1.5, hi * 1.5] if log else [0, hi * 1.1])
    suffix = f" ({unit})" if unit else ""
    diagonal = pd.DataFrame({"predicted_v": [scale.domain[0], scale.domain[1]]})
    diagonal["measured_v"] = diagonal["predicted_v"]
    line = alt.Chart(diagonal).mark_line(color="gray", strokeDash=[4, 4], clip=True).encode(
        x=alt.X("predicted_v:Q", scale=scale), y=alt.Y("measured_v:Q", scale=scale))
    base = alt.Chart(data).encode(
        x=alt.X("predicted_v:Q", scale=scale, title=f"predicted {name}{suffix}"),
        y=alt.Y("measured_v:Q", scale=scale, title=f"measured {name}{suffix}"))
    tooltip = ["label:N", alt.Tooltip("measured_text:N", title="measured"),
               alt.Tooltip("predicted_text:N", title="predicted"),
               alt.Tooltip("ratio_text:N", title="predicted / measured")]
    bars = base.mark_rule(color=NEUTRAL).encode(y="lo_v:Q", y2="hi_v:Q")
    points = base.mark_circle(size=70, color=MEASURED, opacity=1).encode(tooltip=tooltip)
    labels = base.mark_text(align="left", dx=7, dy=-7, fontSize=10).encode(text="ratio_text:N")
    return alt.layer(line, bars, points, labels).properties(
        title=title or f"measured vs predicted {name}", width=300, height=300)


def regime(df: pd.DataFrame) -> pd.Series:
    """What bounds each predicted row, in the words of parex.record.bound (its `bound`
    column): "<word>-bound", and "(does not fit)" beside memory when it does not."""
    fits = df["fits"].fillna(True).astype(bool) if "fits" in df else True
    return df["bound"] + "-bound" + np.where(fits, "", " (does not fit)")


def whatif_chart(df: pd.DataFrame, title: str = "predicted step time and what bounds it"):
    """One bar per predicted row (label: model, layout and hardware): compute, exposed
    communication and bubble stacked, annotated with the regime and the MFU."""
    data = labelled(df[df["source"] == "predicted"])
    data["label"] = data["label"] + " · " + data["hardware"]
    data["regime"] = regime(data)
    unit, size = seconds_unit(float(data["step_time_s"].max()))
    data["total"] = data["step_time_s"] / size
    data["note"] = (data["regime"] + " · MFU " + (100 * data["mfu"]).round(0).astype(int)
                    .astype(str) + "%")
    long = data.melt(id_vars=["label", "regime", "note", "total"],
                     value_vars=[f"step_{p}_s" for p in ("compute", "exposed_comm", "bubble")],
                     var_name="part", value_name="seconds")
    long["part"] = long["part"].str.removeprefix("step_").str.removesuffix("_s").map(label)
    long = long[long["seconds"] > 0]
    long["value"], long["amount"] = long["seconds"] / size, long["seconds"].map(format_seconds)
    y = alt.Y("label:N", sort=None, title=None, axis=alt.Axis(labelLimit=420))
    bars = alt.Chart(long).mark_bar().encode(
        x=alt.X("sum(value):Q", title=f"predicted step time ({unit})"), y=y,
        color=color("part", TIME_COLORS, long["part"], title="step time"),
        tooltip=["label:N", "part:N", "amount:N", "regime:N"])
    notes = alt.Chart(data).mark_text(align="left", dx=4).encode(x="total:Q", y=y, text="note:N")
    return (bars + notes).properties(title=title, width=420)


def scaling_chart(df: pd.DataFrame, y: str = "memory_argument_bytes", x: str = "n_devices",
                  by: str = "layout", title: str | None = None) -> alt.Chart:
    """`y` against `x` (e.g. memory per device as the device count grows), one line per value of
    `by`; measured lines solid, predicted dashed. Both axes are log scales."""
    for column in (x, y, by):
        if column not in df:
            raise ValueError(f"the frame has no column {column!r}; add it (df.assign) or pick one "
                             f"of {', '.join(df.columns)}")
    data = df[list(dict.fromkeys([x, y, by, "source", "layout"]))].dropna(subset=[y]).copy()
    kind = "bytes" if y.endswith("_bytes") else "seconds" if y.endswith("_s") else "count"
    unit, size = _unit(kind, float(data[y].max()))
    data["value"], data["amount"] = data[y] / size, data[y].map(_formatter(kind))
    words = METRICS.get(y, (label(y.removesuffix("_bytes").removesuffix("_s")),))[0]
    return alt.Chart(data).mark_line(point=True).encode(
        x=alt.X(f"{x}:Q", scale=alt.Scale(type="log", base=2), title=label(x),
                axis=alt.Axis(values=sorted(data[x].unique().tolist()))),
        y=alt.Y("value:Q", scale=alt.Scale(type="log"),
                title=f"{words} ({unit})" if unit else words),
        color=alt.Color(f"{by}:N", sort=None, title=label(by)),
        strokeDash=alt.StrokeDash("source:N", sort=list(SOURCES),
                                  legend=alt.Legend(symbolType="stroke")),
        detail="source:N",
        tooltip=["layout:N", "source:N", f"{x}:Q", alt.Tooltip("amount:N", title=words)],
    ).properties(title=title or f"{words} against {label(x)}", width=360, height=260)


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


__all__ = ["METRICS", "collectives_chart", "collectives_long", "memory_chart",
           "memory_long", "overview_chart", "pairs", "regime", "save", "scaling_chart",
           "scatter_chart", "step_time_chart", "step_time_long", "whatif_chart"]
