"""The notebooks' source files: opening and saving one in JupyterLab must not change the
tracked `.py` (the same round trip through jupytext's contents manager that JupyterLab's jupytext
extension runs), and each reads parex only through its public API (parex and a few public
packages)."""

import ast
import importlib
import importlib.util
import inspect
import shutil
import subprocess
import sys
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


PUBLIC_MODULES = {"parex", "parex.charts", "parex.explorer", "parex.figures", "parex.hetero",
                  "parex.lowcomm", "parex.plan", "parex.studies"}
MAX_PAREX_MODULES = 4


def parex_modules(tree) -> set[str]:
    """The parex modules a notebook's code reads: `import parex.x`, `from parex.x import y`
    (`parex.x.y` when y is itself a module) and attribute chains like `parex.x.f` that reach a
    module through the package."""
    def source_of(module: str, name: str) -> str:
        value = getattr(importlib.import_module(module), name, None)
        if value is not None and not inspect.ismodule(value):
            return module  # a function or class, even one named like a submodule (parex.predict)
        try:
            return f"{module}.{name}" if importlib.util.find_spec(f"{module}.{name}") else module
        except ModuleNotFoundError:  # `module` is not a package
            return module

    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "parex"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "parex":
            found |= {source_of(node.module, a.name) for a in node.names}
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "parex":
            found.add(source_of("parex", node.attr))
    return found


def test_notebooks_import_only_the_public_api():
    """Each notebook reads at most four parex modules, every one of them public."""
    jupytext = pytest.importorskip("jupytext")

    assert NOTEBOOKS
    for path in NOTEBOOKS:
        code = "\n".join(c.source for c in jupytext.read(path).cells if c.cell_type == "code")
        modules = parex_modules(ast.parse(code))
        assert "parex" in modules, path.name
        assert modules <= PUBLIC_MODULES, f"{path.name} reads {sorted(modules - PUBLIC_MODULES)}"
        assert len(modules) <= MAX_PAREX_MODULES, f"{path.name} reads {sorted(modules)}"


def test_the_import_check_sees_private_modules():
    """The check above can fail: private modules, a module imported by name from a package and
    one reached as an attribute are all seen."""
    code = ("import parex\nfrom parex.plan.report import plan_report\nfrom parex import charts\n"
            "from parex.figures import scoreboard\nparex.hardware.load_chip('a100-80gb')\n")
    assert parex_modules(ast.parse(code)) == {
        "parex", "parex.plan.report", "parex.charts", "parex.figures.scoreboard",
        "parex.hardware"}


def test_every_public_name_resolves():
    """Each public package's __all__ names what it holds: a rename inside a package breaks this
    test, not a notebook."""
    for module in sorted(PUBLIC_MODULES):
        package = importlib.import_module(module)
        assert package.__doc__, f"{module} has no docstring"
        missing = [name for name in package.__all__ if not hasattr(package, name)]
        assert not missing, f"{module}.__all__ names {missing}, which it does not hold"


def test_import_parex_leaves_the_notebook_extra_unloaded():
    """`import parex` works without the notebook extra: altair and ipywidgets load only with
    parex.charts or parex.explorer."""
    code = ("import sys, parex; print(sorted(m for m in ('altair', 'ipywidgets', 'anywidget') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parent.parent)
    assert out.stdout.strip() == "[]", out.stdout
