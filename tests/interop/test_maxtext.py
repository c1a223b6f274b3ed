"""MaxText configurations <-> parex: the same run predicts the same, both ways."""

import random
import re

import pytest

import parex
from parex import Layout, TrainConfig, model_preset
from parex.cli.main import main
from parex.errors import InputError
from parex.interop import Unexpressible, from_maxtext, to_maxtext
from parex.interop.maxtext import VERSION, maxtext_overrides
from parex.interop.result import option_list
from parex.setting import resolve

HARDWARE = "h100-sxm"

# Llama 2 70B in MaxText's own words: its model config, 8-way FSDP x 8-way tensor parallelism on
# 64 devices, one sequence per device, full remat, the flash kernel
LLAMA2_70B = ["model_name=llama2-70b", "max_target_length=4096", "per_device_batch_size=1",
              "ici_fsdp_parallelism=8", "ici_tensor_parallelism=8", "dcn_data_parallelism=1",
              "remat_policy=full", "attention=flash", "steps=100", "run_name=llama2"]
# the equivalent parex values: 64 sequences over 8 fsdp replicas, 8 each, no accumulation
LLAMA2_70B_LAYOUT = "fsdp=8,tensor=8"
LLAMA2_70B_TRAIN = TrainConfig(global_batch=64, microbatch=8, remat="full", attention="flash")


def test_a_maxtext_run_predicts_as_the_equivalent_parex_layout():
    """Issue 45's Done-when for MaxText: the same Setting and Prediction record."""
    run = from_maxtext("MaxText/configs/base.yml", LLAMA2_70B, name="llama2-70b")
    model, layout = model_preset("llama2-70b"), Layout.parse(LLAMA2_70B_LAYOUT)
    assert run.model == model.replace(dtype="bfloat16")
    # on MaxText's stack (parex.stacks): XLA's gradient overlap
    assert run.setting(HARDWARE) == resolve(model, LLAMA2_70B_TRAIN, layout, HARDWARE,
                                            dtype="bfloat16", stack="maxtext")
    expected = parex.predict(model, LLAMA2_70B_TRAIN, layout, HARDWARE, dtype="bfloat16",
                             stack="maxtext")
    assert run.predict(HARDWARE).to_json() == expected.to_json()
    assert run.ignored == ("steps", "run_name")


def test_minus_one_takes_the_rest_and_pipelines_repeat():
    """ici_fsdp_parallelism=-1 (base.yml's) takes the devices the other degrees leave; a
    pipeline of 4 stages with one layer per stage repeats 32 / 4 = 8 times (MaxText's circular
    pipeline, as bfs) over num_pipeline_microbatches = the stages by default, times the
    gradient accumulation."""
    run = from_maxtext(None, ["model_name=llama2-7b", "ici_pipeline_parallelism=4",
                              "per_device_batch_size=1", "gradient_accumulation_steps=2"],
                       world_size=32)
    assert run.layout == Layout.parse("fsdp=8,stage=4,schedule=bfs,virtual=8,microbatches=8")
    assert run.train.global_batch == 64 and run.setting(HARDWARE).microbatch == 1
    assert "ici_fsdp_parallelism 8 (-1: the rest)" in run.assumed


def _random_run(rng: random.Random):
    model = rng.choice([model_preset("llama2-7b"), model_preset("llama3-8b"),
                        model_preset("gpt2-medium")])
    tensor, stage, seq = rng.choice([1, 2, 4, 8]), rng.choice([1, 1, 2, 4]), rng.choice([1, 1, 2])
    virtual = rng.choice([v for v in (1, 2, 4) if model.layers % (stage * v) == 0]) \
        if stage > 1 else 1
    data, fsdp = rng.choice([1, 2]), rng.choice([1, 2, 4, 8])
    layout = Layout(data=data, fsdp=fsdp, tensor=tensor, seq=seq,
                    cp="ring" if seq > 1 else "none", stage=stage, virtual_stages=virtual,
                    schedule=None if stage == 1 else "gpipe" if virtual == 1 else "bfs")
    m = rng.choice([1, 2, 4]) * stage
    b = rng.choice([1, 2])
    train = TrainConfig(global_batch=b * m * layout.data_parallel,
                        microbatch=b if m == 1 else None, attention=rng.choice(["flash", "naive"]),
                        remat=rng.choice(["selective", "full"]))
    return model, train, layout.replace(microbatches=m), rng.choice(["bfloat16", "float32"])


def test_export_then_import_gives_the_same_setting_and_prediction_for_random_layouts():
    rng = random.Random(45)
    compared = 0
    for _ in range(60):
        model, train, layout, dtype = _random_run(rng)
        original = resolve(model, train, layout, HARDWARE, dtype=dtype, stack="maxtext")
        try:
            command = to_maxtext(model, train, layout, HARDWARE, dtype=dtype, stack="maxtext")
        except Unexpressible as err:  # a per-device batch MaxText cannot write exactly
            assert "global batch" in str(err)
            continue
        run = from_maxtext(command, name=model.name)
        assert run.setting(HARDWARE) == original, command
        try:
            expected = parex.predict(model, train, layout, HARDWARE, dtype=dtype,
                                     stack="maxtext")
        except parex.LayoutError as err:
            with pytest.raises(parex.LayoutError, match=re.escape(str(err)[:40])):
                run.predict(HARDWARE)
            continue
        assert run.predict(HARDWARE).to_json() == expected.to_json(), command
        compared += 1
    assert compared >= 50


@pytest.mark.parametrize("layout, train, nearest", [
    ("fsdp=4,tensor=2,sp=on", {}, "sp=off"),
    ("data=8,zero=1", {}, "fsdp=8"),
    ("fsdp=2,stage=4,schedule=1f1b,microbatches=8", {}, "schedule=gpipe"),
    ("fsdp=2,seq=2,cp=ulysses", {}, "cp=ring"),
    ("fsdp=8", {"remat": "none"}, "remat selective (remat_policy=minimal)"),
    ("data=2,tensor=2x2x1", {}, "tensor=4"),
])
def test_what_maxtext_cannot_express_is_refused_naming_the_nearest(layout, train, nearest):
    with pytest.raises(Unexpressible) as err:
        to_maxtext(model_preset("llama2-7b"), TrainConfig(global_batch=64, **train),
                   Layout.parse(layout), HARDWARE)
    assert str(err.value).startswith("MaxText cannot express")
    assert f"the nearest it can: {nearest}" in str(err.value)


@pytest.mark.parametrize("override, words", [
    ("ici_tensor_paralelism=2", ["ici_tensor_paralelism: not a MaxText", "did you mean "
                                 "'ici_tensor_parallelism'"]),
    ("base_emb_dim=1024", ["base_emb_dim change model_name llama2-70b's shape",
                           "override_model_config=True"]),
    ("remat_policy=save_qkv_proj", ["remat_policy='save_qkv_proj'", "'full' and 'minimal'"]),
    ("ici_tensor_transpose_parallelism=2", ["tensor_transpose axis", "put its devices on "
                                            "tensor"]),
    ("ici_fsdp_parallelism=16", ["device count 64 contradicts the degrees' product 128"]),
])
def test_unknown_or_contradictory_keys_are_one_line_errors(override, words):
    overrides = [o for o in LLAMA2_70B if not o.startswith(override.split("=")[0] + "=")]
    world = 64 if "fsdp" in override else None  # else every degree given: their product
    with pytest.raises(InputError) as err:
        from_maxtext(None, [*overrides, override], world_size=world)
    assert "\n" not in str(err.value)
    for word in words:
        assert word in str(err.value)


def test_emitted_keys_are_maxtexts_own():
    listed = option_list("maxtext")
    assert listed["version"] == VERSION and VERSION in listed["source"]
    keys = set(listed["keys"])
    rng = random.Random(5)
    emitted = set()
    for _ in range(20):
        model, train, layout, dtype = _random_run(rng)
        try:
            words = maxtext_overrides(resolve(model, train, layout, HARDWARE, dtype=dtype))
        except Unexpressible:
            continue
        emitted |= {w.split("=")[0] for w in words}
    assert emitted and emitted <= keys, emitted - keys
    assert {"ici_pipeline_parallelism", "num_pipeline_repeats", "remat_policy"} <= emitted


def test_the_command_line_reads_and_writes_maxtext(capsys):
    argv = ["predict", "--from", "maxtext", "MaxText/configs/base.yml", *LLAMA2_70B,
            "--hardware", HARDWARE, "--json"]
    assert main(argv) == 0
    imported = __import__("json").loads(capsys.readouterr().out)
    assert main(["predict", "--model", "llama2-70b", "--layout", LLAMA2_70B_LAYOUT,
                 "--global-batch", "64", "--microbatch", "8", "--remat", "full",
                 "--attention", "flash", "--dtype", "bfloat16", "--hardware", HARDWARE,
                 "--stack", "maxtext", "--json"]) == 0
    flags = __import__("json").loads(capsys.readouterr().out)
    assert imported.pop("imported")["framework"] == "MaxText"
    imported.pop("model"), flags.pop("model")
    assert imported == flags
    assert main([*argv[:-1], "--emit", "maxtext"]) == 0
    command = capsys.readouterr().out.strip()
    assert command.startswith("python3 -m MaxText.train MaxText/configs/base.yml ")
    assert main(["predict", "--from", "maxtext", command, "--hardware", HARDWARE]) == 0
    assert main(["predict", "--from", "maxtext", "x.yml", "--hardware", HARDWARE]) == 2
    assert "no MaxText config at x.yml" in capsys.readouterr().err


@pytest.mark.parametrize("shape", [{"head_dim": 256}, {"tied_embeddings": True},
                                   {"sliding_window": 1024}])
def test_the_shapes_maxtext_names_round_trip(shape):
    """head_dim beside base_emb_dim / heads (Gemma's configs), logits_via_embedding and
    attention_type=local_sliding with sliding_window_size are read into the model, and
    written back."""
    model = model_preset("llama2-7b").replace(name="m", **shape)
    train = TrainConfig(global_batch=64, remat="full")
    layout = Layout.parse("fsdp=4,tensor=2")
    command = to_maxtext(model, train, layout, HARDWARE)
    run = from_maxtext(command, name="m")
    assert run.model.replace(dtype=model.dtype) == model and run.approximated == ()
    assert run.predict(HARDWARE).to_json() == parex.predict(
        model, train, layout, HARDWARE, stack="maxtext").to_json()


def test_maxtext_cannot_express_parallel_blocks():
    with pytest.raises(Unexpressible, match="parallel attention and MLP blocks"):
        to_maxtext(model_preset("tiny").replace(parallel_block=True), TrainConfig(),
                   Layout.parse("data=8"), HARDWARE)
