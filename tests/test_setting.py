"""One Setting (parex.setting), resolved once at each entry point, said by every output and
shared by plan and predict."""

import json

import numpy as np
import pytest

from parex.cli.main import main
from parex.config import TrainConfig, model_preset
from parex.defaults import default_global_batch
from parex.layout import Layout
from parex.plan import plan
from parex.plan.alternatives import fitting_layouts
from parex.predict import predict
from parex.setting import resolve, resolve_run

KEYS = {"hardware", "nodes", "n_devices", "regime", "dtype", "recipe", "convention",
        "global_batch", "seq_len", "remat", "microbatch", "schedule", "attention",
        "expert_imbalance", "precision"}
LLAMA_FLAGS = ["--model", "llama2-7b", "--hardware", "h100-sxm", "--nodes", "4",
               "--global-batch", "256", "--seq", "4096"]


def run_json(capsys, *args) -> dict:
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_defaults_follow_the_regime():
    tiny, llama = model_preset("tiny"), model_preset("llama2-7b")
    local = resolve(tiny, TrainConfig(), Layout(data=8), "cpu-local")
    assert (local.regime, local.dtype, local.recipe, local.convention, local.train.remat,
            local.schedule, local.attention) == (
        "emulated", tiny.dtype, "parex", "xla-cpu", "none", "gpipe", "naive")
    assert local.train.global_batch == 16
    gpu = resolve(llama, TrainConfig(seq_len=4096), None, "h100-sxm", nodes=4)
    assert (gpu.regime, gpu.dtype, gpu.recipe, gpu.convention, gpu.train.remat, gpu.schedule,
            gpu.attention) == ("accelerator", "bfloat16", "mixed", "gpu", "none", "1f1b",
                               "flash")
    # 2M tokens of 4096 for a 7B model, a multiple of the 32 devices
    assert gpu.train.global_batch == 512 and gpu.train.global_batch % 32 == 0
    assert default_global_batch(model_preset("llama2-70b"), 4096, 256, False) == 1024
    assert default_global_batch(llama, 4096, 96, False) % 96 == 0
    given = resolve(llama, TrainConfig(global_batch=8, remat="full"),
                    Layout(stage=2, schedule="gpipe"), "h100-sxm", dtype="float32",
                    recipe="parex")
    assert (given.dtype, given.recipe, given.train.global_batch, given.train.remat,
            given.layout.schedule) == ("float32", "parex", 8, "full", "gpipe")
    assert set(gpu.to_json()) == KEYS
    assert {"dtype", "recipe", "convention", "global_batch", "remat"} <= set(gpu.defaulted)
    for text in ("h100-sxm×4", "accelerator", "bfloat16", "recipe mixed", "512 × 4096",
                 "remat none", "schedule 1f1b", "attention flash"):
        assert text in gpu.describe()


def test_selective_recompute_is_the_default_only_where_it_saves_memory():
    """Under flash attention selective recompute keeps next to nothing less (each row's
    log-sum-exp, 0.1 % of the activations) and costs time (llama2-13b fsdp=8,microbatches=2:
    2.4 % slower), so a default never picks it; with the naive kernel it drops the scores, and
    stays the default from 1B parameters."""
    model, layout = model_preset("llama2-13b"), Layout(fsdp=8, microbatches=2)
    train = TrainConfig(global_batch=16, seq_len=4096)
    flash = predict(model, train, layout, "h100-sxm")
    selective = predict(model, train.replace(remat="selective"), layout, "h100-sxm")
    assert flash.assumptions["remat"] == "none"
    saved = 1 - (selective.memory_bytes_per_device["activations"]
                 / flash.memory_bytes_per_device["activations"])
    assert 0 <= saved < 0.002
    assert selective.step_time_s["total"] > 1.02 * flash.step_time_s["total"]
    naive = predict(model, train.replace(attention="naive"), layout, "h100-sxm")
    assert naive.assumptions["remat"] == "selective"


def test_the_default_batch_comes_in_microbatches_of_one_sequence_at_scale():
    """Under the default batch of millions of tokens a hand-typed layout of a 7B model trains
    one sequence per microbatch (m = B / dp), not B / dp sequences at once; a given batch
    trains without accumulation unless the layout or --microbatch says otherwise."""
    model = model_preset("llama2-7b")
    default = predict(model, TrainConfig(), Layout(data=2, tensor=4), "h100-sxm")
    assert default.assumptions["global_batch"] == 512 and default.assumptions["microbatch"] == 1
    assert default.layout == "data=2,tensor=4,microbatches=256"
    assert default.memory_bytes_per_device["total"] < 80e9
    given = predict(model, TrainConfig(global_batch=64), Layout(data=2, tensor=4), "h100-sxm")
    assert given.assumptions["microbatch"] == 32 and given.layout == "data=2,tensor=4"
    local = resolve(model_preset("tiny"), TrainConfig(), Layout(data=8), "cpu-local")
    assert local.layout.microbatches == 1  # the emulated mesh keeps its batch whole


def test_an_execution_resolves_by_its_platform():
    tiny = model_preset("tiny")
    run = resolve_run(tiny, TrainConfig(), Layout(stage=2, microbatches=4), "cpu")
    assert (run.regime, run.train.global_batch, run.layout.schedule, run.attention,
            run.dtype) == ("emulated", 16, "gpipe", "naive", "float32")
    gpu = resolve_run(tiny, TrainConfig(global_batch=8), Layout(stage=2), "gpu")
    assert (gpu.regime, gpu.layout.schedule, gpu.attention, gpu.dtype) == (
        "accelerator", "1f1b", "flash", "float32")  # an execution keeps the model's dtype


def plan_rows_match_predict(p, rows):
    for i in rows:
        q = predict(p.model, p.train_of(i), p.layout(i), p.cluster, **p.settings)
        assert q.step_time_s["total"] == pytest.approx(p.columns["step_time_s"][i], rel=1e-9)
        assert q.memory_bytes_per_device["total"] == pytest.approx(
            p.columns["memory_total_bytes"][i], rel=1e-9)
        assert q.assumptions == p.setting_of(i).to_json()


@pytest.mark.parametrize("name, hardware, nodes, batch", [
    ("llama2-7b", "h100-sxm", 2, 64), ("tiny", "cpu-local", 1, 16),
    ("gpt2-small", "a100-80gb", 1, 32), ("llama2-7b", "h100-sxm", 1, None)])
def test_a_plans_rows_are_what_predict_says(name, hardware, nodes, batch):
    """Random rows of a plan (defaults as the Planner uses them) predicted one at a time with
    the plan's settings: the same step time, memory and Setting."""
    p = plan(model_preset(name), TrainConfig(global_batch=batch), hardware, nodes, top=3)
    rng = np.random.default_rng(0)
    rows = list(p.top) + rng.choice(len(p.columns["step_time_s"]), 12, replace=False).tolist()
    plan_rows_match_predict(p, rows)
    assert p.model.dtype == p.setting.dtype == p.settings["dtype"]


def test_plan_json_and_predict_json_agree_at_scale(capsys):
    """llama2-7b on 4 nodes of h100-sxm, the top layout of `parex plan --json` and
    `parex predict --json` of it with the row's flags: the same step time, memory and
    Setting (75,000 layouts, ~4 s)."""
    planned = run_json(capsys, "plan", *LLAMA_FLAGS, "--top", "1")
    top = planned["top"][0]
    predicted = run_json(capsys, "predict", *LLAMA_FLAGS, *top["flags"].split())
    assert predicted["step_time_s"]["total"] == pytest.approx(top["step_time_s"]["total"],
                                                              rel=1e-9)
    assert predicted["memory_bytes_per_device"]["total"] == pytest.approx(
        top["memory_bytes_per_device"]["total"], rel=1e-9)
    assert predicted["assumptions"] == top["assumptions"]
    assert set(planned["assumptions"]) == KEYS and planned["assumptions"]["recipe"] == "mixed"


def test_plan_honours_dtype(capsys):
    model, train = model_preset("gpt2-small"), TrainConfig(global_batch=32)
    f32 = plan(model, train, "h100-sxm", 1, dtype="float32", top=1)
    bf16 = plan(model, train, "h100-sxm", 1, dtype="bfloat16", top=1)
    assert np.array_equal(f32.columns["data"], bf16.columns["data"])  # the same rows
    # float32 training keeps float32 state (the parex recipe), bfloat16 the mixed recipe
    assert (f32.settings["recipe"], bf16.settings["recipe"]) == ("parex", "mixed")
    total = "memory_total_bytes"
    assert (f32.columns[total] > bf16.columns[total]).all()
    args = ["plan", "--model", "gpt2-small", "--hardware", "h100-sxm", "--global-batch", "32",
            "--remat", "none", "--top", "1"]
    out32, out16 = run_json(capsys, *args, "--dtype", "float32"), run_json(capsys, *args)
    assert out32["assumptions"]["dtype"] == "float32" and out16["assumptions"]["dtype"] == \
        "bfloat16"
    flags = out16["top"][0]["flags"].split()  # the bf16 plan's best, predicted in both dtypes
    mem = [run_json(capsys, "predict", "--model", "gpt2-small", "--hardware", "h100-sxm",
                    "--global-batch", "32", *flags, "--dtype", d)["memory_bytes_per_device"][
        "total"] for d in ("float32", "bfloat16")]
    assert mem[0] > mem[1] and mem[1] == pytest.approx(
        out16["top"][0]["memory_bytes_per_device"]["total"], rel=1e-9)


@pytest.mark.parametrize("args, says", [
    (["plan", "--steps", "3"], "--steps sets how --verify measures"),
    (["plan", "--verify-out", "x.jsonl"], "add --verify"),
    (["plan", "--cluster", "het-48", "--model", "llama2-7b", "--hardware", "h100-sxm"],
     "drop --hardware"),
    (["predict", "--layout", "data=8", "--wan-gbps", "2"], "link between DiLoCo replicas"),
    (["predict", "--layout", "data=2,microbatches=4", "--microbatch", "2"],
     "both set the microbatch count"),
    (["plan", "--hardware", "h100-sxm", "--dtype", "float32", "--recipe", "mixed"],
     "recipe 'mixed' is 16-bit mixed precision"),
    (["plan", "--memory-cap", "-5"], "must be above 0"),
])
def test_a_flag_a_command_cannot_use_is_refused(capsys, args, says):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_a_pipeline_without_a_schedule_gets_the_regimes(capsys):
    """The issue's example: llama2-7b, batch 64, stage=4,microbatches=8 on h100-sxm: one
    schedule, one remat and one step time from the command and from Python."""
    flags = ["--model", "llama2-7b", "--layout", "stage=4,microbatches=8", "--global-batch",
             "64", "--hardware", "h100-sxm"]
    cli = run_json(capsys, "predict", *flags)
    api = predict(model_preset("llama2-7b"), TrainConfig(global_batch=64),
                  Layout.parse("stage=4,microbatches=8"), "h100-sxm")
    assert cli["layout"] == api.layout == "stage=4,schedule=1f1b,microbatches=8"
    assert cli["assumptions"] == api.assumptions
    assert (api.assumptions["schedule"], api.assumptions["remat"]) == ("1f1b", "none")
    assert cli["step_time_s"]["total"] == api.step_time_s["total"]
    named = predict(model_preset("llama2-7b"), TrainConfig(global_batch=64),
                    Layout.parse("stage=4,schedule=gpipe,microbatches=8"), "h100-sxm")
    assert named.step_time_s["bubble"] != api.step_time_s["bubble"]
    local = predict(model_preset("tiny"), TrainConfig(), Layout.parse("stage=2,virtual=2,"
                                                                      "microbatches=4"),
                    "cpu-local")
    assert local.assumptions["schedule"] == "interleaved"  # the default that runs v > 1


def test_every_output_states_its_setting(capsys):
    out = run_json(capsys, "predict", "--layout", "data=8")
    assert set(out["assumptions"]) == KEYS and out["assumptions"]["hardware"] == "cpu-local"
    assert main(["predict", "--layout", "data=8", "--hardware", "h100-sxm"]) == 0
    text = capsys.readouterr().out
    assert "assumptions  h100-sxm×1 (8 devices) · accelerator · bfloat16 · recipe mixed" in text
    assert "(defaults: dtype, recipe, convention, global batch, remat)" in text
    out = run_json(capsys, "plan", "--top", "2")
    assert set(out["assumptions"]) == KEYS
    assert all(set(e["assumptions"]) == KEYS for e in out["top"])
    out = run_json(capsys, "lowcomm", "--model", "llama2-7b", "--hardware", "h100-sxm",
                   "--layout", "replica=2,fsdp=8,inner_steps=50", "--global-batch", "64")
    assert out["assumptions"]["global_batch"] == 64  # the whole batch, not one replica's
    assert out["prediction"]["assumptions"] == out["assumptions"]


def test_a_layout_that_does_not_fit_is_offered_the_planners_best(capsys):
    """llama2-13b at data=8 on 8 H100s: the fixes are the planner's fastest fitting layouts,
    each fits when predicted, fastest first, and none slower than the hand-made fix (fsdp=8,
    microbatches=2, 63.5 GB)."""
    args = ["predict", "--model", "llama2-13b", "--layout", "data=8", "--hardware", "h100-sxm",
            "--global-batch", "16", "--seq", "4096", "--remat", "none"]
    out = run_json(capsys, *args)
    assert not out["fits"] and len(out["fits_instead"]) == 3
    steps = [alt["step_time_s"] for alt in out["fits_instead"]]
    assert steps == sorted(steps)
    model, train = model_preset("llama2-13b"), TrainConfig(global_batch=16, seq_len=4096)
    hand = predict(model, train.replace(remat="none"), Layout(fsdp=8, microbatches=2),
                   "h100-sxm")
    assert hand.fits and steps[0] <= hand.step_time_s["total"]
    for alt in out["fits_instead"]:
        again = run_json(capsys, "predict", "--model", "llama2-13b", "--global-batch", "16",
                         "--seq", "4096", *alt["flags"].split(), "--hardware", "h100-sxm")
        assert again["fits"] and again["step_time_s"]["total"] == pytest.approx(
            alt["step_time_s"], rel=1e-9)
        assert alt["saving_s"] == pytest.approx(out["step_time_s"]["total"]
                                                - again["step_time_s"]["total"])
    assert main(args) == 0
    assert "fits instead (the planner's fastest on the same 8 devices" in capsys.readouterr().out
    assert fitting_layouts(model, train, "h100-sxm", 8, limit=1)[0].layout == Layout.parse(
        out["fits_instead"][0]["layout"])
