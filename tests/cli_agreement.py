"""One check shared by the Explorer's tests: the command line the Explorer prints, run through
`parex predict --json`, predicts what the Explorer shows."""

import contextlib
import io
import json
import shlex

import pytest

from parex.cli.main import main as parex_cli

SHOWN = ("step_time_s", "memory_bytes_per_device", "comm_bytes_per_device")


def assert_cli_predicts_what_is_shown(explorer) -> tuple[dict, dict]:
    """Run the Explorer's printed command with --json and compare the fields it shows; returns
    (the CLI's JSON, the Explorer's prediction as JSON) for further checks."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert parex_cli(shlex.split(explorer.cli_command())[1:] + ["--json"]) == 0
    cli, shown = json.loads(out.getvalue()), explorer.prediction.to_json()
    for field in SHOWN:
        assert cli[field] == pytest.approx(shown[field]), field
    return cli, shown
