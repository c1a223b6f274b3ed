"""Sweep grids from a TOML file: every combination of the lists it gives, as SweepConfigs.

    models = ["tiny", "small"]              # or model = "tiny"
    layouts = ["dp", "data=2,tensor=4"]     # Layout strings; presets use `devices`
    devices = 8
    remat = ["none", "full"]                # any key below takes one value or a list
    microbatches = [1, 2]                   # sets each layout's microbatches
    seq = [64, 128]
    global_batch = 16
    steps = 5

    [axes]                                  # and/or axis ranges: every combination of these
    data = [1, 2, 4, 8]                     # Layout keys whose mesh uses exactly `devices`
    tensor = [1, 2, 4]
    zero = [0, 1]
"""

from __future__ import annotations

import dataclasses
import itertools
import tomllib
from pathlib import Path

from ..errors import InputError
from ..layout import Layout, LayoutError
from . import SweepConfig

LISTS = {"remat": "remat", "seq": "seq_len", "global_batch": "global_batch",
         "microbatch": "microbatch"}  # grid key -> SweepConfig field (one value or a list)
SCALARS = ("steps", "dtype", "data", "devices")
KNOWN = {"model", "models", "layouts", "axes", "microbatches", *LISTS, *SCALARS}


def _as_list(value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def axis_layouts(axes: dict, devices: int | None) -> list[str]:
    """Every combination of the axis lists as a Layout string, kept where the mesh uses
    `devices` devices (all of them when `devices` is not given)."""
    keys = list(axes)
    out = []
    for values in itertools.product(*(_as_list(axes[k]) for k in keys)):
        text = ",".join(f"{k}={v}" for k, v in zip(keys, values))
        layout = Layout.parse(text)
        if devices is None or layout.n_devices == devices:
            out.append(str(layout))
    if not out:
        raise LayoutError(f"no combination of the [axes] lists uses {devices} devices: give "
                          f"sizes whose product can be {devices}, or change `devices`")
    return out


def layout_strings(spec: dict) -> list[str]:
    devices = spec.get("devices")
    layouts = [str(Layout.parse(text, devices)) for text in _as_list(spec.get("layouts", []))]
    if "axes" in spec:
        layouts += axis_layouts(spec["axes"], devices)
    if "microbatches" in spec:
        layouts = [str(Layout.parse(text).replace(microbatches=int(m)))
                   for text in layouts for m in _as_list(spec["microbatches"])]
    return list(dict.fromkeys(layouts))


def grid_configs(spec: dict, defaults: SweepConfig | None = None) -> list[SweepConfig]:
    """The configs a grid spec (a parsed TOML table) lists; `defaults` fills what it omits."""
    unknown = set(spec) - KNOWN
    if unknown:
        raise InputError(f"unknown sweep grid keys {sorted(unknown)}; use {sorted(KNOWN)}")
    base = defaults or SweepConfig(model="tiny", layout="single")
    models = _as_list(spec.get("models", spec.get("model", base.model)))
    layouts = layout_strings(spec) or [base.layout]
    scalars = {k: spec[k] for k in SCALARS if k in spec}
    lists = {field: _as_list(spec[key]) for key, field in LISTS.items() if key in spec}
    configs = []
    for model, layout in itertools.product(models, layouts):
        for values in itertools.product(*lists.values()):
            changes = dict(zip(lists, values)) | scalars | {"model": model, "layout": layout}
            configs.append(dataclasses.replace(base, **changes))
    return configs


def read_grid(path, defaults: SweepConfig | None = None) -> list[SweepConfig]:
    path = Path(path)
    if not path.exists():
        raise InputError(f"no sweep grid file {path}: give the path of a TOML file "
                         f"(see parex.sweep.grid for the keys)")
    with open(path, "rb") as f:
        return grid_configs(tomllib.load(f), defaults)


__all__ = ["axis_layouts", "grid_configs", "read_grid"]
