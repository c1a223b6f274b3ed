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

Frontier's launches. The same authors ran three campaigns, and how a job was launched decides
what RCCL's NIC path does (docs/results/2026-12-scale-physics.md, sessions 4 and 5):

- configured (data/networks/frontier.toml, parex's default): campaign 3, the `fr_` logs, jobs
  2990832-2990839, run after the authors' run script (sc2025-pccl-reproducer `run.sh` at
  5a6353f) bound each rank to its closest GCD and NIC (`MPICH_OFI_NIC_POLICY=GPU`) and set
  libfabric CXI's rendezvous settings. Its small chunks run at 0.3-1.3x the α-β time; only each
  job's first size (1 MB) is slow, by a connection set-up paid once per job, which a training
  run amortises over thousands of steps: left out of the network file (printed below).
- unconfigured (data/networks/frontier-unconfigured.toml): campaigns 1 and 2 (jobs 2981673-
  2986514: no GPU binding, then `--gpu-bind=closest` alone). Every multi-node ring whose chunk
  per rank S/n is 256 KiB or less ran at a few hundred MB/s in some of its calls (512 KiB and
  more: never; NCCL on Perlmutter's Slingshot: never). The mean over the rows of such a chunk,
  minus this launch's α-β time, is the stall a call adds on average, by ring size: `stall_ms` at
  `stall_ranks` (the whole heavy tail counted, as a step's sum of many collectives sees it).

One node's rings (Infinity Fabric, no NIC) are fitted on every campaign's one-node rows: the
launch settings above are the NIC path's, and both network files share those constants.
"""

from __future__ import annotations

import sys

import numpy as np

from parex.predict.references import read_reference

NIC_BYTES_PER_S = {"frontier": 100e9, "perlmutter": 100e9}  # 4 x 25 GB/s NICs per node
PER_NODE = {"frontier": 8, "perlmutter": 4}
CONFIGURED_LOGS = "fr_"  # campaign 3's log files (module doc)


def launch(frame, configured: bool):
    """Frontier's rows of one launch (module doc): campaign 3's, or campaigns 1 and 2's."""
    mine = frame[frame.system == "frontier"]
    return mine[mine.source_file.str.startswith(CONFIGURED_LOGS) == configured]


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


def excess(frame, system: str, rows):
    """`rows`' measured seconds less the α-β time fitted on `frame`'s rows of `system`."""
    alpha, bandwidth = fit(fitted_rows(frame, system)[0])
    return rows.time_s - model_seconds(alpha, bandwidth, rows.gpus, rows.buffer_bytes)


def stalls(frame, system: str) -> list[tuple[int, float]]:
    """(ring size, mean measured − α-β seconds) of the multi-node rings with chunks below
    STALL_CHUNK, per ring size, with α and B fitted on the same rows' launch as above."""
    mine = frame[(frame.system == system) & (frame.gpus > PER_NODE[system])]
    small = mine[mine.buffer_bytes / mine.gpus < STALL_CHUNK]
    over = excess(frame, system, small)
    return [(int(n), float(over[group.index].mean())) for n, group in small.groupby("gpus")]


def first_sizes(rows):
    """Each job's first (smallest) size: where a configured launch pays its connection set-up
    (module doc)."""
    return rows.buffer_bytes == rows.groupby("source_file").buffer_bytes.transform("min")


def setup(frame) -> list[tuple[int, float]]:
    """(ring size, first size's measured − α-β seconds) of each multi-node job."""
    first = frame[first_sizes(frame) & (frame.gpus > PER_NODE["frontier"])]
    over = excess(frame, "frontier", first)
    return [(int(n), float(over[i])) for n, i in zip(first.gpus, first.index)]


def main() -> int:
    frame = read_reference("collectives_pccl")
    configured, unconfigured = launch(frame, True), launch(frame, False)
    for what, rows in (("configured launch", configured), ("unconfigured", unconfigured)):
        report(rows, "frontier", False, NIC_BYTES_PER_S["frontier"], f"{what}, across nodes")
    report(frame, "perlmutter", False, NIC_BYTES_PER_S["perlmutter"], "across nodes (the NICs)")
    # one Frontier node: the two Infinity Fabric rings' 100 GB/s per GCD, every campaign
    report(frame, "frontier", True, 100e9, "in one node")
    for what, rows, system in (("frontier unconfigured", unconfigured, "frontier"),
                               ("frontier configured, after each job's first size",
                                configured[~first_sizes(configured)], "frontier"),
                               ("perlmutter", frame, "perlmutter")):
        print(f"{what} stalls (chunks below {STALL_CHUNK // 1024} KiB per rank): "
              + ", ".join(f"{n}: {s * 1e3:.1f} ms" for n, s in stalls(rows, system)))
    print("frontier configured, each job's first size (set-up, once per job, left out): "
          + ", ".join(f"{n}: {s * 1e3:.1f} ms" for n, s in setup(configured)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
