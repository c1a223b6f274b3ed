"""A heterogeneous plan as a value: pipelines, each with its share of the global batch and its
microbatch count, each made of stages with their own group, devices, tensor degree and layers.

    plan = HeteroPlan.parse("batch=24 micro=6: a100-pcie-80gb[0:2] t2 L12 > rtx-4090[0:4] t4 L20;"
                            " batch=8 micro=2: rtx-3090[0:8] t8 L32; zero=1")
    str(plan)             the same string, canonical
    plan.to_json()        {"schedule": "1f1b", "zero": 1, "pipelines": [{"batch", "microbatches",
                           "stages": [{"group", "devices": [first, end), "tensor", "layers"}]}]}

A stage is one tensor-parallel group on `tensor` consecutive devices of its group, `first` ..
`first + tensor − 1` (written `group[first:end]`, end exclusive), holding `layers` consecutive
transformer blocks; the first stage of a pipeline also holds the embedding, the last the final norm
and the head. Pipelines are data-parallel replicas: each runs its own rows of the batch and the
gradients of every layer are summed over them; `zero` is the ZeRO stage of that data
parallelism (a trailing "zero=N" piece of the string, none for 0: parex.hetero.sharding).
HexiScale (arXiv:2409.01143) calls this asymmetric parallelism; FlashFlex, its code, spells
the same value as hetero_configs (tensor degrees), layer_partitions, global_bsz_size, chunks
and --fsdp.

Whether a plan can run on a cluster and model is checked by parex.hetero.validate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..layout import LayoutError

SCHEDULE = "1f1b"  # every pipeline runs PipeDream-Flush (parex.parallel.schedules)


class PlanError(LayoutError):
    """An impossible heterogeneous plan; the message names the problem and the fix."""


@dataclass(frozen=True)
class Stage:
    """`layers` blocks on devices first .. first + tensor − 1 of group `group`."""

    group: str  # a group of the cluster (parex.cluster.Group.name)
    first: int  # first device, counted within the group
    tensor: int  # tensor-parallel degree = devices of this stage
    layers: int  # consecutive transformer blocks

    @property
    def devices(self) -> range:
        return range(self.first, self.first + self.tensor)

    def __str__(self) -> str:
        end = self.first + self.tensor
        return f"{self.group}[{self.first}:{end}] t{self.tensor} L{self.layers}"


@dataclass(frozen=True)
class Pipeline:
    """One data-parallel replica: `batch` sequences per step in `microbatches` microbatches."""

    batch: int
    microbatches: int
    stages: tuple[Stage, ...]

    @property
    def microbatch(self) -> int:
        """Sequences per microbatch."""
        return self.batch // self.microbatches

    @property
    def layers(self) -> int:
        return sum(s.layers for s in self.stages)

    @property
    def n_devices(self) -> int:
        return sum(s.tensor for s in self.stages)

    def layer_ranges(self) -> list[range]:
        """The blocks each stage holds, in order."""
        out, start = [], 0
        for s in self.stages:
            out.append(range(start, start + s.layers))
            start += s.layers
        return out

    def __str__(self) -> str:
        return (f"batch={self.batch} micro={self.microbatches}: "
                + " > ".join(str(s) for s in self.stages))


@dataclass(frozen=True)
class HeteroPlan:
    """Pipelines side by side (data parallel), each a chain of stages (pipeline parallel), each
    stage tensor parallel over its own devices."""

    pipelines: tuple[Pipeline, ...]
    schedule: str = SCHEDULE
    zero: int = 0  # ZeRO stage of the data parallelism between pipelines (hetero.sharding)

    @property
    def global_batch(self) -> int:
        return sum(p.batch for p in self.pipelines)

    @property
    def n_devices(self) -> int:
        return sum(p.n_devices for p in self.pipelines)

    def stages(self):
        """(pipeline index, stage index, Stage) for every stage."""
        for i, pipe in enumerate(self.pipelines):
            for j, stage in enumerate(pipe.stages):
                yield i, j, stage

    def __str__(self) -> str:
        return "; ".join([str(p) for p in self.pipelines]
                         + ([f"zero={self.zero}"] if self.zero else []))

    # --- text -------------------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str) -> "HeteroPlan":
        """The string form (module docstring); a malformed piece is quoted with the form."""
        pipes = [p.strip() for p in text.split(";") if p.strip()]
        zero = 0
        if pipes and (match := _ZERO.match(pipes[-1])):
            zero, pipes = int(match[1]), pipes[:-1]
        if not pipes:
            raise PlanError("an empty plan: write at least one pipeline, e.g. "
                            "'batch=8 micro=4: a100-80gb[0:8] t8 L32'")
        return cls(tuple(_parse_pipeline(p) for p in pipes), zero=zero)

    # --- JSON -------------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {"schedule": self.schedule, "zero": self.zero, "pipelines": [
            {"batch": p.batch, "microbatches": p.microbatches,
             "stages": [{"group": s.group, "devices": [s.first, s.first + s.tensor],
                         "tensor": s.tensor, "layers": s.layers} for s in p.stages]}
            for p in self.pipelines]}

    @classmethod
    def from_json(cls, data: dict) -> "HeteroPlan":
        pipes = []
        for p in data["pipelines"]:
            stages = []
            for s in p["stages"]:
                first, end = s["devices"]
                tensor = int(s.get("tensor", end - first))
                _check_span(f"{s['group']}[{first}:{end}]", int(first), int(end), tensor)
                stages.append(Stage(s["group"], int(first), tensor, int(s["layers"])))
            pipes.append(Pipeline(int(p["batch"]), int(p["microbatches"]), tuple(stages)))
        return cls(tuple(pipes), data.get("schedule", SCHEDULE), int(data.get("zero", 0)))


_ZERO = re.compile(r"zero=(\d+)$")
_PIPELINE = re.compile(r"batch=(\d+)\s+micro=(\d+)\s*:(.*)$", re.S)
_STAGE = re.compile(r"([A-Za-z0-9_.\-]+)\[(\d+):(\d+)\](?:\s+t(\d+))?\s+L(\d+)$")
FORM = "'batch=B micro=M: group[first:end] tT LN > group[first:end] tT LN'"


def _parse_pipeline(text: str) -> Pipeline:
    match = _PIPELINE.match(text)
    if not match:
        raise PlanError(f"cannot read pipeline {text!r}: write {FORM}")
    batch, micro, body = int(match[1]), int(match[2]), match[3]
    stages = []
    for piece in (s.strip() for s in body.split(">")):
        m = _STAGE.match(piece)
        if not m:
            raise PlanError(f"cannot read stage {piece!r}: write group[first:end] tT LN, e.g. "
                            f"rtx-4090[0:4] t4 L10 (devices first..end-1 of the group)")
        first, end = int(m[2]), int(m[3])
        tensor = int(m[4]) if m[4] else end - first
        _check_span(piece, first, end, tensor)
        stages.append(Stage(m[1], first, tensor, int(m[5])))
    return Pipeline(batch, micro, tuple(stages))


def _check_span(text: str, first: int, end: int, tensor: int) -> None:
    if end <= first:
        raise PlanError(f"stage {text!r}: the device range [{first}:{end}] is empty; write "
                        f"[first:end] with end > first (end exclusive)")
    if tensor != end - first:
        raise PlanError(f"stage {text!r}: t{tensor} but [{first}:{end}] is {end - first} devices;"
                        f" a stage is one tensor-parallel group, so use t{end - first} or "
                        f"[{first}:{first + tensor}]")


__all__ = ["FORM", "HeteroPlan", "Pipeline", "PlanError", "SCHEDULE", "Stage"]
