"""Predicted step time: compute + exposed communication + pipeline bubble, every term reported.

Compute per device. On an accelerator: parex.predict.accelerator, kernel by kernel (a roofline
per GEMM at the chip's published achievable matmul rate, memory-bound kernels at HBM bandwidth,
divided by the step efficiency fitted on published runs). On the calibrated CPU:
matmul FLOPs / the measured rate for that matmul size + elementwise FLOPs / the measured
elementwise rate + activation traffic / the measured copy bandwidth, the attention core at what
the calibration measured its kernel to take over that price (naive, or ring attention's blocks:
`cpu_layer_seconds`), all divided by the measured efficiency of real transformer blocks
(`parex calibrate`), plus the measured optimizer cost per
parameter, fixed cost per step, and the page faults of a step whose temporaries the allocator
maps afresh on every call (cpu_page_fault_seconds). CPU rates are per emulated device with every
device busy, rescaled when fewer devices share the cores (`cpu_rate_scale`).

Overlap model (explicit, per collective family): tensor/sequence-parallel and Ulysses collectives
sit on the critical path (exposed in full), except the column-parallel layers' backward ones
where the program runs them beside the weight-gradient GEMMs ("tp-beside-wgrad", hidden behind
compute; comm.Convention.overlaps_tp_backward) and SP's collectives a chunked overlap splits
behind their GEMMs (tp-comm, async-tp); gradient reductions hide behind the backward in buckets,
and ZeRO's parameter gather behind the next forward where the stack overlaps it (both
predict.overlap, which says what each leaves exposed; exposed in full where the program runs
them after the backward or before the forward, Convention.overlaps_grad_reduce /
overlaps_param_gather False); fsdp gathers behind the compute of the previous layer,
ring-attention hops behind half the compute, each except one layer's share that cannot be
hidden; the embedding's collectives are exposed, and so are a mixture of experts' dispatch
all-to-alls (the experts wait for their tokens; Megatron-LM's shared-expert overlap is not
modelled). The experts' compute is the busiest expert's (accelerator.expert_slots): padded to
capacity in parex's program, k·T/E slots per sequence times `expert_imbalance` (an assumption,
1.0 by default, capped at C by a capacity) in the ideal one. The emulated CPU mesh overlaps nothing
(collectives are copies on the same cores).

Pipeline bubble: the schedule table (parex.parallel.schedules) timed with per-chunk costs
t_F, t_B (and t_W for split backwards) and the stage-to-stage hop: bubble = makespan − m·v·(t_F +
t_B + t_W). On the calibrated CPU the pipeline is parex's tick-synchronous executor instead
(ticks.py): each tick lasts its busy devices' work over the shared cores, or its slowest op when
fewer devices than run at once are busy (that lost time is the bubble, 0 when one stage's devices
fill the cores); every tick adds the measured per-tick cost, its window copies and its sends.
"""

from __future__ import annotations

import numpy as np

from ..parallel.schedules import SCHEDULES, SPLIT
from .accelerator import ATTENTION_CORE, accelerator_compute, matmul_shapes
from .flops import (elementwise_flops, is_ring, passes_per_layer, ring_attention_executed,
                    ring_blocks, score_elementwise)
from .memory import keeps_scores, score_elements, xla_layer_elements
from .schedule_stats import makespan_columns
from .shapes import Grid, ModelSizes
from .stragglers import slowdown

EXPOSED = ("tp", "sp", "sp-grads", "sp-positions", "cross-entropy", "cp-ulysses",
           "stage-gather", "pipeline-shared", "embedding-ids", "embedding-lookup",
           "embedding-table", "cp-positions", "seq-grads", "seq-embedding", "seq-head",
           "stage-regroup", "moe-combine", "moe-route",
           "tied-embedding")  # tied tables: Megatron sums the two copies' gradients after the
#   backward (finalize_model_grads), outside the overlapped buckets
OVERLAPPED = ("grad-reduce", "zero-gather", "sp-chunked", "sp-chunked-rs",
              "moe-dispatch")  # predict.overlap
HIDE_BEHIND_COMPUTE = ("fsdp-gather", "sp-regather", "tp-beside-wgrad")  # prefetched, or
#   beside the backward's dx (SP's re-gathers) or dW GEMMs (comm.Convention.overlaps_tp_backward)
TIMED_APART = ("cp-ring", "pipeline")  # hidden behind half the work; the pipeline's own term


# --- compute -------------------------------------------------------------------------------------

def layer_traffic(sizes: ModelSizes, grid: Grid, remat: str, act_bytes: int) -> np.ndarray:
    """Bytes one layer moves through memory per microbatch outside the matmuls on the calibrated
    CPU: every saved activation written and read once per forward-equivalent pass. Sequence
    parallelism keeps its D-sized activations as T/t rows, but the tensors around the matmuls
    stay whole [T, D]: each column-parallel layer's gathered input and each row-parallel
    layer's partial output before its reduce-scatter (two of each in a sequential block, one in
    a parallel block), so those streams move what they move without SP (measured: SP's saving
    of op time is its elementwise work's, not its saved bytes', docs/results/
    2026-12-emulated-step.md)."""
    whole = np.where(grid.sp, (2 if sizes.parallel else 4) * sizes.D * (1 - 1 / grid.tensor), 0)
    elements = (xla_layer_elements(sizes, grid, "none") + whole) * grid.tokens
    return 2 * act_bytes * elements * passes_per_layer(grid, remat)


def cpu_rate_scale(grid: Grid, n_calibrated: int, parallel: float) -> np.ndarray:
    """Per-device rate relative to the calibration's all-devices-busy rate, for n devices:
    aggregate throughput grows linearly up to `parallel` devices and is flat beyond."""
    n = grid.n_devices
    return n_calibrated / parallel * np.minimum(n, parallel) / n


def cpu_matmul_rate(M, K, N, curve) -> np.ndarray:
    """FLOP/s of an (M, K) @ (K, N) matmul from the calibrated square ones, matched by
    arithmetic intensity (FLOPs per float32 byte moved): a square n³ matmul has n/6."""
    intensity = np.maximum(2 * M * K * N / (4 * (M * K + K * N + M * N)), 1e-9)  # (count-0
    #   shapes, a mixture of experts' absent shared experts, have a zero width)
    square = (curve[:, 0] / 2) ** (1 / 3) / 6
    return np.interp(np.log(intensity), np.log(square), curve[:, 1])


def cpu_layer_seconds(sizes: ModelSizes, grid: Grid, remat: str, cal, bandwidth: float):
    """One block per microbatch on one device at the calibrated kernel rates (all devices busy,
    efficiency 1): matmuls by shape, elementwise FLOPs, activation traffic. The attention core
    by its kernel: the naive one's (`naive_attention_seconds`) times the calibration's
    `attention_factor` (what the kernel really took on the calibration's blocks over that
    price), ring attention's by its blocks (`ring_core_seconds`), flash attention's at the
    rates of the full-T convention's shapes (unchanged: docs/results/2026-12-flash-timing.md)."""
    curve = np.array(cal.matmul_curve)
    block = (sum(count * 2 * M * K * N / cpu_matmul_rate(M, K, N, curve)
                 for M, K, N, count in matmul_shapes(sizes, grid)) * passes_per_layer(grid, remat)
             + elementwise_flops(sizes, grid, remat)["layer"] / cal.elementwise_rate
             + layer_traffic(sizes, grid, remat, 4) / bandwidth)  # the full-T convention's
    naive = keeps_scores(grid)
    core = naive_attention_seconds(sizes, grid, remat, cal, bandwidth)
    core = np.where(naive, core, core - score_bytes(sizes, grid, remat) / bandwidth)  # no
    #   scores kept: their traffic is not in layer_traffic either
    attention = np.where(is_ring(grid), ring_core_seconds(sizes, grid, remat, cal),
                         np.where(naive, cal.attention_factor * core, core))
    return block - core + attention


def naive_attention_seconds(sizes: ModelSizes, grid: Grid, remat: str, cal, bandwidth: float):
    """The naive kernel's attention core in one layer per microbatch at the calibrated kernel
    rates (`attention_factor` not applied): QKᵀ and PV by shape on every pass, the scores'
    elementwise work, and the scores and probabilities it keeps written and read once per
    pass. `parex calibrate` divides the kernel's measured time by this."""
    curve = np.array(cal.matmul_curve)
    core = sum(count * 2 * M * K * N / cpu_matmul_rate(M, K, N, curve) for M, K, N, count
               in matmul_shapes(sizes, grid)[ATTENTION_CORE:ATTENTION_CORE + 2])
    return (core * passes_per_layer(grid, remat)
            + score_elementwise(sizes, grid) / cal.elementwise_rate
            + score_bytes(sizes, grid, remat) / bandwidth)


def score_bytes(sizes: ModelSizes, grid: Grid, remat: str) -> np.ndarray:
    """Bytes of the naive kernel's scores and probabilities (float32) in one layer per
    microbatch: written and read once per forward-equivalent pass, as `layer_traffic` moves
    every saved activation."""
    return 2 * 4 * score_elements(sizes, grid) * grid.tokens * passes_per_layer(grid, remat)


def ring_core_seconds(sizes: ModelSizes, grid: Grid, remat: str, cal) -> np.ndarray:
    """Ring attention's core in one layer per microbatch: every hop's c × c blocks (c = T/2s,
    flops.ring_blocks) with the flash-style backward that recomputes QKᵀ
    (flops.ring_attention_executed), 2s + 1 blocks a pass where the full-T convention counts
    4s, so the scores' elementwise work is that share of the convention's
    (`blockwise_seconds`)."""
    c = grid.T / (2 * np.maximum(grid.seq, 1))
    _, blocks = ring_blocks(sizes, grid)
    share = blocks / (4 * np.maximum(grid.seq, 1))
    return blockwise_seconds(ring_attention_executed(sizes, grid, remat),
                             share * score_elementwise(sizes, grid), c, sizes.Dh, cal)


def blockwise_seconds(matmul_flops, elementwise, c, head_dim, cal) -> np.ndarray:
    """Attention in c × c blocks (ring attention's hops, the blockwise kernel), the kernel of
    parex.model.attention's attend / block_grads: its matmuls, each a (c, Dh) @ (Dh, c) or
    (c, c) @ (c, Dh) product per head at that shape's calibrated rate, and its scores'
    elementwise FLOPs, times the calibration's `blockwise_factor` (what that kernel really
    took on the calibration's blocks over this price)."""
    rate = cpu_matmul_rate(c, head_dim, c, np.array(cal.matmul_curve))
    return cal.blockwise_factor * (matmul_flops / rate + elementwise / cal.elementwise_rate)


def cpu_step_efficiency(cal, held_bytes) -> np.ndarray:
    """A step's efficiency against the kernel rates when each device holds `held_bytes` of
    activations from forward to backward: the calibration's curve (a one-block and a two-block
    probe), log-linear between its points and flat beyond; step_efficiency without one. One
    layer's forward and backward as a loop's body, its activations read back at once in buffers
    the loop reuses, runs faster than two layers held in one step (benchmarks/block_depth.py)."""
    if not cal.efficiency_curve:
        return np.full_like(np.asarray(held_bytes, dtype=float), cal.step_efficiency)
    held, efficiency = np.array(cal.efficiency_curve).T
    return np.interp(np.log(np.maximum(held_bytes, 1.0)), np.log(held), efficiency)


def cpu_page_fault_seconds(cal, temp_bytes, scale) -> np.ndarray:
    """Seconds per step a device spends faulting in its step's temporaries (one block of
    `temp_bytes` per call), where the allocator maps a block that large afresh on every call:
    its pages faulted in, zeroed and unmapped at the calibrated rate (parex.calibrate.allocator);
    0 below the threshold, where an arena serves the block (it faults in only on the calls
    after free() trimmed that arena: unpriced, so a lower bound there), or without a rate."""
    temp_bytes = np.asarray(temp_bytes, dtype=float)
    if not cal.page_fault_rate or not cal.mmap_threshold_bytes:
        return np.zeros_like(temp_bytes)
    return np.where(temp_bytes > cal.mmap_threshold_bytes,
                    temp_bytes / (cal.page_fault_rate * scale), 0.0)


def cpu_compute(model, sizes: ModelSizes, grid: Grid, remat: str, cal, bandwidth: float,
                opt_elements, mem: dict) -> dict:
    """Seconds per step on the calibrated CPU mesh (module docstring); `bandwidth` is the
    measured copy bandwidth per device, for the activation traffic; `mem`: the step's memory
    parts per device, whose "activations" a device holds from forward to backward
    (cpu_step_efficiency) and, with its "temp", are the step's temporaries
    (cpu_page_fault_seconds)."""
    scale = cpu_rate_scale(grid, cal.n_devices, cal.parallel_devices)
    held_bytes, temp_bytes = mem["activations"], mem["activations"] + mem["temp"]
    layer = cpu_layer_seconds(sizes, grid, remat, cal, bandwidth)
    M, V = grid.tokens, sizes.V / grid.tensor  # the head: (M, D) @ (D, V/t), three passes
    head = 3 * 2 * M * sizes.D * V / cpu_matmul_rate(M, sizes.D, V, np.array(cal.matmul_curve))
    head = head + elementwise_flops(sizes, grid, remat)["head"] / cal.elementwise_rate
    speed = scale * cpu_step_efficiency(cal, held_bytes)
    per_micro = (layer * grid.stage_layers + head) / speed
    return {"per_microbatch": per_micro, "layers_per_microbatch": layer * grid.stage_layers / speed,
            "head_per_microbatch": head / speed,
            "optimizer": opt_elements * cal.optimizer_s_per_param / scale,
            "overhead": cal.step_overhead_s,
            "page_faults": cpu_page_fault_seconds(cal, temp_bytes, scale)}


# --- the pipeline --------------------------------------------------------------------------------

def unit_costs(grid: Grid, remat: str) -> tuple[np.ndarray, np.ndarray]:
    """(t_B, t_W) in units of t_F: the backward is twice the forward plus any recompute, split
    evenly between B and W when the schedule splits it (zbh1, zbv)."""
    backward = passes_per_layer(grid, remat) - 1
    split = np.isin(grid.schedule, [SCHEDULES.index(name) for name in SPLIT])
    return (np.round(np.where(split, 0.5 * backward, backward), 3),
            np.round(np.where(split, 0.5 * backward, 0.0), 3))


def bubble_seconds(grid: Grid, busy_per_micro, remat: str, hop) -> np.ndarray:
    """Makespan of the schedule table minus the busy time m·v·(t_F + t_B + t_W) of a stage."""
    makespan, per_hop = makespan_columns(grid, *unit_costs(grid, remat))  # t_F = 1
    t_f = busy_per_micro / grid.virtual_stages / passes_per_layer(grid, remat)
    bubble = makespan * t_f + per_hop * hop - grid.microbatches * busy_per_micro
    return np.where(grid.stage > 1, np.maximum(bubble, 0.0), 0.0)


# --- everything together -------------------------------------------------------------------------

def step_time(grid: Grid, compute: dict, seconds: dict, emulated: bool, remat: str,
              overlaps: dict | None = None, link_busy=None) -> dict:
    """STEP_TIME_PARTS from compute terms and per-family collective seconds (columns), and
    "stragglers": the part of compute and bubble the slowest device adds (inside both), and
    "saturation": what the step waits beyond them for its busiest network link (inside the
    exposed communication). `link_busy`: that link's seconds per step (alpha_beta.
    link_seconds; None on the emulated mesh): the overlaps hide each collective behind the
    compute on its own, but the collectives that share a link take turns on it, so the step
    lasts at least as long as the link is busy.
    `emulated`: the calibrated CPU mesh, where nothing overlaps and a pipeline runs tick by tick
    (compute's "lockstep", "busy", "ticks" and "sends" from ticks.py: an idle stage frees the
    shared cores for the busy ones, so the bubble is only the lockstep's idle cores).
    `overlaps`: predict.overlap.exposed_parts, what the gradient reduction, ZeRO's parameter
    gather and SP's chunked collectives leave exposed (None: all of them, as on the emulated
    mesh)."""
    m, L = grid.microbatches, np.maximum(grid.stage_layers, 1)
    critical = sum(seconds.get(k, 0.0) for k in ("tp", "sp", "cross-entropy", "cp-ulysses"))
    exposed = sum(seconds.get(k, 0.0) for k in EXPOSED)  # includes the critical ones
    if overlaps is None or emulated:
        exposed = exposed + sum(seconds.get(k, 0.0) for k in OVERLAPPED)
        critical = critical + sum(seconds.get(k, 0.0) for k in ("sp-chunked", "sp-chunked-rs"))
    else:
        exposed = exposed + sum(p["exposed"] + p["contention"] for p in overlaps.values())
        critical = critical + overlaps["tp-comm"]["exposed"] + overlaps["tp-comm"]["contention"]
    work = compute["per_microbatch"] * m
    for names, window in ((HIDE_BEHIND_COMPUTE, work), (("cp-ring",), work / 2)):
        t = sum(seconds.get(k, 0.0) for k in names)
        exposed = exposed + (t if emulated else np.maximum(t - window * (L - 1) / L, t / L))
    hops = seconds.get("pipeline", np.zeros(len(grid)))
    if emulated:  # the tick-synchronous executor (ticks.py): the lockstep's lost cores are
        piped = grid.stage > 1  # its bubble, its sends' bytes replace the hops' α + β·S
        bubble = np.where(piped, compute["lockstep"] - compute["busy"], 0.0)
        work = np.where(piped, compute["busy"], work)
        exposed = exposed + np.where(piped, compute["sends"], hops)
    else:
        per_hop = hops / np.maximum(2 * m * grid.virtual_stages, 1)
        # the head runs on the last stage only: the fill and drain cross the other stages
        stage = compute["per_microbatch"] - compute.get("head_per_microbatch", 0.0)
        bubble = bubble_seconds(grid, stage + critical / m, remat, per_hop)
    # the slowest of the step's synchronised devices sets the pace of its compute and of the
    # pipeline's fill and drain (stragglers.py); the emulated mesh's devices share the cores
    stretch = 1.0 if emulated else slowdown(grid.n_devices, compute.get("speed_sigma", 0.0))
    paced = work + compute["optimizer"]
    stragglers = (stretch - 1.0) * (paced + bubble)
    compute_s = (paced * stretch + compute["overhead"] + compute.get("ticks", 0.0)
                 + compute.get("page_faults", 0.0))
    bubble = bubble * stretch
    total = compute_s + exposed + bubble
    busy = np.zeros_like(total) if link_busy is None else link_busy
    saturation = np.maximum(busy - total, 0.0)
    return {"total": total + saturation, "compute": compute_s,
            "exposed_comm": exposed + saturation, "bubble": bubble, "stragglers": stragglers,
            "saturation": saturation}


__all__ = ["accelerator_compute", "bubble_seconds", "cpu_compute", "step_time"]
