"""Fit the measured collective constants of the Frontier and Perlmutter network files on published
timings, and say how well the fit describes them.

    python benchmarks/fit_collectives.py

Data (FIT only: nothing else is fitted on it, and these constants are fitted on nothing else):
data/reference/collectives_pccl.csv, RCCL on Frontier and NCCL on Perlmutter, all-gather and
reduce-scatter timings from the logs of Singh et al.'s PCCL reproducer (arXiv 2504.18658).

Model (parex.predict.collectives for a ring over n ranks on n/ppn nodes): every ring step at one
network step latency α, the bytes at the node's NICs' bus bandwidth B:

    t = (n − 1)·α + (n − 1)/n · S / B,    nic_efficiency = B / (the node's NICs: 4 × 25 GB/s)

Rows fitted: multi-node rings inside one dragonfly group (n ≤ 256; the group's links, not the
global ones), that reached 5 GB/s of bus bandwidth.

The stalls (`stall_*` in data/networks/frontier.toml): on Frontier, every multi-node RCCL ring
whose chunk per rank S/n is 256 KiB or less ran at a few hundred MB/s in some of its calls
(512 KiB and more: never), while NCCL on Perlmutter's Slingshot never did. The mean over the
rows of such a chunk, minus the α-β time above, is the stall a call adds on average, by ring
size: `stall_ms` at `stall_ranks` (the whole heavy tail counted, as a step's sum of many
collectives sees it).
"""

from __future__ import annotations

import sys

import numpy as np

from parex.predict.references import read_reference

NIC_BYTES_PER_S = {"frontier": 100e9, "perlmutter": 100e9}  # 4 x 25 GB/s NICs per node
PER_NODE = {"frontier": 8, "perlmutter": 4}


def fitted_rows(frame, system: str, one_node: bool = False):
    """(rows fitted, rows left out) of one system: multi-node rings up to 256 ranks, or the
    rings inside one node."""
    mine = frame[frame.system == system]
    rows = (mine[mine.gpus == PER_NODE[system]] if one_node else
            mine[(mine.gpus > PER_NODE[system]) & (mine.gpus <= 256)])
    return rows[rows.busbw_gbs >= 5], rows[rows.busbw_gbs < 5]


def model_seconds(alpha, bandwidth, n, S):
    return (n - 1) * alpha + (n - 1) / n * S / bandwidth


def fit(rows) -> tuple[float, float]:
    """(α, B) minimising Σ log(model / measured)², a grid search refined twice around its
    best point."""
    n, S, t = (rows[c].to_numpy(float) for c in ("gpus", "buffer_bytes", "time_s"))
    alphas, bandwidths = np.linspace(0, 100e-6, 201), np.linspace(10e9, 200e9, 191)
    for _ in range(3):
        a, b = np.meshgrid(alphas, bandwidths, indexing="ij")
        err = (np.log(model_seconds(a[..., None], b[..., None], n, S) / t) ** 2).sum(-1)
        i, j = np.unravel_index(np.argmin(err), err.shape)
        da, db = alphas[1] - alphas[0], bandwidths[1] - bandwidths[0]
        alphas = np.linspace(max(alphas[i] - da, 0), alphas[i] + da, 41)
        bandwidths = np.linspace(bandwidths[j] - db, bandwidths[j] + db, 41)
    return float(alphas[20]), float(bandwidths[20])


def report(frame, system: str, one_node: bool, rate: float, what: str) -> None:
    rows, stalled = fitted_rows(frame, system, one_node)
    if not len(rows):
        print(f"{system} {what}: no rows")
        return
    alpha, bandwidth = fit(rows)
    err = np.abs(model_seconds(alpha, bandwidth, rows.gpus, rows.buffer_bytes)
                 / rows.time_s - 1)
    print(f"{system} {what}: step latency {alpha * 1e6:.1f} us, bus bandwidth "
          f"{bandwidth / 1e9:.1f} GB/s = efficiency {bandwidth / rate:.2f}; {len(rows)} rows, "
          f"|error| median {np.median(err):.3f}, max {err.max():.3f}; {len(stalled)} rows "
          f"below 5 GB/s left out")


STALL_CHUNK = 384 * 1024  # bytes per rank: between the largest slow chunk (256 KiB) and the
# smallest chunk never slow (512 KiB) in the logs


def stalls(frame, system: str) -> list[tuple[int, float]]:
    """(ring size, mean measured − α-β seconds) of the multi-node rings with chunks below
    STALL_CHUNK, per ring size, with α and B fitted as above."""
    rows, _ = fitted_rows(frame, system)
    alpha, bandwidth = fit(rows)
    mine = frame[(frame.system == system) & (frame.gpus > PER_NODE[system])]
    small = mine[mine.buffer_bytes / mine.gpus < STALL_CHUNK]
    out = []
    for n, group in small.groupby("gpus"):
        excess = group.time_s - model_seconds(alpha, bandwidth, n, group.buffer_bytes)
        out.append((int(n), float(excess.mean())))
    return out


def main() -> int:
    frame = read_reference("collectives_pccl")
    for system in ("frontier", "perlmutter"):
        report(frame, system, False, NIC_BYTES_PER_S[system], "across nodes (the NICs)")
    # one Frontier node: the two Infinity Fabric rings' 100 GB/s per GCD
    report(frame, "frontier", True, 100e9, "in one node")
    for system in ("frontier", "perlmutter"):
        table = stalls(frame, system)
        print(f"{system} stalls (chunks below {STALL_CHUNK // 1024} KiB per rank): "
              + ", ".join(f"{n}: {s * 1e3:.1f} ms" for n, s in table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
