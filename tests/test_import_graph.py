"""The floor plan holds: no import cycle among parex's modules (imports inside functions
included), and loading data never starts a measurement."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "parex"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _owner(name: str, modules) -> str | None:
    """The module an imported name lives in: itself if a module, else the nearest parent."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """module -> the parex modules it imports, anywhere in its body."""
    modules = _modules()
    graph = {m: set() for m in modules}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                source = node.module or ""
                if node.level:
                    source = f"{base}.{source}" if source else base
                names = [f"{source}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                target = _owner(name, modules) if name.startswith("parex") else None
                if target and target != module:
                    graph[module].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_checker_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_among_parex_modules():
    graph = import_graph()
    assert "parex.predict.core" in graph["parex.predict"]  # the graph sees relative imports
    assert cycles(graph) == []


def test_values_sit_below_what_uses_them():
    """Reading a profile or a layout never reaches a calibration, a measurement or the CLI."""
    graph = import_graph()

    def reach(start):
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    for low in ("parex.hardware", "parex.layout", "parex.config", "parex.machine", "parex.units"):
        above = {m for m in reach(low)
                 if m.startswith(("parex.calibrate", "parex.measure", "parex.cli",
                                  "parex.explorer", "parex.predict"))}
        assert not above, f"{low} imports {sorted(above)}"
