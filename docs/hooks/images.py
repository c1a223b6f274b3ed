"""MkDocs hook: every image of the built site is there. MkDocs checks Markdown links, but an
`<img src>` written as raw HTML (or by a plugin) reaches the page unchecked and unrewritten: a
path relative to the Markdown file breaks once the page is served from a directory URL
(`figures/scoreboard.md` becomes `figures/scoreboard/index.html`). After the build, each page's
`<img src>` is resolved the way a browser would resolve it, and each that names no file of the
site is a warning, which `mkdocs build --strict` (.ci/run) turns into a failed build. Data URIs
and images on other hosts are not checked: the site is built without a network."""

from __future__ import annotations

import logging
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

log = logging.getLogger("mkdocs.hooks.images")  # under "mkdocs": counted by --strict


class _Images(HTMLParser):
    def __init__(self):
        super().__init__()
        self.sources: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.sources += [value for name, value in attrs if name == "src" and value]


def image_sources(page: str) -> list[str]:
    """The `src` of every `<img>` in an HTML page, in order."""
    parser = _Images()
    parser.feed(page)
    return parser.sources


def target(site: Path, page: Path, src: str) -> Path | None:
    """The file of `site` that `src` on `page` names; None for a data URI or another host."""
    parts = urlsplit(src)
    if parts.scheme or parts.netloc:  # data:, http:, //host/...
        return None
    path = unquote(parts.path)
    if path.startswith("/"):
        return site / path.lstrip("/")
    here = PurePosixPath(page.relative_to(site).as_posix()).parent
    return site / here / path


def broken_images(site: str | Path) -> list[tuple[str, str]]:
    """(page, src) for every `<img>` of the site at `site` whose file does not exist."""
    site = Path(site)
    broken = []
    for page in sorted(site.rglob("*.html")):
        for src in image_sources(page.read_text(encoding="utf-8", errors="replace")):
            file = target(site, page, src)
            if file is not None and not file.resolve().is_file():
                broken.append((page.relative_to(site).as_posix(), src))
    return broken


def on_post_build(config, **kwargs):
    for page, src in broken_images(config["site_dir"]):
        log.warning(f"broken image: {page} shows <img src=\"{src}\">, which names no file of "
                    f"the site (a path relative to the Markdown file, not to the page's URL?)")
