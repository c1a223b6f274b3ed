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
    ({"head_dim": 256}, ["cannot express head_dim 256", "head_dim = hidden / heads"]),
    ({"sliding_window": 4096, "max_position_embeddings": 32768},
     ["sliding-window attention", "set sliding_window null"]),
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


def test_tied_embeddings_are_stated_as_approximated():
    config = to_hf_config(model_preset("gpt2-small"))
    config.pop("tie_word_embeddings")  # GPT-2's default: tied
    run = from_hf_config(config)
    assert any("tie_word_embeddings" in note for note in run.approximated)
