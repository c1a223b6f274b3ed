"""torchtitan job TOML <-> parex: the same run predicts the same, both ways."""

import random
import re
import tomllib

import pytest

import parex
from parex import Layout, TrainConfig, model_preset
from parex.cli.main import main
from parex.errors import InputError
from parex.interop import Unexpressible, from_torchtitan, to_torchtitan
from parex.interop.result import option_list
from parex.interop.torchtitan import VERSION, known_tables, torchtitan_split, torchtitan_toml
from parex.setting import resolve

HARDWARE = "h100-sxm"

# Llama 3 70B on 256 GPUs, as torchtitan runs it: 2 replicas of 16-way FSDP, TP 8 (sequence
# parallel), PP ... here 1; then a pipelined variant below
LLAMA3_70B = """
[job]
description = "Llama 3 70B training"
[model]
name = "llama3"
flavor = "70B"
[optimizer]
name = "AdamW"
lr = 1.5e-4
[training]
local_batch_size = 4
global_batch_size = 128
seq_len = 8192
steps = 1000
mixed_precision_param = "bfloat16"
[parallelism]
data_parallel_replicate_degree = 2
data_parallel_shard_degree = 16
tensor_parallel_degree = 8
pipeline_parallel_degree = 1
context_parallel_degree = 1
[activation_checkpoint]
mode = "full"
"""
# the equivalent parex values: 32 data-parallel ranks x 4 sequences = 128, no accumulation
LLAMA3_70B_LAYOUT = "data=2,fsdp=16,tensor=8,sp=on"
LLAMA3_70B_TRAIN = TrainConfig(global_batch=128, microbatch=4, remat="full", attention="flash")

PIPELINED = """
[model]
name = "llama3"
flavor = "8B"
[training]
local_batch_size = 16
seq_len = 8192
[parallelism]
data_parallel_shard_degree = 4
tensor_parallel_degree = 2
pipeline_parallel_degree = 4
pipeline_parallel_schedule = "Interleaved1F1B"
pipeline_parallel_layers_per_stage = 4
pipeline_parallel_first_stage_less_layers = 0
pipeline_parallel_last_stage_less_layers = 0
pipeline_parallel_microbatch_size = 2
[activation_checkpoint]
mode = "selective"
selective_ac_option = "op"
"""


def test_a_torchtitan_job_predicts_as_the_equivalent_parex_layout():
    """Issue 45's Done-when for torchtitan: the 70B job imported gives the very Setting and
    Prediction record of the equivalent parex values."""
    run = from_torchtitan(LLAMA3_70B, name="llama3-70b")
    model, layout = model_preset("llama3-70b"), Layout.parse(LLAMA3_70B_LAYOUT)
    assert run.model == model.replace(dtype="bfloat16")
    # on torchtitan's stack (parex.stacks): FSDP2's overlaps, async TP off unless asked, and
    # its recipe, read off the job (float32 state, bfloat16 mixed_precision_param): fsdp2
    assert run.recipe == "fsdp2"
    assert run.setting(HARDWARE) == resolve(model, LLAMA3_70B_TRAIN, layout, HARDWARE,
                                            dtype="bfloat16", stack="torchtitan",
                                            recipe="fsdp2")
    expected = parex.predict(model, LLAMA3_70B_TRAIN, layout, HARDWARE, dtype="bfloat16",
                             stack="torchtitan", recipe="fsdp2")
    assert run.predict(HARDWARE).to_json() == expected.to_json()
    assert "optimizer.lr" in run.ignored and run.approximated == ()


def test_a_pipelined_job_reads_its_virtual_stages_and_microbatches():
    """32 layers in stages of 4 on 4 ranks: 8 stages, 2 per rank (Interleaved1F1B); each rank's
    16 sequences in microbatches of 2: m = 8, world 4 x 2 x 4 = 32 devices."""
    run = from_torchtitan(PIPELINED)
    assert run.layout == Layout.parse("fsdp=4,tensor=2,sp=on,stage=4,schedule=interleaved,"
                                      "virtual=2,microbatches=8")
    assert run.train.global_batch == 64 and run.setting(HARDWARE).microbatch == 2
    assert any("per-op selective" in note for note in run.approximated)


def test_torchtitans_default_split_counts_embedding_and_output_as_layers():
    """generate_llm_fqn_per_model_part's rule: 32 layers + 1 + 1 over 4 stages is 9, 9, 8, 8,
    less one layer on the first and the last: 8, 9, 8, 7, an uneven parex partition."""
    assert torchtitan_split(32, 4, 1, 1) == (8, 9, 8, 7)
    assert torchtitan_split(32, 4, 0, 0) == (8, 8, 8, 8)
    job = PIPELINED.replace("pipeline_parallel_first_stage_less_layers = 0\n", "").replace(
        "pipeline_parallel_last_stage_less_layers = 0\n", "").replace(
        "pipeline_parallel_layers_per_stage = 4\n", "")
    run = from_torchtitan(job)
    assert run.layout.virtual_stages == 2  # a multi-stage schedule's default
    assert run.layout.layers_per_stage == torchtitan_split(32, 8, 1, 1) == (4, 5, 4, 4, 4, 4,
                                                                            4, 3)
    assert run.predict(HARDWARE).step_time_s["total"] > 0


def _random_run(rng: random.Random):
    """A llama3 flavor and a layout torchtitan can express."""
    flavor = rng.choice(["llama3-8b", "llama3-70b"])
    model = model_preset(flavor)
    tensor = rng.choice([1, 2, 4, 8])
    stage = rng.choice([1, 1, 2, 4])
    schedule = None if stage == 1 else rng.choice(["1f1b", "gpipe", "interleaved", "bfs",
                                                   "zbv"])
    virtual = 2 if schedule in ("interleaved", "bfs", "zbv") else 1
    if model.layers % (stage * virtual):
        stage, schedule, virtual = 1, None, 1
    seq = rng.choice([1, 1, 2])
    data, fsdp = rng.choice([1, 2]), rng.choice([2, 4, 8])
    layout = Layout(data=data, fsdp=fsdp, tensor=tensor, sp=tensor > 1, seq=seq,
                    cp="ring" if seq > 1 else "none", stage=stage, schedule=schedule,
                    virtual_stages=virtual)
    b = rng.choice([1, 2])
    m = rng.choice([1, 2, 4]) * (stage * virtual if stage > 1 else 1)
    train = TrainConfig(global_batch=b * m * layout.data_parallel,
                        microbatch=b if m == 1 else None,
                        remat=rng.choice(["none", "selective", "full"]), attention="flash")
    return model, train, layout.replace(microbatches=m)


def test_export_then_import_gives_the_same_setting_and_prediction_for_random_layouts():
    rng = random.Random(45)
    compared = 0
    for _ in range(60):
        model, train, layout = _random_run(rng)
        stack, overlaps = "torchtitan", rng.choice([None, "grad-reduce,async-tp"])
        original = resolve(model, train, layout, HARDWARE, stack=stack, overlaps=overlaps)
        text = to_torchtitan(model, train, layout, HARDWARE, stack=stack, overlaps=overlaps)
        if overlaps and layout.tensor == 1:  # nothing for async TP to overlap: not written
            original = original.replace(overlaps=resolve(
                model, train, layout, HARDWARE, stack=stack).overlaps)
        run = from_torchtitan(text, name=model.name)
        assert run.setting(HARDWARE).replace(defaulted=()) == original.replace(defaulted=()), \
            text
        try:
            expected = parex.predict(model, train, layout, HARDWARE, stack=stack,
                                     overlaps=original.overlap_names)
        except parex.LayoutError as err:
            with pytest.raises(parex.LayoutError, match=re.escape(str(err)[:40])):
                run.predict(HARDWARE)
            continue
        assert run.predict(HARDWARE).to_json() == expected.to_json(), text
        compared += 1
    assert compared >= 50


@pytest.mark.parametrize("model, layout, nearest", [
    ("llama2-7b", "fsdp=8", "llama3 flavor 8B"),
    ("llama3-8b", "data=2,fsdp=4,zero=1", "fsdp=8"),
    ("llama3-8b", "fsdp=4,tensor=2", "sp=on"),
    ("llama3-8b", "fsdp=2,tensor=2x2x1,sp=off", "tensor=4"),
    ("llama3-8b", "fsdp=4,seq=2,cp=ulysses", "cp=ring"),
    ("llama3-8b", "fsdp=2,stage=4,schedule=interleaved,virtual=1,microbatches=8",
     "schedule=1f1b,virtual=1"),
    ("llama3-8b", "fsdp=2,stage=4,schedule=zbh1,microbatches=8", "schedule=1f1b"),
])
def test_what_torchtitan_cannot_express_is_refused_naming_the_nearest(model, layout, nearest):
    with pytest.raises(Unexpressible) as err:
        to_torchtitan(model_preset(model), TrainConfig(global_batch=64), Layout.parse(layout),
                      HARDWARE)
    assert str(err.value).startswith("torchtitan cannot express")
    assert f"the nearest it can: {nearest}" in str(err.value)


@pytest.mark.parametrize("change, words", [
    (("[training]", "[training]\nlocal_batchsize = 2"),
     ["training.local_batchsize: not a torchtitan v0.2.2 option",
      "did you mean 'training.local_batch_size'"]),
    (("[activation_checkpoint]", "[activation_checkpint]"), ["[activation_checkpint]"]),
    (('mode = "full"', 'mode = "selective"\nselective_ac_option = "2"'),
     ["every 2th layer", "use 'op'"]),
    (('flavor = "70B"', 'flavor = "7B"'), ["model.flavor '7B'", "use one of debugmodel"]),
    (("pipeline_parallel_degree = 1", 'pipeline_parallel_degree = 2\n'
      'pipeline_parallel_schedule = "InterleavedZeroBubble"'),
     ["'InterleavedZeroBubble': parex does not predict it", "Interleaved1F1B"]),
    (("global_batch_size = 128", "global_batch_size = 100"), ["global_batch_size 100"]),
])
def test_unknown_or_contradictory_keys_are_one_line_errors(change, words):
    with pytest.raises(InputError) as err:
        from_torchtitan(LLAMA3_70B.replace(*change))
    assert "\n" not in str(err.value)
    for word in words:
        assert word in str(err.value)


def test_emitted_keys_are_torchtitans_own():
    """Every table and key of an exported job is in torchtitan's JobConfig at the version the
    list names (read from torchtitan/config/job_config.py at that tag)."""
    listed = option_list("torchtitan")
    assert listed["version"] == VERSION and VERSION in listed["source"]
    tables = known_tables()
    rng = random.Random(3)
    emitted = set()
    for _ in range(20):
        model, train, layout = _random_run(rng)
        job = tomllib.loads(to_torchtitan(model, train, layout, HARDWARE))
        for table, keys in job.items():
            emitted |= {(table, key) for key in keys}
    assert all(key in tables[table] for table, key in emitted), emitted
    assert ("parallelism", "pipeline_parallel_layers_per_stage") in emitted


def test_the_command_line_reads_and_writes_torchtitan(capsys, tmp_path):
    path = tmp_path / "llama3_70b.toml"
    path.write_text(LLAMA3_70B)
    assert main(["predict", "--from", "torchtitan", str(path), "--hardware", HARDWARE,
                 "--json"]) == 0
    imported = __import__("json").loads(capsys.readouterr().out)
    assert main(["predict", "--model", "llama3-70b", "--layout", LLAMA3_70B_LAYOUT,
                 "--global-batch", "128", "--microbatch", "4", "--remat", "full",
                 "--attention", "flash", "--dtype", "bfloat16", "--hardware", HARDWARE,
                 "--stack", "torchtitan", "--json"]) == 0
    flags = __import__("json").loads(capsys.readouterr().out)
    assert imported.pop("imported")["framework"] == "torchtitan"
    imported.pop("model"), flags.pop("model")
    assert imported == flags
    assert main(["predict", "--from", "torchtitan", str(path), "--emit", "torchtitan",
                 "--hardware", HARDWARE]) == 0
    emitted = tomllib.loads(capsys.readouterr().out)
    assert emitted["parallelism"]["data_parallel_shard_degree"] == 16
    assert main(["predict", "--from", "torchtitan", str(tmp_path / "missing.toml")]) == 2
    assert "no torchtitan job file" in capsys.readouterr().err


def test_async_tensor_parallelism_imports_as_the_async_tp_overlap():
    run = from_torchtitan(LLAMA3_70B.replace("[parallelism]",
                                             "[parallelism]\nenable_async_tensor_parallel = true"),
                          name="llama3-70b")
    assert run.stack == "torchtitan" and "async-tp" in run.overlaps
    p = run.predict(HARDWARE)
    assert p.overlaps["tp-comm"]["exposed"] < p.overlaps["tp-comm"]["comm"]
    assert "enable_async_tensor_parallel = true" in torchtitan_toml(run.setting(HARDWARE))
