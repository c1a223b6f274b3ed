"""The mesh diagram: which devices form each mesh axis's groups, as the JAX scaling book draws
a mesh (devices as squares, one colour per group).

    mesh_chart(Layout(data=2, tensor=4), devices_per_node=8)

The mesh orders devices row-major over parex's axes (parex.layout.MESH_AXES: replica, stage,
data, fsdp, seq, tensor_z, tensor_y, tensor; tensor innermost), as parex.executor.mesh.make_mesh builds
it. One panel per axis larger than 1; each row of squares is one node (`devices_per_node`), so an
axis whose groups stay inside a row communicates over the fast links and one whose groups span
rows crosses the network. A 3D tensor layout (`tensor=XxYxZ`) gets a first panel with one
device's three groups (`groups_3d`): X (axis tensor) and Y (tensor_y) all-reduce activations
and input gradients, Z (tensor_z) gathers the weights and reduce-scatters their gradients.
"""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from ..layout import MESH_AXES, Axis, Layout

MAX_DRAWN = 256  # devices drawn; larger meshes show their first MAX_DRAWN (the pattern repeats)
CELL = 14  # pixels per device square
MANY_GROUPS = 12  # beyond this, two groups are highlighted and the rest drawn grey
HIGHLIGHT = ("#1b9e77", "#d95f02")
OTHER_GROUPS = "#e0e0e0"
# a 3D layout's groups of one device: what each does (parex.parallel.tensor3d)
ROLES_3D = {"X": (Axis.TENSOR, "X: all-reduce over X"),
            "Y": (Axis.TENSOR_Y, "Y: all-reduce over Y"),
            "Z": (Axis.TENSOR_Z, "Z: all-gather W, reduce-scatter dW over Z")}
ROLE_COLORS = {"the device": "#222222", "X": "#1b9e77", "Y": "#d95f02", "Z": "#7570b3",
               "none": OTHER_GROUPS}


def mesh_frame(layout: Layout, devices_per_node: int = 8) -> pd.DataFrame:
    """(axis, device, row, col, group, position, coords) for every drawn device and every axis
    larger than 1: `group` numbers the axis's groups, `position` is the device's place in its
    group (its coordinate on that axis)."""
    sizes = [layout.axis_sizes()[a] for a in MESH_AXES]
    n = int(np.prod(sizes))
    drawn = min(n, MAX_DRAWN)
    coords = np.array(np.unravel_index(np.arange(drawn), sizes)).T  # (drawn, 5)
    per_row = max(1, min(devices_per_node, drawn))
    rows = []
    for i, axis in enumerate(MESH_AXES):
        if sizes[i] == 1:
            continue
        others = np.delete(coords, i, axis=1)
        other_sizes = np.delete(np.array(sizes), i)
        group = np.ravel_multi_index(others.T, other_sizes) if len(other_sizes) else 0
        for d in range(drawn):
            where = ", ".join(f"{a.value} {c}" for a, c, s in zip(MESH_AXES, coords[d], sizes)
                              if s > 1)
            rows.append({"axis": f"{axis.value}={sizes[i]}", "device": d, "row": d // per_row,
                         "col": d % per_row, "group": int(np.atleast_1d(group)[d]),
                         "position": int(coords[d, i]), "coords": where})
    return pd.DataFrame(rows, columns=["axis", "device", "row", "col", "group", "position",
                                       "coords"])


def groups_3d(layout: Layout, device: int = 0) -> dict[str, list[int]]:
    """The devices of `device`'s X, Y and Z groups (each with `device` itself): those whose mesh
    coordinates differ from its own on that axis only, as make_mesh places them."""
    sizes = [layout.axis_sizes()[a] for a in MESH_AXES]
    coords = np.array(np.unravel_index(np.arange(int(np.prod(sizes))), sizes)).T
    own = coords[device]
    out = {}
    for name, (axis, _) in ROLES_3D.items():
        others = np.arange(len(MESH_AXES)) != MESH_AXES.index(axis)
        same = (coords[:, others] == own[others]).all(axis=1)
        out[name] = np.nonzero(same)[0].tolist()
    return out


def groups_3d_frame(layout: Layout, devices_per_node: int = 8, device: int = 0) -> pd.DataFrame:
    """(device, row, col, role) of every drawn device: "the device", the one of its groups
    ("X", "Y", "Z") it shares with `device` (a device differs from it on one axis at most
    among them), or "none"."""
    drawn = min(layout.n_devices, MAX_DRAWN)
    per_row = max(1, min(devices_per_node, drawn))
    role = ["none"] * drawn
    for name, members in groups_3d(layout, device).items():
        for d in members:
            if d < drawn:
                role[d] = name
    role[device] = "the device"
    return pd.DataFrame({"device": np.arange(drawn), "row": np.arange(drawn) // per_row,
                         "col": np.arange(drawn) % per_row, "role": role})


def _groups_panel(layout: Layout, devices_per_node: int, device: int = 0) -> alt.LayerChart:
    """Device `device` and its X, Y and Z groups, one colour each (a legend says what each
    group does)."""
    frame = groups_3d_frame(layout, devices_per_node, device)
    per_row = int(frame["col"].max()) + 1
    labels = {"the device": f"device {device}", "none": "in none of its groups"}
    labels |= {k: text for k, (_, text) in ROLES_3D.items()}
    frame = frame.assign(what=frame["role"].map(labels))
    order = [labels[k] for k in ROLE_COLORS if k in set(frame["role"])]
    base = alt.Chart(frame).encode(
        x=alt.X("col:O", axis=None), y=alt.Y("row:O", axis=None),
        tooltip=[alt.Tooltip("device:Q"), alt.Tooltip("what:N", title="group")])
    colours = [ROLE_COLORS[k] for k in ROLE_COLORS if labels[k] in order]
    squares = base.mark_rect(stroke="white", strokeWidth=1.5).encode(color=alt.Color(
        "what:N", scale=alt.Scale(domain=order, range=colours),
        legend=alt.Legend(title=None, orient="bottom", direction="vertical", labelLimit=400)))
    text = base.mark_text(fontSize=8).encode(text="device:Q", color=alt.condition(
        alt.datum.role == "none", alt.value("#666666"), alt.value("#ffffff")))
    rows = int(frame["row"].max()) + 1
    title = alt.TitleParams(f"device {device}'s groups (tensor={layout.tensor}x"
                            f"{layout.tensor_y}x{layout.tensor_z})", fontSize=11, anchor="start")
    return (squares + text).properties(width=CELL * per_row, height=CELL * rows, title=title)


def _panel(frame: pd.DataFrame, axis: str, per_row: int, n_groups: int,
           label: str = "") -> alt.LayerChart:
    data = frame[frame["axis"] == axis]
    rows = int(data["row"].max()) + 1
    base = alt.Chart(data).encode(
        x=alt.X("col:O", axis=None), y=alt.Y("row:O", axis=None),
        tooltip=[alt.Tooltip("device:Q"), alt.Tooltip("coords:N", title="coordinates"),
                 alt.Tooltip("group:Q", title=f"{axis.split('=')[0]} group"),
                 alt.Tooltip("position:Q", title="place in group")])
    if n_groups <= MANY_GROUPS:
        shade = alt.Color("group:N", legend=None, scale=alt.Scale(scheme="set3"))
    else:  # too many to tell apart: the first two groups, the rest grey
        data = data.assign(shown=data["group"].clip(upper=2))
        shade = alt.Color("shown:N", legend=None, scale=alt.Scale(
            domain=[0, 1, 2], range=[*HIGHLIGHT, OTHER_GROUPS]))
    base = base.properties(data=data)
    squares = base.mark_rect(stroke="white", strokeWidth=1.5).encode(color=shade)
    text = base.mark_text(fontSize=8, color="#222222").encode(text="device:Q")
    size = int(axis.split("=")[1])
    shown = "" if n_groups <= MANY_GROUPS else " (two shown)"
    title = alt.TitleParams(f"{axis}{label}: {n_groups} group{'s' if n_groups > 1 else ''} of "
                            f"{size}{shown}", fontSize=11, anchor="start")
    return (squares + text).properties(width=CELL * per_row, height=CELL * rows, title=title)


def mesh_chart(layout: Layout, devices_per_node: int = 8) -> alt.HConcatChart:
    """One panel per mesh axis larger than 1: the devices, coloured by the group of that axis
    each belongs to (a collective over the axis runs inside each group)."""
    frame = mesh_frame(layout, devices_per_node)
    n = layout.n_devices
    per_row = max(1, min(devices_per_node, n))
    note = (f"each row is one node of {devices_per_node}" if n > devices_per_node
            else f"{n} device{'s' if n > 1 else ''} in one node")
    if n > MAX_DRAWN:
        note += f"; the first {MAX_DRAWN} of {n} devices (the pattern repeats)"
    if frame.empty:
        single = pd.DataFrame({"device": [0], "row": [0], "col": [0]})
        chart = alt.Chart(single).mark_rect(color="#c7c7c7").encode(
            x=alt.X("col:O", axis=None), y=alt.Y("row:O", axis=None)).properties(
            width=CELL, height=CELL)
        return alt.hconcat(chart).properties(title=alt.TitleParams(
            "mesh: one device, no groups", subtitle=note, anchor="start"))
    panels = [_groups_panel(layout, devices_per_node)] if layout.tensor3d else []
    names = {a.value: f" ({k})" for k, (a, _) in ROLES_3D.items()} if layout.tensor3d else {}
    for axis in dict.fromkeys(frame["axis"]):
        groups = n // int(axis.split("=")[1])
        panels.append(_panel(frame, axis, per_row, groups, names.get(axis.split("=")[0], "")))
    return alt.hconcat(*panels, spacing=18).resolve_scale(color="independent").properties(
        title=alt.TitleParams(f"mesh of {n} devices: who talks to whom on each axis",
                              subtitle=note, anchor="start"))


__all__ = ["groups_3d", "groups_3d_frame", "mesh_chart", "mesh_frame"]
