"""Hugging Face `config.json` <-> parex's ModelConfig: the model a checkpoint describes.

    run = from_hf_config("Meta-Llama-3-8B/config.json")   # an Imported with run.model
    parex.predict(run.model, train, layout, "h100-sxm")
    to_hf_config(parex.model_preset("llama2-70b"))      # the config.json's model keys, a dict

Llama-style models (model_type llama, mistral, qwen2 and mixtral's mixture of experts) become
parex's llama family (RMSNorm, RoPE, SwiGLU, grouped-query attention); GPT-2 its gpt family. Key
names and their defaults are those of transformers' configuration classes (LlamaConfig,
MistralConfig, MixtralConfig, Qwen2Config, GPT2Config) at VERSION. A config.json names a model,
not a run: the training dtype, batch and layout are the prediction's, and keys that do not
change the step (token ids, RoPE's base, norm epsilons, initialisation) are listed as ignored.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..config import ModelConfig, TrainConfig
from ..errors import InputError
from .result import Imported, refuse

FRAMEWORK = "Hugging Face"
VERSION = "transformers 4.46"
LLAMA_TYPES = ("llama", "mistral", "qwen2", "mixtral")
MODEL_TYPES = LLAMA_TYPES + ("gpt2",)

# keys that name the model's shape, by model type; the rest are read for what they say (tied
# weights, biases, activation, head width, sliding window) or ignored and listed
LLAMA_KEYS = {"hidden_size": "hidden", "num_hidden_layers": "layers",
              "num_attention_heads": "heads", "num_key_value_heads": "kv_heads",
              "intermediate_size": "ffn", "vocab_size": "vocab",
              "max_position_embeddings": "seq_len"}
GPT2_KEYS = {"n_embd": "hidden", "n_layer": "layers", "n_head": "heads", "n_inner": "ffn",
             "vocab_size": "vocab", "n_positions": "seq_len"}
# LlamaConfig's defaults, for a config.json that leaves a shape key out
LLAMA_DEFAULTS = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                  "intermediate_size": 11008, "vocab_size": 32000,
                  "max_position_embeddings": 2048}
GPT2_DEFAULTS = {"n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257,
                 "n_positions": 1024}
READ = {"model_type", "hidden_act", "activation_function", "tie_word_embeddings", "head_dim",
        "attention_bias", "mlp_bias", "sliding_window", "use_sliding_window",
        "num_local_experts", "num_experts_per_tok"}


def from_hf_config(source, name: str | None = None) -> Imported:
    """A config.json (a path, or its dict) as an Imported whose `model` is parex's
    ModelConfig; its train config is parex's defaults and it has no layout. `name` names the
    model in reports (default: the folder holding the file, else the model type)."""
    config, default_name = _load(source)
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES:
        raise InputError(f"config.json model_type {model_type!r}: parex reads "
                         f"{', '.join(MODEL_TYPES)}; give a decoder-only model of those kinds")
    name = name or default_name or model_type
    notes = {"ignored": [], "assumed": [], "approximated": []}
    if model_type == "gpt2":
        model = _gpt2(config, name, notes)
    else:
        model = _llama(config, model_type, name, notes)
    keys = set(LLAMA_KEYS if model_type != "gpt2" else GPT2_KEYS) | READ
    notes["ignored"] += [f"{key} (does not change the step)" for key in config
                         if key not in keys]
    return Imported(FRAMEWORK, VERSION, model, TrainConfig(), None,
                    ignored=tuple(notes["ignored"]), assumed=tuple(notes["assumed"]),
                    approximated=tuple(notes["approximated"]))


def _load(source) -> tuple[dict, str | None]:
    if isinstance(source, dict):
        return source, None
    path = Path(source)
    if not path.is_file():
        raise InputError(f"no config.json at {path}: give the path of a Hugging Face model's "
                         f"config.json")
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: not JSON ({err}); give a Hugging Face config.json") from None
    if not isinstance(config, dict):
        raise InputError(f"{path}: a config.json is one JSON object")
    parent = path.resolve().parent.name
    return config, parent or None


def _shape(config: dict, keys: dict, defaults: dict, notes) -> dict:
    """parex's dims from the config's keys, the class's defaults noted where left out."""
    dims = {}
    for key, field in keys.items():
        value = config.get(key)
        if value is None and key in defaults:
            value = defaults[key]
            notes["assumed"].append(f"{key} {value}")
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InputError(f"config.json {key}: {value!r} is not a whole number of at least 1")
        dims[field] = value
    return dims


def _llama(config: dict, model_type: str, name: str, notes) -> ModelConfig:
    dims = _shape(config, LLAMA_KEYS, LLAMA_DEFAULTS, notes)
    if "kv_heads" not in dims:
        notes["assumed"].append("num_key_value_heads = num_attention_heads (multi-head)")
    activation = config.get("hidden_act", "silu")
    if activation != "silu":
        raise InputError(f"config.json hidden_act {activation!r}: parex's llama family is "
                         f"SwiGLU (silu); give a silu model")
    _check_head_dim(config, dims)
    window = config.get("sliding_window")
    slides = window is not None and config.get("use_sliding_window", True) and \
        window < dims["seq_len"]
    if slides:
        raise refuse("parex", f"sliding-window attention (sliding_window {window} of "
                     f"{dims['seq_len']} positions)", "full attention: set sliding_window null")
    if config.get("tie_word_embeddings", False):
        notes["approximated"].append("tie_word_embeddings: parex counts the embedding and "
                                     "output untied, V·D parameters more")
    biases = [k for k in ("attention_bias", "mlp_bias") if config.get(k)]
    if model_type == "qwen2":
        biases.append("Qwen2's query/key/value biases")
    if biases:
        notes["approximated"].append(f"{', '.join(biases)}: parex's llama family has no "
                                     f"biases (a few weights per layer fewer)")
    moe = {}
    if model_type == "mixtral":
        experts = config.get("num_local_experts", 8)
        top_k = config.get("num_experts_per_tok", 2)
        for key, value in (("num_local_experts", experts), ("num_experts_per_tok", top_k)):
            if key not in config:
                notes["assumed"].append(f"{key} {value}")
        moe = {"experts": experts, "top_k": top_k}
    return ModelConfig(name, "llama", **dims, **moe)


def _gpt2(config: dict, name: str, notes) -> ModelConfig:
    dims = _shape(config, GPT2_KEYS, GPT2_DEFAULTS, notes)
    if "ffn" not in dims:
        notes["assumed"].append(f"n_inner {4 * dims['hidden']} (4·n_embd)")
    activation = config.get("activation_function", "gelu_new")
    if not str(activation).startswith("gelu"):
        raise InputError(f"config.json activation_function {activation!r}: parex's gpt family "
                         f"is GELU; give a GELU model")
    _check_head_dim(config, dims)
    if config.get("tie_word_embeddings", True):
        notes["approximated"].append("tie_word_embeddings (GPT-2's default): parex counts the "
                                     "embedding and output untied, V·D parameters more")
    return ModelConfig(name, "gpt", **dims)


def _check_head_dim(config: dict, dims: dict) -> None:
    head_dim = config.get("head_dim")
    if dims["hidden"] % dims["heads"]:
        raise InputError(f"config.json: hidden {dims['hidden']} is not divisible by "
                         f"{dims['heads']} heads; parex's head width is hidden / heads")
    if head_dim is not None and head_dim != dims["hidden"] // dims["heads"]:
        raise refuse("parex", f"head_dim {head_dim} beside hidden / heads = "
                     f"{dims['hidden'] // dims['heads']}", "head_dim = hidden / heads")


def to_hf_config(model: ModelConfig) -> dict:
    """The config.json keys of `model`'s shape (a llama family model as LlamaConfig or, with
    experts, MixtralConfig; a gpt one as GPT2Config). A shape those cannot hold is refused."""
    if model.family == "gpt":
        if model.moe:
            raise refuse(FRAMEWORK, "a GPT-2 mixture of experts", "a llama-family model "
                         "(MixtralConfig)")
        return {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
                "n_embd": model.hidden, "n_layer": model.layers, "n_head": model.heads,
                "n_inner": model.ffn, "vocab_size": model.vocab, "n_positions": model.seq_len,
                "activation_function": "gelu_new", "tie_word_embeddings": False}
    if model.moe and (model.expert_ffn != model.ffn or model.shared_experts
                      or model.capacity_factor is not None):
        raise refuse(FRAMEWORK, "experts of another width than the MLP, shared experts or a "
                     "capacity factor in MixtralConfig", "dropless experts of width ffn")
    config = {"model_type": "mixtral" if model.moe else "llama",
              "architectures": ["MixtralForCausalLM" if model.moe else "LlamaForCausalLM"],
              "hidden_size": model.hidden, "num_hidden_layers": model.layers,
              "num_attention_heads": model.heads, "num_key_value_heads": model.kv_heads,
              "intermediate_size": model.ffn, "vocab_size": model.vocab,
              "max_position_embeddings": model.seq_len, "hidden_act": "silu",
              "tie_word_embeddings": False}
    if model.moe:
        config |= {"num_local_experts": model.experts, "num_experts_per_tok": model.top_k,
                   "sliding_window": None}
    return config


__all__ = ["FRAMEWORK", "MODEL_TYPES", "VERSION", "from_hf_config", "to_hf_config"]
