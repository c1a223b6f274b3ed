"""The mesh diagram: which devices form each mesh axis's groups, as the JAX scaling book draws
a mesh (devices as squares, one colour per group).

    mesh_chart(Layout(data=2, tensor=4), devices_per_node=8)

The mesh orders devices row-major over parex's axes (stage, data, fsdp, seq, tensor; tensor
innermost), as parex.mesh.make_mesh builds it. One panel per axis larger than 1; each row of
squares is one node (`devices_per_node`), so an axis whose groups stay inside a row
communicates over the fast links and one whose groups span rows crosses the network.
"""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from ..layout import MESH_AXES, Layout

MAX_DRAWN = 256  # devices drawn; larger meshes show their first MAX_DRAWN (the pattern repeats)
CELL = 14  # pixels per device square
MANY_GROUPS = 12  # beyond this, two groups are highlighted and the rest drawn grey
HIGHLIGHT = ("#1b9e77", "#d95f02")
OTHER_GROUPS = "#e0e0e0"


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


def _panel(frame: pd.DataFrame, axis: str, per_row: int, n_groups: int) -> alt.LayerChart:
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
    title = alt.TitleParams(f"{axis}: {n_groups} group{'s' if n_groups > 1 else ''} of "
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
    panels = []
    for axis in dict.fromkeys(frame["axis"]):
        groups = n // int(axis.split("=")[1])
        panels.append(_panel(frame, axis, per_row, groups))
    return alt.hconcat(*panels, spacing=18).resolve_scale(color="independent").properties(
        title=alt.TitleParams(f"mesh of {n} devices: who talks to whom on each axis",
                              subtitle=note, anchor="start"))


__all__ = ["mesh_chart", "mesh_frame"]
