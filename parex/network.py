"""The network as data: the tiers of links a collective's groups cross, from the scale-up domain to
a dragonfly's global links (DESIGN: a cluster is chips plus the network as a topology).

A device sits in nested domains, innermost first: its scale-up domain (an NVLink node of 8, a TPU
pod on ICI), then the fabric's domains (a leaf's scalable unit, a fat tree's pod, a dragonfly
group), up to the machine. Tier k is the links that join domains of tier k−1 into one domain of
tier k, described per device (resolved by `tiers_of`):

    span        devices in one domain this tier joins (8, 256, 1,024, ..., the machine)
    bandwidth   B/s per device, one direction, when every device of a domain sends across this
                tier at once: the scale-up link for tier 0, the device's share of its node's NICs
                for tier 1, and above that the NIC share over the cumulative oversubscription
                (a 1:7 aggregation layer leaves each GPU 1/7 of its NIC)
    efficiency  achievable fraction of `bandwidth` for large transfers (measured bus bandwidth
                over the link rate where a network file gives it, else the chip's)
    latency     s added per hop that crosses this tier (switch and cable hops above the first
                switch; the library's per-step latency is parex.predict.collectives')
    link        the library's latency class of a hop: "nvlink", "pci" or "net"
    reduction   bus bandwidth of an in-switch all-reduce over tier 0 (NVLS), 0 if none

Ranks are placed in order: consecutive ranks fill a node, then the next tier's domain, so a group
of g ranks at stride s has min(g, span // s) members in each domain of `span` devices.

The chip profile gives tiers 0 and 1 (its intra_node and inter_node links, scaleup_domain); a
network file in data/networks/ (a profile's "network", or a cluster file's) names the collective
library and adds the fabric above the node: each [[tiers]] entry is one more domain (span,
oversubscription against the tier below, extra hop latency). Without a network file the NIC tier
spans the whole machine: a full-bisection network of one switch hop, as parex modelled every
cluster before. A network file may also give its library's measured stalls (`stall_chunk_kib`,
`stall_ranks`, `stall_ms`: the mean seconds a multi-node ring of small chunks per rank adds, by
ring size; parex.predict.collectives prices them).

The library's measured constants (step latencies, efficiencies, stalls) belong to the way the
measured jobs were launched as much as to the machine: on Frontier the same RCCL benchmark ran
0.5-0.9x its α-β time or stalled 11-90x depending on the job's GPU and NIC binding. A network
file says which launch its constants describe (`launch`), and a file for another launch of the
same machine names the first (`extends = "frontier"`): it keeps the fabric and every key it does
not give (and adds its sources to the first's), so the topology is written once and each
launch's numbers stand beside their launch.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .errors import InputError, unknown
from .files import read_toml

NETWORK_DIR = Path(__file__).resolve().parent.parent / "data" / "networks"
MACHINE = 2 ** 40  # the span of a tier that reaches every device
LIBRARIES = ("nccl", "rccl", "ici")  # parex.predict.collectives.LIBRARY_CONSTANTS
FABRIC_KEYS = {"name", "span", "oversubscription", "hop_latency_us", "note"}
NETWORK_KEYS = {"name", "description", "library", "sources", "tiers", "intra_efficiency",
                "nic_efficiency", "net_step_latency_us", "intra_step_latency_us",
                "nvls_busbw_gbs", "torus", "stall_chunk_kib", "stall_ranks", "stall_ms",
                "launch"}


@dataclass(frozen=True)
class Tier:
    """One tier of links, per device (module docstring)."""

    name: str
    span: int
    bandwidth: float
    efficiency: float = 1.0
    latency: float = 0.0
    link: str = "net"
    reduction: float = 0.0

    @property
    def rate(self) -> float:
        """B/s per device a large transfer gets across this tier."""
        return self.bandwidth * self.efficiency


@dataclass(frozen=True)
class FabricTier:
    """A domain above the node, as a network file writes it."""

    name: str
    span: int  # devices in one domain
    oversubscription: float = 1.0  # this tier's links down : up (1:7 → 7)
    hop_latency: float = 0.0  # s added per hop crossing this tier
    note: str = ""


@dataclass(frozen=True)
class Network:
    """A network file: the collective library and the fabric above the node, with sources."""

    name: str
    library: str = "nccl"
    tiers: tuple[FabricTier, ...] = ()
    intra_efficiency: float | None = None  # measured; None: the chip's network_efficiency
    nic_efficiency: float | None = None
    net_step_latency: float | None = None  # s per network step, measured on this machine
    intra_step_latency: float | None = None  # s per step inside a node, measured
    nvls_busbw: float = 0.0  # B/s bus bandwidth of NVLS all-reduce in the node, 0: none
    torus: tuple[int, ...] = ()  # a TPU pod's torus, fastest dimension first
    stall_chunk: float = 0.0  # bytes per rank below which a multi-node ring stalls; 0: never
    stall: tuple[tuple[int, float], ...] = ()  # (ring size, mean stall s per call), measured
    description: str = ""
    sources: tuple[str, ...] = ()
    launch: str = ""  # how the jobs its measured constants come from were launched


def tiers_of(chip, network: Network | None) -> tuple[Tier, ...]:
    """The chip's tiers under `network`: its scale-up links, its NICs, then the fabric."""
    intra, inter = chip.intra_node, chip.inter_node
    net = network or Network("full-bisection")
    nic_efficiency = _pick(net.nic_efficiency, chip.network_efficiency)
    out = [Tier("scale-up links", chip.scaleup_domain, intra.bandwidth,
                _pick(net.intra_efficiency, chip.network_efficiency), 0.0,
                intra.kind or "nvlink", net.nvls_busbw)]
    # the NICs join nodes into the fabric's first domain (a leaf's unit, a dragonfly group);
    # each further domain's links carry the NIC share over the oversubscription so far
    fabric = net.tiers or (FabricTier(inter.name or "NIC", MACHINE),)
    taper = 1.0
    for i, tier in enumerate(fabric):
        taper *= tier.oversubscription
        span = MACHINE if i == len(fabric) - 1 else tier.span
        name = "NICs" if i == 0 else tier.name
        out.append(Tier(name, span, inter.bandwidth / taper, nic_efficiency, tier.hop_latency))
    return tuple(_nested(out))


def _nested(tiers: list[Tier]) -> list[Tier]:
    """Tiers of strictly growing span (a scale-up domain wider than a leaf, a TPU pod, swallows
    the tiers it covers)."""
    out: list[Tier] = []
    for tier in tiers:
        if out and tier.span <= out[-1].span:
            continue
        out.append(tier)
    return out


def _pick(value, default):
    return default if value is None else value


# --- reading network files ----------------------------------------------------------------------

def known_networks(directory: Path = NETWORK_DIR) -> list[str]:
    return sorted(p.stem for p in Path(directory).glob("*.toml"))


@lru_cache(maxsize=32)
def load_network(name: str, directory: Path = NETWORK_DIR) -> Network:
    """The network file `name` (data/networks/<name>.toml); an unknown name lists the known."""
    path = Path(directory) / f"{name}.toml"
    return network_from_table(_table(name, Path(directory)), name)


def _table(name: str, directory: Path, seen: tuple[str, ...] = ()) -> dict:
    """The network file's table, on top of the file it `extends` (module doc)."""
    path = directory / f"{name}.toml"
    if not path.is_file():
        raise InputError(unknown("network", name, known_networks(directory)))
    data = read_toml(path, "network", "the files in data/networks/ are examples")
    base = data.pop("extends", None)
    if base is None:
        return data
    if not isinstance(base, str) or base in seen + (name,):
        raise InputError(f"network {name}: extends={base!r}; name another network file, "
                         f"without a cycle")
    below = _table(base, directory, seen + (name,))
    # the fabric's sources still hold under the other launch: both lists are kept
    return below | data | {"sources": below.get("sources", []) + data.get("sources", [])}


def network_from_table(data: dict, name: str = "network") -> Network:
    """A Network from a parsed TOML table; unknown keys and bad values are named."""
    _check(f"network {name}", data, NETWORK_KEYS)
    library = data.get("library", "nccl")
    if library not in LIBRARIES:
        raise InputError(f"network {name}: {unknown('library', library, list(LIBRARIES))}")
    tiers = tuple(_fabric_tier(f"network {name}, tier {i}", t)
                  for i, t in enumerate(data.get("tiers", [])))
    spans = [t.span for t in tiers]
    if spans != sorted(set(spans)):
        raise InputError(f"network {name}: tier spans {spans} must grow from the innermost")
    return Network(data.get("name", name), library, tiers, data.get("intra_efficiency"),
                   data.get("nic_efficiency"), _seconds(data.get("net_step_latency_us")),
                   _seconds(data.get("intra_step_latency_us")),
                   data.get("nvls_busbw_gbs", 0.0) * 1e9, tuple(data.get("torus", ())),
                   *_stalls(f"network {name}", data),
                   data.get("description", ""), tuple(data.get("sources", ())),
                   data.get("launch", ""))


def _stalls(where: str, data: dict) -> tuple[float, tuple]:
    """(chunk bytes, ((ring size, seconds), ...)) of a network file's measured stalls."""
    ranks, ms = data.get("stall_ranks", []), data.get("stall_ms", [])
    chunk = data.get("stall_chunk_kib", 0)
    if len(ranks) != len(ms) or (chunk > 0) != bool(ranks) or list(ranks) != sorted(ranks):
        raise InputError(f"{where}: give stall_chunk_kib with stall_ranks (growing) and "
                         f"stall_ms of one length each, or none of them")
    return chunk * 1024.0, tuple((int(n), t * 1e-3) for n, t in zip(ranks, ms))


def _seconds(micro) -> float | None:
    return None if micro is None else micro * 1e-6


def _fabric_tier(where: str, table) -> FabricTier:
    _check(where, table, FABRIC_KEYS)
    span, over = table.get("span"), table.get("oversubscription", 1.0)
    if not isinstance(span, int) or span < 1:
        raise InputError(f"{where}: span={span!r}; give the devices in one domain (an integer)")
    if not isinstance(over, (int, float)) or over < 1:
        raise InputError(f"{where}: oversubscription={over!r}; use a ratio >= 1 (1:7 -> 7)")
    return FabricTier(table.get("name", ""), span, float(over),
                      table.get("hop_latency_us", 0.0) * 1e-6, table.get("note", ""))


def _check(where: str, table, known: set[str]) -> None:
    if not isinstance(table, dict):
        raise InputError(f"{where}: expected a table, got {table!r}")
    for key in sorted(set(table) - known):
        raise InputError(f"{where}: {unknown('key', key, sorted(known))}")


__all__ = ["FabricTier", "LIBRARIES", "MACHINE", "NETWORK_DIR", "Network", "Tier",
           "known_networks", "load_network", "network_from_table", "tiers_of"]
