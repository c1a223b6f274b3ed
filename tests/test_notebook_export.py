"""Charts survive export: a small notebook run as a user runs one (charts.enable_offline, as
the notebooks' `offline = True` does) holds a picture beside each live chart, and
charts.export_notebook writes it as an HTML page and as a notebook whose charts are those
pictures, with no widget left that a viewer without a kernel would show as an empty space."""

import base64
import re
import struct

import nbformat
import pytest
from nbclient import NotebookClient

pytest.importorskip("altair")

from parex.charts import export_notebook  # noqa: E402

CELLS = ["import parex\n\nparex.emulate_devices(8)",
         "from parex import charts\n\ncharts.enable_offline()",
         "model, train = parex.model_preset('tiny'), parex.TrainConfig(global_batch=16)\n"
         "frame = parex.records_frame([parex.predict(model, train, parex.Layout(data=8), "
         "'a100-80gb')])\ncharts.step_time_chart(frame)"]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _png_size(data: str) -> tuple[int, int]:
    png = base64.b64decode(data)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", png[16:24])


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("export")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(folder)}}).execute()
    path = folder / "small.ipynb"
    nbformat.write(nb, path)
    return path


def test_a_live_chart_carries_its_picture(executed):
    chart = nbformat.read(executed, as_version=4).cells[-1].outputs[-1]
    assert WIDGET_VIEW in chart.data and "image/png" in chart.data  # live, and its picture
    width, height = _png_size(chart.data["image/png"])
    assert width > 300 and height > 150
    assert chart.metadata["image/png"]["width"] * 2 == width  # drawn at its CSS size


def test_the_exported_page_shows_the_chart_as_a_picture(executed, tmp_path):
    page = export_notebook(executed, tmp_path / "small.html").read_text()
    pictures = re.findall(r"<img[^>]* src=\"data:image/png;base64,([^\"]+)\"", page)
    assert len(pictures) == 1 and _png_size(pictures[0])[0] > 300
    assert WIDGET_VIEW not in page and "vnd.jupyter.widget-state" not in page


def test_the_exported_notebook_has_pictures_and_no_widgets(executed, tmp_path):
    out = export_notebook(executed, tmp_path / "shared.ipynb")
    nb = nbformat.read(out, as_version=4)
    chart = nb.cells[-1].outputs[-1]
    assert set(chart.data) == {"image/png", "text/plain"}
    assert "widgets" not in nb.metadata  # Vega's JavaScript went with the widgets
    assert out.stat().st_size < executed.stat().st_size / 4
    with pytest.raises(ValueError, match="html or .ipynb"):
        export_notebook(executed, tmp_path / "shared.pdf")
