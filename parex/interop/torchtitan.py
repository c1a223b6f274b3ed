"""torchtitan job TOML <-> parex's (ModelConfig, TrainConfig, Layout), both ways.

    run = from_torchtitan("llama3_8b.toml", world_size=64)   # or a TOML's dict
    run.predict("h100-sxm")
    print(to_torchtitan(model, train, layout, "h100-sxm"))    # a job TOML's text

Table and key names, defaults and rules are torchtitan's at v0.2.2 (torchtitan/config/
job_config.py, models/llama3, distributed/pipeline_parallel.py and parallel_dims.py there);
data/interop/torchtitan.json lists every table and key of that version. torchtitan builds its
models from named flavors: the import reads llama3's (8B, 70B, 405B, debugmodel), and an export
of another shape is refused naming the nearest flavor.

The mapping (docs/interop.md has the table):
    [parallelism] data_parallel_replicate_degree       data (HSDP's replicas)
                  data_parallel_shard_degree (-1: the rest of the world)   fsdp
                  tensor_parallel_degree               tensor, with sp (torchtitan's TP shards
                                                       the norms' sequence: always sequence
                                                       parallel)
                  pipeline_parallel_degree, _schedule, _layers_per_stage   stage, schedule,
                                                       virtual stages and the layer split
                  context_parallel_degree              seq, cp=ring
    [training]    local_batch_size, global_batch_size, microbatches m = B / (b x dp) with
                  pipeline_parallel_microbatch_size b = the microbatch (local batch without PP)
                  mixed_precision_param                dtype; bfloat16 over float32 state:
                                                       recipe fsdp2 (float32 shards gathered in
                                                       bfloat16, gradients reduced in float32:
                                                       mixed_precision_reduce's only value)
    [activation_checkpoint] mode, selective_ac_option  remat
    [parallelism] enable_async_tensor_parallel         stack torchtitan, overlap async-tp
    [model] converters, [quantize.linear.float8]       precision fp8-current | fp8-rowwise
            or [quantize.linear.mx]                    | mxfp8 (parex.interop.fp8)
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

from ..config import ModelConfig, TrainConfig
from ..errors import InputError
from ..layout import Layout
from ..setting import Setting, resolve
from ..stacks import stack
from . import fp8
from .result import Imported, divide, option_list, refuse, refuse_parex_only

FRAMEWORK = "torchtitan"
VERSION = "v0.2.2"
OPTIONS_FILE = "torchtitan"

# llama3's flavors (torchtitan/models/llama3/__init__.py): dim, n_layers, n_heads, n_kv_heads,
# vocab_size, ffn_dim_multiplier, multiple_of; the SwiGLU width follows FeedForward's rule
FLAVORS = {
    "debugmodel": (256, 6, 16, None, 2048, None, 256),
    "8B": (4096, 32, 32, 8, 128256, 1.3, 1024),
    "70B": (8192, 80, 64, 8, 128256, 1.3, 4096),
    "405B": (16384, 126, 128, 8, 128256, 1.2, 4096),
}
# flavors with another attention kernel (flex, varlen) and the same shape: both keep no scores
FLAVOR_ALIASES = {"debugmodel_flex_attn": "debugmodel", "debugmodel_varlen_attn": "debugmodel",
                  "8B_flex": "8B", "8B_varlen": "8B"}

# pipeline_parallel_schedule -> parex's schedule; multi-stage ones run virtual stages
SCHEDULES = {"1F1B": "1f1b", "GPipe": "gpipe", "Interleaved1F1B": "interleaved",
             "LoopedBFS": "bfs", "ZBVZeroBubble": "zbv"}
# torchtitan's schedules parex does not predict, and parex's torchtitan does not run: the nearest
NEAREST_SCHEDULE = {"InterleavedZeroBubble": "Interleaved1F1B or ZBVZeroBubble (parex's ZB-H1 "
                                             "runs one stage per rank)",
                    "DualPipeV": "ZBVZeroBubble",
                    "zbh1": "schedule=1f1b (torchtitan's zero-bubble schedules are "
                            "multi-stage: or schedule=zbv,virtual=2)",
                    "local": "schedule=1f1b (end-to-end backprop)"}
SINGLE_STAGE = ("1F1B", "GPipe")

# keys read for the prediction; every other key of a known table is ignored and listed
MAPPED = {
    "model": {"name", "flavor", "converters"},
    "training": {"local_batch_size", "global_batch_size", "seq_len", "dtype",
                 "mixed_precision_param"},
    "parallelism": {"data_parallel_replicate_degree", "data_parallel_shard_degree",
                    "tensor_parallel_degree", "pipeline_parallel_degree",
                    "pipeline_parallel_schedule", "pipeline_parallel_layers_per_stage",
                    "pipeline_parallel_microbatch_size",
                    "pipeline_parallel_first_stage_less_layers",
                    "pipeline_parallel_last_stage_less_layers", "context_parallel_degree",
                    "context_parallel_rotate_method", "expert_parallel_degree",
                    "module_fqns_per_model_part", "pipeline_parallel_schedule_csv",
                    "enable_async_tensor_parallel"},
    "activation_checkpoint": {"mode", "selective_ac_option"},
    fp8.TORCHTITAN_TABLE: {"recipe_name", "enable_fsdp_float8_all_gather",
                           "precompute_float8_dynamic_scale_for_fsdp", "emulate"},
    fp8.TORCHTITAN_MX: {"recipe_name", "filter_fqns"},
}


def known_tables() -> dict[str, list[str]]:
    """Every table of torchtitan's job TOML at VERSION and its keys (data/interop)."""
    return option_list(OPTIONS_FILE)["tables"]


# --- import ------------------------------------------------------------------------------------

def from_torchtitan(source, world_size: int | None = None, name: str | None = None) -> Imported:
    """A torchtitan job (a TOML path, its text, or its dict) as parex's values. The world
    size is the degrees' product when data_parallel_shard_degree is given, else `world_size`
    (torchrun's, which the TOML does not hold)."""
    job = _load(source)
    notes = {"ignored": [], "assumed": [], "approximated": []}
    _check_names(job, notes)
    section = {t: job.get(t, {}) for t in ("model", "training", "parallelism",
                                           "activation_checkpoint")}
    get = _Getter(section, notes)
    model = _model(get, notes, name)
    layout, b, dtype = _layout(get, model, world_size, notes)
    dp = layout.data_parallel
    local = get("training", "local_batch_size", 8)
    B = get("training", "global_batch_size", -1)
    if B == -1:
        B = local * dp
        notes["assumed"].append(f"global_batch_size {B} (local_batch_size x data-parallel "
                                f"degree)")
    divide(B, local * dp, f"global_batch_size {B}", f"give a multiple of local_batch_size x "
           f"data-parallel degree = {local * dp}")
    m = divide(B, b * dp, f"global_batch_size {B}", f"give a multiple of {b * dp}")
    train = TrainConfig(global_batch=B, microbatch=b if m == 1 else None,
                        remat=_remat(get, notes), attention="flash",
                        precision=_precision(job, get, layout, dtype, notes))
    notes["assumed"].append("attention by scaled_dot_product_attention (a fused kernel that "
                            "keeps no scores: flash)")
    # torchtitan's overlaps (parex.stacks): FSDP2's, and micro-pipelined TP where asked
    async_tp = bool(get("parallelism", "enable_async_tensor_parallel", False))
    # bfloat16 compute over float32 state (training.dtype) is FSDP2's or DDP's mixed
    # precision: the stack's recipe, fsdp2 (TP or PP alone in bfloat16 state: parex's default)
    mixed = dtype == "bfloat16" and section["training"].get("dtype", "float32") == "float32"
    return Imported(FRAMEWORK, VERSION, model.replace(dtype=dtype), train,
                    layout.replace(microbatches=m), dtype=dtype,
                    ignored=tuple(notes["ignored"]), assumed=tuple(notes["assumed"]),
                    approximated=tuple(notes["approximated"]), stack="torchtitan",
                    overlaps=stack("torchtitan").overlaps + (("async-tp",) if async_tp else ()),
                    recipe=stack("torchtitan").recipe if mixed else None)


def _precision(job: dict, get, layout: Layout, dtype: str, notes) -> str | None:
    """The FP8 recipe of model.converters and [quantize.linear.float8] or [quantize.linear.mx]
    (parex.interop.fp8)."""
    linear = job.get("quantize", {}).get("linear", {})
    tables = {f"quantize.linear.{kind}": table for kind, table in linear.items()}
    name = fp8.torchtitan_precision(get("model", "converters", []), tables, layout.fsdp > 1,
                                    notes["approximated"])
    if name is not None and dtype != "bfloat16":
        raise InputError(f"FP8 linears over {dtype}: parex prices FP8 over bfloat16, as "
                         f"torchtitan's float8 and MX run; set mixed_precision_param = "
                         f"\"bfloat16\"")
    return name


def _load(source) -> dict:
    if isinstance(source, dict):
        return source
    text = str(source)
    path = Path(text) if "\n" not in text and text.endswith(".toml") else None
    if path is not None:
        if not path.is_file():
            raise InputError(f"no torchtitan job file {path}: give the path of its TOML")
        text = path.read_text()
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise InputError(f"torchtitan job TOML: {err}; fix the TOML") from None


def _check_names(job: dict, notes) -> None:
    """Unknown tables and keys are errors naming the nearest; known ones parex does not read
    are listed as ignored."""
    from .result import unknown_option

    tables = known_tables()

    def visit(table: dict, prefix: str):
        for key, value in table.items():
            dotted = f"{prefix}.{key}" if prefix else key
            if isinstance(value, dict) and (dotted in tables or any(
                    t.startswith(dotted + ".") for t in tables)):
                visit(value, dotted)
                continue
            if prefix not in tables:
                raise unknown_option(FRAMEWORK, VERSION, f"[{dotted}]", list(tables))
            if key not in tables[prefix]:
                raise unknown_option(FRAMEWORK, VERSION, f"{prefix}.{key}",
                                     [f"{prefix}.{k}" for k in tables[prefix]])
            if key not in MAPPED.get(prefix, ()):
                notes["ignored"].append(f"{dotted}")

    visit(job, "")


class _Getter:
    """A key of one table, or torchtitan's default (noted as assumed where it matters)."""

    def __init__(self, section, notes):
        self.section, self.notes = section, notes

    def __call__(self, table: str, key: str, default, note: bool = False):
        if key in self.section[table]:
            return self.section[table][key]
        if note:
            self.notes["assumed"].append(f"{table}.{key} {default!r}")
        return default


def swiglu_width(dim: int, multiplier: float | None, multiple_of: int) -> int:
    """torchtitan's FeedForward width: 2/3 of 4·dim, times the multiplier, rounded up."""
    hidden = int(2 * 4 * dim / 3)
    if multiplier is not None:
        hidden = int(multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def _model(get, notes, name) -> ModelConfig:
    family = get("model", "name", "llama3", note=True)
    if family != "llama3":
        raise InputError(f"model.name {family!r}: parex reads torchtitan's llama3 flavors; "
                         f"give model.name = \"llama3\"")
    flavor = get("model", "flavor", "debugmodel", note=True)
    shape = FLAVORS.get(FLAVOR_ALIASES.get(flavor, flavor))
    if shape is None:
        known = [*FLAVORS, *FLAVOR_ALIASES]
        raise InputError(f"model.flavor {flavor!r}: not a llama3 flavor of torchtitan "
                         f"{VERSION}; use one of {', '.join(known)}")
    dim, layers, heads, kv, vocab, multiplier, multiple_of = shape
    seq = get("training", "seq_len", 2048, note=True)
    return ModelConfig(name or f"llama3-{flavor}", "llama", layers, dim, heads, kv or heads,
                       swiglu_width(dim, multiplier, multiple_of), vocab, seq)


def _layout(get, model: ModelConfig, world_size, notes) -> tuple[Layout, int, str]:
    replicate = get("parallelism", "data_parallel_replicate_degree", 1)
    shard = get("parallelism", "data_parallel_shard_degree", -1)
    tp = get("parallelism", "tensor_parallel_degree", 1)
    pp = get("parallelism", "pipeline_parallel_degree", 1)
    cp = get("parallelism", "context_parallel_degree", 1)
    if get("parallelism", "expert_parallel_degree", 1) != 1:
        raise InputError("parallelism.expert_parallel_degree: torchtitan's llama3 is dense; "
                         "set it to 1")
    others = replicate * tp * pp * cp
    if shard == -1:
        if world_size is None:
            raise InputError("the world size: data_parallel_shard_degree -1 takes the rest of "
                             "torchrun's devices; give data_parallel_shard_degree, or the device "
                             "count (world_size=, or --nodes with --hardware)")
        shard = divide(world_size, others, f"world size {world_size}",
                       f"give a multiple of the other degrees' product {others}")
        notes["assumed"].append(f"data_parallel_shard_degree {shard} (-1: the rest of "
                                f"{world_size} devices)")
    elif world_size is not None and world_size != shard * others:
        raise InputError(f"world size {world_size} contradicts the degrees' product "
                         f"{shard * others}: give one of them")
    if cp > 1 and shard > 1:
        notes["approximated"].append("FSDP over data_parallel_shard_degree only (torchtitan "
                                     "shards over the context-parallel ranks too)")
    schedule, virtual, split = _pipeline(get, model.layers, pp, notes)
    if cp > 1:
        method = get("parallelism", "context_parallel_rotate_method", "allgather", note=True)
        notes["approximated"].append(f"context_parallel_rotate_method {method!r} predicted as "
                                     f"ring attention (keys and values passed around)")
    state = get("training", "dtype", "float32")
    if state != "float32" and (shard > 1 or cp > 1 or (tp == 1 and pp == 1)):
        raise InputError(f"training.dtype {state!r} keeps weights and optimizer state in "
                         f"{state}, which parex's recipes do not; use \"float32\" (the "
                         f"compute dtype is mixed_precision_param)")
    if shard > 1 or cp > 1 or (tp == 1 and pp == 1):
        dtype = _dtype(get("training", "mixed_precision_param", "bfloat16", note=True))
    else:  # mixed precision is fully_shard's or DDP's autocast: TP/PP alone train in dtype
        dtype = _dtype(get("training", "dtype", "float32"))
        notes["assumed"].append(f"training.dtype {dtype} (mixed_precision_param applies under "
                                f"FSDP, CP or DDP only)")
    b = get("parallelism", "pipeline_parallel_microbatch_size", 1) if pp > 1 else \
        get("training", "local_batch_size", 8, note=True)
    if pp > 1:
        local = get("training", "local_batch_size", 8, note=True)
        divide(local, b, f"training.local_batch_size {local}",
               "pipeline_parallel_microbatch_size must divide it")
    layout = Layout(data=replicate, fsdp=shard, tensor=tp, sp=tp > 1, seq=cp,
                    cp="ring" if cp > 1 else "none", stage=pp, schedule=schedule,
                    virtual_stages=virtual, layers_per_stage=split)
    return layout, b, dtype


def _dtype(name: str) -> str:
    if name not in ("bfloat16", "float32"):
        raise InputError(f"precision {name!r}: give bfloat16 or float32")
    return name


def _pipeline(get, layers: int, pp: int, notes):
    """(schedule, virtual stages per rank, layers per chunk or None when even) as
    torchtitan's pipeline_llm splits the layers: embedding and output weigh a layer each."""
    if pp == 1:
        return None, 1, None
    for key in ("module_fqns_per_model_part", "pipeline_parallel_schedule_csv"):
        if get("parallelism", key, None):
            raise InputError(f"parallelism.{key}: parex predicts the split torchtitan "
                             f"computes; drop {key}")
    name = get("parallelism", "pipeline_parallel_schedule", "1F1B", note=True)
    if name not in SCHEDULES:
        nearest = NEAREST_SCHEDULE.get(name, "one of " + ", ".join(SCHEDULES))
        raise InputError(f"pipeline_parallel_schedule {name!r}: parex does not predict it; "
                         f"the nearest it does: {nearest}")
    first = get("parallelism", "pipeline_parallel_first_stage_less_layers", 1)
    last = get("parallelism", "pipeline_parallel_last_stage_less_layers", 1)
    per_stage = get("parallelism", "pipeline_parallel_layers_per_stage", None)
    if per_stage is not None:
        stages = math.ceil((layers + first + last) / per_stage)
        per_rank = divide(stages, pp, f"{stages} virtual stages",
                          "pipeline_parallel_layers_per_stage must give a multiple of "
                          "pipeline_parallel_degree")
    else:
        per_rank = 1 if name in SINGLE_STAGE else 2
        notes["assumed"].append(f"{per_rank} stage{'s' * (per_rank > 1)} per rank "
                                f"({'single' if per_rank == 1 else 'multi'}-stage schedule "
                                f"{name})")
    if (name in SINGLE_STAGE) != (per_rank == 1):
        raise InputError(f"pipeline_parallel_schedule {name} runs "
                         f"{'one stage' if name in SINGLE_STAGE else 'two or more stages'} per "
                         f"rank, not {per_rank}: change pipeline_parallel_layers_per_stage")
    split = torchtitan_split(layers, pp * per_rank, first, last)
    return SCHEDULES[name], per_rank, None if len(set(split)) == 1 else split


def torchtitan_split(layers: int, stages: int, first: int, last: int) -> tuple[int, ...]:
    """Layers per stage as generate_llm_fqn_per_model_part splits them: the embedding counts
    as `first` layers and the output as `last`, the effective layers spread evenly with the
    remainder on the first stages."""
    effective = layers + first + last
    base, extra = divmod(effective, stages)
    if base == 0 or first > base or last > base:
        raise InputError(f"{stages} pipeline stages for {layers} layers: torchtitan cannot "
                         f"split them; use fewer stages")
    counts = [base + (i < extra) for i in range(stages)]
    counts[0] -= first
    counts[-1] -= last
    return tuple(counts)


def _remat(get, notes) -> str:
    mode = get("activation_checkpoint", "mode", "selective", note=True)
    if mode in ("none", "full"):
        return mode
    if mode != "selective":
        raise InputError(f"activation_checkpoint.mode {mode!r}: parex predicts none, selective "
                         f"or full")
    option = str(get("activation_checkpoint", "selective_ac_option", "2", note=True))
    if option == "op":
        notes["approximated"].append("per-op selective checkpointing predicted as parex's "
                                     "selective recompute (the attention recomputed)")
        return "selective"
    if option == "1":
        return "full"
    raise InputError(f"activation_checkpoint.selective_ac_option {option!r} checkpoints every "
                     f"{option}th layer, which parex does not predict; use 'op', or mode "
                     f"\"full\"")


# --- export ------------------------------------------------------------------------------------

def to_torchtitan(model: ModelConfig, train: TrainConfig, layout: Layout, hardware,
                  **keywords) -> str:
    """The job TOML of (model, train, layout) on `hardware`, resolved as parex.predict
    resolves it under torchtitan's stack (its overlaps and recipe) unless `keywords` name
    another; what torchtitan cannot express is refused naming the nearest."""
    keywords.setdefault("stack", "torchtitan")
    return torchtitan_toml(resolve(model, train, layout, hardware, **keywords))


def torchtitan_toml(setting: Setting) -> str:
    """The [model], [training], [parallelism] and [activation_checkpoint] tables of one
    resolved Setting (every degree explicit: the world size is their product)."""
    model, train, layout = setting.model, setting.train, setting.layout
    flavor = _check_expressible(setting)
    schedule = {v: k for k, v in SCHEDULES.items()}.get(layout.schedule, "1F1B")
    lines = [f"# {layout.n_devices} devices (torchrun's world size) · parex layout {layout}",
             "[model]", 'name = "llama3"', f'flavor = "{flavor}"', "",
             "[training]", f"local_batch_size = {_local_batch(setting)}",
             f"global_batch_size = {train.global_batch}", f"seq_len = {setting.seq_len}",
             f'mixed_precision_param = "{setting.dtype}"', "",
             "[parallelism]", f"data_parallel_replicate_degree = {layout.data}",
             f"data_parallel_shard_degree = {layout.fsdp}",
             f"tensor_parallel_degree = {layout.tensor}",
             f"pipeline_parallel_degree = {layout.stage}",
             f"context_parallel_degree = {layout.seq}"]
    if "async-tp" in setting.overlap_names and layout.tensor > 1:
        lines.append("enable_async_tensor_parallel = true")
    converted = fp8.torchtitan_table(setting.precision.name, layout.fsdp > 1)
    if converted is not None:  # the converter goes in [model], its table after the others
        lines.insert(lines.index('[training]') - 1, f'converters = ["{converted[0]}"]')
    if layout.stage > 1:
        lines += [f'pipeline_parallel_schedule = "{schedule}"',
                  f"pipeline_parallel_microbatch_size = {setting.microbatch}",
                  "pipeline_parallel_first_stage_less_layers = 0",
                  "pipeline_parallel_last_stage_less_layers = 0",
                  f"pipeline_parallel_layers_per_stage = "
                  f"{model.layers // (layout.stage * layout.virtual_stages)}"]
    mode = {"none": ('"none"', None), "selective": ('"selective"', '"op"'),
            "full": ('"full"', None)}[train.remat]
    lines += ["", "[activation_checkpoint]", f"mode = {mode[0]}"]
    if mode[1]:
        lines.append(f"selective_ac_option = {mode[1]}")
    if converted is not None:
        lines += ["", f"[{converted[0]}]"] + [
            f"{key} = {_toml_value(value)}" for key, value in converted[1].items()]
    return "\n".join(lines) + "\n"


def _toml_value(value) -> str:
    return str(value).lower() if isinstance(value, bool) else f'"{value}"'


def _local_batch(setting: Setting) -> int:
    """training.local_batch_size: per data-parallel rank per accumulation step."""
    layout = setting.layout
    return setting.microbatch * (layout.microbatches if layout.stage > 1 else 1)


def _check_expressible(setting: Setting) -> str:
    """The llama3 flavor of the setting's model, or Unexpressible naming the nearest."""
    model, layout, train = setting.model, setting.layout, setting.train
    flavor = next((f for f, shape in FLAVORS.items()
                   if model.replace(name="x", dtype="float32") == ModelConfig(
                       "x", "llama", shape[1], shape[0], shape[2], shape[3] or shape[2],
                       swiglu_width(shape[0], shape[5], shape[6]), shape[4], model.seq_len)),
                  None)
    if flavor is None:
        nearest = min(FLAVORS, key=lambda f: abs(math.log(FLAVORS[f][0] / model.hidden)))
        raise refuse(FRAMEWORK, f"{model.name}'s shape (torchtitan builds named flavors)",
                     f"llama3 flavor {nearest}")
    if setting.seq_len != model.seq_len:
        raise refuse(FRAMEWORK, "a sequence shorter than the model's context (its seq_len "
                     "sets both)", f"seq_len {setting.seq_len} for both")
    refuse_parex_only(FRAMEWORK, layout)
    if layout.tensor > 1 and not layout.sp:
        raise refuse(FRAMEWORK, "tensor parallelism without sp (its TP is sequence parallel)",
                     "sp=on")
    if layout.expert > 1:
        raise refuse(FRAMEWORK, "expert parallelism in llama3 (a dense model)", "expert=1")
    if layout.zero:
        raise refuse(FRAMEWORK, f"zero={layout.zero} on replicated data (it shards with FSDP)",
                     f"fsdp={layout.data * layout.fsdp} (or data={layout.data},"
                     f"fsdp={layout.fsdp} without zero)")
    if layout.seq > 1 and layout.cp != "ring":
        raise refuse(FRAMEWORK, f"cp={layout.cp}", "cp=ring")
    if layout.stage > 1:
        chunks = layout.stage * layout.virtual_stages
        if layout.schedule not in SCHEDULES.values():
            raise refuse(FRAMEWORK, f"schedule={layout.schedule}",
                         NEAREST_SCHEDULE.get(layout.schedule, "schedule=1f1b"))
        single = layout.schedule in ("1f1b", "gpipe")
        if single != (layout.virtual_stages == 1):
            raise refuse(FRAMEWORK, f"schedule={layout.schedule} with virtual="
                         f"{layout.virtual_stages}", "schedule=interleaved,virtual=2"
                         if single else "schedule=1f1b,virtual=1")
        if layout.layers_per_stage is not None or model.layers % chunks:
            raise refuse(FRAMEWORK, "this uneven split of layers in parex's keys",
                         "an even split (layers a multiple of stage x virtual)")
    if setting.dtype != "bfloat16" or setting.recipe != stack("torchtitan").recipe:
        raise refuse(FRAMEWORK, f"{setting.dtype} training under recipe {setting.recipe} "
                     f"(it keeps float32 shards and reduces gradients in float32)",
                     "bfloat16 with recipe fsdp2 (--recipe fsdp2, or --stack torchtitan)")
    if layout.fsdp == 1 and layout.seq == 1 and (layout.tensor > 1 or layout.stage > 1):
        raise refuse(FRAMEWORK, "bfloat16 under TP or PP without FSDP (mixed precision is "
                     "fully_shard's)", f"fsdp=2 or more, or data={layout.data} alone")
    if train.attention != "flash":
        raise refuse(FRAMEWORK, "naive attention (its SDPA keeps no scores)", "attention flash")
    b, m, dp = setting.microbatch, layout.microbatches, layout.data_parallel
    if b * m * dp != train.global_batch:
        raise refuse(FRAMEWORK, f"a global batch of {train.global_batch} over {m} "
                     f"microbatches of {dp} replicas", f"a multiple of {m * dp}")
    return flavor


__all__ = ["FRAMEWORK", "VERSION", "from_torchtitan", "known_tables", "to_torchtitan",
           "torchtitan_split", "torchtitan_toml"]
