"""Predicted efficiency against device count for one layout: weak and strong scaling.

A layout grows by its data axis (k times the devices: data × k), on the hardware's network, so
its groups cross more tiers, its rings grow and its slowest device is the slowest of more:

    weak     the global batch grows with the devices (each replica keeps its share):
             efficiency(N) = tokens/s per device at N / tokens/s per device at the base
    strong   the global batch stays (each replica's share, and a pipeline's microbatches, shrink):
             efficiency(N) = step(base) · base devices / (step(N) · N)

Each point is parex.predict's prediction of the grown layout, with the step's parts by effect
(parex.predict.explain); a device count the layout cannot grow to (not a multiple of its size,
a batch its replicas cannot share) is left out.
"""

from __future__ import annotations

import math

from ..config import ModelConfig, TrainConfig
from ..layout import Layout, LayoutError
from ..setting import as_cluster, resolve
from .explain import breakdown

MODES = ("weak", "strong")


def grown(layout: Layout, train: TrainConfig, factor: int, mode: str):
    """(layout, train) with the data axis `factor` times wider, the batch as `mode` says; a
    pipeline keeps its microbatch size, so under strong scaling its microbatches shrink."""
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: use one of {', '.join(MODES)}")
    scaled = layout.replace(data=layout.data * factor)
    if mode == "weak":
        return scaled, train.replace(global_batch=train.global_batch * factor)
    if layout.stage > 1 and layout.microbatches:
        if layout.microbatches % factor:
            raise LayoutError(f"{layout.microbatches} microbatches over {factor}× the replicas")
        scaled = scaled.replace(microbatches=layout.microbatches // factor)
    return scaled, train


def scaling_curve(model: ModelConfig, train: TrainConfig, layout: Layout, hardware,
                  devices, mode: str = "weak", **predict_kwargs) -> list[dict]:
    """One row per device count in `devices` (multiples of the layout's): devices, mode, the
    layout, step seconds, tokens/s per device, efficiency against the first count, and the
    step's parts (explain.breakdown). What `train` and `layout` leave to the defaults is
    resolved once, at the first count (parex.setting), and kept as the layout grows."""
    base_n = layout.n_devices
    base = resolve(model, train, layout, _hardware(hardware, base_n), **predict_kwargs)
    layout, train = base.layout, base.train
    rows = []
    for n in sorted(devices):
        factor = n // base_n
        if factor < 1 or n % base_n:
            continue
        try:
            scaled, scaled_train = grown(layout, train, factor, mode)
            parts = breakdown(model, scaled_train, scaled, _hardware(hardware, n),
                              **predict_kwargs)["parts"]
        except (LayoutError, ValueError):
            continue
        tokens = scaled_train.tokens_per_step(model)
        rows.append({"devices": n, "mode": mode, "layout": str(scaled),
                     "step_s": parts["total"], "tokens_per_s_per_device":
                     tokens / parts["total"] / n} | {f"{k}_s": v for k, v in parts.items()})
    for row in rows:
        first = rows[0]
        # per-device throughput against the first count's (weak); device-seconds per step
        # against the first count's (strong): the same tokens each step
        row["efficiency"] = (row["tokens_per_s_per_device"] / first["tokens_per_s_per_device"]
                             if mode == "weak" else
                             first["step_s"] * first["devices"] / (row["step_s"] * row["devices"]))
    return rows


def _hardware(hardware, n_devices: int):
    """A Cluster of enough nodes for n devices: the one given, or the profile's."""
    cluster = as_cluster(hardware, n_devices)
    if cluster.n_devices >= n_devices:
        return cluster
    per = cluster.chip.devices_per_node
    return as_cluster(cluster.chip, math.ceil(n_devices / per) * per)


def doubling(start: int, stop: int) -> list[int]:
    """start, 2·start, 4·start, ... up to stop."""
    out = [start]
    while out[-1] * 2 <= stop:
        out.append(out[-1] * 2)
    return out


__all__ = ["MODES", "doubling", "grown", "scaling_curve"]
