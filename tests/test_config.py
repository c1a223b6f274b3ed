"""Model presets: every one loads, and the parameter count equals the real pytree's size."""

import jax
import numpy as np
import pytest

from parex.model import transformer as gpt
from parex.config import ModelConfig, model_preset, preset_names

BUILDABLE = ["tiny", "small", "tiny-llama"]


@pytest.mark.parametrize("name", BUILDABLE)
def test_parameter_count_equals_pytree(name):
    cfg = model_preset(name)
    params = gpt.init_params(cfg, jax.random.key(0))
    assert sum(x.size for x in jax.tree.leaves(params)) == cfg.n_params


@pytest.mark.parametrize("name", preset_names())
def test_parameter_count_equals_table_for_every_preset(name):
    """Large presets cannot be built here; their shape table still must sum to n_params."""
    cfg = model_preset(name)
    table = gpt.param_shapes(cfg)
    assert sum(int(np.prod(s.shape)) for s in jax.tree.leaves(table)) == cfg.n_params


@pytest.mark.parametrize("name, billions", [
    ("gpt2-small", 0.124), ("gpt2-medium", 0.355), ("gpt2-large", 0.774), ("gpt2-xl", 1.558),
    ("gpt3-175b", 175), ("llama2-7b", 6.74), ("llama2-13b", 13.0), ("llama2-70b", 69.0),
    ("llama-30b", 32.5), ("llama3-8b", 8.03), ("llama3-70b", 70.6), ("llama3-405b", 405.9),
    ("megatron-145.6b", 145.6), ("megatron-1008b", 1008)])
def test_published_sizes(name, billions):
    """Within 3% of the published count. GPT-2 and the GPT-3/Megatron models tie the unembedding to
    the token embedding; parex unties it, so one V·D matrix is taken off for them."""
    cfg = model_preset(name)
    tied_extra = cfg.vocab * cfg.hidden if cfg.family == "gpt" else 0
    assert (cfg.n_params - tied_extra) / 1e9 == pytest.approx(billions, rel=0.03)


def test_presets_are_small_enough_where_promised():
    assert 0.5e6 < model_preset("tiny").n_params < 1.5e6
    assert 10e6 < model_preset("small").n_params < 20e6


def test_unknown_preset_lists_known_ones():
    with pytest.raises(ValueError, match="unknown model preset 'gpt5'.*tiny"):
        model_preset("gpt5")


def test_defaults_fill_derived_dims():
    cfg = ModelConfig(hidden=64, heads=4)
    assert (cfg.kv_heads, cfg.ffn, cfg.head_dim) == (4, 256, 16)


def test_a_mistyped_preset_gets_the_nearest_one():
    with pytest.raises(ValueError, match="unknown model preset 'llama2_13b'; did you mean "
                                         "'llama2-13b'"):
        model_preset("llama2_13b")


SHAPES = [{"head_dim": 32}, {"parallel_block": True}, {"tied_embeddings": True},
          {"sliding_window": 24}, {"head_dim": 8, "parallel_block": True, "tied_embeddings": True}]


@pytest.mark.parametrize("base", ["tiny", "tiny-llama", "tiny-moe"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: ",".join(s))
def test_parameter_count_equals_pytree_for_the_shapes_configurations_name(base, shape):
    cfg = model_preset(base).replace(**shape)
    table = gpt.param_shapes(cfg)
    assert sum(int(np.prod(s.shape)) for s in jax.tree.leaves(table)) == cfg.n_params


def test_a_derived_head_width_follows_hidden_and_heads_but_a_named_one_stays():
    tiny = model_preset("tiny")  # D = 128, H = 8: Dh = 16
    assert tiny.replace(hidden=256).head_dim == 32 and tiny.replace(heads=4).head_dim == 32
    gemma_like = tiny.replace(head_dim=64)
    assert gemma_like.replace(hidden=256).head_dim == 64


def test_a_window_sees_at_least_its_own_position():
    from parex.errors import InputError

    with pytest.raises(InputError, match="sliding_window=0"):
        model_preset("tiny").replace(sliding_window=0)
