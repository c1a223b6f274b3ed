"""One way to write a number, wherever parex shows it (CLI tables, widgets, charts, notebooks;
JSON stays raw SI: bytes and seconds).

Bytes are decimal (a GB is 1e9 bytes, as hardware profiles count HBM) and seconds are shown in
µs, ms, s or min. One rule picks the unit from a magnitude, the largest unit in which the value
is at least 1, and the same rule serves an axis (from the largest value it draws), a tooltip, a
status line and a table cell, so a number reads the same wherever it appears; three significant
figures, thousands separated:

    format_bytes(45.2e6) == "45.2 MB"      bytes_unit(5e11) == ("GB", 1e9)
    format_seconds(0.375) == "375 ms"      seconds_unit(140.0) == ("min", 60.0)

A table is written the same way: `format_frame` gives each column of a DataFrame the unit its
name says (memory_total_bytes, step_compute_s, flops_per_device, mfu: COLUMN_UNITS), so a
notebook shows "75.5 MB" and "45.4%" where pandas would print 7.549532e+07 and 0.454.
"""

from __future__ import annotations

import math
import numbers
import re

BYTE_UNITS = (("B", 1.0), ("KB", 1e3), ("MB", 1e6), ("GB", 1e9), ("TB", 1e12))
SECOND_UNITS = (("µs", 1e-6), ("ms", 1e-3), ("s", 1.0), ("min", 60.0))
MINUTE_FROM_S = 120.0  # seconds read as minutes from two minutes on (119 s stays "119 s")


def _pick(units, magnitude: float) -> tuple[str, float]:
    magnitude = abs(magnitude) if magnitude and math.isfinite(magnitude) else 0.0
    chosen = units[0]
    for unit in units:
        if magnitude >= unit[1]:
            chosen = unit
    return chosen


def bytes_unit(magnitude: float) -> tuple[str, float]:
    """(name, bytes per unit): the largest unit in which `magnitude` is at least 1."""
    return _pick(BYTE_UNITS, magnitude)


def seconds_unit(magnitude: float) -> tuple[str, float]:
    """(name, seconds per unit): µs, ms, s, or min from two minutes on."""
    if magnitude and abs(magnitude) >= MINUTE_FROM_S:
        return SECOND_UNITS[-1]
    return _pick(SECOND_UNITS[:-1], magnitude)


def _number(value: float) -> str:
    """Three significant figures, no exponent: 45.2, 375, 1,234."""
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    digits = max(0, 2 - int(math.floor(math.log10(abs(value)))))
    return f"{value:.{digits}f}"


def format_bytes(value: float) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    name, size = bytes_unit(value)
    return f"{_number(value / size)} {name}"


def format_seconds(value: float) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    if value == 0:
        return "0 s"  # nothing, in no unit in particular (a bubble-free step's bubble)
    name, size = seconds_unit(value)
    return f"{_number(value / size)} {name}"


def format_count(value: float) -> str:
    """Parameters: 0.93M, 69.0B, 1.23T."""
    for name, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= size:
            return f"{_number(value / size)}{name}"
    return _number(value)


def format_flops(value: float, per_second: bool = False) -> str:
    """FLOPs (or FLOP/s): 1.23 TFLOP, 989 TFLOP/s."""
    unit = "FLOP/s" if per_second else "FLOP"
    for name, size in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= size:
            return f"{_number(value / size)} {name}{unit}"
    return f"{_number(value)} {unit}"


def format_ratio(value: float) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:.2f}×"


# --- tables: the unit of a column, read from its name ----------------------------------------
# parex's frames name their columns by what they hold (memory_total_bytes, step_compute_s,
# flops_per_device, mfu, ...); the first pattern that matches a column's name, lowercased with
# spaces, hyphens and slashes read as underscores, gives its unit.
COLUMN_UNITS = (
    (r"gbps|(^|_)gb_s$", None),  # link speeds in Gb/s: plain numbers (not GB, not seconds)
    (r"loss|^gap_vs", "loss"),  # training losses and their differences
    (r"tflops", "tflop/s"),  # already in TFLOP/s (published tables)
    (r"flop_s$|flops_per_s", "flop/s"),
    (r"flops?(_|$)", "flops"),
    (r"bandwidth|bytes_per_s", "bytes/s"),
    (r"(^|_)gb(_per|$)", "gigabytes"),  # already in GB (published tables; not Gb/s)
    (r"tokens_per_s|per_s$", "per second"),
    (r"bytes|memory|^state|all_to_all|all_reduce|all_gather|reduce_scatter|permute", "bytes"),
    (r"percent", "percent points"),  # already ×100
    (r"(^|_)[mh]fu$|fraction|^bubble_(measured|table|lockstep|predicted)$|^dropped$|^error$",
     "percent"),
    (r"ratio|^speed$|_over_|^busiest", "ratio"),
    (r"(^|_)s$|_time$|^seconds", "seconds"),
    (r"^params$|^n_params$|parameters", "count"),
)
FRAME_FORMATS = {
    "bytes": format_bytes, "seconds": format_seconds, "flops": format_flops,
    "flop/s": lambda v: format_flops(v, per_second=True),
    "tflop/s": lambda v: format_flops(v * 1e12, per_second=True),
    "gigabytes": lambda v: format_bytes(v * 1e9),
    "bytes/s": lambda v: f"{format_bytes(v)}/s",
    "per second": lambda v: f"{format_count(v)}/s",
    "count": format_count, "loss": lambda v: f"{v:.4f}",
    "percent": lambda v: f"{v:.1%}", "percent points": lambda v: f"{_number(v)}%",
    "ratio": lambda v: f"{v:.3f}×",  # three decimals: ratios near 1 are what tables compare
}


def column_unit(name) -> str | None:
    """The unit a parex column holds (a key of FRAME_FORMATS), from its name; None if the name
    does not say."""
    if name is None:
        return None
    key = re.sub(r"[\s/-]+", "_", str(name).strip().lower())
    return next((unit for pattern, unit in COLUMN_UNITS if re.search(pattern, key)), None)


def format_value(value, unit: str | None = None) -> str:
    """One cell: a number in `unit` (FRAME_FORMATS), a whole number with separators, else at
    most three significant figures; a missing value is a dash, text stays as it is."""
    if isinstance(value, str):
        return value
    if value is None or _missing(value):
        return "–"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return str(value)
    if unit is not None:
        return FRAME_FORMATS[unit](value)
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    text = _number(float(value))  # three figures; a knob's 0.100 reads 0.1
    return text.rstrip("0").rstrip(".") if "." in text else text


def _missing(value) -> bool:
    try:
        return bool(value != value)  # NaN is not equal to itself
    except TypeError:  # pandas' NA, whose comparisons are NA
        return True


def format_frame(df, unit: str | None = None, units: dict | None = None):
    """`df` for reading: every number in its column's unit, as text (`df` keeps its numbers).
    A column's unit is `units[column]` if given, else what its name says (column_unit), else
    `unit`; in a frame with a `field` column (parex.shared_fields) a column without a unit of
    its own takes each row's field's unit.

        format_frame(records_frame([m, p]))    memory_total_bytes "47.3 MB", mfu "17.0%"
        format_frame(pivot, unit="bytes")      a pivot whose columns are layouts
    """
    units, out = units or {}, df.astype(object)
    fields = list(df["field"]) if "field" in df.columns else [None] * len(df)
    for j, column in enumerate(df.columns):
        own = units.get(column) or column_unit(column)
        out.iloc[:, j] = [format_value(value, own or column_unit(field) or unit)
                          for value, field in zip(df.iloc[:, j], fields)]
    return out


__all__ = ["BYTE_UNITS", "COLUMN_UNITS", "FRAME_FORMATS", "SECOND_UNITS", "bytes_unit",
           "column_unit", "format_bytes", "format_count", "format_flops", "format_frame",
           "format_ratio", "format_seconds", "format_value", "seconds_unit"]
