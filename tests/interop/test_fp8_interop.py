"""The frameworks' FP8 settings as parex's precision recipes, both ways (parex.interop.fp8):
small configurations in each framework's own format, read, predicted and written back."""

import tomllib

import pytest

from parex import Layout, TrainConfig, model_preset
from parex.errors import InputError
from parex.interop import Unexpressible, from_maxtext, from_megatron, from_torchtitan
from parex.interop.maxtext import to_maxtext
from parex.interop.megatron import to_megatron
from parex.interop.torchtitan import to_torchtitan

# a Llama 3 8B pretraining launch as NeMo's FP8 recipes write it for Megatron-LM
MEGATRON = ("torchrun --nnodes 1 --nproc-per-node 8 pretrain_gpt.py --num-layers 32 "
            "--hidden-size 4096 --num-attention-heads 32 --group-query-attention "
            "--num-query-groups 8 --ffn-hidden-size 14336 --swiglu --normalization RMSNorm "
            "--position-embedding-type rope --disable-bias-linear --seq-length 8192 "
            "--max-position-embeddings 8192 --padded-vocab-size 128256 "
            "--tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer "
            "--micro-batch-size 1 --global-batch-size 32 --bf16 --attention-backend flash ")

TORCHTITAN = """
[model]
name = "llama3"
flavor = "8B"
converters = ["quantize.linear.float8"]
[training]
local_batch_size = 2
global_batch_size = 16
seq_len = 8192
mixed_precision_param = "bfloat16"
[parallelism]
data_parallel_shard_degree = 8
[activation_checkpoint]
mode = "full"
[quantize.linear.float8]
enable_fsdp_float8_all_gather = true
precompute_float8_dynamic_scale_for_fsdp = true
"""

MAXTEXT = ["model_name=llama3-8b", "per_device_batch_size=2", "ici_fsdp_parallelism=8",
           "dtype=bfloat16", "remat_policy=full", "attention=flash"]


@pytest.mark.parametrize("options, name", [
    ("--fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 1024 "
     "--fp8-amax-compute-algo max --fp8-param-gather", "fp8-delayed"),
    ("--fp8-format hybrid --fp8-recipe tensorwise --fp8-param-gather", "fp8-current"),
    ("--fp8-format e4m3 --fp8-recipe blockwise", "fp8-blockwise"),
    ("--fp8-format e4m3 --fp8-recipe mxfp8", "mxfp8"),
    ("", None)])
def test_megatron_fp8_options_are_a_recipe_and_come_back(options, name):
    run = from_megatron(MEGATRON + options)
    assert run.train.precision == name and not run.approximated
    chip = "b200" if name == "mxfp8" else "h100-sxm"  # MX block scales: Blackwell's
    if name:  # FP8 priced: faster than the same run in bf16
        bf16 = from_megatron(MEGATRON).predict(chip).step_time_s
        assert run.predict(chip).step_time_s["total"] < bf16["total"]
    written = to_megatron(run.model, run.train, run.layout, chip, dtype="bfloat16")
    assert written.endswith(options.strip()) or options.strip() in written
    assert from_megatron(written).train.precision == name


def test_megatrons_own_delayed_defaults_are_priced_as_fp8_delayed_and_said():
    run = from_megatron(MEGATRON + "--fp8-format hybrid")  # delayed, history 1, most_recent
    assert run.train.precision == "fp8-delayed"
    notes = " ".join(run.approximated)
    assert "--fp8-amax-history-len 1 --fp8-amax-compute-algo most_recent" in notes
    assert "does not give --fp8-param-gather" in notes


@pytest.mark.parametrize("options, words", [
    ("--fp8-format hybrid --fp8-recipe mxfp8", "--fp8-format e4m3 --fp8-recipe mxfp8"),
    ("--fp8-format e4m3 --fp8-recipe delayed", "--fp8-format hybrid --fp8-recipe delayed"),
    ("--fp8-format hybrid --fp8-recipe blockwise", "--fp8-format e4m3 --fp8-recipe blockwise")])
def test_megatron_fp8_parex_cannot_express_is_one_line_naming_the_nearest(options, words):
    with pytest.raises(InputError, match="not one of parex's FP8 recipes") as error:
        from_megatron(MEGATRON + options)
    assert words in str(error.value) and "\n" not in str(error.value)


def test_megatron_fp8_needs_bf16_and_rowwise_is_refused_on_export():
    with pytest.raises(InputError, match="without --bf16"):
        from_megatron(MEGATRON.replace("--bf16 ", "") + "--fp8-format hybrid")
    with pytest.raises(Unexpressible, match="rowwise"):
        to_megatron(model_preset("llama3-8b"), TrainConfig(precision="fp8-rowwise"),
                    Layout.parse("data=8"), "h100-sxm")


@pytest.mark.parametrize("recipe, name", [(None, "fp8-current"), ("tensorwise", "fp8-current"),
                                          ("rowwise", "fp8-rowwise")])
def test_torchtitan_float8_is_a_recipe_and_comes_back(recipe, name):
    text = TORCHTITAN + (f'recipe_name = "{recipe}"\n' if recipe else "")
    if name == "fp8-rowwise":  # rowwise gathers bf16: torchao refuses the FP8 all-gather
        text = text.replace("enable_fsdp_float8_all_gather = true\n"
                            "precompute_float8_dynamic_scale_for_fsdp = true\n", "")
    run = from_torchtitan(text)
    assert run.train.precision == name and not run.approximated
    written = tomllib.loads(to_torchtitan(run.model, run.train, run.layout, "h100-sxm"))
    assert written["model"]["converters"] == ["quantize.linear.float8"]
    assert from_torchtitan(written).train.precision == name


def test_torchtitan_without_the_fp8_all_gather_is_said():
    run = from_torchtitan(TORCHTITAN.replace("enable_fsdp_float8_all_gather = true",
                                             "enable_fsdp_float8_all_gather = false"))
    assert "enable_fsdp_float8_all_gather is false" in " ".join(run.approximated)
    with pytest.raises(InputError, match="not grouped-GEMM converters"):
        from_torchtitan(TORCHTITAN.replace('["quantize.linear.float8"]',
                                           '["quantize.grouped_mm.float8"]'))
    with pytest.raises(Unexpressible, match="fp8-current"):
        to_torchtitan(model_preset("llama3-8b"), TrainConfig(precision="fp8-delayed"),
                      Layout.parse("fsdp=8"), "h100-sxm")


@pytest.mark.parametrize("quantization, note", [("fp8", False), ("nanoo_fp8", True)])
def test_maxtext_fp8_quantization_is_fp8_delayed_and_comes_back(quantization, note):
    run = from_maxtext(overrides=MAXTEXT + [f"quantization={quantization}"], world_size=8)
    assert run.train.precision == "fp8-delayed"
    assert bool(run.approximated and "FNUZ" in " ".join(run.approximated)) == note
    written = to_maxtext(run.model, run.train, run.layout, "h100-sxm")
    assert "quantization=fp8" in written.split()
    with pytest.raises(InputError, match="quantization 'int8'"):
        from_maxtext(overrides=MAXTEXT + ["quantization=int8"], world_size=8)
    with pytest.raises(Unexpressible, match="fp8-delayed"):
        to_maxtext(run.model, run.train.replace(precision="fp8-rowwise"), run.layout,
                   "h100-sxm")


MX = """
[model]
name = "llama3"
flavor = "8B"
converters = ["quantize.linear.mx"]
[training]
local_batch_size = 2
global_batch_size = 16
seq_len = 8192
[parallelism]
data_parallel_shard_degree = 8
[activation_checkpoint]
mode = "full"
[quantize.linear.mx]
recipe_name = "mxfp8_cublas"
"""


def test_torchtitan_mx_linears_are_mxfp8_on_blackwell_and_come_back():
    """torchao's MX linears (torchtitan's quantize.linear.mx, its default recipe mxfp8_cublas)
    are mxfp8: faster than bf16 on a B200, refused on an H100 in one line, written back."""
    run = from_torchtitan(MX)
    assert run.train.precision == "mxfp8" and not run.approximated
    bf16 = from_torchtitan(MX.replace('converters = ["quantize.linear.mx"]\n', "").replace(
        '[quantize.linear.mx]\nrecipe_name = "mxfp8_cublas"\n', ""))
    assert (run.predict("b200").step_time_s["total"]
            < bf16.predict("b200").step_time_s["total"])
    with pytest.raises(InputError, match="no microscaling"):
        run.predict("h100-sxm")
    written = tomllib.loads(to_torchtitan(run.model, run.train, run.layout, "b200"))
    assert written["model"]["converters"] == ["quantize.linear.mx"]
    assert written["quantize"]["linear"]["mx"] == {"recipe_name": "mxfp8_cublas"}
    assert from_torchtitan(written).train.precision == "mxfp8"


@pytest.mark.parametrize("edit, words", [
    (('recipe_name = "mxfp8_cublas"', 'recipe_name = "mxfp4_cutlass"'), "use \"mxfp8_cublas\""),
    (('["quantize.linear.mx"]', '["quantize.linear.mx", "quantize.linear.float8"]'),
     "keep one"),
    (('converters = ["quantize.linear.mx"]', 'converters = []'), "does nothing")])
def test_torchtitan_mx_it_cannot_price_is_one_line(edit, words):
    with pytest.raises(InputError, match=words.replace("(", r"\(")) as error:
        from_torchtitan(MX.replace(*edit))
    assert "\n" not in str(error.value)


def test_torchtitan_mx_filtered_projections_are_said():
    run = from_torchtitan(MX + 'filter_fqns = ["output", "attention.wq"]\n')
    assert run.train.precision == "mxfp8"
    assert "filter_fqns ['attention.wq']" in " ".join(run.approximated)
