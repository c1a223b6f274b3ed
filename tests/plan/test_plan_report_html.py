"""A plan report shown as a notebook cell's value keeps every column in view: compact tables
whose numbers stay on one line and whose layouts break after their commas, each table in a
container that scrolls sideways rather than being clipped at the output's edge, no column of
dashes, and prose that the page wraps rather than lines cut at 100 characters.
(tests/test_browser.py checks the drawn result in JupyterLab.)"""

import re

import pytest

from parex import TrainConfig, model_preset
from parex.measure.report import WIDTH
from parex.plan import plan, plan_report


@pytest.fixture(scope="module")
def report():
    model = model_preset("gpt2-small").replace(dtype="bfloat16")
    return plan_report(plan(model, TrainConfig(global_batch=64, seq_len=1024), "h100-sxm", 1))


def _tables(html: str) -> list[str]:
    return re.findall(r"<div class='parex-scroll'[^>]*><table.*?</table></div>", html)


def _headers(table: str) -> list[str]:
    return [re.sub("<wbr>", "", h) for h in re.findall(r"<th[^>]*>(.*?)</th>", table)]


def test_every_table_scrolls_on_its_own_and_keeps_all_its_columns(report):
    html = report._repr_html_()
    tables = _tables(html)
    assert len(tables) == 3 == html.count("<table")  # the ranked rows and the two 3D lists
    assert all("overflow-x: auto" in t.split(">")[0] for t in tables)
    for table in tables:
        assert {"step", "memory/dev", "MFU", "bottleneck"} <= set(_headers(table))
        assert _headers(table)[-2:] == ["MFU", "bottleneck"]


def test_numbers_stay_on_one_line_and_layouts_break_after_commas(report):
    table = _tables(report._repr_html_())[0]
    rows = re.findall(r"<tr>(<td.*?)</tr>", table)
    assert len(rows) == 5
    for row in rows:
        cells = re.findall(r"<td style='([^']*)'>(.*?)</td>", row)
        label_style, label = cells[0]
        assert "white-space: normal" in label_style
        assert label.count(",<wbr>") == label.count(",")
        assert all("white-space: nowrap" in style for style, _ in cells[1:])
        assert cells[-1][1] in ("compute", "memory", "communication", "bubble")
    assert ",<wbr>" in table  # some layout has more than one key


def test_a_column_no_row_fills_is_left_out(report):
    """AxoNN models the plain and the 3D layouts but not pipelines: the list of 3D layouts
    inside stages has no AxoNN column, in the text and in the HTML."""
    ranked, flat_3d, staged = _tables(report._repr_html_())
    assert "AxoNN step" in _headers(ranked) and "AxoNN step" in _headers(flat_3d)
    assert "AxoNN step" not in _headers(staged)
    staged_text = str(report).split("inside pipeline stages:")[1].split("\n\n")[0]
    assert "AxoNN" not in staged_text.splitlines()[1] and "MFU" in staged_text.splitlines()[1]


def test_prose_is_wrapped_by_the_page_in_html_and_at_width_in_text(report):
    html = report._repr_html_()
    prose = re.findall(r"<pre[^>]*>(.*?)</pre>", html, flags=re.S)
    assert max(len(line) for block in prose for line in block.splitlines()) > WIDTH
    assert all("word-break: normal" in tag for tag in re.findall(r"<pre[^>]*>", html))
    text_prose = [line for line in str(report).splitlines() if "layouts considered" in line]
    assert text_prose and all(len(line) <= WIDTH for line in text_prose)


def test_its_plain_text_value_is_the_report_not_a_quoted_string(report):
    pretty = pytest.importorskip("IPython.lib.pretty")
    assert pretty.pretty(report) == str(report) and "\\n" not in pretty.pretty(report)
