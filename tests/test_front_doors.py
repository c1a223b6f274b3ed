"""The README and the docs site's home page share one reading path: the same rows, the docs
pages linked relative to docs/ on the site, to the repository root in the README."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def reading_path(path: Path) -> list[str]:
    """The rows of the table under a page's "## Reading path" heading."""
    text = path.read_text().split("## Reading path", 1)[1]
    rows = []
    for line in text.splitlines()[1:]:
        if line.startswith("|"):
            rows.append(line)
        elif rows:
            break
    return rows


def test_readme_and_docs_home_share_one_reading_path():
    readme = reading_path(ROOT / "README.md")
    home = reading_path(ROOT / "docs" / "index.md")
    assert len(readme) > 10
    assert [row.replace("](docs/", "](") for row in readme] == home
