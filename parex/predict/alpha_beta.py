"""Seconds of the predicted collectives (comm.Term), placed on the cluster's network.

On a GPU or TPU cluster each op is priced by parex.predict.collectives: the group's ranks placed
on the network's tiers (parex.network: scale-up links, NICs, the fabric's oversubscribed tiers
above them), and the algorithm and protocol its library (NCCL, RCCL, XLA on ICI) would pick for
that message and group size, each with its latency growing with the group. On the calibrated
emulated mesh each kind costs the α + β·S that `parex calibrate` measured in a chain of
collectives, times what the same calibration measured an all-reduce to cost between matmuls
against its chained time (`collective_in_step`: the copies compete with the other devices'
compute for the shared cores).

The mesh orders axes (replica,) stage, data, fsdp, seq, tensor, tensor innermost, so a group's
stride is the product of the axes inside its innermost one: tensor groups sit inside a node, and
a data-parallel group's ranks are as far apart as the model-parallel block is wide.
"""

from __future__ import annotations

import functools

import numpy as np

from ..errors import InputError
from ..layout import MESH_AXES, Axis
from ..network import Network, tiers_of
from ..setting import EMULATED, profile_regime
from . import collectives
from .comm import Term
from .shapes import Grid


def group_shape(grid: Grid, axes: tuple[Axis, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(group size, device stride of its innermost non-trivial axis)."""
    g = np.ones(len(grid), dtype=np.int64)
    stride = np.ones(len(grid), dtype=np.int64)
    found = np.zeros(len(grid), dtype=bool)
    for axis in reversed(MESH_AXES):  # innermost first
        size = getattr(grid, axis.value, 1)  # no replica column: a Grid is one replica's
        if axis in axes:
            g = g * size
            found = found | (size > 1)
        stride = np.where(found, stride, stride * size)
    return g, stride


FULL_BISECTION = Network("full-bisection")  # a profile without a network file


_LAST: dict = {}  # the last grid's group shapes by axes: (grid, {axes: (g, stride)})


def _shape_of(grid: Grid, axes: tuple[Axis, ...]) -> tuple[np.ndarray, np.ndarray]:
    """group_shape, remembered for the grid whose terms are being timed (a step's terms share
    a few groups; the grid is held, so its id is not reused while remembered)."""
    if _LAST.get("grid") is not grid:
        _LAST.clear()
        _LAST["grid"] = grid
    if axes not in _LAST:
        _LAST[axes] = group_shape(grid, axes)
    return _LAST[axes]


def torus_dims(torus: tuple[int, ...], g, stride) -> np.ndarray:
    """How many dimensions of a TPU torus (d0 fastest, the network file's `torus`) a group of
    g ranks at `stride` varies along: dimension i when stride < d0·…·di and g·stride > d0·…·d(i−1).
    XLA splits the group's bytes over one ring per such dimension, each on its own links."""
    g, stride = np.asarray(g), np.asarray(stride)
    dims = np.zeros(np.broadcast(g, stride).shape)
    inner = 1
    for size in torus:
        dims = dims + ((stride < inner * size) & (g * stride > inner))
        inner *= size
    return np.maximum(dims, 1)


def collective_seconds(kind, g, stride, S, chip, routing=None) -> np.ndarray:
    """Seconds of one collective of S bytes over groups of g ranks at `stride` on an
    accelerator cluster (module docstring); `routing`: (E, k) of a mixture's dispatch sent once
    per remote node (collectives.per_node_share)."""
    g, stride = np.broadcast_arrays(np.asarray(g), np.asarray(stride))
    groups, inverse = _distinct(g, stride)
    net = chip.network or FULL_BISECTION
    links = (chip.intra_node.latency, chip.inter_node.latency)
    candidates = _candidates(kind, tuple(groups[0]), tuple(groups[1]),
                             tiers_of(chip, chip.network), net, links, routing)
    out = collectives.fastest(candidates, inverse, S)
    return np.where(g > 1, out, 0.0)


@functools.lru_cache(maxsize=4096)
def _candidates(kind, g: tuple, stride: tuple, tiers, net, links, routing=None) -> list:
    """The (algorithm, protocol) candidates of `kind` over the distinct groups (g, stride): they
    depend on the groups and the network, never on the bytes or the chip's compute, so a
    fit that varies only those (published_runs.fit_step_efficiency) places each group once."""
    g, stride = np.array(g), np.array(stride)
    at = collectives.placement(g, stride, tiers)
    if kind == "collective-permute":
        return [collectives.permute_candidate(at, tiers, links)]
    if net.library == "ici":
        return [collectives.ici_candidate(kind, at, tiers, torus_dims(net.torus, g, stride),
                                          links)]
    return collectives.library_candidates(kind, at, tiers, net,
                                          collectives.LIBRARY_CONSTANTS[net.library], routing)


def _distinct(g: np.ndarray, stride: np.ndarray) -> tuple:
    """((group sizes, strides) of the distinct groups, each row's index among them): a column
    of layouts holds few distinct groups, so their placement is worked out once each (a hash
    factorisation: no sort of the rows)."""
    import pandas as pd

    key = g.astype(np.int64).ravel() * (1 << 32) + stride.astype(np.int64).ravel()
    inverse, keys = pd.factorize(key)
    return ((keys >> 32).astype(np.float64), (keys & 0xFFFFFFFF).astype(np.float64)), \
        inverse.reshape(g.shape)


def calibrated_seconds(kind, g, S, calibration) -> np.ndarray:
    """Seconds of one collective on the emulated mesh: α + β·S measured by `parex calibrate`
    for the closest group size."""
    table = calibration.collectives.get(kind)
    if not table:  # never cost a collective at 0 s
        raise InputError(f"the calibration has no {kind} timings: run `parex calibrate`")
    groups = sorted(int(k) for k in table)
    out = np.zeros(np.broadcast(g, S).shape)
    for i, size in enumerate(groups):
        lo = 0 if i == 0 else (groups[i - 1] + size) / 2
        hi = np.inf if i == len(groups) - 1 else (size + groups[i + 1]) / 2
        fit = table[str(size)]
        out = np.where((g > lo) & (g <= hi), fit["alpha"] + fit["beta"] * S, out)
    return np.where(g > 1, out, 0.0)


def link_seconds(terms: list[Term], grid: Grid, chip) -> np.ndarray:
    """Seconds the busiest network link (a device's NIC share, or a fabric tier above it) is
    busy per step carrying every term's bytes (collectives.network_load): each op's bytes per
    tier placed as its group sits (collectives.volumes), over the tier's rate. Collectives
    that overlap compute each find the link free in their own price (term_seconds); on one link
    they take turns, so no step ends before the busiest link has carried its bytes."""
    tiers = tiers_of(chip, chip.network)
    crossing = [np.zeros(len(grid)) for _ in tiers]  # bytes per device, by highest tier
    placed: dict = {}
    for term in terms:
        g, stride = _shape_of(grid, term.axes)
        if term.axes not in placed:
            groups, inverse = _distinct(g, stride)
            placed[term.axes] = (collectives.placement(*groups, tiers), inverse)
        at, inverse = placed[term.axes]
        moved = np.where(g > 1, term.count * term.bytes_per_op, 0.0)
        for k, volume in enumerate(collectives.volumes(term.kind, at, term.routing)):
            crossing[k] = crossing[k] + moved * np.asarray(volume)[inverse]
    return collectives.network_load(crossing, tiers)


def term_seconds(term: Term, grid: Grid, chip) -> np.ndarray:
    """Seconds all ops of a term take per step on this chip's cluster."""
    g, stride = _shape_of(grid, term.axes)
    if profile_regime(chip) == EMULATED:  # the α-β costs measured on this machine's mesh, at
        cal = chip.calibration  # their cost between a step's matmuls (calibrate.in_step_calls)
        per_op = cal.collective_in_step * calibrated_seconds(term.kind, g, term.bytes_per_op, cal)
    else:
        per_op = collective_seconds(term.kind, g, stride, term.bytes_per_op, chip,
                                    term.routing)
    return term.count * per_op


__all__ = ["FULL_BISECTION", "calibrated_seconds", "collective_seconds", "group_shape",
           "link_seconds", "term_seconds", "torus_dims"]
