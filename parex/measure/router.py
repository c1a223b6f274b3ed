"""What a mixture of experts' router did on each measured step: the share of token-to-expert
assignments dropped for lack of capacity, each expert's load, and the balance loss.

The probe runs the model's forward (parex.model.transformer.router_stats) on the step's mesh with the
step's parameters and batch, just before the step, untimed: the routing the step itself
computes, read without changing the step's program.
"""

from __future__ import annotations

import jax
import numpy as np

from ..model import transformer as gpt
from ..model.moe import routing


class RouterProbe:
    """Per-step router statistics of one TrainStep; `block()` is the Measurement's `moe`."""

    def __init__(self, step):
        self.step, self.cfg = step, step.model
        self.capacity = routing.capacity(self.cfg, step.seq_len)
        self._stats = jax.jit(lambda p, b: gpt.router_stats(p, b, self.cfg, step.ops))
        self.dropped, self.load, self.balance = [], [], []

    def __call__(self, state, batch) -> None:
        stats = jax.device_get(self._stats(self.step.natural_params(state["params"]), batch))
        load = np.asarray(stats["load"]).sum(0)  # over layers
        self.dropped.append(float(stats["dropped"]))
        self.load.append((load / load.sum()).astype(float).round(4).tolist())
        self.balance.append(float(np.mean(stats["balance"])))

    def block(self) -> dict:
        cfg = self.cfg
        return {"experts": cfg.experts, "top_k": cfg.top_k, "capacity": self.capacity,
                "capacity_factor": cfg.capacity_factor, "dropped_fraction": self.dropped,
                "expert_load": self.load, "balance_loss": self.balance,
                "max_load_ratio": [max(lo) * cfg.experts for lo in self.load]}


def router_report(block: dict) -> str:
    """Two lines for `parex run`: drops and the experts' load on the last step."""
    cap = ("dropless" if block["capacity_factor"] is None
           else f"capacity factor {block['capacity_factor']:g}")
    load = " ".join(f"{x:.0%}" for x in block["expert_load"][-1])
    return (f"router: {block['experts']} experts, top-{block['top_k']}, {cap} (C = "
            f"{block['capacity']} slots per sequence); dropped "
            f"{block['dropped_fraction'][-1]:.1%} of assignments on the last step\n"
            f"expert load (share of assignments, all layers): {load}; busiest "
            f"{block['max_load_ratio'][-1]:.2f}x the mean")
