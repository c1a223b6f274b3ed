"""GPipe against 1F1B: activation memory against m, read from the compiled steps.

Four stages of one layer each (data = 2, stage = 4 on 8 emulated devices), m = 4, 8, 16, every
step compiled (nothing runs). Activation memory is XLA's temp buffer less what does not grow with
m: GPipe's temp is a straight line in m (it stashes every microbatch until the backward), whose
intercept is the step's working set without stashed activations; that intercept is subtracted
from both schedules. The paper's claims: GPipe holds m microbatches, 1F1B at most p, so their
activation memories stand as m/p, and 1F1B's does not grow with m.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..config import ModelConfig, TrainConfig
from .core import Figure, Row, Tolerance, figure
from .pipelines import formula

MODEL = ModelConfig("pipe-mem", layers=4, hidden=64, heads=2, vocab=64, seq_len=64)
STAGES, MS = 4, (4, 8, 16)
HEAD = ("the stashes of the embedding and head count with the activations: 1F1B's last stage "
        "keeps one microbatch for its head, GPipe's m")


def compiled_temps(ms=MS) -> pd.DataFrame:
    """XLA temp bytes per device of GPipe and 1F1B at p = 4 for each m."""
    from ..layout import Layout
    from ..measure.compiled import compile_layout, compiled_stats

    rows = []
    for name in ("gpipe", "1f1b"):
        for m in ms:
            layout = Layout.parse(f"data=2,stage={STAGES},schedule={name},microbatches={m}")
            step, executable, _ = compile_layout(MODEL, TrainConfig(global_batch=2 * m), layout)
            temp = compiled_stats(executable, step)["memory_bytes_per_device"]["temp"]
            rows.append({"schedule": name, "m": m, "temp_bytes": temp})
    return pd.DataFrame(rows)


def activation_frame(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with `activation_bytes`: temp less the intercept of GPipe's line in m."""
    gpipe = df[df.schedule == "gpipe"]
    _, intercept = np.polyfit(gpipe.m, gpipe.temp_bytes, 1)
    return df.assign(activation_bytes=df.temp_bytes - intercept, base_bytes=intercept)


def memory_rows(df: pd.DataFrame) -> list[Row]:
    act = df.set_index(["schedule", "m"])["activation_bytes"]
    p, first = STAGES, min(df.m)
    rows = []
    for m in sorted(set(df.m)):
        paper = formula("gpipe_in_flight", m=m) / formula("1f1b_in_flight", p=p)
        rows.append(Row(f"GPipe / 1F1B activations · m={m}", paper,
                        act["gpipe", m] / act["1f1b", m], "measured", note=HEAD))
    # GPipe's own growth is not a row: its line in m sets the intercept, so it grows as m by
    # construction. 1F1B's is measured against that intercept.
    last = max(df.m)
    held = {m: formula("1f1b_in_flight", m=m, p=p) for m in (first, last)}
    rows.append(Row(f"1f1b activations · m={last} / m={first}", held[last] / held[first],
                    act["1f1b", last] / act["1f1b", first], "measured"))
    return rows


def _chart(df: pd.DataFrame):
    import altair as alt

    return alt.Chart(df).mark_line(point=True).encode(
        x=alt.X("m:Q", title="microbatches m", scale=alt.Scale(type="log", base=2)),
        y=alt.Y("temp_bytes:Q", title="XLA temp per device (bytes)", axis=alt.Axis(format="~s")),
        color=alt.Color("schedule:N"),
        tooltip=["schedule", "m", alt.Tooltip("temp_bytes:Q", format=",")],
    ).properties(width=420, height=200)


@figure("pipeline-memory", title="GPipe against 1F1B: activation memory against m (p = 4)",
        source="Narayanan et al. 2021 (arXiv:2104.04473), §2.2.1 (GPipe stashes m "
               "microbatches, 1F1B at most p)",
        tolerance=Tolerance(0.8, 1.2, "within 20 %: the embedding's and head's stashes count "
                                      "with the blocks' activations"),
        evidence="analysis", slow=True, devices=8)
def pipeline_memory() -> Figure:
    df = activation_frame(compiled_temps())
    return Figure(memory_rows(df), lambda: _chart(df), [
        f"{STAGES} stages of one layer (hidden {MODEL.hidden}, T = {MODEL.seq_len}), data = 2, "
        f"one sequence per microbatch per replica; activation = temp − "
        f"{df.base_bytes.iloc[0] / 1e6:.2f} MB (GPipe's intercept)"])
