"""Mixtures of experts: routing (parex.model.moe.routing), the MoE layer and its expert parallelism
(parex.model.moe.layer)."""
