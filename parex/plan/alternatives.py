"""What fits where a layout does not: the planner's fastest layouts on the same devices.

    fitting_layouts(model, train, hardware, n_devices, limit=3, current_step_s=...)
        -> [Alternative]   fits, fastest predicted step first, each with its saving

The fixes `parex predict` and the Explorer offer for a layout that does not fit in memory are
these rows of a real plan (search.plan: every layout of the same device count, global batch,
sequence length, dtype, recipe and convention, every remat policy), not a hand-written rule, so
they are the best the predictor knows and predict() of one gives its numbers again.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..config import REMAT_POLICIES, ModelConfig, TrainConfig
from ..hardware import Cluster
from ..layout import Layout
from .names import cluster_of
from .search import NoFit, layout_text, plan

MAX_DEVICES = 256  # larger clusters take tens of seconds to plan: `parex plan` is the tool there


@dataclass(frozen=True)
class Alternative:
    """One layout that fits, as the planner predicts it."""

    layout: Layout
    remat: str
    step_time_s: float
    memory_total_bytes: float
    saving_s: float | None  # the current layout's predicted step minus this one's (> 0: faster)
    assumptions: dict  # the Setting it was predicted under (parex.setting.Setting.to_json)
    flags: str = ""  # the `parex predict` flags that give its numbers (Plan.flags)

    def to_json(self) -> dict:
        return {"layout": layout_text(self.layout), "remat": self.remat,
                "step_time_s": self.step_time_s, "memory_total_bytes": self.memory_total_bytes,
                "saving_s": self.saving_s, "flags": self.flags, "assumptions": self.assumptions}


def same_devices(hardware, n_devices: int) -> Cluster:
    """A cluster of exactly n_devices of the profile: whole nodes, or one node cut to n."""
    cluster = cluster_of(hardware)
    chip, per = cluster.chip, cluster.chip.devices_per_node
    if n_devices % per == 0:
        return Cluster(chip, n_devices // per)
    return Cluster(dataclasses.replace(chip, devices_per_node=n_devices), 1)


def fitting_layouts(model: ModelConfig, train: TrainConfig, hardware, n_devices: int, *,
                    limit: int = 3, current_step_s: float | None = None, convention=None,
                    recipe=None, dtype: str | None = None, remats=REMAT_POLICIES,
                    keep=None) -> list[Alternative]:
    """The `limit` fastest distinct layouts of n_devices that fit (keep(layout, remat) may
    drop the ones a caller cannot show), each with its saving against current_step_s. Empty
    when nothing fits, or when the cluster is over MAX_DEVICES."""
    if n_devices > MAX_DEVICES:
        return []
    try:
        result = plan(model, train.replace(remat="none"), same_devices(hardware, n_devices),
                      top=limit * 4 if keep else limit, convention=convention, recipe=recipe,
                      dtype=dtype, remats=tuple(remats))
    except NoFit:
        return []
    out = []
    for i in result.top:
        layout, remat = result.layout(i), result.train_of(i).remat
        if keep is not None and not keep(layout, remat):
            continue
        step = float(result.columns["step_time_s"][i])
        out.append(Alternative(layout, remat, step, float(result.columns["memory_total_bytes"][i]),
                               None if current_step_s is None else current_step_s - step,
                               result.setting_of(i).to_json(), result.flags(i)))
        if len(out) == limit:
            break
    return out


def saving_text(alt: Alternative, current_step_s: float | None = None) -> str:
    """"33% faster" / "12% slower" than the current layout ("" when there is none)."""
    if alt.saving_s is None or current_step_s is None or current_step_s <= 0:
        return ""
    share = alt.saving_s / current_step_s
    return f"{abs(share):.0%} {'faster' if share >= 0 else 'slower'}"


__all__ = ["Alternative", "MAX_DEVICES", "fitting_layouts", "same_devices", "saving_text"]
