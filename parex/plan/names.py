"""Looking up models and hardware by name, with the nearest known name when one is mistyped."""

from __future__ import annotations

from ..config import ModelConfig, model_preset, preset_names
from ..errors import InputError, unknown
from ..hardware import Chip, Cluster, known_hardware, load_chip


def model_named(name: str) -> ModelConfig:
    """The preset `name`; an unknown one names the closest preset and lists them all."""
    if name not in preset_names():
        raise InputError(unknown("model", name, preset_names()))
    return model_preset(name)


def chip_named(name: str) -> Chip:
    if name.lower() not in known_hardware():
        raise InputError(unknown("hardware", name, known_hardware())
                         + " (`parex calibrate` writes cpu-local)")
    return load_chip(name)


def cluster_of(hardware, nodes: int | None = None) -> Cluster:
    """A Cluster from a profile name, a Chip or a Cluster, with `nodes` nodes (default: the
    Cluster's own, or one)."""
    if isinstance(hardware, Cluster):
        return hardware if nodes is None else Cluster(hardware.chip, nodes)
    chip = chip_named(hardware) if isinstance(hardware, str) else hardware
    if not isinstance(chip, Chip):
        raise TypeError(f"hardware must be a profile name, a Chip or a Cluster, not {chip!r}")
    if nodes is not None and nodes < 1:
        raise InputError(f"nodes={nodes}: a cluster has at least one node")
    return Cluster(chip, 1 if nodes is None else nodes)


__all__ = ["chip_named", "cluster_of", "model_named"]
