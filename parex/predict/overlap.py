"""Communication behind compute: what each overlap hides, and the remainder it leaves exposed.

Bucketed overlaps: the data-parallel gradient reduction behind the backward (grad-reduce) and
ZeRO-1/2's (the distributed optimizer's) parameter all-gather behind the next step's forward
(param-gather). t seconds of collective in n buckets beside w seconds of compute:

    exposed = max(t − w·(n − 1)/n,  t/n)

The last bucket of gradients is complete only when the backward ends, and the first bucket of
parameters is needed before the forward's first layer runs: one bucket's time stays exposed at
the least; whatever the others need beyond the window waits too.
    n  Megatron-Core (parex.stacks.bucket_params): the parameters of a device over the bucket
       size, max(40M, 1M·dp); otherwise one bucket per layer, L
    w  Megatron-Core reduces during the last microbatch's backward only (the others run under
       no_sync) and gathers during the first microbatch's forward: one microbatch's backward
       (forward); one bucket per layer: the whole step's backward (parex's ideal program,
       PyTorch DDP's buckets as parex has always priced them), or one microbatch's forward

Chunked overlaps: sequence parallelism's all-gathers and reduce-scatters split into n chunks
that run beside the GEMM they feed (an all-gather) or come from (a reduce-scatter). One op of
c seconds beside a GEMM of g seconds:

    exposed    = c/n + max(c − g, 0)·(n − 1)/n     the pipeline's fill (the first chunk gathered
                                                   before the GEMM's first chunk, or the last
                                                   scattered after its last) and the
                                                   communication longer than the GEMM
    contention = f · min(c·(n − 1)/n, g)           the GEMM runs on the SMs the collective's
                                                   kernels leave it, 1 − f of them

    tp-comm    Transformer Engine's defaults (transformer_engine/pytorch/module/base.py,
               initialize_ub: the methods table and get_default_config): all-gathers by ring
               exchange, n = t chunks, copied by the copy engines with num_sm = 1; the forward's
               reduce-scatters pipelined, num_splits n = 4, on num_sm = 16 SMs
    async-tp   PyTorch's micro-pipelined TP (torch.distributed._symmetric_memory, torchtitan):
               n = t chunks both ways, moved by copy-engine memcpy: f = 0
    f = num_sm / the chip's SMs (its profile's gemm "units"); 0 where the profile states none.
    g = the mean of the block's projection GEMMs on a device (QKV, W_o, the MLP's input(s),
        W_out) at the rate compute uses: each gathered op feeds one of them, each scattered op
        leaves one, and the backward's gathers feed the row-parallel layers' input-gradient
        GEMMs (the forward's size).

Paired overlap: a mixture of experts' expert-parallel all-to-alls (the dispatch family, t
seconds a step) under Megatron-Core's --overlap-moe-expert-parallel-comm, which runs one
microbatch's forward and another's backward as one merged pass in the 1F1B steady state, each
one's all-to-alls beside the other's compute (w, the step's compute). The pipeline's warm-up
forwards and cool-down backwards have no partner:

    exposed = u·t + (1 − u)·max(t − w, 0)
    u = min(1, warm-up chunks / (m·v)),  warm-up chunks = (p − 1) + (v − 1)·p interleaved (rank
        r warms up (p − r − 1)·2 + (v − 1)·p chunks in Megatron-Core's schedule, averaged over
        the ranks), (p − 1)/2 in plain 1F1B, and at least one (without a pipeline, the first
        microbatch's forward and the last one's backward run alone)

Shared links: each overlap above hides its collective as if the link were its own, but the
collectives on one link take turns, so the report's last row, links, holds the busiest network
link's seconds per step (every collective's bytes on a device's NIC share or a fabric tier
above it, over that tier's rate: alpha_beta.link_seconds) and what the step waits for it beyond
its compute and exposed collectives (time.step_time: the step lasts at least as long as that
link is busy). A 3D layout of the 80B GPT on 8,192 Frontier GCDs (tensor=1x4x32, data 64)
gathers and scatters its Z blocks (4.7 s) behind 3.5 s of compute on the NICs its Y
all-reduces use: priced overlap by overlap, 3.75 s a step; its NICs carry 4.8 s of bytes.

Not modelled: HBM bandwidth the collectives share with the GEMMs, and the SMs NCCL's kernels take
from the compute during the bucketed and paired overlaps. The emulated CPU mesh overlaps
nothing.
"""

from __future__ import annotations

import numpy as np

from ..stacks import bucket_params
from .accelerator import gemm_seconds, matmul_shapes
from .flops import passes_per_layer
from .memory import state_elements
from .shapes import Grid, ModelSizes

# Transformer Engine's userbuffers defaults (module docstring): chunks and SMs per direction
TE_PIPELINE_SPLITS = 4
TE_PIPELINE_SMS = 16
TE_RING_SMS = 1
# the step-time families each overlap covers
CHUNKED = {"sp-chunked": "all-gather", "sp-chunked-rs": "reduce-scatter"}
NAMES = ("tp-comm", "grad-reduce", "param-gather", "moe-a2a", "links")  # the report's rows
#   ("tp-comm" also stands for async-tp; "links": the busiest network link, `link_part`)


def bucketed(t, window, n) -> np.ndarray:
    """Exposed seconds of t seconds of collective in n buckets beside `window` seconds."""
    n = np.maximum(n, 1)
    return np.where(t > 0, np.maximum(t - window * (n - 1) / n, t / n), 0.0)


def paired(t, work, grid: Grid) -> np.ndarray:
    """Exposed seconds of t seconds of all-to-all under the paired overlap (module docstring)
    beside `work` seconds of the step's compute."""
    p, v = grid.stage, grid.virtual_stages
    warm = np.where(v > 1, (p - 1) + (v - 1) * p, (p - 1) / 2)
    alone = np.minimum(1.0, np.maximum(warm, 1) / (grid.microbatches * v))
    return alone * t + (1 - alone) * np.maximum(t - work, 0.0)


def chunked(c, gemm, n, sm_fraction) -> tuple[np.ndarray, np.ndarray]:
    """(exposed, contention) seconds of one op of c seconds in n chunks beside a GEMM of
    `gemm` seconds whose SMs it shares by `sm_fraction`."""
    n = np.maximum(n, 1)
    behind = c * (n - 1) / n
    return c / n + np.maximum(c - gemm, 0.0) * (n - 1) / n, sm_fraction * np.minimum(behind, gemm)


def projection_gemm_seconds(sizes: ModelSizes, grid: Grid, chip, dtype: str, act_bytes: int):
    """The mean forward seconds of a block's projection GEMMs on one device (g above), at
    compute's rate (the chip's matmul efficiency and step efficiency)."""
    rate = chip.peak(dtype) * chip.matmul_efficiency
    shapes = matmul_shapes(sizes, grid)[:4]  # QKV, W_o, the MLP's input(s), W_out
    bandwidth = chip.achievable_bandwidth()
    seconds = sum(gemm_seconds(M, K, N, c, rate, bandwidth, act_bytes, chip.gemm)
                  for M, K, N, c in shapes)
    return seconds / sum(c for *_, c in shapes) / chip.step_efficiency


def chunking(conv, grid: Grid, units: int) -> dict:
    """{family: (chunks n, SM fraction f)} of the chunked families under the convention."""
    t = grid.tensor.astype(float)
    if conv.async_tp:
        return {"sp-chunked": (t, 0.0), "sp-chunked-rs": (t, 0.0)}
    share = (lambda sms: sms / units) if units else (lambda sms: 0.0)
    return {"sp-chunked": (t, share(TE_RING_SMS)),
            "sp-chunked-rs": (TE_PIPELINE_SPLITS + 0 * t, share(TE_PIPELINE_SMS))}


def exposed_parts(grid: Grid, sizes: ModelSizes, conv, remat: str, compute: dict, seconds: dict,
                  ops: dict, units: int) -> dict:
    """{overlap: {"comm", "exposed", "contention"}} seconds (columns) of the four overlaps
    (module docstring): the collective's seconds, what stays on the critical path, and what
    the GEMMs lose beside it. `ops`: the chunked families' ops per step; `units`: the chip's
    SMs (0: unknown)."""
    zeros = np.zeros(len(grid))
    per_micro, m = compute["per_microbatch"], grid.microbatches
    passes = passes_per_layer(grid, remat)
    L = np.maximum(grid.stage_layers, 1)
    size = bucket_params(conv.bucket_params, grid.dp)
    megatron = size > 0
    buckets = (np.where(megatron, np.ceil(state_elements(sizes, grid, "param")
                                          / np.maximum(size, 1.0)), L)
               if conv.bucket_params else L)
    grads = seconds.get("grad-reduce", zeros)
    backward = np.where(megatron, per_micro * (passes - 1) / passes, per_micro * m * 2 / 3)
    gathers = seconds.get("zero-gather", zeros)
    out = {"grad-reduce": _part(grads, bucketed(grads, backward, buckets)
                                if conv.overlaps_grad_reduce else grads, zeros),
           "param-gather": _part(gathers, bucketed(gathers, per_micro / passes, buckets)
                                 if conv.overlaps_param_gather else gathers, zeros)}
    comm, exposed, contention = zeros, zeros, zeros
    if conv.overlaps_tp_comm or conv.async_tp:
        gemm = compute.get("projection_gemm", zeros)
        for family, (n, f) in chunking(conv, grid, units).items():
            t, count = seconds.get(family, zeros), ops.get(family, zeros)
            c = np.where(count > 0, t / np.maximum(count, 1), 0.0)
            e, slow = chunked(c, gemm, n, f)
            comm, exposed, contention = comm + t, exposed + e * count, contention + slow * count
    out["tp-comm"] = _part(comm, exposed, contention)
    a2a = seconds.get("moe-dispatch", zeros)
    out["moe-a2a"] = _part(a2a, paired(a2a, per_micro * m, grid) if conv.overlaps_moe_a2a
                           else a2a, zeros)
    return out


def link_part(busy, saturation) -> dict:
    """The report's "links" row: the busiest network link's seconds per step (every
    collective's bytes on it, alpha_beta.link_seconds) and what the step waits for it beyond
    its compute and exposed collectives (time.step_time's saturation)."""
    return _part(busy, saturation, np.zeros_like(busy))


def _part(comm, exposed, contention) -> dict:
    return {"comm": comm, "exposed": exposed, "contention": contention}


def column(name: str, part: str) -> str:
    """The prediction column of one overlap's part: overlap_<name>_<part>_s."""
    return f"overlap_{name.replace('-', '_')}_{part}_s"


__all__ = ["CHUNKED", "NAMES", "bucketed", "chunked", "chunking", "column", "exposed_parts",
           "link_part", "paired", "projection_gemm_seconds"]
