"""AxoNN's own performance model of its 4D algorithm (3D tensor × data), re-derived from Singh et
al., "A 4D hybrid algorithm to scale parallel training to thousands of GPUs" (arXiv 2305.13525,
Sec. V, the communication model) and AxoNN SC'24 (arXiv 2502.08145), beside parex's α-β model.

One linear layer W[k, n] with m tokens per step, on a layout of X (inner, G_c), Y (outer, G_r),
Z (depth, G_d) and data; each device holds m' = m/(data·Z) tokens. The first layer of a pair
splits k over X and n over Y; the second is transposed (k over Y, n over X). Per layer and
step, the buffers (elements) each group's collectives carry:

    depth  (Z)   all-gather W's block k·n/(X·Y) in the forward, again in the backward unless
                 the gathered block is kept; reduce-scatter dW, the same size
    column (X)   all-reduce the first layer's output m'·n/Y; the transposed layer's dX, m'·n/Y
    row    (Y)   all-reduce the first layer's dX m'·k/X; the transposed layer's output, m'·k/X
    data         all-reduce dW's shard k·n/(X·Y·Z)

Every layer is its own (AxoNN's FC layers are independent modules): SwiGLU's gate and up
projections reduce their dX apiece, where parex's program sums them before one all-reduce.

A ring over G devices moves (G−1)/G of an all-gather's or a reduce-scatter's buffer through
each device and 2(G−1)/G of an all-reduce's; the model leaves latency out (the buffers are
megabytes). The bandwidth a group sees depends on where it sits on the machine: the mesh puts
X innermost, then Y, Z and data, so a group of G devices at stride s spans s·G consecutive
devices. Inside a node (s·G ≤ devices per node) it runs at the intra-node link's rate. Across
nodes, every device of a node runs its own group's ring at once and the node's NICs are
shared: each ring crossing a node boundary gets node_bw / (rings crossing per node), with
min(s, node) rings per node (s < node: a node holds s groups, each with node/s members, and
each group's ring leaves the node once), never more than the intra-node rate.

`rank` orders 3D layouts by this model's communication time, as AxoNN picks its
configuration. The model has no overlap and no compute term; `step_seconds` adds a compute time
given by the caller (the planner passes parex's, so the two models differ only in their
communication).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import ModelConfig
from ..hardware import Chip
from .shapes import model_sizes

GROUPS = ("depth", "column", "row", "data")  # Z, X, Y, data


@dataclass(frozen=True)
class Layers:
    """One transformer block's linear layers as (k, n, first-of-pair) triples, and the head."""

    pairs: tuple[tuple[int, int, bool], ...]
    head: tuple[int, int]

    @classmethod
    def of(cls, model: ModelConfig) -> "Layers":
        s = model_sizes(model)
        qkv = s.K * (s.H // s.K + 2) * s.Dh  # fused Q, K, V outputs
        mlp_in = tuple((s.D, s.F, True) for _ in range(s.n_mlp_in))  # SwiGLU: gate and up
        return cls(((s.D, qkv, True), (s.H * s.Dh, s.D, False)) + mlp_in + ((s.F, s.D, False),),
                   (s.D, s.V))


def layer_buffers(model: ModelConfig, X, Y, Z, data, tokens: int, keep_gathered: bool = False
                  ) -> dict[str, list[tuple[str, np.ndarray]]]:
    """Per group: the (kind, elements) of every collective one transformer block issues in a
    step (forward and backward), columns over the layouts given as arrays X, Y, Z, data.
    `tokens`: m, the tokens of the whole step."""
    X, Y, Z, data = (np.asarray(v, dtype=np.float64) for v in (X, Y, Z, data))
    m = tokens / (data * Z)
    out: dict[str, list] = {g: [] for g in GROUPS}
    for k, n, first in Layers.of(model).pairs:
        # the transposed layer: its in dim k over Y, out dim n over X
        k_split, n_split = (X, Y) if first else (Y, X)
        block = k * n / (X * Y)
        gathers = 1 if keep_gathered else 2
        out["depth"] += [("all-gather", block)] * gathers + [("reduce-scatter", block)]
        out["data"].append(("all-reduce", block / Z))
        forward = ("column" if first else "row", m * n / n_split)  # the output, reduced
        backward = ("row" if first else "column", m * k / k_split)  # dX, reduced
        for group, elements in (forward, backward):
            out[group].append(("all-reduce", elements))
    return out


def ring_factor(kind: str, G) -> np.ndarray:
    """The fraction of the buffer a ring moves through each device."""
    G = np.asarray(G, dtype=np.float64)
    return (2.0 if kind == "all-reduce" else 1.0) * (G - 1) / G


def group_bandwidth(chip: Chip, G, stride) -> np.ndarray:
    """Bytes/s per device of a ring over G devices at `stride` (the product of the groups
    inside it), by where it sits: inside a node, or sharing the node's NICs with the rings of
    min(stride, node) groups."""
    G, stride = np.asarray(G, dtype=np.float64), np.asarray(stride, dtype=np.float64)
    node = chip.devices_per_node
    intra = chip.intra_node.bandwidth * chip.network_efficiency
    nic = chip.inter_node.bandwidth * chip.network_efficiency * node  # the node's NICs
    across = np.minimum(intra, nic / np.minimum(stride, node))
    return np.where(stride * G <= chip.scaleup_domain, intra, across)


def strides(X, Y, Z) -> dict[str, np.ndarray]:
    """Each group's stride on the mesh (X innermost, then Y, Z, data)."""
    X, Y, Z = (np.asarray(v, dtype=np.float64) for v in (X, Y, Z))
    return {"column": np.ones_like(X), "row": X, "depth": X * Y, "data": X * Y * Z}


def comm_seconds(model: ModelConfig, chip: Chip, X, Y, Z, data, tokens: int, dtype_bytes: int,
                 grad_bytes: float | None = None, keep_gathered: bool = False
                 ) -> dict[str, np.ndarray]:
    """Seconds per step of each group's collectives over all L blocks (AxoNN's model: volume
    over the placed bandwidth, nothing overlapped). Gradients travel in `grad_bytes` per
    element (default: the compute dtype's)."""
    sizes = {"column": X, "row": Y, "depth": Z, "data": data}
    stride = strides(X, Y, Z)
    L = model.layers
    out = {}
    for group, ops in layer_buffers(model, X, Y, Z, data, tokens, keep_gathered).items():
        G = np.asarray(sizes[group], dtype=np.float64)
        bw = group_bandwidth(chip, G, stride[group])
        unit = (grad_bytes or dtype_bytes) if group == "data" else dtype_bytes
        seconds = sum(ring_factor(kind, G) * elements * unit for kind, elements in ops)
        out[group] = L * np.where(G > 1, seconds / bw, 0.0)
    return out


def step_seconds(comm: dict[str, np.ndarray], compute_s) -> np.ndarray:
    """AxoNN's step time: the caller's compute time plus every group's communication."""
    return np.asarray(compute_s, dtype=np.float64) + sum(comm.values())


def rank(model: ModelConfig, chip: Chip, n_devices: int, tokens: int, dtype_bytes: int = 2,
         keep_gathered: bool = False) -> list[dict]:
    """Every (data, X, Y, Z) with product n_devices that splits the model's dims evenly,
    ranked by AxoNN's communication time (fastest first). Each entry: the layout text and the
    seconds per group."""
    cands = configurations(model, n_devices)
    if not len(cands):
        return []
    data, X, Y, Z = cands.T
    comm = comm_seconds(model, chip, X, Y, Z, data, tokens, dtype_bytes,
                        keep_gathered=keep_gathered)
    total = sum(comm.values())
    return [{"layout": layout_text(*cands[i]), "comm_s": float(total[i]),
             **{g: float(comm[g][i]) for g in GROUPS}} for i in np.argsort(total, kind="stable")]


def configurations(model: ModelConfig, n_devices: int) -> np.ndarray:
    """Rows (data, X, Y, Z) with product n_devices: Y divides the KV heads, the MLP width and
    the vocabulary, X·Z the hidden size (the 3D split's rules, parex.validation). X alone
    (tensor=Nx1x1) is left out: parex's Layout writes no such layout (tensor=N is Y alone,
    Megatron's split)."""
    d = np.array([k for k in range(1, n_devices + 1) if n_devices % k == 0])
    X, Y, Z = (g.ravel() for g in np.meshgrid(d, d, d, indexing="ij"))
    ok = ((n_devices % (X * Y * Z) == 0) & (model.hidden % (X * Z) == 0)
          & ((X == 1) | (Y * Z > 1)))
    for dim in (model.kv_heads, model.ffn, model.vocab):
        ok &= dim % Y == 0
    X, Y, Z = X[ok], Y[ok], Z[ok]
    return np.stack([n_devices // (X * Y * Z), X, Y, Z], axis=1).astype(np.int64)


def layout_text(data: int, X: int, Y: int, Z: int) -> str:
    """The Layout string of (data, X, Y, Z): `tensor=N` where only Y is above 1 (1xNx1 is
    Megatron's 1D split)."""
    if X == Z == 1:
        tensor = f"tensor={Y}" if Y > 1 else ""
    else:
        tensor = f"tensor={X}x{Y}x{Z}"
    parts = ([f"data={data}"] if data > 1 else []) + ([tensor] if tensor else [])
    return ",".join(parts) or "data=1"


__all__ = ["GROUPS", "Layers", "comm_seconds", "configurations", "group_bandwidth",
           "layer_buffers", "layout_text", "rank", "ring_factor", "step_seconds", "strides"]
