"""MkDocs hook: parex's docstrings are plain text, not Markdown with cross-references, and index
notation such as `k[i][g]` outside backticks reads to Markdown as a reference link to `g`. Such a
"reference" left unresolved is the docstring's notation, not a broken link, so its warning is
dropped when it comes from a docstring under parex/; every other unresolved reference still fails
the strict build."""

import logging
from pathlib import Path

PACKAGE = str(Path(__file__).resolve().parents[2] / "parex")


def _not_docstring_notation(record: logging.LogRecord) -> bool:
    message = record.getMessage()
    return not ("Could not find cross-reference target" in message
                and f"from {PACKAGE}/" in message)


def on_startup(command, dirty):
    # the autorefs plugin's logger (its module path differs between versions)
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("mkdocs.plugins.mkdocs_autorefs"):
            logging.getLogger(name).addFilter(_not_docstring_notation)
