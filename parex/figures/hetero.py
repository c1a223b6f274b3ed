"""HexiScale's headline claim: on a heterogeneous cluster its asymmetric plans reach about the
MFU of a homogeneous cluster of the same total peak FLOP/s.

    hexiscale   per scenario, the best asymmetric plan's MFU (parex.hetero.search) over the
                best plan's on the same-peak homogeneous cluster (parex.cluster.
                reference_cluster), all predicted by parex's heterogeneous predictor
                (parex.hetero.compare); beside them the best even split, drawn, not scored

The paper gives its gaps as "as low as 0.3 %, with an average of 3.5 %" (data/reference/
hexiscale.csv, the abstract of arXiv:2409.01143v2). Its testbeds' clusters and links are not in
that file, so the scenarios are benchmarks/hetero.py's (chosen with the planner, before this
figure): the same clusters at 10 and 100 Gb/s between groups. Each is held to the paper's
average gap: heterogeneous MFU / homogeneous MFU within 3.5 % of parity.
"""

from __future__ import annotations

import dataclasses

from ..predict.references import read_reference
from .core import Figure, Row, Tolerance, figure

# (label, cluster file, inter-group Gb/s override or None, model, global batch, sequence)
SCENARIOS = (
    ("het-48 · groups at 10 Gb/s · 7B", "het-48", None, "llama2-7b", 256, 4096),
    ("het-48 · groups at 100 Gb/s · 7B", "het-48", 100, "llama2-7b", 256, 4096),
    ("hexiscale-mix · 10 Gb/s · 7B", "hexiscale-mix", None, "llama2-7b", 128, 4096),
    ("het-48 · groups at 100 Gb/s · 13B", "het-48", 100, "llama2-13b", 256, 4096),
    ("het-odd · 100 Gb/s · 7B · B 96", "het-odd", None, "llama2-7b", 96, 4096),
)
AVERAGE_GAP = 0.035  # data/reference/hexiscale.csv: "mfu gap ... (average)", 3.5 %
PARITY = Tolerance(1 - AVERAGE_GAP, 1 + AVERAGE_GAP,
                   "HexiScale's average MFU gap to the same-peak homogeneous cluster: 3.5 %")


def claims() -> dict:
    """The paper's MFU-gap claims, {kind of claim: (value %, source)}."""
    table = read_reference("hexiscale")
    gaps = table[table.kind == "mfu_gap"]
    return {row.claim: (row.value_low, row.source) for row in gaps.itertuples()}


def comparisons(scenarios=SCENARIOS) -> list[tuple[str, object]]:
    """(label, parex.hetero.Comparison) of each scenario."""
    from ..cluster import load_hetero_cluster
    from ..config import model_preset
    from ..hetero import compare

    out = []
    for label, name, gbps, model, batch, seq in scenarios:
        cluster = load_hetero_cluster(name)
        if gbps is not None:
            cluster = dataclasses.replace(cluster, inter_group_gbps=gbps)
        out.append((label, compare(model_preset(model), cluster, batch, seq)))
    return out


def hexiscale_rows(compared) -> list[Row]:
    average = next(value for claim, value in claims().items() if "average" in claim)
    if abs(average[0] / 100 - AVERAGE_GAP) > 1e-9:  # the tolerance is the file's number
        raise ValueError(f"data/reference/hexiscale.csv gives an average gap of {average[0]} %"
                         f"; parex.figures.hetero.AVERAGE_GAP says {AVERAGE_GAP:.1%}")
    rows = []
    for label, c in compared:  # no fitting homogeneous plan: NaN, which fails
        even, homogeneous = (f"{x.mfu:.1%}" if x else "none fits"
                             for x in (c.even, c.homogeneous and c.homogeneous.best))
        rows.append(Row(f"{label}: MFU / same-peak homogeneous MFU", 1.0,
                        c.versus_homogeneous, "predicted",
                        note=f"asymmetric {c.search.best.mfu:.1%}, {c.reference.name} "
                             f"{homogeneous}, best even split {even}; paper: {average[1]}"))
    return rows


def _frame(compared):
    import pandas as pd

    rows = []
    for label, c in compared:
        for plan, best in (("asymmetric plan", c.search.best), ("best even split", c.even),
                           ("same-peak homogeneous", c.homogeneous and c.homogeneous.best)):
            rows.append({"scenario": label, "plan": plan,
                         "mfu": best.mfu if best else float("nan")})
    return pd.DataFrame(rows)


def _chart(frame):
    import altair as alt

    order = ["asymmetric plan", "best even split", "same-peak homogeneous"]
    return alt.Chart(frame).mark_bar().encode(
        x=alt.X("plan:N", title=None, sort=order, axis=alt.Axis(labels=False, ticks=False)),
        y=alt.Y("mfu:Q", title="predicted MFU", axis=alt.Axis(format="%")),
        color=alt.Color("plan:N", sort=order, title=None,
                        scale=alt.Scale(range=["#f58518", "#bab0ac", "#4c78a8"])),
        column=alt.Column("scenario:N", title=None, sort=[s[0] for s in SCENARIOS],
                          header=alt.Header(labelFontSize=9,
                                            labelExpr="split(datum.label, ' · ')")),
        tooltip=["scenario", "plan", alt.Tooltip("mfu:Q", format=".1%")],
    ).properties(width=85, height=170)


@figure("hexiscale", title="HexiScale: heterogeneous MFU against a same-peak homogeneous cluster",
        source="Yan et al., HexiScale (arXiv:2409.01143v2), abstract p.1",
        tolerance=PARITY, evidence="measurement", slow=True)
def hexiscale() -> Figure:
    compared = comparisons()
    return Figure(hexiscale_rows(compared), lambda: _chart(_frame(compared)), [
        "predicted by parex.hetero (search, best even split, the same-peak homogeneous "
        "cluster's search), bf16 mixed recipe, llama2 at 4096 tokens",
        "the paper's testbeds and their links are not in data/reference; where the groups "
        "are joined at 10 Gb/s parex predicts a far larger gap than the paper reports (README, "
        "Heterogeneous clusters: a cross-group hop of a 4096-token activation costs about a "
        "stage's compute on the 1F1B critical path in parex's model)",
        "HexiScale's 1.5-2.4x over other heterogeneous systems is not scored: the even split "
        "is not those systems"])


__all__ = ["AVERAGE_GAP", "SCENARIOS", "claims", "comparisons", "hexiscale_rows"]
