"""The same inputs give the same answer everywhere: for random (model, layout, hardware, batch)
combinations, with and without a pipeline schedule, a remat policy and an attention kernel
named, parex.predict, `parex predict --json`, the Explorer's state and the command it prints,
and the Planner's rows agree on every number and on the Setting (parex.setting resolves each
once). An impossible combination is refused by every one of them alike."""

import json
import shlex

import numpy as np
import pytest

from parex import predict
from parex.cli.main import main
from parex.config import TrainConfig, model_preset
from parex.explorer import state
from parex.layout import Layout, LayoutError
from parex.plan import plan

MODELS = ("tiny", "tiny-llama", "gpt2-small", "llama2-7b", "llama2-13b")
HARDWARE = ("cpu-local", "h100-sxm", "a100-80gb", "tpu-v5p")
LOCAL_MODELS = ("tiny", "tiny-llama")  # what this machine's emulated mesh can hold
LAYOUTS = ("data=8", "fsdp=8", "data=2,tensor=4", "fsdp=2,tensor=4,sp=on", "tensor=8",
           "data=4,zero=1", "data=2,zero=3", "stage=2,microbatches=4",
           "data=2,stage=4,microbatches=8", "tensor=2,stage=4,microbatches=4",
           "stage=2,microbatches=8,virtual=2", "fsdp=4,stage=2,microbatches=2")
BATCHES = (None, 16, 32, 64)
SCHEDULES = ("gpipe", "1f1b", "zbh1")
COMBINATIONS = 50


def combinations(n: int, seed: int = 0) -> list[dict]:
    """n random inputs: what the user names, None where they leave it to the defaults."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        layout = str(rng.choice(LAYOUTS))
        staged = "stage=" in layout and "virtual" not in layout
        hardware = str(rng.choice(HARDWARE))
        models = LOCAL_MODELS if hardware == "cpu-local" else MODELS
        out.append({"model": str(rng.choice(models)), "hardware": hardware,
                    "layout": layout + (f",schedule={rng.choice(SCHEDULES)}"
                                        if staged and rng.random() < 0.5 else ""),
                    "global_batch": rng.choice(BATCHES),
                    "remat": rng.choice([None, "none", "selective", "full"]),
                    "attention": rng.choice([None, None, "flash", "naive"])})
    return out


def cli_args(c: dict) -> list[str]:
    args = ["predict", "--model", c["model"], "--layout", c["layout"], "--hardware",
            c["hardware"]]
    for flag, key in (("--global-batch", "global_batch"), ("--remat", "remat"),
                      ("--attention", "attention")):
        if c[key] is not None:
            args += [flag, str(c[key])]
    return args + ["--json"]


def api(c: dict):
    train = TrainConfig(global_batch=None if c["global_batch"] is None else int(c["global_batch"]),
                        remat=c["remat"], attention=c["attention"])
    return predict(model_preset(c["model"]), train, Layout.parse(c["layout"]), c["hardware"])


def cli(capsys, args: list[str]):
    """(exit status, the JSON printed without the layouts it offers when this one does not fit
    (the planner's, tested apart: tests/test_setting.py), or the one-line error)."""
    status = main(args)
    out = capsys.readouterr()
    if status:
        return status, out.err
    return status, {k: v for k, v in json.loads(out.out).items() if k != "fits_instead"}


def explorer_values(c: dict) -> dict:
    """The Explorer's control values for the combination, as the widget builds them: the
    profile's defaults (control_defaults) where the user names nothing; a batch left at its
    default is None (parex.explorer.view.DefaultedInt)."""
    preset, layout = model_preset(c["model"]), Layout.parse(c["layout"])
    shown = state.control_defaults(c["hardware"], preset, layout.n_devices)
    values = state.values_of(c["model"], layout, layout.n_devices, hardware=c["hardware"],
                             steps=5, **{d: getattr(preset, d) for d in state.DIMS},
                             **{k: shown[k] for k in ("dtype", "recipe", "convention")})
    values["schedule"] = values["schedule"] or shown["schedule"]  # no pipeline: unused
    values["global_batch"] = None if c["global_batch"] is None else int(c["global_batch"])
    values["remat"] = c["remat"] or shown["remat"]
    return values


def json_of(prediction) -> dict:
    return json.loads(json.dumps(prediction.to_json()))


@pytest.mark.parametrize("c", combinations(COMBINATIONS), ids=lambda c: "|".join(
    str(c[k]) for k in ("model", "hardware", "layout", "global_batch", "remat", "attention")))
def test_api_command_and_explorer_give_one_answer(capsys, c):
    try:
        expected = json_of(api(c))
    except LayoutError as error:  # refused alike, in the same words
        status, err = cli(capsys, cli_args(c))
        assert status == 2 and str(error) in err
        return
    status, got = cli(capsys, cli_args(c))
    assert status == 0 and got == expected  # every number, the layout and the Setting
    if c["attention"] is not None:  # the Explorer has no kernel control: its default only
        return
    values = explorer_values(c)
    shown = json_of(state.predicted(values, *state.resolve(values)))
    assert shown == expected
    command = shlex.split(state.cli_command(values))
    assert command[:2] == ["parex", "predict"]
    status, pasted = cli(capsys, command[1:] + ["--json"])
    assert status == 0 and pasted == expected


@pytest.mark.parametrize("c", combinations(8, seed=1), ids=lambda c: f"{c['model']}|"
                         f"{c['hardware']}|{c['global_batch']}")
def test_a_planners_rows_are_what_the_command_and_the_api_say(capsys, c):
    """A row of the plan of the combination's model, hardware and batch, given to
    `parex predict` with the row's flags and to parex.predict: the row's numbers and Setting."""
    batch = None if c["global_batch"] is None else int(c["global_batch"])
    p = plan(model_preset(c["model"]), TrainConfig(global_batch=batch), c["hardware"], top=2)
    i = int(np.random.default_rng(0).choice(p.top))
    entry = p.entry(i)
    args = ["predict", "--model", c["model"], "--hardware", c["hardware"],
            *(["--global-batch", str(batch)] if batch else []), *entry["flags"].split(),
            "--json"]
    status, got = cli(capsys, args)
    assert status == 0
    assert got["step_time_s"]["total"] == pytest.approx(entry["step_time_s"]["total"],
                                                        rel=1e-12)
    assert got["memory_bytes_per_device"] == pytest.approx(entry["memory_bytes_per_device"],
                                                           rel=1e-12)
    assert got["assumptions"] == entry["assumptions"]
    again = predict(p.model, p.train_of(i), p.layout(i), p.cluster, **p.settings)
    assert json_of(again) == got
