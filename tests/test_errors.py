"""Bad input in every command and the Python API: one line, exit 2, the nearest known name.

Each case is something a user mistypes; the answer must be one whole line on stderr, exit status
2, no traceback, the command's name once, and the suggestion (parex.errors.did_you_mean).
"""

import textwrap

import pytest

from parex.cli.main import main
from parex.cluster import cluster_from_dict, load_hetero_cluster
from parex.config import model_preset
from parex.errors import InputError, close_names, did_you_mean, one_line, unknown
from parex.hardware import load_chip
from parex.layout import Layout, LayoutError
from parex.parallel.schedules import check_schedule, make_schedule
from parex.sweep import error_line, error_notes
from parex.sweep.grid import grid_configs, read_grid


def one_error_line(capsys, args) -> str:
    """Run `parex args`; the one line it printed, after checking exit 2 and the form."""
    assert main(args) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    line = lines[0]
    assert "Traceback" not in captured.err and "parex: parex" not in line, line
    assert line.startswith("parex"), line
    return line


# --- the helper ------------------------------------------------------------------------------

def test_did_you_mean_names_the_nearest_known_names_nearest_first():
    keys = ["data", "fsdp", "tensor", "seq", "stage"]
    assert did_you_mean("dat", keys) == "did you mean 'data'?"
    assert did_you_mean("tensr", keys) == "did you mean 'tensor'?"
    assert did_you_mean("pipeline", keys) == ""  # nothing close: no guess
    # a name the typed one is part of comes first, case and punctuation aside
    assert close_names("A100", ["h100-sxm", "a100-pcie-80gb", "a100-80gb"])[:2] == [
        "a100-80gb", "a100-pcie-80gb"]
    assert did_you_mean("a100", ["a100-80gb", "a100-pcie-80gb"]) == (
        "did you mean 'a100-80gb' or 'a100-pcie-80gb'?")
    # flags: the dashes do not make '--foo' close to '--ffn'
    assert did_you_mean("--foo", ["--ffn", "--hardware"]) == ""
    assert did_you_mean("--hardwre", ["--ffn", "--hardware"]) == "did you mean '--hardware'?"


def test_unknown_lists_every_known_name_after_the_suggestion():
    text = unknown("pipeline schedule", "1fb1", ["gpipe", "1f1b", "zbv"])
    assert text == "unknown pipeline schedule '1fb1'; did you mean '1f1b'? use one of gpipe, " \
                   "1f1b, zbv"
    assert one_line("a\n  b\n\nc") == "a; b; c"


# --- every command ---------------------------------------------------------------------------

@pytest.mark.parametrize("args, words", [
    (["predict", "--layout", "dat=8"], "did you mean 'data'?"),
    (["predict", "--hardware", "a100-80gb", "--layout", "fsd"], "did you mean 'fsdp'"),
    (["predict", "--hardware", "a100-80gb", "--layout", "zero4"], "'zero2'"),
    (["predict", "--model", "llama2-7", "--hardware", "a100-80gb"], "did you mean 'llama2-7b'"),
    (["predict", "--model", "llama2-7b", "--hardware", "h100-sxn"], "did you mean 'h100-sxm'"),
    (["predict", "--model", "llama2-7b", "--hardware", "a100-80gb", "--layout",
      "data=2,stage=4,schedule=1fb1,microbatches=8"], "did you mean '1f1b'?"),
    (["predict", "--remat", "ful"], "did you mean 'full'?"),
    (["predict", "--hardwre", "a100-80gb"], "parex predict: unrecognized arguments: --hardwre"),
    (["predict", "--hardwre", "a100-80gb"], "did you mean '--hardware'?"),
    (["predikt"], "did you mean 'predict'?"),
    (["run", "--layout", "tensr=8"], "did you mean 'tensor'?"),
    (["run", "--model", "gpt-3", "--steps", "1"], "did you mean 'gpt3-175b'"),
    (["compare", "--model", "tin"], "did you mean 'tiny'"),
    (["compare", "--hardware", "cpu-locl"], "did you mean 'cpu-local'"),
    (["plan", "--model", "llama2-7"], "did you mean 'llama2-7b'"),
    (["plan", "--model", "tiny", "--hardware", "h10"], "did you mean 'h100-"),
    (["lowcomm", "--hardware", "h100-sxm", "--layout", "replca=2"], "did you mean 'replica'?"),
    (["lowcomm", "--hardware", "h100-sxm"], "parex lowcomm: the following arguments are"),
    (["seqstudy", "--model", "tin"], "did you mean 'tiny'"),
    (["demo", "--model", "tin"], "did you mean 'tiny'"),
])
def test_a_mistyped_name_is_one_line_with_the_nearest_name(capsys, args, words):
    assert words in one_error_line(capsys, args)


def test_a_subcommands_usage_error_names_the_command_once(capsys):
    line = one_error_line(capsys, ["lowcomm"])
    assert line.startswith("parex lowcomm: ") and line.endswith("(see parex lowcomm --help)")
    line = one_error_line(capsys, ["predict", "--nodes", "0"])
    assert line.startswith("parex predict: argument --nodes")


def test_sweep_refuses_a_mistyped_model_before_writing_the_store(capsys, tmp_path):
    out = tmp_path / "runs.jsonl"
    line = one_error_line(capsys, ["sweep", "--model", "tin", "--layout", "dp", "--out",
                                   str(out)])
    assert "did you mean 'tiny'" in line and not out.exists()


# --- cluster files -----------------------------------------------------------------------------

CLUSTERS = {
    "syntax": ('name = "x"\n[[groups]\nchip = "a100-80gb"\n', "Expected ']]'"),
    "unknown-key": ('[[groups]]\nchip = "a100-80gb"\nnods = 2\n', "did you mean 'nodes'?"),
    "top-key": ('nme = "x"\n[[groups]]\nchip = "a100-80gb"\n', "did you mean 'name'?"),
    "no-chip": ("[[groups]]\nnodes = 2\n", "needs `chip`"),
    "no-groups": ('name = "x"\n', "no [[groups]]"),
    "chip-typo": ('[[groups]]\nchip = "rtx-4900"\n', "did you mean 'rtx-4090'"),
    "groups-not-tables": ("groups = 3\n", "[[groups]] table"),
    "group-not-table": ("groups = [1]\n", "expected a table"),
    "chip-not-text": ("[[groups]]\nchip = 5\n", "chip=5"),
    "speed-text": ('[[groups]]\nchip = "a100-80gb"\ninter_node_gbps = "fast"\n',
                   "inter_node_gbps='fast'"),
    "between-text": ('inter_group_gbps = "x"\n[[groups]]\nchip = "a100-80gb"\n',
                     "inter_group_gbps='x'"),
}


@pytest.mark.parametrize("case", CLUSTERS)
def test_a_malformed_cluster_file_is_one_line(capsys, tmp_path, case):
    text, words = CLUSTERS[case]
    path = tmp_path / f"{case}.toml"
    path.write_text(text)
    line = one_error_line(capsys, ["plan", "--model", "llama2-7b", "--cluster", str(path)])
    assert words in line


def test_a_mistyped_cluster_name_gets_the_nearest_file(capsys):
    assert "did you mean 'het-48'?" in one_error_line(
        capsys, ["plan", "--model", "llama2-7b", "--cluster", "het48"])


# --- sweep grids -------------------------------------------------------------------------------

GRIDS = {
    "syntax": ('layouts = ["dp"\n', "Unclosed array"),
    "unknown-key": ('layout = "dp"\n', "did you mean 'layouts'?"),
    "model": ('models = ["tin"]\nlayouts = ["dp"]\n', "did you mean 'tiny'"),
    "layout-key": ('layouts = ["dat=2"]\n', "did you mean 'data'?"),
    "axes-key": ("[axes]\ntensr = [1, 2]\n", "did you mean 'tensor'?"),
    "axes-not-table": ("axes = 3\n", "[axes] as a table"),
    "remat": ('layouts = ["dp"]\nremat = ["ful"]\n', "did you mean 'full'?"),
    "steps-text": ('layouts = ["dp"]\nsteps = "x"\n', "steps='x'"),
    "devices-list": ('layouts = ["dp"]\ndevices = [2, 4]\n', "takes one value"),
    "layout-number": ("layouts = [5]\n", "in quotes"),
}


@pytest.mark.parametrize("case", GRIDS)
def test_a_malformed_grid_file_is_one_line_and_writes_nothing(capsys, tmp_path, case):
    text, words = GRIDS[case]
    grid, out = tmp_path / "grid.toml", tmp_path / "runs.jsonl"
    grid.write_text(text)
    line = one_error_line(capsys, ["sweep", "--grid", str(grid), "--out", str(out)])
    assert words in line and str(grid) in line
    assert not out.exists()


# --- the Python API ----------------------------------------------------------------------------

@pytest.mark.parametrize("call, kind, words", [
    (lambda: Layout.parse("dat=8"), LayoutError, "did you mean 'data'?"),
    (lambda: Layout.parse("data=2,tensr=4"), LayoutError, "did you mean 'tensor'?"),
    (lambda: Layout.parse("fsdp_t", 8), LayoutError, "did you mean 'fsdp_tp'"),
    (lambda: Layout.preset("tp-sp", 8), LayoutError, "did you mean 'tp_sp'?"),
    (lambda: model_preset("llama3-8"), InputError, "did you mean 'llama3-8b'"),
    (lambda: load_chip("h200-sxm"), InputError, "'h200'"),
    (lambda: make_schedule("zb-h1", 4, 8), InputError, "did you mean 'zbh1'?"),
    (lambda: check_schedule("gpip", 4, 8), InputError, "did you mean 'gpipe'?"),
    (lambda: cluster_from_dict({"groups": [{"chip": "a100-80gb", "node": 2}]}), InputError,
     "did you mean 'nodes'"),
    (lambda: grid_configs({"model": "smal"}), InputError, "did you mean 'small'"),
])
def test_the_api_raises_with_the_suggestion(call, kind, words):
    with pytest.raises(kind) as err:
        call()
    assert words in str(err.value) and "\n" not in str(err.value)


def test_file_readers_name_the_file_and_the_toml_problem(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[[groups]\n")
    with pytest.raises(InputError, match="cluster file .*bad.toml: .*line 1"):
        load_hetero_cluster(bad)
    with pytest.raises(InputError, match="sweep grid .*bad.toml: .*line 1"):
        read_grid(bad)


# --- sweep errors are never cut ----------------------------------------------------------------

def test_error_notes_keep_every_word_and_share_a_note_per_message():
    long = " ".join(f"word{i}" for i in range(60)) + ": use layout data=2,tensor=4 instead"
    traceback = "exit status 1: Traceback (most recent call last):\n  File x\nValueError: boom"
    marks, notes = error_notes([None, long, long, traceback])
    assert marks == ["", "[1]", "[1]", "[2]"]
    assert " ".join(" ".join(notes).split()) == f"[1] {long} [2] ValueError: boom"
    assert all(len(line) <= 100 for note in notes for line in note.splitlines())
    assert error_line(traceback) == "ValueError: boom" and error_line(None) == ""


def test_cli_sweep_prints_each_failures_whole_message(capsys, tmp_path):
    layout = "data=2,stage=4,schedule=interleaved,virtual=2,microbatches=6"
    grid = tmp_path / "grid.toml"
    grid.write_text(textwrap.dedent(f"""
        layouts = ["{layout}"]
        global_batch = 24
    """))
    with pytest.raises(LayoutError) as err:
        from parex.sweep import SweepConfig

        SweepConfig("tiny", layout, global_batch=24).check()
    assert len(str(err.value)) > 60  # longer than the table's old cut
    assert main(["sweep", "--grid", str(grid), "--out", str(tmp_path / "s.jsonl")]) == 0
    out = capsys.readouterr().out
    assert str(err.value) in " ".join(out.split())
