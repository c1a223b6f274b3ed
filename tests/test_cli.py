"""The `parex` command, in-process and as a fresh process (which must set up its own devices)."""

import json
import subprocess
import sys

import pytest

from parex.cli import main

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


def test_models_too_large_for_this_machine_are_refused_before_compiling(capsys):
    assert main(["run", "--model", "gpt3-175b", "--layout", "fsdp", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert "needs at least" in err and "parex predict" in err


def test_run_prints_the_long_sequence_table(capsys):
    assert main(["run", "--study", "long-sequence", "--lengths", "64"]) == 0
    out = capsys.readouterr().out
    for mode in ("tensor=8,sp=on", "seq=8,cp=ring", "seq=8,cp=ulysses", "temp/dev"):
        assert mode in out
