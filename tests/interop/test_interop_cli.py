"""`parex predict --from megatron`, `--model config.json`, `--emit megatron` and `parex plan
--emit megatron` on the command line: the same numbers as parex's own flags, errors in one
line with exit status 2."""

import json
from pathlib import Path

import pytest

from parex import TrainConfig, model_preset
from parex.cli.main import main
from parex.interop import from_megatron
from parex.plan import plan
from parex.stacks import overlap_flags

from test_megatron import GPT3_LAUNCH, GPT3_LAYOUT

DATA = Path(__file__).parent / "data"
PARSED_FLAGS = ["--hardware", "h100-sxm", "--json"]


def _json(capsys, argv) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_predict_from_megatron_prints_the_numbers_of_the_equivalent_flags(capsys):
    """The command-line form of issue 45's first Done-when: one JSON record, the model's name
    and the import's notes aside."""
    imported = _json(capsys, ["predict", "--from", "megatron", GPT3_LAUNCH, *PARSED_FLAGS])
    flags = _json(capsys, ["predict", "--model", "gpt3-175b", "--layout", GPT3_LAYOUT,
                           "--global-batch", "512", "--remat", "selective", "--attention",
                           "flash", "--dtype", "bfloat16", "--stack", "megatron-core",
                           "--recipe", "mixed-fp32-grads", *PARSED_FLAGS])
    notes = imported.pop("imported")
    assert notes["framework"] == "Megatron-LM" and "--lr (optimizer, schedule and numerics)" \
        in notes["ignored"]
    assert imported.pop("model") == "megatron" and flags.pop("model") == "gpt3-175b"
    assert imported == flags


def test_predict_from_a_file_of_arguments_with_the_world_size_from_nodes(capsys, tmp_path):
    """@FILE holds the script's options; without a torchrun prefix --nodes gives the world."""
    options = GPT3_LAUNCH.split("pretrain_gpt.py", 1)[1]
    path = tmp_path / "args.txt"
    path.write_text(options)
    from_file = _json(capsys, ["predict", "--from", "megatron", f"@{path}", "--nodes", "16",
                               *PARSED_FLAGS])
    inline = _json(capsys, ["predict", "--from", "megatron", GPT3_LAUNCH, *PARSED_FLAGS])
    assert from_file == inline


def test_the_text_report_says_what_the_import_ignored_and_assumed(capsys):
    assert main(["predict", "--from", "megatron", GPT3_LAUNCH, "--hardware", "h100-sxm"]) == 0
    out = capsys.readouterr().out
    assert "imported from Megatron-LM (core_v0.15.0 option names and defaults)" in out
    assert "ignored: --vocab-file (data and tokenizer)" in out
    assert "(defaults: recipe, convention)" in out  # the import set batch, remat and dtype


def test_model_given_as_a_config_json_predicts_as_the_preset(capsys):
    flags = ["--layout", "data=8,tensor=4,zero=1", "--global-batch", "256", *PARSED_FLAGS]
    from_file = _json(capsys, ["predict", "--model", str(DATA / "llama3-8b.config.json"),
                               *flags])
    from_preset = _json(capsys, ["predict", "--model", "llama3-8b", *flags])
    assert from_file.pop("model") == "data" and from_preset.pop("model") == "llama3-8b"
    assert from_file == from_preset


def test_predict_emit_megatron_round_trips_to_the_same_prediction(capsys):
    flags = ["--model", "llama2-7b", "--layout", "data=2,tensor=4,stage=2,virtual=2,sp=on,"
             "zero=1,microbatches=8", "--global-batch", "64", "--remat", "full",
             "--hardware", "h100-sxm", "--stack", "megatron-core", "--overlap",
             "tp-comm,grad-reduce,param-gather,tp-backward"]
    assert main(["predict", *flags, "--emit", "megatron"]) == 0
    command = capsys.readouterr().out.strip()
    assert command.startswith("torchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py ")
    assert "--num-virtual-stages-per-pipeline-rank 2" in command
    assert "--recompute-granularity full --recompute-method uniform" in command
    assert "--tp-comm-overlap --overlap-grad-reduce --overlap-param-gather" in command
    back = _json(capsys, ["predict", "--from", "megatron", command, *PARSED_FLAGS])
    direct = _json(capsys, ["predict", *flags, "--json"])
    back.pop("imported")
    assert back.pop("model") == "megatron" and direct.pop("model") == "llama2-7b"
    assert back == direct


def test_plan_emit_megatron_round_trips_to_the_plans_top_row(capsys):
    """Issue 45's Done-when: the options `parex plan --emit megatron` prints import as the
    plan's row they name: its Setting (which fields came from defaults aside) and prediction."""
    argv = ["plan", "--model", "llama2-7b", "--hardware", "h100-sxm", "--nodes", "1",
            "--global-batch", "64"]
    assert main([*argv, "--emit", "megatron"]) == 0
    text = capsys.readouterr().out
    comment = text.splitlines()[0]
    assert comment.startswith("# parex plan's row ")
    result = plan(model_preset("llama2-7b"), TrainConfig(global_batch=64), "h100-sxm", 1)
    row = result.top[int(comment.split("row ")[1].split(":")[0]) - 1]
    assert comment.endswith(result.flags(row))
    run = from_megatron(text, name=result.model.name)
    # the plan's row overlaps the gradient reduction (parex's own program): the command says
    # --overlap-grad-reduce, and runs it on Megatron-Core's stack (parex.stacks)
    assert "--overlap-grad-reduce" in text.split()
    expected = result.setting_of(row).replace(
        stack="megatron-core",
        overlaps=tuple(sorted(overlap_flags("megatron-core",
                                          ("tp-backward", "grad-reduce")).items())))
    assert run.setting(result.cluster).replace(defaulted=()) == expected.replace(defaulted=())


@pytest.mark.parametrize("argv, words", [
    (["predict", "--from", "megatron", "--num-layers 2 --tensor-model-parallel-sise 2",
      "--nodes", "1"], ["--tensor-model-parallel-sise: not a Megatron-LM core_v0.15.0 option",
                        "did you mean '--tensor-model-parallel-size'"]),
    (["predict", "--from", "megatron", "--num-layers 2 --bf16 --fp16", "--nodes", "1"],
     ["--bf16 and --fp16 contradict each other"]),
    (["predict", "--from", "megatron", GPT3_LAUNCH, "--global-batch", "64"],
     ["--from megatron sets --global-batch", "drop --global-batch"]),
    (["predict", "--from", "megatron", "--num-layers 2"], ["the world size"]),
    (["predict", "--from", "maxtxt", "x.yml"], ["unknown --from framework 'maxtxt'"]),
    (["predict", "--model", "llama2-7b", "--layout", "data=2,tensor=2x2x2", "--hardware",
      "h100-sxm", "--emit", "megatron"],
     ["Megatron-LM cannot express a 3D tensor layout", "the nearest it can: tensor=8"]),
    (["predict", "--model", "missing/config.json", "--hardware", "h100-sxm"],
     ["no config.json at missing/config.json"]),
])
def test_bad_options_exit_2_with_one_line(capsys, argv, words):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    for word in words:
        assert word in err


@pytest.mark.parametrize("framework", ["torchtitan", "maxtext"])
def test_plan_emit_round_trips_for_torchtitan_and_maxtext(capsys, framework):
    """The plan's best row each framework can express (remat full: MaxText has no policy
    without recompute) reads back as that row's Setting."""
    from parex.interop import from_maxtext, from_torchtitan

    # each framework's own memory recipe: torchtitan's FSDP2 keeps float32 shards and reduces
    # in float32 (fsdp2), MaxText's bfloat16 is the mixed recipe
    recipe = {"torchtitan": "fsdp2", "maxtext": "mixed"}[framework]
    argv = ["plan", "--model", "llama3-8b", "--hardware", "h100-sxm", "--nodes", "1",
            "--global-batch", "64", "--remat", "full", "--recipe", recipe]
    assert main([*argv, "--emit", framework]) == 0
    text = capsys.readouterr().out
    comment = text.splitlines()[0]
    result = plan(model_preset("llama3-8b"), TrainConfig(global_batch=64), "h100-sxm", 1,
                  remats=("full",), recipe=recipe)
    row = result.top[int(comment.split("row ")[1].split(":")[0]) - 1]
    assert comment.endswith(result.flags(row))
    reader = {"torchtitan": from_torchtitan, "maxtext": from_maxtext}[framework]
    run = reader(text, name=result.model.name)
    expected = result.setting_of(row)
    # it runs on the framework's stack, whose overlaps (the gradient reduction behind the
    # backward) are the plan's parex program's
    assert run.stack == framework and run.overlaps == expected.overlap_names
    expected = expected.replace(stack=framework, overlaps=tuple(sorted(
        overlap_flags(framework, None).items())))
    assert run.setting(result.cluster).replace(defaulted=()) == expected.replace(defaulted=())
