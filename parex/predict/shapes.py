"""The numbers every predicted term reads: model sizes (once per model) and layouts as columns.

`Grid` holds N layouts as numpy columns (one entry per layout), so each formula in memory.py,
flops.py, comm.py and time.py is written once and runs on one layout or on a hundred thousand.

Parameter groups: every parameter of `parex.model.transformer.param_table` falls in one of eight groups by which
kinds of dim it has, and that decides how it is sharded (layout.rules):
    embed  -> fsdp, and data too once the ZeRO stage shards that kind of state   (W[D_fsdp, ...])
    tensor -> heads, kv_heads, mlp or vocab, split over the tensor axis           (W[..., F_tensor])
    layers -> the stacked blocks, split over pipeline stages
The norms' scales and the D-sized biases have no embed dim but are split along their D (`hidden`)
like one (layout.STATE_DIMS): `ModelSizes.vectors` counts them apart, inside the groups.
A mixture of experts' routed experts (parex.model.moe) are counted apart, in `ModelSizes.routed`, by
whether they have a dim the state axes split (expert_embed, or a bias's D) and an expert_mlp dim
(over tensor); all
of them are stacked blocks and split E over the expert axis: W_in[E_expert, D_fsdp, F_e,tensor].
Everything else in a MoE block (attention, norms, the router W_r[D_fsdp, E], shared experts) is
in `groups`, replicated over expert like any dense weight.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property, lru_cache

import jax
import numpy as np

from ..config import ModelConfig, TrainConfig
from ..layout import (CP_MODES, UNRESOLVED_SCHEDULE, Layout, resolved_microbatches,
                      state_dim)
from ..model.transformer import param_table
from ..model.moe.routing import slots
from ..parallel.schedules import ALL_SCHEDULES
from ..validation.checks import partition_stats

TENSOR_DIMS = ("heads", "kv_heads", "mlp", "vocab")
GROUPS = tuple((e, t, l) for e in (0, 1) for t in (0, 1) for l in (0, 1))  # (embed, tensor, layers)
ROUTED_GROUPS = tuple((e, t) for e in (0, 1) for t in (0, 1))  # (expert_embed, expert_mlp)


@dataclass(frozen=True)
class ModelSizes:
    """A ModelConfig's dimensions and its parameters counted per sharding group."""

    family: str
    L: int  # layers
    D: int  # hidden
    H: int  # query heads
    K: int  # kv heads
    Dh: int  # head dim
    F: int  # mlp width
    V: int  # vocab
    n_params: int
    groups: tuple[int, ...]  # parameters per GROUPS entry
    leaves: int  # parameter arrays (for the per-array costs of the optimizer)
    layer_params: int  # parameters of one block (a mixture's routed experts: routed_layer)
    hidden_params: int  # parameters with neither an embed nor a tensor dim (norms, biases on D;
    #                     routed experts' apart)
    # the norms' scales and D-sized biases (a `hidden` dim: the state axes split their D like
    # a weight's embed dim, layout.STATE_DIMS), routed experts' apart: (stacked over layers,
    # not) elements, and (stacked, not) leaves; the `groups` count them as unsharded
    vectors: tuple[int, int]
    vector_leaves: tuple[int, int]
    T_max: int  # the model's longest sequence (GPT's position table has T_max rows)
    embedding: tuple[int, int] = (0, 0)  # (token table, GPT's position table) parameters
    head: tuple[int, int] = (0, 0)  # (unembedding, final norm) parameters; tied: (0, norm)
    tied: bool = False  # the output layer reads the token table (ModelConfig.tied_embeddings)
    parallel: bool = False  # attention and MLP side by side (ModelConfig.parallel_block)
    window: int | None = None  # W, ModelConfig.sliding_window
    causal: bool = True  # a query sees only earlier keys (a ViT's sees all: ModelConfig.causal)
    readout_rows: int = 0  # rows of one sequence the head reads: 0 all T (a language model's
    # next-token logits), 1 for a ViT (its class token)
    # --- a mixture of experts (parex.model.moe); all 0 for a dense model -------------------------
    E: int = 0  # routed experts per block
    k: int = 0  # experts per token
    Fe: int = 0  # one expert's MLP width
    shared_F: int = 0  # the shared experts' MLP width, S·F_e (in `groups`, a dense MLP)
    capacity_factor: float | None = None  # None: dropless (C = T)
    routed: tuple[int, ...] = (0, 0, 0, 0)  # routed experts' parameters per ROUTED_GROUPS entry
    split_leaves: int = 0  # parameter arrays with a dim the state axes split (layout.state_dim)

    @property
    def n_mlp_in(self) -> int:
        """Matrices entering the MLP: one for GELU, two (gate and up) for SwiGLU."""
        return 1 if self.family == "gpt" else 2

    @property
    def moe(self) -> bool:
        return self.E > 0

    @property
    def routed_layer(self) -> int:
        """Routed experts' parameters of one block (all E experts)."""
        return sum(self.routed) // self.L

    def visible_keys(self, T) -> np.ndarray:
        """Keys a query sees on average under the causal mask: (T + 1)/2 ≈ T/2; under a window
        W ≤ T, Σ_t min(W, t + 1) / T = W − W(W − 1)/(2T); not causal (a ViT), all T. What a
        fused kernel that skips the masked blocks computes."""
        if not self.causal:
            return np.asarray(T) * 1.0
        if self.window is None:
            return np.asarray(T) / 2
        W = np.minimum(self.window, T)
        return W - W * (W - 1) / (2 * np.asarray(T))

    def capacity(self, T) -> np.ndarray:
        """C, slots per expert per sequence of T tokens (parex.model.moe.routing.capacity, as a
        column): ceil(cf·k·T/E), or T when dropless."""
        if not self.moe:
            return np.asarray(T) * 1
        return slots(self.capacity_factor, self.k, self.E, T)


def _is_entry(x) -> bool:
    return isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], tuple)


@lru_cache(maxsize=256)
def model_sizes(model: ModelConfig) -> ModelSizes:
    groups = dict.fromkeys(GROUPS, 0)
    routed = dict.fromkeys(ROUTED_GROUPS, 0)
    layer = hidden = 0
    vectors, vector_leaves, split_leaves = [0, 0], [0, 0], 0
    entries = jax.tree.leaves(param_table(model), is_leaf=_is_entry)
    for shape, dims in entries:
        n = int(np.prod(shape))
        if "experts" in dims:  # routed experts: stacked, E over expert; D split as state
            split_leaves += state_dim(dims) is not None
            routed[(int(state_dim(dims) is not None), int("expert_mlp" in dims))] += n
            continue
        split_leaves += state_dim(dims) is not None
        if "hidden" in dims:
            vectors["layers" not in dims] += n
            vector_leaves["layers" not in dims] += 1
        key = (int("embed" in dims), int(any(d in TENSOR_DIMS for d in dims)),
               int("layers" in dims))
        groups[key] += n
        layer += n // model.layers if "layers" in dims else 0
        hidden += n if key[:2] == (0, 0) else 0
    V, D = model.vocab, model.hidden
    positions = model.seq_len * D if model.family == "gpt" else 0
    read_in = model.patch_dim * D + 2 * D if model.vision else V * D  # ViT: E, e_b, x_cls
    final_norm = (2 if model.family == "gpt" else 1) * D
    moe = {"E": model.experts, "k": model.top_k, "Fe": model.expert_ffn,
           "shared_F": model.shared_experts * model.expert_ffn,
           "capacity_factor": model.capacity_factor,
           "routed": tuple(routed[g] for g in ROUTED_GROUPS)} if model.moe else {}
    return ModelSizes(model.family, model.layers, model.hidden, model.heads, model.kv_heads,
                      model.head_dim, model.ffn, model.vocab,
                      sum(groups.values()) + sum(routed.values()),
                      tuple(groups[g] for g in GROUPS), len(entries), layer, hidden,
                      tuple(vectors), tuple(vector_leaves),
                      model.seq_len, (read_in, positions),
                      (0 if model.tied_embeddings else D * V, final_norm),
                      tied=model.tied_embeddings, parallel=model.parallel_block,
                      window=model.sliding_window, causal=model.causal,
                      readout_rows=1 if model.vision else 0, split_leaves=split_leaves, **moe)


# Layout fields read as columns, and the integer codes of the string-valued ones.
_INT_FIELDS = ("data", "fsdp", "expert", "tensor", "seq", "stage", "zero", "virtual_stages")
_CP_CODE = {name: i for i, name in enumerate(CP_MODES)}
_SCHEDULE_CODE = {name: i for i, name in enumerate(ALL_SCHEDULES)}  # local last


@dataclass(frozen=True)
class Grid:
    """N layouts as columns, with the per-step quantities every formula needs."""

    data: np.ndarray
    fsdp: np.ndarray
    expert: np.ndarray  # expert parallelism (parex.model.moe): data-parallel but for routed experts
    tensor: np.ndarray
    seq: np.ndarray
    stage: np.ndarray
    zero: np.ndarray
    virtual_stages: np.ndarray
    sp: np.ndarray  # 0/1
    cp: np.ndarray  # index into CP_MODES
    schedule: np.ndarray  # index into SCHEDULES
    microbatches: np.ndarray  # m, layout.resolved_microbatches
    stage_layers: np.ndarray  # layers the busiest pipeline stage computes (all its chunks)
    partition_n: np.ndarray  # entries of an explicit partition (0: none, layers split evenly)
    partition_min: np.ndarray  # its smallest entry (0 without one)
    partition_sum: np.ndarray  # the layers it covers (0 without one)
    partition_max: np.ndarray  # its largest entry (0 without one)
    expert_tensor: np.ndarray  # ETP, the devices that split one expert's F_e: tensor, or 1 when
    # the tensor axis is folded into the expert group (Layout.folds_experts)
    B: int  # global batch (sequences per step)
    T: int  # tokens per sequence
    executor: bool = True  # the program parex's executor compiles (xla-cpu), not the ideal one
    splits_vectors: bool = True  # ZeRO's and FSDP's state axes split the norms and biases too
    # (layout.STATE_DIMS; the ideal program: every parameter); False: AxoNN's 3D program, which
    # keeps them whole (its 1D equivalent's grid, parex.predict.tensor3d.equivalent)
    flash: bool = False  # flash attention (parex.model.attention): no scores kept, lse per row
    heads_tensor: np.ndarray | None = None  # the devices that split the attention heads and the
    # MLP's hidden units between its matmuls (None: tensor); AxoNN's 3D program: Y, its X
    # devices hold them whole after each all-reduce over X (parallel.tensor3d)

    def __len__(self) -> int:
        return len(self.data)

    @property
    def dp(self) -> np.ndarray:
        """Replicas that each see a different slice of the batch."""
        return self.data * self.fsdp * self.expert

    @property
    def heads_split(self) -> np.ndarray:
        """How many ways one device's attention heads and MLP activations are split."""
        return self.tensor if self.heads_tensor is None else self.heads_tensor

    @property
    def fold(self) -> np.ndarray:
        """The tensor devices folded into the expert group: tensor / ETP (1: unfolded)."""
        return self.tensor // self.expert_tensor

    @property
    def ep(self) -> np.ndarray:
        """EP, the expert group's size (Layout.expert_parallel): expert × the folded tensor."""
        return self.expert * self.fold

    @property
    def n_devices(self) -> np.ndarray:
        return self.data * self.fsdp * self.expert * self.tensor * self.seq * self.stage

    @property
    def b(self) -> np.ndarray:
        """Sequences per microbatch per replica."""
        return self.B // (self.dp * self.microbatches)

    @property
    def tokens(self) -> np.ndarray:
        """Tokens one device's replica works on per microbatch: b · T / seq (before TP)."""
        return self.b * self.T // self.seq

    def zero_group(self, routed: bool = False) -> np.ndarray:
        """The devices ZeRO-1/2 cut the optimizer state (ZeRO-2 the gradients too) over.
        parex's step: data. The ideal program: Megatron-Core's distributed optimizer shards the
        dense parameters' state over the data-parallel group with context parallelism, which
        holds the expert ranks too (expert parallelism is carved out of data parallelism), and
        a mixture's routed experts' over the expert-data-parallel group
        (megatron/core/optimizer/__init__.py, get_megatron_optimizer: intra_dp_cp_group,
        intra_expt_dp_group): data × seq × expert, and data × seq for `routed`."""
        if self.executor:
            return self.data
        return self._data_seq if routed else self._data_seq_expert

    @cached_property
    def _data_seq(self) -> np.ndarray:
        return self.data * self.seq

    @cached_property
    def _data_seq_expert(self) -> np.ndarray:
        return self._data_seq * self.expert

    @property
    def grads_sharded(self) -> np.ndarray:
        """Gradients sharded over the batch axes: fsdp, or ZeRO-2/3 over `zero_group`."""
        return (self.fsdp > 1) | ((self.zero >= 2) & (self.zero_group() > 1))

    def embed_shards(self, kind: str, routed: bool = False) -> np.ndarray:
        """How many pieces the embed dim of `kind` state ("param", "grad", "opt") is cut into
        (`routed`: a mixture's routed experts'). ZeRO-3's parameters are cut over data alone
        (the group its gathers run over, predict.comm's fsdp-gather)."""
        from ..layout import ZERO_STAGE_SHARDING

        group = self.data if kind == "param" else self.zero_group(routed)
        return self.fsdp * np.where(self.zero >= ZERO_STAGE_SHARDING[kind], group, 1)

    @classmethod
    def from_columns(cls, train: TrainConfig, model: ModelConfig, **columns) -> "Grid":
        """Columns by Layout field name; missing ones take the Layout default. `cp` and
        `schedule` may be names or codes (an unknown name becomes -1, which validation
        rejects). `partition` may be a column of layer tuples (or None) in Layout's chunk order;
        without one, `stage_layers` defaults to layers / stage."""
        sized = [len(v) if k == "partition" else len(np.atleast_1d(v))
                 for k, v in columns.items() if v is not None]
        n = max(sized, default=1)
        default = Layout()
        cols = {}
        for name in _INT_FIELDS + ("microbatches",):
            value = columns.get(name, getattr(default, name))
            cols[name] = np.broadcast_to(np.asarray(value, dtype=np.int64), (n,))
        cols["sp"] = np.broadcast_to(np.asarray(columns.get("sp", 0), dtype=np.int64), (n,))
        cols["expert_tensor"] = _expert_tensor(columns.get("expert_tensor"), cols["tensor"], n)
        cols["cp"] = _codes(columns.get("cp", "none"), _CP_CODE, n)
        cols["schedule"] = _schedule_codes(columns.get("schedule"), cols["stage"], n)
        cols["microbatches"] = resolved_microbatches(cols["microbatches"],
                                                   cols["data"] * cols["fsdp"] * cols["expert"],
                                                   train.global_batch, train.microbatch)
        parts = columns.get("partition")
        stats = np.zeros((5, n), np.int64)  # stage_layers, n, min, sum, max
        if parts is not None:
            stats = np.array([partition_stats(pt, int(p)) for pt, p in zip(parts, cols["stage"])],
                             np.int64).reshape(n, 5).T
        lmax = columns.get("stage_layers", None)
        if lmax is None:
            even = -(-model.layers // _at_least_1(cols["stage"]))
            lmax = np.where(stats[1] > 0, stats[0], even)
        cols["stage_layers"] = np.broadcast_to(np.asarray(lmax, dtype=np.int64), (n,))
        for i, name in enumerate(("partition_n", "partition_min", "partition_sum",
                                  "partition_max"), 1):
            cols[name] = stats[i]
        return cls(B=train.global_batch, T=train.seq_len or model.seq_len, **cols)

    @classmethod
    def from_layouts(cls, layouts, train: TrainConfig, model: ModelConfig) -> "Grid":
        layouts = list(layouts)
        columns = {name: [getattr(l, name) for l in layouts] for name in _INT_FIELDS}
        columns["microbatches"] = [l.microbatches for l in layouts]
        columns["sp"] = [int(l.sp) for l in layouts]
        columns["expert_tensor"] = [l.tensor if l.expert_tensor is None else l.expert_tensor
                                    for l in layouts]
        columns["cp"] = [_CP_CODE.get(l.cp, -1) for l in layouts]
        columns["schedule"] = [l.schedule for l in layouts]
        columns["partition"] = [l.layers_per_stage for l in layouts]
        return cls.from_columns(train, model, **columns)

    def row(self, i: int) -> "Grid":
        """The one-layout grid of entry i."""
        return dataclasses.replace(self, **{f.name: getattr(self, f.name)[i:i + 1]
                                            for f in dataclasses.fields(self)
                                            if isinstance(getattr(self, f.name), np.ndarray)})


def _expert_tensor(value, tensor: np.ndarray, n: int) -> np.ndarray:
    """The ETP column: given, with None entries (a Layout's default) read as tensor (unfolded)."""
    if value is None:
        return tensor.copy()
    values = np.asarray(value)
    if values.dtype != object:  # sizes already (Grid.from_layouts resolves them)
        return np.broadcast_to(values.astype(np.int64), (n,)).copy()
    values = np.broadcast_to(values, (n,))
    unset = np.equal(values, None)
    return np.where(unset, tensor, np.where(unset, 1, values)).astype(np.int64)


def _codes(value, table: dict, n: int) -> np.ndarray:
    values = np.atleast_1d(np.asarray(value))
    if values.dtype.kind in "US":
        values = np.array([table.get(v, -1) for v in values.tolist()])
    return np.broadcast_to(values.astype(np.int64), (n,))


def _schedule_codes(value, stage: np.ndarray, n: int) -> np.ndarray:
    """The schedule column: names or codes; None (a layout without stages names none) is
    GPipe's code, the one validation expects of a stage-less row. A pipeline whose schedule is
    None was never resolved (parex.setting), which is a caller's bug, not a user's input."""
    if value is None:
        value = [None] * n
    array = np.asarray(value)
    if array.dtype.kind in "iu":  # codes already (the planner's columns)
        return np.broadcast_to(array.astype(np.int64), (n,))
    values = list(np.broadcast_to(np.asarray(value, dtype=object), (n,)))
    if any(v is None and p > 1 for v, p in zip(values, stage)):
        raise ValueError(UNRESOLVED_SCHEDULE)
    codes = [0 if v is None else _SCHEDULE_CODE.get(v, -1) if isinstance(v, str) else int(v)
             for v in values]
    return np.asarray(codes, dtype=np.int64)


def _at_least_1(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 1)


__all__ = ["GROUPS", "ROUTED_GROUPS", "Grid", "ModelSizes", "model_sizes"]


def named(table: dict, value, kind: type, what: str):
    """`value` itself when it is already a `kind`, else the table entry it names; an unknown
    name lists the known ones."""
    if isinstance(value, kind):
        return value
    if value not in table:
        raise ValueError(f"unknown {what} {value!r}; use one of {', '.join(table)}")
    return table[value]
