"""The paper-figure gallery: every figure held to its stated tolerance, the registry's missing
and error paths, the JSON, the scoreboard and the CLI. Predicted figures run in the default
suite (nothing compiles); the measured ones, and the heterogeneous search over five clusters,
are slow and run as `parex figure NAME --json` does, in their own process."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from parex.figures import FIGURES, FeatureMissing, Figure, Row, Tolerance, compute
from parex.figures import core, hetero, runner, scoreboard
from parex.figures.pipelines import formula
from parex.figures.tables import evaluate_formula, printed_half_unit

FAST = [name for name, s in FIGURES.items() if not s.slow]
SLOW = [name for name, s in FIGURES.items() if s.slow]
# Slow figures that fail their tolerance today, the rows that fail and why: the test checks
# that nothing else fails, then records the figure as an expected failure.
KNOWN_FAILING = {
    "diloco": ("final eval loss", "100 steps from scratch: DiLoCo's eval loss is ~15 % above "
               "sync DP's; the paper's claim is for long runs"),
    "hexiscale": (("10 Gb/s", "100 Gb/s · 13B"),
                  "parex predicts a far larger gap than the paper's where groups are joined at "
                  "10 Gb/s; the 13B at 100 Gb/s is 3.53 % against the paper's 3.5 % average "
                  "(flash attention, the accelerators' default, speeds the homogeneous reference)"),
}
# The measured pipeline figures at p = 2: exactly these rows may miss their tolerance, each only
# the way its cause allows (a bound the row must still hold, `_MAY_DEVIATE`); every other row,
# the tables' and the lockstep executor's, must be within its tolerance or a named deviation.
# Runs behind the causes: docs/results/2026-12-pipeline-bubble.md.
PIPELINE_DEVIATIONS = {
    "pipeline-bubble": (
        {f"{s} · m={m} · measured" for s in ("gpipe", "1f1b") for m in (2, 4, 8)},
        "every tick of the tick-synchronous executor pays a rendezvous (a thread wake-up on the "
        "2 shared cores) that one stage alone does not, so the wall-time bubble sits near "
        "0.5 whatever m: above (p−1)/(m+p−1), never below it"),
    "zero-bubble": (
        {f"{n}/1f1b step time · m={m} · measured" for n in ("zbh1", "zbv") for m in (4, 8)}
        | {f"zbh1/1f1b bubble time · m={m} · measured" for m in (4, 8)},
        "on the 2 shared cores the ZB/1F1B step-time and idle-time ratios scatter from run to "
        "run by as much as the effect (step 0.63-1.07× 1F1B's, the tables 0.8-0.93×)"),
}


def _may_deviate(name: str, row: dict) -> bool:
    """The bound a listed row keeps while off its tolerance: a measured bubble is a fraction
    of the step and at least 2/3 of the formula (the per-tick cost only adds idle time); a
    ZB/1F1B step ratio lies within a factor 2 of 1F1B's (one more backward would be ~1.3×,
    a lost microbatch ~0.75×); an idle-time ratio is positive."""
    value = row["parex"]
    if name == "pipeline-bubble":
        return 0 < value < 1 and row["ratio"] >= 2 / 3
    if "step time" in row["quantity"]:
        return 0.5 < value < 2
    return value > 0


@pytest.fixture(scope="module")
def fast_results():
    return {name: compute(name) for name in FAST}


def test_the_gallery_has_the_issue_figures_in_order():
    assert list(FIGURES) == list(runner.ORDER)
    assert {"zero-table1", "korthikanti-table2", "korthikanti-measured", "megatron-table1",
            "pipeline-bubble", "pipeline-memory", "zero-bubble", "interleaved-bubble",
            "ring-ulysses", "diloco", "hexiscale", "scaling-book-roofline",
            "axonn", "ppll", "moe"} == set(FIGURES)
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
    """Seven ZeRO-3 cells hold over 1 % more than 16Ψ/N_d: parex's replicated biases and norms,
    so parex holds more than the paper there, never less; they do not count as passes."""
    result = fast_results["zero-table1"]
    known = [r for r in result.rows if r.known]
    assert len(result.rows) == 54 and len(known) == 7
    assert all("P_os+g+p" in r.quantity and r.ratio > 1 for r in known)
    assert {r.quantity.split(" · ")[1] for r in known} == {"N_d=64", "N_d=256", "N_d=1024"}
    assert max(r.ratio for r in result.held_rows()) < 1.01


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


def test_hexiscale_rows_on_one_cluster_against_the_papers_average_gap():
    """One scenario of the slow figure (het-odd, 0.7 s): the heterogeneous search, the best even
    split and the same-peak homogeneous cluster, through parex.hetero.compare."""
    assert hetero.claims()["mfu gap to the same-peak homogeneous cluster (average)"][0] == 3.5
    (label, c), = hetero.comparisons(hetero.SCENARIOS[-1:])
    (row,) = hetero.hexiscale_rows([(label, c)])
    assert row.paper == 1.0 and row.parex == pytest.approx(c.search.best.mfu
                                                           / c.homogeneous.best.mfu)
    assert c.even.mfu < c.search.best.mfu <= c.homogeneous.best.mfu * 1.01
    assert hetero.PARITY.holds(row.ratio), row


def test_formulas_are_arithmetic_only():
    assert evaluate_formula("s*b*h*(34 + 5*a*s/h)", s=2, b=1, h=4, a=2) == 2 * 4 * (34 + 5)
    with pytest.raises(ValueError, match="only"):
        evaluate_formula("__import__('os')", s=1)
    assert printed_half_unit("0.12") == 0.005 and printed_half_unit("4187") == 0.5


def _spec(name, fn, tolerance=Tolerance(0.9, 1.1, "10 %")):
    return core.Spec(name, name, "arXiv:0", tolerance, fn)


def test_a_figure_outside_its_tolerance_fails_and_a_missing_one_is_listed_missing():
    result = core.run(_spec("t", lambda: Figure([Row("a", 1.0, 1.05),
                                                 Row("b", np.float64(2), 2.5)])))
    assert result.status == "failed" and result.passed is False
    assert [result.within(r) for r in result.rows] == [True, False]
    assert json.loads(json.dumps(result.to_json()))["worst_ratio"] == pytest.approx(1.25)
    explained = core.run(_spec("t", lambda: Figure(
        [Row("a", 1.0, 1.05), Row("b", 2.0, 2.5, known="a named cause")])))
    assert explained.status == "passed" and explained.to_json()["known_deviations"] == 1

    def absent():
        raise FeatureMissing("parex.something is not in this checkout")
    missing = core.run(_spec("m", absent))
    assert missing.status == "missing" and missing.passed is None and not missing.rows
    assert "⬜ missing: parex.something" in scoreboard.markdown([missing])


def test_run_all_records_a_raising_figure_as_an_error_and_goes_on(monkeypatch, tmp_path):
    def broken():
        raise ZeroDivisionError("a bug in a figure")
    specs = [_spec("broken", broken), _spec("fine", lambda: Figure([Row("a", 1.0, 1.0)])),
             core.Spec("slow-one", "slow", "arXiv:0", Tolerance(0.9, 1.1), broken, slow=True)]
    monkeypatch.setattr(runner, "ordered_specs", lambda: specs)
    monkeypatch.setattr(runner, "compute_and_save", lambda s, out: core.run(s))
    seen = []
    results = runner.run_all(tmp_path, fast=True, done=lambda rs: seen.append(len(rs)))
    assert [r.status for r in results] == ["error", "passed", "skipped"] and seen == [1, 2, 3]
    assert "ZeroDivisionError: a bug in a figure" in results[0].reason
    assert "⚠️ error: ZeroDivisionError" in scoreboard.markdown(results)


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


def test_cli_list_json_and_exit_codes(capsys, monkeypatch):
    from parex.cli.main import main

    assert main(["figure", "--list"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in FIGURES) and "slow" in listed
    assert main(["figure", "scaling-book-roofline", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["name"] == "scaling-book-roofline" and data["passed"] is True
    for argv, says in ((["figure", "zero-tabel1"], "did you mean 'zero-table1'"),
                       (["figure"], "or pass --all")):  # bad input: one line, exit 2
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("parex: ") and says in err
    failing = _spec("failing", lambda: Figure([Row("a", 1.0, 2.0)]))
    monkeypatch.setitem(core.REGISTRY, "failing", failing)
    assert main(["figure", "failing", "--json"]) == 1  # a failed figure: exit 1
    assert json.loads(capsys.readouterr().out)["status"] == "failed"


def _in_own_process(name: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "parex.cli", "figure", name, "--json"],
                          capture_output=True, text=True, timeout=3600)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_slow_figures_are_within_their_tolerance(name):
    data = _in_own_process(name)
    assert data["status"] in ("passed", "failed"), data["reason"]
    assert ("predicted" if name == "hexiscale" else "measured") in data["kinds"]
    assert all(math.isfinite(r["ratio"]) for r in data["rows"])
    off = [(r["quantity"], r["ratio"]) for r in data["rows"] if not r["within"] and not r["known"]]
    if name in PIPELINE_DEVIATIONS:
        listed, reason = PIPELINE_DEVIATIONS[name]
        measured = {r["quantity"] for r in data["rows"] if r["kind"] == "measured"}
        assert measured == listed, measured ^ listed  # a new measured row must be named here
        held = [q for q, _ in off if q not in listed]
        assert not held, held  # the tables' and the lockstep executor's rows all pass
        bad = [r for r in data["rows"] if r["quantity"] in listed and not _may_deviate(name, r)]
        assert not bad, bad  # a listed row off its bound is a real failure
        if off:
            pytest.xfail(f"{reason}: {off}")
    elif name in KNOWN_FAILING and off:
        rows, reason = KNOWN_FAILING[name]
        rows = (rows,) if isinstance(rows, str) else rows
        assert all(any(r in quantity for r in rows) for quantity, _ in off), off  # nothing else
        pytest.xfail(f"{reason}: {off}")
    assert data["passed"], off
