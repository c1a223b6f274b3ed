"""The explorer notebook in a real browser: JupyterLab on 127.0.0.1, Debian's Chromium driven by
Playwright. The `.py` notebook opens as a notebook (jupytext's default viewer, set the way the
notebooks README says), runs, and then, as a user would: a control moves and the chart changes
without ever disappearing; a baseline is pinned and the compare panel shows the deltas; Measure
is double-clicked and runs once; the Gantt panel draws the pipeline and a GPU profile shows its
bubble; a large model does not fit and its first suggested fix makes it fit; an invalid layout
typed in fades the charts (their computed opacity drops below 1) until it is fixed. Saving leaves
the `.py` byte for byte as it was. A second notebook hands the Planner's best layout to the
Explorer, which then shows the Planner's step time and memory. Screenshots and timings are saved
under artifacts/.

Needs `bash tests/browser_setup.sh` (apt chromium, pip playwright; no Playwright browser download).
Run with `python -m pytest -m browser tests/test_browser.py`.
"""

import contextlib
import json
import os
import secrets
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import jupytext
import nbformat
import pytest

from parex.units import format_bytes, format_seconds

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
NOTEBOOK = ROOT / "notebooks" / "07_explorer.py"
ARTIFACTS = ROOT / "artifacts"
# Text contents of the visible charts' SVG (SVG <text> has no innerText; hidden tabs are 0 wide).
CHARTS = """Array.from(document.querySelectorAll('.jp-OutputArea-output .vega-embed svg'))
  .filter(s => s.getBoundingClientRect().width > 0)"""
CHART_TEXT_JS = f"""() => {CHARTS}
  .map(s => Array.from(s.querySelectorAll('text')).map(t => t.textContent).join('|')).join('||')"""
CHART_COUNT_JS = f"() => {CHARTS}.length"
# The opacity the first visible chart is drawn with: CSS opacity multiplies down the tree, and an
# element's own computed value stays 1 when an ancestor is faded.
CHART_OPACITY_JS = f"""() => {{
  let node = {CHARTS}[0], opacity = 1;
  for (; node; node = node.parentElement) opacity *= parseFloat(getComputedStyle(node).opacity);
  return opacity; }}"""
STATUS_JS = """() => Array.from(document.querySelectorAll('.widget-html-content'))
  .map(e => e.textContent).join('|')"""
COMMAND_JS = """() => Array.from(document.querySelectorAll('code.parex-note'))
  .map(e => e.textContent).find(t => t.startsWith('parex predict'))"""


def _pasted_into_the_cli(command: str) -> dict:
    """The Explorer's printed command, run as a user would paste it into a shell."""
    args = shlex.split(command)
    assert args[:2] == ["parex", "predict"], command
    done = subprocess.run([sys.executable, "-m", "parex.cli", *args[1:], "--json"],
                          capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_settings(settings: Path) -> None:
    """No virtualised notebook (cells off screen would not render) and no news popup."""
    files = {"@jupyterlab/notebook-extension/tracker.jupyterlab-settings":
             {"windowingMode": "none"},
             "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
             {"fetchNews": "false", "checkForUpdates": False}}
    for name, value in files.items():
        (settings / name).parent.mkdir(parents=True, exist_ok=True)
        (settings / name).write_text(json.dumps(value))


def _write_notebook(folder: Path) -> Path:
    """The explorer notebook, still a jupytext .py, with the offline Vega bundle (no internet
    here) and 2 steps."""
    nb = jupytext.read(NOTEBOOK)
    index = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell(
        "offline = True\nsteps = 2", metadata={"tags": ["injected-parameters"]}))
    path = folder / "explorer.py"
    jupytext.write(nb, path, fmt="py:percent")
    return path


def _wait_for(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


@pytest.fixture
def jupyterlab(tmp_path):
    """(base url, token, notebook path) of a fresh JupyterLab serving the explorer notebook."""
    if not CHROMIUM.exists() or shutil.which("jupyter-lab") is None:
        message = "run tests/browser_setup.sh first (chromium, playwright, jupyterlab)"
        pytest.fail(message) if os.environ.get("CI") else pytest.skip(message)
    root, settings, workspaces, config = (tmp_path / n for n in ("root", "settings", "ws", "cfg"))
    for folder in (root, settings, workspaces, config):
        folder.mkdir()
    _write_settings(settings)
    notebook = _write_notebook(root)
    env = os.environ | {"JUPYTERLAB_SETTINGS_DIR": str(settings), "JUPYTER_CONFIG_DIR": str(config),
                        "JUPYTERLAB_WORKSPACES_DIR": str(workspaces), "JAX_PLATFORMS": "cpu"}
    # what notebooks/README.md says to run once: .py notebooks open as notebooks
    subprocess.run([sys.executable, "-m", "jupytext_config", "set-default-viewer", "python"],
                   env=env, check=True, capture_output=True)
    port, token = _free_port(), secrets.token_hex(16)
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={root}", "--ServerApp.port_retries=0",
         "--ServerApp.allow_root=True", "--LabApp.extension_manager=readonly"],
        env=env, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "server.log", "w"))
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for(f"{base}/api/status?token={token}")
        yield base, token, notebook
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


def _accept_kernel_dialog(page) -> bool:
    """A fresh session sometimes asks which kernel to use although the notebook names one:
    take the one it offers (the notebook's)."""
    dialog = page.locator(".jp-Dialog", has_text="Select Kernel")
    if dialog.count() == 0:
        return False
    dialog.get_by_role("button", name="Select").click()
    page.wait_for_timeout(1000)
    return True


def _run_all(page) -> None:
    """Run > Run All Cells; a fresh server sometimes ignores the first request, so retry until
    the first cell's prompt changes."""
    for _ in range(6):
        _accept_kernel_dialog(page)
        try:  # a dialog that opens meanwhile blocks the menu: accept it on the next round
            page.get_by_role("menuitem", name="Run", exact=True).click(timeout=5000)
            page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click(
                timeout=5000)
            prompt = page.locator(".jp-Cell.jp-CodeCell .jp-InputPrompt").first
            page.wait_for_function("p => p.textContent.trim() !== '[ ]:'",
                                   arg=prompt.element_handle(), timeout=8000)
            return
        except Exception:  # noqa: BLE001 (Playwright's TimeoutError): not started, try again
            page.keyboard.press("Escape")
    raise AssertionError("JupyterLab never started running the notebook")


ALL_RUN_JS = """() => {
  const prompts = Array.from(document.querySelectorAll('.jp-CodeCell .jp-InputPrompt'));
  return prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.textContent));
}"""
IDLE_JS = ("() => document.querySelector(\".jp-Notebook-ExecutionIndicator\")"
           "?.getAttribute('data-status') === 'idle'")


def _wait_until_done(page, timeout_s: float = 300) -> None:
    """Every code cell has a numbered prompt, i.e. none is queued or running. Run All sometimes
    stops after the first cell on a fresh server: if the kernel sits idle with cells not run,
    ask again (re-running a cell is harmless here)."""
    deadline, idle_since, retries = time.monotonic() + timeout_s, None, 0
    while time.monotonic() < deadline:
        if page.evaluate(ALL_RUN_JS):
            return
        if _accept_kernel_dialog(page):
            idle_since = None
            continue
        if page.evaluate(IDLE_JS):
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since > 5 and retries < 3:
                _run_all(page)
                idle_since, retries = None, retries + 1
        else:
            idle_since = None
        page.wait_for_timeout(500)
    raise AssertionError("the notebook did not finish running")


class Explorer:
    """The Explorer's controls on the page, and what it shows."""

    def __init__(self, page):
        self.page = page
        self.widget = page.locator(".jp-OutputArea-output", has=page.locator(".widget-tab")).first

    def select(self, label: str, value: str) -> None:
        control = self.widget.locator(".widget-dropdown",
                                      has=self.page.locator("label", has_text=label)).first
        control.locator("select").select_option(value)

    def type_into(self, label: str, value: str) -> None:
        """Type a number into a text control, as a user would (Tab sends it)."""
        control = self.widget.locator(".widget-inline-hbox",
                                      has=self.page.locator("label", has_text=label)).first
        control.locator("input").fill(value)
        control.locator("input").press("Tab")

    def button(self, text: str):
        return self.widget.locator("button", has_text=text).first

    def tab(self, name: str) -> None:
        self.widget.locator(".lm-TabBar-tab", has_text=name).first.click()

    def until(self, js_check: str, timeout: float = 60_000) -> float:
        """Seconds until `js_check` (a JS expression of `text` = the visible charts' text and
        `status` = the widget's HTML text) holds."""
        start = time.monotonic()
        self.page.wait_for_function(
            f"() => {{ const text = ({CHART_TEXT_JS})(); const status = ({STATUS_JS})(); "
            f"return {js_check}; }}", timeout=timeout)
        return time.monotonic() - start

    def shot(self, name: str) -> None:
        self.page.wait_for_timeout(400)  # let the replaced chart settle before the picture
        self.widget.screenshot(path=str(ARTIFACTS / f"browser_{name}.png"))


def _move_tensor_and_watch(ui: Explorer, timings: dict) -> None:
    """The tensor control moves: status and chart follow, and the chart never disappears.
    (The charts wrap layout names at their commas, so their text holds "tensor=4" alone.)"""
    ui.until("status.includes('data=4,tensor=2') && text.includes('tensor=2')")
    ui.shot("explorer_before")
    start, counts = time.monotonic(), []
    ui.select("tensor", "4")
    status_at = chart_at = None
    while time.monotonic() - start < 30 and chart_at is None:
        counts.append(ui.page.evaluate(CHART_COUNT_JS))
        now = time.monotonic() - start
        if status_at is None and "data=2,tensor=4" in ui.page.evaluate(STATUS_JS):
            status_at = now
        if "tensor=4" in (ui.page.evaluate(CHART_TEXT_JS) or ""):
            chart_at = now
        ui.page.wait_for_timeout(20)
    assert chart_at is not None, "the chart never showed the new layout"
    assert min(counts) >= 1, f"the chart disappeared during the update: {counts}"
    timings |= {"status_update_s": status_at, "chart_update_s": chart_at}
    ui.shot("explorer_after")


def _invalid_fades_the_charts(ui: Explorer, timings: dict) -> None:
    """An impossible layout typed in (3 heads do not split over tensor=4): the status says so
    and the charts, which still show the last valid layout, fade; fixing it restores them."""
    assert ui.page.evaluate(CHART_OPACITY_JS) == 1
    ui.type_into("heads", "3")
    ui.until("status.includes('invalid layout')")
    start = time.monotonic()
    ui.page.wait_for_function(f"() => ({CHART_OPACITY_JS})() < 0.5", timeout=10_000)
    timings["fade_s"] = time.monotonic() - start
    ui.shot("invalid_faded")
    ui.type_into("heads", "8")
    ui.until("status.includes('data=2,tensor=4') && !status.includes('invalid layout')")
    ui.page.wait_for_function(f"() => ({CHART_OPACITY_JS})() === 1", timeout=10_000)


def _runs(ui: Explorer, layout: str) -> int:
    """The runs column of the measured panel's row for `layout`."""
    table = ui.widget.locator(".parex-table").first
    header = [cell.inner_text() for cell in table.locator("th").all()]
    for row in table.locator("tbody tr").all():
        cells = [cell.inner_text() for cell in row.locator("td").all()]
        if cells and cells[0] == layout:
            return int(cells[header.index("runs")])
    raise AssertionError(f"no row for {layout} in {table.inner_text()}")


@contextlib.contextmanager
def lab_page(base: str, token: str, path: str, artifact: str):
    """A headless Chromium page on JupyterLab's `path`, the notebook open and its kernel idle;
    on the way out, pass or fail, its full-page screenshot saved as ARTIFACTS/artifact (the
    first thing to look at on a failure)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                    args=["--no-sandbox", "--disable-dev-shm-usage"])
        page = browser.new_page(viewport={"width": 1400, "height": 2600})
        try:
            page.goto(f"{base}/lab/tree/{path}?reset&token={token}")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)  # a notebook
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']",
                                   timeout=60_000)
            yield page
        finally:
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / artifact), full_page=True)
            browser.close()


def test_the_explorer_in_a_browser(jupyterlab):
    base, token, notebook = jupyterlab
    source, timings = notebook.read_bytes(), {}
    ARTIFACTS.mkdir(exist_ok=True)
    with lab_page(base, token, "explorer.py", "browser_explorer.png") as page:
        try:
            start = time.monotonic()
            _run_all(page)
            page.wait_for_function(f"() => ({CHART_COUNT_JS})() > 0", timeout=300_000)
            timings["first_chart_s"] = time.monotonic() - start  # imports, kernel, the widget
            _wait_until_done(page)
            timings["run_all_s"] = time.monotonic() - start
            errors = page.locator(".jp-OutputArea-output[data-mime-type*='error']").count()
            assert errors == 0, "a cell raised"
            ui = Explorer(page)
            _move_tensor_and_watch(ui, timings)
            _invalid_fades_the_charts(ui, timings)

            ui.tab("compare")
            ui.button("Pin as baseline").click()  # compare: baseline tensor=4, now tensor=2
            ui.select("tensor", "2")
            ui.until("status.includes('data=4,tensor=2')")
            timings["compare_s"] = ui.until(
                "text.includes('baseline') && text.includes('(now)') && text.includes('%')")
            ui.shot("compare")

            ui.button("Measure").dblclick()  # measured by the notebook already: compiled
            page.wait_for_timeout(3000)
            ui.tab("measured")
            ui.until("text.includes('measured and predicted step time')", 120_000)
            deadline = time.monotonic() + 180  # a loaded machine measures slowly
            while _runs(ui, "data=4,tensor=2") < 2 and time.monotonic() < deadline:
                page.wait_for_timeout(1000)
            page.wait_for_timeout(3000)  # room for a second click's run, were it to start
            assert _runs(ui, "data=4,tensor=2") == 2  # the notebook's and one of the double click
            ui.shot("measured")

            ui.select("stage", "4")
            ui.select("schedule", "1f1b")
            ui.select("microbatches", "4")
            ui.until("status.includes('stage=4,schedule=1f1b,microbatches=4')")
            ui.tab("pipeline and mesh")
            ui.until("text.includes('pipeline stage') && text.includes('idle')")
            assert "share the host" in page.evaluate(STATUS_JS)
            ui.button("see it on").click()
            timings["gantt_gpu_s"] = ui.until(
                "status.includes('h100') && text.includes('op times') && "
                "(text.includes('(µs)') || text.includes('(ms)'))")  # tiny: launch-bound ms
            ui.shot("gantt")
            # the command the Explorer prints for this pipeline, pasted into a shell: the same
            # step time and memory as its status line (one Setting, resolved alike)
            command = page.evaluate(COMMAND_JS)
            assert "stage=4" in command and "h100-sxm" in command, command
            pasted, status = _pasted_into_the_cli(command), page.evaluate(STATUS_JS)
            assert format_seconds(pasted["step_time_s"]["total"]) + " per step" in status
            assert format_bytes(pasted["memory_bytes_per_device"]["total"]) + " of" in status

            ui.select("model", "llama2-13b")  # 13B on 8 H100s, data-parallel: too big
            ui.tab("overview")
            ui.until("status.includes('does not fit') && text.includes('does not fit')")
            ui.shot("does_not_fit")
            fix = ui.widget.locator("button", has_text="→").first
            fix.click()
            ui.until("status.includes('per device fits')")
            ui.shot("fixed")

            page.keyboard.press("Control+s")  # save: jupytext writes the .py back
            page.wait_for_timeout(2000)
        finally:
            (ARTIFACTS / "browser_timings.json").write_text(json.dumps(timings, indent=2))
    assert notebook.with_suffix(".ipynb").exists(), "the save did not go through"
    assert notebook.read_bytes() == source, "opening and saving changed the .py"
    print(json.dumps(timings))


PLANNER_CELLS = ["import parex\n\nparex.emulate_devices(8)",
                 "from parex import charts\nfrom parex.explorer.planner import Planner\n\n"
                 "charts.enable_offline()",
                 "planner = Planner(model='llama2-7b', hardware='h100-sxm', nodes=4, "
                 "global_batch=256, top=3)\nplanner",
                 "planner.explorer"]
ROW_JS = """() => { const row = document.querySelector('.parex-step');
  return row && [row.textContent, document.querySelector('.parex-memory').textContent]; }"""


def _write_planner_notebook(folder: Path) -> Path:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in PLANNER_CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}
    path = folder / "planner.ipynb"
    nbformat.write(nb, path)
    return path


def test_the_planner_hands_its_best_layout_to_the_explorer(jupyterlab):
    """Llama 2 7B on 4 nodes of H100s: the Planner's first row, sent to the Explorer, shows
    there with the same step time and memory (every assumption travels with it)."""
    base, token, explorer_notebook = jupyterlab
    _write_planner_notebook(explorer_notebook.parent)
    timings = {}
    with lab_page(base, token, "planner.ipynb", "browser_planner.png") as page:
        start = time.monotonic()
        _run_all(page)
        _wait_until_done(page)
        page.wait_for_function(ROW_JS, timeout=120_000)
        timings["run_all_s"] = time.monotonic() - start
        step, memory = page.evaluate(ROW_JS)
        assert step.endswith(" s") and memory.endswith(" GB"), (step, memory)
        page.locator("button", has_text="#1 → Explorer").first.click()
        ui = Explorer(page)
        check = f"status.includes({json.dumps(step + ' per step')}) && " \
                f"status.includes({json.dumps(memory + ' of')})"
        timings["handed_over_s"] = ui.until(check)
        status = page.evaluate(STATUS_JS)
        assert "assumes h100-sxm" in status and "recipe mixed" in status
        ui.shot("planner_to_explorer")
    print(json.dumps(timings))


REPORT_CELLS = ["import parex\n\nparex.emulate_devices(8)",
                "from parex import TrainConfig, model_preset\nfrom parex.plan import plan, "
                "plan_report\n\nmodel = model_preset('llama2-7b').replace(dtype='bfloat16')\n"
                "plan_report(plan(model, TrainConfig(global_batch=256, seq_len=4096), "
                "'h100-sxm', 4))"]
# each header cell of the report's tables: whether it lies inside the output area as drawn,
# and whether its own table scrolls to it (a scroll bar under the table, not a clipped edge)
HEADERS_JS = """() => Array.from(document.querySelectorAll('.parex-report th')).map(th => {
  const area = th.closest('.jp-OutputArea-output').getBoundingClientRect();
  const scroll = th.closest('.parex-scroll');
  const box = th.getBoundingClientRect();
  return {text: th.textContent, inside: box.right <= area.right + 0.5,
          scrolls: scroll.scrollWidth > scroll.clientWidth
                   && getComputedStyle(scroll).overflowX === 'auto'}; })"""


def _write_report_notebook(folder: Path) -> Path:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in REPORT_CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}
    path = folder / "report.ipynb"
    nbformat.write(nb, path)
    return path


def test_a_wide_plan_report_keeps_every_column_in_view(jupyterlab):
    """notebooks/08's plan report in JupyterLab: at a laptop's width every column, MFU and the
    bottleneck included, is drawn inside the output; in a narrow window the table scrolls
    instead of losing its last columns at the output's edge."""
    base, token, explorer_notebook = jupyterlab
    _write_report_notebook(explorer_notebook.parent)
    with lab_page(base, token, "report.ipynb", "browser_report.png") as page:
        _run_all(page)
        _wait_until_done(page)
        page.wait_for_selector(".parex-report th", timeout=60_000)
        page.set_viewport_size({"width": 1280, "height": 1600})
        page.wait_for_timeout(500)
        headers = page.evaluate(HEADERS_JS)
        assert {"MFU", "bottleneck"} <= {h["text"] for h in headers}
        assert all(h["inside"] for h in headers), [h for h in headers if not h["inside"]]
        page.locator(".parex-report").first.screenshot(path=str(ARTIFACTS / "report_1280.png"))
        page.set_viewport_size({"width": 760, "height": 1600})
        page.wait_for_timeout(500)
        narrow = page.evaluate(HEADERS_JS)
        assert all(h["inside"] or h["scrolls"] for h in narrow), narrow
        assert any(h["scrolls"] for h in narrow)  # 760 px is too narrow: the table scrolls
        page.locator(".parex-report").first.screenshot(path=str(ARTIFACTS / "report_760.png"))


CHART_CELLS = ["import parex\n\nparex.emulate_devices(8)",
               "from parex import charts\n\ncharts.enable_offline()",
               "model, train = parex.model_preset('tiny'), parex.TrainConfig(global_batch=16)\n"
               "frame = parex.records_frame([parex.predict(model, train, parex.Layout(data=8), "
               "'a100-80gb')])\ncharts.step_time_chart(frame)"]
LAST_OUTPUT_JS = """() => { const outputs = document.querySelectorAll('.jp-OutputArea-output');
  const last = outputs[outputs.length - 1];
  return last ? {img: last.querySelectorAll('img').length,
                 live: last.querySelectorAll('.vega-embed').length} : null; }"""


def test_a_shared_notebook_shows_its_chart(jupyterlab):
    """A notebook run elsewhere (here by nbclient) and opened from its file shows each chart
    as its picture (the widget cannot run without the kernel that drew it); run again, the
    chart is live."""
    from nbclient import NotebookClient

    base, token, explorer_notebook = jupyterlab
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CHART_CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}
    NotebookClient(nb, timeout=300, kernel_name="python3").execute()
    nbformat.write(nb, explorer_notebook.parent / "shared.ipynb")
    with lab_page(base, token, "shared.ipynb", "browser_shared.png") as page:
        page.wait_for_function(f"() => ({LAST_OUTPUT_JS})()?.img === 1", timeout=30_000)
        _run_all(page)
        _wait_until_done(page)
        page.wait_for_function(f"() => ({LAST_OUTPUT_JS})()?.live === 1", timeout=60_000)
        assert page.evaluate(LAST_OUTPUT_JS)["img"] == 0  # the live chart, not its picture
