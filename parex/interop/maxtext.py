"""MaxText configurations (a .yml and `key=value` overrides) <-> parex's (ModelConfig,
TrainConfig, Layout), both ways.

    run = from_maxtext("MaxText/configs/base.yml", ["model_name=llama3-8b",
                       "per_device_batch_size=2", "ici_tensor_parallelism=4"], world_size=64)
    run.predict("h100-sxm")
    to_maxtext(model, train, layout, "h100-sxm")   # 'python3 -m MaxText.train ... key=value ...'

Key names, defaults and rules are MaxText's at tpu-recipes-v0.1.5 (src/MaxText/configs/base.yml,
configs/models/*.yml and pyconfig.py there); data/interop/maxtext.json lists every key of that
base.yml and the model shapes read from its model configs. Values resolve as MaxText resolves
them: base.yml's defaults, the given .yml, the model_name's config, then the overrides (which may
not change a named model's shape unless override_model_config=True). Reading a .yml file needs
PyYAML; a config given as a dict, or MaxText's own base.yml named by path, does not.

The mapping (docs/interop.md has the table):
    ici_X_parallelism x dcn_X_parallelism (-1: the rest)   data, fsdp, tensor, stage, seq (the
                                                           sequence and context axes, cp=ring)
    num_pipeline_repeats (-1: layers / stages / num_layers_per_pipeline_stage)
                                                           virtual stages; gpipe, or bfs when
                                                           repeated (MaxText's circular pipeline
                                                           runs every microbatch's forward first)
    per_device_batch_size x devices x gradient_accumulation_steps    global batch
    gradient_accumulation_steps x num_pipeline_microbatches          microbatches
    remat_policy full | minimal                            remat full | selective
    dtype, attention                                       dtype; flash | naive (dot_product)
    quantization fp8 | nanoo_fp8                           precision fp8-delayed
                                                           (parex.interop.fp8)
"""

from __future__ import annotations

import math
import shlex
from pathlib import Path

from ..config import ModelConfig, TrainConfig
from ..errors import InputError
from ..layout import Layout
from ..setting import Setting, resolve
from ..stacks import stack
from . import fp8
from .result import (Imported, divide, option_list, refuse, refuse_parex_only,
                     unknown_option)

FRAMEWORK = "MaxText"
VERSION = "tpu-recipes-v0.1.5"
OPTIONS_FILE = "maxtext"
ENTRY = ["python3", "-m", "MaxText.train", "MaxText/configs/base.yml"]

# base.yml's values of the keys parex reads (at VERSION)
DEFAULTS = {
    "model_name": "default", "override_model_config": False, "global_parameter_scale": 1,
    "base_emb_dim": 2048, "base_num_query_heads": 16, "base_num_kv_heads": 16,
    "base_mlp_dim": 7168, "base_num_decoder_layers": 16, "head_dim": 128,
    "mlp_activations": ["silu", "linear"], "decoder_block": "llama2", "vocab_size": 32000,
    "logits_via_embedding": False, "max_target_length": 2048, "num_experts": 1,
    "attention_type": "global", "sliding_window_size": 0, "quantization": "",
    "opt_type": "adamw",
    "dtype": "bfloat16", "weight_dtype": "float32", "attention": "autoselected",
    "remat_policy": "full", "per_device_batch_size": 12.0, "gradient_accumulation_steps": 1,
    "num_pipeline_microbatches": -1, "num_layers_per_pipeline_stage": 1,
    "num_pipeline_repeats": -1, "pipeline_parallel_layers": -1, "num_slices": -1,
    "ici_data_parallelism": 1, "ici_fsdp_parallelism": -1, "dcn_data_parallelism": -1,
}
AXES = ("data", "fsdp", "fsdp_transpose", "sequence", "context", "context_autoregressive",
        "tensor", "tensor_transpose", "tensor_sequence", "pipeline", "expert", "autoregressive")
# mesh axes parex has no axis for: each must be 1, the nearest named
UNSUPPORTED_AXES = {"fsdp_transpose": "fsdp", "context_autoregressive": "context",
                    "tensor_transpose": "tensor", "tensor_sequence": "tensor",
                    "expert": "data (a dense model)", "autoregressive": "data"}
MODEL_KEYS = ("base_emb_dim", "base_num_query_heads", "base_num_kv_heads", "base_mlp_dim",
              "base_num_decoder_layers", "head_dim", "mlp_activations", "vocab_size",
              "decoder_block", "logits_via_embedding")
FAMILY_OF_BLOCK = {"llama2": ("llama", ["silu", "linear"]),
                   "mistral": ("llama", ["silu", "linear"]), "gpt3": ("gpt", ["gelu"])}
REMAT = {"full": "full", "minimal": "selective"}  # and back: parex's remat -> remat_policy
ATTENTION = {"autoselected": "flash", "flash": "flash", "cudnn_flash_te": "flash",
             "dot_product": "naive"}
MAPPED = set(DEFAULTS) | set(MODEL_KEYS) | {f"{k}_{a}_parallelism" for k in ("ici", "dcn")
                                            for a in AXES} | {"hardware"}


def known() -> dict:
    """base.yml's keys and the model configs' shapes at VERSION (data/interop/maxtext.json)."""
    return option_list(OPTIONS_FILE)


# --- import ------------------------------------------------------------------------------------

def from_maxtext(config=None, overrides=(), world_size: int | None = None,
                 name: str | None = None) -> Imported:
    """A MaxText run as parex's values. `config`: a .yml path, its dict, a whole command line
    (`python3 -m MaxText.train base.yml key=value ...`), or None for base.yml's defaults;
    `overrides`: `key=value` words. The device count is `world_size`, or the product of the
    ici_ and dcn_ degrees when none is -1."""
    if isinstance(config, str) and (" " in config.strip() or "=" in config):
        words = shlex.split(config.replace("\\\n", " "), comments=True)
        ymls = [w for w in words if w.endswith((".yml", ".yaml"))]
        config = ymls[0] if ymls else None
        overrides = [w for w in words if "=" in w and not w.startswith("-")] + list(overrides)
    notes = {"ignored": [], "assumed": [], "approximated": []}
    values = _resolved_keys(config, overrides, notes)
    return _Reader(values, world_size, name, notes).imported()


def _load_yml(config, notes) -> dict:
    if config is None:
        return {}
    if isinstance(config, dict):
        return dict(config)
    path = Path(config)
    if not path.is_file():
        if path.name == "base.yml":  # MaxText's own, by the path its docs use
            notes["assumed"].append(f"{config}: MaxText's base.yml at {VERSION}")
            return {}
        raise InputError(f"no MaxText config at {path}: give the path of its .yml")
    try:
        import yaml
    except ImportError:
        raise InputError(f"reading {path} needs PyYAML (pip install pyyaml); or give the keys "
                         f"as key=value overrides") from None
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise InputError(f"{path}: not YAML ({one(err)}); fix it") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: a MaxText config is a mapping of keys to values")
    return data


def one(err) -> str:
    return " ".join(str(err).split())


def _value(text: str):
    """An override's value as MaxText reads it: a number, a bool, a [list], or the text."""
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        return [_value(item.strip().strip("'\"")) for item in text[1:-1].split(",")
                if item.strip()]
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text.replace("_", ""))
        except ValueError:
            pass
    return text.strip("'\"")


def _resolved_keys(config, overrides, notes) -> dict:
    """base.yml's defaults <- the .yml <- the model_name's shape <- the overrides."""
    keys = set(known()["keys"])
    yml = _load_yml(config, notes)
    values = dict(DEFAULTS) | yml
    given = {}
    for word in overrides:
        key, eq, text = str(word).partition("=")
        if not eq:
            raise InputError(f"{word}: a MaxText override is key=value")
        if key in given:
            raise InputError(f"{key} is given twice; keep one")
        given[key] = _value(text)
    for key in [*values, *given]:
        if key not in keys:
            raise unknown_option(FRAMEWORK, VERSION, key, keys)
    model_name = given.get("model_name", values.get("model_name"))
    if model_name != "default":
        models = known()["models"]
        if model_name not in models:
            raise InputError(f"model_name {model_name!r}: parex reads MaxText's "
                             f"{', '.join(models)}; or give the base_* keys with "
                             f"model_name=default")
        clash = [k for k in given if k in models[model_name]]
        if clash and not given.get("override_model_config", values["override_model_config"]):
            raise InputError(f"{', '.join(clash)} change model_name {model_name}'s shape: "
                             f"MaxText refuses that unless override_model_config=True")
        values |= models[model_name]
    # base.yml's defaults that set the step, where nothing else gave them
    shape = MODEL_KEYS if model_name == "default" else ()
    for key in ("per_device_batch_size", "max_target_length", "remat_policy", "dtype", *shape):
        if key not in yml and key not in given:
            notes["assumed"].append(f"{key} {values[key]!r}")
    return values | given


class _Reader:
    def __init__(self, values, world_size, name, notes):
        self.v, self.world, self.name, self.notes = values, world_size, name, notes

    def assumed(self, key: str, why: str = ""):
        self.notes["assumed"].append(f"{key} {self.v[key]!r}{why}")

    def imported(self) -> Imported:
        self.refusals()
        model = self.model()
        layout = self.layout(model)
        train, layout = self.batch(layout)
        dtype = self.v["dtype"]
        for key in self.v:
            if key not in MAPPED:
                self.notes["ignored"].append(key)
        return Imported(FRAMEWORK, VERSION, model.replace(dtype=dtype), train, layout,
                        dtype=dtype, ignored=tuple(self.notes["ignored"]),
                        assumed=tuple(self.notes["assumed"]),
                        approximated=tuple(self.notes["approximated"]), stack="maxtext",
                        overlaps=stack("maxtext").overlaps)  # XLA's (parex.stacks)

    def refusals(self):
        v = self.v
        checks = (("global_parameter_scale", 1, "global_parameter_scale=1 (give the dims)"),
                  ("num_experts", 1, "num_experts=1 (parex reads MaxText's dense models)"),
                  ("weight_dtype", "float32", "weight_dtype=float32 (the mixed recipe)"),
                  ("pipeline_parallel_layers", -1, "pipeline_parallel_layers=-1 (every layer)"))
        for key, want, fix in checks:
            if v[key] != want:
                raise InputError(f"{key}={v[key]!r}: parex cannot predict it; use {fix}")
        if v["opt_type"] not in ("adamw", "adam_pax"):
            raise InputError(f"opt_type={v['opt_type']!r}: parex predicts Adam's state; use "
                             f"opt_type=adamw")
        if v["dtype"] not in ("bfloat16", "float32"):
            raise InputError(f"dtype={v['dtype']!r}: give bfloat16 or float32")

    def model(self) -> ModelConfig:
        v = self.v
        block = v["decoder_block"]
        if block not in FAMILY_OF_BLOCK:
            raise InputError(f"decoder_block={block!r}: parex reads "
                             f"{', '.join(FAMILY_OF_BLOCK)}")
        family, activations = FAMILY_OF_BLOCK[block]
        if list(v["mlp_activations"]) != activations:
            raise InputError(f"mlp_activations={v['mlp_activations']} with decoder_block={block}:"
                             f" parex's {family} family has {activations}")
        D, H = v["base_emb_dim"], v["base_num_query_heads"]
        if family == "gpt" and v["base_num_kv_heads"] != H:
            raise InputError("base_num_kv_heads: parex's gpt family has multi-head attention; "
                             "give base_num_kv_heads = base_num_query_heads")
        return ModelConfig(self.name or (v["model_name"] if v["model_name"] != "default"
                                         else "maxtext"),
                           family, v["base_num_decoder_layers"], D, H, v["base_num_kv_heads"],
                           v["base_mlp_dim"], v["vocab_size"], v["max_target_length"],
                           head_dim=v["head_dim"], tied_embeddings=bool(v["logits_via_embedding"]),
                           sliding_window=self.sliding_window())

    def sliding_window(self) -> int | None:
        """attention_type global: None; local_sliding: sliding_window_size on every layer (a
        window as long as the sequence is none)."""
        v = self.v
        kind, size = v["attention_type"], v["sliding_window_size"]
        if kind == "global":
            return None
        if kind != "local_sliding" or not isinstance(size, int) or size < 1:
            raise InputError(f"attention_type={kind!r} with sliding_window_size={size!r}: parex "
                             f"reads global, or local_sliding with a window of at least 1")
        return None if size >= v["max_target_length"] else size

    def degrees(self) -> tuple[dict, dict, int]:
        """The ici and dcn degree of every mesh axis, the -1s filled as MaxText fills them."""
        v = self.v
        ici = {a: v.get(f"ici_{a}_parallelism", 1) for a in AXES}
        dcn = {a: v.get(f"dcn_{a}_parallelism", 1) for a in AXES}
        for degrees, kind in ((ici, "ici"), (dcn, "dcn")):
            if sum(d == -1 for d in degrees.values()) > 1:
                raise InputError(f"two {kind}_*_parallelism are -1: MaxText fills one; give the "
                                 f"others")
        known_world = None
        if -1 not in ici.values() and -1 not in dcn.values():
            known_world = math.prod(ici.values()) * math.prod(dcn.values())
        world = self.world
        if world is None:
            if known_world is None:
                raise InputError("the device count: an ici_ or dcn_ degree is -1 (the rest of "
                                 "the devices); give every degree, or the device count "
                                 "(world_size=, or --nodes with --hardware)")
            world = known_world
        elif known_world is not None and known_world != world:
            raise InputError(f"device count {world} contradicts the degrees' product "
                             f"{known_world}: give one of them")
        slices = v["num_slices"]
        if slices == -1:
            slices = math.prod(d for d in dcn.values() if d != -1) if -1 not in dcn.values() \
                else 1
            if -1 in dcn.values():
                self.notes["assumed"].append("num_slices 1 (one slice: every device on ICI)")
        per_slice = divide(world, slices, f"{world} devices", f"num_slices={slices} must "
                           f"divide them")
        for degrees, total, kind in ((ici, per_slice, "ici"), (dcn, slices, "dcn")):
            for axis, d in degrees.items():
                if d == -1:
                    rest = math.prod(x for x in degrees.values() if x != -1)
                    degrees[axis] = divide(total, rest, f"{total} devices on {kind}",
                                           f"the other {kind} degrees' product {rest} must "
                                           f"divide them")
                    self.notes["assumed"].append(f"{kind}_{axis}_parallelism "
                                                 f"{degrees[axis]} (-1: the rest)")
            if math.prod(degrees.values()) != total:
                where = "devices per slice" if kind == "ici" else "slices"
                raise InputError(f"the {kind} degrees' product {math.prod(degrees.values())} "
                                 f"is not the {total} {where}")
        return ici, dcn, world

    def layout(self, model: ModelConfig) -> Layout:
        ici, dcn, world = self.degrees()
        size = {a: ici[a] * dcn[a] for a in AXES}
        for axis, nearest in UNSUPPORTED_AXES.items():
            if size[axis] > 1:
                raise InputError(f"the {axis} axis ({size[axis]}): parex has no such axis; put "
                                 f"its devices on {nearest}")
        seq = size["sequence"] * size["context"]
        if seq > 1:
            self.notes["approximated"].append("MaxText's context parallelism (keys and values "
                                              "all-gathered) predicted as ring attention")
        stage = size["pipeline"]
        virtual, schedule = 1, None
        if stage > 1:
            per_stage = self.v["num_layers_per_pipeline_stage"]
            repeats = self.v["num_pipeline_repeats"]
            if repeats == -1:
                repeats = divide(model.layers, stage * per_stage,
                                 f"base_num_decoder_layers {model.layers}",
                                 "pipeline stages x num_layers_per_pipeline_stage must divide "
                                 "them")
                self.notes["assumed"].append(f"num_pipeline_repeats {repeats} (layers / "
                                             f"stages / num_layers_per_pipeline_stage)")
            elif repeats * stage * per_stage != model.layers:
                raise InputError(f"num_pipeline_repeats {repeats} x {stage} stages x "
                                 f"num_layers_per_pipeline_stage {per_stage} is not the "
                                 f"{model.layers} layers; fix one of them")
            virtual, schedule = repeats, "gpipe" if repeats == 1 else "bfs"
            self.notes["approximated"].append(f"MaxText's pipeline as {schedule} (every "
                                              f"microbatch's forward, then the backward)")
        return Layout(data=size["data"], fsdp=size["fsdp"], tensor=size["tensor"], seq=seq,
                      cp="ring" if seq > 1 else "none", stage=stage, schedule=schedule,
                      virtual_stages=virtual)

    def precision(self) -> str | None:
        """The FP8 recipe of `quantization` (parex.interop.fp8); None: the dtype's."""
        name = fp8.maxtext_precision(self.v["quantization"], self.notes["approximated"])
        if name is not None and self.v["dtype"] != "bfloat16":
            raise InputError(f"quantization={self.v['quantization']} with dtype="
                             f"{self.v['dtype']}: parex prices FP8 over bfloat16; give "
                             f"dtype=bfloat16")
        return name

    def batch(self, layout: Layout) -> tuple[TrainConfig, Layout]:
        v = self.v
        world, per_device = layout.n_devices, v["per_device_batch_size"]
        ga = v["gradient_accumulation_steps"]
        step = int(world * per_device)
        if step < 1:
            raise InputError(f"per_device_batch_size={per_device} on {world} devices is no "
                             f"sequence; raise it")
        B = step * ga
        m = ga
        if layout.stage > 1:
            pipeline_m = v["num_pipeline_microbatches"]
            if pipeline_m == -1:
                pipeline_m = layout.stage
                self.notes["assumed"].append(f"num_pipeline_microbatches {pipeline_m} (the "
                                             f"stages)")
            if pipeline_m % layout.stage:
                raise InputError(f"num_pipeline_microbatches={pipeline_m}: MaxText needs a "
                                 f"multiple of the {layout.stage} stages")
            m *= pipeline_m
        b = divide(B, m * layout.data_parallel, f"the global batch {B}",
                   f"per_device_batch_size x devices must split over {m} microbatches of "
                   f"{layout.data_parallel} replicas")
        remat = REMAT.get(v["remat_policy"])
        if remat is None:
            raise InputError(f"remat_policy={v['remat_policy']!r}: parex predicts 'full' and "
                             f"'minimal' (as selective); use one of them")
        if remat == "selective":
            self.notes["approximated"].append("remat_policy 'minimal' predicted as parex's "
                                              "selective recompute")
        attention = ATTENTION.get(v["attention"])
        if attention is None:
            raise InputError(f"attention={v['attention']!r}: use one of {', '.join(ATTENTION)}")
        if v["attention"] == "autoselected":
            self.notes["assumed"].append("attention 'autoselected' as a flash kernel")
        train = TrainConfig(global_batch=B, microbatch=b if m == 1 else None, remat=remat,
                            attention=attention, precision=self.precision())
        return train, layout.replace(microbatches=m)


# --- export ------------------------------------------------------------------------------------

def to_maxtext(model: ModelConfig, train: TrainConfig, layout: Layout, hardware,
               **keywords) -> str:
    """The MaxText command of (model, train, layout) on `hardware`, resolved as parex.predict
    resolves it; what MaxText cannot express is refused naming the nearest."""
    return maxtext_command(resolve(model, train, layout, hardware, **keywords))


def maxtext_command(setting: Setting) -> str:
    return " ".join(shlex.quote(w) for w in ENTRY + maxtext_overrides(setting))


def maxtext_overrides(setting: Setting) -> list[str]:
    """`key=value` words of one resolved Setting: every key parex reads, none left to a
    default (the ici degrees carry the devices; the dcn ones are 1)."""
    model, train, layout = setting.model, setting.train, setting.layout
    ga, pipeline_m = _check_expressible(setting)
    block = "llama2" if model.family == "llama" else "gpt3"
    activations = "[silu,linear]" if model.family == "llama" else "[gelu]"
    size = {"data": layout.data, "fsdp": layout.fsdp, "context": layout.seq,
            "tensor": layout.tensor, "pipeline": layout.stage}
    words = {"model_name": "default", "decoder_block": block, "mlp_activations": activations,
             "base_emb_dim": model.hidden, "base_num_query_heads": model.heads,
             "base_num_kv_heads": model.kv_heads, "base_mlp_dim": model.ffn,
             "base_num_decoder_layers": model.layers, "head_dim": model.head_dim,
             "vocab_size": model.vocab, "logits_via_embedding": model.tied_embeddings,
             "attention_type": "global" if model.sliding_window is None else "local_sliding",
             "sliding_window_size": model.sliding_window or 0,
             "max_target_length": setting.seq_len, "num_slices": 1}
    words |= {f"ici_{a}_parallelism": size.get(a, 1) for a in AXES}
    words |= {f"dcn_{a}_parallelism": 1 for a in AXES}
    words |= {"per_device_batch_size": _per_device(train.global_batch // ga, layout.n_devices),
              "gradient_accumulation_steps": ga, "dtype": setting.dtype,
              "weight_dtype": "float32",
              "remat_policy": {v: k for k, v in REMAT.items()}[train.remat],
              "attention": "flash" if setting.attention == "flash" else "dot_product"}
    if quantization := fp8.maxtext_quantization(setting.precision.name):
        words["quantization"] = quantization
    if layout.stage > 1:
        words |= {"num_pipeline_microbatches": pipeline_m,
                  "num_layers_per_pipeline_stage": model.layers // (layout.stage
                                                                    * layout.virtual_stages),
                  "num_pipeline_repeats": layout.virtual_stages}
    return [f"{k}={v}" for k, v in words.items()]


def _per_device(step: int, devices: int):
    """per_device_batch_size giving `step` sequences on `devices` (int(devices x it) == step)."""
    value = step // devices if step % devices == 0 else step / devices
    return value


def _check_expressible(setting: Setting) -> tuple[int, int]:
    """(gradient_accumulation_steps, num_pipeline_microbatches), or Unexpressible."""
    model, layout, train = setting.model, setting.layout, setting.train
    if model.moe:
        raise refuse(FRAMEWORK, "a mixture of experts in parex's reading of it", "a dense model")
    if model.parallel_block:
        raise refuse(FRAMEWORK, "parallel attention and MLP blocks (no decoder_block of "
                     f"{VERSION} names them)", "sequential blocks (parallel_block False)")
    if model.family == "gpt" and model.kv_heads != model.heads:
        raise refuse(FRAMEWORK, "grouped-query attention in the gpt3 block", "kv_heads = heads")
    if setting.seq_len != model.seq_len:
        raise refuse(FRAMEWORK, "a sequence shorter than the model's (max_target_length sets "
                     "both)", f"seq_len {setting.seq_len} for both")
    refuse_parex_only(FRAMEWORK, layout)
    if layout.sp:
        raise refuse(FRAMEWORK, "Megatron's sequence parallelism (sp=on)", "sp=off")
    if layout.zero:
        raise refuse(FRAMEWORK, f"zero={layout.zero} (it shards state over the fsdp axis)",
                     f"fsdp={layout.data * layout.fsdp}")
    if layout.expert > 1:
        raise refuse(FRAMEWORK, "expert parallelism of a dense model", "expert=1")
    if layout.seq > 1 and layout.cp != "ring":
        raise refuse(FRAMEWORK, f"cp={layout.cp}", "cp=ring (ici_context_parallelism)")
    if layout.layers_per_stage is not None:
        raise refuse(FRAMEWORK, "an uneven split of layers", "the even split")
    m = layout.microbatches
    if layout.stage > 1:
        want = "gpipe" if layout.virtual_stages == 1 else "bfs"
        if layout.schedule != want:
            raise refuse(FRAMEWORK, f"schedule={layout.schedule} with virtual="
                         f"{layout.virtual_stages} (its circular pipeline runs every forward "
                         f"first)", f"schedule={want}")
        if model.layers % (layout.stage * layout.virtual_stages):
            raise refuse(FRAMEWORK, "stages that do not divide the layers",
                         "stage x virtual dividing the layers")
        if m % layout.stage:
            raise refuse(FRAMEWORK, f"{m} microbatches on {layout.stage} stages",
                         f"microbatches={layout.stage * max(1, m // layout.stage)}")
        ga, pipeline_m = 1, m
    else:
        ga, pipeline_m = m, 1
    if train.remat not in REMAT.values():
        raise refuse(FRAMEWORK, f"remat {train.remat} (every policy recomputes something)",
                     "remat selective (remat_policy=minimal)")
    if setting.recipe != ("mixed" if setting.dtype == "bfloat16" else "parex"):
        raise refuse(FRAMEWORK, f"recipe {setting.recipe} with {setting.dtype}",
                     "weight_dtype float32 under the compute dtype")
    b, dp = setting.microbatch, layout.data_parallel
    step = train.global_batch // ga
    if b * m * dp != train.global_batch or int(layout.n_devices
                                                * _per_device(step, layout.n_devices)) != step:
        raise refuse(FRAMEWORK, f"a global batch of {train.global_batch} over {m} microbatches "
                     f"of {dp} replicas on {layout.n_devices} devices",
                     f"a multiple of {m * layout.n_devices}")
    return ga, pipeline_m


__all__ = ["FRAMEWORK", "VERSION", "from_maxtext", "maxtext_command", "maxtext_overrides",
           "to_maxtext"]
