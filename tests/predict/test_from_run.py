"""`parex calibrate --from-run`: one measured step time gives back the step efficiency that
predicts it; published runs grouped by the code (stack) that produced them; brackets for runs
whose configuration is not fully published."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from parex.calibrate import from_run as fr
from parex.cli.main import main
from parex.config import TrainConfig, model_preset
from parex.errors import InputError
from parex.hardware import load_chip, load_cluster
from parex.layout import Layout
from parex.predict import predict, published
from parex.predict import published_runs as runs

MODEL = model_preset("gpt3-175b").replace(dtype="bfloat16")
TRAIN = TrainConfig(global_batch=64, microbatch=1, remat="full")
LAYOUT = "tensor=8,stage=8,schedule=interleaved,virtual=3"
FLAGS = ["--model", "gpt3-175b", "--layout", LAYOUT, "--global-batch", "64", "--microbatch", "1",
         "--remat", "full", "--hardware", "a100-80gb"]


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("PAREX_CACHE", str(tmp_path))
    return tmp_path / "hardware"


def test_round_trip_gives_the_efficiency_back():
    cluster = load_cluster("a100-80gb", 8)
    layout = Layout.parse(LAYOUT, 64)
    known = dataclasses.replace(cluster.chip, step_efficiency=0.6789)
    seconds = predict(MODEL, TRAIN, layout, dataclasses.replace(cluster, chip=known))
    found = fr.from_run(MODEL, TRAIN, layout, cluster, seconds.step_time_s["total"])
    assert found == pytest.approx(0.6789, abs=1e-6)


def test_cli_writes_a_profile_that_predict_reads(cache, capsys):
    cluster, layout = load_cluster("a100-80gb", 8), Layout.parse(LAYOUT, 64)
    known = dataclasses.replace(cluster.chip, step_efficiency=0.7)
    seconds = predict(MODEL, TRAIN, layout, dataclasses.replace(cluster, chip=known))
    seconds = seconds.step_time_s["total"]
    assert main(["calibrate", "--from-run", repr(seconds), "--name", "a100-mine"] + FLAGS) == 0
    out = capsys.readouterr().out
    assert "step efficiency 0.7000" in out and "parex predict --hardware a100-mine" in out
    profile = json.loads((cache / "a100-mine.json").read_text())
    assert profile["step_efficiency"] == pytest.approx(0.7, abs=1e-6)
    assert profile["efficiency_sources"]["step_efficiency"].startswith(
        f"from-run: gpt3-175b {LAYOUT} {seconds:g} s")
    flags = [f if f != "a100-80gb" else "a100-mine" for f in FLAGS]
    assert main(["predict", "--json"] + flags) == 0
    p = json.loads(capsys.readouterr().out)
    assert p["step_time_s"]["total"] == pytest.approx(seconds, rel=1e-6)
    # plan and the Explorer load profiles by name too: they find the user's
    assert load_chip("a100-mine").step_efficiency == pytest.approx(0.7, abs=1e-6)


@pytest.mark.parametrize("argv, message", [
    (["--from-run", "0"], "--from-run 0.0: a measured step time is a positive number"),
    (["--from-run", "-2"], "--from-run -2.0: a measured step time is a positive number"),
    (["--from-run", "0.5"], "faster than this layout can run on a100-80gb"),
    (["--from-run", "20", "--global-batch", "4096", "--microbatch", "64"], "does not fit"),
    (["--from-run", "20", "--name", "h100-sxm"], "a shipped profile has that name"),
])
def test_bad_input_is_one_line(cache, capsys, argv, message):
    assert main(["calibrate"] + FLAGS + argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err, err


def test_cpu_local_is_not_calibrated_from_a_run(cache, capsys):
    assert main(["calibrate", "--from-run", "1", "--hardware", "cpu-local"]) == 2
    assert "accelerator profile" in capsys.readouterr().err


# --- stacks ---------------------------------------------------------------------------------------

def test_calibrated_from_one_run_another_of_its_stack_pin():
    # `--from-run` on Korthikanti et al.'s 22B full-recompute run (1.42 s), then their 175B run
    chip, every = load_chip("a100-80gb"), published.stack_runs()
    one = every[every.run == "korthikanti-22b-full"].iloc[0]
    found = fr.solve_efficiency(lambda c: runs.predict_run(one, c)["total"], chip, one.step_s)
    tuned = dataclasses.replace(chip, step_efficiency=found)
    other = every[every.run == "korthikanti-175b-full"].iloc[0]
    ratio = runs.predict_run(other, tuned)["total"] / other.step_s
    stack = published.stack_fit(every, "megatron-lm-2022", chip)
    assert stack.step_efficiency == pytest.approx(found, abs=1e-5)
    # what benchmarks/predict_accuracy.py --published reports for the row: 0.988 (1.010 with
    # memory-bound kernels at the datasheet's HBM bandwidth, 1.026 before the network's tiers,
    # the stragglers and Megatron-LM's optimizer traffic, issue 42)
    scored = runs.scored(every[every.run == "korthikanti-175b-full"], stack)
    assert scored.ratio.item() == pytest.approx(ratio, rel=1e-5)
    assert ratio == pytest.approx(0.988, abs=0.002)


def test_every_run_has_a_stack_and_no_fit_run_is_scored():
    every = published.stack_runs()
    assert set(every["stack"]) == set(published.STACKS)
    assert not every.run.str.contains("405b").any()
    for stack, fit_set in published.STACKS.items():
        mine = every[every["stack"] == stack]
        assert set(fit_set) <= set(mine.run[mine.unknown == "-"])  # fitted only on known runs
    # the runs whose configuration is not fully published are brackets, never points
    assert set(every.run[every.unknown != "-"]) == (
        {f"mt-nlg-530b-{n}" for n in (2240, 2800, 3360)}
        | {f"narayanan-t2-174.6b-{n}" for n in (384, 768, 1536)}
        | {f"narayanan-t2-529.6b-{n}" for n in (560, 1120, 2240)}
        | {f"megascale-mlm-175b-{n}" for n in (256, 512, 768, 1024, 3072, 6144, 8192, 12288)}
        | {"megascale-mlm-175b-256-b256"})


# Targets (docs/predict.md): a stack calibrated from one of its runs, median ≤ 5 %, max ≤ 12 % on
# its other runs; runs held out of their own stack's fit (leave-one-out), ≤ 3.5 % / ≤ 8.5 %.
ONE_RUN_TARGET, HELD_OUT_TARGET = (0.05, 0.12), (0.035, 0.085)
# megatron-lm-2022 as measured (median, max): calibrated on korthikanti-22b-full, and
# leave-one-out over its 8 runs; the ratios rise with the pipeline depth, which one constant
# cannot absorb (5.6 % / 14.4 % and 5.6 % / 10.5 % with memory-bound kernels at the A100's
# datasheet bandwidth rather than its measured 88 % of it)
ONE_RUN_MEASURED, LOO_MEASURED = (0.036, 0.103), (0.050, 0.090)


def _missed(measured, target) -> str:
    return (f"missed: median {measured[0]:.1%}, max {measured[1]:.1%} against "
            f"{target[0]:.1%} / {target[1]:.1%}")


@pytest.fixture(scope="module")
def stacks():
    return published.stack_accuracy()


def _pair(summary) -> tuple[float, float]:
    return summary["median"], summary["max"]


@pytest.mark.slow
def test_stack_accuracy_pin(stacks):
    k = stacks["megatron-lm-2022"]
    assert k["test"].run.isin(published.STACKS["megatron-lm-2022"]).sum() == 0
    assert _pair(k["test_summary"]) == pytest.approx(ONE_RUN_MEASURED, abs=1e-3)
    assert _pair(k["loo_summary"]) == pytest.approx(LOO_MEASURED, abs=1e-3)
    b = stacks["megatron-deepspeed"]["brackets"]
    assert (b.parex_min_s < b.parex_max_s).all() and b.hit.all()  # MT-NLG over microbatch 1-4
    b = stacks["megatron-lm-2021"]["brackets"]
    assert b.hit.sum() == 4, b[["run", "step_s", "parex_min_s", "parex_max_s"]]
    # a bracket's ratio: 1 inside it, else its nearer end over the published time (Table 2's
    # 174.6B on 384 and 768 GPUs: predicted fast, below 1)
    assert ((b.ratio == 1) == b.hit).all()
    missed = b[~b.hit]
    assert (missed.ratio == missed.parex_max_s / missed.step_s).all() and (missed.ratio < 1).all()


def _percent(pair) -> str:
    return f"{pair[0] * 100:.1f} % / {pair[1] * 100:.1f} %"


@pytest.mark.slow
def test_the_docs_quote_the_stacks_as_measured(stacks):
    """README.md and docs/predict.md state these numbers: they are what the code gives."""
    root = Path(__file__).resolve().parents[2]
    readme, page = (" ".join((root / name).read_text().split())
                    for name in ("README.md", "docs/predict.md"))
    loo_2021 = _pair(stacks["megatron-lm-2021"]["loo_summary"])
    one_run, loo_2022 = (_pair(stacks["megatron-lm-2022"][k]) for k in ("test_summary",
                                                                        "loo_summary"))
    median, worst = (f"{x * 100:.1f} %" for x in loo_2021)
    assert f"median {median}, max {worst}" in readme
    assert f"{_percent(one_run)} on its other seven" in readme
    hits = sum(int(stacks[s]["brackets"].hit.sum()) for s in stacks)
    total = sum(len(stacks[s]["brackets"]) for s in stacks)
    assert f"brackets, {hits} of {total} hit" in readme
    for pair in (loo_2021, one_run, loo_2022):
        assert _percent(pair) in page, _percent(pair)


@pytest.mark.slow
def test_a_stack_calibrated_from_one_run_meets_the_target(stacks):
    median, worst = _pair(stacks["megatron-lm-2022"]["test_summary"])
    assert median <= ONE_RUN_TARGET[0] and worst <= ONE_RUN_TARGET[1]


@pytest.mark.slow
def test_megascale_calibrated_on_its_fewest_gpus_scales_to_12288(stacks):
    """MegaScale's Megatron-LM baseline (megatron-lm-2023), calibrated on its 530B run on 2,240
    GPUs: its weak scaling to 11,200 GPUs (points) and the 175B's strong scaling from 256 to
    12,288 (brackets over the microbatch) meet the one-run target, and the error does not grow
    with the GPU count."""
    k = stacks["megatron-lm-2023"]
    assert set(k["fit_set"]) == {"megascale-mlm-530b-2240"}
    assert len(k["test"]) == 2 and len(k["brackets"]) == 9
    ratio = k["brackets"].ratio  # a bracket's nearer end over the published, 1 inside it
    errors = np.abs(np.concatenate([k["test"].ratio, ratio]) - 1)
    assert np.median(errors) <= ONE_RUN_TARGET[0] and errors.max() <= ONE_RUN_TARGET[1]
    # the weak-scaling points: 0.996 and 0.987 of the published seconds
    assert np.abs(k["test"].ratio - 1).max() <= 0.02
    # log(predicted / published) against log2(GPUs) over the 175B brackets: measured -0.006 per
    # doubling (the largest misses at 256 and 512 GPUs, predicted slow; 1.7 % at 12,288)
    gpus = k["brackets"].gpus.astype(float)
    slope = np.polyfit(np.log2(gpus), np.log(ratio), 1)[0]
    assert slope <= 0.005, slope


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason=_missed(LOO_MEASURED, HELD_OUT_TARGET))
def test_megatron_2022_held_out_of_its_stack_fit_meets_the_target(stacks):
    median, worst = _pair(stacks["megatron-lm-2022"]["loo_summary"])
    assert median <= HELD_OUT_TARGET[0] and worst <= HELD_OUT_TARGET[1]


@pytest.mark.slow
def test_megatron_2021_held_out_of_its_stack_fit_meets_the_target(stacks):
    median, worst = _pair(stacks["megatron-lm-2021"]["loo_summary"])
    assert median <= HELD_OUT_TARGET[0] and worst <= HELD_OUT_TARGET[1]


def test_a_bracket_spans_the_predictions_of_each_value():
    chip, every = load_chip("a100-80gb"), published.stack_runs()
    run = next(r for r in every.itertuples() if r.run == "mt-nlg-530b-2240")
    assert published.unknown_values(run) == ("microbatch", [1, 2, 4])
    each = [runs.predict_run(run._replace(microbatch=m), chip)["total"] for m in (1, 2, 4)]
    assert published.bracket(run, chip) == (min(each), max(each))


def test_solve_refuses_a_time_the_efficiency_cannot_reach():
    chip = load_chip("a100-80gb")
    with pytest.raises(InputError, match="slower than step efficiency"):
        fr.solve_efficiency(lambda c: 1.0 / c.step_efficiency, chip, 1e6)
    with pytest.raises(InputError, match="does not depend on the step efficiency"):
        fr.solve_efficiency(lambda c: 3.0, chip, 3.0)


def test_profile_flags_without_from_run_are_refused(cache, capsys):
    assert main(["calibrate", "--name", "a100-mine"]) == 2
    assert "only with --from-run" in capsys.readouterr().err
