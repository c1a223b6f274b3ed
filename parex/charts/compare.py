"""Comparing layouts: a pinned baseline beside others with their deltas, and the sweep of one
control (a line for predicted, points with their spread for measured).

    compare_chart(with_deltas(frame, "baseline · data=8"), capacity=80e9, tops=(mem, time))
    sweep_chart(sweep_frame, "tensor", capacity=80e9)

`tops` fixes both axes' upper ends, so moving a control changes the bars, not the axes.
"""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from .parts import memory_chart, step_time_chart
from .style import (CAPACITY_SHOWN, FIT_COLORS, MEASURED, PREDICTED, bytes_unit, format_bytes,
                    format_seconds, label, log_scale_fits, seconds_unit)


def _delta(value: float, base: float, fmt) -> str:
    if not (np.isfinite(value) and np.isfinite(base)) or base == 0:
        return ""
    sign, change = "+" if value >= base else "−", abs(value / base - 1)
    share = f"{change:.1%}" if change < 0.1 else f"{change:.0%}"
    return f"{sign}{share} ({sign}{fmt(abs(value - base))})"


def with_deltas(df: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Add delta_memory and delta_time to every predicted row but the baseline's: the change of
    its total against the baseline's predicted total, e.g. "−48% (−1.2 GB)"."""
    out = df.copy()
    base = out[(out["label"] == baseline) & (out["source"] == "predicted")]
    out["delta_memory"], out["delta_time"] = "", ""
    if base.empty:
        return out
    memory, time = (float(base[c].iloc[0]) for c in ("memory_total_bytes", "step_time_s"))
    others = (out["source"] == "predicted") & (out["label"] != baseline)
    out.loc[others, "delta_memory"] = out.loc[others, "memory_total_bytes"].map(
        lambda v: _delta(v, memory, format_bytes))
    out.loc[others, "delta_time"] = out.loc[others, "step_time_s"].map(
        lambda v: _delta(v, time, format_seconds))
    return out


def compare_chart(df: pd.DataFrame, capacity: float | None = None, capacity_name: str = "HBM",
                  tops: tuple[float, float] | None = None) -> alt.HConcatChart:
    """Memory and step time of every compared layout on shared, fixed axes (`tops`: bytes,
    seconds), each labelled with its change against the baseline."""
    memory_top, time_top = tops or (None, None)
    return alt.hconcat(
        memory_chart(df, "memory per device", capacity, capacity_name, top=memory_top),
        step_time_chart(df, "step time", top=time_top),
    ).resolve_scale(color="independent")


def _sweep_panel(data: pd.DataFrame, control: str, column: str, kind: str, width: int,
                 capacity: float | None) -> alt.LayerChart:
    values = data[[column, f"{column}_lo", f"{column}_hi"]].to_numpy(float).ravel()
    peak = float(np.nanmax(values)) if len(values) else 1.0
    # the capacity line only where the values come near it: 50 MB under 3.16 GB lie flat
    shown = bool(capacity) and kind == "bytes" and peak >= CAPACITY_SHOWN * capacity
    top = max(peak, capacity) if shown else peak
    unit, size = bytes_unit(top) if kind == "bytes" else seconds_unit(top)
    fmt = format_bytes if kind == "bytes" else format_seconds
    frame = data.assign(v=data[column] / size, lo=data[f"{column}_lo"] / size,
                        hi=data[f"{column}_hi"] / size, amount=data[column].map(fmt))
    x = alt.X("value:Q", title=label(control), scale=alt.Scale(type="log", base=2),
              axis=alt.Axis(values=sorted(set(frame["value"].tolist()))))
    name = "memory per device" if kind == "bytes" else "step time"
    log = log_scale_fits(values)  # values over decades: each visible on a log axis
    y = alt.Y("v:Q", title=f"{name} ({unit})" + (", log scale" if log else ""),
              scale=alt.Scale(type="log") if log else alt.Scale(zero=True))
    tooltip = ["layout:N", "source:N", alt.Tooltip("amount:N", title=name),
               alt.Tooltip("n:Q", title="timed steps")]
    predicted = frame[frame["source"] == "predicted"]
    measured = frame[frame["source"] == "measured"]
    layers = [alt.Chart(predicted).mark_line(color=PREDICTED, point=alt.OverlayMarkDef(
        color=PREDICTED, size=25)).encode(x=x, y=y, tooltip=tooltip)]
    if not measured.empty:
        layers.append(alt.Chart(measured).mark_rule(color=MEASURED).encode(x=x, y="lo:Q",
                                                                            y2="hi:Q"))
        layers.append(alt.Chart(measured).mark_point(filled=True, size=70, color=MEASURED,
                                                     opacity=1).encode(x=x, y=y,
                                                                       tooltip=tooltip))
    title = name
    if shown:
        fits = bool((predicted[column] <= capacity).all())
        layers.append(alt.Chart(predicted).mark_rule(
            strokeDash=[6, 3], strokeWidth=2,
            color=FIT_COLORS["fits" if fits else "does not fit"]).encode(
            y=alt.datum(capacity / size)))
    elif capacity and kind == "bytes":
        title = alt.TitleParams(name, subtitle=f"capacity {format_bytes(capacity)}: at most "
                                f"{peak / capacity:.1%} used, the line is off the chart")
    return alt.layer(*layers).properties(width=width, height=200, title=title)


def sweep_chart(data: pd.DataFrame, control: str, capacity: float | None = None,
                width: int = 280) -> alt.HConcatChart:
    """Step time and memory per device against one control's `value`: the predicted line, and
    measured points with a rule from the fastest to the slowest step. `data` has columns value,
    source, layout, step_time_s(+_lo, _hi), memory_total_bytes(+_lo, _hi), n."""
    panels = [_sweep_panel(data, control, "step_time_s", "seconds", width, None),
              _sweep_panel(data, control, "memory_total_bytes", "bytes", width, capacity)]
    return alt.hconcat(*panels).properties(title=alt.TitleParams(
        f"sweep of {label(control)}: predicted line, measured points", anchor="start"))


__all__ = ["compare_chart", "sweep_chart", "with_deltas"]
