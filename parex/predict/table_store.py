"""The predictor's schedule-table statistics kept on disk between processes.

Placing and timing the tables of a deep pipeline grid is the cold cost of a plan (Megatron's 1T
model on 3,072 GPUs: a few hundred tables of up to 10^5 ops, most of half a minute); the numbers
a table yields (its ticks, peaks, buffer slots, makespans) are a few integers and floats. This
store keeps them in `$PAREX_CACHE/tables/` (default `~/.cache/parex/tables/`), one JSON file per
version of the code that computes them: the file is named by a hash of the modules that build and
time the tables, so a change to a schedule or to the timing never reads stale numbers. Writes go
to a temporary file renamed over the old one, merged with what other processes wrote meanwhile.
`PAREX_TABLE_STORE=0` turns the store off; `PAREX_TABLE_STORE=<folder>` keeps it there instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from ..machine import cache_dir

# modules whose code decides the stored numbers (relative to the package root)
SOURCES = ("parallel/schedules.py", "parallel/tables.py", "parallel/timetable.py",
           "predict/schedule_stats.py", "predict/table_store.py")
LIMIT = 1 << 16  # entries per kind; past it the file starts over


def enabled() -> bool:
    return os.environ.get("PAREX_TABLE_STORE", "1") != "0"


def path() -> Path:
    package = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update((package / name).read_bytes())
    chosen = os.environ.get("PAREX_TABLE_STORE", "1")
    folder = cache_dir().parent / "tables" if chosen == "1" else Path(chosen)
    return folder / f"schedule-tables-{digest.hexdigest()[:16]}.json"


def load() -> dict[str, dict]:
    """{"tables": {key: values}, "makespans": {key: values}} with tuple keys; empty when there is
    no file (or it cannot be read: the store is a cache, never a source of truth)."""
    if not enabled():
        return {"tables": {}, "makespans": {}}
    try:
        raw = json.loads(path().read_text())
        return {kind: {tuple(k): tuple(v) for k, v in raw.get(kind, [])}
                for kind in ("tables", "makespans")}
    except (OSError, ValueError, TypeError):
        return {"tables": {}, "makespans": {}}


def save(tables: dict, makespans: dict) -> None:
    """Merge these entries into the file (atomically: write a temporary file, rename it)."""
    if not enabled():
        return
    merged = load()
    for kind, new in (("tables", tables), ("makespans", makespans)):
        merged[kind].update(new)
        if len(merged[kind]) > LIMIT:
            merged[kind] = dict(new)
    target = path()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        body = json.dumps({kind: [[list(k), list(v)] for k, v in entries.items()]
                           for kind, entries in merged.items()})
        fd, temporary = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(body)
        os.replace(temporary, target)
    except OSError:
        pass  # a read-only cache costs speed, not results


__all__ = ["enabled", "load", "path", "save"]
