"""Charts that outlive the kernel: drawn without internet, and kept when a notebook is shared.

A chart in a running notebook is a widget (altair's JupyterChart) that the kernel draws. A
notebook saved and shared as a file has no kernel: GitHub, nbviewer, an untrusted JupyterLab
and `jupyter nbconvert --to html` offline all show an empty space. So under `enable_offline`
every chart carries a PNG of itself beside the widget (rendered by vl-convert, ~0.1 s a chart
after a first ~0.8 s): JupyterLab still shows the live chart, a viewer without the widget shows
the picture, and `export_notebook` writes a copy in which every chart is its picture alone.

    charts.enable_offline()                                   # first, in the notebook
    charts.export_notebook("06_predicting_at_scale.ipynb", "06.html")   # then, to share it
"""

from __future__ import annotations

import base64
import struct
from pathlib import Path

import altair as alt

RENDERER = "parex"
PNG_SCALE = 2  # pixels per CSS pixel: sharp on high-density screens, drawn at its CSS size
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
INTERACTIVE = (WIDGET_VIEW, "text/html", "application/javascript")  # need a kernel or a CDN


def picture_bundle(spec: dict) -> tuple[dict, dict]:
    """A chart's PNG as a display bundle, with the size to draw it at (CSS pixels)."""
    from altair.utils.mimebundle import spec_to_mimebundle

    bundle = spec_to_mimebundle(spec, format="png", mode="vega-lite",
                                vegalite_version=alt.VEGALITE_VERSION, scale_factor=PNG_SCALE)
    png = (bundle[0] if isinstance(bundle, tuple) else bundle)["image/png"]
    png = base64.b64decode(png) if isinstance(png, str) else png
    width, height = struct.unpack(">II", png[16:24])  # the PNG header's IHDR chunk
    size = {"width": width // PNG_SCALE, "height": height // PNG_SCALE}
    return {"image/png": base64.b64encode(png).decode("ascii")}, {"image/png": size}


def _live_with_picture(spec: dict, **options) -> tuple[dict, dict]:
    """The altair renderer of enable_offline: the JupyterChart widget (its JavaScript stored in
    the notebook) and the chart's PNG in one output."""
    alt.JupyterChart.enable_offline(offline=options.get("offline", True))
    live = alt.JupyterChart(chart=alt.Chart.from_dict(spec),
                            embed_options=options.get("embed_options"))._repr_mimebundle_()
    data, metadata = live if isinstance(live, tuple) else (live, {})
    picture, size = picture_bundle(spec)
    return data | picture, dict(metadata) | size


def enable_offline() -> None:
    """Store Vega's JavaScript in the notebook, so charts render in a browser without internet
    (~0.9 MB per chart), and a PNG beside each chart, so a notebook shared as a file keeps its
    pictures (module docstring). Skip it where no browser renders, e.g. when a test executes
    a notebook."""
    alt.JupyterChart.enable_offline()
    alt.renderers.register(RENDERER, _live_with_picture)
    alt.renderers.enable(RENDERER, offline=True)


def static_outputs(nb) -> int:
    """In an executed notebook (an nbformat node), keep only the picture of every output that
    has one beside its interactive form; drop the widget state no output needs any more.
    Returns how many outputs became pictures."""
    changed = 0
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "image/png" in data and any(kind in data for kind in INTERACTIVE):
                for kind in INTERACTIVE:
                    data.pop(kind, None)
                changed += 1
    views = [o for c in nb.cells for o in c.get("outputs", []) if WIDGET_VIEW in o.get("data", {})]
    if changed and not views:
        nb.metadata.pop("widgets", None)  # the charts' models, and Vega's JavaScript in each
    return changed


def export_notebook(source: str | Path, target: str | Path) -> Path:
    """Write the executed notebook `source` (.ipynb, run with enable_offline) as `target`:
    `.html`, a page whose charts are pictures, readable offline; or `.ipynb`, a notebook that
    GitHub, nbviewer or any JupyterLab shows with its charts. Widgets without a picture (the
    Explorer, the Planner) need a kernel and stay as they were."""
    import nbformat

    source, target = Path(source), Path(target)
    if target.suffix not in (".html", ".ipynb"):
        raise ValueError(f"cannot export to {target.name}: use a .html or .ipynb file name")
    nb = nbformat.read(source, as_version=4)
    static_outputs(nb)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.suffix == ".ipynb":
        nbformat.write(nb, target)
    else:
        from nbconvert import HTMLExporter

        body, _ = HTMLExporter(template_name="lab").from_notebook_node(
            nb, resources={"metadata": {"name": source.stem}})
        target.write_text(body, encoding="utf-8")
    return target


__all__ = ["enable_offline", "export_notebook", "picture_bundle", "static_outputs"]
