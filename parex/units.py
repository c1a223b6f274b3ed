"""One way to write a number, wherever parex shows it (CLI tables, widgets, charts, notebooks;
JSON stays raw SI: bytes and seconds).

Bytes are decimal (a GB is 1e9 bytes, as hardware profiles count HBM) and seconds are shown in
µs, ms, s or min. One rule picks the unit from a magnitude, the largest unit in which the value
is at least 1, and the same rule serves an axis (from the largest value it draws), a tooltip, a
status line and a table cell, so a number reads the same wherever it appears; three significant
figures, thousands separated:

    format_bytes(45.2e6) == "45.2 MB"      bytes_unit(5e11) == ("GB", 1e9)
    format_seconds(0.375) == "375 ms"      seconds_unit(140.0) == ("min", 60.0)
"""

from __future__ import annotations

import math

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


__all__ = ["BYTE_UNITS", "SECOND_UNITS", "bytes_unit", "format_bytes", "format_count",
           "format_flops", "format_ratio", "format_seconds", "seconds_unit"]
