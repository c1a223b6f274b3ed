"""Looking up models and hardware by name, with the nearest known name when one is mistyped."""

from __future__ import annotations

import difflib

from ..config import ModelConfig, model_preset, preset_names
from ..errors import InputError
from ..hardware import Chip, Cluster, known_hardware, load_chip


def _plain(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def _nearest(name: str, known: list[str]) -> str:
    """'did you mean X? ' for the known name that contains the typed one (ignoring case and
    punctuation), else the closest by difflib; '' when none is close."""
    containing = [k for k in known if _plain(name) and _plain(name) in _plain(k)]
    close = containing or difflib.get_close_matches(name.lower(), known, n=1, cutoff=0.5)
    return f"did you mean {close[0]!r}? " if close else ""


def model_named(name: str) -> ModelConfig:
    """The preset `name`; an unknown one names the closest preset and lists them all."""
    if name not in preset_names():
        raise InputError(f"unknown model {name!r}: {_nearest(name, preset_names())}known models: "
                         f"{', '.join(preset_names())}")
    return model_preset(name)


def chip_named(name: str) -> Chip:
    if name.lower() not in known_hardware():
        raise InputError(f"unknown hardware {name!r}: {_nearest(name, known_hardware())}known "
                         f"hardware: {', '.join(known_hardware())} (`parex calibrate` writes "
                         f"cpu-local)")
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
