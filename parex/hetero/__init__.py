"""Heterogeneous clusters: plan and run one model across mixed GPU types (HexiScale's asymmetric
parallelism)."""
