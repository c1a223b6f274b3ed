"""`parex predict` and `parex compare` (calibrate's kernels are tested in test_hardware.py)."""

import json
import re

import pytest

from parex.cli.main import main

PREDICT_KEYS = {"step_time_s", "memory_bytes_per_device", "flops_per_device", "mfu", "hfu",
                "tflops_per_device", "tokens_per_s", "fits", "collectives"}


def test_predict_json_has_the_documented_keys(capsys):
    assert main(["predict", "--model", "megatron-39.1b", "--layout",
                 "data=32,tensor=8,stage=2,schedule=1f1b", "--hardware", "a100-80gb",
                 "--global-batch", "1536", "--microbatch", "4", "--remat", "full",
                 "--dtype", "bfloat16", "--recipe", "mixed", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert PREDICT_KEYS <= set(out)
    assert set(out["step_time_s"]) == {"total", "compute", "exposed_comm", "bubble"}
    assert {"total", "params", "grads", "optimizer", "activations", "temp",
            "argument"} <= set(out["memory_bytes_per_device"])
    assert out["hardware"] == "a100-80gb×64" and out["n_devices"] == 512  # nodes from the layout
    assert out["fits"] is True and 100 < out["tflops_per_device"] < 250
    assert {"kind", "axes", "count", "bytes", "seconds"} <= set(out["collectives"][0])


def test_predict_a_bare_family_from_flags(capsys):
    assert main(["predict", "--model", "llama", "--layers", "4", "--hidden", "512", "--heads",
                 "8", "--kv-heads", "2", "--ffn", "1536", "--vocab", "32000", "--seq", "1024",
                 "--layout", "fsdp=8", "--hardware", "h100-sxm"]) == 0
    out = capsys.readouterr().out
    for text in ("parex predict · llama", "step time", "MFU", "memory/dev", "fits",
                 "fsdp-gather"):
        assert text in out
    assert main(["predict", "--model", "gpt", "--hidden", "512"]) == 2
    assert "--layers --heads" in capsys.readouterr().err


def test_predict_flags_a_layout_that_does_not_fit(capsys):
    assert main(["predict", "--model", "llama2-70b", "--layout", "data=8", "--hardware", "h100-sxm",
                 "--global-batch", "8", "--seq", "4096", "--dtype", "bfloat16"]) == 0
    out = capsys.readouterr().out
    assert "DOES NOT FIT" in out and re.search(r"\d [GT]B over", out)
    assert main(["predict", "--model", "llama2-70b", "--layout", "data=8", "--hardware",
                 "h100-sxm", "--global-batch", "8", "--seq", "4096", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fits"] is False and out["over_capacity_bytes"] > 1e12


def test_predict_bad_input_is_a_message_not_a_traceback(capsys):
    assert main(["predict", "--hardware", "a100-40gb"]) == 2
    err = capsys.readouterr().err
    assert "unknown hardware 'a100-40gb'" in err and "h100-sxm" in err and "Traceback" not in err
    assert main(["predict", "--model", "tiny", "--layout", "tensor=3"]) == 2
    assert "heads=8 is not divisible by tensor=3" in capsys.readouterr().err


def test_compare_prints_predicted_measured_and_ratio(capsys):
    assert main(["compare", "--model", "tiny", "--layout", "dp", "--steps", "3", "--seq", "64",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["convention"] == "xla-cpu" and out["hardware"] == "cpu-local"
    assert out["assumptions"] == out["prediction"]["assumptions"]
    assert (out["assumptions"]["dtype"], out["assumptions"]["recipe"]) == ("float32", "parex")
    fields = {f["field"]: f for f in out["fields"]}
    assert {"step_time_s", "memory_argument_bytes", "memory_total_bytes", "flops_per_device",
            "comm_all_reduce_bytes"} <= set(fields)
    assert fields["memory_argument_bytes"]["ratio"] == 1.0
    assert fields["comm_all_reduce_bytes"]["ratio"] == pytest.approx(1.0, abs=1e-4)
    assert all(f["predicted"] >= 0 and f["measured"] >= 0 for f in out["fields"])


def test_predict_says_when_parex_cannot_run_the_layout(capsys):
    args = ["predict", "--model", "llama3-405b", "--layout",
            "data=8,tensor=8,stage=16,sp=on,schedule=1f1b,microbatches=16,partition=7:8*14:7",
            "--hardware", "h100-sxm", "--global-batch", "2048", "--seq", "8192", "--remat", "full"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "executable   no, predicted only" in out and "nearest layout that runs" in out
    assert main(args + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["executable"] is False and "not a multiple of stage=16" in out["executable_reason"]


def test_predict_explain_breaks_the_step_down(capsys):
    args = ["predict", "--model", "llama2-7b", "--hardware", "frontier", "--global-batch", "256",
            "--layout", "data=8,tensor=8,stage=4,schedule=1f1b,microbatches=32"]
    assert main(args + ["--explain"]) == 0
    text = capsys.readouterr().out
    for part in ("step breakdown", "ideal compute", "kernel shapes", "congestion",
                 "stragglers", "bubble", "collectives by tier", "NICs"):
        assert part in text
    assert main(args + ["--explain", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    parts = out["explain"]["parts"]
    total = sum(parts[k] for k in ("ideal compute", "kernel efficiency", "kernel shapes",
                                   "communication", "stragglers", "bubble"))
    assert total == pytest.approx(out["step_time_s"]["total"], rel=1e-9)


def test_predict_on_another_network_of_the_same_machine(capsys):
    """--network puts the profile's nodes on a network file (data/networks/), as the Python
    API's Cluster(chip, nodes, network=...) does: Frontier under an unconfigured launch, whose
    RCCL stalls below 384 KiB per rank, predicts a slower step than the configured default."""
    from parex import predict
    from parex.config import TrainConfig, model_preset
    from parex.hardware import Cluster, load_chip
    from parex.layout import Layout
    from parex.network import load_network

    args = ["predict", "--model", "llama2-7b", "--hardware", "frontier", "--global-batch", "256",
            "--layout", "data=64,tensor=8", "--json"]
    steps = {}
    for extra in ([], ["--network", "frontier-unconfigured"]):
        assert main(args + extra) == 0
        steps[bool(extra)] = json.loads(capsys.readouterr().out)["step_time_s"]["total"]
    assert steps[True] > steps[False]
    cluster = Cluster(load_chip("frontier"), 64, network=load_network("frontier-unconfigured"))
    api = predict(model_preset("llama2-7b"), TrainConfig(global_batch=256),
                  Layout.parse("data=64,tensor=8", 512), cluster)
    assert api.step_time_s["total"] == pytest.approx(steps[True], rel=1e-9)
    assert main(args + ["--network", "frontier-typo"]) == 2
    err = capsys.readouterr().err
    assert "frontier-typo" in err and "frontier-unconfigured" in err and len(
        err.strip().splitlines()) == 1
