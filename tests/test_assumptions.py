"""One set of assumptions (parex.defaults), said by every output and shared by plan and predict."""

import dataclasses
import json

import numpy as np
import pytest

from parex.cli.main import main
from parex.config import TrainConfig, model_preset
from parex.defaults import Assumptions, assume, default_global_batch
from parex.hardware import load_cluster
from parex.layout import Layout
from parex.plan import plan
from parex.plan.alternatives import fitting_layouts
from parex.predict import predict

KEYS = {f.name for f in dataclasses.fields(Assumptions)}
LLAMA_FLAGS = ["--model", "llama2-7b", "--hardware", "h100-sxm", "--nodes", "4",
               "--global-batch", "256", "--seq", "4096"]


def run_json(capsys, *args) -> dict:
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_defaults_follow_the_profile():
    tiny, llama = model_preset("tiny"), model_preset("llama2-7b")
    local = assume(load_cluster("cpu-local"), tiny)
    assert (local.dtype, local.recipe, local.convention, local.remat, local.schedule) == (
        tiny.dtype, "parex", "xla-cpu", "none", "gpipe")
    assert local.global_batch == 16
    gpu = assume(load_cluster("h100-sxm", 4), llama, seq_len=4096)
    assert (gpu.dtype, gpu.recipe, gpu.convention, gpu.remat, gpu.schedule) == (
        "bfloat16", "mixed", "gpu", "selective", "1f1b")
    # 2M tokens of 4096 for a 7B model, a multiple of the 32 devices
    assert gpu.global_batch == 512 and gpu.global_batch % gpu.n_devices == 0
    assert default_global_batch(model_preset("llama2-70b"), 4096, 256, False) == 1024
    assert default_global_batch(llama, 4096, 96, False) % 96 == 0
    given = assume(load_cluster("h100-sxm"), llama, dtype="float32", recipe="parex",
                   global_batch=8, remat="full", schedule="gpipe")
    assert (given.dtype, given.recipe, given.global_batch, given.remat, given.schedule) == (
        "float32", "parex", 8, "full", "gpipe")
    assert set(gpu.to_json()) == KEYS
    for text in ("h100-sxm×4", "bfloat16", "recipe mixed", "512 × 4096", "remat selective",
                 "schedule 1f1b"):
        assert text in gpu.describe()


def plan_rows_match_predict(p, rows):
    for i in rows:
        q = predict(p.model, p.train_of(i), p.layout(i), p.cluster, **p.settings)
        assert q.step_time_s["total"] == pytest.approx(p.columns["step_time_s"][i], rel=1e-9)
        assert q.memory_bytes_per_device["total"] == pytest.approx(
            p.columns["memory_total_bytes"][i], rel=1e-9)
        assert q.assumptions == p.assumptions_of(i).to_json()


@pytest.mark.parametrize("name, hardware, nodes, batch", [
    ("llama2-7b", "h100-sxm", 2, 64), ("tiny", "cpu-local", 1, 16),
    ("gpt2-small", "a100-80gb", 1, 32)])
def test_a_plans_rows_are_what_predict_says(name, hardware, nodes, batch):
    """Random rows of a plan (defaults as the Planner uses them) predicted one at a time with
    the plan's settings: the same step time, memory and assumptions."""
    p = plan(model_preset(name), TrainConfig(global_batch=batch), hardware, nodes, top=3)
    rng = np.random.default_rng(0)
    rows = list(p.top) + rng.choice(len(p.columns["step_time_s"]), 12, replace=False).tolist()
    plan_rows_match_predict(p, rows)
    assert p.model.dtype == p.assumptions.dtype == p.settings["dtype"]


def test_plan_json_and_predict_json_agree_at_scale(capsys):
    """Done when: llama2-7b on 4 nodes of h100-sxm, the top layout of `parex plan --json` and
    `parex predict --json` of it with the same flags: step time and memory within 1 %, and the
    same assumptions (75,000 layouts, ~4 s)."""
    planned = run_json(capsys, "plan", *LLAMA_FLAGS, "--top", "1")
    top = planned["top"][0]
    predicted = run_json(capsys, "predict", *LLAMA_FLAGS, "--layout", top["layout"],
                         "--remat", top["remat"])
    assert predicted["step_time_s"]["total"] == pytest.approx(top["step_time_s"]["total"],
                                                              rel=0.01)
    assert predicted["memory_bytes_per_device"]["total"] == pytest.approx(
        top["memory_bytes_per_device"]["total"], rel=0.01)
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
    layout = out16["top"][0]["layout"]  # the bf16 plan's best, predicted in both dtypes
    mem = [run_json(capsys, "predict", "--model", "gpt2-small", "--hardware", "h100-sxm",
                    "--global-batch", "32", "--remat", "none", "--layout", layout,
                    "--dtype", d)["memory_bytes_per_device"]["total"]
           for d in ("float32", "bfloat16")]
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
     "--recipe mixed is 16-bit mixed precision"),
])
def test_a_flag_a_command_cannot_use_is_refused(capsys, args, says):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_a_pipeline_without_a_schedule_runs_1f1b_at_scale(capsys):
    base = ["predict", "--model", "llama2-7b", "--layout", "stage=2,microbatches=8",
            "--global-batch", "16", "--seq", "2048"]
    gpu = run_json(capsys, *base, "--hardware", "h100-sxm")
    assert gpu["layout"] == "stage=2,schedule=1f1b,microbatches=8"
    assert gpu["assumptions"]["schedule"] == "1f1b"
    named = run_json(capsys, *base[:4], "stage=2,schedule=gpipe,microbatches=8", *base[5:],
                     "--hardware", "h100-sxm")
    assert named["assumptions"]["schedule"] == "gpipe"
    assert named["step_time_s"]["bubble"] != gpu["step_time_s"]["bubble"]


def test_every_output_states_its_assumptions(capsys):
    out = run_json(capsys, "predict", "--layout", "data=8")
    assert set(out["assumptions"]) == KEYS and out["assumptions"]["hardware"] == "cpu-local"
    assert main(["predict", "--layout", "data=8", "--hardware", "h100-sxm"]) == 0
    text = capsys.readouterr().out
    assert "assumptions  h100-sxm×1 (8 devices) · bfloat16 · recipe mixed" in text
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
    each fits when predicted, fastest first, and none slower than the hand-made fix the
    issue found (fsdp=8, microbatches=2 with selective remat, 63.5 GB)."""
    args = ["predict", "--model", "llama2-13b", "--layout", "data=8", "--hardware", "h100-sxm",
            "--global-batch", "16", "--seq", "4096", "--remat", "none"]
    out = run_json(capsys, *args)
    assert not out["fits"] and len(out["fits_instead"]) == 3
    steps = [alt["step_time_s"] for alt in out["fits_instead"]]
    assert steps == sorted(steps)
    model, train = model_preset("llama2-13b").replace(dtype="bfloat16"), TrainConfig(
        global_batch=16, seq_len=4096)
    hand = predict(model, train.replace(remat="selective"), Layout(fsdp=8, microbatches=2),
                   "h100-sxm")
    assert hand.fits and steps[0] <= hand.step_time_s["total"]
    for alt in out["fits_instead"]:
        p = predict(model, train.replace(remat=alt["remat"]), Layout.parse(alt["layout"]),
                    "h100-sxm")
        assert p.fits and p.step_time_s["total"] == pytest.approx(alt["step_time_s"], rel=1e-9)
        assert alt["saving_s"] == pytest.approx(out["step_time_s"]["total"] - p.step_time_s[
            "total"])
    assert main(args) == 0
    assert "fits instead (the planner's fastest on the same 8 devices" in capsys.readouterr().out
    assert fitting_layouts(model, train, "h100-sxm", 8, limit=1)[0].layout == Layout.parse(
        out["fits_instead"][0]["layout"])
