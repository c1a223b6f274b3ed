"""Collectives read from compiled HLO text: kind, count (loop trip counts included), bytes,
group size and the mesh axes each one spans.

Bytes convention (shared with the predictor): the size of the full logical buffer one device
contributes or receives, i.e. the all-reduced array, the gathered result of an all-gather, the
unscattered input of a reduce-scatter, the array sent by a collective-permute or all-to-all.

GPU modules run collectives asynchronously, as pairs: `all-reduce-start` / `all-reduce-done`,
`all-gather-start` / `-done`, `collective-permute-start` / `-done`, and others (reduce-scatter,
all-to-all) wrapped in `async-start` / `async-done` around a computation that holds the plain op.
Each pair counts once: the start (or the wrapped op), never the done. A start's shape is a tuple
whose second element is the result: (operand, result) for a gather, (operand, result, u32[],
u32[]) for a permute; an all-reduce-start's is the result itself. Fusions and async wrappers call
their computations (`calls=`), which run as often as the instruction that calls them, so dots
and collectives inside them are counted with it. cuBLAS matmuls are custom-calls
(`__cublas$gemm`, `__cublas$lt$matmul`) whose dimension numbers sit in the backend config.

Nothing is guessed: a while loop without a known trip count, or a collective whose device groups
cannot be read, raises HloError naming the instruction, instead of counting one trip or zero
bytes. (parex's own steps have neither; a module that does needs the parser extended.) A
conditional's branches count as taken every time, an upper bound, unless the caller says how
often each is taken (`branch_shares`, read from a pipeline's schedule table).
"""

from __future__ import annotations

import re
from collections import defaultdict

import numpy as np

from ..record import KINDS, Collective

DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4,
               "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16,
               "f8e4m3fn": 1, "f8e5m2": 1}

_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s*\(.*\{\s*$")
_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(?P<shape>\(.*?\)|\S+)\s+"
    r"(?P<op>all-reduce|all-gather|reduce-scatter|collective-permute|all-to-all)(?P<start>-start)?\(")
_ARRAY = re.compile(r"\b([a-z][a-z0-9]*)\[([\d,]*)\]")  # f32[..], f8e4m3fn[..]
_CALLEE = re.compile(r"\b(?:body|condition|calls|true_computation|false_computation)=%?([\w.\-]+)")
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"')
_ASYNC_END = re.compile(r"\s(?:async-done|async-update)\(")
_GEMM = re.compile(r"custom-call\((?P<args>.*?)\).*custom_call_target=\"__cublas\$(?:lt\$)?"
                   r"(?:gemm|matmul)")
_GEMM_CONTRACTING = re.compile(r'"lhs_contracting_dimensions":\[([^\]]*)\]')


class HloError(RuntimeError):
    """The compiled module holds something the parser cannot count (an internal limit of parex,
    not bad input)."""


def shape_bytes(shape: str) -> int:
    """Bytes of an HLO shape such as `f32[16,128]{1,0}` or a tuple `(f32[4], bf16[2,2])`."""
    total = 0
    for dtype, dims in _ARRAY.findall(shape):
        if dtype in DTYPE_BYTES:
            total += DTYPE_BYTES[dtype] * int(np.prod([int(d) for d in dims.split(",") if d]))
    return total


def tuple_elements(shape: str) -> list[str]:
    """The top-level elements of a tuple shape: '((f32[2], f32[3]), f32[4])' -> ['(f32[2],
    f32[3])', 'f32[4]']; a non-tuple shape is its own one element."""
    shape = shape.strip()
    if not shape.startswith("("):
        return [shape]
    parts, depth, start = [], 0, 1
    for i, ch in enumerate(shape):
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(ch, 0)
        if (ch == "," and depth == 1) or (ch == ")" and depth == 0):
            parts.append(shape[start:i].strip())
            start = i + 1
    return [p for p in parts if p]


def _result_bytes(shape: str, op: str, is_async: bool) -> int:
    """Async starts (GPU) return (operand, result, ...) for gathers and permutes: count the
    result, its second element (a tuple itself when several arrays are gathered at once)."""
    elements = tuple_elements(shape)
    if is_async and op != "all-reduce" and len(elements) >= 2:
        return shape_bytes(elements[1])
    return shape_bytes(shape)


def _iota(text: str) -> np.ndarray:
    """`[4,2]<=[2,4]T(1,0)` -> the device array of XLA's iota tile assignment."""
    m = re.match(r"\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", text)
    out_shape = [int(x) for x in m.group(1).split(",")]
    ids = np.arange(int(np.prod([int(x) for x in m.group(2).split(",")])))
    ids = ids.reshape([int(x) for x in m.group(2).split(",")])
    if m.group(3):
        ids = ids.transpose([int(x) for x in m.group(3).split(",")])
    return ids.reshape(out_shape)


def device_groups(line: str, n_devices: int) -> list[list[int]] | None:
    """The groups of device ids in an instruction, from any of XLA's syntaxes; None if
    unreadable (parse_collectives then raises HloError)."""
    pairs = re.search(r"source_target_pairs=\{(.*?)\}\}", line)
    if pairs:
        return [[int(a), int(b)] for a, b in re.findall(r"\{(\d+),(\d+)", pairs.group(1) + "}")]
    m = re.search(r"replica_groups=mesh\[([^\]]*)\]"
                  r"(?:, device_ids=\((\[[\d,]+\](?:T\([\d,]+\))?)\))?\s*\{([^}]*)\}", line)
    if m:
        names = re.findall(r"'(\w+)'=(\d+)", m.group(1))
        shape = [int(s) for _, s in names]
        order = m.group(2) or f"[{n_devices}]"
        ids = _iota(f"[{n_devices}]<={order}").reshape(shape)
        chosen = re.findall(r"'(\w+)'", m.group(3))
        if any(":" in part for part in m.group(3).split(",")):
            return None  # sub-axis groups: rare, not read
        keep = [i for i, (name, _) in enumerate(names) if name in chosen]
        rest = [i for i in range(len(names)) if i not in keep]
        ids = ids.transpose(rest + keep).reshape(-1, int(np.prod([shape[i] for i in keep])))
        return ids.tolist()
    m = re.search(r"replica_groups=(\[[\d,]+\]<=\[[\d,]+\](?:T\([\d,]+\))?)", line)
    if m:
        return _iota(m.group(1)).tolist()
    m = re.search(r"replica_groups=\{((?:\{[\d,]*\},?)*)\}", line)
    if m:
        groups = [[int(x) for x in g.split(",") if x]
                  for g in re.findall(r"\{([\d,]*)\}", m.group(1))]
        return groups or [list(range(n_devices))]
    return None


def spanned_axes(groups, mesh_shape: tuple[int, ...], axis_names: tuple[str, ...]) -> tuple:
    """Mesh axes along which devices in a group differ (ids index the mesh's devices row-major)."""
    varying = set()
    for group in groups:
        coords = np.array(np.unravel_index(group, mesh_shape)).T
        varying |= {axis_names[i] for i in np.nonzero(coords.min(0) != coords.max(0))[0]}
    return tuple(a for a in axis_names if a in varying)


def _trip_count(line: str, computation: str) -> int:
    found = _TRIP.search(line)
    if found is None:
        raise HloError(f"a while loop in computation {computation!r} has no known_trip_count, so "
                       f"the collectives and matmuls inside it cannot be counted per step: "
                       f"{line.strip()[:160]}")
    return int(found.group(1))


def _multiplicities(hlo_text: str, branch_shares=None) -> tuple[dict, dict]:
    """Per computation: its instruction lines, and how often it runs per step. A conditional's
    branches each count as run every time, unless `branch_shares` gives, for conditionals with
    that many branches, the share of executions that take each one."""
    bodies, calls, entry = defaultdict(list), defaultdict(list), None
    current = None
    for line in hlo_text.splitlines():
        header = _COMPUTATION.match(line)
        if header and not line.startswith(" "):
            current = header.group(1)
            entry = current if line.startswith("ENTRY") else entry
            continue
        if current is None:
            continue
        bodies[current].append(line)
        if _ASYNC_END.search(line):
            continue  # an async pair's end names the computation its start already ran
        trips = _trip_count(line, current) if " while(" in line else 1
        for callee in _CALLEE.findall(line):
            calls[current].append((callee, trips))
        for group in _BRANCHES.findall(line):
            names = [c.strip().lstrip("%") for c in group.split(",")]
            known = branch_shares is not None and len(branch_shares) == len(names)
            calls[current] += zip(names, branch_shares if known else [1] * len(names))
    runs = defaultdict(float)

    def visit(name, times):
        runs[name] += times
        for callee, trips in calls.get(name, []):
            visit(callee, times * trips)

    if entry:
        visit(entry, 1)
    return bodies, runs


def parse_collectives(hlo_text: str, mesh_shape: tuple[int, ...], axis_names: tuple[str, ...],
                      branch_shares=None) -> list[Collective]:
    """Every collective in a compiled module, merged by (kind, bytes, group size, axes), counted
    as often as it runs (`branch_shares`: see _multiplicities)."""
    n_devices = int(np.prod(mesh_shape))
    bodies, runs = _multiplicities(hlo_text, branch_shares)
    merged = defaultdict(float)
    for name, lines in bodies.items():
        for line in lines:
            m = _INSTRUCTION.match(line)
            if not m or not runs.get(name):
                continue
            groups = device_groups(line, n_devices)
            if not groups:
                raise HloError(f"cannot read the device groups of a {m.group('op')} in "
                               f"computation {name!r}, so neither its bytes nor its mesh axes "
                               f"are known: {line.strip()[:160]}")
            size, axes = len(groups[0]), spanned_axes(groups, mesh_shape, axis_names)
            nbytes = _result_bytes(m.group("shape"), m.group("op"), bool(m.group("start")))
            if m.group("op") == "reduce-scatter":
                nbytes *= size
            merged[(m.group("op"), nbytes, size, axes)] += runs[name]
    return [Collective(kind, round(count), nbytes, size, axes)
            for (kind, nbytes, size, axes), count in sorted(merged.items()) if round(count)]


_DEFINITION = re.compile(
    r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(\(.*?\)|\S+)\s+([\w\-]+)\((.*)$")
# an operand, with the shape GPU modules print before it or without: "f32[8,4]{1,0} %x" or "%x"
_OPERAND = re.compile(
    r"^\s*(?:(?P<shape>[a-z][a-z0-9]*\[[\d,]*\])(?:\{[^}]*\})?\s+)?%?(?P<name>[\w.\-]+)")


def _dims(shape: str) -> list[int]:
    """Dims of a shape's first array (a tuple's first element: a gemm's result)."""
    array = _ARRAY.search(shape)
    return [int(d) for d in array.group(2).split(",") if d] if array else []


def _instructions(lines):
    """Each instruction of one computation's lines: (its _DEFINITION match, its result's dims,
    the dims of every instruction defined so far, itself included)."""
    shapes = {}  # instruction name -> dims, within this computation
    for line in lines:
        m = _DEFINITION.match(line)
        if m:
            shapes[m.group(1)] = _dims(m.group(2))
            yield m, shapes[m.group(1)], shapes


def _operand_dims(operand: str, shapes: dict, default: list[int]) -> list[int]:
    """Dims of an operand as the module prints it ("f32[8,4]{1,0} %x", or "%x", looked up in
    `shapes`); `default` when neither tells."""
    o = _OPERAND.match(operand)
    if not o:
        return default
    return _dims(o.group("shape")) if o.group("shape") else shapes.get(o.group("name"), default)


def _matmul(line: str, op: str, dims: list[int], args: str, shapes: dict) -> float:
    """FLOPs of one dot or cuBLAS gemm custom-call: 2 · |output| · |contracted dims of lhs|;
    0 for any other instruction."""
    if op == "dot":
        contracting = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", line)
    elif op == "custom-call" and _GEMM.search(line):
        contracting = _GEMM_CONTRACTING.search(line)
    else:
        return 0.0
    lhs_dims = _operand_dims(args, shapes, [1])
    picked = contracting.group(1).replace('"', "").split(",") if contracting else []
    k = np.prod([lhs_dims[int(i)] for i in picked if i.strip()])
    return 2.0 * float(np.prod(dims)) * float(k)


def transposing_reads(hlo_text: str, shape: str, dtype: str = "f32") -> int:
    """Fused computations that take a `dtype[shape]` parameter ("16,128,128") laid out other
    than row-major and copy it into row-major order: reads that stride through memory, each
    time the fusion runs (XLA:CPU lays a collective's result out with its gathered dimension
    major: parallel.sharding.gather_along)."""
    reads = 0
    for computation in hlo_text.split("\n\n"):
        for name, layout in re.findall(rf"%(\S+) = {dtype}\[{shape}\]\{{([\d,]+)\}} "
                                       r"parameter\(", computation):
            dims = [int(d) for d in layout.split(",")]
            copied = re.search(rf"copy\(%{re.escape(name)}\)", computation)
            reads += bool(copied) and dims != sorted(dims, reverse=True)
    return reads


def dot_shapes(hlo_text: str) -> list[tuple[tuple[int, ...], ...]]:
    """(lhs, rhs, result) dims of every dot in the module, those inside fusions included, each
    instruction once (not weighted by how often its computation runs)."""
    return [tuple(tuple(_operand_dims(a, shapes, [])) for a in m.group(4).split(",")[:2])
            + (tuple(dims),)
            for computation in hlo_text.split("\n\n")
            for m, dims, shapes in _instructions(computation.splitlines()) if m.group(3) == "dot"]


def matmul_flops(hlo_text: str, branch_shares=None) -> float:
    """FLOPs of every dot (and cuBLAS gemm) per step, loop trip counts and the computations that
    fusions call included: 2 · |output| · |contracted dims|. XLA's cost analysis counts a loop
    body once; this counts it as often as it runs."""
    bodies, runs = _multiplicities(hlo_text, branch_shares)
    total = 0.0
    for name, lines in bodies.items():
        if not runs.get(name):
            continue
        for m, dims, shapes in _instructions(lines):
            total += _matmul(m.group(0), m.group(3), dims, m.group(4), shapes) * runs[name]
    return total
