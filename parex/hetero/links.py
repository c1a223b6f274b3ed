"""Which link two pieces of a plan talk over, and what a send or an all-reduce costs on it.

Three levels, slowest last: inside a node (the group's intra-node link), between the nodes of one
group (its inter-node link, each device's share of the node's network card), between groups (the
cluster's inter-group link, never faster than either group's own). Every cost is the homogeneous
predictor's α-β ring formula (parex.predict.alpha_beta.collective_seconds) on the link in question.

    hop_seconds         stage → next stage: Megatron's scatter/gather (Narayanan et al. 2021,
                        §4.1): each of the min(t_a, t_b) ranks sends 1/t of the activation over
                        its own link, the receiver all-gathers it inside its node
    allreduce_seconds   a hierarchical ring all-reduce over levels [(g, link), ...]: each level
                        reduces over g members, the next one works on 1/g of the data
                        (hierarchical_seconds: the same for a reduce-scatter or all-gather)
"""

from __future__ import annotations

import dataclasses

from ..cluster import HeteroCluster
from ..hardware import Chip, Link
from ..predict.alpha_beta import collective_seconds
from .plan import Stage


def stage_nodes(cluster: HeteroCluster, stage: Stage) -> set[int]:
    """Nodes (numbered within the stage's group) the stage's devices sit on."""
    group = cluster.group(stage.group)
    return {group.node_of(d) for d in stage.devices}


def link_between(cluster: HeteroCluster, a: Stage, b: Stage) -> Link:
    """The slowest link between the devices of stage a and those of stage b."""
    ga, gb = cluster.group(a.group), cluster.group(b.group)
    if ga.name != gb.name:
        return cluster.between_groups(ga, gb)
    if len(stage_nodes(cluster, a) | stage_nodes(cluster, b)) == 1:
        return ga.chip_profile().intra_node
    return ga.inter_node


def tensor_chip(cluster: HeteroCluster, stage: Stage) -> Chip:
    """The chip profile a stage's tensor-parallel collectives run on: its group's, with the
    inter-node link as the fast one when the stage spans nodes."""
    group = cluster.group(stage.group)
    chip = group.chip_profile()
    if len(stage_nodes(cluster, stage)) > 1:
        chip = dataclasses.replace(chip, intra_node=group.inter_node)
    return chip


def one_level(chip: Chip, link: Link) -> Chip:
    """A chip whose every collective runs at one level, on `link` (scale-up domain of one)."""
    return dataclasses.replace(chip, scaleup_domain=1, inter_node=link)


def ring_seconds(kind: str, g: int, nbytes: float, link: Link, chip: Chip) -> float:
    """One collective of `kind` over g members on `link` (chip gives the network efficiency)."""
    if g <= 1:
        return 0.0
    return float(collective_seconds(kind, g, 1, nbytes, one_level(chip, link)))


def hop_seconds(cluster: HeteroCluster, a: Stage, b: Stage, nbytes: float) -> float:
    """Seconds to move one microbatch's activation (or its gradient) from stage a to stage b."""
    link = link_between(cluster, a, b)
    chip = cluster.group(a.group).chip_profile()
    ranks = min(a.tensor, b.tensor)
    send = nbytes / ranks / (link.bandwidth * chip.network_efficiency) + link.latency
    if ranks == 1:
        return send
    gather_chip = tensor_chip(cluster, b)
    return send + float(collective_seconds("all-gather", ranks, 1, nbytes, gather_chip))


def hierarchical_seconds(kind: str, levels: list[tuple[int, Link]], nbytes: float,
                         chip: Chip) -> float:
    """A hierarchical ring collective of `kind` (all-reduce, reduce-scatter, all-gather) of
    `nbytes` (the whole buffer): level by level, each on 1/g of the previous data (an
    all-gather runs the levels in the other order, over the same bytes)."""
    total = 0.0
    for g, link in levels:
        total += ring_seconds(kind, g, nbytes, link, chip)
        nbytes /= max(g, 1)
    return total


def allreduce_seconds(levels: list[tuple[int, Link]], nbytes: float, chip: Chip) -> float:
    """A hierarchical ring all-reduce: level by level, each on 1/g of the previous data."""
    return hierarchical_seconds("all-reduce", levels, nbytes, chip)


__all__ = ["allreduce_seconds", "hierarchical_seconds", "hop_seconds", "link_between",
           "one_level", "ring_seconds",
           "stage_nodes", "tensor_chip"]
