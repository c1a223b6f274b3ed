"""The gallery's charts: the paper's numbers as points, parex's as lines (or bars), and every
figure's ratio strip (parex / paper per row, with the tolerance band), written offline as PNG and
SVG through vl-convert.

    lines_vs_points(df, x, paper, parex, ...)   paper ● beside parex ─ against x
    points_vs_ticks(points, category, ...)      parex points, paper ticks, per category
    ratio_strip(result)                         parex / paper per row, tolerance shaded
    figure_chart(result)                        the figure's own chart above its ratio strip
"""

from __future__ import annotations

import math
import struct
import zlib
from pathlib import Path

import altair as alt
import pandas as pd

from ..charts.style import source_color
from .scoring import OUT_OF_SCOPE, OUTSIDE, WITHIN

PAPER, PAREX = "paper", "parex"
SOURCE_COLORS = alt.Scale(domain=[PAPER, PAREX], range=["#222222", "#f58518"])
WIDTH, HEIGHT = 300, 190


def _axis(field: str, title: str, log: bool, kind: str = "Q") -> dict:
    scale = alt.Scale(type="log", nice=False) if log else alt.Scale(zero=False)
    return {"field": f"{field}:{kind}", "title": title, "scale": scale}


def lines_vs_points(df: pd.DataFrame, x: str, paper: str, parex: str, series: str | None,
                    facet: str | None, x_title: str, y_title: str, log_x: bool = False,
                    log_y: bool = False, width: int = WIDTH, height: int = HEIGHT):
    """The paper's values as black points, parex's as orange lines, against `x`; one line per
    `series`, one panel per `facet`."""
    keep = [c for c in (x, series, facet) if c]
    long = df.melt(id_vars=keep, value_vars=[paper, parex], var_name="source", value_name="y")
    long["source"] = long["source"].map({paper: PAPER, parex: PAREX})
    xa, ya = _axis(x, x_title, log_x), _axis("y", y_title, log_y)
    base = alt.Chart(long).encode(
        x=alt.X(xa["field"], title=xa["title"], scale=xa["scale"]),
        y=alt.Y(ya["field"], title=ya["title"], scale=ya["scale"]),
        color=alt.Color("source:N", scale=SOURCE_COLORS, title=None),
        tooltip=keep + ["source", alt.Tooltip("y:Q", format=".4~g")])
    detail = [alt.Detail(f"{series}:N")] if series else []
    lines = base.transform_filter(alt.datum.source == PAREX).mark_line().encode(*detail)
    if series:
        lines = lines.encode(strokeDash=alt.StrokeDash(f"{series}:N", title=series))
    points = base.transform_filter(alt.datum.source == PAPER).mark_point(
        filled=True, size=40).encode(*detail)
    layered = alt.layer(lines, points).properties(width=width, height=height)
    if facet:
        order = list(dict.fromkeys(df[facet]))
        return layered.facet(column=alt.Column(f"{facet}:N", title=None, sort=order)
                             ).resolve_scale(y="independent")
    return layered


def points_vs_ticks(points: list[dict], category: str, facet: str, y_title: str,
                    width: int = 150, height: int = HEIGHT):
    """parex's values as orange points and the paper's as black ticks, per `category`, on a
    log scale, one panel per `facet` (in the order of `points`)."""
    df = pd.DataFrame(points)
    x = alt.X(f"{category}:N", title=None, sort=list(dict.fromkeys(df[category])),
              axis=alt.Axis(labelAngle=-40, labelLimit=140))
    y = alt.Y("value:Q", title=y_title, scale=alt.Scale(type="log"), axis=alt.Axis(format="~s"))
    long = df.melt(id_vars=[category, facet], value_vars=[PAPER, PAREX], var_name="source",
                   value_name="value")
    base = alt.Chart().encode(x=x, y=y, color=alt.Color("source:N", scale=SOURCE_COLORS,
                                                        title=None),
                              tooltip=[category, "source", alt.Tooltip("value:Q",
                                                                      format=".4~g")])
    ticks = base.transform_filter(alt.datum.source == PAPER).mark_tick(thickness=2, size=18)
    dots = base.transform_filter(alt.datum.source == PAREX).mark_point(filled=True, size=45)
    return alt.layer(ticks, dots, data=long).properties(width=width, height=height).facet(
        column=alt.Column(f"{facet}:N", title=None, sort=list(dict.fromkeys(df[facet]))))


def ratio_frame(result) -> pd.DataFrame:
    rows = []
    for i, r in enumerate(result.rows):
        if r.is_bracket:  # the band is parex's range over the paper's value: a hit holds 1
            lo, hi = r.low / r.paper, r.high / r.paper
        else:
            tol = r.tolerance or result.spec.tolerance
            lo, hi = tol.lo, tol.hi
        rows.append({"i": i, "quantity": r.quantity, "ratio": r.ratio, "kind": r.kind,
                     "lo": lo, "hi": hi, "status": result.verdict(r), "paper": r.paper,
                     "parex": r.parex})
    df = pd.DataFrame(rows)
    return df[df["ratio"].map(lambda v: math.isfinite(v) and v > 0)]


def ratio_strip(result, width: int = 2 * WIDTH + 40, height: int = 120):
    """parex / paper of every row, the tolerance as a grey band (each row's own, if any; a
    bracket's band is its range over the paper's value)."""
    df = ratio_frame(result)
    x = alt.X("i:O", title=f"{len(df)} rows (hover for the quantity)",
              axis=alt.Axis(labels=False, ticks=False))
    if len(df) <= 16:
        x = alt.X("quantity:N", title=None, sort=list(df["quantity"]),
                  axis=alt.Axis(labelAngle=-35, labelLimit=260, labelFontSize=9))
    positive = df["lo"][df["lo"] > 0]
    low = min(positive.min() if len(positive) else 1.0, df["ratio"].min()) / 1.05
    high = max(df["hi"].max(), df["ratio"].max()) * 1.05
    df = df.assign(lo=df["lo"].clip(lower=low), hi=df["hi"].clip(upper=high))
    scale = alt.Scale(type="log", domain=[low, high], nice=False)
    y = alt.Y("ratio:Q", title="parex / paper", scale=scale)
    band = alt.Chart(df).mark_bar(color="#dddddd", opacity=0.7).encode(
        x=x, y=alt.Y("lo:Q", scale=scale), y2="hi:Q")
    # parex's number measured or predicted: the colours of every parex chart, and the legend
    # lists only the kinds this figure has (a predicted-only figure shows no "measured")
    dots = alt.Chart(df).mark_point(filled=True, size=45).encode(
        x=x, y=y, color=source_color(df["kind"], field="kind", title="parex's number"),
        shape=alt.Shape("status:N", title=None,
                        scale=alt.Scale(domain=[WITHIN, OUTSIDE, OUT_OF_SCOPE],
                                        range=["circle", "cross", "triangle-up"])),
        tooltip=["quantity", alt.Tooltip("paper:Q", format=".4~g"),
                 alt.Tooltip("parex:Q", format=".4~g"), alt.Tooltip("ratio:Q", format=".4f"),
                 "kind", "status"])
    one = alt.Chart(pd.DataFrame({"one": [1.0]})).mark_rule(strokeDash=[3, 3]).encode(y="one:Q")
    return alt.layer(band, one, dots).properties(width=width, height=height)


def figure_chart(result):
    """The figure's own chart (if any) above its ratio strip, titled with name and verdict."""
    verdict = {"passed": "passed", "failed": "FAILED"}[result.status]
    title = alt.TitleParams(f"{result.spec.title} — {verdict}", subtitle=result.spec.source,
                            anchor="start")
    strip = ratio_strip(result)
    if result.chart is None:
        return strip.properties(title=title)
    return alt.vconcat(result.chart(), strip).properties(title=title).resolve_scale(
        color="independent", shape="independent")


def recompress_png(path: Path) -> Path:
    """Rewrite a PNG with its pixel data deflated at level 9 (lossless): vl-convert's fast
    compression leaves the gallery's charts three to four times larger than they need be."""
    data = Path(path).read_bytes()
    chunks, i = [], 8  # after the 8-byte signature: (length, type, data, CRC) chunks
    while i < len(data):
        (length,), kind = struct.unpack(">I", data[i:i + 4]), data[i + 4:i + 8]
        chunks.append((kind, data[i + 8:i + 8 + length]))
        i += 12 + length
    pixels = zlib.compress(zlib.decompress(b"".join(d for k, d in chunks if k == b"IDAT")), 9)
    out, idat_written = [data[:8]], False
    for kind, body in chunks:
        if kind == b"IDAT":
            if idat_written:
                continue
            body, idat_written = pixels, True
        out.append(struct.pack(">I", len(body)) + kind + body
                   + struct.pack(">I", zlib.crc32(kind + body)))
    Path(path).write_bytes(b"".join(out))
    return Path(path)


def save_figure(result, out: Path, scale: float = 1.0) -> dict:
    """Write out/NAME.png and out/NAME.svg; returns their paths."""
    from ..charts.records import save

    chart = figure_chart(result).configure_view(stroke=None).configure_axis(grid=False)
    paths = {suffix: save(chart, Path(out) / f"{result.spec.name}.{suffix}", scale=scale)
             for suffix in ("png", "svg")}
    recompress_png(paths["png"])
    return paths
