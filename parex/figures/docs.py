"""The docs' gallery numbers, generated from the committed scoreboard: every table in README.md and
docs/*.md that shows what `parex figure --all` measured is a block between two markers,

    <!-- parex.figures.docs: KIND [ARGUMENT] -->
    ...
    <!-- end parex.figures.docs -->

rewritten from docs/figures/scoreboard.json, so that no number there is typed by hand. KINDs:

    headline          the scoreboard's headline alone (the README's summary of it)
    scoreboard LINK   the headline and one line per figure (LINK: the path to scoreboard.md)
    failures          per failing figure, its rows outside and its farthest row
    figure NAME       one figure's rows: quantity, paper, parex, ratio, within
    figure NAME notes the same with each row's note

    python -m parex.figures.docs          after `parex figure --all` (or a change of how the
                                          scoreboard is written): scoreboard.md and .html from
                                          its JSON, then every block
    python -m parex.figures.docs A.json B.json   after `parex figure NAME --json > A.json` for
                                          the figures a change touched: those figures replace
                                          theirs in scoreboard.json (in the gallery's order),
                                          then the same; the others keep their committed rows

tests/figures/test_docs.py checks that the committed docs equal what the committed scoreboard
renders.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from .core import FigureResult
from .scoreboard import (EVIDENCE_WORDS, STATUS, fmt, headline, load, parex_text, verdict,
                         write_pages)

ROOT = Path(__file__).resolve().parents[2]
SCOREBOARD = ROOT / "docs" / "figures" / "scoreboard.json"
BLOCK = re.compile(r"(<!-- parex\.figures\.docs: (?P<args>[^>]*?) -->\n)(?P<body>.*?)"
                   r"(<!-- end parex\.figures\.docs -->)", re.S)


def _line(cells) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


def _table(header, rows) -> list[str]:
    return [_line(header), _line(["---"] * len(header))] + [_line(r) for r in rows]


def scoreboard_block(results: list[FigureResult], link: str) -> list[str]:
    """The headline, then a line per figure linking to its rows in the scoreboard."""
    rows = []
    for r in results:
        t = r.tally()
        rows.append([f"[{r.spec.name}]({link}#{r.spec.name})", EVIDENCE_WORDS[r.spec.evidence],
                     " + ".join(r.kinds()) or "–", f"{t.within}/{t.scored}",
                     t.out_of_scope or "", STATUS[r.status]])
    header = ["figure", "evidence", "parex's numbers", "rows within / scored", "out of scope",
              "status"]
    return [headline(results), ""] + _table(header, rows)


def failures_block(results: list[FigureResult]) -> list[str]:
    """A line per failing figure: how many rows are outside, and the farthest of those (a row
    within a one-sided tolerance may lie farther from the paper's value and still hold)."""
    out = []
    for r in results:
        if r.status != "failed":
            continue
        t = r.tally()
        worst = r.worst([row for row in r.scored_rows() if not r.within(row)])
        far = (f"farthest: {worst.quantity}, parex / paper {fmt(worst.ratio)}" if worst
               else "no row scored")
        out.append(f"- `{r.spec.name}`: {t.scored - t.within} of {t.scored} rows outside; {far}")
    return out or ["- none"]


def figure_block(results: list[FigureResult], name: str, notes: bool = False) -> list[str]:
    """One figure's rows (a bracket's parex as its low – high ends), with their notes if asked."""
    result = next(r for r in results if r.spec.name == name)
    rows = [[row.quantity, fmt(row.paper), parex_text(row), fmt(row.ratio),
             verdict(result, row)] + ([row.note] if notes else []) for row in result.rows]
    header = ["quantity", "paper", "parex", "parex / paper", "within"] + (["note"] if notes
                                                                          else [])
    status = f"{STATUS[result.status]}: rows within / scored {result.tally().text()}"
    return _table(header, rows) + ["", status]


def render(args: str, results: list[FigureResult]) -> str:
    kind, *rest = args.split()
    if kind == "headline":
        lines = [headline(results)]
    elif kind == "scoreboard":
        lines = scoreboard_block(results, rest[0])
    elif kind == "failures":
        lines = failures_block(results)
    elif kind == "figure":
        lines = figure_block(results, rest[0], notes=rest[1:] == ["notes"])
    else:
        raise ValueError(f"generated block {args!r}: use headline, scoreboard LINK, failures or "
                         "figure NAME")
    return "\n".join(lines) + "\n"


def regenerate(text: str, results: list[FigureResult]) -> str:
    """`text` with every generated block rewritten from `results`."""
    return BLOCK.sub(lambda m: m.group(1) + render(m.group("args"), results) + m.group(4), text)


def documents(root: Path = ROOT) -> list[Path]:
    """README.md and every docs/*.md page that holds a generated block."""
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    return [p for p in pages if BLOCK.search(p.read_text())]


def merge(scoreboard: Path, figures: list[dict]) -> None:
    """Put `figures` (each `parex figure NAME --json`'s output) into the scoreboard's JSON in
    place of the figures of the same name, in the gallery's order."""
    from .runner import ordered_specs

    data = json.loads(scoreboard.read_text())
    figures = [{k: v for k, v in f.items() if k != "assumptions"}
               | {"files": {k: Path(v).name for k, v in f["files"].items()}} for f in figures]
    by_name = {f["name"]: f for f in data["figures"]} | {f["name"]: f for f in figures}
    data["figures"] = [by_name[s.name] for s in ordered_specs() if s.name in by_name]
    scoreboard.write_text(json.dumps(data, indent=1) + "\n")


def main(scoreboard: Path = SCOREBOARD, updates: list[Path] = ()) -> int:
    """scoreboard.md and .html, and every generated block, from the scoreboard's JSON (first
    updated with the figures' JSON files in `updates`)."""
    if updates:
        merge(scoreboard, [json.loads(Path(u).read_text().strip().splitlines()[-1])
                           for u in updates])
    results = load(scoreboard)
    write_pages(results, scoreboard.parent, json.loads(scoreboard.read_text())["seconds"])
    for page in documents():
        text = page.read_text()
        new = regenerate(text, results)
        if new != text:
            page.write_text(new)
            print(f"rewrote {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(updates=[Path(a) for a in sys.argv[1:]]))
