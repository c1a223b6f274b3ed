"""The shapes the search tries: how a cluster's devices become pipelines of stages.

A *structure* fixes, per group, a tensor degree t_g (so the group's devices form U_g = n_g / t_g
units of t_g devices inside a node), a number of pipelines P, the order the groups follow along
every pipeline, and a placement. Pipeline i takes k_gi units of group g, U_g // P or one more
(the remainders spread over different pipelines, group after group), so pipelines differ by a unit
here and there and the batch shares even them out. Every pipeline visits every group once, in the
same order, as consecutive stages: a pipeline crosses each group boundary once.

Placement, inside a group:
    "dp"    position j of every pipeline on neighbouring units (stage j of all pipelines share a
            node when P·t_g ≤ devices per node): gradient reductions stay inside nodes and the
            hops between a pipeline's stages cross nodes
    "pp"    a pipeline's units of the group side by side: hops stay inside nodes, gradient
            reductions cross them
"""

from __future__ import annotations

from dataclasses import dataclass

from ..cluster import HeteroCluster

PLACEMENTS = ("dp", "pp")


@dataclass(frozen=True)
class Unit:
    """One stage's place: group index, unit index within the group, its tensor degree."""

    group: int
    index: int
    tensor: int

    @property
    def first(self) -> int:
        return self.index * self.tensor


@dataclass(frozen=True)
class Structure:
    """Tensor degree per group, pipelines, group order and placement."""

    tensors: tuple[int, ...]  # per group of the cluster
    pipelines: int
    order: tuple[int, ...]  # group indices along a pipeline
    placement: str = "dp"

    def counts(self, cluster: HeteroCluster) -> list[list[int]]:
        """k[i][g]: units of group g in pipeline i."""
        P = self.pipelines
        k = [[0] * len(cluster.groups) for _ in range(P)]
        offset = 0
        for g, group in enumerate(cluster.groups):
            units = group.n_devices // self.tensors[g]
            base, extra = divmod(units, P)
            for i in range(P):
                k[i][g] = base + (((i - offset) % P) < extra)
            offset += extra
        return k

    def pipelines_of(self, cluster: HeteroCluster) -> list[tuple[Unit, ...]]:
        """Every pipeline's units in order."""
        k = self.counts(cluster)
        P, out = self.pipelines, [[] for _ in range(self.pipelines)]
        for g in self.order:
            t = self.tensors[g]
            if self.placement == "dp":
                index = 0
                positions = max(k[i][g] for i in range(P))
                slots = {}
                for j in range(positions):
                    for i in range(P):
                        if j < k[i][g]:
                            slots[(i, j)] = index
                            index += 1
                for i in range(P):
                    out[i] += [Unit(g, slots[(i, j)], t) for j in range(k[i][g])]
            else:
                index = 0
                for i in range(P):
                    out[i] += [Unit(g, index + j, t) for j in range(k[i][g])]
                    index += k[i][g]
        return [tuple(p) for p in out]

    def node(self, cluster: HeteroCluster, unit: Unit) -> int:
        group = cluster.groups[unit.group]
        return group.node_of(unit.first)


def feasible(cluster: HeteroCluster, tensors: tuple[int, ...], pipelines: int) -> bool:
    """Every pipeline gets at least one unit of every group."""
    return all(g.n_devices // t >= pipelines for g, t in zip(cluster.groups, tensors))


__all__ = ["PLACEMENTS", "Structure", "Unit", "feasible"]
