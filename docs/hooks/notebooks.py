"""MkDocs hook: the notebooks live in notebooks/ (jupytext percent `.py`), outside docs/; add them
(and notebooks/README.md as their index) to the site's files, where mkdocs-jupyter renders each
`.py` as a notebook page without executing it."""

from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"


@event_priority(100)  # before mkdocs-jupyter's on_files, which turns these into notebook pages
def on_files(files, config):
    for path in sorted(NOTEBOOKS.glob("[0-9]*.py")) + [NOTEBOOKS / "README.md"]:
        files.append(File(path.relative_to(ROOT).as_posix(), str(ROOT), config["site_dir"],
                          config["use_directory_urls"]))
    return files


def on_serve(server, config, builder):
    server.watch(str(NOTEBOOKS))
    return server
