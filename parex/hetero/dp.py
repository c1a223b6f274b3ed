"""The data-parallel gradient reduction across pipelines of a heterogeneous plan.

Block ℓ lives on one stage of every pipeline, and those stages may sit on different nodes,
groups and tensor degrees (pipelines split the layers differently). Its gradient is summed over
them by a hierarchical ring all-reduce: first among the participants that share a node (the
group's intra-node link), then among the nodes of each group (its inter-node link), then among
the groups (the inter-group link), each level on 1/g of the data of the level before, every level
at its slowest member's link (links.allreduce_seconds). A participant sends its own shard: the
largest shard (the smallest tensor degree) sets the bytes. The embedding's gradient is summed
over the first stages, the head's over the last.

A stage starts reducing once the last backward through it is done and its peers are too, and
reduces its blocks one after another, last block first (the order the backward leaves them).

Under ZeRO stage 3 between the pipelines (sharding.py) there is no reduction at the end: every
microbatch gathers each block's parameters over the same participants before its forward and
its backward and reduce-scatters its gradient after (`shard_passes`, the same hierarchical
rings on the same levels).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..cluster import HeteroCluster
from ..hardware import Link
from .links import hierarchical_seconds
from .plan import HeteroPlan
from .sharding import gathers_per_microbatch, reduces_at_end


def _slowest(links: list[Link]) -> Link:
    return min(links, key=lambda link: (link.bandwidth, -link.latency))


def levels(cluster: HeteroCluster, members: tuple) -> list[tuple[int, Link]]:
    """[(g, link)] per level for participants `members` = ((group, node), ...)."""
    by_group: dict[str, dict[int, int]] = {}
    for group, node in members:
        nodes = by_group.setdefault(group, {})
        nodes[node] = nodes.get(node, 0) + 1
    groups = [cluster.group(name) for name in by_group]
    g1 = max(max(nodes.values()) for nodes in by_group.values())
    g2 = max(len(nodes) for nodes in by_group.values())
    out = []
    if g1 > 1:
        out.append((g1, _slowest([g.chip_profile().intra_node for g in groups
                                  if max(by_group[g.name].values()) > 1])))
    if g2 > 1:
        out.append((g2, _slowest([g.inter_node for g in groups if len(by_group[g.name]) > 1])))
    if len(groups) > 1:
        out.append((len(groups), _slowest([cluster.between_groups(a, b) for a in groups
                                           for b in groups if a.name != b.name])))
    return out


def _owners(plan: HeteroPlan, rows) -> list[list]:
    """owner[i][ℓ]: the StageCost of pipeline i that holds block ℓ."""
    return [[s for s, r in zip(row, pipe.layer_ranges()) for _ in r]
            for row, pipe in zip(rows, plan.pipelines)]


def _members(cluster: HeteroCluster, stages) -> tuple:
    """The participants ((group, node), ...) of a collective among `stages`."""
    out = []
    for s in stages:
        group = cluster.group(s.stage.group)
        out.append((group.name, group.node_of(s.stage.first)))
    return tuple(sorted(out))


def _collective(cluster: HeteroCluster):
    chip = cluster.groups[0].chip_profile()

    @lru_cache(maxsize=None)
    def seconds(kind: str, members: tuple, nbytes: float) -> float:
        return hierarchical_seconds(kind, levels(cluster, members), nbytes, chip)
    return seconds


def shard_passes(plan: HeteroPlan, cluster: HeteroCluster, rows, rec) -> None:
    """Add to every StageCost's t_f and t_b (and shard_s) its ZeRO-3 collectives per
    microbatch: for each block it holds (and the embedding / head), those of
    sharding.gathers_per_microbatch over the stages of every pipeline that hold it, of the
    largest shard's bytes (the smallest tensor degree's)."""
    ops = gathers_per_microbatch(rec, plan.zero)
    if len(rows) == 1 or not (ops["forward"] or ops["backward"]):
        return
    seconds = _collective(cluster)

    def pass_seconds(stages, kind: str, which: str) -> float:
        members = _members(cluster, stages)
        n = max(s.elements[kind] for s in stages)
        return sum(seconds(op, members, per * n) for op, per in ops[which])

    owner = _owners(plan, rows)
    blocks = [[own[layer] for own in owner] for layer in range(len(owner[0]))]
    firsts, lasts = [row[0] for row in rows], [row[-1] for row in rows]
    for row, pipe in zip(rows, plan.pipelines):
        for j, (s, layers) in enumerate(zip(row, pipe.layer_ranges())):
            parts = [(blocks[layer], "block") for layer in layers]
            parts += [(firsts, "first")] if j == 0 else []
            parts += [(lasts, "last")] if j == len(row) - 1 else []
            f = sum(pass_seconds(stages, kind, "forward") for stages, kind in parts)
            b = sum(pass_seconds(stages, kind, "backward") for stages, kind in parts)
            s.t_f, s.t_b, s.shard_s = s.t_f + f, s.t_b + b, f + b


def reduce_finish(plan: HeteroPlan, cluster: HeteroCluster, rows) -> None:
    """Set every StageCost's reduce_end (rows: stage_costs' pipelines of StageCosts)."""
    if len(rows) == 1 or not reduces_at_end(plan.zero):
        for row in rows:
            for s in row:
                s.reduce_end = s.compute_end
        return
    owner = _owners(plan, rows)
    seconds = _collective(cluster)

    def task(stages, kind: str) -> tuple[float, float]:
        """(ready time, seconds) of one reduction among `stages`."""
        nbytes = max(s.grad_bytes[kind] for s in stages)
        return (max(s.compute_end for s in stages),
                seconds("all-reduce", _members(cluster, stages), nbytes))

    heads = task([row[-1] for row in rows], "last")
    embeds = task([row[0] for row in rows], "first")
    blocks = [task([own[layer] for own in owner], "block") for layer in range(len(owner[0]))]
    for row, pipe in zip(rows, plan.pipelines):
        for j, (s, layers) in enumerate(zip(row, pipe.layer_ranges())):
            work = [heads] if j == len(row) - 1 else []
            work += [blocks[layer] for layer in reversed(layers)]
            work += [embeds] if j == 0 else []
            t = s.compute_end
            for ready, cost in work:
                t = max(t, ready) + cost
            s.reduce_end = t


def exposed_reduction(cluster: HeteroCluster, pipes, layers, elements, t_b, grad_bytes: float,
                      allreduce) -> float:
    """The search's estimate of the same reduction: pipelines of Units with blocks per stage,
    per-device parameters of each stage's blocks / first / last extras (elements: (P, S)
    each), backward seconds per microbatch t_b (P, S); allreduce(members, bytes) -> seconds.
    Each stage reduces its blocks, last first, starting when the last backward leaves it;
    what is left after the backward has travelled on to the first stage is exposed."""
    P = len(pipes)
    if P == 1:
        return 0.0
    groups = cluster.groups
    place = [[(groups[u.group].name, groups[u.group].node_of(u.first)) for u in pipe]
             for pipe in pipes]

    def task(kind, js) -> float:
        members = tuple(sorted(place[i][j] for i, j in enumerate(js)))
        return allreduce(members, float(grad_bytes * max(elements[kind][i, j]
                                                         for i, j in enumerate(js))))

    owner = np.array([np.repeat(np.arange(len(n)), n) for n in layers])  # (P, L): stage of ℓ
    signatures, inverse = np.unique(owner, axis=1, return_inverse=True)
    block = np.array([task("block", tuple(signatures[:, s]))
                      for s in range(signatures.shape[1])])[inverse.ravel()]
    first, last = task("first", (0,) * P), task("last", tuple(len(p) - 1 for p in pipes))
    csum = np.r_[0.0, np.cumsum(block)]
    worst = 0.0
    for i, counts in enumerate(layers):
        edges = np.r_[0, np.cumsum(counts)]
        work = csum[edges[1:]] - csum[edges[:-1]]
        work[0] += first
        work[-1] += last
        slack = np.r_[0.0, np.cumsum(t_b[i, :len(counts)])[:-1]]
        worst = max(worst, float((work - slack).max()))
    return worst


__all__ = ["exposed_reduction", "levels", "reduce_finish", "shard_passes"]
