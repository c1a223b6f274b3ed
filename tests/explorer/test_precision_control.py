"""The Explorer's precision control: an FP8 recipe predicts what `parex predict --precision`
prints, and a chip without FP8 shows the one-line refusal."""

import pytest
from cli_agreement import assert_cli_predicts_what_is_shown

from parex.explorer.widget import Explorer


@pytest.fixture
def explorer():
    return Explorer(model="tiny", n_devices=8, global_batch=8, steps=2)


def test_an_fp8_recipe_predicts_what_the_cli_prints(explorer):
    explorer.set(hardware="h100-sxm", fsdp=8)
    bf16 = explorer.prediction.step_time_s["total"]
    explorer.set(precision="fp8-delayed")
    assert explorer.error is None and "--precision fp8-delayed" in explorer.cli_command()
    _, shown = assert_cli_predicts_what_is_shown(explorer)
    assert shown["assumptions"]["precision"] == "fp8-delayed"
    assert explorer.prediction.step_time_s["total"] < bf16


def test_fp8_on_an_a100_is_the_refusal(explorer):
    explorer.set(hardware="a100-80gb", precision="fp8-current")
    assert "no FP8 matmul units" in explorer.error
    explorer.set(precision="dtype's")
    assert explorer.error is None
