"""AxoNN's 3D tensor layouts in the planner, and AxoNN's own model beside parex's.

    rows_3d(setting, predicted, layout_columns)   the 3D rows of a plan (plan columns)
    axonn_times(cols, setting)                     AxoNN's step time of every row it models
    disagreement(plan, k)                              where AxoNN's ranking and parex's differ

3D rows are `data × tensor=XxYxZ` with one microbatch, or inside pipeline stages with the
schedules and microbatch counts of the 1D rows (parex's 3D executor runs both), predicted with
parex.predict.tensor3d_batch, so a row's numbers are `parex predict`'s. AxoNN's model
(parex.predict.axonn) covers every row without pipeline or sequence parallelism: a 3D row is
its own (X, Y, Z); a 1D row is X = 1, Y = tensor (Megatron's split), Z = fsdp (the batch and
the weights split as AxoNN's depth group splits them). Its step time is parex's compute time
plus AxoNN's communication, nothing overlapped, so the two models differ only in how they
price the collectives.
"""

from __future__ import annotations

import numpy as np

from ..config import REMAT_POLICIES
from ..predict.axonn import comm_seconds, step_seconds
from ..parallel.schedules import SCHEDULES
from ..predict.tensor3d import Sizes3D
from ..predict.tensor3d_batch import columns_3d, configurations
from .candidates import (DATA, EXPERT, FSDP, MAX_CHUNKS_PER_STAGE, SEQ, STAGE, TENSOR, cross,
                         divisors, pipeline_options)
from .rank import distinct

EXTRA = ("tensor_y", "tensor_z")  # plan columns 1D rows hold as 1
INTERLEAVED = SCHEDULES.index("interleaved")


def rows_3d(setting, predicted: tuple, layout_columns: tuple) -> list[dict]:
    """The plan columns of every 3D layout on the setting's cluster under its remat: beside
    data with one microbatch, and inside pipeline stages (`staged_configurations`); one dict
    each (none where there is none)."""
    model, train, cluster, remat = (setting.model, setting.train, setting.cluster,
                                    setting.train.remat)
    if model.moe or model.vision:  # parex's 3D split has no expert axis and splits only a
        return []  # language model's read-in and head (validation refuses both)
    flat = configurations(model, train, cluster.n_devices)
    out = []
    for sizes, pipeline in ((flat, None),
                            staged_configurations(model, train, cluster.n_devices)):
        n = len(sizes.data)
        if not n:
            continue
        ones, zeros = np.ones(n, np.int64), np.zeros(n, np.int64)
        pipe = pipeline or {STAGE: ones, "schedule": zeros, "virtual_stages": ones,
                            "microbatches": ones}
        cols = {k: zeros for k in layout_columns}
        cols |= {DATA: sizes.data, FSDP: ones, EXPERT: ones, TENSOR: sizes.tensor, SEQ: ones,
                 "stage_layers": model.layers // pipe[STAGE], "tensor_y": sizes.tensor_y,
                 "tensor_z": sizes.tensor_z} | pipe
        rows = columns_3d(setting, sizes, pipeline)
        cols |= {k: rows[k] for k in predicted}
        cols["remat"] = np.full(n, REMAT_POLICIES.index(remat))
        out.append(cols)
    return out


def staged_configurations(model, train, n_devices: int) -> tuple[Sizes3D, dict]:
    """3D layouts inside p >= 2 pipeline stages: each (data, X, Y, Z) on n/p devices that
    `configurations` gives, with each schedule and microbatch count the 1D candidates take
    (plan.candidates), where parex's executor runs them: p·v equal chunks of layers, X·Z·p
    dividing the hidden size (the tables are stored split over stages too), data·Z·m the
    batch, and interleaving's m a multiple of p. (Sizes3D, their pipeline Grid columns)."""
    L, B = model.layers, train.global_batch
    parts = []
    for p in divisors(n_devices)[1:]:
        if L % p:
            continue
        sizes = configurations(model, train, n_devices // p)
        keep = model.hidden % (sizes.tensor * sizes.tensor_z * p) == 0
        base = {"data": sizes.data[keep], "tensor": sizes.tensor[keep],
                "tensor_y": sizes.tensor_y[keep], "tensor_z": sizes.tensor_z[keep],
                STAGE: np.full(int(keep.sum()), p, np.int64)}
        cols = cross(base, pipeline_options(),
                     lambda b, o: L % (b[STAGE] * o["virtual_stages"]) == 0)
        cols = cross(cols, {"microbatches": divisors(B)}, lambda b, o: (
            (B % (b["data"] * b["tensor_z"] * o["microbatches"]) == 0)
            & (o["microbatches"] * b["virtual_stages"] <= MAX_CHUNKS_PER_STAGE * b[STAGE])
            & ((b["schedule"] != INTERLEAVED) | (o["microbatches"] % b[STAGE] == 0))))
        parts.append(cols)
    if not parts:
        return Sizes3D(*(np.zeros(0, np.int64),) * 5), None
    cols = {k: np.concatenate([c[k] for c in parts]).astype(np.int64) for k in parts[0]}
    n = len(cols["data"])
    sizes = Sizes3D(cols["data"], np.ones(n, np.int64), cols["tensor"], cols["tensor_y"],
                    cols["tensor_z"])
    return sizes, {k: cols[k] for k in (STAGE, "schedule", "virtual_stages", "microbatches")}


def axonn_times(cols: dict, setting) -> np.ndarray:
    """AxoNN's step time (s) of every row: parex's compute plus AxoNN's communication; NaN
    where AxoNN's model does not apply (pipelines, sequence parallelism)."""
    three_d = (cols["tensor_y"] > 1) | (cols["tensor_z"] > 1)
    X = np.where(three_d, cols[TENSOR], 1)
    Y = np.where(three_d, cols["tensor_y"], cols[TENSOR])
    Z = np.where(three_d, cols["tensor_z"], cols[FSDP])
    tokens = setting.train.global_batch * setting.seq_len
    comm = comm_seconds(setting.model, setting.cluster.chip, X, Y, Z, cols[DATA], tokens,
                        setting.act_bytes)
    modelled = (cols[STAGE] == 1) & (cols[SEQ] == 1)
    return np.where(modelled, step_seconds(comm, cols["step_compute_s"]), np.nan)


def best_3d(plan, k: int = 3, stages: bool = False) -> list[int]:
    """The k fastest fitting 3D rows of a plan, best first (parex's ranking): AxoNN's own
    layouts (3D beside data, which its model prices), or with `stages` those inside pipeline
    stages."""
    cols = plan.columns
    if "tensor_y" not in cols:
        return []
    order = plan.order
    three_d = (cols["tensor_y"][order] > 1) | (cols["tensor_z"][order] > 1)
    piped = cols[STAGE][order] > 1
    return [int(i) for i in order[three_d & (piped == stages)][:k]]


def disagreement(plan, k: int = 10) -> dict | None:
    """Where AxoNN's ranking of the fitting rows it models differs from parex's: each model's
    best layout with both times, Kendall's tau over parex's first k rows (one per layout and
    remat, layouts parex predicts alike once) and the pairs among them the two order the other
    way. None without such rows."""
    cols = plan.columns
    if "axonn_time_s" not in cols:
        return None
    firsts, _ = distinct(cols, plan.order)  # layouts parex predicts alike count once
    rows = firsts[np.isfinite(cols["axonn_time_s"][firsts])][:k]
    if len(rows) < 2:
        return None
    ours, theirs = cols["step_time_s"][rows], cols["axonn_time_s"][rows]
    flipped = [(int(rows[i]), int(rows[j])) for i in range(len(rows))
               for j in range(i + 1, len(rows))
               if (ours[i] - ours[j]) * (theirs[i] - theirs[j]) < 0]
    pairs = len(rows) * (len(rows) - 1) // 2
    best = int(rows[np.argmin(theirs)])

    def row(i):
        return {"layout": str(plan.layout(i)), "remat": plan.train_of(i).remat,
                "parex_step_s": float(cols["step_time_s"][i]),
                "axonn_step_s": float(cols["axonn_time_s"][i])}

    return {"rows_compared": len(rows), "kendall_tau": 1 - 2 * len(flipped) / pairs,
            "parex_best": row(int(rows[0])), "axonn_best": row(best),
            "agree": bool(best == rows[0]),
            "flipped": [(str(plan.layout(a)), str(plan.layout(b))) for a, b in flipped]}


__all__ = ["EXTRA", "axonn_times", "best_3d", "disagreement", "rows_3d",
           "staged_configurations"]
