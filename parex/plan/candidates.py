"""Every layout of a model on n devices, as numpy columns (one entry per layout).

The space, built by cross joins of small option tables (never a Python loop over layouts):
    axes          data × fsdp × expert × tensor × seq × stage = n, each axis cutting the dims
                  it splits into equal pieces (tensor: heads, KV heads, MLP, vocabulary, the
                  experts' MLP; seq: the sequence; fsdp: the hidden size; expert, for a mixture
                  of experts only: the routed experts), at most one layer per stage
    zero          0..3 where data > 1 and data·fsdp divides the hidden size (ZeRO stages
                  shard state over the data axis too)
    sp            on/off where tensor > 1
    cp            ring or ulysses where seq > 1
    pipeline      where stage > 1: gpipe, 1f1b, zbh1, bfs (v = 1), zbv (v = 2), interleaved /
                  bfs with v = 2..MAX_VIRTUAL chunks per device; where L layers do not split into p·v
                  equal chunks, an uneven partition spreads them as evenly as it can
    microbatches  m such that b = B / (data·fsdp·m) is a whole number of sequences; a pipeline
                  runs at most MAX_CHUNKS_PER_STAGE·p microbatch-chunks (m·v), where the
                  interleaved bubble (p−1)/(v·m) is already under 1/32 of the compute and longer
                  schedule tables only cost the predictor time to place and time
Remat is not a layout column: the planner predicts the same columns once per policy.

Which combinations are real programs is parex.validation's call (`valid_columns`, the rules
behind `predict_batch`'s `valid` column); this module only spans the space.
`Candidates.layout(i)` builds the Layout of one row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import ModelConfig
from ..layout import CP_MODES, Axis, Layout
from ..parallel.schedules import LOOPING, SCHEDULES, VEE

MAX_VIRTUAL = 8  # chunks per device the enumeration tries (Megatron's runs use 2-5)
MAX_CHUNKS_PER_STAGE = 32  # m·v <= 32·p (Megatron's Table 1 layouts run 6p-24p)
# Layout fields named after their mesh axes
DATA, FSDP, EXPERT, TENSOR, SEQ, STAGE = AXES = tuple(
    a.value for a in (Axis.DATA, Axis.FSDP, Axis.EXPERT, Axis.TENSOR, Axis.SEQ, Axis.STAGE))
COLUMNS = AXES + ("zero", "sp", "cp", "schedule", "virtual_stages", "microbatches",
                  "stage_layers", "partitioned")


def divisors(n: int) -> np.ndarray:
    d = np.arange(1, n + 1)
    return d[n % d == 0]


def cross(base: dict, options: dict, keep) -> dict:
    """Every (row of base, row of options) pair for which keep(base_col, option_col) holds:
    keep sees base columns shaped (N, 1) and option columns shaped (1, K)."""
    b = {k: v[:, None] for k, v in base.items()}
    o = {k: np.asarray(v)[None, :] for k, v in options.items()}
    n = len(next(iter(base.values())))
    k = len(next(iter(options.values())))
    mask = np.broadcast_to(keep(b, o), (n, k))
    rows, opts = np.nonzero(mask)
    out = {name: col[rows] for name, col in base.items()}
    out |= {name: np.asarray(col)[opts] for name, col in options.items()}
    return out


def axis_columns(model: ModelConfig, seq_len: int, n_devices: int) -> dict:
    """All (data, fsdp, expert, tensor, seq, stage) with product n where each axis cuts the
    dims it splits into equal pieces: tensor the heads, KV heads, MLP and vocabulary (Megatron's
    column and row splits) and the experts' MLP, seq the sequence, fsdp the hidden size, expert
    the routed experts (1 for a dense model), stage at most the layers."""
    d = divisors(n_devices)
    split = [model.heads, model.kv_heads, model.ffn, model.vocab]
    split += [model.expert_ffn] if model.moe else []
    tensor = d[np.gcd.reduce(split) % d == 0]
    expert = d[model.experts % d == 0] if model.moe else np.ones(1, np.int64)
    grids = np.meshgrid(d, d[model.hidden % d == 0], expert, tensor, d[seq_len % d == 0],
                        indexing="ij")
    five = [g.ravel() for g in grids]
    prod = np.prod(five, axis=0)
    ok = n_devices % prod == 0
    cols = [c[ok] for c in five]
    cols.append(n_devices // (prod[ok]))
    cols = dict(zip(AXES, cols))
    keep = cols[STAGE] <= model.layers
    return {k: v[keep] for k, v in cols.items()}


def pipeline_options() -> dict:
    """(schedule, virtual_stages) pairs; interleaved and bfs also loop over v chunks, ZB-V has
    two."""
    code = {name: i for i, name in enumerate(SCHEDULES)}
    pairs = [(code[name], 1) for name in SCHEDULES if name not in ("interleaved",) + VEE]
    pairs += [(code[name], v) for name in LOOPING for v in range(2, MAX_VIRTUAL + 1)]
    pairs += [(code[name], 2) for name in VEE]
    schedule, virtual = np.array(pairs).T
    return {"schedule": schedule, "virtual_stages": virtual}


def layout_columns(model: ModelConfig, global_batch: int, seq_len: int, n_devices: int) -> dict:
    """The whole space for `model` on `n_devices` with `global_batch` sequences of `seq_len`
    tokens per step."""
    cols = axis_columns(model, seq_len, n_devices)
    D = model.hidden
    cols = cross(cols, {"zero": np.arange(4)},  # ZeRO shards the hidden dim over data too
                 lambda b, o: (o["zero"] == 0) | (b[DATA] > 1) & (D % (b[DATA] * b[FSDP]) == 0))
    cols = cross(cols, {"sp": np.arange(2)}, lambda b, o: (o["sp"] == 0) | (b[TENSOR] > 1))
    cols = cross(cols, {"cp": np.arange(len(CP_MODES))},
                 lambda b, o: (o["cp"] == 0) == (b[SEQ] == 1))
    L = model.layers
    pipe = pipeline_options()
    no_pipe = (pipe["schedule"] == 0) & (pipe["virtual_stages"] == 1)
    cols = cross(cols, pipe | {"_plain": no_pipe},
                 lambda b, o: np.where(b[STAGE] == 1, o["_plain"],
                                       o["virtual_stages"] * b[STAGE] <= L))
    del cols["_plain"]
    m = divisors(global_batch)
    cols = cross(cols, {"microbatches": m}, lambda b, o: (
        (global_batch % (b[DATA] * b[FSDP] * b[EXPERT] * o["microbatches"]) == 0)
        & ((b[STAGE] == 1) | (o["microbatches"] * b["virtual_stages"]
                               <= MAX_CHUNKS_PER_STAGE * b[STAGE]))))
    p, v = cols[STAGE], cols["virtual_stages"]
    cols["stage_layers"] = -(-L // p)  # the busiest stage of the balanced partition
    cols["partitioned"] = L % (p * v) != 0
    return {k: np.ascontiguousarray(c, dtype=np.int64) for k, c in cols.items()}


@dataclass
class Candidates:
    """Layouts as columns (COLUMNS), with the model they are for."""

    model: ModelConfig
    columns: dict

    @classmethod
    def enumerate(cls, model: ModelConfig, global_batch: int, seq_len: int,
                  n_devices: int) -> "Candidates":
        return cls(model, layout_columns(model, global_batch, seq_len, n_devices))

    def __len__(self) -> int:
        return len(self.columns[DATA])

    def grid_columns(self) -> dict:
        """The columns Grid.from_columns reads."""
        return {k: v for k, v in self.columns.items() if k != "partitioned"}

    def take(self, index) -> "Candidates":
        return Candidates(self.model, {k: v[index] for k, v in self.columns.items()})

    def layout(self, i: int) -> Layout:
        return layout_at(self.columns, i, self.model.layers)


def layout_at(cols: dict, i: int, layers: int) -> Layout:
    """The Layout of row i of layout columns (COLUMNS; `partitioned` rows get an uneven,
    per-stage balanced partition)."""
    c = {k: int(cols[k][i]) for k in COLUMNS}
    parts = None
    if c["partitioned"]:
        parts = balanced_partition(layers, c[STAGE], c["virtual_stages"])
    axes = {name: c[name] for name in AXES}
    axes |= {k: int(cols[k][i]) for k in ("tensor_y", "tensor_z") if k in cols}  # 3D rows
    return Layout(**axes, zero=c["zero"], sp=bool(c["sp"]), cp=CP_MODES[c["cp"]],
                  schedule=SCHEDULES[c["schedule"]] if c[STAGE] > 1 else None,
                  virtual_stages=c["virtual_stages"],
                  microbatches=c["microbatches"], layers_per_stage=parts)


def balanced_partition(layers: int, p: int, v: int) -> tuple[int, ...]:
    """Layers per chunk (chunk c of stage s is entry c·p + s), as even as possible: the first
    layers mod p stages take one layer more, and within a stage the first chunks do."""
    per_stage = [layers // p + (s < layers % p) for s in range(p)]
    return tuple(per_stage[s] // v + (c < per_stage[s] % v) for c in range(v) for s in range(p))


__all__ = ["COLUMNS", "Candidates", "balanced_partition", "divisors", "layout_at",
           "layout_columns"]
