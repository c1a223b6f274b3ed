"""α-β costs of the predicted collectives (comm.Term), placed on the cluster's links.

Per op (bytes S, group g, link bandwidth β·efficiency, latency α): ring all-reduce
2(g−1)/g·S/β + 2(g−1)α, tree latency 2⌈log2 g⌉α when smaller; all-gather, reduce-scatter and
all-to-all (g−1)/g·S/β + (g−1)α; permute S/β + α. Groups spanning nodes run hierarchically:
intra-node first, then inter-node on 1/g_in of the data, each device on its own NIC. On the
calibrated emulated mesh each kind costs the α + β·S that `parex calibrate` measured.
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..layout import MESH_AXES, Axis
from ..setting import EMULATED, profile_regime
from .comm import Term
from .shapes import Grid


def group_shape(grid: Grid, axes: tuple[Axis, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(group size, device stride of its innermost non-trivial axis). The mesh orders axes
    (replica,) stage, data, fsdp, seq, tensor, tensor innermost, so tensor groups sit inside a
    node."""
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


def _ring(kind: str, g, S, bandwidth, latency):
    """One level of a collective: bandwidth term and latency term."""
    g = np.maximum(g, 1)
    frac = (g - 1) / g
    if kind == "all-reduce":
        steps = np.minimum(2 * (g - 1), 2 * np.ceil(np.log2(g)))
        return 2 * frac * S / bandwidth + steps * latency
    if kind == "collective-permute":
        return np.where(g > 1, S / bandwidth + latency, 0.0)
    return frac * S / bandwidth + (g - 1) * latency


def collective_seconds(kind, g, stride, S, chip) -> np.ndarray:
    """Seconds of one collective on a GPU/TPU-style cluster, intra-node level first."""
    eff = chip.network_efficiency
    inside = np.clip(chip.scaleup_domain // np.maximum(stride, 1), 1, None)
    g_in = np.minimum(g, inside)
    g_out = np.maximum(g // g_in, 1)
    intra, inter = chip.intra_node, chip.inter_node
    t = _ring(kind, g_in, S, intra.bandwidth * eff, intra.latency)
    return t + np.where(g_out > 1, _ring(kind, g_out, S / g_in, inter.bandwidth * eff,
                                         inter.latency), 0.0)


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


def term_seconds(term: Term, grid: Grid, chip) -> np.ndarray:
    """Seconds all ops of a term take per step on this chip's cluster."""
    g, stride = group_shape(grid, term.axes)
    if profile_regime(chip) == EMULATED:  # the α-β costs measured on this machine's mesh
        per_op = calibrated_seconds(term.kind, g, term.bytes_per_op, chip.calibration)
    else:
        per_op = collective_seconds(term.kind, g, stride, term.bytes_per_op, chip)
    return term.count * per_op


__all__ = ["calibrated_seconds", "collective_seconds", "group_shape", "term_seconds"]
