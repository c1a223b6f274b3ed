"""HexiScale's measured testbeds: the heterogeneous clusters its authors trained on and the
homogeneous clusters they compared them with (data/reference/hexiscale_testbeds.csv, from the
README of github.com/Relaxed-System-Lab/FlashFlex, the code of Yan et al., arXiv:2409.01143).

    published_pairs   the five published (testbed, baseline, model, two MFUs)
    on_ethernet       a cluster with every link between machines at one speed (the README says
                      "TCP connections" and gives no speed: the figure brackets it)
    paper_peak        a cluster's total peak on the authors' own peak table
    predict_pair      parex's search on both clusters, and its MFU ratio on the paper's
                      footing: the testbed with HexiScale's data parallelism between pipelines
                      (FSDP as its code runs it, ZeRO stage 1: parex.hetero.sharding), the
                      baseline with a whole replica per data-parallel rank (Megatron-LM's
                      default) or with Megatron-LM's distributed optimizer (opt-in,
                      --use-distributed-optimizer: ZeRO stage 1); the README does not say which

The paper's MFU is 96·B·s·L·h²(1 + s/6h + V/16Lh) / (time · Σ peak) on both sides, so its ratio
is (tokens/s of the testbed / tokens/s of the baseline) · (Σ peak of the baseline / Σ peak of the
testbed) on its own peak table. parex's MFU ratio is the same throughput ratio over parex's
peaks; `predict_pair` rescales it to the paper's peaks (a change below 1 %: the authors'
3080 Ti and 3090 peaks differ from parex's profiles).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache

from ..cluster import HeteroCluster, load_hetero_cluster
from ..config import model_preset
from ..predict.references import read_reference
from .search import HeteroSearch, NoPlan, search
from .sharding import HEXISCALE_ZERO

# Dense fp16 TFLOP/s per chip as the authors count them (FlashFlex, experimental/
# machine_amounts.json, "machine_specs"); the MFUs of data/reference/hexiscale_testbeds.csv are
# against these. The A100 PCIe and NVLink parts share the A100's 312.
PAPER_PEAK_TFLOPS = {"rtx-3080ti": 56.9, "rtx-3090": 80.0, "rtx-4090": 165.2,
                     "a100-80gb": 312.0, "a100-pcie-80gb": 312.0}
SEQ_LEN = 4096  # FlashFlex experimental/config.py: S = 4096 for every model


@dataclass(frozen=True)
class PublishedPair:
    """One published pair: HexiScale on `testbed` against Megatron on `baseline`."""

    testbed: str  # a cluster file (data/clusters/)
    baseline: str
    model: str  # a parex model preset
    hetero_mfu: float  # percent, the paper's convention (module docstring)
    homogeneous_mfu: float
    source: str

    @property
    def label(self) -> str:
        return f"{self.testbed} vs {self.baseline} · {self.model}"

    @property
    def paper_ratio(self) -> float:
        """The testbed's MFU over the baseline's, as published."""
        return self.hetero_mfu / self.homogeneous_mfu


def published_pairs() -> list[PublishedPair]:
    """The five published pairs, in the file's order."""
    table = read_reference("hexiscale_testbeds")
    return [PublishedPair(r.testbed, r.baseline, r.model, float(r.hetero_mfu),
                    float(r.homogeneous_mfu), r.source) for r in table.itertuples()]


def on_ethernet(cluster: HeteroCluster, gbps: float) -> HeteroCluster:
    """`cluster` with every link between machines, inside a group and between groups, at `gbps`
    Gb/s per node (one Ethernet for every machine, as a lab's TCP network is)."""
    groups = tuple(dataclasses.replace(g, inter_node_gbps=gbps) for g in cluster.groups)
    return dataclasses.replace(cluster, groups=groups, inter_group_gbps=gbps,
                               name=f"{cluster.name} @ {gbps:g} Gb/s")


def paper_peak(cluster: HeteroCluster) -> float:
    """Σ peak FLOP/s of the cluster on the authors' table (PAPER_PEAK_TFLOPS)."""
    return sum(PAPER_PEAK_TFLOPS[g.chip.name] * 1e12 * g.n_devices for g in cluster.groups)


@lru_cache(maxsize=32)
def _best(cluster_name: str, model: str, gbps: float, global_batch: int, zero: int = 0
          ) -> HeteroSearch | None:
    """parex's search of a cluster file at one Ethernet speed, ZeRO stage `zero` between its
    pipelines (a baseline serves two rows)."""
    cluster = on_ethernet(load_hetero_cluster(cluster_name), gbps)
    try:
        return search(model_preset(model), cluster, global_batch, SEQ_LEN, zero=zero)
    except NoPlan:
        return None


@dataclass(frozen=True)
class PairPrediction:
    """parex's best plans on a testbed and on its baseline, at one speed and batch."""

    pair: PublishedPair
    gbps: float
    global_batch: int
    baseline_zero: int  # the baseline's ZeRO stage between its pipelines (0 or 1)
    hetero: HeteroSearch | None  # None: nothing fits
    homogeneous: HeteroSearch | None

    @property
    def ratio(self) -> float:
        """The testbed's MFU over the baseline's, on the paper's peak table (NaN: no plan)."""
        if self.hetero is None or self.homogeneous is None:
            return float("nan")
        het, hom = (on_ethernet(load_hetero_cluster(name), self.gbps)
                    for name in (self.pair.testbed, self.pair.baseline))
        # parex's MFU · parex's peak = FLOP/s; over the paper's peak: the paper's footing
        return (self.hetero.best.mfu * het.peak() / paper_peak(het)) / (
            self.homogeneous.best.mfu * hom.peak() / paper_peak(hom))


def predict_pair(pair: PublishedPair, gbps: float, global_batch: int, baseline_zero: int = 0
                 ) -> PairPrediction:
    """parex's best plans on the pair's testbed (HexiScale's FSDP between its pipelines) and
    baseline (ZeRO stage `baseline_zero`), both at `gbps` between machines."""
    return PairPrediction(pair, gbps, global_batch, baseline_zero,
                          _best(pair.testbed, pair.model, gbps, global_batch, HEXISCALE_ZERO),
                          _best(pair.baseline, pair.model, gbps, global_batch, baseline_zero))


__all__ = ["PAPER_PEAK_TFLOPS", "SEQ_LEN", "PairPrediction", "PublishedPair", "on_ethernet",
           "paper_peak", "predict_pair", "published_pairs"]
