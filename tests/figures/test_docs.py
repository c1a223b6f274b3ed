"""The docs say what the committed scoreboard and benchmarks printed: every gallery table in
README.md and docs/*.md is a generated block equal to what docs/figures/scoreboard.json renders,
the committed scoreboard.md is that JSON's, its statuses are the scoring rule's, and the
predictor's speed in docs/predict.md is the committed benchmark record's."""

import json
import math
import re

import pytest

from parex.figures import docs, scoreboard

ROOT = docs.ROOT


@pytest.fixture(scope="module")
def committed():
    return scoreboard.load(docs.SCOREBOARD)


def test_every_generated_block_is_what_the_committed_scoreboard_renders(committed):
    pages = docs.documents()
    names = {p.relative_to(ROOT).as_posix() for p in pages}
    assert {"README.md", "docs/gallery.md", "docs/tensor3d.md", "docs/moe.md",
            "docs/local_learning.md", "docs/heterogeneous.md"} <= names
    for page in pages:
        text = page.read_text()
        assert docs.regenerate(text, committed) == text, (
            f"{page.name} is stale: run python -m parex.figures.docs")


def test_a_block_renders_the_headline_and_the_rows(committed):
    block = docs.render("scoreboard figures/scoreboard.md", committed)
    assert block.startswith(f"**{sum(r.status == 'passed' for r in committed)} of "
                            f"{len(committed)} figures pass.**")
    assert "[zero-table1](figures/scoreboard.md#zero-table1)" in block
    axonn = docs.render("figure axonn", committed)
    assert axonn.count("\n| ") == 1 + 8  # the separator and eight rows
    with pytest.raises(ValueError, match="use headline, scoreboard"):
        docs.render("scores", committed)


def test_the_committed_scoreboard_is_its_json_scored_by_the_rule(committed):
    data = json.loads(docs.SCOREBOARD.read_text())
    for figure, result in zip(data["figures"], committed):
        assert figure["status"] == result.status, figure["name"]  # from_json judges again
        t = result.tally()
        assert (figure["within"], figure["scored"], figure["out_of_scope"]) == (
            t.within, t.scored, t.out_of_scope)
    md = (docs.SCOREBOARD.parent / "scoreboard.md").read_text()
    assert md == scoreboard.markdown(committed, data["seconds"])


def test_no_page_states_a_figure_count_the_scoreboard_does_not(committed):
    passing = sum(r.status == "passed" for r in committed)
    for page in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        for n, total in re.findall(r"(\d+) of (\d+) figures pass", page.read_text()):
            assert (int(n), int(total)) == (passing, len(committed)), page.name


def test_the_readme_stays_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200


def _two_figures(x: float) -> int:
    return int(round(x, -int(math.floor(math.log10(x))) + 1))


def test_the_predictors_speed_in_the_docs_is_the_benchmarks_record():
    record = json.loads((ROOT / "docs" / "results" / "predict_speed.json").read_text())
    text = " ".join((ROOT / "docs" / "predict.md").read_text().split())
    cold, warm = re.search(r"about ([\d,]+) predictions per second on a first call and "
                           r"([\d,]+) once", text).groups()
    assert int(cold.replace(",", "")) == _two_figures(record["cold_per_s"])
    assert int(warm.replace(",", "")) == _two_figures(record["warm_per_s"])
    assert f"over {record['layouts']:,} layouts" in text
    assert record["layouts"] >= 100_000 and "predict_speed.py" in record["command"]


def test_a_single_figure_merges_into_the_scoreboard_in_the_gallery_order(tmp_path):
    """python -m parex.figures.docs A.json: A's figure replaces its namesake (or joins in the
    gallery's order); the others keep their committed rows."""
    board = tmp_path / "scoreboard.json"
    data = json.loads(docs.SCOREBOARD.read_text())
    first, *rest = data["figures"]
    board.write_text(json.dumps({"figures": rest, "seconds": data["seconds"]}))
    printed = first | {"notes": ["again"], "files": {"png": "somewhere/x.png"},
                       "assumptions": "..."}
    docs.merge(board, [printed])
    merged = json.loads(board.read_text())["figures"]
    assert [f["name"] for f in merged] == [f["name"] for f in data["figures"]]
    assert merged[0]["notes"] == ["again"] and merged[0]["files"] == {"png": "x.png"}
    assert "assumptions" not in merged[0] and merged[1:] == rest
