"""No figure decides from its own result that a row does not count: a row is out of scope only
by a name its figure declared before computing anything, and a synthetic result far outside the
tolerance fails the figure. Read from the figures' source (every `scope=` is a constant or a
lookup by an input's name; no figure module applies the tolerance itself) and exercised through
the row builders with results eight times the paper's."""

import ast
from pathlib import Path

import pandas as pd
import pytest

import parex.figures as figures_package
from parex.figures import FIGURES, core
from parex.figures import pipelines, ppll, training

FIGURE_MODULES = sorted(p for p in Path(figures_package.__file__).parent.glob("*.py")
                        if p.stem not in ("scoring", "core", "scoreboard", "charts", "docs",
                                          "runner", "__init__"))
SCORING_NAMES = {"holds", "within", "verdict", "contains", "tally", "passed"}


def _calls(tree):
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)]


def _name(func) -> str:
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


@pytest.mark.parametrize("path", FIGURE_MODULES, ids=lambda p: p.stem)
def test_no_figure_applies_the_scoring_rule_itself(path):
    """Scoring happens in parex.figures.scoring alone: a figure module that tested its rows
    against a tolerance could decide a row's fate from its result."""
    tree = ast.parse(path.read_text())
    used = {_name(c.func) for c in _calls(tree)} & SCORING_NAMES
    assert not used, f"{path.name} calls {used}: scoring belongs to parex.figures.scoring"


@pytest.mark.parametrize("path", FIGURE_MODULES, ids=lambda p: p.stem)
def test_every_scope_is_a_declared_name_never_a_condition(path):
    """`scope=` is a string constant, a module constant, or a lookup of an input's name in a
    module-level table (`SCOPED_MODES.get(r.mode)`); never a conditional expression, and never
    passed by position."""
    tree = ast.parse(path.read_text())
    for call in _calls(tree):
        if _name(call.func) == "Row":
            assert len(call.args) <= 5, f"{path.name}:{call.lineno}: pass scope= by name"
        for keyword in call.keywords:
            if keyword.arg != "scope":
                continue
            value = keyword.value
            lookup = (isinstance(value, ast.Call) and _name(value.func) == "get"
                      and isinstance(value.func.value, ast.Name)
                      and value.func.value.id.isupper())
            constant = isinstance(value, ast.Constant) or (isinstance(value, ast.Name)
                                                           and value.id.isupper())
            assert lookup or constant, f"{path.name}:{call.lineno}: scope= {ast.unparse(value)}"


def _judged(name: str, rows) -> core.FigureResult:
    return core.judge(FIGURES[name], core.Figure(rows), 0.0)


def _run(step_s, loss, temp):
    return {"step_s": step_s, "eval": {50: loss + 1, 100: loss},
            "stats": {"memory_bytes_per_device": {"temp": temp}}}


def test_a_ppll_speed_far_outside_its_band_fails_the_figure():
    """The measured emulated-mesh speed used to be excused whenever it was out of range."""
    runs = {"1f1b": _run(0.8, 2.0, 100), "local ce": _run(0.1, 2.0, 25),
            "local recon": _run(0.1, 2.0, 25)}  # 8× faster: 8 / 1.25 = 6.4× the paper's
    rows = ppll.measured_rows(runs)
    result = _judged("ppll", rows)
    speed = next(r for r in result.rows if "emulated mesh" in r.quantity)
    assert speed.parex == 8.0 and result.verdict(speed) == "outside"
    assert result.status == "failed" and not any(r.scope for r in rows)


def test_a_bubble_eight_times_the_papers_fails_the_figure():
    """The 1F1B lockstep and measured rows used to be 'known' whenever they were off."""
    paper = 1 / 3  # (p−1)/(m+p−1) at p = 2, m = 2
    df = pd.DataFrame([{"schedule": s, "p": 2, "m": 2, "bubble_table": paper,
                        "bubble_lockstep": 8 * paper if s == "1f1b" else paper,
                        "bubble_measured": 8 * paper, "step_time_s": 1.0,
                        "stage_alone_s": 0.5, "bubble_modelled": 0.5, "step_time_modelled_s": 1.0,
                        "stage_alone_modelled_s": 0.5} for s in ("gpipe", "1f1b")])
    result = _judged("pipeline-bubble", pipelines.bubble_rows(df))
    off = {r.quantity for r in result.rows if result.verdict(r) == "outside"}
    assert off == {"gpipe · m=2 · measured", "1f1b · m=2 · lockstep executor",
                   "1f1b · m=2 · measured"}
    assert result.status == "failed" and result.tally().out_of_scope == 0
    # each measured row states parex's prediction of its own executor beside it
    measured = [r for r in result.rows if r.quantity.endswith("measured")]
    assert all("model of its executor here: bubble 0.50 (1000 ms, 500 ms" in r.note
               for r in measured)


@pytest.mark.parametrize("scale", [1.0, 8.0])
def test_korthikanti_scopes_follow_the_mode_whatever_the_ratio(monkeypatch, scale):
    """The two declared modes are out of scope at every length, exact or 8× off alike; every
    other mode 8× off fails the figure."""
    from parex.studies import activation

    modes = ["none", "tp", "tp+sp", "tp+selective", "tp+sp+selective", "full"]
    df = pd.DataFrame([{"mode": m, "seq_len": t, "paper_ratio_no_dropout": 0.5,
                        "ratio": 0.5 * scale, "layer_bytes": 1e6}
                       for t in training.KORTHIKANTI_LENGTHS for m in modes])
    monkeypatch.setattr(activation, "activation_study", lambda *a, **k: df)
    result = core.run(FIGURES["korthikanti-measured"])
    scoped = {r.quantity.split(" / ")[0] for r in result.rows if r.scope}
    assert scoped == {"tp+sp+selective", "full"}
    assert result.tally().out_of_scope == 4 and result.tally().scored == 6
    assert result.status == ("passed" if scale == 1.0 else "failed")
