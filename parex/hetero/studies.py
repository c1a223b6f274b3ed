"""What moves when a link gets slower: the search re-run as one group's network (or the link
between groups) slows down, one row per speed.

    network_study(model, cluster, B, T, group="rtx-4090", speeds=(100, 25, 10, 1))
    network_study(model, cluster, B, T, group=None, ...)      the link between groups

Each row: the speed, the best plan's MFU and step parts, its shape (pipelines × stages, the
tensor degree per group, layers per group, pipelines per group boundary), and the best even
split's MFU on the same cluster.
"""

from __future__ import annotations

import dataclasses

from ..cluster import HeteroCluster
from ..config import ModelConfig
from .baselines import best_even_split
from .predict import HeteroPrediction
from .search import search


def with_speed(cluster: HeteroCluster, group: str | None, gbps: float) -> HeteroCluster:
    """The cluster with one group's inter-node link (or, group=None, the inter-group link) at
    `gbps` Gb/s per node."""
    if group is None:
        return dataclasses.replace(cluster, inter_group_gbps=gbps)
    target = cluster.group(group)
    groups = tuple(dataclasses.replace(g, inter_node_gbps=gbps) if g.name == target.name else g
                   for g in cluster.groups)
    return dataclasses.replace(cluster, groups=groups)


def shape_row(pred: HeteroPrediction) -> dict:
    """What a plan looks like, in a few columns."""
    plan = pred.plan
    per_group: dict[str, dict] = {}
    for _, _, stage in plan.stages():
        row = per_group.setdefault(stage.group, {"tensor": set(), "layers": 0, "stages": 0})
        row["tensor"].add(stage.tensor)
        row["layers"] += stage.layers
        row["stages"] += 1
    P = len(plan.pipelines)
    return {"pipelines": P,
            "stages per pipeline": "/".join(str(n) for n in sorted({len(p.stages)
                                                                    for p in plan.pipelines})),
            "batch shares": "/".join(str(n) for n in sorted({p.batch for p in plan.pipelines})),
            "remat": pred.setting.train.remat,
            **{f"{g} t": "/".join(map(str, sorted(v["tensor"]))) for g, v in per_group.items()},
            **{f"{g} layers": round(v["layers"] / P, 1) for g, v in per_group.items()}}


def network_study(model: ModelConfig, cluster: HeteroCluster, global_batch: int,
                  seq_len: int | None = None, group: str | None = None,
                  speeds=(100, 25, 10, 2.5), **options):
    """A DataFrame, one row per speed (module docstring)."""
    import pandas as pd

    rows = []
    for gbps in speeds:
        slowed = with_speed(cluster, group, gbps)
        best = search(model, slowed, global_batch, seq_len, top=1, **options).best
        even = best_even_split(model, slowed, global_batch, seq_len)
        rows.append({"link": group or "between groups", "gbps": gbps, "mfu": best.mfu,
                     "even split mfu": even.mfu if even else float("nan"),
                     **{f"{k} s": v for k, v in best.step_time_s.items()},
                     **shape_row(best), "plan": str(best.plan)})
    return pd.DataFrame(rows)


__all__ = ["network_study", "shape_row", "with_speed"]
