"""The checks of parex.validation, each written once: a test on columns and a message.

A `Rule`'s `holds(g, c)` reads a predict.shapes.Grid `g` (numpy columns, one entry per layout;
`cp` and `schedule` are codes, -1 for an unknown name; `partition_n/min/sum` summarise an
explicit partition, n = 0 for none) and a Context `c` (the model, the train config, the device
count of a single check), and returns a boolean column or a scalar for model-level checks.
`message(layout, c)` names the problem and the fix for one layout that fails it. Rules run in
list order and a layout is reported by its first failure, so a later rule may assume that the
earlier ones hold.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..config import DTYPES, FAMILIES, REMAT_POLICIES, ModelConfig, TrainConfig
from ..errors import did_you_mean, unknown
from ..layout import (
    CP_MODES,
    LOCAL_LOSSES,
    MESH_AXES,
    Axis,
    Layout,
    divisors,
    example_partition,
    num_microbatches,
)
from ..model.moe import routing
from ..parallel.schedules import ALL_SCHEDULES, LOCAL, LOOPING, SCHEDULES, VEE, check_schedule
from ..precision import PRECISIONS

INTERLEAVED, LOOPING_CODES = SCHEDULES.index("interleaved"), [SCHEDULES.index(s) for s in LOOPING]
VEE_CODES = [SCHEDULES.index(s) for s in VEE]  # two chunks per device, placed V-wise
RING, ULYSSES = CP_MODES.index("ring"), CP_MODES.index("ulysses")
LOCAL_CODE = ALL_SCHEDULES.index(LOCAL)  # schedule=local (parex.parallel.local)
# a Grid is one replica's layout: the replica axis is checked by validation._check_replica, and
# a 3D tensor layout's Y and Z by tensor3d_problem (a Grid has no columns for them)
GRID_AXES = tuple(a for a in MESH_AXES
                  if a not in (Axis.REPLICA, Axis.TENSOR_Y, Axis.TENSOR_Z))
MODEL_DIMS = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq_len")


@dataclass(frozen=True)
class Context:
    model: ModelConfig
    train: TrainConfig
    n_devices: int | None  # the devices available to one layout; None: each layout's own

    @property
    def T(self) -> int:
        return self.train.seq_len or self.model.seq_len


@dataclass(frozen=True)
class Rule:
    name: str
    holds: Callable  # (Grid, Context) -> bool column or scalar
    message: Callable  # (Layout, Context) -> str


def _rule(rules: list, name: str, holds, message) -> None:
    rules.append(Rule(name, holds, message))


def _safe(x):
    """A divisor that is never 0 (rows where it was fail an earlier rule)."""
    return np.maximum(x, 1)


def _size_text(layout: Layout) -> str:
    return " × ".join(f"{a.value}={s}" for a, s in layout.axis_sizes().items() if s > 1)


def _schedule_text(layout: Layout, c: Context) -> str:
    try:
        check_schedule(layout.schedule, layout.stage, num_microbatches(layout, c.train),
                       layout.virtual_stages)
    except ValueError as error:
        return str(error)
    raise RuntimeError(f"a schedule rule rejects {layout} but check_schedule accepts it: the "
                       f"two must agree")


def _even_split_hint(L: int, chunks: int) -> str:
    return ":".join(map(str, example_partition(L, chunks)))


RULES: list[Rule] = []

# --- the mesh -----------------------------------------------------------------------------------
_rule(RULES, "axes-positive",
      lambda g, c: functools.reduce(operator.and_, [getattr(g, a.value) >= 1
                                                    for a in GRID_AXES]),
      lambda l, c: next(f"mesh axis {a.value}={s}: every axis size must be at least 1"
                        for a, s in l.axis_sizes().items() if s < 1))
_rule(RULES, "device-count",
      lambda g, c: True if c.n_devices is None else g.n_devices == c.n_devices,
      lambda l, c: (f"the mesh {_size_text(l) or 'single'} uses {l.n_devices} devices but "
                    f"{c.n_devices} are available: change the axis sizes so that their product "
                    f"is {c.n_devices}, or run on {l.n_devices} devices (--devices "
                    f"{l.n_devices})" + nearest_3d_hint(l, c)))
_rule(RULES, "zero-stage", lambda g, c: (g.zero >= 0) & (g.zero <= 3),
      lambda l, c: (f"zero={l.zero}: the ZeRO stage is 0, 1 (optimizer state), 2 (+ gradients) "
                    f"or 3 (+ parameters)"))

# --- the model and the batch, whatever the layout -----------------------------------------------
_rule(RULES, "family", lambda g, c: c.model.family in FAMILIES,
      lambda l, c: f"unknown model family {c.model.family!r}; use one of {', '.join(FAMILIES)}")
_rule(RULES, "dtype", lambda g, c: c.model.dtype in DTYPES,
      lambda l, c: f"unknown dtype {c.model.dtype!r}; use one of {', '.join(DTYPES)}")
_rule(RULES, "remat", lambda g, c: c.train.remat in REMAT_POLICIES,
      lambda l, c: (f"unknown remat policy {c.train.remat!r}; use one of "
                    f"{', '.join(REMAT_POLICIES)}"))
for _dim in MODEL_DIMS:
    _rule(RULES, f"model-{_dim}", lambda g, c, d=_dim: getattr(c.model, d) >= 1,
          lambda l, c, d=_dim: f"{d}={getattr(c.model, d)}: a model needs {d} >= 1")
_rule(RULES, "head-dim",  # an explicit head width (Gemma's) needs no such division
      lambda g, c: (c.model.hidden % c.model.heads == 0
                    or c.model.head_dim != c.model.hidden // c.model.heads),
      lambda l, c: (f"hidden={c.model.hidden} is not divisible by heads={c.model.heads}: pick "
                    f"a hidden size that is a multiple of the head count, or name head_dim"))
_rule(RULES, "kv-groups", lambda g, c: c.model.heads % c.model.kv_heads == 0,
      lambda l, c: (f"heads={c.model.heads} is not a multiple of kv_heads={c.model.kv_heads}: "
                    f"grouped-query attention shares each KV head among heads/kv_heads query "
                    f"heads"))
_rule(RULES, "rotary-pairs",
      lambda g, c: c.model.family != "llama" or c.model.head_dim % 2 == 0,
      lambda l, c: f"head_dim={c.model.head_dim} is odd; rotary embeddings rotate pairs of "
                   f"features")
_rule(RULES, "seq-range", lambda g, c: 1 <= c.T <= c.model.seq_len,
      lambda l, c: (f"sequence length {c.T} must be between 1 and the model's "
                    f"seq_len={c.model.seq_len}"))
_rule(RULES, "global-batch", lambda g, c: c.train.global_batch >= 1,
      lambda l, c: f"global batch {c.train.global_batch}: a step needs at least one sequence")
_rule(RULES, "vision-sequence", lambda g, c: not c.model.vision or c.T == c.model.seq_len,
      lambda l, c: (f"sequence length {c.T}: a ViT's sequence is its {c.model.patches} patches "
                    f"and the class token, T = {c.model.seq_len}; leave seq_len unset"))
_rule(RULES, "vision-attention",
      lambda g, c: not c.model.vision or c.train.attention != "flash",
      lambda l, c: ("attention=flash: a ViT's attention is not causal and parex's blockwise "
                    "kernel runs causal attention only; use attention=naive (the default)"))
_rule(RULES, "vision-whole-sequence",
      lambda g, c: not c.model.vision or ((g.seq == 1) & (g.sp == 0)),
      lambda l, c: (f"a ViT's sequence is short (T = {c.model.seq_len}) and read out by its "
                    f"class token: seq={l.seq}, sp={'on' if l.sp else 'off'} split it, which "
                    f"parex runs for language models only; set seq=1 and sp=off"))

# --- tensor parallelism -------------------------------------------------------------------------
for _name in ("heads", "kv_heads", "ffn", "vocab"):
    _rule(RULES, f"tensor-{_name}", lambda g, c, n=_name: getattr(c.model, n) % g.tensor == 0,
          lambda l, c, n=_name: (
              f"{n}={getattr(c.model, n)} is not divisible by tensor={l.tensor}: Megatron "
              f"tensor parallelism splits {n} across the tensor axis; choose tensor from the "
              f"divisors of {getattr(c.model, n)}"))
_rule(RULES, "sp-needs-tensor", lambda g, c: (g.sp == 0) | (g.tensor > 1),
      lambda l, c: ("sp=on needs tensor > 1: sequence parallelism splits the LayerNorm regions "
                    "over the tensor axis; set tensor=2 or more, or sp=off"))
_rule(RULES, "sp-sequence", lambda g, c: (g.sp == 0) | (c.T % g.tensor == 0),
      lambda l, c: (f"sequence length {c.T} is not divisible by tensor={l.tensor}, which sp=on "
                    f"requires; pick a sequence length that is a multiple of {l.tensor}"))

# --- ZeRO / FSDP: the embed dim of every weight is what they split (W_in[D_fsdp, F]) -------------
# The parameters themselves must split; optimizer state and gradients sharded over data need not:
# Megatron-LM's distributed optimizer shards one flat buffer padded to a multiple of the data
# size (predicted as such: memory.padded_state_elements), which parex's executor does not run
# (EXECUTOR_LIMITS' state-shards-by-dim).
_rule(RULES, "state-shards", lambda g, c: c.model.hidden % g.embed_shards("param") == 0,
      lambda l, c: (
          f"hidden={c.model.hidden} is not divisible by the {l.shard_count('embed', 'param')} "
          f"shards of {'fsdp' if l.zero < 3 else 'data × fsdp'} that FSDP/ZeRO-3 cut each "
          f"weight into; choose sizes whose product divides {c.model.hidden}"))

# --- the batch: cut into Layout.batch_split slices (data × fsdp × expert, × Z for a 3D layout) ---
def _split_axes(l: Layout) -> str:
    return "data × fsdp × expert" + (" × Z" if l.tensor_z > 1 else "")


_rule(RULES, "batch-replicas", lambda g, c: c.train.global_batch % g.dp == 0,
      lambda l, c: (f"global batch {c.train.global_batch} is not divisible by the "
                    f"{l.batch_split} slices of the batch ({_split_axes(l)}): use a global "
                    f"batch that is a multiple of {l.batch_split}"))
_rule(RULES, "microbatch-size",
      lambda g, c: (c.train.microbatch is None
                    or (c.train.microbatch >= 1)
                    & (c.train.global_batch // g.dp % max(c.train.microbatch, 1) == 0)),
      lambda l, c: (f"microbatch={c.train.microbatch} must divide the "
                    f"{c.train.global_batch // l.batch_split} sequences each of the "
                    f"{l.batch_split} slices of the batch ({_split_axes(l)}) gets per step"))
_rule(RULES, "microbatches-positive", lambda g, c: g.microbatches >= 1,
      lambda l, c: f"microbatches={l.microbatches}: use at least 1")
_rule(RULES, "microbatch-agreement",
      lambda g, c: (c.train.microbatch is None
                    or g.microbatches == c.train.global_batch // g.dp // c.train.microbatch),
      lambda l, c: (
          f"microbatches={l.microbatches} and microbatch={c.train.microbatch} disagree: "
          f"{c.train.global_batch}/({l.batch_split}·{c.train.microbatch}) = "
          f"{c.train.global_batch // l.batch_split // c.train.microbatch} microbatches; set "
          f"only one of them"))


def _batch_message(l: Layout, c: Context) -> str:
    B, dp, m = c.train.global_batch, l.batch_split, num_microbatches(l, c.train)
    return (f"global batch {B} is too small or uneven for {m} microbatches on {dp} replicas: "
            f"it must be a multiple of {_split_axes(l)} × microbatches = {dp * m}; raise "
            f"the batch "
            f"to {dp * m * max(1, -(-B // (dp * m)))} or lower microbatches")


_rule(RULES, "batch-microbatches",
      lambda g, c: c.train.global_batch % (g.dp * g.microbatches) == 0, _batch_message)

# --- local learning (schedule=local): a Grid without the columns has their defaults --------------
def _local_loss(g):
    return getattr(g, "local_loss", 0)  # index into LOCAL_LOSSES, -1 unknown


def _queue(g):
    return getattr(g, "queue", 1)


def _local_knobs_message(l: Layout, c: Context) -> str:
    keys = [f"{k}={getattr(l, k)}" for k in ("local_loss", "queue")
            if getattr(l, k) != getattr(Layout(), k)]
    verb = "mean" if len(keys) > 1 else "means"
    return (f"{' and '.join(keys)} only {verb} something for local learning: add "
            f"schedule=local (with stage=2 or more), or drop "
            f"{' and '.join(k.split('=')[0] for k in keys)}")


_rule(RULES, "local-knobs",
      lambda g, c: (g.schedule == LOCAL_CODE) | ((_local_loss(g) == 0) & (_queue(g) == 1)),
      _local_knobs_message)
_rule(RULES, "local-needs-stages", lambda g, c: (g.schedule != LOCAL_CODE) | (g.stage > 1),
      lambda l, c: ("schedule=local needs stage=2 or more: each pipeline stage learns from its "
                    "own loss, so one stage is ordinary training; set stage=2 (or more), or "
                    "drop schedule=local"))
def _local_loss_message(l: Layout, c: Context) -> str:
    hint = did_you_mean(l.local_loss, LOCAL_LOSSES)
    return (f"unknown local_loss={l.local_loss!r}; {hint + ' ' if hint else ''}each stage's "
            f"objective under schedule=local is one of {', '.join(LOCAL_LOSSES)}")


_rule(RULES, "local-loss-known", lambda g, c: _local_loss(g) >= 0, _local_loss_message)
_rule(RULES, "queue-positive", lambda g, c: _queue(g) >= 1,
      lambda l, c: (f"queue={l.queue}: the queue between two stages holds at least one "
                    f"activation; use queue=1 (the default) or more"))

# --- pipelines ----------------------------------------------------------------------------------
_rule(RULES, "pipeline-knobs",
      lambda g, c: (g.stage > 1) | ((g.schedule == 0) & (g.virtual_stages == 1)
                                    & (g.partition_n == 0)),
      lambda l, c: ("schedule, virtual and partition apply to pipelines: set stage=2 or more, "
                    "or leave them at their defaults"))
_rule(RULES, "schedule-known", lambda g, c: g.schedule >= 0, _schedule_text)
_rule(RULES, "virtual-positive", lambda g, c: g.virtual_stages >= 1, _schedule_text)
_rule(RULES, "vee-two-chunks",
      lambda g, c: functools.reduce(operator.and_, [(g.schedule != k) | (g.virtual_stages == 2)
                                                    for k in VEE_CODES]), _schedule_text)
_rule(RULES, "virtual-needs-looping",
      lambda g, c: functools.reduce(operator.or_, [g.schedule == k for k in LOOPING_CODES
                                                   + VEE_CODES], g.virtual_stages == 1),
      _schedule_text)
_rule(RULES, "interleaved-chunks",
      lambda g, c: (g.schedule != INTERLEAVED) | (g.virtual_stages >= 2), _schedule_text)
_rule(RULES, "interleaved-groups",
      lambda g, c: (g.schedule != INTERLEAVED) | (g.microbatches % _safe(g.stage) == 0),
      _schedule_text)
_rule(RULES, "chunks-have-layers",
      lambda g, c: (g.partition_n > 0) | (g.stage * g.virtual_stages <= c.model.layers),
      lambda l, c: (f"stage × virtual = {l.stage * l.virtual_stages} pipeline chunks but the "
                    f"model has only layers={c.model.layers}: lower virtual to at most "
                    f"{max(1, c.model.layers // l.stage)}"))


def _even_message(l: Layout, c: Context) -> str:
    L, chunks = c.model.layers, l.stage * l.virtual_stages
    return (f"layers={L} do not split evenly into stage × virtual = {chunks} pipeline chunks: "
            f"choose stage × virtual from {divisors(L)}, or give the layers per chunk explicitly, "
            f"e.g. partition={_even_split_hint(L, chunks)}")


_rule(RULES, "even-chunks",
      lambda g, c: (g.partition_n > 0) | (c.model.layers % _safe(g.stage * g.virtual_stages)
                                          == 0), _even_message)
_rule(RULES, "partition-entries",
      lambda g, c: (g.partition_n == 0) | (g.partition_n == g.stage * g.virtual_stages),
      lambda l, c: (
          f"partition={_format_parts(l)} has {len(l.layers_per_stage)} entries but the "
          f"pipeline has {l.stage * l.virtual_stages} chunks (stage={l.stage} × "
          f"virtual={l.virtual_stages}): give one layer count per chunk, e.g. "
          f"partition={_even_split_hint(c.model.layers, l.stage * l.virtual_stages)}"))
_rule(RULES, "partition-layers",
      lambda g, c: (g.partition_n == 0) | ((g.partition_min >= 1)
                                           & (g.partition_sum == c.model.layers)),
      lambda l, c: (
          f"partition={_format_parts(l)} must give every chunk at least one layer and sum to "
          f"the model's layers={c.model.layers} (it sums to {sum(l.layers_per_stage)}), e.g. "
          f"partition={_even_split_hint(c.model.layers, len(l.layers_per_stage))}"))


def _format_parts(l: Layout) -> str:
    return ":".join(map(str, l.layers_per_stage))


# --- context parallelism ------------------------------------------------------------------------
_rule(RULES, "cp-known", lambda g, c: g.cp >= 0,
      lambda l, c: unknown("context-parallel mode (cp)", l.cp, CP_MODES))
_rule(RULES, "seq-needs-cp", lambda g, c: (g.seq == 1) | (g.cp > 0),
      lambda l, c: (f"seq={l.seq} splits the sequence but cp=none says nothing about how "
                    f"attention crosses the shards: set cp=ring (keys and values passed around "
                    f"the ring) or cp=ulysses (all-to-all between sequence and head shards), or "
                    f"seq=1"))
_rule(RULES, "cp-needs-seq", lambda g, c: (g.seq > 1) | (g.cp == 0),
      lambda l, c: (f"cp={l.cp} needs a sequence split: set seq=2 or more (and shrink another "
                    f"axis to keep the device count), or cp=none"))


def _chunks_message(l: Layout, c: Context) -> str:
    chunks = 2 * l.seq if l.cp == "ring" else l.seq
    why = ("the zig-zag split of ring attention cuts it into 2·seq" if l.cp == "ring"
           else "Ulysses cuts it into seq")
    return (f"sequence length {c.T} is not divisible by {chunks}: {why} = {chunks} equal "
            f"chunks; use a multiple of {chunks}, e.g. {max(chunks, c.T // chunks * chunks)}")


_rule(RULES, "cp-chunks",
      lambda g, c: (g.seq == 1) | (c.T % (g.seq * (1 + (g.cp == RING))) == 0),
      _chunks_message)
_rule(RULES, "sp-with-cp", lambda g, c: (g.seq == 1) | (g.sp == 0) | (c.T % (g.seq * g.tensor)
                                                                    == 0),
      lambda l, c: (f"sequence length {c.T} is not divisible by seq × tensor = "
                    f"{l.seq * l.tensor}, which sp=on with seq={l.seq} requires (the residual "
                    f"stream is split over both); use a multiple of {l.seq * l.tensor}"))
for _name in ("heads", "kv_heads"):
    _rule(RULES, f"ulysses-{_name}",
          lambda g, c, n=_name: ((g.seq == 1) | (g.cp != ULYSSES)
                                 | (getattr(c.model, n) % (g.seq * g.tensor) == 0)),
          lambda l, c, n=_name: (
              f"{n}={getattr(c.model, n)} is not divisible by tensor × seq = {l.tensor} × "
              f"{l.seq}: Ulysses gives each device whole heads after its all-to-all; choose "
              f"seq from the divisors of {n}/tensor = {getattr(c.model, n) // l.tensor}, or "
              f"use cp=ring"))

# --- mixtures of experts (parex.model.moe) and the expert axis -----------------------------------------
_MOE_PRESETS = "tiny-moe, mixtral-8x7b, deepseek-v3"
_rule(RULES, "expert-tensor-whole", lambda g, c: (g.expert_tensor == g.tensor)
      | ((g.expert_tensor == 1) & (g.tensor > 1)),
      lambda l, c: (f"expert_tensor={l.expert_tensor} with tensor={l.tensor}: parex folds the "
                    f"whole tensor axis into the expert group or none of it; write "
                    f"expert_tensor=1 (each expert whole, EP = expert × tensor) with tensor > 1, "
                    f"or drop expert_tensor (F_e split over tensor)"))
_rule(RULES, "expert-needs-experts", lambda g, c: (g.ep == 1) | c.model.moe,
      lambda l, c: (f"expert_tensor={l.expert_tensor} on a dense model: {c.model.name} has no "
                    f"experts to fold the tensor axis over; drop expert_tensor, or use a "
                    f"mixture of experts ({_MOE_PRESETS})" if l.expert == 1 else
                    f"expert={l.expert} on a dense model: {c.model.name} has no experts to "
                    f"split; fold the expert devices into data (data={l.data * l.expert}), or "
                    f"use a mixture of experts ({_MOE_PRESETS})"))
_rule(RULES, "expert-fold-seq", lambda g, c: (g.fold == 1) | (g.seq == 1),
      lambda l, c: (f"expert_tensor=1 with seq={l.seq}: parex folds only the tensor axis into "
                    f"the expert group, not context parallelism's; drop expert_tensor or use "
                    f"seq=1"))
_rule(RULES, "moe-top-k", lambda g, c: not c.model.moe or 1 <= c.model.top_k <= c.model.experts,
      lambda l, c: (f"top_k={c.model.top_k} with {c.model.experts} experts: each token goes to "
                    f"between 1 and experts={c.model.experts} experts"))
_rule(RULES, "moe-capacity",
      lambda g, c: not c.model.moe or c.model.capacity_factor is None
      or c.model.capacity_factor > 0,
      lambda l, c: (f"capacity_factor={c.model.capacity_factor}: an expert's capacity "
                    f"ceil(cf·k·T/E) needs cf > 0 (1.0 to 2.0 is usual), or None for dropless"))
_rule(RULES, "moe-experts-over-expert", lambda g, c: c.model.experts % g.ep == 0,
      lambda l, c: (f"experts={c.model.experts} is not divisible by expert={l.expert}: expert "
                    f"parallelism gives every device experts/expert whole experts; choose "
                    f"expert from {divisors(c.model.experts)}" if not l.folds_experts else
                    f"experts={c.model.experts} is not divisible by EP = expert × tensor = "
                    f"{l.expert_parallel} (expert_tensor=1 folds tensor into the expert group); "
                    f"choose expert × tensor from {divisors(c.model.experts)}"))
_rule(RULES, "moe-expert-ffn-tensor", lambda g, c: c.model.expert_ffn % g.expert_tensor == 0,
      lambda l, c: (f"expert_ffn={c.model.expert_ffn} is not divisible by tensor={l.tensor}: "
                    f"each expert's MLP width is split over the tensor axis; choose tensor from "
                    f"{divisors(c.model.expert_ffn)}"))

VALID_RULES = tuple(RULES)

# --- what parex's executor cannot run yet (the predictor covers them) ---------------------------
LIMITS: list[Rule] = []
_rule(LIMITS, "stacked-layers-per-stage",
      lambda g, c: c.model.layers % _safe(g.stage) == 0,
      lambda l, c: (f"layers={c.model.layers} is not a multiple of stage={l.stage}: parex's "
                    f"executor stores the stacked layers' parameters and optimizer state split "
                    f"evenly over the stage axis (a partition only sets which stage computes "
                    f"which layers)"))
_rule(LIMITS, "state-shards-by-dim", lambda g, c: c.model.hidden % g.embed_shards("opt") == 0,
      lambda l, c: (
          f"hidden={c.model.hidden} is not divisible by the {l.shard_count('embed', 'opt')} "
          f"data × fsdp shards of zero={l.zero}: parex's executor splits each weight's state "
          f"along D, where Megatron-LM's distributed optimizer pads a flat buffer (predicted "
          f"only); to run it choose data × fsdp from {divisors(c.model.hidden)}"))
_rule(LIMITS, "tied-embeddings-in-stages",
      lambda g, c: (not c.model.tied_embeddings) | (g.stage == 1),
      lambda l, c: (f"tied_embeddings with stage={l.stage}: the first and last stages both read "
                    f"the token table, and parex's pipeline does not yet keep Megatron-LM's copy "
                    f"on the last stage (predicted only); untie them, or fold the stages into "
                    f"data"))
_rule(LIMITS, "sliding-window-ring",
      lambda g, c: (c.model.sliding_window is None) | (g.seq == 1) | (g.cp != RING),
      lambda l, c: (f"sliding_window={c.model.sliding_window} with cp=ring: parex's ring "
                    f"attention has no window mask (predicted only); use cp=ulysses, which "
                    f"attends whole sequences locally"))
_rule(LIMITS, "tables-split-over-stages",  # without stages: state-shards-by-dim's
      lambda g, c: (g.stage == 1) | (c.model.hidden % _safe(g.embed_shards("opt") * g.stage) == 0),
      lambda l, c: (f"hidden={c.model.hidden} is not divisible by the "
                    f"{l.shard_count('embed', 'opt') * l.stage} shards that parex's executor "
                    f"cuts the embedding and head into over the pipeline's stage={l.stage} (and "
                    f"fsdp/ZeRO) axes; choose sizes whose product divides {c.model.hidden}"))


def local_fold(l: Layout) -> Layout:
    """The nearest layout parex's local-learning executor runs: seq folded into data (sp and cp
    off), ZeRO-2/3 down to ZeRO-1, an even split of the layers. data, fsdp and tensor compose
    inside local stages (parallel.local: data and fsdp manual, tensor XLA's)."""
    return l.replace(data=l.data * l.seq, seq=1, zero=min(l.zero, 1), sp=False, cp="none",
                     layers_per_stage=None)


def _local_unsupported(l: Layout) -> str:
    return ", ".join(k for k, on in (("seq", l.seq > 1), ("sp", l.sp),
                                     (f"zero={l.zero}", l.zero > 1),
                                     ("an explicit partition", l.layers_per_stage is not None))
                     if on)


_rule(LIMITS, "local-in-stage",
      lambda g, c: ((g.schedule != LOCAL_CODE) | ((g.seq == 1) & (g.sp == 0) & (g.zero <= 1)
                                                  & (g.partition_n == 0))),
      lambda l, c: (f"parex's schedule=local executor runs data, fsdp, tensor and zero=1 inside "
                    f"stages, not {_local_unsupported(l)}"))  # checks adds local_fold's layout
_rule(LIMITS, "moe-composes", lambda g, c: not c.model.moe or (g.stage == 1),
      lambda l, c: ("parex's executor runs a mixture of experts with data, fsdp, ZeRO, tensor, "
                    "sp, seq and expert axes, not yet inside pipeline stages (the predictor "
                    "covers them)"))
_rule(LIMITS, "moe-fold-capacity",
      lambda g, c: not c.model.moe or (routing.capacity(c.model, c.T) % g.fold == 0),
      lambda l, c: (f"capacity C = {routing.capacity(c.model, c.T)} slots per expert and sequence "
                    f"is not divisible by tensor={l.tensor}: folded (expert_tensor=1) each "
                    f"tensor device sends C/tensor of the slots; change the capacity factor or "
                    f"the sequence length so that tensor divides C"))


def _fp8(c) -> bool:
    return c.train.precision is not None and PRECISIONS[c.train.precision].fp8


def _fp8_unsupported(l: Layout, c) -> str:
    return ", ".join(k for k, on in (("a mixture of experts", c.model.moe), ("stage", l.stage > 1),
                                     ("seq", l.seq > 1), ("sp", l.sp), ("expert", l.expert > 1),
                                     ("microbatches", l.microbatches > 1)) if on)


# an FP8 recipe's amaxes must be global (the same scale on every shard, parex.model.fp8): XLA
# reduces them over the axes it partitions (data, fsdp, tensor, ZeRO), not inside parex's manual
# regions (pipeline stages, ring/Ulysses, SP's collectives, expert dispatch, the per-replica
# accumulation loop); delayed scaling updates its histories once per step, from one microbatch
_rule(LIMITS, "fp8-global-amax",
      lambda g, c: not _fp8(c) or ((g.stage == 1) & (g.seq == 1) & (g.sp == 0) & (g.expert == 1)
                                   & (g.microbatches == 1) & (not c.model.moe)),
      lambda l, c: (f"precision {c.train.precision}: parex's executor runs FP8 on data, fsdp, "
                    f"tensor and ZeRO layouts of dense models with one microbatch, not with "
                    f"{_fp8_unsupported(l, c)}; run it with --precision bf16, or predict it"))
EXECUTOR_LIMITS = tuple(LIMITS)



# --- AxoNN's 3D tensor parallelism (tensor=XxYxZ, parex.parallel.tensor3d) ----------------------
# Layout-level checks: a Grid has no Y or Z columns, so the column rules see a 3D layout with
# tensor=1 (parex.validation.checks.LayoutValues) and these run after them.

def tensor3d_problem(l: Layout, c: Context) -> str | None:
    """Why a 3D layout is not a real program for this model and batch (None: it is)."""
    X, Y, Z, m = l.tensor, l.tensor_y, l.tensor_z, c.model
    if m.vision:
        return (f"tensor={X}x{Y}x{Z} on the vision transformer {m.name}: parex's 3D tensor "
                f"program and its predictor split a language model's read-in and head only; use "
                f"tensor={X * Y * Z} (Megatron's split) or data/fsdp")
    if l.folds_experts:
        return (f"expert_tensor={l.expert_tensor} with tensor={X}x{Y}x{Z}: parex folds Megatron's "
                f"1D tensor axis into the expert group, which a 3D split does not have; drop "
                f"expert_tensor")
    if l.sp:
        return (f"sp=on with tensor={X}x{Y}x{Z}: AxoNN's 3D split keeps no sequence-parallel "
                f"region (Z already splits the batch); the nearest layout that runs is "
                f"{l.replace(sp=False)}")
    for name in ("kv_heads", "ffn", "vocab"):
        if getattr(m, name) % Y:
            what = ("whole KV heads (each with its query heads) sit on one Y device"
                    if name == "kv_heads" else f"{name} is the out dim split over Y")
            return (f"{name}={getattr(m, name)} is not divisible by Y={Y} of tensor={X}x{Y}x{Z}:"
                    f" {what}; choose Y from {divisors(getattr(m, name))}"
                    + nearest_3d_hint(l, c))
    if m.hidden % (X * Z):
        return (f"hidden={m.hidden} is not divisible by X × Z = {X * Z} of tensor={X}x{Y}x{Z}: "
                f"every weight's D is split over X, its block again over Z; choose X × Z from "
                f"{divisors(m.hidden)}" + nearest_3d_hint(l, c))
    rows = l.data_parallel * Z * num_microbatches(l, c.train)
    if c.train.global_batch % rows:
        return (f"global batch {c.train.global_batch} is not divisible by data × Z × "
                f"microbatches = {rows}: the 3D layout splits the batch over data × Z; use a "
                f"multiple of {rows}")
    return None


def nearest_3d(l: Layout, c: Context) -> Layout | None:
    """The data × tensor=XxYxZ layout on the available devices that tensor3d_problem accepts
    and that is closest to l (the sum of |log2| of the ratios of data, X, Y and Z), inside l's
    pipeline stages when the devices and layers split over them."""
    n, m, B = c.n_devices or l.n_devices, c.model, c.train.global_batch
    p = l.stage if n % l.stage == 0 and m.layers % l.stage == 0 else 1
    micro = num_microbatches(l, c.train) if p > 1 else 1
    best, key = None, None
    for X in divisors(n // p):
        for Y in divisors(n // (p * X)):
            for Z in divisors(n // (p * X * Y)):
                data = n // (p * X * Y * Z)
                if (Y == Z == 1 or m.hidden % (X * Z) or B % (data * Z * micro)
                        or any(getattr(m, k) % Y for k in ("kv_heads", "ffn", "vocab"))):
                    continue
                mine = (data, X, Y, Z)
                theirs = (l.data * l.fsdp * l.seq * l.stage // p, l.tensor, l.tensor_y,
                          l.tensor_z)
                cost = (sum(abs(np.log2(a / b)) for a, b in zip(mine, theirs)), data)
                if key is None or cost < key:
                    best, key = Layout(data=data, tensor=X, tensor_y=Y, tensor_z=Z), cost
    if best is None or p == 1:
        return best
    return best.replace(stage=p, schedule=l.schedule, virtual_stages=l.virtual_stages,
                        microbatches=l.microbatches, layers_per_stage=l.layers_per_stage)


def nearest_3d_hint(l: Layout, c: Context) -> str:
    """"; the nearest 3D layout that runs is ..." for a 3D layout (empty otherwise)."""
    near = nearest_3d(l, c) if l.tensor3d else None
    return f"; the nearest 3D layout that runs is {near}" if near is not None else ""


def tensor3d_limit(l: Layout, c: Context) -> str | None:
    """What parex's 3D executor does not compose with yet, and the nearest layout that runs:
    data, fsdp (each weight's block gathered over Z·fsdp), ZeRO-1/2/3 over data (ZeRO-1 the
    optimizer state's D split over data too, ZeRO-2 the gradients', ZeRO-3 the weights', which
    are then gathered over Z·data as fsdp's are) and pipeline stages (X, Y and Z manual in the
    pipeline's shard_map, parallel.pipeline.ManualAxes) do; ZeRO beside fsdp does not, nor
    more than one microbatch outside a pipeline."""
    both = l.fsdp > 1 and l.zero > 0
    near = l.replace(data=l.data * l.seq, seq=1, zero=0 if l.fsdp > 1 else l.zero, sp=False,
                     cp="none", microbatches=l.microbatches if l.stage > 1 else 1)
    # ZeRO beside fsdp splits the state over data between X·Z and fsdp: a reshuffle, not an
    # all-gather
    m = num_microbatches(l, c.train)
    unsupported = [k for k, on in (("a mixture of experts", c.model.moe),
                                   ("seq", l.seq > 1),
                                   (f"zero={l.zero} beside fsdp", both),
                                   (f"microbatches={m} without pipeline stages",
                                    l.stage == 1 and m > 1)) if on]
    X, Y, Z = l.tensor, l.tensor_y, l.tensor_z
    if unsupported:
        return (f"{', '.join(unsupported)} with tensor={X}x{Y}x{Z}: parex's 3D tensor "
                f"executor runs beside data parallelism with fsdp or ZeRO (not the two "
                f"together) and pipeline stages, with one microbatch outside a pipeline; the "
                f"nearest layout that runs is {near}")
    shards = l.shard_count("embed", "opt")  # X·Z·fsdp, ·data under ZeRO
    if c.model.hidden % shards:
        plain = l.replace(data=l.data * l.fsdp, fsdp=1, zero=0)
        return (f"tensor={X}x{Y}x{Z} with fsdp={l.fsdp}, zero={l.zero}: hidden="
                f"{c.model.hidden} is not divisible by the {shards} shards of the state's D; "
                f"the nearest layout that runs is {plain}")
    return None


__all__ = ["Context", "EXECUTOR_LIMITS", "Rule", "VALID_RULES", "tensor3d_limit",
           "tensor3d_problem"]
