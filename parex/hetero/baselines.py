"""What a heterogeneous plan is measured against.

(a) The best *even split* of the same cluster: what a planner that sees n identical devices
    runs. A Layout-like grid of P pipelines × p stages × tensor degree t (P·p·t = n), the layers
    spread as evenly as they go (balanced_partition: the first L mod p stages one more), the
    batch split evenly over the pipelines, and stage s of pipeline i on devices
    (s·P + i)·t … + t − 1 of the cluster's devices in order — the homogeneous mesh order
    (stage outermost, tensor innermost, parex.executor.mesh). Every order of the groups is tried, every
    microbatch size and remat policy; the best that fits wins.
(b) A homogeneous cluster of about the same total peak FLOP/s (parex.cluster.reference_cluster),
    searched the same way: HexiScale's comparison. Its MFU is against its own peak.
Both are predicted by the same heterogeneous predictor as the plan they are compared with.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..cluster import HeteroCluster, reference_cluster
from ..config import REMAT_POLICIES, ModelConfig
from ..plan.candidates import balanced_partition
from .costs import stage_setting
from .estimate import Estimator
from .predict import HeteroPrediction
from .search import MICROBATCH_SIZES, HeteroSearch, NoPlan, best_finished, rerank, search
from .structure import Unit
from .validate import tensor_degrees


def device_order(cluster: HeteroCluster, order) -> list[tuple[int, int]]:
    """Every device as (group index, device in group), groups in `order`."""
    return [(g, d) for g in order for d in range(cluster.groups[g].n_devices)]


def even_splits(cluster: HeteroCluster, model: ModelConfig, global_batch: int, sizes):
    """(label, pipelines of Units, layers per pipeline, {b: microbatches per pipeline}) of
    every even split."""
    n, G = cluster.n_devices, len(cluster.groups)
    per_node = [g.devices_per_node for g in cluster.groups]
    degrees = [t for t in tensor_degrees(model, min(per_node)) if all(d % t == 0
                                                                    for d in per_node)]
    for t in degrees:
        for P in range(1, n // t + 1):
            p = n // (t * P)
            if n % (t * P) or p > model.layers or global_batch % P:
                continue
            layers = list(balanced_partition(model.layers, p, 1))
            micro = {b: [global_batch // P // b] * P for b in sizes
                     if (global_batch // P) % b == 0}
            if not micro:
                continue
            for order in itertools.permutations(range(G)):
                devices = device_order(cluster, order)
                pipes = []
                for i in range(P):
                    units = []
                    for s in range(p):
                        g, d = devices[(s * P + i) * t]
                        units.append(Unit(g, d // t, t))
                    pipes.append(tuple(units))
                yield (t, P, p, order), pipes, [layers] * P, micro


def best_even_split(model: ModelConfig, cluster: HeteroCluster, global_batch: int,
                    seq_len: int | None = None, *, remats=REMAT_POLICIES,
                    microbatch_sizes=MICROBATCH_SIZES, memory_fraction: float = 1.0,
                    memory_cap: float | None = None, recipe: str = "mixed", zero: int = 0
                    ) -> HeteroPrediction | None:
    """The fastest fitting even split (module docstring), ZeRO stage `zero` between its
    pipelines, or None when none fits."""
    T = seq_len or model.seq_len
    sizes = [b for b in microbatch_sizes if global_batch % b == 0]
    splits = list(even_splits(cluster, model, global_batch, sizes))
    if not splits:
        return None
    labels, pipes, layers, micro = zip(*splits)
    settings = {r: stage_setting(model, T, r, recipe) for r in remats}
    memory = {"memory_fraction": memory_fraction, "memory_cap": memory_cap}
    finished = []
    for remat in remats:
        est = Estimator(cluster, settings[remat], global_batch, sizes, **memory, zero=zero)
        bounded = []
        for lo in range(0, len(pipes), 96):
            hi = lo + 96
            bounded += est.estimate(list(pipes[lo:hi]), list(labels[lo:hi]),
                                    layers=list(layers[lo:hi]), microbatches=list(micro[lo:hi]))
        finished += best_finished(est, bounded, 8)
    ranked = rerank(cluster, settings, finished, global_batch, 1, memory)
    return ranked[0] if ranked else None


def homogeneous_search(model: ModelConfig, cluster: HeteroCluster, global_batch: int,
                       seq_len: int | None = None, chip=None, **options):
    """(the same-peak homogeneous cluster, its search) — HexiScale's comparison."""
    reference = reference_cluster(cluster, chip)
    return reference, search(model, reference, global_batch, seq_len, **options)




@dataclass
class Comparison:
    """A search with its two yardsticks: the best even split and the same-peak cluster."""

    search: HeteroSearch
    even: HeteroPrediction | None  # None when no even split fits
    reference: HeteroCluster
    homogeneous: HeteroSearch | None  # None when nothing fits the reference

    @property
    def versus_even(self) -> float:
        """The best plan's speed over the best even split's (= their MFU ratio)."""
        return self.search.best.mfu / self.even.mfu if self.even else float("nan")

    @property
    def versus_homogeneous(self) -> float:
        """The best plan's MFU over the same-peak homogeneous cluster's best MFU."""
        return (self.search.best.mfu / self.homogeneous.best.mfu if self.homogeneous
                else float("nan"))


def compare(model: ModelConfig, cluster: HeteroCluster, global_batch: int,
            seq_len: int | None = None, *, reference_chip=None, **options) -> Comparison:
    """Search `cluster`, then its best even split and the same-peak homogeneous cluster."""
    result = search(model, cluster, global_batch, seq_len, **options)
    keep = {k: v for k, v in options.items() if k in ("remats", "microbatch_sizes",
                                                      "memory_fraction", "memory_cap",
                                                      "recipe", "zero")}
    even = best_even_split(model, cluster, global_batch, seq_len, **keep)
    reference = reference_cluster(cluster, reference_chip)
    try:
        homogeneous = search(model, reference, global_batch, seq_len, **options)
    except NoPlan:
        homogeneous = None
    return Comparison(result, even, reference, homogeneous)


__all__ = ["Comparison", "best_even_split", "compare", "device_order", "even_splits",
           "homogeneous_search"]
