"""Low-communication training at scale: step time and bandwidth when replicas (clusters with fast
links inside) are joined by a slow wide-area link.

    predict_diloco(model, train, layout, hardware, wan) -> Prediction with a `diloco` block
    wan_rows(t_inner, n_params, replicas, inner_steps, wan, ...) -> one row per method

Per replica (one cluster; its WAN uplink of W bytes/s and latency α carries the exchange):
    t_inner   one inner step of the inner layout on B/R sequences (parex.predict.predict)
    S         = |θ|·b, one full exchange; b = 4 (f32), 2 (bf16), 1 or 0.5 (+ 4/256 of scales)
    t_sync    = 2·(R−1)/R · S / W + 2·(R−1)·α            ring all-reduce over the R replicas
    sync DP   t = t_inner + t_sync(b = gradient bytes)  every step, exposed
    DiLoCo    t = t_inner + t_sync / H                  blocking, once every H steps
    streaming t = t_inner + t_sync / H                  P fragment syncs of S/P, H/P steps apart:
                                                        the same average, 1/P of the peak
    overlap   t = t_inner + max(0, t_sync − H·t_inner) / H    the exchange runs behind the next
                                                        round's H inner steps (one-step delay)
Bandwidth needed to keep the WAN off the critical path:
    B_avg  = 2·(R−1)/R · S / (H·t_inner)     (overlap, streaming + overlap: also the peak)
    B_peak = 2·(R−1)/R · S / t_inner         (vanilla: the sync should last about one step;
                                              streaming: / P;  sync DP: with gradient bytes, H = 1)
    H*     = ⌈t_sync / t_inner⌉              from here on the WAN time per step is below one
                                              step's compute and overlap hides it completely
(2·(R−1)/R → 2 for many replicas: the issue's B_avg = 2·|θ|·bytes/(H·t_step).) The outer
Nesterov update itself is elementwise and not timed.

Per device (the measured side's convention, parex.lowcomm.measure): the exchange is split over the
n = n_devices/R devices of a replica, so each sends 1/n of it: cross_replica_bytes_per_step =
S_buffer/n/H, S_buffer the all-reduced buffer (f32, bf16) or all-to-all + all-gather (int8/int4).
"""

from __future__ import annotations

import math

from ..config import ModelConfig, TrainConfig
from ..errors import InputError
from ..hardware import Cluster, Link
from ..layout import Layout, inner_layout
from ..setting import Setting
from .exchange import QUANT_BLOCK
from .rounds import exchange_bytes_per_element

METHODS = ("sync-dp", "diloco", "streaming", "overlap", "streaming+overlap")


def wan_link(gbps: float = 1.0, latency_ms: float = 10.0) -> Link:
    """A wide-area link of `gbps` gigabits per second, one direction, and its latency."""
    if gbps <= 0:
        raise InputError(f"WAN bandwidth {gbps} Gb/s: give a positive bandwidth, e.g. 1")
    return Link(gbps * 1e9 / 8, latency_ms * 1e-3, f"WAN {gbps:g} Gb/s")


def ring_factor(replicas: int) -> float:
    """Share of the buffer a ring all-reduce sends per participant: 2·(R−1)/R."""
    return 2 * (replicas - 1) / replicas


def allreduce_seconds(nbytes: float, replicas: int, link: Link) -> float:
    if replicas <= 1:
        return 0.0
    return ring_factor(replicas) * nbytes / link.bandwidth + 2 * (replicas - 1) * link.latency


def h_crossover(t_sync: float, t_inner: float) -> int:
    """The smallest H for which the WAN time per step, t_sync / H, is at most t_inner."""
    return max(1, math.ceil(t_sync / t_inner - 1e-12)) if t_inner > 0 else 0


def wan_rows(t_inner: float, n_params: int, replicas: int, inner_steps: int, wan: Link, *,
             fragments: int = 1, outer_dtype: str = "f32", grad_bytes: float = 4.0) -> list:
    """Step time, exposed WAN time and bandwidth needs of each method in METHODS."""
    R, H, P = replicas, inner_steps, fragments
    S = n_params * exchange_bytes_per_element(outer_dtype, QUANT_BLOCK)
    t_sync, wire = allreduce_seconds(S, R, wan), ring_factor(R) * S
    t_dp = allreduce_seconds(n_params * grad_bytes, R, wan)
    hidden = max(0.0, t_sync - H * t_inner) / H
    exposed = {"sync-dp": t_dp, "diloco": t_sync / H, "streaming": t_sync / H,
               "overlap": hidden, "streaming+overlap": hidden}
    peak = {"sync-dp": ring_factor(R) * n_params * grad_bytes / t_inner,
            "diloco": wire / t_inner, "streaming": wire / (P * t_inner),
            "overlap": wire / (H * t_inner), "streaming+overlap": wire / (H * t_inner)}
    rows = []
    for method in METHODS:
        per_step = ring_factor(R) * n_params * grad_bytes if method == "sync-dp" else wire / H
        rows.append({"method": method, "step_time_s": t_inner + exposed[method],
                     "compute_s": t_inner, "exposed_wan_s": exposed[method],
                     "wan_bytes_per_step": per_step,
                     "avg_bandwidth": per_step / t_inner, "peak_bandwidth": peak[method],
                     "slowdown": (t_inner + exposed[method]) / t_inner,
                     "h_crossover": None if method == "sync-dp" else h_crossover(t_sync, t_inner)})
    return rows


def method_of(layout: Layout) -> str:
    if layout.overlap:
        return "streaming+overlap" if layout.fragments > 1 else "overlap"
    return "streaming" if layout.fragments > 1 else "diloco"


def outer_buffer_bytes(n_params: int, outer_dtype: str) -> float:
    """Bytes of the exchange's collectives by hlo.py's convention: the all-reduced buffer, or
    for int8/int4 an all-to-all and an all-gather of the payload and its scales."""
    per = exchange_bytes_per_element(outer_dtype, QUANT_BLOCK)
    return n_params * per * (2 if outer_dtype in ("int8", "int4") else 1)


def predict_diloco(setting: Setting, wan: Link | None = None):
    """One replica's inner step (every field of the Prediction), plus the outer exchange over
    `wan` (default 1 Gb/s, 10 ms) in a `diloco` block; step_time_s adds the exposed WAN time.
    `setting`: the whole DiLoCo layout's, resolved (parex.setting.resolve)."""
    from ..predict.core import checked, predict_setting

    wan = wan or wan_link()
    model, train, layout, cluster = setting.model, setting.train, setting.layout, setting.cluster
    checked(setting)
    R, n_inner = layout.replica, layout.n_devices // layout.replica
    per = cluster.chip.devices_per_node
    replica = setting.replace(cluster=Cluster(cluster.chip, max(1, -(-n_inner // per))),
                              train=train.replace(global_batch=train.global_batch // R))
    inner = predict_setting(replica.with_layout(inner_layout(layout)))
    t_inner = inner.step_time_s["total"]
    rows = {r["method"]: r for r in wan_rows(
        t_inner, model.n_params, R, layout.inner_steps, wan, fragments=layout.fragments,
        outer_dtype=layout.outer_dtype)}
    row, H, P = rows[method_of(layout)], layout.inner_steps, layout.fragments
    buffer = outer_buffer_bytes(model.n_params, layout.outer_dtype) / n_inner
    wire = ring_factor(R) * model.n_params * exchange_bytes_per_element(
        layout.outer_dtype, QUANT_BLOCK) / n_inner
    block = {"inner_steps": H, "replicas": R, "fragments": P, "outer_dtype": layout.outer_dtype,
             "overlap": layout.overlap, "method": row["method"],
             "cross_replica_bytes_per_step": buffer / H, "outer_bytes_per_sync": buffer / P,
             "cross_replica_wire_bytes_per_step": wire / H, "outer_wire_bytes_per_sync": wire / P,
             "inner_bytes_per_device_per_step": sum(inner.comm_bytes_per_device.values()),
             "wan": wan.name, "wan_bandwidth": wan.bandwidth, "wan_latency": wan.latency,
             "inner_step_s": t_inner, "exposed_wan_s": row["exposed_wan_s"],
             "sync_dp_step_s": rows["sync-dp"]["step_time_s"],
             "avg_bandwidth": row["avg_bandwidth"], "peak_bandwidth": row["peak_bandwidth"],
             "h_crossover": row["h_crossover"]}
    step = dict(inner.step_time_s)
    step["exposed_comm"] += row["exposed_wan_s"]
    step["total"] += row["exposed_wan_s"]
    inner.mfu, inner.hfu = (x * t_inner / step["total"] for x in (inner.mfu, inner.hfu))
    inner.layout, inner.n_devices, inner.diloco = str(layout), layout.n_devices, block
    inner.step_time_s = step
    inner.tokens_per_step = train.tokens_per_step(model)  # all replicas' tokens per step
    inner.assumptions = setting.to_json()  # the whole batch, not one replica's
    return inner


# --- at scale ------------------------------------------------------------------------------------

def scale_models() -> dict:
    """Models from 1B to 107B with an inner layout (one replica) that fits 80 GB devices at 64
    sequences of 4096 tokens per replica step with full remat: name -> (ModelConfig, layout).
    The 107B model is Llama-shaped and sized like DiLoCoX's
    (arXiv 2506.21263), not its exact architecture."""
    from ..config import model_preset

    llama_1b = ModelConfig("llama-1b", "llama", 16, 2048, 32, 8, 8192, 128256, 8192)
    llama_107b = ModelConfig("llama-107b", "llama", 84, 10240, 80, 8, 32768, 152064, 4096)
    return {"1B": (llama_1b, Layout(data=8, microbatches=4)),  # 1 node of 8 GPUs
            "8B": (model_preset("llama3-8b"), Layout(fsdp=8, microbatches=4)),  # 1 node
            "70B": (model_preset("llama3-70b"), Layout(fsdp=8, tensor=8, microbatches=4)),
            "107B": (llama_107b, Layout(fsdp=16, tensor=8, microbatches=2))}  # 16 nodes


def wan_sweep(models: dict, hardware: str, replicas: int, hs, wan: Link, *, seq: int = 4096,
              sequences_per_replica: int = 64, outer_dtype: str = "f32", fragments: int = 1):
    """Rows (model, method, inner_steps, step_time_s, ...) of wan_rows for every model of
    `models` (as scale_models returns) and every H in `hs`; one inner-step prediction each."""
    import pandas as pd

    from ..predict import predict

    out = []
    for name, (model, inner) in models.items():
        train = TrainConfig(global_batch=sequences_per_replica, seq_len=seq, remat="full")
        t_inner = predict(model.replace(seq_len=max(model.seq_len, seq)), train, inner,
                          hardware).step_time_s["total"]
        for h in hs:
            for row in wan_rows(t_inner, model.n_params, replicas, h, wan,
                                fragments=fragments, outer_dtype=outer_dtype):
                out.append({"model": name, "params": model.n_params, "inner_steps": h,
                            "inner_layout": str(inner), **row})
    return pd.DataFrame(out)
