"""Ring attention and DeepSpeed-Ulysses: memory and communication against sequence length, read
from the compiled steps of the tiny model, one sequence split over n = 4 devices
(parex.studies.sequence), beside the papers' numbers:

    Ulysses   all-to-all per layer, forward: 3·N·h for Q, K, V and N·h for the output, over P
              devices, "an aggregate communication volume per link of 4Nh/P" (Jacobs et al.
              2023, §3.2). parex: the step's all-to-all bytes per device / (2·L) (the backward
              runs the four transposed all-to-alls). hlo.py's convention counts the array a
              device sends: its N/P·h shard, the paper's "per link" M/P.
    Ring      each device passes its K and V blocks (N/P tokens) to the next, P − 1 times per
              layer forward: 2·(P−1)·(N/P)·h (Liu et al. 2023, §3, Algorithm 1). parex: the
              step's collective-permute bytes / (3·L): its backward sends K, V round again and
              dK, dV with them, twice the forward.
    Memory    ring attention trains P times longer sequences in the memory one device needs
              for 1/P of it (Liu et al. 2023, abstract): temp(ring, N) / temp(one device, N/P)
              at most 1.
Bytes are float32 (the tiny preset's dtype), as the compiled step sends them.
"""

from __future__ import annotations

import pandas as pd

from ..config import model_preset
from ..predict.references import read_reference
from .core import Figure, Row, Tolerance, figure

N_DEVICES, LENGTHS = 4, (512, 1024, 2048)
COMM = Tolerance(0.999, 1.001, "bytes from the compiled HLO: exact")
MEMORY = Tolerance(0.0, 1.05, "an upper bound: P times the sequence in no more memory")


def study(model, lengths=LENGTHS, n: int = N_DEVICES) -> pd.DataFrame:
    """Compiled memory and collectives of single, tp+sp, ring and Ulysses at each length, and of
    one device at each length / n (the memory row's reference)."""
    import jax

    from ..studies.sequence import measure_point, study_points

    devices = jax.devices()
    points = study_points(model, lengths, ("single", "tp+sp", "ring", "ulysses"), n)
    points += study_points(model, [t // n for t in lengths if t // n not in lengths],
                           ("single",), n)
    return pd.DataFrame([measure_point(*point, devices) for point in points])


def sequence_rows(df: pd.DataFrame, model, n: int = N_DEVICES) -> list[Row]:
    refs = read_reference("sequence_parallel").set_index("quantity")["source"]
    at = df.set_index(["mode", "seq_len"])
    L, h, b = model.layers, model.hidden, 4
    rows = []
    for T in sorted(set(df[df["mode"] == "ring"].seq_len)):
        ulysses = at.loc[("ulysses", T), "comm_all_to_all_bytes"] / (2 * L)
        rows.append(Row(f"Ulysses all-to-all per layer · N={T} (bytes/device)",
                        4 * T * h * b / n, ulysses, "measured", COMM, note=refs["ulysses"]))
        ring = at.loc[("ring", T), "comm_collective_permute_bytes"] / (3 * L)
        rows.append(Row(f"ring K/V sent per layer · N={T} (bytes/device)",
                        2 * (n - 1) * (T // n) * h * b, ring, "measured", COMM,
                        note=refs["ring"]))
        ratio = at.loc[("ring", T), "memory_temp_bytes"] / at.loc[("single", T // n),
                                                                  "memory_temp_bytes"]
        rows.append(Row(f"ring temp at N={T} / one device at N={T // n}", 1.0, ratio,
                        "measured", MEMORY, note=refs["ring_memory"]))
    return rows


def _chart(df: pd.DataFrame):
    import altair as alt

    split = df[df["mode"] != "single"].assign(
        comm=lambda d: d.comm_total_bytes).melt(
        id_vars=["mode", "seq_len"], value_vars=["memory_temp_bytes", "comm"],
        var_name="what", value_name="bytes")
    single = df[df["mode"] == "single"].assign(what="memory_temp_bytes",
                                               bytes=lambda d: d.memory_temp_bytes)
    data = pd.concat([split, single[["mode", "seq_len", "what", "bytes"]]])
    data["what"] = data.what.map({"memory_temp_bytes": "temp memory per device",
                                  "comm": "collective bytes per device per step"})
    return alt.Chart(data).mark_line(point=True).encode(
        x=alt.X("seq_len:Q", title="sequence length N", scale=alt.Scale(type="log", base=2)),
        y=alt.Y("bytes:Q", title=None, scale=alt.Scale(type="log"), axis=alt.Axis(format="~s")),
        color=alt.Color("mode:N"), column=alt.Column("what:N", title=None),
        tooltip=["mode", "seq_len", alt.Tooltip("bytes:Q", format=",")],
    ).properties(width=260, height=190).resolve_scale(y="independent")


@figure("ring-ulysses", title="Ring attention and Ulysses: memory and communication against N",
        source="Jacobs et al. 2023, DeepSpeed-Ulysses (arXiv:2309.14509), §3.2; Liu et al. "
               "2023, Ring Attention (arXiv:2310.01889), §3 and abstract",
        tolerance=COMM, evidence="analysis", slow=True, devices=8)
def ring_ulysses() -> Figure:
    model = model_preset("tiny")
    df = study(model)
    return Figure(sequence_rows(df, model), lambda: _chart(df), [
        f"tiny model (L={model.layers}, h={model.hidden}, {model.heads} heads), one sequence "
        f"on n={N_DEVICES} devices, float32; single, tp and tp+sp drawn for scale; parex's "
        "Ulysses attends over the whole sequence for H/P heads with materialised scores (no "
        "flash attention), so its memory grows as N²"])
