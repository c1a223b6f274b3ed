"""Searching heterogeneous plans: which asymmetric plan should this mixed cluster run?

The search is hierarchical, as HexiScale's partitioning is, but exhaustive over a small
structural space rather than a graph partitioner's heuristic:

    structure   per group a tensor degree (a divisor of its node size that splits the model),
                the number of pipelines, the order of the groups along a pipeline, the
                placement (structure.py): a few thousand shapes for a 48-GPU, 3-type cluster
    per shape   layers over each pipeline's stages by bisection on the bottleneck within each
                device's memory, microbatches over the pipelines by bisection on the finishing
                time (split.py), the gradient reduction across pipelines placed on its links
                (estimate.py), for every microbatch size and remat policy
    re-rank     the best shapes rebuilt as HeteroPlans and predicted exactly
                (predict.predict_plan: the 1F1B tables timed stage by stage)

Why not an ILP: the bottleneck and memory constraints of one pipeline are a one-dimensional
monotone problem (bisection is exact and takes microseconds), and the couplings left (pipelines
sharing the batch, the gradient reduction across them) are few enough to enumerate, so no solver
or new dependency is needed, and every plan considered can be listed and explained.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

from ..cluster import HeteroCluster
from ..config import REMAT_POLICIES, ModelConfig
from ..errors import InputError
from .costs import stage_setting
from .estimate import Estimate, Estimator, index_codes
from .plan import HeteroPlan, Pipeline, Stage
from .predict import HeteroPrediction, predict_plan
from .sharding import check_zero
from .structure import PLACEMENTS, Structure, feasible
from .validate import tensor_degrees

MICROBATCH_SIZES = (1, 2, 4, 8)
RERANK = 24  # estimated plans re-timed exactly
CHUNK = 96  # candidates estimated together


class NoPlan(InputError):
    """No plan of the model fits the cluster; the message says what was tried."""


@dataclass
class HeteroSearch:
    """The ranked plans of one model on one cluster, and how the search went."""

    model: ModelConfig
    cluster: HeteroCluster
    global_batch: int
    seq_len: int
    top: list[HeteroPrediction]  # best first, each fitting
    structures: int  # shapes estimated
    considered: int  # (shape, remat, microbatch size) plans estimated
    fitting: int  # of those, the ones that fit in memory
    seconds: float
    estimates: list[Estimate] = field(default_factory=list, repr=False)

    @property
    def best(self) -> HeteroPrediction:
        return self.top[0]

    @property
    def layouts_per_s(self) -> float:
        return self.considered / self.seconds if self.seconds else 0.0


def structures(cluster: HeteroCluster, model: ModelConfig, orders: str = "all"):
    """Every Structure of the cluster: tensor degree per group, pipelines, order, placement."""
    per_group = [[t for t in tensor_degrees(model, g.devices_per_node)
                  if g.devices_per_node % t == 0] for g in cluster.groups]
    G = len(cluster.groups)
    perms = (list(itertools.permutations(range(G))) if orders == "all"
             else [tuple(sorted(range(G), key=lambda g: -cluster.groups[g].chip.hbm_bytes))])
    for tensors in itertools.product(*per_group):
        most = min(g.n_devices // t for g, t in zip(cluster.groups, tensors))
        for P in range(1, min(most, model.layers) + 1):
            if not feasible(cluster, tensors, P):
                continue
            for order in perms:
                for placement in PLACEMENTS if P > 1 else PLACEMENTS[:1]:
                    yield Structure(tensors, P, order, placement)


def plan_of(cluster: HeteroCluster, pipes, layers, microbatches, microbatch: int,
            zero: int = 0) -> HeteroPlan:
    """The HeteroPlan of pipelines of Units, blocks per stage and microbatches per pipeline,
    ZeRO stage `zero` between them."""
    out = []
    for units, counts, m in zip(pipes, layers, microbatches):
        stages = tuple(Stage(cluster.groups[u.group].name, u.first, u.tensor, n)
                       for u, n in zip(units, counts))
        out.append(Pipeline(m * microbatch, m, stages))
    return HeteroPlan(tuple(out), zero=zero)


def build_plan(cluster: HeteroCluster, estimate: Estimate) -> HeteroPlan:
    """The HeteroPlan an Estimate describes."""
    return plan_of(cluster, estimate.pipes, estimate.layers, estimate.microbatches,
                   estimate.microbatch, estimate.zero)


def best_finished(estimator: Estimator, bounded: list[Estimate], n: int) -> list[Estimate]:
    """The n best finished estimates, finishing them in order of their bound and stopping
    once a bound exceeds the n-th best step so far (branch and bound: a reduction only adds)."""
    done: list[Estimate] = []
    for e in sorted(bounded, key=lambda e: e.bound_s):
        if len(done) >= n and e.bound_s >= done[n - 1].step_s:
            break
        estimator.finish(e)
        done.append(e)
        done.sort(key=lambda e: e.step_s)
    return done[:n]


def rerank(cluster, settings: dict, estimates: list[Estimate], global_batch: int, top: int,
           memory: dict) -> list[HeteroPrediction]:
    """The best `RERANK` estimates predicted exactly; the fitting ones, fastest first, each
    plan once."""
    estimates = sorted(estimates, key=lambda e: e.step_s)
    seen, exact = set(), []
    for e in estimates[:max(RERANK, 2 * top)]:
        plan = build_plan(cluster, e)
        key = (str(plan), e.remat)
        if key in seen:
            continue
        seen.add(key)
        pred = predict_plan(plan, cluster, settings[e.remat], global_batch, check=False,
                            **memory)
        if pred.fits:
            exact.append(pred)
    exact.sort(key=lambda p: p.step_time_s["total"])
    return exact[:top]


def search(model: ModelConfig, cluster: HeteroCluster, global_batch: int,
           seq_len: int | None = None, *, top: int = 5, remats=REMAT_POLICIES,
           microbatch_sizes=MICROBATCH_SIZES, memory_fraction: float = 1.0,
           memory_cap: float | None = None, orders: str = "all", recipe: str = "mixed",
           zero: int = 0) -> HeteroSearch:
    """Rank asymmetric plans of `model` on `cluster` (module docstring); each device may use
    memory_fraction of its memory, and at most memory_cap bytes; ZeRO stage `zero` between
    the pipelines (parex.hetero.sharding)."""
    check_zero(zero)
    memory = {"memory_fraction": memory_fraction, "memory_cap": memory_cap}
    start = time.perf_counter()
    T = seq_len or model.seq_len
    settings = {r: stage_setting(model, T, r, recipe) for r in remats}
    sizes = [b for b in microbatch_sizes if global_batch % b == 0]
    shapes = list(structures(cluster, model, orders))
    candidates = [shape.pipelines_of(cluster) for shape in shapes]
    estimators = {r: Estimator(cluster, settings[r], global_batch, sizes, **memory, zero=zero)
                  for r in remats}
    bounded = {r: [] for r in remats}
    for lo in range(0, len(shapes), CHUNK):
        chunk = candidates[lo:lo + CHUNK]
        codes = index_codes(cluster, chunk)  # shared by every remat policy
        for remat, est in estimators.items():
            bounded[remat] += est.estimate(chunk, shapes[lo:lo + CHUNK], codes=codes)
    fitting = sum(len(b) for b in bounded.values())
    estimates = [e for r in remats
                 for e in best_finished(estimators[r], bounded[r], max(RERANK, 2 * top))]
    considered = len(shapes) * len(remats) * len(sizes)
    ranked = rerank(cluster, settings, estimates, global_batch, top, memory)
    if not ranked:
        raise NoPlan(no_plan_message(model, cluster, global_batch, T, len(shapes)))
    return HeteroSearch(model, cluster, global_batch, T, ranked, len(shapes), considered,
                        fitting, time.perf_counter() - start, estimates)


def no_plan_message(model, cluster, B, T, shapes) -> str:
    memory = ", ".join(f"{g.n_devices} × {g.chip.hbm_bytes / 1e9:.0f} GB" for g in cluster.groups)
    return (f"no plan of {model.name} fits {cluster.name} ({memory}) with global batch {B} × {T} "
            f"tokens: {shapes} shapes tried with every remat policy; use a shorter sequence, "
            f"full remat, a smaller model, or add devices with more memory")


__all__ = ["HeteroSearch", "MICROBATCH_SIZES", "NoPlan", "best_finished", "build_plan", "plan_of",
           "rerank", "search", "structures"]
