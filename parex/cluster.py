"""Clusters as data: building the one cluster type (parex.nodes: `Cluster`, its `Group`s, the
heterogeneous planner's `HeteroCluster`, all re-exported here) from hardware profiles and from
cluster files. `Cluster(chip, nodes)` is the homogeneous one-group cluster the predictor reads; a
cluster file gives several groups, or one whole machine with its network (frontier.toml,
perlmutter.toml, alps.toml, dgx-h100-superpod.toml, tpu-v5p-pod.toml).

A TOML file in data/clusters/ describes one cluster:

    name = "het-b"
    network = "frontier"           # optional: a network file (data/networks/, parex.network);
                                   # without one each chip keeps its profile's network
    inter_group_gbps = 10          # between groups of nodes, Gb/s per node, one direction
    [[groups]]
    chip = "rtx-4090"              # a hardware profile (data/hardware/)
    nodes = 1
    devices_per_node = 8           # optional: the profile's
    inter_node_gbps = 10           # between nodes inside this group, Gb/s per node (optional)
    intra_node_gbps = 16           # between the devices of one node, Gb/s per device (optional:
                                   # the profile's link, e.g. PCIe; a measured or published
                                   # rate where the machines are slower, say which)
    name = "4090s"                 # optional: the chip's name (numbered when it repeats)
    devices = 12                   # optional: fewer than nodes × devices_per_node (the last
                                   # node partly filled)

Link speeds in a cluster file are per node: the node's network card(s), shared by its devices
when they all send at once, so each device gets inter_node_gbps / devices_per_node. Without
`inter_node_gbps` a group keeps its profile's per-device inter-node link; without
`inter_group_gbps` traffic between groups runs at the slower of the two groups' inter-node links.

`reference_cluster` is the homogeneous cluster of (about) the same total peak FLOP/s, HexiScale's
comparison.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from .errors import InputError, did_you_mean, unknown
from .files import read_toml
from .hardware import Chip, load_chip, load_cluster
from .network import load_network
from .nodes import Cluster, Group, HeteroCluster, gbps_per_device

CLUSTER_DIR = Path(__file__).resolve().parent.parent / "data" / "clusters"
GROUP_KEYS = {"chip", "nodes", "devices_per_node", "inter_node_gbps", "name", "devices",
              "intra_node_gbps"}
CLUSTER_KEYS = {"name", "inter_group_gbps", "groups", "description", "network"}


# --- building clusters ----------------------------------------------------------------------

def make_group(chip, nodes: int = 1, devices_per_node: int | None = None,
               inter_node_gbps: float | None = None, name: str | None = None,
               devices: int | None = None, intra_node_gbps: float | None = None) -> Group:
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
    for key, value, per_what in (("inter_node_gbps", inter_node_gbps, "node"),
                                 ("intra_node_gbps", intra_node_gbps, "device")):
        if value is not None and not _positive(value):
            raise InputError(f"group of {chip.name}: {key}={value!r}; use a positive speed in "
                             f"Gb/s per {per_what}, or leave it out")
    return Group(name or chip.name, chip, nodes, per, inter_node_gbps, devices, intra_node_gbps)


def homogeneous(chip, nodes: int = 1, inter_node_gbps: float | None = None) -> Cluster:
    """The one-group cluster that `--hardware H --nodes N` stands for."""
    group = make_group(chip, nodes, inter_node_gbps=inter_node_gbps)
    return Cluster(groups=(group,), name=f"{group.chip.name}×{nodes}")


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
                          table.get("inter_node_gbps"), table.get("name"), table.get("devices"),
                          table.get("intra_node_gbps"))
    except InputError as err:
        raise InputError(f"{where}: {err}") from None


def cluster_from_dict(data: dict, name: str = "cluster") -> Cluster:
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
    for key in ("name", "description", "network"):
        if not isinstance(data.get(key, ""), str):
            raise InputError(f"cluster {name}: {key}={data[key]!r}; write it in quotes")
    network = load_network(data["network"]) if data.get("network") else None
    return Cluster(groups=tuple(groups), name=data.get("name", name), network=network,
                   inter_group_gbps=between, description=data.get("description", ""))


def known_clusters(directory: Path = CLUSTER_DIR) -> list[str]:
    return sorted(p.stem for p in Path(directory).glob("*.toml"))


def load_hetero_cluster(path_or_name, directory: Path = CLUSTER_DIR) -> Cluster:
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


def reference_cluster(cluster: Cluster, chip=None, dtype: str = "bfloat16") -> Cluster:
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
    return Cluster(groups=(group,), name=f"{n} × {chip.name} (the peak of {cluster.name})")


def peak_ratio(a: Cluster, b: Cluster, dtype: str = "bfloat16") -> float:
    return a.peak(dtype) / b.peak(dtype)


__all__ = ["CLUSTER_DIR", "Cluster", "Group", "HeteroCluster", "cluster_from_dict",
           "gbps_per_device", "homogeneous", "known_clusters", "load_cluster",
           "load_hetero_cluster", "make_group", "peak_ratio", "reference_cluster"]
