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
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..cluster import HeteroCluster
from ..hardware import Link
from .links import allreduce_seconds
from .plan import HeteroPlan


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


def reduce_finish(plan: HeteroPlan, cluster: HeteroCluster, rows) -> None:
    """Set every StageCost's reduce_end (rows: stage_costs' pipelines of StageCosts)."""
    if len(rows) == 1:
        for s in rows[0]:
            s.reduce_end = s.compute_end
        return
    owner = [[s for s, r in zip(row, pipe.layer_ranges()) for _ in r]
             for row, pipe in zip(rows, plan.pipelines)]  # owner[i][ℓ]: stage of block ℓ
    chip = cluster.groups[0].chip_profile()

    @lru_cache(maxsize=None)
    def seconds(members: tuple, nbytes: float) -> float:
        return allreduce_seconds(levels(cluster, members), nbytes, chip)

    def place(s) -> tuple:
        group = cluster.group(s.stage.group)
        return group.name, group.node_of(s.stage.first)

    def task(stages, kind: str) -> tuple[float, float]:
        """(ready time, seconds) of one reduction among `stages`."""
        members = tuple(sorted(place(s) for s in stages))
        nbytes = max(s.grad_bytes[kind] for s in stages)
        return max(s.compute_end for s in stages), seconds(members, nbytes)

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


__all__ = ["exposed_reduction", "levels", "reduce_finish"]
