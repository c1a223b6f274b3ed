"""Predicting a heterogeneous plan: each stage on its own chip, the pipelines side by side.

    per stage     compute and tensor-parallel all-reduces per microbatch on its own chip and
                  links (costs.unit_costs: the homogeneous predictor's formulas); t_F and t_B
                  split by the forward-equivalents per block (forward 1, backward 2, recompute)
    per boundary  the activation forward and its gradient back, over the slowest link between
                  the two stages' devices (links.hop_seconds)
    ZeRO          the plan's ZeRO stage between pipelines (sharding): its state's shard per
                  device, and at stage 3 each block's gathers and reduce-scatter per microbatch
                  in its stage's t_F and t_B (dp.shard_passes)
    per pipeline  the 1F1B table timed with those per-stage costs (timing.pipeline_times), and
                  no faster than its slowest link carrying one send per microbatch
    across        the gradients of every block summed over the pipelines that hold it: a
                  hierarchical ring over the participants' nodes, groups and the links between
                  (dp.reduce_finish); each stage reduces once its own last backward is done
    step          the last device to finish its backward, its gradient reduction and its
                  optimizer update (the fused Adam's memory traffic, as predict.accelerator)
    memory        per device against its own chip's memory: state of its blocks (and the
                  embedding / head), activations of the microbatches the table keeps in flight,
                  the working set of the block being differentiated, the logits on the last
    MFU           model FLOPs of the step / (step time × the cluster's total peak FLOP/s)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..cluster import HeteroCluster
from ..model.transformer import flops_per_token
from ..predict.memory import recipe
from ..predict.stragglers import slowdown
from ..setting import Setting
from .costs import unit_costs
from .dp import reduce_finish, shard_passes
from .links import hop_seconds, tensor_chip
from .plan import HeteroPlan, Stage
from .sharding import shards, state_bytes_per_element, working_bytes_per_element
from .timing import peak_in_flight, pipeline_times
from .validate import check_plan

MEMORY_PARTS = ("params", "grads", "optimizer", "activations", "temp", "total")


def device_cap(hbm_bytes: float, memory_fraction: float = 1.0,
               memory_cap: float | None = None) -> float:
    """Bytes a device may use: a fraction of its own memory, and at most `memory_cap`."""
    cap = hbm_bytes * memory_fraction
    return cap if memory_cap is None else min(cap, memory_cap)


@dataclass
class StageCost:
    """One stage's predicted numbers (seconds per microbatch, bytes per device)."""

    pipeline: int
    index: int
    stage: Stage
    chip: str
    compute_s: float  # per microbatch: its blocks (and head) forward + backward
    tp_s: float  # per microbatch: its tensor-parallel all-reduces
    t_f: float
    t_b: float
    hop_s: float  # per send to the next stage (0 on the last)
    opt_s: float  # optimizer update
    memory: dict  # MEMORY_PARTS, bytes per device (the homogeneous predictor's names)
    cap: float  # bytes per device it may use
    grad_bytes: dict = field(default_factory=dict)  # per device: "block", "first", "last"
    elements: dict = field(default_factory=dict)  # parameters per device of the same
    shard_s: float = 0.0  # per microbatch: its ZeRO-3 gathers and reduce-scatters
    compute_end: float = 0.0  # its last backward ends (s after the step starts)
    reduce_end: float = 0.0  # its gradient reduction ends

    @property
    def fits(self) -> bool:
        return self.memory["total"] <= self.cap


@dataclass
class HeteroPrediction:
    """A plan's predicted step, per stage and pipeline, in Prediction's units."""

    plan: HeteroPlan
    cluster: str
    setting: Setting
    stages: list[StageCost]
    pipeline_s: list[float]  # each pipeline's forward/backward makespan
    step_time_s: dict  # total, compute, exposed_comm, bubble
    mfu: float
    tokens_per_s: float
    peak_flops: float

    @property
    def fits(self) -> bool:
        return all(s.fits for s in self.stages)

    def tightest(self) -> StageCost:
        """The stage whose devices are fullest relative to their memory."""
        return max(self.stages, key=lambda s: s.memory["total"] / s.cap)

    def bottleneck(self) -> str:
        tight = self.tightest()
        if tight.cap - tight.memory["total"] < 0.1 * tight.cap:
            return "memory"
        parts = {k: self.step_time_s[k] for k in ("compute", "exposed_comm", "bubble")}
        return max(parts, key=parts.get)

    def entry(self) -> dict:
        """The JSON of one ranked plan, in the homogeneous planner's shape."""
        tight = self.tightest()
        micro = sorted({p.microbatch for p in self.plan.pipelines})
        return {"layout": str(self.plan), "plan": self.plan.to_json(),
                "remat": self.setting.train.remat,
                "microbatch": micro[0] if len(micro) == 1 else micro,
                "step_time_s": dict(self.step_time_s),
                "memory_bytes_per_device": dict(tight.memory),
                "memory_headroom_bytes": tight.cap - tight.memory["total"],
                "tightest_device": f"{tight.stage.group} (pipeline {tight.pipeline + 1} "
                                   f"stage {tight.index + 1})",
                "mfu": self.mfu, "tokens_per_s": self.tokens_per_s, "fits": self.fits,
                "bottleneck": self.bottleneck(),
                "pipelines": [{"batch": p.batch, "microbatches": p.microbatches,
                               "makespan_s": s} for p, s in zip(self.plan.pipelines,
                                                                 self.pipeline_s)]}


def stage_costs(plan: HeteroPlan, cluster: HeteroCluster, setting: Setting,
                memory_fraction: float = 1.0, memory_cap: float | None = None
                ) -> list[list[StageCost]]:
    """Every stage's per-microbatch costs, memory and hop, pipeline by pipeline; compute at the
    pace of the slowest of the plan's devices (parex.predict.stragglers)."""
    out, stretch = [], float(slowdown(plan.n_devices))
    for i, pipe in enumerate(plan.pipelines):
        flight = peak_in_flight(len(pipe.stages), pipe.microbatches)
        out.append([_stage_cost(cluster, setting, pipe, i, j, flight[j], memory_fraction,
                                memory_cap, stretch, plan.zero, len(plan.pipelines))
                    for j in range(len(pipe.stages))])
    return out


def _stage_cost(cluster, setting: Setting, pipe, i: int, j: int, flight: float,
                memory_fraction: float, memory_cap, stretch: float = 1.0, zero: int = 0,
                pipelines: int = 1) -> StageCost:
    stage = pipe.stages[j]
    chip = tensor_chip(cluster, stage)
    c = {k: float(v[0]) for k, v in unit_costs(setting, chip, [stage.tensor],
                                                pipe.microbatch).items()}
    first, last = j == 0, j == len(pipe.stages) - 1
    compute = (stage.layers * c["block_s"] + last * c["head_s"]) * stretch
    tp = stage.layers * c["tp_block_s"] + first * c["tp_first_s"] + last * c["tp_last_s"]
    t_f = (compute + tp) / c["passes"]
    elements = (stage.layers * c["block_elements"] + first * c["first_elements"]
                + last * c["last_elements"])
    rec = recipe(setting.recipe)
    held = {kind: per * elements
            for kind, per in state_bytes_per_element(rec, zero, pipelines).items()}
    held.update({"activations": stage.layers * c["block_act_bytes"] * float(flight),
                 "temp": (c["working_bytes"] + last * c["logits_bytes"]
                          + working_bytes_per_element(rec, zero) * c["block_elements"])})
    held["total"] = sum(held.values())
    hop = 0.0 if last else hop_seconds(cluster, stage, pipe.stages[j + 1], c["send_bytes"])
    kinds = {kind: c[f"{kind}_elements"] for kind in ("block", "first", "last")}
    grads = {kind: rec.grad_bytes * n for kind, n in kinds.items()}
    updated = elements / shards(zero, "opt", pipelines)  # the optimizer updates its shard
    return StageCost(i, j, stage, chip.name, compute, tp, t_f, compute + tp - t_f, hop,
                     c["opt_s_per_element"] * updated * stretch, held,
                     device_cap(chip.hbm_bytes, memory_fraction, memory_cap), grads, kinds)


def _time_pipeline(row: list[StageCost], m: int) -> float:
    """Time one pipeline's table; set each stage's compute_end; return its makespan."""
    busy = np.array([s.t_f + s.t_b for s in row])
    hops = np.array([s.hop_s for s in row[:-1]])
    timed = pipeline_times([s.t_f for s in row], [s.t_b for s in row], hops, m)
    # the slowest link carries one send per microbatch each way
    link_bound = m * (hops.max() if len(hops) else 0.0) + busy.sum()
    shift = max(0.0, link_bound - timed["makespan"])
    for s, end in zip(row, timed["last_backward"]):
        s.compute_end = float(end) + shift
    return timed["makespan"] + shift


def predict_plan(plan: HeteroPlan, cluster: HeteroCluster, setting: Setting,
                 global_batch: int | None = None, memory_fraction: float = 1.0,
                 memory_cap: float | None = None, check: bool = True) -> HeteroPrediction:
    """The predicted step of `plan` on `cluster` (checked first unless check=False); each
    device may use memory_fraction of its memory, and at most memory_cap bytes."""
    if check:
        check_plan(plan, cluster, setting.model, global_batch)
    rows = stage_costs(plan, cluster, setting, memory_fraction, memory_cap)
    shard_passes(plan, cluster, rows, recipe(setting.recipe))
    makespans = [_time_pipeline(row, pipe.microbatches) for row, pipe in zip(rows, plan.pipelines)]
    stages = [s for row in rows for s in row]
    reduce_finish(plan, cluster, rows)
    ends = [max(s.compute_end, s.reduce_end) + s.opt_s for s in stages]
    total = max(ends)
    slow = int(np.argmax(makespans))  # the pipeline that sets the pace
    busiest = max(rows[slow], key=lambda s: s.t_f + s.t_b)
    m = plan.pipelines[slow].microbatches
    compute = m * busiest.compute_s + max(s.opt_s for s in stages)
    comm = m * (busiest.tp_s + busiest.shard_s) + max(0.0, total - makespans[slow]
                                                      - max(s.opt_s for s in stages))
    bubble = max(0.0, total - compute - comm)
    T = setting.seq_len
    model_flops = flops_per_token(setting.model, T) * plan.global_batch * T
    peak = cluster.peak(setting.model.dtype)
    return HeteroPrediction(plan, cluster.name, setting, stages, makespans,
                            {"total": total, "compute": compute, "exposed_comm": comm,
                             "bubble": bubble},
                            model_flops / (total * peak), plan.global_batch * T / total, peak)


__all__ = ["HeteroPrediction", "MEMORY_PARTS", "StageCost", "device_cap", "predict_plan",
           "stage_costs"]
