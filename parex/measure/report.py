"""Plain-text reports of measurements, for the CLI and for logs. Numbers are written by
parex.units (bytes and times with their unit, 3 significant figures); JSON stays raw SI."""

from __future__ import annotations

import html
import os
import textwrap

from ..record import Measurement
from ..units import format_bytes, format_count, format_seconds

# The old name of parex.units.format_bytes, kept for the modules that still import it.
human_bytes = format_bytes


WIDTH = 100  # columns of prose in a report: what a notebook's output shows without wrapping
LOAD_OFF = 1.5  # a load this many times the calibration's (or 1/that) is worth a note
LOAD_FLOOR = 1.0  # loads under one busy core count as one: idle machines differ by noise


# A notebook's output area is a flex row that clips what overflows it, so a wide table keeps
# every column in view by taking less room: compact cells, numbers on one line, the first
# column (a layout) broken after its commas, and, narrower still, a scroll bar of its own.
TABLE_STYLE = "border-collapse: collapse; margin: 0; font-size: 0.92em"
CELL_STYLE = "padding: 0.2em 0.4em; vertical-align: top"
SCROLL_STYLE = "overflow-x: auto; max-width: 100%"


def _breaking_after(text: str, marks: str) -> str:
    """`text` escaped, free to break after each of `marks` (and at its spaces) only."""
    out = html.escape(text)
    for mark in marks:
        out = out.replace(mark, mark + "<wbr>")
    return out


class Table(str):
    """A text table that remembers its cells, so a notebook can show it as an HTML table."""

    def __new__(cls, text: str, header: list[str] = (), rows: list[list[str]] = ()):
        out = super().__new__(cls, text)
        out.header, out.rows = header, rows
        return out

    def _repr_html_(self) -> str:
        def cell(tag: str, j: int, text: str) -> str:
            align = "left" if j == 0 else "right"  # numbers right-aligned, as in text
            wrap = "normal" if j == 0 or tag == "th" else "nowrap"
            # a header may break after a slash, a row's label (a layout) after its commas
            breaks = "/" if tag == "th" else "," if j == 0 else ""
            content = _breaking_after(text, breaks)
            return (f"<{tag} style='{CELL_STYLE}; text-align: {align}; white-space: {wrap}'>"
                    f"{content}</{tag}>")

        head = "".join(cell("th", j, h) for j, h in enumerate(self.header))
        body = "".join("<tr>" + "".join(cell("td", j, c) for j, c in enumerate(row)) + "</tr>"
                       for row in self.rows)
        return (f"<div class='parex-scroll' style='{SCROLL_STYLE}'>"
                f"<table class='parex-table' style='{TABLE_STYLE}'><thead><tr>{head}</tr>"
                f"</thead><tbody>{body}</tbody></table></div>")


class Drawing(str):
    """Text whose lines must not be wrapped (boxes, aligned columns): a report keeps it as is."""


class TextReport(str):
    """A report of prose lines and tables: printed, the text (prose wrapped at WIDTH columns);
    shown as a notebook cell's value, HTML tables that fit the page instead of wrapped rows."""

    def __new__(cls, *blocks: str):
        wrapped = tuple(b if isinstance(b, (Table, Drawing)) else _wrapped(b) for b in blocks)
        out = super().__new__(cls, "\n".join(wrapped))
        out.blocks, out.unwrapped = wrapped, blocks
        return out

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(str(self))  # a cell's plain-text value: the report, not its quoted repr

    def _repr_html_(self) -> str:
        parts = [b._repr_html_() if isinstance(b, Table) else _pre(b)
                 for b in self.unwrapped if b]
        return "<div class='parex-report' style='max-width: 100%'>" + "".join(parts) + "</div>"


def _pre(block: str) -> str:
    """Prose wraps between words at the output's width (not at WIDTH, nor inside a word); a
    Drawing keeps its lines and scrolls instead."""
    if isinstance(block, Drawing):
        return (f"<div style='{SCROLL_STYLE}'><pre style='white-space: pre; margin: 2px 0'>"
                f"{html.escape(block)}</pre></div>")
    return ("<pre style='white-space: pre-wrap; word-break: normal; overflow-wrap: anywhere; "
            f"margin: 2px 0'>{html.escape(block)}</pre>")


def _wrapped(text: str) -> str:
    return "\n".join(textwrap.fill(line, WIDTH, subsequent_indent="  ") if len(line) > WIDTH
                     else line for line in text.split("\n"))


def load_ratio(calibration, now: float | None = None) -> float | None:
    """How much slower a step runs now than when `calibration` was measured, from the 1-minute
    load averages: the emulated mesh wants every core, so with L other runnable tasks it gets
    C / (C + L) of C cores and measured / predicted ≈ (C + L_now) / (C + L_then). None when the
    profile has no load on record."""
    then = getattr(calibration, "load_average", None)
    if then is None:
        return None
    now = os.getloadavg()[0] if now is None else now
    cores = max(1, calibration.cores)
    return (cores + now) / (cores + then)


def load_note(calibration, now: float | None = None) -> str | None:
    """One line when the machine's load is more than LOAD_OFF times (or under 1/LOAD_OFF of)
    the calibration's: both loads, the cores, and what that does to measured / predicted.
    None when the loads agree or the profile has no load on record."""
    ratio = load_ratio(calibration, now)
    if ratio is None:
        return None
    now = os.getloadavg()[0] if now is None else now
    then = calibration.load_average
    shift = max(now, LOAD_FLOOR) / max(then, LOAD_FLOOR)
    if 1 / LOAD_OFF <= shift <= LOAD_OFF:
        return None
    return (f"machine load {now:.1f} now, {then:.1f} when cpu-local was calibrated "
            f"({calibration.cores} cores): expect measured steps ≈ {ratio:.2f}× the prediction "
            f"(predicted / measured ≈ {1 / ratio:.2f}; (cores + load now) / (cores + load "
            f"then)); `parex calibrate` measures again")


def table(rows: list[list], header: list[str]) -> Table:
    """Left-aligned first column, right-aligned others (an HTML table in a notebook)."""
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = []
    for j, row in enumerate(cells):
        parts = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(parts).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return Table("\n".join(lines), cells[0], cells[1:])


def measurement_report(m: Measurement, n_params: int) -> TextReport:
    st = m.step_time_s
    mem = m.memory_bytes_per_device
    lines = [
        f"parex run · {m.model} ({format_count(n_params)} parameters) · layout {m.layout} · "
        f"{m.n_devices} {m.platform} devices",
        f"loss          {m.losses[0]:.4f} → {m.losses[-1]:.4f} over {len(m.losses)} steps",
        f"step time     median {format_seconds(st['median'])} (min "
        f"{format_seconds(st['min'])}, max {format_seconds(st['max'])}) · "
        f"{m.tokens_per_s:,.0f} tokens/s · compile {format_seconds(m.compile_time_s)}",
        f"compute       {m.matmul_flops_per_device / 1e9:.3f} GFLOP of matmuls per device per "
        f"step (every dot, loop trips included; XLA's cost analysis, which counts loop bodies "
        f"once, says {m.flops_per_device / 1e9:.3f})",
        "memory per device  " + " · ".join(f"{k} {format_bytes(v)}" for k, v in mem.items()),
        "",
    ]
    if not m.collectives:
        return TextReport("\n".join(lines + ["no collectives"]))
    rows = [[c.kind, ",".join(c.axes), c.group_size, f"{c.count:,}", format_bytes(c.bytes),
             format_bytes(c.total_bytes)] for c in m.collectives]
    return TextReport("\n".join(lines),
                      table(rows, ["collective", "axes", "group", "count", "bytes/op", "bytes"]))


def comparison_table(measurements: list[Measurement], predictions=None) -> Table:
    """One row per layout: what the demo and sweeps print. With predictions (one per measurement,
    same order), the predicted step time and memory sit beside the measured ones."""
    rows = []
    for i, m in enumerate(measurements):
        comm = m.comm_bytes_per_device
        row = [m.layout, f"{m.losses[0]:.3f}→{m.losses[-1]:.3f}",
               format_seconds(m.step_time_s["median"])]
        if predictions:
            row.append(format_seconds(predictions[i].step_time_s["total"]))
        row += [f"{m.tokens_per_s:,.0f}", format_bytes(m.memory_bytes_per_device["argument"]),
                format_bytes(m.memory_bytes_per_device["total"])]
        if predictions:
            row.append(format_bytes(predictions[i].memory_bytes_per_device["total"]))
        row += [format_bytes(comm["all-reduce"]), format_bytes(comm["all-gather"]),
                format_bytes(comm["reduce-scatter"] + comm["all-to-all"]
                             + comm["collective-permute"])]
        rows.append(row)
    header = ["layout", "loss", "step"] + (["pred step"] if predictions else []) + [
        "tokens/s", "state/dev", "memory/dev"] + (["pred mem"] if predictions else []) + [
        "all-reduce", "all-gather", "other comm"]
    return table(rows, header)
