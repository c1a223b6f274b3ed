"""Collectives as the libraries run them: ring, tree and NVLS, each protocol, on the tiers of the
network (parex.network), the fastest chosen by message and group size as NCCL and RCCL choose.

A group of g ranks at stride s has m_k = min(g, span_k // s) members in one tier-k domain, so
tier k joins f_k = m_k / m_{k−1} of the group's tier-(k−1) domains (m_{−1} = 1) and each device
moves data reduced over the m_{k−1} members below it (a ring in rank order crosses each tier
that often; a hierarchical algorithm moves the same bytes). With S the op's bytes and r_k the
tier's rate per device (parex.network.Tier.rate, shared by every device of a domain, so rings
that all cross an oversubscribed tier at once each get the tier's share):

    ring   all-reduce 2(f_k−1)/f_k · S/m_{k−1} / r_k,  all-gather, reduce-scatter (f_k−1)/f_k · …
    tree   all-reduce: a chain in the scale-up domain, then 2 · S/m_{k−1} / r_k on each tier above
    NVLS   all-reduce reduced in the NVSwitch: 2(f_0−1)/f_0 · S / the tier's NVLS bus bandwidth,
           then a tree above it
    all-to-all  (m_k − m_{k−1})/g · S / r_k (each device's bytes to the ranks beyond tier k−1);
                a mixture's dispatch sent once per remote node (DeepEP, HybridEP): the bytes
                leaving the scale-up domain times `per_node_share`
    permute     S / r_k of the tier a hop to the next rank crosses

The libraries pipeline chunks through every tier at once, so a collective's bandwidth time is its
busiest link's (a flat NCCL ring's bus bandwidth is its slowest link's): the bytes above are each
device's whose highest crossed tier is k, and tier k ≥ 1's links (a device's NIC share, then its
share of each fabric tier) carry every byte crossing tier k or above at r_k (`tier_loads`). The
same loads summed over a step's collectives give the busiest link's seconds per step
(`network_load`: the collectives that overlap compute take turns on it).

and a latency: the library's base latency plus its per-step latency for the link a step crosses
(NVLink, PCI or the network; a network file may give the step latency measured on its machine)
and the tiers' switch hops: a ring all-reduce takes 2 steps per rank, all-gather and
reduce-scatter one, each at its slowest hop's latency (the ring's steps run in lockstep), a tree
2·(chain + log2 f_k per tier above). Each protocol scales the bandwidth (LL moves half its
payload, LL128 120 of 128 bytes) against its latency, and the time is the fastest (algorithm,
protocol) the library would pick: NCCL's and RCCL's tuning tables (`LIBRARY_CONSTANTS`, from
src/graph/tuning.cc of github.com/NVIDIA/nccl, 2026, and github.com/ROCm/rccl), with their
per-size correction factors. TPUs ("ici") run rings on the torus at the links' own latency, one
ring per torus dimension the group spans, in parallel.

Stalls. Where a network file gives them (Frontier's RCCL under an unconfigured launch:
data/networks/frontier-unconfigured.toml, fitted by benchmarks/fit_collectives.py on the logs of
Singh et al.'s PCCL study, arXiv 2504.18658; the configured launch, frontier.toml, has none), a
multi-node ring whose chunk per rank S/g is below `stall_chunk` adds the mean stall measured for
rings of its size (interpolated in log2 g, held beyond the sizes measured), once per pass: an
all-reduce's ring is a reduce-scatter pass then an all-gather pass of the same chunks. The
stall is the transport's, so every algorithm and protocol pays it.

Every candidate is `latency + S · seconds per byte` (+ the stall below its byte limit), all fixed
by the group's placement alone: they are computed once per distinct (group size, stride) and
spread over the rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..network import Network, Tier

PROTOCOLS = ("LL", "LL128", "Simple")
US = 1e-6


@dataclass(frozen=True)
class Library:
    """One library's tuning constants (µs, bandwidth factors), per algorithm × protocol."""

    name: str
    base: dict  # algorithm -> (LL, LL128, Simple) base latency, µs
    step: dict  # link class -> algorithm -> per-step latency, µs
    bw: dict  # algorithm -> protocol bandwidth factor
    protocols: tuple[str, ...]  # enabled by default
    correction: dict  # algorithm -> protocol -> factors by log2(bytes / 64), 1 beyond
    ring_plateau: float = 1.0  # multi-node ring all-reduce latency factor (Simple)
    nvls: tuple[float, float] = (0.0, 0.0)  # NVLS step latency on NVLink and the network, µs


# NCCL 2.2x (src/graph/tuning.cc): baseLatencies, hwLatencies, the LL/LL128/tree bandwidth
# factors, the ring plateau of Ampere and newer, NVLS latencies, treeCorrectionFactor
NCCL = Library(
    "nccl", base={"ring": (6.6, 14.0, 8.4), "tree": (6.8, 14.0, 8.4)},
    step={"nvlink": {"ring": (0.6, 1.9, 3.4), "tree": (0.6, 1.25, 4.0)},
          "pci": {"ring": (1.0, 2.5, 5.7), "tree": (1.0, 1.9, 4.0)},
          "net": {"ring": (2.7, 4.0, 14.0), "tree": (5.0, 8.5, 14.0)}},
    bw={"ring": (0.5, 0.92, 1.0), "tree": (1 / 3.8, 0.92, 0.92)},
    protocols=PROTOCOLS, ring_plateau=1.4, nvls=(25.0, 18.0),
    correction={"tree": {
        "LL": (1, 1, 1, 1, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1, 1, 1),
        "LL128": (1, 1, 1, 1, 1, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9,
                  .9, 1),
        "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7,
                   .7, .8, .9)}})
# RCCL (ROCm/rccl src/graph/tuning.cc): its own latencies and factors, the tree at 0.27 of the
# bus bandwidth, and its ring correction factors (Simple below 8 MB runs far under the model)
_RCCL_RING = (1, 1, 1, 1, 1, 1, .25, .41, .55, .56, .78, .94, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)
RCCL = Library(
    "rccl", base={"ring": (20.5, 20.5, 27.9), "tree": (37.9, 37.9, 40.4)},
    step={"nvlink": {"ring": (2.3, 2.3, 2.7), "tree": (1.2, 1.2, 3.8)},
          "pci": {"ring": (1.3, 1.3, 1.9), "tree": (2.2, 2.2, 5.7)},
          "net": {"ring": (2.0, 2.0, 4.5), "tree": (9.8, 9.8, 19.5)}},
    bw={"ring": (1 / 5, 0.92, 1.0), "tree": (0.27 / 2.3, 0.27 * 0.915, 0.27)},
    protocols=("LL", "Simple"),
    correction={"ring": {"LL": _RCCL_RING, "Simple": (1, 1, 1, 1, 1, 1, .04, .08, .09, .09,
                                                      .11, .13, .25, .40, .59, .76, .86, 1, 1,
                                                      1, 1, 1)},
                "tree": {"Simple": (1, 1, 1, 1, 1, 1, .41, .27, .25, .39, .46, .72, .76, .87,
                                    .92, .97, 1, 1, 1, 1, 1, 1)}})
LIBRARY_CONSTANTS = {"nccl": NCCL, "rccl": RCCL}


@dataclass(frozen=True)
class Placement:
    """Where a group's ranks sit on the tiers (columns over distinct groups)."""

    fan: list  # f_k: the group's tier-(k−1) domains joined in one tier-k domain
    below: list  # m_{k−1}: members under one tier-(k−1) domain
    members: list  # m_k
    hops: list  # ring hops (per pass around the group) whose highest crossed tier is k


@dataclass(frozen=True)
class Candidate:
    """One (algorithm, protocol): seconds = latency + S · per_byte · correction(S)."""

    latency: np.ndarray
    per_byte: np.ndarray
    correction: tuple | None = None
    stall: tuple | None = None  # (bytes below which it stalls, mean stall seconds), per group


def placement(g, stride, tiers: tuple[Tier, ...]) -> Placement:
    """m_k, f_k and the ring's hops per tier for groups of g ranks at `stride` (module doc)."""
    g = np.maximum(np.asarray(g, dtype=np.float64), 1.0)
    stride = np.maximum(np.asarray(stride, dtype=np.float64), 1.0)
    members = [np.clip(np.floor(t.span / stride), 1.0, g) for t in tiers[:-1]] + [g]
    below = [np.ones_like(g)] + members[:-1]
    fan = [m / b for m, b in zip(members, below)]
    # domains of tier k−1 the ring visits (tier −1: every rank); a hop that leaves one crosses
    # tier k, and the hops crossing tier k but no higher one are counted at k
    domains = [g] + [np.ceil(g / m) for m in members]
    crossing = [np.where(d > 1, d, 0.0) for d in domains[:-1]]
    hops = [c - n for c, n in zip(crossing, crossing[1:] + [np.zeros_like(g)])]
    return Placement(fan, below, members, hops)


def volumes(kind: str, at: Placement, routing=None) -> list:
    """Bytes each device moves across tier k per byte of the op (ring or hierarchical; a
    permute's one send crosses the lowest tier whose domain holds both ranks, as
    `permute_candidate` prices it). `routing`: (E, k) of a mixture's dispatch sent once per
    remote scale-up domain (`per_node_share`)."""
    if kind == "all-to-all":
        g = at.members[-1]
        out = [(m - b) / g for m, b in zip(at.members, at.below)]
        if routing is not None:
            share = per_node_share(routing, at)
            out = out[:1] + [v * share for v in out[1:]]
        return out
    if kind == "collective-permute":
        first = np.cumsum([f > 1 for f in at.fan], axis=0) == 1  # the lowest tier crossed
        return [np.where((f > 1) & lowest, 1.0, 0.0) for f, lowest in zip(at.fan, first)]
    passes = 2.0 if kind == "all-reduce" else 1.0
    return [passes * (f - 1) / f / b for f, b in zip(at.fan, at.below)]


def per_node_share(routing, at: Placement) -> np.ndarray:
    """Of a mixture's all-to-all of a token's k slots, the share of the bytes leaving the
    scale-up domain that DeepEP and HybridEP send (Megatron-Core's flex dispatcher): a token
    goes once to each remote domain holding one of its experts and is forwarded there over the
    scale-up links (DeepEP's internode kernels: RDMA to the same local rank of each node, then
    NVLink), where an all-to-all sends a copy per slot. With E experts spread evenly over the
    group's n = g / m_0 domains, E/n each, and a token's k experts distinct and uniformly
    chosen (balanced routing), a remote domain receives it with probability
    p = 1 − C(E − E/n, k) / C(E, k); of the (n − 1)/n · k copies an all-to-all sends off the
    domain, (n − 1)·p go: a share n·p/k. The forwarding inside the domain is left on its
    faster links unpriced (the kernels forward chunks as they arrive)."""
    E, k = routing
    n = at.members[-1] / at.members[0]
    per_domain = E / n
    missed = np.ones_like(n)  # C(E − E/n, k) / C(E, k): the domain holds none of the k
    for i in range(int(k)):
        missed = missed * np.clip((E - per_domain - i) / (E - i), 0.0, 1.0)
    return np.where(n > 1, np.minimum(1.0, n * (1.0 - missed) / k), 1.0)


def tier_loads(volume: list, rates: list) -> list:
    """Seconds (per byte of the op, or per step) each tier's links are busy, given the bytes per
    device whose highest crossed tier is k and each tier's rate: tier 0 carries its own bytes;
    tier k ≥ 1 (a device's NIC share for k = 1, its share of the fabric's links above) every
    byte that crosses tier k or a higher one, since whatever leaves a tier-k domain leaves
    the node through its NICs first."""
    return [volume[0] / rates[0]] + [sum(volume[k:]) / rates[k] for k in range(1, len(rates))]


def _slowest(volume: list, rates: list) -> np.ndarray:
    """The slowest tier's seconds per byte (`tier_loads`): the libraries pipeline chunks
    through every tier at once, so the busiest link sets the pace."""
    return np.maximum.reduce(tier_loads(volume, rates))


def network_load(crossing: list, tiers) -> np.ndarray:
    """Seconds the busiest network link is busy, given the bytes per device whose highest
    crossed tier is k (`tier_loads` over tiers k ≥ 1). The scale-up domain is left out: its
    links are no single port (an NVSwitch reduces in the switch, a torus gives a chip several
    links), while every byte that leaves a node crosses its NICs."""
    loads = tier_loads(crossing, [t.rate for t in tiers])[1:]
    return np.maximum.reduce(loads) if loads else np.zeros_like(crossing[0])


def _step(lib: Library, tier: Tier, algorithm: str, p: int, net: Network) -> float:
    """Seconds per step of `algorithm` with protocol p over a hop that crosses `tier`."""
    base = lib.step[tier.link][algorithm][p] * US
    measured = net.net_step_latency if tier.link == "net" else net.intra_step_latency
    if measured is not None:
        base = measured  # on this machine, messages of 1 MB to 1 GB (a network file's)
    return base + tier.latency


def _ring_latency(lib: Library, at: Placement, tiers, net: Network, p: int) -> np.ndarray:
    """Seconds of one pass around the ring: a pipelined ring's steps run in lockstep, so every
    step costs the step latency of the slowest (highest) tier the ring crosses (on Perlmutter
    every step of a multi-node NCCL ring measured 13.9 µs, NCCL's network step: network
    files)."""
    slowest = np.maximum.reduce([np.where(h > 0, _step(lib, t, "ring", p, net), 0.0)
                                 for h, t in zip(at.hops, tiers)])
    return sum(at.hops) * slowest


def stalls(kind: str, at: Placement, net: Network) -> tuple | None:
    """(bytes below which a call stalls, its mean stall seconds) per group, from the network
    file's measured stalls (module doc); None where it gives none."""
    if not net.stall or kind not in ("all-gather", "reduce-scatter", "all-reduce"):
        return None
    g = at.members[-1]
    ranks, seconds = (np.array(v, dtype=np.float64) for v in zip(*net.stall))
    per_pass = np.interp(np.log2(g), np.log2(ranks), seconds)  # held beyond the ends
    passes = 2.0 if kind == "all-reduce" else 1.0
    multi_node = at.members[0] < g
    return net.stall_chunk * g, np.where(multi_node, passes * per_pass, 0.0)


def library_candidates(kind: str, at: Placement, tiers, net: Network, lib: Library,
                       routing=None) -> list[Candidate]:
    """Every (algorithm, protocol) NCCL/RCCL could run for this op (module doc), each with the
    network's stalls; `routing` as `volumes`'."""
    stall = stalls(kind, at, net)
    return [Candidate(c.latency, c.per_byte, c.correction, stall)
            for c in _algorithms(kind, at, tiers, net, lib, routing)]


def _algorithms(kind: str, at: Placement, tiers, net: Network, lib: Library,
                routing=None) -> list[Candidate]:
    """Every (algorithm, protocol) NCCL/RCCL could run for this op, without stalls."""
    ring = _slowest(volumes(kind, at, routing), [t.rate for t in tiers])
    passes = 2.0 if kind == "all-reduce" else 1.0
    multi_node = at.members[0] < at.members[-1]
    out = []
    for p, proto in enumerate(PROTOCOLS):
        if proto not in lib.protocols or (proto == "LL128" and tiers[0].link != "nvlink"):
            continue
        lat = lib.base["ring"][p] * US + passes * _ring_latency(lib, at, tiers, net, p)
        if proto == "Simple" and kind == "all-reduce":
            lat = np.where(multi_node, lat * lib.ring_plateau, lat)
        out.append(Candidate(lat, ring / lib.bw["ring"][p],
                             lib.correction.get("ring", {}).get(proto)))
        if kind == "all-reduce":
            out.append(_tree(at, tiers, net, lib, p))
    if kind == "all-reduce" and tiers[0].reduction > 0 and lib.nvls[0] > 0:
        out.append(_nvls(at, tiers, lib))
    return out


def _above(at: Placement) -> list:
    """Bytes per byte of the op a tree or NVLS moves on each tier above the scale-up domain."""
    return [np.where(f > 1, 2 / b, 0.0) for f, b in zip(at.fan[1:], at.below[1:])]


def _tree(at: Placement, tiers, net: Network, lib: Library, p: int) -> Candidate:
    """Double binary tree across tiers ≥ 1 after a chain in the scale-up domain."""
    f0 = at.fan[0]
    per_byte = _slowest([2 * (f0 - 1) / f0] + _above(at), [t.rate for t in tiers])
    depth = [f0 - 1] + [np.ceil(np.log2(f)) for f in at.fan[1:]]
    lat = lib.base["tree"][p] * US + 2 * sum(
        d * _step(lib, t, "tree", p, net) for d, t in zip(depth, tiers))
    return Candidate(lat, per_byte / lib.bw["tree"][p],
                     lib.correction.get("tree", {}).get(PROTOCOLS[p]))


def _nvls(at: Placement, tiers, lib: Library) -> Candidate:
    """All-reduce reduced inside the NVSwitch (tier 0), a tree above it (NCCL's NVLS / NVLS
    tree): NVLS's own step latencies, Simple protocol."""
    f0 = at.fan[0]
    per_byte = _slowest([2 * (f0 - 1) / f0] + _above(at),
                        [tiers[0].reduction] + [t.rate for t in tiers[1:]])
    levels = sum(np.ceil(np.log2(f)) for f in at.fan[1:])
    return Candidate(lib.nvls[0] * US + 2 * levels * lib.nvls[1] * US, per_byte)


def ici_candidate(kind: str, at: Placement, tiers, dims, link_latency) -> Candidate:
    """XLA's rings on a TPU torus: the group's bytes split over the `dims` torus dimensions it
    spans in the scale-up domain, each ring on its own pair of links; one link latency (ICI,
    then DCN) per hop."""
    volume = volumes(kind, at)
    volume = [volume[0] / np.maximum(dims, 1)] + volume[1:]
    passes = 2.0 if kind == "all-reduce" else 1.0
    lat = passes * sum(h * (link_latency[min(k, 1)] + t.latency)
                       for k, (h, t) in enumerate(zip(at.hops, tiers)))
    return Candidate(lat, _slowest(volume, [t.rate for t in tiers]))


def permute_candidate(at: Placement, tiers, link_latency) -> Candidate:
    """One send to the next rank: at the rate of the lowest tier whose domain holds both (the
    tier most hops cross), plus that link's latency and the tier's switch hops."""
    lat, per_byte = np.zeros_like(at.fan[0]), np.zeros_like(at.fan[0])
    crossed = np.zeros(at.fan[0].shape, dtype=bool)
    for k, (f, t) in enumerate(zip(at.fan, tiers)):
        here = (f > 1) & ~crossed
        lat = np.where(here, link_latency[min(k, 1)] + t.latency, lat)
        per_byte = np.where(here, 1 / t.rate, per_byte)
        crossed |= here
    return Candidate(lat, per_byte)


def fastest(candidates: list[Candidate], inverse, nbytes) -> np.ndarray:
    """Per row, the fastest candidate's seconds: each candidate's latency and seconds per byte
    (per distinct group, `inverse` spreading them over the rows) on the row's bytes."""
    S = np.asarray(nbytes, dtype=np.float64)
    bucket = None
    best = None
    for c in candidates:
        t = S * c.per_byte[inverse]
        if c.correction is not None:
            if bucket is None:  # log2(bytes / 64), the libraries' correction index
                bucket = np.minimum(np.log2(np.maximum(S / 64, 1.0)).astype(np.int64), 21)
            t = t / np.asarray(c.correction)[bucket]
        t = t + c.latency[inverse]
        if c.stall is not None:
            limit, stall = c.stall
            t = t + np.where(S < limit[inverse], stall[inverse], 0.0)
        best = t if best is None else np.minimum(best, t)
    return best


__all__ = ["Candidate", "LIBRARY_CONSTANTS", "Library", "NCCL", "PROTOCOLS", "Placement", "RCCL",
           "fastest", "ici_candidate", "library_candidates", "network_load", "permute_candidate",
           "placement", "stalls", "tier_loads", "volumes"]
