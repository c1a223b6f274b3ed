"""DiLoCoX's headline predicted: a 107B model trained by two clusters joined by a 1 Gb/s link,
against vanilla AllReduce data parallelism over the same link (Qi et al. 2025, "DiLoCoX: A
Low-Communication Large-Scale Training Framework for Decentralized Cluster", arXiv:2506.21263).

What the paper publishes and parex reads (abstract; Figure 1 and its caption):
    model     107B parameters (parex: the Llama-shaped 107B of parex.lowcomm.scale_models)
    link      1 Gb/s between the decentralised clusters
    grouping  2 clusters; inside each, pipeline parallelism PP = 8 and data parallelism DP = 2
    method    an inner optimizer per cluster and a distributed outer one (dual optimizer), the
              outer exchange overlapped with the next H local steps (one-step delay), the
              pseudo-gradients compressed (quantisation and low rank, adaptively)
    headline  357x the speed of vanilla AllReduce, negligible loss in convergence

Both sides do the same work per step (the headline is a ratio of throughputs), so per step of
one cluster, with R = 2 clusters, W the link's bandwidth and α its latency:

    t_c        one cluster's step: PP = 8 × DP = 2, 1F1B (parex.predict)
    AllReduce  t_c + t_AR,   t_AR = 2(R−1)/R · |θ|·b_g / W + 2(R−1)·α       every step
    DiLoCoX    t_c + max(0, t_X − H·t_c) / H,   t_X the same for |θ|·4/c bytes (c: compression)
    speed-up   (t_c + t_AR) / (t_c + exposed)  =  1 + t_AR / t_c  once H·c ≥ 4|θ| / (W·t_c)

So the headline is set by how long one cluster computes per step against how long one gradient
takes through the link. What parex did not read from the paper is bracketed (UNREAD): the
tokens a cluster computes per step (sequences per DP rank, sequence length) and the bytes per
gradient element of the AllReduce baseline. The chips are taken as A100-class (parex's
`a100-80gb` profile): a faster chip shortens t_c and raises the speed-up in proportion. Adding
DP ranks to a cluster at a fixed per-rank batch leaves t_c, t_AR and the speed-up unchanged,
which is why Figure 1's 16-worker cluster stands for the paper's (whose 107B state does not fit
16 × 80 GB: parex predicts the time, not the memory, of that illustration).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..config import TrainConfig
from ..layout import Layout, example_partition
from ..predict.references import read_reference
from .predict import allreduce_seconds, scale_models, wan_link

# the paper's numbers, each with its place in the paper: data/reference/dilocox.csv
PUBLISHED = read_reference("dilocox").set_index("quantity")
CLUSTERS, STAGES, DATA = (int(PUBLISHED.value[k]) for k in ("clusters", "stages", "data"))
LINK_GBPS = float(PUBLISHED.value["link_gbps"])
HEADLINE = float(PUBLISHED.value["speedup"])  # DiLoCoX over vanilla AllReduce
CHIP = "a100-80gb"  # A100-class, an assumption (module docstring)
# not read from the paper: the bracket's axes
UNREAD = {"sequences per DP rank per step": (1, 2, 4, 8), "sequence length": (2048, 4096),
          "AllReduce gradient bytes per element": (2, 4)}


@dataclass(frozen=True)
class Case:
    """One setting of the unread quantities and what parex predicts for it."""

    sequences: int  # per DP rank per step, one per microbatch
    seq_len: int
    grad_bytes: int
    cluster_step_s: float  # t_c
    allreduce_s: float  # t_AR
    tokens_per_step: int  # all clusters'

    @property
    def speedup(self) -> float:
        """DiLoCoX (exchange hidden) over AllReduce, on the same tokens."""
        return (self.cluster_step_s + self.allreduce_s) / self.cluster_step_s

    def hiding_product(self, n_params: int, link_bandwidth: float) -> float:
        """The smallest H·c (inner steps × compression ratio) that hides DiLoCoX's f32 exchange
        behind H steps: t_X ≤ H·t_c."""
        return 4 * n_params / (link_bandwidth * self.cluster_step_s)


def cluster_layout(layers: int, microbatches: int) -> Layout:
    """One cluster: PP = 8 (layers split as evenly as they go) × DP = 2, 1F1B."""
    return Layout(stage=STAGES, data=DATA, microbatches=microbatches,
                  layers_per_stage=example_partition(layers, STAGES))


def cases(chip: str = CHIP) -> list[Case]:
    """Every setting of UNREAD, predicted (one parex.predict per batch and length)."""
    from ..predict import predict

    model, _ = scale_models()["107B"]
    link = wan_link(LINK_GBPS)
    out = []
    sequences, lengths, grad_bytes = UNREAD.values()
    for m, seq in itertools.product(sequences, lengths):
        train = TrainConfig(global_batch=DATA * m, seq_len=seq, remat="full")
        step = predict(model.replace(seq_len=max(model.seq_len, seq)), train,
                       cluster_layout(model.layers, m), chip).step_time_s["total"]
        for b in grad_bytes:
            out.append(Case(m, seq, b, step,
                            allreduce_seconds(model.n_params * b, CLUSTERS, link),
                            CLUSTERS * DATA * m * seq))
    return out


def cases_frame(chip: str = CHIP):
    """`cases` as a DataFrame: per unread setting the cluster's step, the AllReduce, the
    speed-up, and the smallest H·c (inner steps × compression) that hides DiLoCoX's exchange."""
    import pandas as pd

    model, _ = scale_models()["107B"]
    link = wan_link(LINK_GBPS)
    return pd.DataFrame([{"sequences": c.sequences, "seq_len": c.seq_len,
                          "grad_bytes": c.grad_bytes, "tokens_per_step": c.tokens_per_step,
                          "cluster_step_s": c.cluster_step_s, "allreduce_s": c.allreduce_s,
                          "speedup": c.speedup,
                          "min_H_times_c": c.hiding_product(model.n_params, link.bandwidth)}
                         for c in cases(chip)])


__all__ = ["CHIP", "CLUSTERS", "Case", "HEADLINE", "LINK_GBPS", "PUBLISHED", "UNREAD", "cases",
           "cases_frame", "cluster_layout"]
