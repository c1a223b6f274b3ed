"""The explorer notebook in a real browser: JupyterLab on 127.0.0.1, Debian's Chromium driven by
Playwright. Run all cells, move the tensor control, and see the chart change without ever
disappearing. A screenshot is saved under artifacts/.

Needs `bash tests/browser_setup.sh` (apt chromium, pip playwright; no Playwright browser download).
Run with `python -m pytest -m browser tests/test_browser.py`.
"""

import json
import os
import secrets
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

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
NOTEBOOK = ROOT / "notebooks" / "07_explorer.py"
ARTIFACTS = ROOT / "artifacts"
# Text contents of the live chart's SVG (SVG <text> has no innerText).
CHART_TEXT_JS = """() => {
  const charts = document.querySelectorAll('.jp-OutputArea-output .vega-embed svg');
  return charts.length ? Array.from(charts[0].querySelectorAll('text'))
      .map(t => t.textContent).join('|') : null;
}"""
CHART_COUNT_JS = "() => document.querySelectorAll('.jp-OutputArea-output .vega-embed svg').length"


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
    """The explorer notebook with the offline Vega bundle (no internet here) and 2 steps."""
    nb = jupytext.read(NOTEBOOK)
    index = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell(
        "offline = True\nsteps = 2", metadata={"tags": ["injected-parameters"]}))
    path = folder / "explorer.ipynb"
    jupytext.write(nb, path)
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
    """(base url, token) of a fresh JupyterLab serving a folder with the explorer notebook."""
    if not CHROMIUM.exists() or shutil.which("jupyter-lab") is None:
        message = "run tests/browser_setup.sh first (chromium, playwright, jupyterlab)"
        pytest.fail(message) if os.environ.get("CI") else pytest.skip(message)
    root, settings, workspaces = tmp_path / "root", tmp_path / "settings", tmp_path / "ws"
    for folder in (root, settings, workspaces):
        folder.mkdir()
    _write_settings(settings)
    _write_notebook(root)
    port, token = _free_port(), secrets.token_hex(16)
    env = os.environ | {"JUPYTERLAB_SETTINGS_DIR": str(settings),
                        "JUPYTERLAB_WORKSPACES_DIR": str(workspaces), "JAX_PLATFORMS": "cpu"}
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={root}", "--ServerApp.port_retries=0",
         "--ServerApp.allow_root=True", "--LabApp.extension_manager=readonly"],
        env=env, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "server.log", "w"))
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for(f"{base}/api/status?token={token}")
        yield base, token
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


def _run_all(page) -> None:
    """Run > Run All Cells; a fresh server sometimes ignores the first request, so retry until
    the first cell's prompt changes."""
    for _ in range(4):
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        prompt = page.locator(".jp-Cell.jp-CodeCell .jp-InputPrompt").first
        try:
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
        if page.evaluate(IDLE_JS):
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since > 5 and retries < 3:
                _run_all(page)
                idle_since, retries = None, retries + 1
        else:
            idle_since = None
        page.wait_for_timeout(500)
    raise AssertionError("the notebook did not finish running")


def test_explorer_chart_changes_when_a_control_moves(jupyterlab):
    from playwright.sync_api import sync_playwright

    base, token = jupyterlab
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                    args=["--no-sandbox", "--disable-dev-shm-usage"])
        page = browser.new_page(viewport={"width": 1400, "height": 2800})
        try:
            page.goto(f"{base}/lab/tree/explorer.ipynb?reset&token={token}")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']",
                                   timeout=60_000)
            _run_all(page)
            _wait_until_done(page)
            errors = page.locator(".jp-OutputArea-output[data-mime-type*='error']").count()
            assert errors == 0, "a cell raised"
            tensor = page.locator(".widget-dropdown", has=page.locator("label", has_text="tensor"))
            tensor.locator("select").wait_for(timeout=30_000)
            page.wait_for_function(f"() => ({CHART_TEXT_JS})()?.includes('data=4,tensor=2')",
                                   timeout=30_000)
            before = page.evaluate(CHART_TEXT_JS)
            ARTIFACTS.mkdir(exist_ok=True)  # measured beside predicted, before the change
            widget = page.locator(".jp-OutputArea-output", has=page.locator(".widget-vbox"))
            widget.first.screenshot(path=str(ARTIFACTS / "browser_explorer_before.png"))
            tensor.locator("select").select_option("4")
            counts = []  # the chart must never vanish while it is replaced
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                counts.append(page.evaluate(CHART_COUNT_JS))
                text = page.evaluate(CHART_TEXT_JS) or ""
                if "data=2,tensor=4" in text:
                    break
                page.wait_for_timeout(20)
            after = page.evaluate(CHART_TEXT_JS)
            page.wait_for_timeout(500)  # let the replaced chart settle before the picture
            widget.first.screenshot(path=str(ARTIFACTS / "browser_explorer_after.png"))
        finally:  # the screenshot is the artifact, and the first thing to look at on a failure
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "browser_explorer.png"), full_page=True)
            browser.close()
    assert "data=2,tensor=4" in after and "data=2,tensor=4" not in before
    assert min(counts) >= 1, f"the chart disappeared during the update: {counts}"
