"""MkDocs hook: the API reference shows the curated public API, not whole packages. A page line
`<!-- public: parex.charts -->` becomes one mkdocstrings block per name of that package's
`__all__`, each rendered from the module that defines it. Names are read statically (ast), as
mkdocstrings reads the docstrings: nothing is imported."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARK = "<!-- public: "


def public_names(package: str) -> list[tuple[str, str]]:
    """(name, the module that defines it) for each name of `package`'s __all__: a name its
    __init__ imports comes from that module; one defined there from the package itself."""
    path = ROOT.joinpath(*package.split("."), "__init__.py")
    tree = ast.parse(path.read_text())
    home, names = {}, []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            source = f"{base}.{node.module}" if node.module else base
            home |= {(a.asname or a.name): f"{source}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__"
                                                  for t in node.targets):
            names = ast.literal_eval(node.value)
    return [(name, home.get(name, f"{package}.{name}")) for name in names]


def block(path: str) -> str:
    return (f"::: {path}\n    options:\n      heading_level: 3\n      show_root_full_path: false"
            f"\n      show_submodules: false\n")


def on_page_markdown(markdown, page, config, files):
    if MARK not in markdown:
        return markdown
    out = []
    for line in markdown.splitlines():
        if line.startswith(MARK):
            package = line[len(MARK):].split()[0]
            out += [block(path) for _, path in public_names(package)]
        else:
            out.append(line)
    return "\n".join(out) + "\n"
