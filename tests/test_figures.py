"""The paper-figure gallery: every figure held to its stated tolerance, the registry's missing
and error paths, the JSON and the scoreboard. Predicted figures run in the default suite (no
compile); measured ones are slow and run as `parex figure NAME --json` does, in their own
process with the devices they need."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from parex.figures import FIGURES, FeatureMissing, Figure, Row, Tolerance, compute
from parex.figures import core, runner, scoreboard
from parex.figures.pipelines import formula
from parex.figures.tables import evaluate_formula, printed_half_unit

FAST = [name for name, s in FIGURES.items() if not s.slow]
SLOW = [name for name, s in FIGURES.items() if s.slow and name != "hexiscale"]


@pytest.fixture(scope="module")
def fast_results():
    return {name: compute(name) for name in FAST}


def test_the_gallery_has_the_issue_figures_in_order():
    assert list(FIGURES)[:4] == ["zero-table1", "korthikanti-table2", "korthikanti-measured",
                                 "megatron-table1"]
    assert {"pipeline-bubble", "pipeline-memory", "zero-bubble", "interleaved-bubble",
            "ring-ulysses", "diloco", "hexiscale", "scaling-book-roofline"} <= set(FIGURES)
    for s in FIGURES.values():  # every figure names its paper and how far it may be off
        assert "arXiv" in s.source or "scaling book" in s.source.lower(), s.source
        assert 0 <= s.tolerance.lo <= 1 <= s.tolerance.hi and s.tolerance.rule


@pytest.mark.parametrize("name", FAST)
def test_predicted_figures_are_within_their_tolerance(fast_results, name):
    result = fast_results[name]
    assert result.status == "passed", scoreboard.text_report(result)
    assert result.kinds() == ["predicted"]
    for row in result.held_rows():
        assert result.within(row), row


def test_zero_table1_known_deviations_are_zero3_replicated_state(fast_results):
    """Five ZeRO-3 cells at N_d ≥ 64 fall outside 1 %: each carries parex's replicated biases
    and norms, so parex holds more than the paper there, never less."""
    result = fast_results["zero-table1"]
    known = [r for r in result.rows if r.known]
    assert len(result.rows) == 54 and len(known) == 5
    assert all("P_os+g+p" in r.quantity and r.ratio > 1 for r in known)
    assert {r.quantity.split(" · ")[1] for r in known} == {"N_d=64", "N_d=256", "N_d=1024"}


def test_megatron_is_leave_one_out_and_scored_as_tflops(fast_results):
    rows = fast_results["megatron-table1"].rows
    assert len(rows) == 10 and rows[0].paper == 137  # 1.7B: 137 TFLOP/s per GPU
    assert all("fitted on the other 9" in r.note for r in rows)
    assert 0.88 <= min(r.ratio for r in rows) and max(r.ratio for r in rows) <= 1.12


def test_roofline_crossovers_follow_from_the_profiles(fast_results):
    """TPU v5p: 4.59e14 / 1.8e11 = 2550 tokens per chip; H100: 989e12 / 450e9 in a node."""
    rows = {r.quantity: r.parex for r in fast_results["scaling-book-roofline"].rows}
    assert rows["tpu-v5p · dp · ici (tokens per chip)"] == pytest.approx(2550, rel=1e-3)
    assert rows["tpu-v5p · dp · ici×3 (tokens per chip)"] == pytest.approx(850, rel=1e-3)
    assert rows["h100-sxm · dp · node (tokens per GPU)"] == pytest.approx(989 / 0.45, rel=1e-3)


def test_interleaved_bubble_is_p_minus_one_over_v_m(fast_results):
    rows = {r.quantity: r for r in fast_results["interleaved-bubble"].rows}
    assert rows["p=4 m=8 v=4 (fraction of the ideal)"].parex == pytest.approx(3 / 32)
    assert formula("interleaved_bubble", p=4, m=8, v=2) == pytest.approx(3 / 16)


def test_formulas_are_arithmetic_only():
    assert evaluate_formula("s*b*h*(34 + 5*a*s/h)", s=2, b=1, h=4, a=2) == 2 * 4 * (34 + 5)
    with pytest.raises(ValueError, match="only"):
        evaluate_formula("__import__('os')", s=1)
    assert printed_half_unit("0.12") == 0.005 and printed_half_unit("4187") == 0.5


def test_a_figure_outside_its_tolerance_fails_and_a_missing_one_is_listed_missing():
    spec = core.Spec("t", "t", "arXiv:0", Tolerance(0.9, 1.1, "10 %"),
                     lambda: Figure([Row("a", 1.0, 1.05), Row("b", np.float64(2), 2.5)]))
    result = core.run(spec)
    assert result.status == "failed" and result.passed is False
    assert [result.within(r) for r in result.rows] == [True, False]
    assert json.loads(json.dumps(result.to_json()))["worst_ratio"] == pytest.approx(1.25)
    explained = core.run(core.Spec("t", "t", "arXiv:0", Tolerance(0.9, 1.1), lambda: Figure(
        [Row("a", 1.0, 1.05), Row("b", 2.0, 2.5, known="a named cause")])))
    assert explained.status == "passed" and explained.to_json()["known_deviations"] == 1

    def absent():
        raise FeatureMissing("parex.hetero is not in this checkout")
    missing = core.run(core.Spec("m", "m", "arXiv:0", Tolerance(0.9, 1.1), absent))
    assert missing.status == "missing" and missing.passed is None and not missing.rows
    assert "missing" in scoreboard.markdown([missing])


def test_hexiscale_is_missing_until_parex_hetero_lands():
    import importlib.util

    if importlib.util.find_spec("parex.hetero") is not None:
        pytest.skip("parex.hetero is here: the slow test holds the figure to its tolerance")
    result = compute("hexiscale")
    assert result.status == "missing" and "parex.hetero" in result.reason


def test_json_and_scoreboard_and_pictures(fast_results, tmp_path):
    """One figure through the CLI's path: JSON fields, PNG and SVG written, scoreboard rows."""
    result = runner.compute_and_save(FIGURES["interleaved-bubble"], tmp_path)
    data = json.loads(json.dumps(result.to_json()))
    assert {"name", "source", "rows", "tolerance", "passed"} <= set(data)
    assert set(data["rows"][0]) >= {"quantity", "paper", "parex", "ratio"}
    assert (tmp_path / "interleaved-bubble.png").stat().st_size > 1000
    assert "<svg" in (tmp_path / "interleaved-bubble.svg").read_text()[:500]
    paths = scoreboard.write([result, fast_results["zero-table1"]], tmp_path, 12.0)
    md = paths["md"].read_text()
    assert "[Interleaved 1F1B: the bubble against v](#interleaved-bubble)" in md
    assert "interleaved-bubble.png" in md
    assert "known deviation" in md and "predicted" in md
    assert "<table>" in paths["html"].read_text()
    back = core.from_json(data)
    assert back.status == result.status and back.rows[0].ratio == result.rows[0].ratio


def test_cli_lists_figures_and_rejects_unknown_names(capsys):
    from parex.cli import main

    assert main(["figure", "--list"]) == 0
    assert "scaling-book-roofline" in capsys.readouterr().out
    assert main(["figure", "zero-tabel1"]) == 2
    assert "known figures: zero-table1" in capsys.readouterr().err


def _in_own_process(name: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "parex.cli", "figure", name, "--json"],
                          capture_output=True, text=True, timeout=3600)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_measured_figures_are_within_their_tolerance(name):
    data = _in_own_process(name)
    assert "measured" in data["kinds"]
    off = [(r["quantity"], r["ratio"]) for r in data["rows"] if not r["within"] and not r["known"]]
    assert data["passed"], off
    assert all(math.isfinite(r["ratio"]) for r in data["rows"])


@pytest.mark.slow
def test_hexiscale_within_its_tolerance_once_parex_hetero_is_here():
    data = _in_own_process("hexiscale")
    if data["status"] == "missing":
        pytest.skip(data["reason"])
    assert data["passed"], data["rows"]
