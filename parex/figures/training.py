"""Figures that compile many programs: Korthikanti et al.'s activation ratios measured (DiLoCo's
training figures are in figures/lowcomm.py).

    korthikanti-measured  each configuration's activation bytes per layer over no parallelism's,
                        measured on the emulated mesh (parex.studies.activation), against the
                        paper's Table 2 ratios without the dropout terms (parex has no dropout)
"""

from __future__ import annotations

from ..config import model_preset
from .core import Figure, Row, Tolerance, figure

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
