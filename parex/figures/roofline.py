"""The scaling book's training roofline: the tokens per chip above which data parallelism and
FSDP are compute-bound, and the F/Y above which tensor parallelism is, for TPU v5p and H100,
derived from parex's hardware profiles (data/hardware/*.json) and set beside the book's numbers
(data/reference/roofline_crossovers.csv).

Per layer (the book's MLP-only transformer, bf16): the backward's matmuls take 8·B·D·F/(X·C)
and the gradient all-reduce of W_in and W_out (FSDP: its all-gather + reduce-scatter) 8·D·F/W,
so T_math / T_comms = (B/X) / (C/W): compute-bound above B/X = α = C/W. Tensor parallelism sends
the activations, T_math / T_comms = (F/Y) / α. FSDP and TP mixed at the best split:
T_math / T_comms = √((B/N)·F·M_X·M_Y) / α. C is the profile's bf16 peak, W the collective
bandwidth the profile gives that level: TPU ICI per mesh axis (`intra_node`, a ring on one torus
axis), times the axes used; H100 NVLink egress (`intra_node`) inside a node; beyond it the node's
network egress, devices_per_node × `inter_node` (each GPU's share of a hierarchical all-reduce
leaves through its own NIC).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..hardware import Chip, load_chip
from ..predict.references import read_reference
from .core import Figure, Row, Tolerance, figure

LLAMA3_70B_FFN = 28672  # the curves' F for tensor parallelism (Llama 3 70B), Y = 8
TP_DEGREE = 8


def collective_bandwidth(chip: Chip, level: str, axes: int = 1) -> float:
    """Bytes/s one chip's share of a DP/FSDP/TP collective moves at `level`."""
    if level == "ici":
        return axes * chip.intra_node.bandwidth
    if level == "node":
        return chip.intra_node.bandwidth
    if level == "scale-out":
        return chip.devices_per_node * chip.inter_node.bandwidth
    raise ValueError(f"level {level!r}: use ici, node or scale-out")


def intensity(chip: Chip, level: str, axes: int = 1) -> float:
    """α = C / W: FLOPs per byte of the collective's bandwidth (tokens per chip at the knee)."""
    return chip.peak("bfloat16") / collective_bandwidth(chip, level, axes)


def crossover(chip: Chip, strategy: str, level: str, axes: int = 1, ffn: float = 0.0) -> float:
    """Tokens per chip (dp, fsdp, fsdp+tp) or F/Y (tp) at which T_math = T_comms."""
    if strategy == "fsdp+tp":  # M_X·M_Y = 2 on a 3D torus, the book's assumption
        return intensity(chip, level, 1) ** 2 / (2 * ffn)
    if strategy in ("dp", "fsdp", "tp"):
        return intensity(chip, level, axes)
    raise ValueError(f"strategy {strategy!r}: use dp, fsdp, tp or fsdp+tp")


def curves(chips=("tpu-v5p", "h100-sxm"), tokens=np.geomspace(16, 65536, 49)) -> pd.DataFrame:
    """T_math / T_comms against tokens per chip for each chip's strategies (the chart's data)."""
    rows = []
    for name in chips:
        chip = load_chip(name)
        levels = [("ici", 1), ("ici", 3)] if name.startswith("tpu") else [("node", 1),
                                                                           ("scale-out", 1)]
        for level, axes in levels:
            a = intensity(chip, level, axes)
            label = f"DP = FSDP ({level}{'×' + str(axes) if axes > 1 else ''})"
            rows += [{"chip": name, "curve": label, "tokens": b, "ratio": b / a} for b in tokens]
        a = intensity(chip, levels[0][0], 1)
        tp = f"TP={TP_DEGREE}, F={LLAMA3_70B_FFN}"
        rows += [{"chip": name, "curve": tp, "tokens": b,
                  "ratio": LLAMA3_70B_FFN / TP_DEGREE / a} for b in tokens]
        if name.startswith("tpu"):
            rows += [{"chip": name, "curve": f"FSDP+TP (F={LLAMA3_70B_FFN})", "tokens": b,
                      "ratio": np.sqrt(b * LLAMA3_70B_FFN * 2) / a} for b in tokens]
    return pd.DataFrame(rows)


def _chart(knees: pd.DataFrame):
    import altair as alt

    data = curves()
    panels = []
    for chip in dict.fromkeys(data["chip"]):
        x = alt.X("tokens:Q", title=f"{chip}: tokens per chip (B/X)",
                  scale=alt.Scale(type="log"))
        lines = alt.Chart(data[data.chip == chip]).mark_line().encode(
            x=x, y=alt.Y("ratio:Q", title="T_math / T_comms", scale=alt.Scale(type="log")),
            color=alt.Color("curve:N", title=None), tooltip=["curve", "tokens", "ratio"])
        one = alt.Chart(pd.DataFrame({"y": [1.0]})).mark_rule(
            strokeDash=[4, 3], color="#888").encode(y="y:Q")
        own = knees[knees.chip == chip]
        marks = alt.Chart(own).mark_rule(color="#222").encode(x="tokens:Q")
        labels = alt.Chart(own).mark_text(align="left", dx=3, dy=-3, fontSize=10).encode(
            x="tokens:Q", y=alt.Y("at:Q", scale=alt.Scale(type="log")), text="label:N")
        panels.append(alt.layer(lines, one, marks, labels).properties(width=300, height=200))
    return alt.hconcat(*panels).resolve_scale(color="independent")


# A wiring check: parex divides the profiles' vendor peak by their vendor bandwidth, as the book
# does, so agreement shows the profiles hold the book's numbers, not a reproduction.
@figure("scaling-book-roofline",
        title="Roofline: tokens per chip where DP / FSDP / TP become compute-bound (wiring "
              "check: the profiles' peak over bandwidth)",
        source="Austin et al. 2025, How to Scale Your Model (JAX scaling book): Part 5 "
               "(training), Part 12 (GPUs, Rooflines for LLM Scaling on GPUs)",
        tolerance=Tolerance(0.99, 1.01, "within 1 %: the book rounds C and its results"),
        evidence="wiring")
def scaling_book_roofline() -> Figure:
    table = read_reference("roofline_crossovers")
    rows, knees = [], []
    for r in table.itertuples():
        chip = load_chip(r.chip)
        ffn = float(r.ffn) if pd.notna(r.ffn) else 0.0
        ours = crossover(chip, r.strategy, r.level, int(r.axes), ffn)
        where = f"{r.level}×{r.axes}" if r.axes > 1 else r.level
        rows.append(Row(f"{r.chip} · {r.strategy} · {where} ({r.unit})", float(r.value), ours,
                        "predicted", note=r.source))
        if r.strategy == "dp":  # the labels of one chip's knees stacked, 10× apart in y
            at = 0.003 * 10 ** sum(k["chip"] == r.chip for k in knees)
            knees.append({"chip": r.chip, "tokens": ours, "label": f"{where}: {ours:,.0f}",
                          "at": at})
    knees = pd.DataFrame(knees)
    return Figure(rows, lambda: _chart(knees), [
        "parex: C = the profile's bf16 peak, W = its link bandwidth at that level (module doc); "
        "the chart's vertical rules mark the DP/FSDP crossovers"])
