"""The Explorer's precision control: an FP8 recipe predicts what `parex predict --precision`
prints, and a chip without FP8 shows the one-line refusal."""

import contextlib
import io
import json
import shlex

import pytest

from parex.cli.main import main as parex_cli
from parex.explorer.widget import Explorer


@pytest.fixture
def explorer():
    return Explorer(model="tiny", n_devices=8, global_batch=8, steps=2)


def test_an_fp8_recipe_predicts_what_the_cli_prints(explorer):
    explorer.set(hardware="h100-sxm", fsdp=8)
    bf16 = explorer.prediction.step_time_s["total"]
    explorer.set(precision="fp8-delayed")
    assert explorer.error is None and "--precision fp8-delayed" in explorer.cli_command()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert parex_cli(shlex.split(explorer.cli_command())[1:] + ["--json"]) == 0
    cli, shown = json.loads(out.getvalue()), explorer.prediction.to_json()
    for field in ("step_time_s", "memory_bytes_per_device", "comm_bytes_per_device"):
        assert cli[field] == pytest.approx(shown[field]), field
    assert shown["assumptions"]["precision"] == "fp8-delayed"
    assert explorer.prediction.step_time_s["total"] < bf16


def test_fp8_on_an_a100_is_the_refusal(explorer):
    explorer.set(hardware="a100-80gb", precision="fp8-current")
    assert "no FP8 matmul units" in explorer.error
    explorer.set(precision="dtype's")
    assert explorer.error is None
