"""Mixtures of experts: routing (parex.moe.routing), the MoE layer and its expert parallelism
(parex.moe.layer)."""
