"""The floor plan holds: no import cycle among parex's modules (imports inside functions
included), the rooms (subpackages and top-level modules) form a DAG in the order of ROOMS, and
loading data never starts a measurement."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "parex"

# parex's rooms from the ground floor up: a room imports only rooms listed before it
ROOMS = (
    # values: what everything reads
    "errors", "units", "files", "machine", "precision", "config", "layout", "record", "network",
    "nodes", "hardware", "cluster", "stacks", "defaults", "setting",
    # the model, and the executor that runs it on a mesh
    "model", "parallel", "validation", "executor", "launch",
    # what a layout does: measured, predicted, calibrated, studied
    "measure", "predict", "calibrate", "studies", "sweep",
    # features built on those, the front door that dispatches to DiLoCo, other frameworks'
    # configurations read and written (interop)
    "lowcomm", "entry", "interop", "plan", "hetero",
    # what people see
    "charts", "explorer", "figures", "cli",
)


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


def room(module: str) -> str | None:
    """The room of a module: its subpackage or top-level module under parex (None for the
    package itself, the public face that may import every room)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def upward_imports(graph: dict[str, set[str]], rooms=ROOMS) -> list[str]:
    """Every import from a room to one listed after it (or to a room the list lacks)."""
    rank = {name: i for i, name in enumerate(rooms)}
    found = []
    for module, targets in graph.items():
        here = room(module)
        for target in targets:
            there = room(target)
            if here is None or there is None or here == there:
                continue
            if here not in rank or there not in rank or rank[there] > rank[here]:
                found.append(f"{module} -> {target}")
    return sorted(found)


def test_the_room_checker_finds_an_upward_import():
    graph = {"parex.layout": {"parex.predict.core"}, "parex.predict.core": {"parex.layout"}}
    assert upward_imports(graph) == ["parex.layout -> parex.predict.core"]
    assert upward_imports({"parex.newroom": {"parex.layout"}}) == ["parex.newroom -> "
                                                                   "parex.layout"]


def test_rooms_form_a_dag_in_their_order():
    """No import from a lower room to a higher one; every room is placed on the plan."""
    graph = import_graph()
    assert {room(m) for m in graph} - {None} == set(ROOMS)
    assert upward_imports(graph) == []


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
