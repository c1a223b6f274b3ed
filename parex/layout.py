"""The Layout: how one training step is spread over a device mesh, as a value.

This is the only module that spells mesh-axis names. The model names logical dims (batch, seq,
embed, heads, ...); `Layout.rules(kind)` maps them onto mesh axes, and `Layout.spec(dims, kind)` turns a
tuple of dims into a PartitionSpec. In the scaling book's notation the presets place, for example,
    dp      W_in[D, F]                    x[B_data, T, D]
    fsdp    W_in[D_fsdp, F]               x[B_fsdp, T, D]
    tp      W_in[D, F_tensor]             x[B, T, D]    (all-reduce after W_out)
    tp_sp   W_in[D, F_tensor]             x[B, T_tensor, D] in the LayerNorm regions
    3D      W_in[D_XZ, F_Y], W_out[F_Y, D_XZ]  x[B_{data,Z}, T, D]   (tensor=XxYxZ, AxoNN)
    moe     W_e[E_expert, D, F_e,tensor]  x_e[B_{data,expert}, E, C, D]   (expert=N)
    folded  W_e[E_{expert,tensor}, D, F_e]  x_e[B_{data,expert}, E, C_tensor, D]  (expert_tensor=1)
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

import numpy as np
from jax.sharding import PartitionSpec

from .config import DTYPES, REMAT_POLICIES, OuterOptimizer, TrainConfig
from .errors import did_you_mean, unknown


class Axis(str, enum.Enum):
    """Mesh axes. The mesh always has all of them (size 1 when unused), outermost first."""

    REPLICA = "replica"  # DiLoCo replicas: no traffic between them but the outer sync
    STAGE = "stage"  # pipeline stages
    DATA = "data"  # replicas of the model state (partitioned only as far as ZeRO says)
    FSDP = "fsdp"  # data parallel with parameters, gradients and optimizer state sharded
    # Expert parallelism (parex.model.moe): carved out of the data-parallel devices, as Megatron-LM and
    # torchtitan do. The batch is split over it like data; a mixture of experts' routed experts
    # are split over it, and tokens reach them by all-to-all. Inside data/fsdp: EP groups sit on
    # nearer devices than the gradients' all-reduce. Folded (Layout.expert_tensor=1) the expert
    # group is expert × tensor (MoE parallel folding).
    EXPERT = "expert"
    SEQ = "seq"  # context parallelism: the sequence split across devices
    # AxoNN's 3D tensor parallelism (parex.parallel.tensor3d) adds two axes inside seq: Z, the
    # depth group Gd (weights sharded again, the batch split), and Y, the outer group Gr. Its
    # inner group Gc (X) is `tensor`: innermost like Megatron's, so the 1D layouts keep their
    # mesh and PartitionSpecs, and X gets the fastest links as in AxoNN.
    TENSOR_Z = "tensor_z"
    TENSOR_Y = "tensor_y"
    TENSOR = "tensor"  # Megatron tensor parallelism; X of a 3D layout (innermost: fastest links)


MESH_AXES = tuple(Axis)
CP_MODES = ("none", "ring", "ulysses")  # attention across seq shards (parex.parallel.context)
OUTER_DTYPES = ("f32", "bf16", "int8", "int4")  # DiLoCo's exchange (int: per-block scales)
LOCAL_LOSSES = ("ce", "recon")  # schedule=local's objectives (parex.parallel.local)
# The ZeRO stage at which each kind of model state becomes sharded over the data axis.
ZERO_STAGE_SHARDING = {"opt": 1, "grad": 2, "param": 3}
# The dims along which model state is partitioned over the state axes (`Layout.state_axes`:
# fsdp, and data as far as the ZeRO stage says): a weight's D (`embed`, a routed expert's
# `expert_embed`) and the D of the norms' scales and the D-sized biases (`hidden`). ZeRO
# (Rajbhandari et al. 2020, arXiv:1910.02054, §5) and PyTorch FSDP's flat parameters partition
# every parameter, so the 1-D ones are split too; D is one size for all of them, and validation
# already asks the state shards to divide it. The few leaves with none of these dims (GPT's
# QKV and MLP-input biases, whose dims are split over tensor; a MoE router's bias) stay
# replicated in parex's step (parex.predict.memory counts them so; the ideal program's flat
# buffer partitions them too). AxoNN's 3D rules keep `hidden` whole, as AxoNN does.
STATE_DIMS = ("embed", "expert_embed", "hidden")


def state_dim(dims) -> int | None:
    """The index of the dim along which the state axes split a leaf of dims `dims` (STATE_DIMS;
    a leaf has at most one), or None for a leaf they leave whole."""
    found = [i for i, d in enumerate(dims) if d in STATE_DIMS]
    return found[0] if found else None


def is_dims(x) -> bool:
    """Whether x is a tuple of logical dim names (None: a dim no axis splits), a leaf of
    parex.model.transformer.param_dims."""
    return isinstance(x, tuple) and all(d is None or isinstance(d, str) for d in x)


def spec_axes(entry) -> tuple:
    """The mesh axes of one PartitionSpec entry (None, a name or a tuple of names)."""
    return () if entry is None else entry if isinstance(entry, tuple) else (entry,)


def divisors(n: int) -> list[int]:
    """The sizes an axis of n may take: every d that divides n, ascending."""
    return [d for d in range(1, n + 1) if n % d == 0]


def grads_split_over_seq(ring, seq, stage, sp, fsdp, zero, hidden):
    """Where parex's step keeps the blocks' weight gradients split over seq in the backward
    (parex.executor.step.TrainStep.grads_sharded_over_seq): ring attention without a pipeline, sp, fsdp
    or ZeRO-2/3 (those shard or reduce the gradients themselves), and an embed dim that seq
    divides. One rule for a Layout's fields and for the predictor's columns of them."""
    return (ring & (seq > 1) & (stage == 1) & (sp == 0) & (fsdp == 1) & (zero < 2)
            & (hidden % seq == 0))


def fsdp_by_hand(fsdp, zero, sp, seq):
    """Whether a pipeline runs fsdp as a manual axis (parex.parallel.fsdp_stage): ZeRO < 3 (the
    data axis does not shard the weights too), and no SP or seq, whose nested regions gather
    the weight shards themselves. Layout fields or the predictor's columns of them."""
    return (fsdp > 1) & (zero < 3) & (sp == 0) & (seq == 1)


def partitioned_inside_stages(tensor, seq, fsdp, data, zero):
    """Whether XLA's partitioner splits values inside a pipeline stage (parex.parallel.pipeline
    keeps stage manual, data under ZeRO < 3 and fsdp where `fsdp_by_hand`): over tensor or seq,
    or over fsdp and data under ZeRO-3 (fsdp with SP or seq comes with tensor or seq > 1).
    Layout fields or the predictor's columns of them."""
    return (tensor > 1) | (seq > 1) | (((fsdp > 1) | (data > 1)) & (zero >= 3))


class LayoutError(ValueError):
    """An impossible layout; the message names the problem and the fix."""


# An engine met a pipeline whose schedule is still None: a caller's bug, not a user's input.
UNRESOLVED_SCHEDULE = ("a pipeline with no schedule reached an engine: resolve the layout first "
                       "(parex.setting.resolve fills the regime's default)")


@dataclass(frozen=True)
class Layout:
    """Mesh axis sizes and the per-technique switches. Build with keywords, `Layout.parse`
    (`"data=2,tensor=4,zero=1,sp=on"`) or `Layout.preset(name, n_devices)`."""

    data: int = 1  # data-parallel replicas
    fsdp: int = 1  # fully sharded data parallel (ZeRO-3 on this axis)
    expert: int = 1  # expert-parallel size: routed experts split, the batch split too
    expert_tensor: int | None = None  # ETP, the tensor ranks that split one expert's width
    # (Megatron-Core's --expert-tensor-parallel-size): None is tensor (each expert's F_e split
    # over the tensor axis); 1 folds the tensor axis into the expert group instead (MoE
    # parallel folding, Liu et al. 2025, arXiv:2504.14960): experts split over expert x tensor
    tensor: int = 1  # tensor-parallel size t; X of a 3D layout, written tensor=XxYxZ
    tensor_y: int = 1  # Y, AxoNN's outer group of a 3D layout (1: Megatron's 1D tensor axis)
    tensor_z: int = 1  # Z, AxoNN's depth group of a 3D layout
    seq: int = 1  # context-parallel size
    stage: int = 1  # pipeline stages p
    zero: int = 0  # ZeRO stage on the data axis: 1 optimizer state, 2 + gradients, 3 + parameters
    sp: bool = False  # Megatron sequence parallelism in the LayerNorm regions (needs tensor > 1)
    cp: str = "none"  # context parallelism on the seq axis: none, ring, ulysses
    schedule: str | None = None  # pipeline schedule: gpipe, 1f1b, interleaved, zbh1, bfs, zbv,
    # local; None: the regime's default (parex.defaults.default_schedule, filled by
    # parex.setting) for a pipeline, and nothing to name without one
    virtual_stages: int = 1  # v, model chunks per pipeline device (interleaved, bfs); key `virtual`
    microbatches: int = 1  # m, microbatches per step (gradient accumulation, pipeline fill)
    layers_per_stage: tuple[int, ...] | None = None  # layers per chunk (3, 1); key `partition`,
    # written 3:1, or with repeats: 7:8*14:7 is 7, fourteen 8s, 7 (Llama 3 405B's 16 stages)
    # --- local learning (schedule=local, parex.parallel.local) ----------------------------------
    local_loss: str = "ce"  # each stage's own objective: ce, recon (LOCAL_LOSSES)
    queue: int = 1  # q, activations in flight between neighbouring stages (staleness)
    # --- low-communication training (DiLoCo, parex.lowcomm.diloco) ---------------------------
    replica: int = 1  # R model replicas on the outermost axis, synchronised every H steps
    inner_steps: int = 1  # H, inner AdamW steps of each replica between outer synchronisations
    outer: OuterOptimizer = OuterOptimizer()  # the outer Nesterov SGD's settings (an optimizer
    # config, parex.config.OuterOptimizer), written as the keys outer_lr and outer_momentum
    fragments: int = 1  # streaming: P fragments of the layer stack synced in turn, H/P steps apart
    outer_dtype: str = "f32"  # the exchanged pseudo-gradients: f32, bf16, int8, int4
    overlap: bool = False  # one-step delay: round k's outer update lands after round k+1

    def __post_init__(self):
        # ETP = TP is Megatron's default and parex's unfolded layout: one value for one layout
        if self.expert_tensor == self.tensor:
            object.__setattr__(self, "expert_tensor", None)

    # --- the mesh ------------------------------------------------------------------------
    def axis_sizes(self) -> dict[Axis, int]:
        return {axis: getattr(self, axis.value) for axis in MESH_AXES}

    @property
    def n_devices(self) -> int:
        n = 1
        for size in self.axis_sizes().values():
            n *= size
        return n

    @property
    def diloco(self) -> bool:
        """Whether this is a DiLoCo layout: replicas that synchronise every `inner_steps`."""
        return self.replica > 1 or self.inner_steps > 1

    @property
    def tensor3d(self) -> bool:
        """Whether this is an AxoNN 3D tensor layout (`tensor=XxYxZ`, Y or Z above 1)."""
        return self.tensor_y > 1 or self.tensor_z > 1

    @property
    def data_parallel(self) -> int:
        """Number of model replicas that each see a different slice of the batch (expert
        parallelism's devices are data-parallel for everything but the routed experts)."""
        return self.data * self.fsdp * self.expert

    @property
    def folds_experts(self) -> bool:
        """MoE parallel folding (Liu et al. 2025, arXiv:2504.14960): the attention runs TP × DP
        and the experts ETP × EP × EDP on the same devices. parex folds whole axes: with
        expert_tensor=1 the routed experts are split over expert × tensor (each expert whole),
        not E over expert and F_e over tensor."""
        return self.expert_tensor is not None

    @property
    def expert_axes(self) -> tuple[Axis, ...]:
        """The expert group's axes, over which the routed experts are split and the dispatch
        all-to-all runs (EP of Megatron-Core's ETP × EP × EDP)."""
        return (Axis.EXPERT, Axis.TENSOR) if self.folds_experts else (Axis.EXPERT,)

    @property
    def expert_parallel(self) -> int:
        """EP, the size of the expert group: expert, × tensor when folded."""
        return self.expert * (self.tensor if self.folds_experts else 1)

    @property
    def batch_split(self) -> int:
        """How many slices the batch is cut into: the data-parallel replicas, and a 3D layout's
        depth groups Z, which split it too (AxoNN's Gd)."""
        return self.data_parallel * self.tensor_z

    # --- logical dims -> mesh axes ----------------------------------------------------------
    def state_axes(self, kind: str) -> tuple[Axis, ...]:
        """Axes over which model state of `kind` ("param", "grad", "opt") is sharded."""
        axes = (Axis.DATA,) if self.zero >= ZERO_STAGE_SHARDING[kind] else ()
        return axes + (Axis.FSDP,)

    def rules(self, kind: str = "param") -> dict[str, tuple[Axis, ...]]:
        """The one table that maps logical dims to mesh axes. `kind` is "param", "grad" or
        "opt" for model state, "act" for activations."""
        if self.tensor3d:
            return self._rules_3d(kind)
        tensor, data_axes = (Axis.TENSOR,), (Axis.DATA, Axis.FSDP, Axis.EXPERT)
        return {
            "batch": data_axes,
            "seq": (Axis.SEQ,),
            "seq_res": (Axis.SEQ,) + (tensor if self.sp else ()),  # residual / LayerNorm region
            "hidden": self.state_axes(kind) if kind != "act" else (),  # norms, D-sized biases
            "embed": self.state_axes(kind) if kind != "act" else (),
            "heads": tensor,
            "kv_heads": tensor,
            "head_dim": (),
            "mlp": tensor,
            "vocab": tensor,
            "layers": (Axis.STAGE,),
            # a mixture of experts' routed experts (parex.model.moe): E over the expert group
            # (expert, and tensor when folded), their own D sharded as `embed` (the expert axis
            # already splits them), F_e over tensor unless it is folded into the group; folded,
            # the dispatch buffer's C slots are split over tensor (its devices hold the same
            # tokens: each sends its share of the slots, as Megatron's SP splits the tokens);
            # under seq (never folded: validation) they are split over seq, each seq device
            # running the experts on C/s of them (MeshOps.dispatch), not all s on all C
            "experts": self.expert_axes,
            "expert_embed": self.state_axes(kind) if kind != "act" else (),
            "expert_mlp": () if self.folds_experts else tensor,
            "capacity": tensor if self.folds_experts else (Axis.SEQ,),
        }

    def _rules_3d(self, kind: str) -> dict[str, tuple[Axis, ...]]:
        """AxoNN's 3D split (parex.parallel.tensor3d): every linear W[in, out] is W[D_X, F_Y]
        or, transposed for the second of a pair, W[F_Y, D_X], its block sharded again over Z
        along D (W_in[D_XZ, F_Y] at rest); the batch is split over data × Z; activations
        between the pairs (the residual, norms, attention) hold D whole and heads over Y."""
        y = (Axis.TENSOR_Y,)
        return {
            "batch": (Axis.DATA, Axis.FSDP, Axis.TENSOR_Z),
            "seq": (Axis.SEQ,),
            "seq_res": (Axis.SEQ,),
            "hidden": (),  # norms and D-sized biases: whole, as AxoNN keeps them
            # state: ZeRO's data axis (state_axes) after X and Z, as in the 1D rules
            "embed": (Axis.TENSOR, Axis.TENSOR_Z) + self.state_axes(kind) if kind != "act" else (),
            "heads": y,
            "kv_heads": y,
            "head_dim": (),
            "mlp": y,
            "vocab": y,
            "layers": (Axis.STAGE,),
            "capacity": (),
        }

    def spec(self, dims: tuple[str | None, ...], kind: str = "act") -> PartitionSpec:
        """PartitionSpec for a tensor whose dims are named `dims` (None = never sharded)."""
        rules, used = self.rules(kind), set()
        entries = []
        for dim in dims:
            # an axis splits one dim of a leaf: the first of its STATE_DIMS (state_dim), where
            # a leaf has two (local learning's recon decoder, W[D_embed, D_hidden])
            axes = tuple(a.value for a in rules[dim]
                         if self.axis_sizes()[a] > 1 and a.value not in used) if dim else ()
            used.update(axes)
            entries.append(None if not axes else axes[0] if len(axes) == 1 else axes)
        return PartitionSpec(*entries)

    def storage_spec(self, dims: tuple[str | None, ...], kind: str) -> PartitionSpec:
        """How model state of `kind` is stored between steps: `spec`, except that state
        without a layers dim (the embedding and head) is also split over the pipeline's stages
        along its embed dim, so that it falls with p as the blocks' does (the pipeline gathers
        it for the step)."""
        if "layers" in dims or "embed" not in dims or self.stage == 1:
            return self.spec(dims, kind)
        entries, i = list(self.spec(dims, kind)), dims.index("embed")
        axes = () if entries[i] is None else (entries[i],) if isinstance(entries[i], str) else \
            tuple(entries[i])
        entries[i] = (*axes, Axis.STAGE.value) if axes else Axis.STAGE.value
        return PartitionSpec(*entries)

    def shard_count(self, dim: str, kind: str = "act") -> int:
        """How many pieces `dim` is cut into."""
        n = 1
        for axis in self.rules(kind)[dim]:
            n *= self.axis_sizes()[axis]
        return n

    # --- string form ---------------------------------------------------------------------------
    def __str__(self) -> str:
        parts = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in _FOLDED_INTO_TENSOR:
                continue
            if f.name == "tensor" and self.tensor3d:
                parts.append(f"tensor={self.tensor}x{self.tensor_y}x{self.tensor_z}")
            elif f.name == "outer":
                parts += [f"{key}={_format(getattr(value, name))}"
                          for key, name in _OUTER_KEYS.items()
                          if getattr(value, name) != getattr(OuterOptimizer(), name)]
            elif value != f.default:
                parts.append(f"{_KEY_OF_FIELD.get(f.name, f.name)}={_format(value)}")
        return ",".join(parts) or "single"

    @classmethod
    def parse(cls, text: str, n_devices: int | None = None) -> "Layout":
        """`"data=2,tensor=4,zero=1,sp=on"`, or a preset name (which needs `n_devices`)."""
        text = text.strip()
        if text in ("", "single"):
            return cls()
        if text in LAYOUT_PRESETS:
            if n_devices is None:
                raise LayoutError(f"layout preset {text!r} needs a device count")
            return cls.preset(text, n_devices)
        fields = {_KEY_OF_FIELD.get(f.name, f.name): f for f in dataclasses.fields(cls)
                  if f.name not in _FOLDED_INTO_TENSOR}
        keys = [k for name in fields for k in (_OUTER_KEYS if name == "outer" else (name,))]
        values, outer = {}, {}
        for item in text.split(","):
            key, sep, raw = item.partition("=")
            key = key.strip()
            if not sep or key not in keys:
                raise LayoutError(_unreadable(item, text, key if sep else item.strip(), keys))
            if key in _OUTER_KEYS:  # the outer optimizer's settings, into their own config
                outer[_OUTER_KEYS[key]] = _parse_value(key, raw.strip(), "float")
                continue
            if key == "tensor" and "x" in raw.lower():
                values |= _parse_tensor3d(raw.strip())
                continue
            values[fields[key].name] = _parse_value(key, raw.strip(), fields[key].type)
        return cls(**values, **({"outer": OuterOptimizer(**outer)} if outer else {}))

    @classmethod
    def preset(cls, name: str, n_devices: int) -> "Layout":
        if name not in LAYOUT_PRESETS:
            raise LayoutError(unknown("layout preset", name, LAYOUT_PRESETS))
        return LAYOUT_PRESETS[name](n_devices)

    def replace(self, **changes) -> "Layout":
        return dataclasses.replace(self, **changes)


# Short keys of the string form, where they differ from the field names.
_KEY_OF_FIELD = {"virtual_stages": "virtual", "layers_per_stage": "partition"}
# The string form's keys of the `outer` field's settings (OuterOptimizer's fields).
_OUTER_KEYS = {"outer_lr": "lr", "outer_momentum": "momentum"}


def _unreadable(item: str, text: str, word: str, keys) -> str:
    """Why `item` of layout `text` cannot be read, with the nearest key (or, for an item
    without '=', the nearest key or preset name) to `word`."""
    hint = did_you_mean(word, [*keys, *LAYOUT_PRESETS] if "=" not in item else keys)
    return (f"cannot read {item!r} in layout {text!r}: {hint + ' ' if hint else ''}write "
            f"key=value pairs with keys from {', '.join(keys)}, or a preset name "
            f"({', '.join(LAYOUT_PRESETS)})")


# Fields the string form writes inside `tensor=XxYxZ`, never as keys of their own.
_FOLDED_INTO_TENSOR = ("tensor_y", "tensor_z")


def _parse_tensor3d(raw: str) -> dict[str, int]:
    """`XxYxZ` -> the tensor, tensor_y and tensor_z fields (AxoNN's inner, outer, depth)."""
    parts = raw.lower().split("x")
    try:
        sizes = [int(p) for p in parts]
    except ValueError:
        sizes = []
    if len(sizes) != 3 or min(sizes) < 1:
        raise LayoutError(f"tensor={raw!r}: write one size (tensor=4, Megatron's 1D split) or "
                          f"three (tensor=XxYxZ, AxoNN's 3D split, e.g. tensor=2x2x2)")
    X, Y, Z = sizes
    if Y == Z == 1:
        raise LayoutError(f"tensor={raw!r} has neither a Y nor a Z group: write tensor={X} "
                          f"(Megatron's 1D split, which moves the same bytes as 1x{X}x1), or "
                          f"give Y or Z a size above 1")
    return {"tensor": X, "tensor_y": Y, "tensor_z": Z}


def _format(value) -> str:
    if isinstance(value, tuple):
        return _format_parts(value)
    return "on" if value is True else "off" if value is False else str(value)


def _format_parts(parts: tuple[int, ...]) -> str:
    """3:1 as is; a run of three or more equal entries as `value*count` (7:8*14:7)."""
    items, i = [], 0
    while i < len(parts):
        j = i
        while j < len(parts) and parts[j] == parts[i]:
            j += 1
        items += [f"{parts[i]}*{j - i}"] if j - i >= 3 else [str(parts[i])] * (j - i)
        i = j
    return ":".join(items)


def _parse_parts(key: str, raw: str) -> tuple[int, ...]:
    """`3:1`, `7:8*14:7` (value*count repeats the value count times)."""
    parts = []
    for item in raw.split(":"):
        value, star, count = item.partition("*")
        try:
            value, count = int(value), int(count) if star else 1
        except ValueError:
            raise LayoutError(f"{key}={raw!r}: write whole numbers separated by ':', each "
                              f"optionally repeated with '*count', e.g. {key}=3:1 or "
                              f"{key}=7:8*14:7") from None
        if count < 1:
            raise LayoutError(f"{key}={raw!r}: a repeat count must be at least 1, not {count}")
        parts += [value] * count
    return tuple(parts)


def parse_partition(raw: str) -> tuple[int, ...]:
    """Layers per pipeline chunk written as the `partition` key takes them: `3:1`, `7:8*14:7`."""
    return _parse_parts("partition", raw)


def _parse_value(key: str, raw: str, annotation: str):
    if annotation == "bool":
        if raw.lower() in ("on", "true", "1", "yes"):
            return True
        if raw.lower() in ("off", "false", "0", "no"):
            return False
        raise LayoutError(f"{key}={raw!r}: write {key}=on or {key}=off")
    if annotation.startswith("tuple"):
        return _parse_parts(key, raw)
    if annotation == "float":
        try:
            return float(raw)
        except ValueError:
            raise LayoutError(f"{key}={raw!r}: {key} takes a number, e.g. {key}=0.7") from None
    if annotation in ("int", "int | None"):
        try:
            return int(raw)
        except ValueError:
            raise LayoutError(f"{key}={raw!r}: {key} takes a whole number, e.g. {key}=2") from None
    return raw


def _two_way(n: int, name: str) -> tuple[int, int]:
    """(2, n/2) for the two-axis presets."""
    if n < 4 or n % 2:
        raise LayoutError(f"layout preset {name!r} splits the devices as 2 × n/2 and needs an even "
                          f"count of at least 4, not {n}; use 'dp' or 'tp' instead")
    return 2, n // 2


LAYOUT_PRESETS = {
    "single": lambda n: Layout(),
    "dp": lambda n: Layout(data=n),
    "zero1": lambda n: Layout(data=n, zero=1),
    "zero2": lambda n: Layout(data=n, zero=2),
    "fsdp": lambda n: Layout(fsdp=n),
    "tp": lambda n: Layout(tensor=n),
    "tp_sp": lambda n: Layout(tensor=n, sp=True),
    "dp_tp": lambda n: Layout(data=_two_way(n, "dp_tp")[0], tensor=_two_way(n, "dp_tp")[1]),
    "fsdp_tp": lambda n: Layout(fsdp=_two_way(n, "fsdp_tp")[0], tensor=_two_way(n, "fsdp_tp")[1]),
}


# --- DiLoCo (parex.lowcomm): the replica axis and its keys ----------------------------------
# The Layout fields that only mean something for a DiLoCo layout (`outer`: the outer optimizer's
# settings, parex.config.OuterOptimizer), and their keys in the string form.
DILOCO_FIELDS = ("replica", "inner_steps", "outer", "fragments", "outer_dtype", "overlap")
DILOCO_KEYS = ("replica", "inner_steps", "outer_lr", "outer_momentum", "fragments",
               "outer_dtype", "overlap")


def inner_layout(layout: Layout) -> Layout:
    """The layout each replica runs: the same inner axes, no replica axis, no DiLoCo keys."""
    defaults = Layout()
    return layout.replace(**{name: getattr(defaults, name) for name in DILOCO_FIELDS})


def changed_diloco_keys(layout: Layout) -> list[str]:
    """The DiLoCo keys `layout`'s string form sets (those away from their defaults)."""
    keys = [item.partition("=")[0] for item in str(layout).split(",")]
    return [key for key in keys if key in DILOCO_KEYS]


def example_partition(layers: int, chunks: int) -> tuple[int, ...]:
    """An as-even-as-possible split of `layers` into `chunks`."""
    base, extra = divmod(layers, chunks)
    return tuple(base + (i < extra) for i in range(chunks))


def resolved_microbatches(m, dp, global_batch: int, microbatch: int | None):
    """The microbatch count, the one rule the executor and the predictor share: the layout's m,
    or B / (dp · b) when the layout leaves m at 1 and TrainConfig.microbatch sets b. Scalars or
    numpy columns (the predictor resolves a whole grid at once)."""
    if microbatch is None or microbatch < 1:
        return m
    implied = global_batch // np.maximum(dp, 1) // microbatch
    return np.where((m != 1) | (dp < 1), m, implied)


def num_microbatches(layout: Layout, train: TrainConfig) -> int:
    """m for one layout (resolved_microbatches; b is per slice of the batch: batch_split)."""
    return int(resolved_microbatches(layout.microbatches, layout.batch_split,
                                     train.global_batch, train.microbatch))


__all__ = ["Axis", "CP_MODES", "LOCAL_LOSSES", "OUTER_DTYPES", "Layout", "LayoutError",
           "LAYOUT_PRESETS", "MESH_AXES", "DTYPES", "REMAT_POLICIES", "example_partition",
           "fsdp_by_hand", "num_microbatches", "parse_partition", "resolved_microbatches"]
