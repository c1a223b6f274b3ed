"""Durable sweeps: many configurations, each measured in its own subprocess, every finished
record appended to a JSONL store that survives the sweep being killed.

    configs = [SweepConfig("tiny", "data=2,tensor=4", steps=5), ...]   # or grid_configs(toml)
    run_sweep(configs, "results.jsonl", resume=True, timeout=600)
    df = load("results.jsonl")                # the tidy DataFrame the charts read

Each configuration runs `parex run --json` (parex.measure.measure) in a fresh Python process, so
an XLA abort or a hang (cut at `timeout` seconds) costs one record, not the sweep. A record is one
line: the config, its stable `key`, `status` (ok, error, timeout, invalid), the Measurement's
to_json() or the error, and timings. Lines are written whole, flushed and fsynced; a line torn by
a kill mid-write is dropped on the next resume, which skips every key already in the store.
The store and the shards that cluster tasks add to it: parex.sweep.store; the SLURM job array
(submitit): parex.sweep.slurm and parex.sweep.executor.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..defaults import LOCAL_GLOBAL_BATCH
from ..config import TrainConfig
from ..errors import InputError
from ..layout import Layout, LayoutError
from ..record import Measurement, collectives_from_json
from ..validation import validate
from .store import append_record, read_records, repair_tail

STATUSES = ("ok", "error", "timeout", "invalid")
PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # the child imports this same parex


@dataclass(frozen=True)
class SweepConfig:
    """One measurement: what `parex run` is given."""

    model: str  # model preset
    layout: str  # Layout string (a preset name needs `devices`)
    global_batch: int = LOCAL_GLOBAL_BATCH  # the emulated mesh's default (parex.defaults)
    microbatch: int | None = None  # sequences per replica per microbatch
    seq_len: int | None = None  # None: the model's
    steps: int = 5
    remat: str = "none"
    dtype: str | None = None  # None: the preset's
    devices: int | None = None  # None: what the layout uses
    data: str = "corpus"  # or "synthetic"

    def key(self) -> str:
        """A stable name for resume: a hash of the config's canonical JSON."""
        text = json.dumps(dataclasses.asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def n_devices(self) -> int:
        """`devices`, else what the layout uses (a preset: `parex run`'s default count)."""
        from ..defaults import DEVICES as DEFAULT_DEVICES

        if self.devices:
            return self.devices
        return Layout.parse(self.layout, DEFAULT_DEVICES).n_devices

    def check(self) -> None:
        """Validation before launching: LayoutError / ValueError naming the fix."""
        from ..config import model_preset

        model = model_preset(self.model)
        train = TrainConfig(global_batch=self.global_batch, microbatch=self.microbatch,
                            seq_len=self.seq_len, steps=self.steps, remat=self.remat)
        n = self.n_devices()
        validate(Layout.parse(self.layout, n), model, train, n)

    def argv(self) -> list[str]:
        """The `parex run --json` command that measures this config."""
        args = [sys.executable, "-m", "parex.cli", "run", "--json", "--model", self.model,
                "--layout", self.layout, "--devices", str(self.n_devices()),
                "--global-batch", str(self.global_batch), "--steps", str(self.steps),
                "--remat", self.remat, "--data", self.data]
        for flag, value in (("--microbatch", self.microbatch), ("--seq", self.seq_len),
                            ("--dtype", self.dtype)):
            if value is not None:
                args += [flag, str(value)]
        return args


# --- running one config --------------------------------------------------------------------------

def _die_with_parent() -> None:
    """Linux: the measuring child gets SIGKILL when the sweep dies, so none is left running."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_ROOT)] + [p for p in env.get(
        "PYTHONPATH", "").split(os.pathsep) if p])
    return env


def measure_in_subprocess(argv: list[str], timeout: float | None) -> tuple[str, dict | None, str]:
    """(status, Measurement JSON or None, error text) of one `parex run --json` child."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env=child_env(), preexec_fn=_die_with_parent)
    except subprocess.TimeoutExpired:
        return "timeout", None, f"killed after the {timeout:g} s timeout"
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-20:])
        return "error", None, f"exit status {done.returncode}: {tail}"
    try:
        return "ok", json.loads(done.stdout), ""
    except json.JSONDecodeError:
        return "error", None, f"the child printed no JSON: {done.stdout[-500:]!r}"


def run_config(config: SweepConfig, timeout: float | None, argv_of=SweepConfig.argv) -> dict:
    """The record of one config: checked first (an impossible layout never starts a child)."""
    start, started_at = time.perf_counter(), time.time()
    try:
        config.check()
        status, measurement, error = measure_in_subprocess(argv_of(config), timeout)
    except (LayoutError, ValueError) as exc:
        status, measurement, error = "invalid", None, str(exc)
    return {"key": config.key(), "config": dataclasses.asdict(config), "status": status,
            "measurement": measurement, "error": error or None, "started_at": started_at,
            "elapsed_s": time.perf_counter() - start}


def check_names(configs) -> None:
    """A mistyped model name is bad input, not a record: refused before anything runs, with
    the nearest presets (an impossible layout, by contrast, is recorded as `invalid`)."""
    from ..config import model_preset

    for name in dict.fromkeys(c.model for c in configs):
        model_preset(name)


def run_sweep(configs, out, *, resume: bool = False, timeout: float | None = None,
              retry_failed: bool = False, progress: bool = True,
              argv_of=SweepConfig.argv) -> dict:
    """Measure every config not yet in the store `out`; returns counts by status (and
    `skipped`). Without `resume` an existing store is refused rather than extended."""
    from tqdm.auto import tqdm

    out = Path(out)
    check_names(configs)
    if out.exists() and out.stat().st_size and not resume:
        raise InputError(f"{out} already holds results: pass --resume to continue that sweep "
                         f"(finished configs are skipped), or choose another --out")
    repair_tail(out)
    done = {r["key"] for r in read_records(out) if not retry_failed or r["status"] == "ok"}
    unique = list({c.key(): c for c in configs}.values())
    todo = [c for c in unique if c.key() not in done]
    counts = dict.fromkeys(STATUSES, 0) | {"skipped": len(unique) - len(todo)}
    bar = tqdm(todo, desc="sweep", unit="config", disable=not progress)
    for config in bar:
        bar.set_postfix_str(f"{config.model} {config.layout}")
        record = run_config(config, timeout, argv_of)
        append_record(out, record)
        counts[record["status"]] += 1
    bar.close()
    return counts


# --- reading results back ------------------------------------------------------------------------

def error_line(error) -> str:
    """The line of a failure's error that says what went wrong, whole (never cut): the last
    line the child printed (its one `parex: ...` line, or a traceback's exception)."""
    lines = [line.strip() for line in str(error or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def error_notes(errors, width: int = 100) -> tuple[list[str], list[str]]:
    """A mark per record ('' where `errors` holds None) and the notes the marks point to, one
    per distinct error line, wrapped at `width` columns, never cut: a table keeps its width
    and every message keeps its fix."""
    import textwrap

    numbers: dict[str, int] = {}
    marks = []
    for error in errors:
        line = error_line(error) if error is not None else ""
        if line:
            numbers.setdefault(line, len(numbers) + 1)
        marks.append(f"[{numbers[line]}]" if line else "")
    notes = [textwrap.fill(line, width, initial_indent=f"[{n}] ", subsequent_indent="    ",
                           break_long_words=False, break_on_hyphens=False)
             for line, n in numbers.items()]
    return marks, notes


MEASUREMENT_FIELDS = {f.name for f in dataclasses.fields(Measurement)}


def measurement_of(data: dict) -> Measurement:
    """A Measurement from its to_json()."""
    fields = {k: v for k, v in data.items() if k in MEASUREMENT_FIELDS}
    fields["collectives"] = collectives_from_json(data.get("collectives", []))
    return Measurement(**fields)


def latest(records: list[dict]) -> list[dict]:
    """The last record of each key, in the order keys first appeared."""
    by_key: dict = {}
    for r in records:
        by_key[r["key"]] = r  # a dict keeps each key where it first appeared
    return list(by_key.values())


def load(path):
    """The store as a tidy DataFrame: one row per config (its latest record) with the config's
    train settings, the status and error, and Measurement.to_row()'s columns (NaN for
    failures)."""
    import pandas as pd

    rows = []
    for r in latest(read_records(path)):
        c = r["config"]
        row = {"key": r["key"], "status": r["status"], "error": r["error"],
               "elapsed_s": r["elapsed_s"], "source": "measured", "model": c["model"],
               "layout": c["layout"]}
        row |= {f"train_{k}": c[k] for k in ("global_batch", "microbatch", "seq_len", "steps",
                                              "remat", "dtype")}
        if r["status"] == "ok":
            row |= measurement_of(r["measurement"]).to_row()
        rows.append(row)
    return pd.DataFrame(rows)


__all__ = ["STATUSES", "SweepConfig", "append_record", "check_names", "error_line",
           "error_notes", "latest", "load", "measurement_of", "read_records", "run_config",
           "run_sweep"]
