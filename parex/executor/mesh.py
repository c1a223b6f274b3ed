"""Devices and meshes: emulated CPU devices on a laptop, the real ones on an accelerator host."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import AxisType, Mesh

from ..layout import MESH_AXES, Layout, LayoutError


def emulate_devices(n: int) -> None:
    """Ask for `n` CPU devices. Must run before JAX first touches a backend; afterwards it only
    checks that enough devices exist. On an accelerator host the real devices are used instead."""
    try:
        jax.config.update("jax_num_cpu_devices", n)
    except RuntimeError:  # backend already initialised: fine if it already has enough devices
        if len(jax.devices()) < n:
            raise LayoutError(
                f"{n} devices were asked for but JAX already started with {len(jax.devices())}; "
                f"call parex.emulate_devices({n}) (or set JAX_NUM_CPU_DEVICES={n}) before anything "
                f"else uses JAX, e.g. in the first notebook cell") from None


def devices_for(n: int) -> list:
    """The first `n` devices of the default backend, with a clear error when there are fewer."""
    available = jax.devices()
    if len(available) < n:
        raise LayoutError(
            f"the layout needs {n} devices but JAX sees {len(available)}; on a CPU, call "
            f"parex.emulate_devices({n}) before using JAX (the CLI's --devices {n} does that)")
    return available[:n]


def make_mesh(layout: Layout, devices=None) -> Mesh:
    """A mesh with every parex axis (size 1 where unused), DiLoCo's replica outermost and tensor
    innermost, in the automatic partitioner's mode so that sharding constraints guide XLA's SPMD
    partitioner."""
    devices = devices_for(layout.n_devices) if devices is None else list(devices)
    if len(devices) != layout.n_devices:
        raise LayoutError(f"layout {layout} needs {layout.n_devices} devices, got {len(devices)}")
    shape = tuple(layout.axis_sizes()[a] for a in MESH_AXES)
    grid = np.array(devices, dtype=object).reshape(shape)
    return Mesh(grid, tuple(a.value for a in MESH_AXES),
                axis_types=(AxisType.Auto,) * len(MESH_AXES))
