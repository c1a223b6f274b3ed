"""A heterogeneous search as text (the `parex plan --cluster` table) and as JSON (`--json`), in
the homogeneous planner's shape: `layouts_considered`, `layouts_per_s`, `top` with `mfu`,
`plan`, `step_time_s`, ... plus the two yardsticks, `even_split` and `homogeneous`."""

from __future__ import annotations

from ..measure.report import Drawing, TextReport, table
from ..units import format_bytes, format_flops, format_seconds
from .baselines import Comparison
from .draw import plan_text
from .predict import HeteroPrediction


def _ms(seconds: float) -> str:
    return format_seconds(seconds)


def _shape(pred: HeteroPrediction) -> str:
    """pipelines × stages, and the tensor degrees used."""
    plan = pred.plan
    stages = sorted({len(p.stages) for p in plan.pipelines})
    degrees = sorted({s.tensor for _, _, s in plan.stages()})
    return (f"{len(plan.pipelines)} × {'/'.join(map(str, stages))} stages, t "
            f"{'/'.join(map(str, degrees))}")


def comparison_json(c: Comparison) -> dict:
    """The JSON of `parex plan --cluster ... --json`."""
    s, cluster = c.search, c.search.cluster
    out = {
        "model": s.model.name, "cluster": cluster.name,
        "hardware": [g.chip.name for g in cluster.groups],
        "groups": [{"name": g.name, "chip": g.chip.name, "nodes": g.nodes,
                    "devices": g.n_devices, "inter_node_gbps": g.inter_node_gbps}
                   for g in cluster.groups],
        "inter_group_gbps": cluster.inter_group_gbps,
        "nodes": sum(g.nodes for g in cluster.groups), "n_devices": cluster.n_devices,
        "peak_flops": cluster.peak(), "global_batch": s.global_batch, "seq_len": s.seq_len,
        "objective": "time", "candidates": s.structures,
        "layouts_considered": s.considered, "layouts_fitting": s.fitting,
        "layouts_per_s": s.layouts_per_s, "seconds": s.seconds,
        "top": [{"rank": r + 1} | p.entry() for r, p in enumerate(s.top)],
        "even_split": None, "homogeneous": None,
    }
    if c.even is not None:
        out["even_split"] = c.even.entry() | {"speedup_of_best": c.versus_even}
    if c.homogeneous is not None:
        h = c.homogeneous.best
        out["homogeneous"] = h.entry() | {
            "cluster": c.reference.name, "n_devices": c.reference.n_devices,
            "chip": c.reference.groups[0].chip.name, "peak_flops": c.reference.peak(),
            "mfu_ratio_of_best": c.versus_homogeneous}
    return out


HEADER = [" #  shape", "remat", "b", "step", "compute", "exposed comm", "bubble", "tightest",
          "headroom", "MFU", "bottleneck"]


def _row(rank, pred: HeteroPrediction) -> list:
    e = pred.entry()
    st = e["step_time_s"]
    return [f"{rank:>2}  {_shape(pred)}", e["remat"], e["microbatch"], _ms(st["total"]),
            _ms(st["compute"]), _ms(st["exposed_comm"]), _ms(st["bubble"]),
            f"{format_bytes(e['memory_bytes_per_device']['total'])} {pred.tightest().chip}",
            format_bytes(e["memory_headroom_bytes"]), f"{e['mfu']:.1%}", e["bottleneck"]]


def comparison_report(c: Comparison) -> TextReport:
    """The header, the ranked plans, the best drawn, and the two yardsticks."""
    s, cluster = c.search, c.search.cluster
    groups = " + ".join(f"{g.n_devices} × {g.chip.name}" for g in cluster.groups)
    link = (f", {cluster.inter_group_gbps:g} Gb/s between groups"
            if cluster.inter_group_gbps else "")
    peak = format_flops(cluster.peak(), per_second=True)
    head = (f"parex plan · {s.model.name} · {cluster.name}: {groups}{link} · global batch "
            f"{s.global_batch} × {s.seq_len} tokens · peak {peak}")
    rows = [_row(r + 1, p) for r, p in enumerate(s.top)]
    best = s.best
    drawing = Drawing(plan_text(best.plan, cluster))
    lines = ["", f"string: {best.plan}", ""]
    if c.even is not None:
        lines.append(f"vs the best even split ({_shape(c.even)}, remat {c.even.setting.train.remat}): "
                     f"MFU {c.even.mfu:.1%} → {best.mfu:.1%}, {c.versus_even:.2f}× faster")
    else:
        lines.append("vs the best even split: none fits (every even split overflows a device)")
    if c.homogeneous is not None:
        h = c.homogeneous.best
        lines.append(f"vs a homogeneous cluster of the same peak ({c.reference.name}, "
                     f"{format_flops(c.reference.peak(), per_second=True)}): MFU {h.mfu:.1%} "
                     f"there, "
                     f"{best.mfu:.1%} here ({c.versus_homogeneous:.1%} of it)")
    lines += ["", f"{s.considered:,} plans considered ({s.structures:,} shapes × remat × "
                  f"microbatch size), {s.fitting:,} fit; searched in {s.seconds:.2f} s = "
                  f"{s.layouts_per_s:,.0f} plans/s. shape = pipelines × stages per pipeline, "
                  f"tensor degrees used; tightest = the device fullest against its own memory."]
    return TextReport(head, "", table(rows, HEADER), "", "best plan:", drawing,
                      "\n".join(lines))


__all__ = ["comparison_json", "comparison_report"]
