"""Clusters as data: groups of nodes of one chip each, and the links between them.

A TOML file in data/clusters/ describes one cluster (a homogeneous cluster is the one-group case):

    name = "het-b"
    inter_group_gbps = 10          # between groups of nodes, Gb/s per node, one direction
    [[groups]]
    chip = "rtx-4090"              # a hardware profile (data/hardware/)
    nodes = 1
    devices_per_node = 8           # optional: the profile's
    inter_node_gbps = 10           # between nodes inside this group, Gb/s per node (optional)
    name = "4090s"                 # optional: the chip's name (numbered when it repeats)
    devices = 12                   # optional: fewer than nodes × devices_per_node (the last
                                   # node partly filled)

Link speeds in a cluster file are per node: the node's network card(s), shared by its devices
when they all send at once, so each device gets inter_node_gbps / devices_per_node. Without
`inter_node_gbps` a group keeps its profile's per-device inter-node link; without
`inter_group_gbps` traffic between groups runs at the slower of the two groups' inter-node links.

`Group.chip_profile()` is the group's chip with the group's links, a plain parex.hardware.Chip, so
the homogeneous predictor (parex.predict) runs on one group unchanged. `reference_cluster` is the
homogeneous cluster of (about) the same total peak FLOP/s, HexiScale's comparison.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from .errors import InputError, did_you_mean, unknown
from .files import read_toml
from .hardware import Chip, Cluster, Link, load_chip

CLUSTER_DIR = Path(__file__).resolve().parent.parent / "data" / "clusters"
GROUP_KEYS = {"chip", "nodes", "devices_per_node", "inter_node_gbps", "name", "devices"}
CLUSTER_KEYS = {"name", "inter_group_gbps", "groups", "description"}


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
        return Link(gbps_per_device(self.inter_node_gbps, self.devices_per_node),
                    self.chip.inter_node.latency,
                    f"{self.inter_node_gbps:g} Gb/s per node of {self.devices_per_node}")

    def chip_profile(self) -> Chip:
        """The chip with this group's node size and links: what parex.predict reads."""
        return self._profile

    @cached_property
    def _profile(self) -> Chip:
        return dataclasses.replace(self.chip, devices_per_node=self.devices_per_node,
                                   scaleup_domain=min(self.chip.scaleup_domain,
                                                      self.devices_per_node),
                                   inter_node=self.inter_node)

    def as_cluster(self) -> Cluster:
        """This group alone as the homogeneous predictor's Cluster."""
        return Cluster(self.chip_profile(), self.nodes)

    def node_of(self, device: int) -> int:
        return device // self.devices_per_node


@dataclass(frozen=True)
class HeteroCluster:
    """Groups of nodes and the link between groups (one group: a homogeneous cluster)."""

    name: str
    groups: tuple[Group, ...]
    inter_group_gbps: float | None = None  # per node, between groups
    description: str = ""

    @property
    def n_devices(self) -> int:
        return sum(g.n_devices for g in self.groups)

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
            links.append(Link(gbps_per_device(self.inter_group_gbps, per),
                              max(a.inter_node.latency, b.inter_node.latency),
                              f"{self.inter_group_gbps:g} Gb/s per node between groups"))
        return min(links, key=lambda link: (link.bandwidth, -link.latency))

    def describe(self) -> str:
        parts = [f"{g.n_devices} × {g.chip.name}" for g in self.groups]
        return f"{self.name}: {' + '.join(parts)} = {self.n_devices} devices"


# --- building clusters ----------------------------------------------------------------------

def make_group(chip, nodes: int = 1, devices_per_node: int | None = None,
               inter_node_gbps: float | None = None, name: str | None = None,
               devices: int | None = None) -> Group:
    """A group of `nodes` nodes of a chip (a profile name or a Chip), checked."""
    if not isinstance(chip, (str, Chip)):
        raise InputError(f"chip={chip!r}: give a hardware profile's name, e.g. chip = "
                         f"\"a100-80gb\"")
    chip = load_chip(chip) if isinstance(chip, str) else chip
    per = chip.devices_per_node if devices_per_node is None else devices_per_node
    for key, value in (("nodes", nodes), ("devices_per_node", per)):
        if not isinstance(value, int) or value < 1:
            raise InputError(f"group of {chip.name}: {key}={value!r}; use a whole number >= 1")
    if devices is not None and not (isinstance(devices, int)
                                    and (nodes - 1) * per < devices <= nodes * per):
        raise InputError(f"group of {chip.name}: devices={devices!r} on {nodes} node(s) of "
                         f"{per}; use {(nodes - 1) * per + 1}..{nodes * per}, or leave it out")
    if inter_node_gbps is not None and not _positive(inter_node_gbps):
        raise InputError(f"group of {chip.name}: inter_node_gbps={inter_node_gbps!r}; use a "
                         f"positive speed in Gb/s per node, or leave it out")
    return Group(name or chip.name, chip, nodes, per, inter_node_gbps, devices)


def homogeneous(chip, nodes: int = 1, inter_node_gbps: float | None = None) -> HeteroCluster:
    """The one-group cluster that `--hardware H --nodes N` stands for."""
    group = make_group(chip, nodes, inter_node_gbps=inter_node_gbps)
    return HeteroCluster(f"{group.chip.name}×{nodes}", (group,))


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _check_keys(where: str, table, known: set[str]) -> None:
    """A TOML table whose keys are all `known`; an unknown key gets the nearest known one."""
    if not isinstance(table, dict):
        raise InputError(f"{where}: expected a table of keys ({', '.join(sorted(known))}), "
                         f"got {table!r}")
    for key in sorted(set(table) - known):
        raise InputError(f"{where}: {unknown('key', key, sorted(known))}")


def _group_from_table(where: str, table) -> Group:
    _check_keys(where, table, GROUP_KEYS)
    if "chip" not in table:
        raise InputError(f"{where}: needs `chip` (a hardware profile, e.g. chip = "
                         f"\"a100-80gb\") and knows {', '.join(sorted(GROUP_KEYS))}; got "
                         f"{', '.join(sorted(table)) or 'nothing'}")
    if "name" in table and not isinstance(table["name"], str):
        raise InputError(f"{where}: name={table['name']!r}; write a name in quotes")
    try:
        return make_group(table["chip"], table.get("nodes", 1), table.get("devices_per_node"),
                          table.get("inter_node_gbps"), table.get("name"), table.get("devices"))
    except InputError as err:
        raise InputError(f"{where}: {err}") from None


def cluster_from_dict(data: dict, name: str = "cluster") -> HeteroCluster:
    """A cluster from a parsed TOML table; unknown keys and missing pieces are named."""
    _check_keys(f"cluster {name}", data, CLUSTER_KEYS)
    tables = data.get("groups")
    if not tables:
        raise InputError(f"cluster {name}: no [[groups]]; add at least one, e.g. "
                         f"[[groups]] chip = \"a100-80gb\" nodes = 1")
    if not isinstance(tables, list):
        raise InputError(f"cluster {name}: groups={tables!r}; write each group as a [[groups]] "
                         f"table")
    groups, seen = [], {}
    for i, table in enumerate(tables):
        group = _group_from_table(f"cluster {name}, group {i}", table)
        if group.name in seen:  # a repeated chip without a name: number it
            if "name" in table:
                raise InputError(f"cluster {name}: two groups are named {group.name!r}")
            seen[group.name] += 1
            group = dataclasses.replace(group, name=f"{group.name}-{seen[group.name]}")
        seen.setdefault(group.name, 1)
        groups.append(group)
    between = data.get("inter_group_gbps")
    if between is not None and not _positive(between):
        raise InputError(f"cluster {name}: inter_group_gbps={between!r}; use a positive speed "
                         f"in Gb/s per node, or leave it out")
    for key in ("name", "description"):
        if not isinstance(data.get(key, ""), str):
            raise InputError(f"cluster {name}: {key}={data[key]!r}; write it in quotes")
    return HeteroCluster(data.get("name", name), tuple(groups), between,
                         data.get("description", ""))


def known_clusters(directory: Path = CLUSTER_DIR) -> list[str]:
    return sorted(p.stem for p in Path(directory).glob("*.toml"))


def load_hetero_cluster(path_or_name, directory: Path = CLUSTER_DIR) -> HeteroCluster:
    """A cluster from a TOML file, or by name from data/clusters/."""
    path = Path(path_or_name)
    if not path.exists():
        path = Path(directory) / f"{path_or_name}.toml"
    if not path.is_file():
        known = known_clusters(directory)
        hint = did_you_mean(str(path_or_name), known)
        raise InputError(f"no cluster file {str(path_or_name)!r}; {hint + ' ' if hint else ''}"
                         f"give a path to a TOML file or one of {', '.join(known)}")
    data = read_toml(path, "cluster", "the files in data/clusters/ are examples")
    return cluster_from_dict(data, path.stem)


def reference_cluster(cluster: HeteroCluster, chip=None, dtype: str = "bfloat16"
                      ) -> HeteroCluster:
    """A homogeneous cluster of about the same total peak FLOP/s (HexiScale's comparison): as
    many devices of `chip` (default: the cluster's chip of highest peak) as come closest to the
    peak, in nodes of the profile's size (the last one partly filled), on the fastest network
    between nodes that the cluster has (its best group's inter-node link, or its inter-group
    link): the homogeneous cluster such a mix is measured against."""
    if chip is None:
        chip = max((g.chip for g in cluster.groups), key=lambda c: c.peak(dtype))
    chip = load_chip(chip) if isinstance(chip, str) else chip
    per = chip.devices_per_node
    n = max(1, round(cluster.peak(dtype) / chip.peak(dtype)))
    speeds = [g.inter_node_gbps for g in cluster.groups if g.inter_node_gbps is not None]
    speeds += [cluster.inter_group_gbps] if cluster.inter_group_gbps is not None else []
    nodes = -(-n // per)
    group = make_group(chip, nodes, min(per, n), max(speeds) if speeds else None,
                       devices=n if nodes > 1 else None)
    return HeteroCluster(f"{n} × {chip.name} (the peak of {cluster.name})", (group,))


def peak_ratio(a: HeteroCluster, b: HeteroCluster, dtype: str = "bfloat16") -> float:
    return a.peak(dtype) / b.peak(dtype)


__all__ = ["CLUSTER_DIR", "Group", "HeteroCluster", "cluster_from_dict", "gbps_per_device",
           "homogeneous", "known_clusters", "load_hetero_cluster", "make_group",
           "peak_ratio", "reference_cluster"]
