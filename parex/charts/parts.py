"""Memory and step time by part, measured beside predicted, one panel per layout.

Memory is drawn as the same parts on both sides as far as the measurement allows. The measured
side splits XLA's argument buffers into parameters, optimizer state and inputs (exact, from the
shardings of the run: columns memory_params_bytes, memory_optimizer_bytes, memory_inputs_bytes,
which parex.explorer.measuring adds) and keeps XLA's temp as one block, "gradients + activations +
temporaries", because XLA's memory analysis does not split it; the predicted side stacks the
same parts in the same order, so the two bars compare part by part. A measured row without the
split shows XLA's argument as one block.

Rows may carry `formula_<part>` columns (parex.explorer.explain): the tooltip shows them, so
hovering a bar shows its formula with the values plugged in.
"""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from .style import (CAPACITY_SHOWN, FIT_COLORS, MEMORY_COLORS, TIME_COLORS, bytes_unit, color,
                    format_bytes, format_seconds, seconds_unit)

SOURCES = ("measured", "predicted")
XLA_ARGUMENT = "parameters + optimizer (XLA argument)"
XLA_TEMP = "gradients + activations + temporaries (XLA temp)"
# stacking order: model state at the bottom on both sides, what the step builds on top
ORDER = {"parameters": 0, "optimizer state": 1, XLA_ARGUMENT: 1, "inputs": 2, "outputs": 3,
         "gradients": 4, XLA_TEMP: 4, "activations": 5, "temporaries": 6}
PREDICTED_PARTS = {"parameters": "params", "gradients": "grads", "optimizer state": "optimizer",
                   "activations": "activations", "temporaries": "temp"}
STEP_PARTS = {"compute": "compute", "exposed communication": "exposed_comm", "bubble": "bubble"}
STEP_ORDER = {"measured": 0, "compute": 0, "exposed communication": 1, "bubble": 2}
MEASURED_NOTES = {
    "parameters": "the float32 weights' shards on this device (from the run's shardings)",
    "optimizer state": "AdamW's moments and step counters (from the run's shardings)",
    "inputs": "token ids and targets on this device (from their sharding)",
    XLA_ARGUMENT: "XLA's argument buffers: parameters, optimizer state and inputs (this run's "
                  "shardings were not recorded, so they are not split)",
    "outputs": "XLA's outputs not written in place (output − alias)",
    XLA_TEMP: "XLA's temp buffers: gradients, activations and temporaries together. XLA's memory "
              "analysis does not split them, so parex cannot either",
    "measured": "the median of every timed step over all runs of this layout; the line spans "
                "the fastest to the slowest step",
}


def labelled(df: pd.DataFrame) -> pd.DataFrame:
    """Add `label`, the panel title: the layout, prefixed by the model when there are several
    (or an explicit `label` column, kept)."""
    out = df.copy()
    if "label" in out and out["label"].notna().all():
        return out
    several = "model" in out and out["model"].nunique() > 1
    out["label"] = (out["model"] + " " + out["layout"]) if several else out["layout"]
    return out


def latest(df: pd.DataFrame) -> pd.DataFrame:
    """The last row per (label, source): a layout measured twice is drawn once, not stacked
    (parex.explorer.measuring pools repeated runs into one row first)."""
    return labelled(df).drop_duplicates(["label", "source"], keep="last")


def _value(row: pd.Series, column: str) -> float:
    value = row.get(column, np.nan)
    return float(value) if pd.notna(value) else np.nan


def _note(row: pd.Series, key: str, fallback: str = "") -> str:
    value = row.get(f"formula_{key}")
    return value if isinstance(value, str) else fallback


def _measured_memory(r: pd.Series) -> dict[str, float]:
    argument = _value(r, "memory_argument_bytes")
    parts = {}
    split = [_value(r, f"memory_{k}_bytes") for k in ("params", "optimizer", "inputs")]
    if all(np.isfinite(split)):
        parts |= dict(zip(("parameters", "optimizer state", "inputs"), split))
    else:
        parts[XLA_ARGUMENT] = argument
    parts["outputs"] = _value(r, "memory_output_bytes") - _value(r, "memory_alias_bytes")
    parts[XLA_TEMP] = _value(r, "memory_temp_bytes")
    return parts


def memory_long(df: pd.DataFrame) -> pd.DataFrame:
    """(label, source, part, order, bytes, formula): each side's parts, and a `total` row."""
    rows = []
    for _, r in latest(df).iterrows():
        if r["source"] == "measured":
            parts = _measured_memory(r)
            notes = {p: MEASURED_NOTES.get(p, "") for p in parts}
        else:
            parts = {p: _value(r, f"memory_{k}_bytes") for p, k in PREDICTED_PARTS.items()}
            parts["inputs"] = (_value(r, "memory_argument_bytes") - parts["parameters"]
                               - parts["optimizer state"])
            notes = {p: _note(r, PREDICTED_PARTS.get(p, "inputs")) for p in parts}
        parts = {p: v for p, v in parts.items() if pd.notna(v) and v > 0}
        parts["total"] = _value(r, "memory_total_bytes")
        for part, value in parts.items():
            rows.append({"label": r["label"], "source": r["source"], "part": part,
                         "order": ORDER.get(part, 9), "bytes": value,
                         "formula": notes.get(part, ""), "delta": r.get("delta_memory", "")})
    return pd.DataFrame(rows, columns=["label", "source", "part", "order", "bytes", "formula",
                                       "delta"])


def step_time_long(df: pd.DataFrame) -> pd.DataFrame:
    """(label, source, part, seconds, lo_s, hi_s, n, formula): the measured median with its
    spread over every timed step, and the predicted compute, exposed communication and bubble
    (only the parts that take time)."""
    rows = []
    for _, r in latest(df).iterrows():
        base = {"label": r["label"], "source": r["source"], "delta": r.get("delta_time", "")}
        if r["source"] == "measured":
            n = r.get("n_steps")
            rows.append(base | {"part": "measured", "seconds": _value(r, "step_time_s"),
                                "lo_s": _value(r, "step_time_min_s"),
                                "hi_s": _value(r, "step_time_max_s"),
                                "n": int(n) if pd.notna(n) else np.nan,
                                "formula": MEASURED_NOTES["measured"]})
            continue
        parts = {p: _value(r, f"step_{k}_s") for p, k in STEP_PARTS.items()}
        if all(pd.isna(v) for v in parts.values()):  # only a total was predicted
            parts = {"compute": _value(r, "step_time_s")}
        rows += [base | {"part": p, "seconds": v, "lo_s": np.nan, "hi_s": np.nan, "n": np.nan,
                         "formula": _note(r, STEP_PARTS.get(p, p))}
                 for p, v in parts.items() if pd.notna(v) and v > 0]
    return pd.DataFrame(rows, columns=["label", "source", "part", "seconds", "lo_s", "hi_s", "n",
                                       "formula", "delta"])


# --- charts ----------------------------------------------------------------------------------
def _delta_text(chart: alt.Chart) -> alt.Chart:
    """The change against the baseline above a predicted bar: its share on the chart, the
    amount too in the tooltip."""
    return chart.transform_filter("datum.delta != ''").transform_calculate(
        share="split(datum.delta, ' (')[0]").mark_text(dy=-8, fontSize=10).encode(
        x=source_x(), y="value:Q", text="share:N",
        tooltip=[alt.Tooltip("delta:N", title="against the baseline")])


def source_x() -> alt.X:
    return alt.X("source:N", sort=list(SOURCES), title=None, axis=alt.Axis(labelAngle=0))


def facet(layered: alt.LayerChart, title: str, width: int = 110) -> alt.FacetChart:
    """One panel per layout, its name wrapped at the commas so long layouts keep their width."""
    header = alt.Header(labelExpr="split(datum.label, ',')", labelAngle=0, labelLimit=width,
                        labelFontSize=11)
    data = layered.data if isinstance(layered.data, pd.DataFrame) else None
    order = list(dict.fromkeys(data["label"])) if data is not None else None
    column = alt.Column("label:N", title=None, sort=order, header=header)
    return layered.properties(width=width).facet(column=column, title=title)


def memory_chart(df: pd.DataFrame, title: str = "memory per device",
                 capacity: float | None = None, capacity_name: str = "HBM",
                 top: float | None = None, width: int = 110) -> alt.FacetChart:
    """Per layout: the measured parts beside the predicted ones, a black tick at each total;
    with `capacity` (bytes) the device's memory as a dashed line, green when every predicted
    total fits under it and red when one does not. `top` fixes the axis' upper end (bytes)."""
    long = memory_long(df)
    totals = long.loc[long["part"] == "total", "bytes"]
    peak = float(np.nanmax([totals.max() if len(totals) else 0.0, top or 0.0]))
    drawn = capacity is not None and capacity > 0 and peak >= CAPACITY_SHOWN * capacity
    unit, size = bytes_unit(max(peak, capacity if drawn else 0.0))
    long["value"] = long["bytes"] / size
    long["amount"] = long["bytes"].map(format_bytes)
    domain = [0, max(peak, capacity if drawn else 0.0, top or 0.0) / size * 1.05]
    y = alt.Y("value:Q", title=f"{title} ({unit})", stack="zero", scale=alt.Scale(domain=domain))
    tooltip = ["label:N", "source:N", "part:N", "amount:N", alt.Tooltip("formula:N", title="how")]
    bars = alt.Chart().mark_bar().encode(
        x=source_x(), y=y, order="order:Q", tooltip=tooltip,
        color=color("part", MEMORY_COLORS, long["part"], title="memory part"),
    ).transform_filter(alt.datum.part != "total")
    ticks = alt.Chart().mark_tick(color="black", thickness=2, size=30).encode(
        x=source_x(), y=alt.Y("value:Q"),
        tooltip=["label:N", "source:N", alt.Tooltip("amount:N", title="total")],
    ).transform_filter(alt.datum.part == "total")
    layers = [bars, ticks]
    if long["delta"].astype(str).str.len().gt(0).any():
        layers.append(_delta_text(alt.Chart().transform_filter(
            (alt.datum.part == "total") & (alt.datum.source == "predicted"))))
    subtitle = ""
    if capacity:
        predicted = long[(long["part"] == "total") & (long["source"] == "predicted")]["bytes"]
        fits = bool((predicted <= capacity).all())
        state = "fits" if fits else "does not fit"
        subtitle = f"{capacity_name} {format_bytes(capacity)}: {state}"
        if drawn:
            layers.append(alt.Chart().mark_rule(
                strokeDash=[6, 3], strokeWidth=2, color=FIT_COLORS[state]).encode(
                y=alt.datum(capacity / size),
                tooltip=alt.value(f"{capacity_name}: {format_bytes(capacity)} per device")))
        else:
            subtitle += f" (uses {peak / capacity:.1%}, the line is off the chart)"
    heading = alt.TitleParams(title, subtitle=subtitle, anchor="start")
    return facet(alt.layer(*layers, data=long), heading, width)


def step_time_chart(df: pd.DataFrame, title: str = "step time", top: float | None = None,
                    width: int = 110) -> alt.FacetChart:
    """Per layout: the measured median with a line from the fastest to the slowest step (n in
    the tooltip) beside the predicted compute, exposed communication and bubble, stacked.
    `top` fixes the axis' upper end (seconds)."""
    long = step_time_long(df)
    peak = float(np.nanmax([long.groupby(["label", "source"])["seconds"].sum().max()
                            if len(long) else 0.0, long["hi_s"].max(), top or 0.0, 0.0]))
    unit, size = seconds_unit(peak)
    for column in ("seconds", "lo_s", "hi_s"):
        long[column.replace("seconds", "value").replace("_s", "")] = long[column] / size
    long["amount"] = long["seconds"].map(format_seconds)
    long["spread"] = [f"{format_seconds(a)} – {format_seconds(b)}" if pd.notna(a) else ""
                      for a, b in zip(long["lo_s"], long["hi_s"])]
    y = alt.Y("value:Q", title=f"{title} ({unit})", stack="zero",
              scale=alt.Scale(domain=[0, peak / size * 1.05]))
    long["order"] = long["part"].map(STEP_ORDER)
    bars = alt.Chart().mark_bar().encode(
        x=source_x(), y=y, order="order:Q",
        color=color("part", TIME_COLORS, long["part"], title="step time"),
        tooltip=["label:N", "source:N", "part:N", "amount:N",
                 alt.Tooltip("spread:N", title="fastest – slowest step"),
                 alt.Tooltip("n:Q", title="timed steps"), alt.Tooltip("formula:N", title="how")])
    spread = alt.Chart().mark_rule(color="#999999", strokeWidth=2).encode(
        x=source_x(), y="lo:Q", y2="hi:Q",
        tooltip=[alt.Tooltip("spread:N", title="fastest – slowest step"),
                 alt.Tooltip("n:Q", title="timed steps")],
    ).transform_filter("isValid(datum.lo)")
    layers = [bars, spread]
    if long["delta"].astype(str).str.len().gt(0).any():
        layers.append(_delta_text(alt.Chart().transform_filter(
            alt.datum.source == "predicted").transform_aggregate(
            value="sum(value)", groupby=["label", "source", "delta"])))
    return facet(alt.layer(*layers, data=long), title, width)


__all__ = ["MEASURED_NOTES", "SOURCES", "XLA_ARGUMENT", "XLA_TEMP", "facet", "labelled",
           "latest", "memory_chart", "memory_long", "source_x", "step_time_chart",
           "step_time_long"]
