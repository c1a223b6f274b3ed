"""The `parex` command, in-process and as a fresh process (which must set up its own devices)."""

import json
import subprocess
import sys

import pytest

from parex.cli.main import main

JSON_KEYS = {"losses", "step_time_s", "compile_time_s", "memory_bytes_per_device",
             "flops_per_device", "collectives", "layout", "n_devices"}


def test_run_json_has_the_documented_keys(capsys):
    assert main(["run", "--layout", "data=2,tensor=4,zero=1,sp=on", "--steps", "3", "--json",
                 "--seq", "64"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert JSON_KEYS <= set(out)
    assert out["layout"] == "data=2,tensor=4,zero=1,sp=on" and out["n_devices"] == 8
    assert len(out["losses"]) == 3
    assert set(out["step_time_s"]) == {"median", "min", "max"}
    assert set(out["memory_bytes_per_device"]) == {"argument", "output", "alias", "temp", "total"}
    assert all({"kind", "count", "bytes", "axes"} <= set(c) for c in out["collectives"])


def test_run_prints_a_readable_report(capsys):
    assert main(["run", "--layout", "fsdp", "--steps", "2", "--seq", "64"]) == 0
    out = capsys.readouterr().out
    for word in ("layout fsdp=8", "loss", "step time", "memory per device", "all-gather"):
        assert word in out


def test_invalid_layout_is_an_error_message_not_a_traceback(capsys):
    assert main(["run", "--layout", "tensor=8", "--model", "gpt2-small", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert "heads=12 is not divisible by tensor=8" in err and "Traceback" not in err


def test_unknown_model_preset(capsys):
    assert main(["run", "--model", "gpt7", "--steps", "1"]) == 2
    assert "unknown model preset 'gpt7'" in capsys.readouterr().err


def _parex(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "parex.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_fresh_process_emulates_the_devices_it_needs():
    result = _parex("run", "--layout", "dp", "--devices", "4", "--steps", "2", "--json",
                    "--seq", "32")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["n_devices"] == 4 and out["layout"] == "data=4"


@pytest.mark.slow
def test_demo_prints_a_comparison_of_all_presets():
    result = _parex("demo", "--steps", "2", "--seq", "32")
    assert result.returncode == 0, result.stderr
    for layout in ("data=8", "fsdp=8", "tensor=8,sp=on", "data=2,tensor=4", "fsdp=2,tensor=4"):
        assert layout in result.stdout


def test_the_demo_measures_one_layout_after_another_when_they_do_not_fit_together(
        monkeypatch):
    """Where each layout's state fits in memory but not all of them at once, the demo measures
    them one after another (parex.measure, in order) and reports no drift; the rotation itself
    is tests/measure/test_rotation.py's, the whole demo test_demo_prints_... (slow)."""
    import jax

    import parex.entry
    from parex.cli.main import demo_measurements
    from parex.config import TrainConfig, model_preset
    from parex.layout import Layout
    from parex.measure import compiled

    model, train = model_preset("tiny"), TrainConfig(global_batch=8, seq_len=32, steps=2)
    layouts = [Layout.parse("data=8"), Layout.parse("data=2,tensor=4")]  # 112 MB of state each
    each = max(compiled.state_bytes_on_host(model, layout) for layout in layouts)
    monkeypatch.setattr(compiled, "_host_memory_bytes", lambda: 1.5 * each / 0.8)  # one fits
    measured = []
    monkeypatch.setattr(parex.entry, "measure",
                        lambda model, train, layout, devices: measured.append(layout) or layout)
    results, drift = demo_measurements(model, train, layouts, jax.devices())
    assert measured == layouts and results == layouts and drift is None


def test_models_too_large_for_this_machine_are_refused_before_compiling(capsys):
    assert main(["run", "--model", "gpt3-175b", "--layout", "fsdp", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert "needs at least" in err and "parex predict" in err


@pytest.mark.slow  # 20 s on 2 cores; `parex seqstudy` runs the same study in the default suite
def test_run_prints_the_long_sequence_table(capsys):
    assert main(["run", "--study", "long-sequence", "--lengths", "64"]) == 0
    out = capsys.readouterr().out
    for mode in ("tensor=8,sp=on", "seq=8,cp=ring", "seq=8,cp=ulysses", "temp/dev"):
        assert mode in out


@pytest.mark.parametrize("args, words", [
    (["run", "--steps", "-1"], "argument --steps: must be at least 1, not -1"),
    (["run", "--devices", "0"], "argument --devices: must be at least 1, not 0"),
    (["run", "--global-batch", "0"], "--global-batch: must be at least 1"),
    (["run", "--microbatch", "0"], "--microbatch: must be at least 1"),
    (["run", "--seq", "two"], "--seq: 'two' is not a whole number"),
    (["run", "--study", "long-sequence", "--lengths", "128,0"], "--lengths: must be at least 1"),
    (["demo", "--steps", "0"], "--steps: must be at least 1"),
    (["compare", "--steps", "0"], "--steps: must be at least 1"),
    (["predict", "--model", "gpt", "--layers", "0", "--hidden", "64", "--heads", "2"],
     "--layers: must be at least 1, not 0"),
    (["predict", "--nodes", "0"], "--nodes: must be at least 1"),
    (["predict", "--vocab", "-3"], "--vocab: must be at least 1"),
    (["calibrate", "--devices", "1"], "--devices: must be at least 2"),
    (["seqstudy", "--lengths", "0"], "--lengths: must be at least 1"),
    (["seqstudy", "--modes", "ring,stripes"], "--modes: unknown stripes"),
    (["seqstudy", "--global-batch", "0"], "--global-batch: must be at least 1"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_bad_flags_are_one_line_and_exit_2(capsys, args, words):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_an_internal_error_keeps_its_traceback_and_exits_1():
    code = ("import sys, parex.cli.predict as c\n"
            "def broken(*args): raise ValueError('a bug, not bad input')\n"
            "c.prediction_report = broken\n"
            "from parex.cli import main\n"
            "sys.exit(main(['predict', '--model', 'tiny']))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "a bug, not bad input" in result.stderr


@pytest.mark.parametrize("args, start", [
    (["lowcomm"], "parex lowcomm: the following arguments are required: --layout"),
    (["predict", "--nodes", "0"], "parex predict: argument --nodes"),
    (["calibrate", "--frobnicate"], "parex calibrate: unrecognized arguments: --frobnicate"),
    (["predict", "--layout", "dat=8"], "parex: cannot read 'dat=8'"),
])
def test_errors_name_the_command_once_in_one_line(capsys, args, start):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(start) and "parex: parex" not in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_mistyped_layout_key_gets_the_nearest_key(capsys):
    assert main(["predict", "--layout", "dat=8"]) == 2
    assert "did you mean 'data'?" in capsys.readouterr().err


def test_a_malformed_cluster_file_is_one_line_and_exit_2(capsys, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n[[groups]\nchip = "a100-80gb"\n')
    assert main(["plan", "--model", "llama2-7b", "--cluster", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"parex: cluster file {bad}: ") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_zero_between_pipelines_needs_a_cluster_file(capsys):
    assert main(["plan", "--model", "llama2-7b", "--zero", "1"]) == 2
    err = capsys.readouterr().err
    assert "--zero is the ZeRO stage between the pipelines of a --cluster plan" in err
    assert len(err.strip().splitlines()) == 1
    # stage 2 between pipelines is not modelled
    assert main(["plan", "--model", "llama2-7b", "--cluster", "het-48", "--zero", "2"]) == 2
    assert "--zero: invalid choice: 2; choose from 0, 1, 3" in capsys.readouterr().err


def test_the_shape_flags_reach_prediction_and_refusal(capsys):
    """--head-dim, --tied-embeddings, --parallel-block and --sliding-window change the model
    predict reads; a layout the executor cannot run with them is refused in one line."""
    from parex.config import model_preset

    args = ["predict", "--model", "tiny", "--layout", "data=8", "--hardware", "cpu-local",
            "--json"]
    assert main(args + ["--head-dim", "32", "--tied-embeddings", "--parallel-block",
                        "--sliding-window", "64"]) == 0
    shaped = json.loads(capsys.readouterr().out)
    model = model_preset("tiny").replace(head_dim=32, tied_embeddings=True, parallel_block=True,
                                         sliding_window=64)
    assert model.n_params != model_preset("tiny").n_params
    assert shaped["memory_bytes_per_device"]["params"] == 4 * model.n_params  # float32, whole
    assert main(["run", "--model", "tiny", "--tied-embeddings", "--layout",
                 "data=2,stage=2,microbatches=2", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert "tied_embeddings with stage=2" in err and len(err.strip().splitlines()) == 1
