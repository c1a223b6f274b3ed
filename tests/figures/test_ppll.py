"""The `ppll` figure: its predicted rows (fast) and how measured runs become rows."""

import math

from parex.figures import FIGURES, scoring
from parex.figures.ppll import measured_rows, paper, predicted_rows, vit_speed_row


def test_ppll_is_registered_with_its_paper_values():
    spec = FIGURES["ppll"]
    assert spec.slow and spec.devices == 8 and "2411.12780" in spec.source
    assert (paper("speed_vit"), paper("speed_resnet"), paper("loss")) == (1.25, 0.85, 1.0)
    assert paper("activations") == 0.25  # 1/p at p = 4


def test_predicted_rows_are_the_papers_vit_and_the_resnet_out_of_scope():
    rows = predicted_rows()
    compute, whole, acts, resnet = rows
    assert "ViT" in compute.quantity and "compute" in compute.quantity
    assert "whole step" in whole.quantity
    for r in (compute, whole):  # brackets over the widths and local heads the paper leaves open
        assert r.is_bracket and 1 < r.low < r.high <= 11 / 8 + 0.01  # at most the flush-free bound
        assert scoring.verdict(r, FIGURES["ppll"].tolerance) == scoring.WITHIN
    assert acts.parex == 1 / 4  # one microbatch in flight against 1F1B's p
    assert acts.evidence == "wiring"  # 1/p is parex's reading: the paper gives no number
    assert resnet.scope == "resnet" and "resnet" in FIGURES["ppll"].scopes
    assert scoring.verdict(resnet, FIGURES["ppll"].tolerance) == scoring.OUT_OF_SCOPE


def _run(step_s, loss, temp):
    return {"step_s": step_s, "eval": {50: loss + 1, 100: loss},
            "stats": {"memory_bytes_per_device": {"temp": temp}}}


def test_measured_rows_are_all_scored_whatever_they_say():
    runs = {"1f1b": _run(0.8, 2.0, 100), "local ce": _run(0.84, 2.1, 25),
            "local recon": _run(0.9, 2.3, 26)}
    rows = {r.quantity: r for r in measured_rows(runs)}
    speed = rows["speed 1F1B/local · emulated mesh, tiny"]
    assert speed.parex == 0.8 / 0.84 and speed.scope is None
    assert not speed.tolerance.holds(speed.ratio)  # slower than 1F1B: outside, and it counts
    assert all(r.scope is None for r in rows.values())
    assert math.isclose(rows["loss local recon/1F1B · step 100, equal tokens"].parex, 2.3 / 2.0)
    temporaries = rows["temporaries local/1F1B · compiled step, tiny"]
    assert temporaries.parex == 0.25 and temporaries.evidence == "wiring"


def test_the_vits_measured_speed_is_scored_against_the_papers_vit():
    row = vit_speed_row({"1f1b": _run(0.9, 0.3, 10), "local ce": _run(0.75, 0.4, 3)}, 128)
    assert row.kind == "measured" and row.paper == 1.25 and row.scope is None
    assert row.parex == 0.9 / 0.75 and row.tolerance.holds(row.ratio)
    assert "128 synthetic images" in row.note and "0.300 (1F1B)" in row.note
