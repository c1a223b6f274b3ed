"""Figures that train or compile many programs: DiLoCo against sync DP and Korthikanti et al.'s
activation ratios measured.

    diloco              loss against bytes exchanged: sync DP (data = 8) and DiLoCo (4 replicas
                        of data = 2, H inner steps) on the same tokens (parex.lowcomm.studies)
    korthikanti-measured  each configuration's activation bytes per layer over no parallelism's,
                        measured on the emulated mesh (parex.studies.activation), against the
                        paper's Table 2 ratios without the dropout terms (parex has no dropout)
"""

from __future__ import annotations

from ..config import TrainConfig, model_preset
from ..predict.references import read_reference
from .core import Figure, Row, Tolerance, figure

# --- DiLoCo ---------------------------------------------------------------------------------------

DILOCO_HS, DILOCO_STEPS, REPLICAS = (10, 25), 100, 4


def diloco_rows(gaps, hs=DILOCO_HS) -> list[Row]:
    """From studies_lowcomm.final_gaps: bytes and final eval loss of each DiLoCo run over sync
    DP's."""
    refs = read_reference("diloco").set_index("quantity")["source"]
    last = gaps.set_index("run")
    sync = last.loc["sync DP"]
    rows = []
    for h in hs:
        run = last.loc[f"DiLoCo H={h}"]
        rows.append(Row(f"bytes per replica · sync DP / DiLoCo H={h}", float(h),
                        sync.cross_replica_bytes / run.cross_replica_bytes, "measured",
                        Tolerance(0.95, 1.05, "one exchange every H steps, within 5 %"),
                        note=refs["bytes"], evidence="analysis"))
        rows.append(Row(f"final eval loss · DiLoCo H={h} / sync DP", 1.0,
                        run.eval_loss / sync.eval_loss, "measured", note=refs["loss"]))
    return rows


@figure("diloco", title="DiLoCo against sync DP: loss against bytes exchanged",
        source="Douillard et al. 2023, DiLoCo (arXiv:2311.08105), abstract and §3",
        tolerance=Tolerance(0.97, 1.03, "'performs as well as fully synchronous': within 3 %"),
        evidence="measurement", slow=True, devices=8)
def diloco() -> Figure:
    from ..layout import Layout
    from ..lowcomm.studies import StudyRun, final_gaps, loss_study

    model = model_preset("tiny")
    train = TrainConfig(global_batch=16, seq_len=64, steps=DILOCO_STEPS)
    inner = 8 // REPLICAS
    runs = [StudyRun("sync DP", Layout(data=8))]
    runs += [StudyRun(f"DiLoCo H={h}", Layout(data=inner, replica=REPLICAS, inner_steps=h))
             for h in DILOCO_HS]
    frame = loss_study(model, train, runs, eval_every=25, progress=False)

    def chart():
        from ..charts.lowcomm import loss_chart

        return loss_chart(frame, title="")
    return Figure(diloco_rows(final_gaps(frame)), chart, [
        f"tiny model, {DILOCO_STEPS} steps × 16 × 64 tokens on the corpus, {REPLICAS} replicas "
        f"of data={inner}, outer Nesterov lr 0.7, momentum 0.9; sync DP's bytes are its "
        "gradient all-reduce across the replica groups, 2·(R−1)/R·4·|θ| per step; DiLoCo's "
        "are read from the compiled outer programs"])


# --- Korthikanti et al., measured ---------------------------------------------------------------

KORTHIKANTI_LENGTHS = (1024, 2048)
# Declared before anything is measured: the two modes whose layer parex stores differently from
# Megatron's (parex.studies.activation, tests/measure/test_studies_activation.py) are out of
# scope at every length, whatever their ratio.
UNSPLIT_LAYER = ("parex's unsplit layer keeps 36 h-sized and 2 score-sized float32 values per "
                 "token where Megatron's keeps 16 and 1, so the ratios of the modes that "
                 "recompute differ from the paper's (parex.studies.activation)")
SCOPED_MODES = {"tp+sp+selective": "unsplit-layer", "full": "unsplit-layer"}


@figure("korthikanti-measured",
        title="Korthikanti et al.: activation ratios measured on the emulated mesh (t = 4)",
        source="Korthikanti et al. 2022 (arXiv:2205.05198), Table 2, without the dropout terms",
        tolerance=Tolerance(0.9, 1.1, "within 10 %"), evidence="analysis", slow=True,
        devices=8, scopes={"unsplit-layer": UNSPLIT_LAYER})
def korthikanti_measured() -> Figure:
    from ..studies.activation import activation_study

    df = activation_study(model_preset("tiny"), lengths=KORTHIKANTI_LENGTHS, t=4)
    rows = [Row(f"{r.mode} / none · T={r.seq_len}", r.paper_ratio_no_dropout, r.ratio,
                "measured", scope=SCOPED_MODES.get(r.mode),
                note=f"{r.layer_bytes / 1e6:.2f} MB per layer per device measured")
            for r in df[df["mode"] != "none"].itertuples()]

    def chart():
        from .charts import lines_vs_points

        return lines_vs_points(df[df["mode"] != "none"], x="seq_len",
                               paper="paper_ratio_no_dropout", parex="ratio", series=None,
                               facet="mode", x_title="T", y_title="bytes per layer / none's",
                               width=110, height=150)
    return Figure(rows, chart, [
        "measured: the growth of the compiled loss-and-gradients' temp from 2 to 4 layers, per "
        "layer (tiny model, tensor = 4, one sequence)"])
