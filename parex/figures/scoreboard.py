"""The scoreboard: a headline (figures passing; rows within / rows scored, out of scope; how many
figures reproduce a paper's measurement, its analysis, or only check parex's wiring), one line per
figure (source, what its agreement is evidence of, which numbers are measured and which predicted,
rows within / scored, out of scope, worst ratio, pass/fail/missing, thumbnail), then every figure's
rows. Written as scoreboard.md (GitHub renders it), scoreboard.html (standalone) and
scoreboard.json (what docs/*.md's generated tables are rendered from: parex.figures.docs).
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

from ..measure.report import table
from .core import FigureResult, from_json
from .scoring import EVIDENCE, OUT_OF_SCOPE, WITHIN, Tally

STATUS = {"passed": "✅ pass", "failed": "❌ fail", "missing": "⬜ missing",
          "error": "⚠️ error", "skipped": "⏭ not run"}
MARKS = {WITHIN: "✓", OUT_OF_SCOPE: "out of scope"}
EVIDENCE_WORDS = {"measurement": "a paper's measurement", "analysis": "a paper's analysis",
                  "wiring": "wiring check"}


def verdict(result: FigureResult, row) -> str:
    return MARKS.get(result.verdict(row), "✗")


def fmt(value: float) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.3e}"


def parex_text(row) -> str:
    """parex's number, or a bracket's ends."""
    return f"{fmt(row.low)} – {fmt(row.high)}" if row.is_bracket else fmt(row.parex)


def summary(result: FigureResult) -> dict:
    """The scoreboard line of one figure, as strings."""
    t, worst = result.tally(), result.worst()
    return {"figure": result.spec.title, "name": result.spec.name, "source": result.spec.source,
            "evidence": EVIDENCE_WORDS[result.spec.evidence],
            "numbers": " + ".join(result.kinds()) or "–",
            "within": f"{t.within}/{t.scored}" if result.rows else "–",
            "out_of_scope": str(t.out_of_scope) if t.out_of_scope else "",
            "worst": fmt(worst.ratio) if worst else "–",
            "worst_quantity": worst.quantity if worst else "",
            "status": STATUS[result.status], "reason": result.reason}


def headline(results: list[FigureResult]) -> str:
    """Figures passing; rows within / scored and out of scope; which figures reproduce what."""
    rows = sum((r.tally() for r in results), Tally())
    passing = sum(r.status == "passed" for r in results)

    def count(evidence: str) -> tuple[int, int]:
        mine = [r for r in results if r.spec.evidence == evidence]
        return sum(r.status == "passed" for r in mine), len(mine)
    (m, m_all), (a, a_all), (w, w_all) = map(count, EVIDENCE)
    return (f"**{passing} of {len(results)} figures pass.** Rows within / rows scored: "
            f"{rows.within}/{rows.scored}; {rows.out_of_scope} out of scope (counted apart, "
            f"never as passes). {m} figures reproduce a paper's measurement (of {m_all} set "
            f"against one), {a} a paper's analysis (of {a_all}); {w} of {w_all} wiring checks "
            "pass (parex's number is the paper's own formula: not reproductions).")


def text_report(result: FigureResult) -> str:
    """The CLI's table of one figure's rows."""
    s = result.spec
    lines = [f"{s.title} — {result.status}", f"source: {s.source}",
             f"evidence: {s.evidence} ({EVIDENCE[s.evidence]})",
             f"tolerance: parex / paper in [{s.tolerance.lo:g}, {s.tolerance.hi:g}] "
             f"({s.tolerance.rule}); points may carry their own; a bracket hits only when it "
             "contains the paper's value", ""]
    if result.status == "missing":
        return "\n".join(lines + [f"missing: {result.reason}"])
    rows = [row_cells(result, r) for r in result.rows]
    lines.append(table(rows, ROW_COLUMNS))
    lines.append(f"rows within / scored: {result.tally().text()}")
    lines += [f"note: {n}" for n in remarks(result)]
    return "\n".join(lines)


SUMMARY_COLUMNS = ["figure", "source", "evidence", "parex's numbers", "rows within / scored",
                   "out of scope", "worst ratio", "status", ""]
ROW_COLUMNS = ["quantity", "paper", "parex", "ratio", "parex's", "within"]
INTRO = ("Each figure sets the paper's numbers beside parex's and their ratio, scored by one rule "
         "(parex.figures.scoring): a point is within its stated tolerance or not; a bracket "
         "(parex's range over settings the paper did not publish) is within only when it "
         "contains the paper's value; a row is *out of scope* only for a reason its figure "
         "declares before computing anything, and is counted apart, never as a pass. "
         "*predicted*: parex's analytic model, schedule tables or heterogeneous planner; "
         "*measured*: compiled or run on the emulated CPU mesh. Evidence: *a paper's "
         "measurement* (its hardware's numbers), *a paper's analysis* (its closed forms, "
         "computed parex's own way), or a *wiring check* (parex's number is the paper's own "
         "formula or constants: not a reproduction).")


def summary_cells(result: FigureResult) -> list[str]:
    """The scoreboard line of one figure (plain text; the thumbnail column left to the format)."""
    s = summary(result)
    status = s["status"] + (f": {s['reason']}" if s["reason"] else "")
    return [s["figure"], s["source"], s["evidence"], s["numbers"], s["within"],
            s["out_of_scope"], s["worst"], status]


def row_cells(result: FigureResult, row) -> list[str]:
    ratio = "–" if not math.isfinite(row.ratio) else f"{row.ratio:.4f}"
    return [row.quantity, fmt(row.paper), parex_text(row), ratio, row.kind,
            verdict(result, row)]


def remarks(result: FigureResult) -> list[str]:
    """The out-of-scope reasons, the rows that are weaker evidence than their figure, the
    notes, and why a figure is missing or an error."""
    scopes = [f"out of scope ({name}): {result.spec.scopes[name]}"
              for name in dict.fromkeys(x.scope for x in result.rows if x.scope)]
    weaker = [f"{x.quantity}: {result.evidence(x)} ({EVIDENCE[result.evidence(x)]})"
              for x in result.rows if result.evidence(x) != result.spec.evidence]
    return scopes + weaker + result.notes + ([result.reason] if result.reason else [])


def tolerance_text(result: FigureResult) -> str:
    t = result.spec.tolerance
    return f"Tolerance [{t.lo:g}, {t.hi:g}]: {t.rule}."


def _took(seconds: float | None) -> str:
    return "" if seconds is None else f"Generated by `parex figure --all` in {seconds / 60:.1f} " \
        "minutes."


def markdown(results: list[FigureResult], seconds: float | None = None) -> str:
    def line(cells):
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"
    lines = ["# parex figure gallery: scoreboard", "", INTRO, "", headline(results), "",
             line(SUMMARY_COLUMNS), line(["---"] * len(SUMMARY_COLUMNS))]
    for r in results:
        name, cells = r.spec.name, summary_cells(r)
        # Markdown, not raw HTML: MkDocs rewrites a Markdown image's path for the page's
        # directory URL (figures/scoreboard/), and checks it (docs/hooks/images.py)
        image = f'[![{name}]({name}.png){{ width="180" }}]({name}.svg)' if r.files else ""
        lines.append(line([f"[{cells[0]}](#{name})", *cells[1:], image]))
    lines += ["", _took(seconds)] if seconds is not None else []
    for r in results:
        lines += ["", f"## {r.spec.name}", "",
                  f"**{r.spec.title}** — {r.spec.source}. Evidence: "
                  f"{EVIDENCE_WORDS[r.spec.evidence]}. {tolerance_text(r)}", ""]
        if r.rows:
            lines += [line(ROW_COLUMNS), line(["---"] * len(ROW_COLUMNS))]
            lines += [line(row_cells(r, row)) for row in r.rows] + [""]
        lines += [f"- {text}" for text in remarks(r)]
    return "\n".join(lines) + "\n"


def html_page(results: list[FigureResult], seconds: float | None = None) -> str:
    e = html.escape

    def line(cells, tag="td"):
        return "<tr>" + "".join(f"<{tag}>{c}</{tag}>" for c in cells) + "</tr>"
    body = [line(map(e, SUMMARY_COLUMNS), "th")]
    for r in results:
        name, cells = r.spec.name, [e(c) for c in summary_cells(r)]
        image = (f"<a href='{name}.svg'><img src='{name}.png' width='200'></a>"
                 if r.files else "")
        body.append(line([f"<a href='#{name}'>{cells[0]}</a>", *cells[1:], image]))
    details = []
    for r in results:
        rows = "".join(line(map(e, row_cells(r, x))) for x in r.rows)
        notes = "".join(f"<li>{e(text)}</li>" for text in remarks(r))
        details.append(f"<h2 id='{r.spec.name}'>{e(r.spec.title)}</h2><p>{e(r.spec.source)}. "
                       f"{e(tolerance_text(r))}</p><table>{line(map(e, ROW_COLUMNS), 'th')}"
                       f"{rows}</table><ul>{notes}</ul>")
    took = f"<p>{e(_took(seconds))}</p>" if seconds is not None else ""
    style = ("body{font-family:sans-serif;max-width:1200px;margin:auto}table{border-collapse:"
             "collapse}td,th{border:1px solid #ccc;padding:3px 6px;font-size:13px}")
    lead = e(headline(results).replace("**", ""))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>parex scoreboard</title>"
            f"<style>{style}</style></head><body><h1>parex figure gallery: scoreboard</h1>"
            f"<p>{lead}</p><table>{''.join(body)}</table>{took}{''.join(details)}"
            "</body></html>\n")


def write_pages(results: list[FigureResult], out: Path, seconds: float | None = None) -> dict:
    """scoreboard.md and scoreboard.html in `out` (e.g. again from a committed JSON)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {k: out / f"scoreboard.{k}" for k in ("md", "html")}
    paths["md"].write_text(markdown(results, seconds))
    paths["html"].write_text(html_page(results, seconds))
    return paths


def write(results: list[FigureResult], out: Path, seconds: float | None = None) -> dict:
    """scoreboard.md, scoreboard.html and scoreboard.json (every figure's JSON) in `out`."""
    paths = write_pages(results, out, seconds) | {"json": Path(out) / "scoreboard.json"}
    data = {"figures": [r.to_json() for r in results], "seconds": seconds}
    for figure in data["figures"]:  # paths relative to the scoreboard
        figure["files"] = {k: Path(v).name for k, v in figure["files"].items()}
    paths["json"].write_text(json.dumps(data, indent=1) + "\n")
    return paths


def load(path: Path) -> list[FigureResult]:
    """The figures of a scoreboard.json (e.g. the committed docs/figures/scoreboard.json)."""
    return [from_json(f) for f in json.loads(Path(path).read_text())["figures"]]


def summary_frame(results: list[FigureResult]):
    """One row per figure: the scoreboard's columns, as a DataFrame."""
    import pandas as pd

    columns = ["name", "evidence", "numbers", "within", "out_of_scope", "worst", "status"]
    return pd.DataFrame([summary(r) for r in results])[columns].set_index("name")
