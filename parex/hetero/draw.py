"""Drawing a heterogeneous plan: pipelines × stages with their chips, layers and tensor degrees.

    print(plan_text(plan, cluster))     one line per pipeline, one box per stage
    plan_chart(plan, cluster)           altair: a bar per stage over the layers it holds, one
                                        row per pipeline, coloured by chip, labelled tT LN
"""

from __future__ import annotations

from ..cluster import HeteroCluster
from .plan import HeteroPlan


def _short(name: str) -> str:
    return name.replace("a100-pcie-80gb", "a100-pcie").replace("-80gb", "")


def plan_text(plan: HeteroPlan, cluster: HeteroCluster | None = None) -> str:
    """The plan as boxes: `batch B = m × b │ chip[devices] tT LN │ …`; with the cluster, each
    box also names its node."""
    lines = []
    width = max(len(f"{p.batch} = {p.microbatches} × {p.microbatch}") for p in plan.pipelines)
    for i, pipe in enumerate(plan.pipelines):
        boxes = []
        for stage in pipe.stages:
            where = ""
            if cluster is not None:
                group = cluster.group(stage.group)
                nodes = sorted({group.node_of(d) for d in stage.devices})
                where = f" n{'-'.join(map(str, nodes))}"
            boxes.append(f"{_short(stage.group)}[{stage.first}:{stage.first + stage.tensor}]"
                         f"{where} t{stage.tensor} L{stage.layers}")
        share = f"{pipe.batch} = {pipe.microbatches} × {pipe.microbatch}".rjust(width)
        lines.append(f"pipeline {i + 1:>2}  batch {share}  │ " + " │ ".join(boxes) + " │")
    return "\n".join(lines)


def plan_frame(plan: HeteroPlan):
    """One row per stage: pipeline, stage, group, first and last layer, tensor degree, label."""
    import pandas as pd

    rows = []
    for i, pipe in enumerate(plan.pipelines):
        for j, (stage, layers) in enumerate(zip(pipe.stages, pipe.layer_ranges())):
            rows.append({"pipeline": f"{i + 1}: batch {pipe.batch} ({pipe.microbatches} × "
                                     f"{pipe.microbatch})", "stage": j + 1,
                         "chip": stage.group, "start": layers.start, "end": layers.stop,
                         "tensor": stage.tensor, "layers": stage.layers,
                         "label": f"t{stage.tensor} L{stage.layers}",
                         "devices": f"{stage.group}[{stage.first}:{stage.first + stage.tensor}]"})
    return pd.DataFrame(rows)


def plan_chart(plan: HeteroPlan, width: int = 640, height_per_pipeline: int = 26):
    """Pipelines on y, layers on x: each stage a bar over the blocks it holds, coloured by its
    group's chip, labelled with its tensor degree and layer count."""
    import altair as alt

    frame = plan_frame(plan)
    order = list(dict.fromkeys(frame["pipeline"]))
    base = alt.Chart(frame).encode(
        y=alt.Y("pipeline:N", sort=order, title="pipeline (batch share)"),
        x=alt.X("start:Q", title="transformer blocks",
                scale=alt.Scale(domain=[0, int(frame["end"].max())], nice=False)),
        tooltip=["pipeline", "stage", "devices", "tensor", "layers", "start", "end"])
    bars = base.mark_bar(stroke="white", strokeWidth=1).encode(
        x2="end:Q", color=alt.Color("chip:N", title="group"))
    text = base.transform_calculate(middle="(datum.start + datum.end) / 2").mark_text(
        color="white", fontSize=10).encode(x="middle:Q", text="label:N")
    return (bars + text).properties(width=width,
                                    height=height_per_pipeline * len(plan.pipelines),
                                    title="pipelines × stages: chip, tensor degree, layers")


__all__ = ["plan_chart", "plan_frame", "plan_text"]
