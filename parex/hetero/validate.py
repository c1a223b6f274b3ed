"""Whether a heterogeneous plan can run: every check before anything is predicted or compiled,
each error naming the problem and the fix (PlanError, a LayoutError)."""

from __future__ import annotations

from ..cluster import HeteroCluster
from ..config import ModelConfig
from .plan import HeteroPlan, PlanError
from .sharding import check_zero


def check_plan(plan: HeteroPlan, cluster: HeteroCluster, model: ModelConfig,
               global_batch: int | None = None) -> None:
    """Raise PlanError when `plan` cannot run `model` on `cluster` (with `global_batch`
    sequences per step, when given)."""
    if plan.schedule != "1f1b":
        raise PlanError(f"schedule {plan.schedule!r}: heterogeneous pipelines run 1f1b only")
    if not plan.pipelines:
        raise PlanError("a plan needs at least one pipeline")
    check_zero(plan.zero)
    for i, pipe in enumerate(plan.pipelines):
        _check_pipeline(i, pipe, model)
    if global_batch is not None and plan.global_batch != global_batch:
        shares = " + ".join(str(p.batch) for p in plan.pipelines)
        raise PlanError(f"the pipelines' batch shares add up to {shares} = {plan.global_batch} "
                        f"sequences but the global batch is {global_batch}: change the shares "
                        f"by {global_batch - plan.global_batch:+d} in all (each a multiple of "
                        f"its microbatch count)")
    _check_placement(plan, cluster)
    for i, j, stage in plan.stages():
        _check_tensor(f"pipeline {i + 1} stage {j + 1}", stage.tensor, model)


def _check_pipeline(i: int, pipe, model: ModelConfig) -> None:
    name = f"pipeline {i + 1}"
    if not pipe.stages:
        raise PlanError(f"{name} has no stages; give it at least one")
    if pipe.batch < 1 or pipe.microbatches < 1:
        raise PlanError(f"{name}: batch={pipe.batch} micro={pipe.microbatches}; both must be "
                        f"whole numbers >= 1")
    if pipe.batch % pipe.microbatches:
        options = [m for m in range(1, pipe.batch + 1) if pipe.batch % m == 0]
        raise PlanError(f"{name}: batch={pipe.batch} does not split into "
                        f"micro={pipe.microbatches} equal microbatches; use micro from "
                        f"{', '.join(map(str, options))}")
    for j, stage in enumerate(pipe.stages):
        if stage.layers < 1:
            raise PlanError(f"{name} stage {j + 1} ({stage}) holds no layers; give every stage "
                            f"at least one, or drop the stage")
    if pipe.layers != model.layers:
        counts = " + ".join(str(s.layers) for s in pipe.stages)
        diff = model.layers - pipe.layers
        raise PlanError(f"{name}'s stages hold {counts} = {pipe.layers} layers but {model.name} "
                        f"has {model.layers}: {'add' if diff > 0 else 'remove'} {abs(diff)} "
                        f"layer{'s' if abs(diff) > 1 else ''} (e.g. on its last stage: "
                        f"L{pipe.stages[-1].layers + diff})")


def _check_placement(plan: HeteroPlan, cluster: HeteroCluster) -> None:
    """Every stage inside its group, no device used twice."""
    owner: dict[tuple[str, int], str] = {}
    for i, j, stage in plan.stages():
        where = f"pipeline {i + 1} stage {j + 1}"
        try:
            group = cluster.group(stage.group)
        except ValueError as err:  # an unknown group lists the known ones
            raise PlanError(f"{where}: {err}") from None
        if stage.first < 0 or stage.first + stage.tensor > group.n_devices:
            raise PlanError(
                f"{where} is placed on {stage.group}[{stage.first}:"
                f"{stage.first + stage.tensor}], but group {group.name} has {group.n_devices} "
                f"devices ([0:{group.n_devices}]): place it inside the group, or use a smaller "
                f"tensor degree")
        for d in stage.devices:
            key = (group.name, d)
            if key in owner:
                raise PlanError(f"device {group.name}[{d}] is used by {owner[key]} and by "
                                f"{where}: give each stage its own devices")
            owner[key] = where


def _check_tensor(where: str, t: int, model: ModelConfig) -> None:
    """Megatron's splits: heads, KV heads, the MLP and the vocabulary over t."""
    for dim, size in (("heads", model.heads), ("kv_heads", model.kv_heads),
                      ("ffn", model.ffn), ("vocab", model.vocab)):
        if size % t:
            ok = [d for d in range(1, t + 1) if model.heads % d == 0 and model.kv_heads % d == 0
                  and model.ffn % d == 0 and model.vocab % d == 0]
            raise PlanError(f"{where}: {dim}={size} is not divisible by tensor={t}; Megatron "
                            f"tensor parallelism splits it, so use a tensor degree from "
                            f"{', '.join(map(str, ok))}")


def tensor_degrees(model: ModelConfig, limit: int) -> list[int]:
    """Tensor degrees up to `limit` that split the model's heads, KV heads, MLP and vocab."""
    return [t for t in range(1, limit + 1)
            if all(size % t == 0 for size in (model.heads, model.kv_heads, model.ffn,
                                               model.vocab))]


__all__ = ["check_plan", "tensor_degrees"]
