"""docs/hooks/images.py: after `mkdocs build`, an `<img src>` that names no file of the site is a
warning under MkDocs' logger, so `--strict` (.ci/run) fails the build. Checked on a small site
laid out as MkDocs lays one out (directory URLs), including the scoreboard's old mistake: an
image path relative to the Markdown file, on a page served from a directory."""

import importlib.util
import logging
from pathlib import Path

HOOK = Path(__file__).resolve().parent.parent / "docs" / "hooks" / "images.py"


def _hook():
    spec = importlib.util.spec_from_file_location("parex_docs_images", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _site(root: Path) -> Path:
    files = {
        "index.html": '<p><img alt="x" src="figure.png"><img src="data:image/png;base64,AA=="></p>',
        "figure.png": "",
        "figures/zero.png": "",
        "figures/scoreboard/index.html": ('<img src="zero.png" width="180">'  # the old mistake
                                          '<img src="../zero.png"><img src="/figures/zero.png">'
                                          '<img src="https://example.org/x.png">'),
        "gallery/index.html": '<img src="../figures/missing%20one.png?v=2">',
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_broken_images_are_found_as_a_browser_resolves_them(tmp_path):
    images = _hook()
    assert images.broken_images(_site(tmp_path)) == [
        ("figures/scoreboard/index.html", "zero.png"),
        ("gallery/index.html", "../figures/missing%20one.png?v=2")]


def test_each_broken_image_is_a_warning_that_strict_counts(tmp_path, caplog):
    images = _hook()
    with caplog.at_level(logging.WARNING, logger="mkdocs"):
        images.on_post_build({"site_dir": str(_site(tmp_path))})
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and all(r.name.startswith("mkdocs.") for r in warnings)
    assert 'figures/scoreboard/index.html shows <img src="zero.png">' in warnings[0].message


def test_the_hook_runs_in_the_docs_build():
    config = (HOOK.parents[2] / "mkdocs.yml").read_text()
    assert "  - docs/hooks/images.py" in config and "strict: true" in config
