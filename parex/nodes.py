"""The one cluster type: groups of nodes of one chip each, and the network that joins them.

`Cluster(chip, nodes)` is the homogeneous one-group cluster the predictor reads (`cluster.chip`,
`cluster.nodes`); `Cluster(groups=..., name=...)` any mix of groups, as a cluster file gives
(parex.cluster reads those; the heterogeneous planner's `HeteroCluster` is this same type). A
value at the bottom of the floor plan: it imports no other parex module, so parex.hardware
re-exports it for the callers that import `Cluster` from there.

A node's link to the others is per device: a node's network card(s) shared by its devices when
they all send at once (`gbps_per_device`). `Group.chip_profile()` is the group's chip with the
group's links, a plain parex.hardware.Chip, so the homogeneous predictor runs on one group
unchanged.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property

from .errors import InputError, did_you_mean


def gbps_per_device(gbps: float, devices_per_node: int) -> float:
    """Bytes/s one device gets of a node's `gbps` Gb/s link when all its devices send at once."""
    return gbps * 1e9 / 8 / devices_per_node


@dataclass(frozen=True)
class Group:
    """`nodes` nodes of `devices_per_node` devices of one chip."""

    name: str
    chip: Chip  # the hardware profile as loaded
    nodes: int
    devices_per_node: int
    inter_node_gbps: float | None = None  # per node; None: the profile's per-device link
    devices: int | None = None  # None: nodes × devices_per_node (the last node may be partial)
    intra_node_gbps: float | None = None  # per device, inside a node; None: the profile's link

    @property
    def n_devices(self) -> int:
        return self.nodes * self.devices_per_node if self.devices is None else self.devices

    def peak(self, dtype: str = "bfloat16") -> float:
        """The group's total peak FLOP/s."""
        return self.n_devices * self.chip.peak(dtype)

    @property
    def inter_node(self) -> Link:
        """Per-device link between this group's nodes."""
        if self.inter_node_gbps is None:
            return self.chip.inter_node
        return dataclasses.replace(
            self.chip.inter_node, name=f"{self.inter_node_gbps:g} Gb/s per node of "
            f"{self.devices_per_node}",
            bandwidth=gbps_per_device(self.inter_node_gbps, self.devices_per_node))

    @property
    def intra_node(self) -> Link:
        """Per-device link between the devices of one node."""
        if self.intra_node_gbps is None:
            return self.chip.intra_node
        return dataclasses.replace(
            self.chip.intra_node, name=f"{self.intra_node_gbps:g} Gb/s per device inside a node",
            bandwidth=self.intra_node_gbps * 1e9 / 8)

    def chip_profile(self) -> Chip:
        """The chip with this group's node size and links: what parex.predict reads."""
        return self._profile

    @cached_property
    def _profile(self) -> Chip:
        if (self.devices_per_node == self.chip.devices_per_node
                and self.inter_node_gbps is None and self.intra_node_gbps is None):
            return self.chip  # the profile as it is (a TPU's scale-up domain spans hosts)
        return dataclasses.replace(self.chip, devices_per_node=self.devices_per_node,
                                   scaleup_domain=min(self.chip.scaleup_domain,
                                                      self.devices_per_node),
                                   inter_node=self.inter_node, intra_node=self.intra_node)

    def as_cluster(self) -> "Cluster":
        """This group alone as the homogeneous predictor's Cluster."""
        return Cluster(self.chip_profile(), self.nodes)

    def node_of(self, device: int) -> int:
        return device // self.devices_per_node


@dataclass(frozen=True, init=False)
class Cluster:
    """Groups of nodes and the network between them. `Cluster(chip, nodes)` is one group of
    `nodes` nodes of `chip` (the homogeneous predictor's cluster); `Cluster(groups=..., name=...)`
    any mix of groups (a cluster file)."""

    groups: tuple[Group, ...]
    name: str
    network: Network | None = None  # the fabric for every chip; None: each chip's own profile's
    inter_group_gbps: float | None = None  # per node, between groups
    description: str = ""

    def __init__(self, chip: Chip | None = None, nodes: int | None = None, *, groups=(),
                 name: str = "", network: Network | None = None,
                 inter_group_gbps: float | None = None, description: str = ""):
        if chip is not None or nodes is not None:  # one group: `nodes` nodes of `chip`
            if chip is None or nodes is None:  # dataclasses.replace(cluster, chip= or nodes=)
                if len(groups) != 1:
                    raise InputError("give a chip and a node count, or groups of nodes")
                chip = groups[0].chip if chip is None else chip
                nodes, name = (groups[0].nodes if nodes is None else nodes), ""
            groups = (Group(chip.name, chip, nodes, chip.devices_per_node),)
            name = name or (chip.name if nodes == 1 else f"{chip.name}×{nodes}")
        if not groups:
            raise InputError("a cluster needs a chip and a node count, or groups of nodes")
        for key, value in (("groups", tuple(groups)), ("name", name), ("network", network),
                           ("inter_group_gbps", inter_group_gbps),
                           ("description", description)):
            object.__setattr__(self, key, value)

    @property
    def chip(self) -> Chip:
        """The one group's chip as the predictor reads it: its links, under the cluster's
        network when the cluster names one. A cluster of several groups has no one chip."""
        if len(self.groups) != 1:
            raise InputError(f"cluster {self.name} has {len(self.groups)} groups of different "
                             f"chips: predict each group (cluster.group(name).as_cluster()) or "
                             f"plan it with parex.hetero")
        chip = self.groups[0].chip_profile()
        return chip if self.network is None else dataclasses.replace(chip, network=self.network)

    @property
    def nodes(self) -> int:
        return sum(g.nodes for g in self.groups)

    @property
    def n_devices(self) -> int:
        return sum(g.n_devices for g in self.groups)

    def link(self, span: int) -> Link:
        """The slowest link a group of `span` consecutive devices crosses."""
        chip = self.chip
        return chip.intra_node if span <= chip.scaleup_domain else chip.inter_node

    def peak(self, dtype: str = "bfloat16") -> float:
        return sum(g.peak(dtype) for g in self.groups)

    def group(self, name_or_index) -> Group:
        """A group by name or position; an unknown name lists the known ones."""
        if isinstance(name_or_index, int) and 0 <= name_or_index < len(self.groups):
            return self.groups[name_or_index]
        for g in self.groups:
            if g.name == name_or_index:
                return g
        names = [g.name for g in self.groups]
        hint = did_you_mean(str(name_or_index), names)
        raise InputError(f"cluster {self.name} has no group {name_or_index!r}; "
                         f"{hint + ' ' if hint else ''}its groups: {', '.join(names)}")

    def index(self, name: str) -> int:
        return self.groups.index(self.group(name))

    def between_groups(self, a: Group, b: Group) -> Link:
        """Per-device link from a device of group a to one of group b (a != b): the cluster's
        inter-group link, never faster than either group's own inter-node link."""
        links = [a.inter_node, b.inter_node]
        if self.inter_group_gbps is not None:
            per = max(a.devices_per_node, b.devices_per_node)
            links.append(dataclasses.replace(
                a.inter_node, bandwidth=gbps_per_device(self.inter_group_gbps, per),
                latency=max(a.inter_node.latency, b.inter_node.latency),
                name=f"{self.inter_group_gbps:g} Gb/s per node between groups"))
        return min(links, key=lambda link: (link.bandwidth, -link.latency))

    def describe(self) -> str:
        parts = [f"{g.n_devices} × {g.chip.name}" for g in self.groups]
        return f"{self.name}: {' + '.join(parts)} = {self.n_devices} devices"


# The heterogeneous planner's name for the one cluster type (parex.hetero imports it)
HeteroCluster = Cluster

__all__ = ["Cluster", "Group", "HeteroCluster", "gbps_per_device"]
