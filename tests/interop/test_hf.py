"""Hugging Face config.json -> ModelConfig: a published Llama config is the matching preset."""

from pathlib import Path

import pytest

import parex
from parex import Layout, TrainConfig, model_preset
from parex.errors import InputError
from parex.interop import Unexpressible, from_hf_config, to_hf_config

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("file, preset, layout", [
    ("llama3-8b.config.json", "llama3-8b", "data=8,tensor=4,zero=1"),
    ("llama2-70b.config.json", "llama2-70b", "data=4,tensor=8,stage=4,microbatches=16"),
])
def test_a_llama_config_with_gqa_predicts_as_its_preset(file, preset, layout):
    """Every shape key of the published config.json (GQA's 8 key/value heads, SwiGLU's
    intermediate size, the vocabulary, the context) is the preset's, so the predictions are
    the same record; the config's name is the only difference."""
    run = from_hf_config(DATA / file)
    assert run.model.kv_heads == 8 and run.model.family == "llama"
    assert run.model.replace(name=preset) == model_preset(preset)
    train = TrainConfig(global_batch=256)
    expected = parex.predict(model_preset(preset), train, Layout.parse(layout), "h100-sxm")
    got = parex.predict(run.model.replace(name=preset), train, Layout.parse(layout), "h100-sxm")
    assert got.to_json() == expected.to_json()
    assert run.model.n_params == model_preset(preset).n_params


def test_keys_that_do_not_change_the_step_are_listed_as_ignored():
    run = from_hf_config(DATA / "llama3-8b.config.json")
    assert "rope_theta (does not change the step)" in run.ignored
    assert "torch_dtype (does not change the step)" in run.ignored
    assert run.assumed == () and run.approximated == ()
    assert run.layout is None
    with pytest.raises(InputError, match="names a model, not a layout"):
        run.predict("h100-sxm")


def test_a_config_written_from_a_preset_reads_back_as_the_preset():
    for name in ("llama2-70b", "llama3-8b", "gpt2-small", "mixtral-8x7b"):
        model = model_preset(name)
        assert from_hf_config(to_hf_config(model), name=name).model == model


@pytest.mark.parametrize("change, words", [
    ({"model_type": "t5"}, ["model_type 't5'", "parex reads llama"]),
    ({"hidden_act": "gelu"}, ["hidden_act 'gelu'", "give a silu model"]),
    ({"model_type": "qwen2", "use_sliding_window": True, "sliding_window": 4096,
      "max_window_layers": 28, "max_position_embeddings": 32768},
     ["cannot express a sliding window on only some layers", "max_window_layers 0"]),
    ({"head_dim": 0}, ["head_dim: 0", "at least 1"]),
    ({"num_hidden_layers": 0}, ["num_hidden_layers", "at least 1"]),
])
def test_what_parex_cannot_read_is_one_line(change, words):
    config = to_hf_config(model_preset("llama3-8b")) | change
    with pytest.raises(InputError) as err:
        from_hf_config(config)
    assert "\n" not in str(err.value)
    for word in words:
        assert word in str(err.value)
    assert isinstance(err.value, Unexpressible) == ("cannot express" in str(err.value))


# The shapes configurations name (public config.json values): Gemma 7B's heads of 256 beside
# hidden 3072 / 16 heads = 192 and its tied table (GemmaConfig's default), Mistral 7B v0.1's
# 4096-position window, GPT-J 6B's parallel blocks.
GEMMA_7B = {"model_type": "gemma", "hidden_size": 3072, "num_hidden_layers": 28,
            "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256,
            "intermediate_size": 24576, "vocab_size": 256000, "max_position_embeddings": 8192,
            "hidden_act": "gelu"}
MISTRAL_7B = {"model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
              "vocab_size": 32000, "max_position_embeddings": 32768, "sliding_window": 4096,
              "hidden_act": "silu", "tie_word_embeddings": False}
GPTJ_6B = {"model_type": "gptj", "n_embd": 4096, "n_layer": 28, "n_head": 16, "rotary_dim": 64,
           "vocab_size": 50400, "n_positions": 2048, "activation_function": "gelu_new",
           "tie_word_embeddings": False}


def test_the_shapes_configurations_name_are_read_into_the_model():
    gemma = from_hf_config(GEMMA_7B, name="gemma-7b")
    assert (gemma.model.head_dim, gemma.model.tied_embeddings) == (256, True)
    assert any("GeGLU" in note for note in gemma.approximated)
    # Gemma 7B's published count, 8.54B (Gemma Team 2024, Table 2: 7.75B non-embedding
    # + 786M embedding); parex's RMSNorm has the same D scale per norm
    assert gemma.model.n_params == pytest.approx(8.54e9, rel=2e-3)
    assert from_hf_config(MISTRAL_7B).model.sliding_window == 4096
    gptj = from_hf_config(GPTJ_6B).model
    assert gptj.parallel_block and gptj.family == "gpt" and not gptj.tied_embeddings
    tied = to_hf_config(model_preset("gpt2-small"))
    tied.pop("tie_word_embeddings")  # GPT-2's default: tied
    assert from_hf_config(tied).model.tied_embeddings


@pytest.mark.parametrize("config", [GEMMA_7B, MISTRAL_7B, GPTJ_6B])
def test_the_shapes_round_trip_through_export(config):
    model = from_hf_config(config, name="m").model
    assert from_hf_config(to_hf_config(model), name="m").model == model


@pytest.mark.parametrize("changes, words", [
    ({"parallel_block": True, "family": "llama"}, ["llama-family model with parallel blocks"]),
    ({"sliding_window": 64}, ["a sliding window in a GPT model"]),
    ({"head_dim": 32}, ["GPT head width other than n_embd / n_head"]),
])
def test_shapes_a_config_class_cannot_hold_are_refused_on_export(changes, words):
    model = model_preset("tiny").replace(**changes)
    with pytest.raises(Unexpressible) as err:
        to_hf_config(model)
    assert "\n" not in str(err.value) and all(w in str(err.value) for w in words)
