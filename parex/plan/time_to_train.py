"""`parex plan --objective time-to-train`: the layout and the job size that finish a run first,
failures included (parex.predict.goodput).

On one cluster size every layout shares the interruption rate (it grows with the nodes) and the
checkpoint (the model's state, each shard written once), so goodput is common to all rows and
the fastest step also trains fastest. Across sizes it is not: a job on n nodes steps faster but
is interrupted n times as often, loses more to each restart, and at a fixed global batch splits
it thinner (more bubble, less efficient shapes). So the search plans the full cluster and its
halves down to an eighth, takes each size's best layout, and ranks them by predicted wall time
to train the run's tokens:

    wall(n) = steps · step_time(n) / goodput(n)

`--objective time` would take the full cluster's fastest step; where the two differ, the report
says so and by how much.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..predict.goodput import Reliability, TimeToTrain, checkpoint_bytes, time_to_train
from .names import cluster_of
from .search import NoFit, Plan, plan

FRACTIONS = (1, 2, 4, 8)  # the full cluster, its half, quarter and eighth


@dataclass
class SizeChoice:
    """One job size: its plan's best layout and that layout's whole run."""

    plan: Plan
    row: int  # the best validated row of the plan
    run: TimeToTrain

    @property
    def nodes(self) -> int:
        return self.plan.cluster.nodes

    def to_json(self) -> dict:
        return {"nodes": self.nodes, "n_devices": self.plan.cluster.n_devices,
                "layout": self.plan.entry(self.row)["layout"],
                "flags": self.plan.flags(self.row)} | self.run.to_json()


@dataclass
class TimeToTrainPlan:
    """Each job size's best layout, ranked by wall time to train (best first)."""

    sizes: list[SizeChoice]  # fastest to train first
    by_step: SizeChoice  # what --objective time picks: the full cluster's fastest step

    @property
    def best(self) -> SizeChoice:
        return self.sizes[0]

    @property
    def differs(self) -> bool:
        return self.best is not self.by_step

    def to_json(self) -> dict:
        return {"sizes": [s.to_json() for s in self.sizes], "differs_from_time": self.differs,
                "objective_time_pick": self.by_step.to_json()}


def plan_time_to_train(model, train, cluster, *, tokens: float | None = None,
                       steps: float | None = None, reliability: Reliability = Reliability(),
                       price_per_gpu_hour: float | None = None, full: Plan | None = None,
                       **plan_options) -> TimeToTrainPlan:
    """Plan `cluster` and its halves (FRACTIONS) at `train`'s global batch and rank their best
    layouts by wall time to train (module doc). `full`: the full cluster's plan, if made."""
    full = full or plan(model, train, cluster, **plan_options)
    train = full.train  # the resolved global batch, kept at every size
    choices = []
    for fraction in FRACTIONS:
        nodes = cluster.nodes // fraction
        if nodes < 1 or (fraction > 1 and nodes == choices[-1].nodes):
            break
        try:
            sized = full if fraction == 1 else plan(model, train, cluster_of(cluster.chip, nodes),
                                                    **plan_options | {"top": 1})
        except NoFit:
            continue
        if not sized.top:
            continue
        row = sized.top[0]
        e = sized.entry(row)
        run = time_to_train(e["step_time_s"]["total"], sized.train.tokens_per_step(model),
                            sized.cluster.n_devices, cluster.chip.devices_per_node,
                            checkpoint_bytes(model.n_params, sized.setting.recipe),
                            cluster.chip.name, tokens=tokens, steps=steps,
                            reliability=reliability, price_per_gpu_hour=price_per_gpu_hour)
        choices.append(SizeChoice(sized, row, run))
    by_step = choices[0]
    return TimeToTrainPlan(sorted(choices, key=lambda c: c.run.wall_s), by_step)


__all__ = ["FRACTIONS", "SizeChoice", "TimeToTrainPlan", "plan_time_to_train"]
