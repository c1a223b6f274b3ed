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

from ..config import DTYPES, REMAT_POLICIES, preset_names
from ..executor.data import SOURCES
from ..errors import InputError, did_you_mean, unknown
from ..files import read_toml
from ..layout import Layout, LayoutError
from . import SweepConfig

LISTS = {"remat": "remat", "seq": "seq_len", "global_batch": "global_batch",
         "microbatch": "microbatch"}  # grid key -> SweepConfig field (one value or a list)
SCALARS = ("steps", "dtype", "data", "devices")
KNOWN = {"model", "models", "layouts", "axes", "microbatches", *LISTS, *SCALARS}
WHOLE = ("seq", "global_batch", "microbatch", "microbatches", "steps", "devices")  # ints >= 1
NAMES = {"model": ("model preset", preset_names), "models": ("model preset", preset_names),
         "remat": ("remat policy", lambda: REMAT_POLICIES), "dtype": ("dtype", lambda: DTYPES),
         "data": ("data source", lambda: SOURCES), "layouts": ("layout", None)}


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


def check_spec(spec: dict) -> None:
    """Every key known and every value of the right kind, before any layout is read: a typo
    gets the nearest known key or name."""
    if not isinstance(spec, dict):
        raise InputError(f"a sweep grid is a TOML table of keys ({', '.join(sorted(KNOWN))})")
    extra = sorted(set(spec) - KNOWN)
    if extra:
        hint = did_you_mean(extra[0], KNOWN)
        raise InputError(f"unknown sweep grid keys {extra}; {hint + ' ' if hint else ''}use "
                         f"{', '.join(sorted(KNOWN))}")
    if "axes" in spec and not isinstance(spec["axes"], dict):
        raise InputError(f"axes={spec['axes']!r}: write [axes] as a table of Layout keys and "
                         f"lists of sizes, e.g. [axes] data = [1, 2] tensor = [1, 4]")
    for key, value in spec.items():
        if key in SCALARS and isinstance(value, list):
            raise InputError(f"{key}={value!r}: {key} takes one value, not a list")
        for item in _as_list(value) if key != "axes" else []:
            _check_value(key, item)


def _check_value(key: str, item) -> None:
    if key in WHOLE and (not isinstance(item, int) or isinstance(item, bool) or item < 1):
        raise InputError(f"{key}={item!r}: {key} takes whole numbers >= 1, e.g. {key} = 2")
    if key in NAMES:
        what, known = NAMES[key]
        if not isinstance(item, str):
            raise InputError(f"{key}={item!r}: write each {what} in quotes")
        if known is not None and item not in known():
            raise InputError(unknown(what, item, known()))


def grid_configs(spec: dict, defaults: SweepConfig | None = None) -> list[SweepConfig]:
    """The configs a grid spec (a parsed TOML table) lists; `defaults` fills what it omits.
    A bad key or value raises InputError, a layout that cannot be read LayoutError."""
    check_spec(spec)
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
    spec = read_toml(path, "sweep grid", "see parex.sweep.grid for the keys")
    try:
        return grid_configs(spec, defaults)
    except (InputError, LayoutError) as err:
        raise InputError(f"sweep grid {path}: {err}") from None


__all__ = ["axis_layouts", "grid_configs", "read_grid"]
