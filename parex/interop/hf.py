"""Hugging Face `config.json` <-> parex's ModelConfig: the model a checkpoint describes.

    run = from_hf_config("Meta-Llama-3-8B/config.json")   # an Imported with run.model
    parex.predict(run.model, train, layout, "h100-sxm")
    to_hf_config(parex.model_preset("llama2-70b"))      # the config.json's model keys, a dict

Llama-style models (model_type llama, mistral, qwen2, gemma and mixtral's mixture of experts)
become parex's llama family (RMSNorm, RoPE, SwiGLU, grouped-query attention); GPT-2 and GPT-J
its gpt family (GPT-J's blocks parallel: ModelConfig.parallel_block). A head width of its own
(head_dim), tied embeddings (tie_word_embeddings) and a sliding window (sliding_window) are
read into the ModelConfig's fields of those names. Key names and their defaults are those of
transformers' configuration classes (LlamaConfig, MistralConfig, MixtralConfig, Qwen2Config,
GemmaConfig, GPT2Config, GPTJConfig) at VERSION. A config.json names a model,
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
LLAMA_TYPES = ("llama", "mistral", "qwen2", "mixtral", "gemma")
GPT_TYPES = ("gpt2", "gptj")
MODEL_TYPES = LLAMA_TYPES + GPT_TYPES

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
GPTJ_DEFAULTS = {"n_embd": 4096, "n_layer": 28, "n_head": 16, "vocab_size": 50400,
                 "n_positions": 2048}
# tie_word_embeddings when a config.json leaves it out: PretrainedConfig's True, but
# LlamaConfig, MistralConfig, MixtralConfig, Qwen2Config and GPTJConfig default to False
TIED_BY_DEFAULT = {"gpt2": True, "gemma": True}
READ = {"model_type", "hidden_act", "activation_function", "tie_word_embeddings", "head_dim",
        "attention_bias", "mlp_bias", "sliding_window", "use_sliding_window",
        "max_window_layers", "num_local_experts", "num_experts_per_tok", "rotary_dim",
        "hidden_activation"}


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
    if model_type in GPT_TYPES:
        model = _gpt(config, model_type, name, notes)
    else:
        model = _llama(config, model_type, name, notes)
    keys = set(LLAMA_KEYS if model_type not in GPT_TYPES else GPT2_KEYS) | READ
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
    _llama_activation(config, model_type, notes)
    shapes = {"head_dim": _head_dim(config, dims),
              "sliding_window": _sliding_window(config, model_type, dims),
              "tied_embeddings": _tied(config, model_type)}
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
    return ModelConfig(name, "llama", **dims, **moe, **shapes)


def _llama_activation(config: dict, model_type: str, notes) -> None:
    """SwiGLU (silu); Gemma's GeGLU has the same three matrices and FLOPs, so it is read as
    SwiGLU and said so."""
    if model_type == "gemma":
        key = "hidden_activation" if "hidden_activation" in config else "hidden_act"
        activation = config.get(key, "gelu_pytorch_tanh")
        if str(activation).startswith("gelu"):
            notes["approximated"].append(f"{key} {activation} (GeGLU) as SwiGLU: the same "
                                         f"three matrices and FLOPs")
            return
    else:
        activation = config.get("hidden_act", "silu")
    if activation != "silu":
        raise InputError(f"config.json hidden_act {activation!r}: parex's llama family is "
                         f"SwiGLU (silu); give a silu model")


def _gpt(config: dict, model_type: str, name: str, notes) -> ModelConfig:
    """GPT-2, or GPT-J: its attention and MLP side by side on one LayerNorm (parallel_block),
    its rotary positions counted as a learned table and its attention with biases."""
    defaults = GPTJ_DEFAULTS if model_type == "gptj" else GPT2_DEFAULTS
    dims = _shape(config, GPT2_KEYS, defaults, notes)
    if "ffn" not in dims:
        notes["assumed"].append(f"n_inner {4 * dims['hidden']} (4·n_embd)")
    activation = config.get("activation_function", "gelu_new")
    if not str(activation).startswith("gelu"):
        raise InputError(f"config.json activation_function {activation!r}: parex's gpt family "
                         f"is GELU; give a GELU model")
    if config.get("head_dim") not in (None, dims["hidden"] // dims["heads"]):
        raise refuse("parex", f"a GPT head_dim {config['head_dim']} beside n_embd / n_head",
                     "head_dim = n_embd / n_head, or a llama-family config")
    _head_dim(config, dims)
    if model_type == "gptj":
        notes["approximated"].append("GPT-J's rotary positions as GPT's learned position table "
                                     "(n_positions·n_embd parameters more) and its attention "
                                     "with biases (a few weights per layer more)")
    return ModelConfig(name, "gpt", **dims, parallel_block=model_type == "gptj",
                       tied_embeddings=_tied(config, model_type))


def _tied(config: dict, model_type: str) -> bool:
    return bool(config.get("tie_word_embeddings", TIED_BY_DEFAULT.get(model_type, False)))


def _head_dim(config: dict, dims: dict) -> int | None:
    """The config's head width (None: hidden / heads, which must then divide)."""
    head_dim = config.get("head_dim")
    if head_dim is not None and (not isinstance(head_dim, int) or head_dim < 1):
        raise InputError(f"config.json head_dim: {head_dim!r} is not a whole number of at "
                         f"least 1")
    if head_dim is None and dims["hidden"] % dims["heads"]:
        raise InputError(f"config.json: hidden {dims['hidden']} is not divisible by "
                         f"{dims['heads']} heads; name the head width (head_dim)")
    return None if head_dim == dims["hidden"] // dims["heads"] else head_dim


def _sliding_window(config: dict, model_type: str, dims: dict) -> int | None:
    """The window every layer slides (None: full attention, or a window as long as the
    context). Qwen2 slides only when use_sliding_window is set, and then on the layers from
    max_window_layers on: parex's window is on every layer or none."""
    window = config.get("sliding_window")
    slides = window is not None and config.get("use_sliding_window", model_type != "qwen2")
    if not slides or window >= dims["seq_len"]:
        return None
    from_layer = config.get("max_window_layers", 0) if model_type == "qwen2" else 0
    if from_layer > 0:
        raise refuse("parex", f"a sliding window on only some layers (max_window_layers "
                     f"{from_layer} of {dims['layers']})", "a window on every layer "
                     "(max_window_layers 0) or none (use_sliding_window false)")
    return window


def to_hf_config(model: ModelConfig) -> dict:
    """The config.json keys of `model`'s shape (a llama family model as LlamaConfig, with a
    sliding window MistralConfig, with experts MixtralConfig; a gpt one as GPT2Config, with
    parallel blocks GPTJConfig). A shape those cannot hold is refused."""
    if model.family == "gpt":
        return _gpt_config(model)
    if model.moe and (model.expert_ffn != model.ffn or model.shared_experts
                      or model.capacity_factor is not None):
        raise refuse(FRAMEWORK, "experts of another width than the MLP, shared experts or a "
                     "capacity factor in MixtralConfig", "dropless experts of width ffn")
    kind = ("mixtral" if model.moe else "mistral" if model.sliding_window is not None
            else "llama")
    config = {"model_type": kind,
              "architectures": [{"mixtral": "MixtralForCausalLM", "mistral":
                                 "MistralForCausalLM", "llama": "LlamaForCausalLM"}[kind]],
              "hidden_size": model.hidden, "num_hidden_layers": model.layers,
              "num_attention_heads": model.heads, "num_key_value_heads": model.kv_heads,
              "intermediate_size": model.ffn, "vocab_size": model.vocab,
              "max_position_embeddings": model.seq_len, "hidden_act": "silu",
              "tie_word_embeddings": model.tied_embeddings}
    if model.head_dim != model.hidden // model.heads:
        config["head_dim"] = model.head_dim
    if model.moe:
        config |= {"num_local_experts": model.experts, "num_experts_per_tok": model.top_k}
    if kind != "llama":
        config["sliding_window"] = model.sliding_window
    if model.parallel_block:
        raise refuse(FRAMEWORK, "a llama-family model with parallel blocks",
                     "sequential blocks (parallel_block False), or the gpt family (GPTJConfig)")
    return config


def _gpt_config(model: ModelConfig) -> dict:
    """GPT2Config, or GPTJConfig for parallel blocks."""
    for what, present in (("a GPT-2 mixture of experts", model.moe),
                          ("a sliding window in a GPT model", model.sliding_window is not None),
                          ("a GPT head width other than n_embd / n_head",
                           model.head_dim != model.hidden // model.heads)):
        if present:
            raise refuse(FRAMEWORK, what, "a llama-family model (MistralConfig, "
                         "MixtralConfig, LlamaConfig's head_dim)")
    kind = "gptj" if model.parallel_block else "gpt2"
    return {"model_type": kind,
            "architectures": ["GPTJForCausalLM" if model.parallel_block else "GPT2LMHeadModel"],
            "n_embd": model.hidden, "n_layer": model.layers, "n_head": model.heads,
            "n_inner": model.ffn, "vocab_size": model.vocab, "n_positions": model.seq_len,
            "activation_function": "gelu_new", "tie_word_embeddings": model.tied_embeddings}


__all__ = ["FRAMEWORK", "MODEL_TYPES", "VERSION", "from_hf_config", "to_hf_config"]
