"""Predicted step time: compute + exposed communication + pipeline bubble, every term reported.

Compute per device. On an accelerator: matmul FLOPs / (peak · matmul_efficiency) plus the
memory-bound work (norms, activations, softmax: every saved activation written and read once per
pass, `layer_traffic`; AdamW: 28 bytes per parameter) at HBM bandwidth. On the calibrated CPU:
matmul FLOPs / the measured rate for that matmul size + elementwise FLOPs / the measured
elementwise rate + activation traffic / the measured copy bandwidth, all divided by the measured
efficiency of real transformer blocks (`parex calibrate`), plus the measured optimizer cost per
parameter and fixed cost per step. CPU rates are per emulated device with every device busy,
rescaled when fewer devices share the cores (`cpu_rate_scale`).

Overlap model (explicit, per collective family): tensor/sequence-parallel and Ulysses collectives
sit on the critical path (exposed in full); gradient reductions hide behind the backward pass,
fsdp gathers behind the compute of the previous layer, ring-attention hops behind half the
compute, each except one layer's share that cannot be hidden; ZeRO's parameter gather after the
update and the embedding's collectives are exposed. The emulated CPU mesh overlaps nothing
(collectives are copies on the same cores).

Pipeline bubble: the schedule table (parex.parallel.schedules) timed with per-chunk costs
t_F, t_B (and t_W for split backwards) and the stage-to-stage hop: bubble = makespan − m·v·(t_F +
t_B + t_W).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .flops import elementwise_flops, matmul_split, recompute_layers
from .memory import xla_layer_elements
from .shapes import Grid, ModelSizes

EXPOSED = ("tp", "sp", "sp-grads", "sp-embedding", "cross-entropy", "cp-ulysses", "zero-gather",
           "pipeline-shared", "embedding-ids", "embedding-lookup", "embedding-table",
           "cp-positions")
HIDE_BEHIND_BACKWARD = ("grad-reduce",)
HIDE_BEHIND_COMPUTE = ("fsdp-gather",)
OPTIMIZER_BYTES = 28  # per optimizer-state parameter: read p, g, m, v (16), write p, m, v (12)


# --- compute -------------------------------------------------------------------------------------

def _passes(grid: Grid, remat: str) -> np.ndarray:
    """Forward-equivalents per layer per microbatch: forward, backward (2), recompute (a whole
    block under full remat; the attention core, about a quarter of one, under selective)."""
    full, core = recompute_layers(grid, remat)
    return 3 + full + 0.25 * core


def layer_traffic(sizes: ModelSizes, grid: Grid, remat: str, act_bytes: int) -> np.ndarray:
    """Bytes one layer moves through memory per microbatch outside the matmuls: every saved
    activation written and read once per forward-equivalent pass."""
    elements = xla_layer_elements(sizes, grid, "none") * grid.tokens
    return 2 * act_bytes * elements * _passes(grid, remat)


def accelerator_compute(model, sizes: ModelSizes, grid: Grid, remat: str, chip, dtype: str,
                        act_bytes: int, opt_elements) -> dict:
    """Seconds per step on a GPU/TPU: matmuls at peak·efficiency, elementwise at HBM bandwidth."""
    mm = matmul_split(model, grid, remat)
    rate = chip.peak(dtype) * chip.matmul_efficiency
    layer_s = mm["layer"] / rate + layer_traffic(sizes, grid, remat, act_bytes) / chip.hbm_bandwidth
    return {"per_microbatch": layer_s * grid.stage_layers + mm["head"] / rate,
            "optimizer": OPTIMIZER_BYTES * opt_elements / chip.hbm_bandwidth, "overhead": 0.0}


def cpu_rate_scale(grid: Grid, n_calibrated: int, parallel: float) -> np.ndarray:
    """Per-device rate relative to the calibration's all-devices-busy rate, for n devices:
    aggregate throughput grows linearly up to `parallel` devices and is flat beyond."""
    n = grid.n_devices
    return n_calibrated / parallel * np.minimum(n, parallel) / n


def matmul_shapes(sizes: ModelSizes, grid: Grid) -> list[tuple]:
    """(M, K, N, count) of one block's forward matmuls on one device per microbatch, as columns:
    QKV, W_o, the MLP's input(s) and output, then QKᵀ and PV per (sequence, head)."""
    t, M, T = grid.tensor, grid.tokens, grid.T
    q, kv = sizes.H * sizes.Dh, sizes.K * sizes.Dh
    per_head = grid.b * sizes.H / t  # attention runs per sequence and head
    return [(M, sizes.D, (q + 2 * kv) / t, 1), (M, q / t, sizes.D, 1),
            (M, sizes.D, sizes.F / t, sizes.n_mlp_in), (M, sizes.F / t, sizes.D, 1),
            (T / grid.seq, sizes.Dh, T, per_head), (T / grid.seq, T, sizes.Dh, per_head)]


def cpu_matmul_rate(M, K, N, curve) -> np.ndarray:
    """FLOP/s of an (M, K) @ (K, N) matmul from the calibrated square ones, matched by
    arithmetic intensity (FLOPs per float32 byte moved): a square n³ matmul has n/6."""
    intensity = 2 * M * K * N / (4 * (M * K + K * N + M * N))
    square = (curve[:, 0] / 2) ** (1 / 3) / 6
    return np.interp(np.log(intensity), np.log(square), curve[:, 1])


def cpu_layer_seconds(sizes: ModelSizes, grid: Grid, remat: str, cal, bandwidth: float):
    """One block per microbatch on one device at the calibrated kernel rates (all devices busy,
    efficiency 1): matmuls by shape, elementwise FLOPs, activation traffic."""
    curve = np.array(cal.matmul_curve)
    passes = _passes(grid, remat)
    matmuls = sum(count * 2 * M * K * N / cpu_matmul_rate(M, K, N, curve)
                  for M, K, N, count in matmul_shapes(sizes, grid))
    elementwise = elementwise_flops(sizes, grid, remat)["layer"] / cal.elementwise_rate
    return matmuls * passes + elementwise + layer_traffic(sizes, grid, remat, 4) / bandwidth


def cpu_compute(model, sizes: ModelSizes, grid: Grid, remat: str, cal, bandwidth: float,
                opt_elements) -> dict:
    """Seconds per step on the calibrated CPU mesh (module docstring); `bandwidth` is the
    measured copy bandwidth per device, for the activation traffic."""
    scale = cpu_rate_scale(grid, cal.n_devices, cal.parallel_devices)
    layer = cpu_layer_seconds(sizes, grid, remat, cal, bandwidth)
    M, V = grid.tokens, sizes.V / grid.tensor  # the head: (M, D) @ (D, V/t), three passes
    head = 3 * 2 * M * sizes.D * V / cpu_matmul_rate(M, sizes.D, V, np.array(cal.matmul_curve))
    head = head + elementwise_flops(sizes, grid, remat)["head"] / cal.elementwise_rate
    per_micro = (layer * grid.stage_layers + head) / (scale * cal.step_efficiency)
    return {"per_microbatch": per_micro,
            "optimizer": opt_elements * cal.optimizer_s_per_param / scale,
            "overhead": cal.step_overhead_s}


# --- the pipeline --------------------------------------------------------------------------------

@lru_cache(maxsize=4096)
def _schedule(code: int, p: int, m: int, v: int):
    from ..parallel.schedules import SCHEDULES, make_schedule

    return make_schedule(SCHEDULES[code], p, m, v)


@lru_cache(maxsize=8192)
def _unit_makespan(code: int, p: int, m: int, v: int, t_b: float, t_w: float):
    """(makespan with t_F = 1 and free hops, its growth per second of hop latency)."""
    s = _schedule(code, p, m, v)
    base = s.makespan(1.0, t_b, t_w, 0.0)
    return base, (s.makespan(1.0, t_b, t_w, 1e-3) - base) / 1e-3


def _per_schedule(grid: Grid, rows: np.ndarray, extra: tuple, fn) -> np.ndarray:
    """fn(schedule, p, m, v, *extra) for each row, computed once per distinct key."""
    keys = np.stack([grid.schedule[rows], grid.stage[rows], grid.microbatches[rows],
                     grid.virtual_stages[rows], *[e[rows] for e in extra]], 1)
    unique, inverse = np.unique(keys, axis=0, return_inverse=True)
    values = np.array([fn(*(int(k) for k in key[:4]), *(float(k) for k in key[4:]))
                       for key in unique]).reshape(len(unique), -1)
    return values[inverse.ravel()]


def pipeline_ticks(grid: Grid) -> np.ndarray:
    """Ticks of each layout's schedule table (0 without a pipeline)."""
    out = np.zeros(len(grid))
    rows = np.nonzero(grid.stage > 1)[0]
    if len(rows):
        out[rows] = _per_schedule(grid, rows, (), lambda *k: _schedule(*k).n_ticks)[:, 0]
    return out


def bubble_seconds(grid: Grid, busy_per_micro, remat: str, hop) -> np.ndarray:
    """Makespan of the schedule table minus the busy time m·v·(t_F + t_B + t_W) of a stage."""
    out = np.zeros(len(grid))
    rows = np.nonzero(grid.stage > 1)[0]
    if not len(rows):
        return out
    from ..parallel.schedules import SCHEDULES

    passes = _passes(grid, remat)
    split = grid.schedule == SCHEDULES.index("zbh1")
    t_b = np.round(np.where(split, 0.5 * (passes - 1), passes - 1), 3)  # in units of t_F
    t_w = np.round(np.where(split, 0.5 * (passes - 1), 0.0), 3)
    unit = _per_schedule(grid, rows, (t_b, t_w), _unit_makespan)  # (makespan, per hop)
    t_f = busy_per_micro[rows] / grid.virtual_stages[rows] / passes[rows]
    busy = grid.microbatches[rows] * busy_per_micro[rows]
    out[rows] = np.maximum(unit[:, 0] * t_f + unit[:, 1] * hop[rows] - busy, 0.0)
    return out


# --- everything together -------------------------------------------------------------------------

def step_time(grid: Grid, compute: dict, seconds: dict, emulated: bool, remat: str) -> dict:
    """STEP_TIME_PARTS from compute terms and per-family collective seconds (columns).
    `emulated`: the calibrated CPU mesh, where nothing overlaps and an idle pipeline stage frees
    the shared cores for the busy ones (no bubble; the per-tick hops are exposed instead)."""
    m, L = grid.microbatches, np.maximum(grid.stage_layers, 1)
    critical = sum(seconds.get(k, 0.0) for k in ("tp", "sp", "cross-entropy", "cp-ulysses"))
    exposed = sum(seconds.get(k, 0.0) for k in EXPOSED)  # includes the critical ones
    work = compute["per_microbatch"] * m
    windows = ((HIDE_BEHIND_BACKWARD, work * 2 / 3), (HIDE_BEHIND_COMPUTE, work),
               (("cp-ring",), work / 2))
    for names, window in windows:
        t = sum(seconds.get(k, 0.0) for k in names)
        exposed = exposed + (t if emulated else np.maximum(t - window * (L - 1) / L, t / L))
    hops = seconds.get("pipeline", np.zeros(len(grid)))
    if emulated:
        bubble = np.zeros(len(grid))
        exposed = exposed + hops
    else:
        per_hop = hops / np.maximum(2 * m * grid.virtual_stages, 1)
        bubble = bubble_seconds(grid, compute["per_microbatch"] + critical / m, remat, per_hop)
    compute_s = work + compute["optimizer"] + compute["overhead"]
    return {"total": compute_s + exposed + bubble, "compute": compute_s, "exposed_comm": exposed,
            "bubble": bubble}


__all__ = ["accelerator_compute", "bubble_seconds", "cpu_compute", "pipeline_ticks", "step_time"]
