"""Opening and saving a notebook in JupyterLab must not change the tracked `.py`: the same
round trip through jupytext's contents manager (what JupyterLab's jupytext extension runs)."""

import shutil
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]_*.py"))


def test_open_and_save_leaves_every_notebook_unchanged(tmp_path):
    manager_module = pytest.importorskip("jupytext.sync_contentsmanager")
    manager = manager_module.TextFileContentsManager(root_dir=str(tmp_path))
    assert NOTEBOOKS
    for path in NOTEBOOKS:
        copy = tmp_path / path.name
        shutil.copy(path, copy)
        model = manager.get(path.name)  # what opening it in JupyterLab reads
        manager.save(model, path.name)  # and what saving writes back (both paired files)
        assert copy.read_bytes() == path.read_bytes(), f"saving {path.name} changed it"
        assert copy.with_suffix(".ipynb").exists()
