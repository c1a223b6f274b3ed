"""What a predicted step is made of, effect by effect (`parex predict --explain`).

The parts add up to the predicted step time:

    ideal compute       the step's hardware FLOPs at the chip's dense peak
    kernel efficiency   what the kernels lose beside that: the best matmul rate the chip reaches
                        (its MAMF), memory-bound kernels at HBM bandwidth, the optimizer, the
                        fitted step efficiency (predict.accelerator); on the emulated mesh the
                        calibrated rates, efficiency and page faults (predict.time)
    kernel shapes       the GEMMs' tile and wave quantization (predict.kernels)
    communication       the exposed collective seconds (predict.time's overlap model), of which
                        congestion: what the network's oversubscribed tiers add (the same step
                        with every tier at its NIC's rate), stalls: what the library's
                        measured small-chunk stalls add (predict.collectives; the same step
                        without them), and saturation: what the step waits for its busiest
                        network link, whose bytes the overlapped collectives share
                        (predict.overlap's links row); each overlap of the stack
                        (predict.overlap: chunked TP communication, bucketed gradient reduce
                        and parameter gather) with its collective's seconds, the remainder it
                        leaves exposed and the GEMMs' loss beside it
    stragglers          the slowest of the step's devices (predict.stragglers)
    bubble              the pipeline's fill and drain

Each effect is measured by predicting the step again without it (removed in the order listed
from the bottom up: stragglers, then shapes); `tiers` splits the collectives' bandwidth time
(before any overlap) by the network tier that carries it, with the latency apart; `launch`
names the job launch the network file's measured constants describe, where it states one.
"""

from __future__ import annotations

import dataclasses
import textwrap

from ..layout import MESH_AXES
from ..network import tiers_of
from ..setting import Setting, resolve
from . import collectives
from .alpha_beta import group_shape
from .shapes import Grid


def breakdown(model, train, layout, hardware, **predict_kwargs) -> dict:
    """{part: seconds} of the step (module docstring), `tiers` and the prediction itself, of
    what parex.predict gives for these inputs (`predict_kwargs`: its dtype, recipe, convention
    and expert_imbalance)."""
    return setting_breakdown(resolve(model, train, layout, hardware, **predict_kwargs))


def setting_breakdown(setting: Setting) -> dict:
    """breakdown of a resolved Setting (parex.setting)."""
    from .core import predict_setting

    model, train, layout, cluster = setting.model, setting.train, setting.layout, setting.cluster
    chip = cluster.chip

    def step(c) -> dict:
        # the chip already carries the cluster's network (cluster.chip): keep its own
        on = dataclasses.replace(cluster, chip=c, network=None)
        p = predict_setting(setting.replace(cluster=on))
        return p.step_time_s | {"p": p}

    full = step(chip)
    steady = step(dataclasses.replace(chip, speed_variation=0.0))
    plain = step(dataclasses.replace(chip, speed_variation=0.0, gemm={}))
    flat = step(dataclasses.replace(chip, speed_variation=0.0, network=_untapered(chip)))
    smooth = step(dataclasses.replace(chip, speed_variation=0.0, network=_unstalled(chip)))
    p = full["p"]
    ideal = p.hfu * full["total"]  # the hardware FLOPs at the device's peak, as its HFU counts
    #   it (on the emulated mesh a device's share of the cores: time.cpu_rate_scale)
    parts = {"ideal compute": ideal, "kernel efficiency": plain["compute"] - ideal,
             "kernel shapes": steady["compute"] - plain["compute"],
             "communication": steady["exposed_comm"],
             "congestion": steady["exposed_comm"] - flat["exposed_comm"],
             "stalls": steady["exposed_comm"] - smooth["exposed_comm"],
             "saturation": ((steady["p"].overlaps or {}).get("links") or {}).get("exposed", 0.0),
             "stragglers": full["total"] - steady["total"], "bubble": steady["bubble"],
             "total": full["total"]}
    return {"parts": parts, "tiers": tier_seconds(p, setting), "prediction": p,
            "overlaps": overlap_lines(setting, p), "launch": launch_line(chip.network)}


def launch_line(net) -> str:
    """The launch the network's measured constants describe (parex.network), or ""."""
    return f"network {net.name}, measured under this launch: {net.launch}" if (
        net is not None and net.launch) else ""


def overlap_lines(setting: Setting, p) -> list[str]:
    """What each of the stack's overlaps leaves exposed (predict.overlap), one line each: the
    collective's seconds, its exposed remainder and the GEMMs' loss beside it, and why."""
    from ..units import format_seconds
    from .core import program

    if setting.emulated or not p.overlaps:
        return []
    conv = program(setting)
    chunked = conv.overlaps_tp_comm or conv.async_tp
    how = {"tp-comm": ("async-tp: t chunks each way (PyTorch)" if conv.async_tp else
                       "gathers in t ring chunks, scatters in 4 pipelined splits (TE)")
           if chunked else "not overlapped",
           "grad-reduce": ("bucketed behind the backward" if conv.overlaps_grad_reduce
                           else "after the backward: not overlapped"),
           "param-gather": ("bucketed behind the next forward" if conv.overlaps_param_gather
                            else "after the update: not overlapped"),
           "moe-a2a": ("beside another microbatch's compute, warm-up and cool-down alone"
                       if conv.overlaps_moe_a2a else "not overlapped"),
           "links": "the busiest network link: every collective's bytes take turns on it"}
    name = (f"stack {setting.stack}" if setting.stack else "overlaps")
    lines = [f"  {name}: collective -> exposed + GEMMs slowed beside it (predict.overlap)"]
    for key, part in p.overlaps.items():
        lines.append(f"    {key:14s} {format_seconds(part['comm']):>10s} -> "
                     f"{format_seconds(part['exposed']):>10s} + "
                     f"{format_seconds(part['contention']):>10s}  {how[key]}")
    layout = setting.layout
    if chunked and layout.tensor > 1 and not layout.sp:
        lines.append("    tp-comm needs sequence parallelism (Megatron-Core refuses "
                     "--tp-comm-overlap without --sequence-parallel): add sp=on")
    return lines


def _untapered(chip):
    """The chip's network with every tier at its NIC's rate (no oversubscription)."""
    net = chip.network
    if net is None:
        return None
    tiers = tuple(dataclasses.replace(t, oversubscription=1.0) for t in net.tiers)
    return dataclasses.replace(net, tiers=tiers)


def _unstalled(chip):
    """The chip's network without the library's measured stalls."""
    net = chip.network
    return None if net is None else dataclasses.replace(net, stall=(), stall_chunk=0.0)


def tier_seconds(p, setting: Setting) -> dict:
    """{tier name: seconds} the step's collectives keep each tier's links busy (before
    overlap; collectives.tier_loads, as their time and the links row count them: a tier's
    links carry every byte crossing it or a higher tier), and "latency": the rest of their
    time."""
    chip, layout = setting.cluster.chip, setting.layout
    if setting.emulated or layout.tensor3d:
        return {}
    grid = Grid.from_layouts([layout], setting.train, setting.model)
    tiers = tiers_of(chip, chip.network)
    out = {t.name: 0.0 for t in tiers} | {"latency": 0.0}
    axes_of = {a.value: a for a in MESH_AXES}
    for c in p.collectives:
        axes = tuple(axes_of[a] for a in c["axes"] if a in axes_of)
        g, stride = group_shape(grid, axes)
        at = collectives.placement(g, stride, tiers)
        moved = [c["count"] * c["bytes_per_op"] * float(v[0])
                 for v in collectives.volumes(c["kind"], at, c.get("routing"))]
        busy = collectives.tier_loads(moved, [t.rate for t in tiers])
        for t, b in zip(tiers, busy):
            out[t.name] += b
        out["latency"] += max(c["seconds"] - max(busy), 0.0)
    return out


def explain_text(result: dict) -> str:
    """The breakdown as the lines `parex predict --explain` prints."""
    from ..units import format_seconds

    parts, total = result["parts"], result["parts"]["total"]
    rows = [("ideal compute", "the step's FLOPs at dense peak"),
            ("kernel efficiency", "best matmul rate, memory-bound kernels, step efficiency, "
                                  "page faults (emulated)"),
            ("kernel shapes", "tile and wave quantization of the GEMMs"),
            ("communication", "exposed collectives"),
            ("congestion", "  of which: oversubscribed network tiers"),
            ("stalls", "  of which: the library's small-chunk stalls (measured)"),
            ("saturation", "  of which: waiting for the busiest network link"),
            ("stragglers", "the slowest of the step's devices"),
            ("bubble", "pipeline fill and drain")]
    lines = ["step breakdown (parex.predict.explain)"]
    for key, what in rows:
        lines.append(f"  {key:18s} {format_seconds(parts[key]):>10s}  "
                     f"{parts[key] / total:6.1%}  {what}")
    lines.append(f"  {'total':18s} {format_seconds(total):>10s}")
    lines += result.get("overlaps", [])
    if result["tiers"]:
        busy = ", ".join(f"{name} {format_seconds(s)}" for name, s in result["tiers"].items()
                         if s > 0)
        lines.append(f"  collectives by tier (busy time before overlap): {busy or 'none'}")
    lines += textwrap.wrap(result.get("launch", ""), 100, initial_indent="  ",
                           subsequent_indent="    ")
    return "\n".join(lines)


__all__ = ["breakdown", "explain_text", "launch_line", "setting_breakdown", "tier_seconds"]
