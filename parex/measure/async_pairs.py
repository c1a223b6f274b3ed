"""What a compiled module overlaps: its asynchronous collectives and the compute scheduled
inside each.

A scheduled GPU module (`is_scheduled=true`) runs a collective as a pair, start ... done
(`all-reduce-start` / `-done`, `all-gather-start`, `collective-permute-start`, or `async-start` /
`async-done` around a computation holding a reduce-scatter or all-to-all: parex.measure.hlo).
The instructions XLA's latency-hiding scheduler places between the two run while the
collective is in flight: a pair with compute between (a fusion, a dot, a convolution, a
cuBLAS or cuDNN custom-call) is overlapped, one without is exposed. A collective that is not a
pair (the CPU backend's) is synchronous: nothing runs beside it.

This is what the predictor's conventions assume (parex.predict.overlap): the gpu convention
prices collectives behind compute where a stack overlaps them, xla-cpu prices every one serial,
as the CPU module runs them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .hlo import _COMPUTATION

_NAME = r"%?(?P<name>[\w.\-]+)\s*=\s*(?:\(.*?\)|\S+)\s+"
_START = re.compile(r"^\s*(?:ROOT\s+)?" + _NAME + r"(?P<op>all-reduce|all-gather|"
                    r"collective-permute|async)-start\((?P<args>.*)$")
_DONE = re.compile(r"\s(?:all-reduce|all-gather|collective-permute|async)-done\((?P<args>.*)$")
_SYNC = re.compile(r"^\s*(?:ROOT\s+)?" + _NAME +
                   r"(?P<op>all-reduce|all-gather|reduce-scatter|collective-permute|all-to-all)\(")
_COLLECTIVE_IN = re.compile(r"\s(all-reduce|all-gather|reduce-scatter|collective-permute|"
                            r"all-to-all)\(")
_COMPUTE = re.compile(r"\s(?:fusion|dot|convolution)\(|custom_call_target=\"__cu(?:blas|dnn)")
_CALLS = re.compile(r"\bcalls=%?([\w.\-]+)")


@dataclass(frozen=True)
class AsyncPair:
    """One asynchronous collective: its kind, where it runs, and the compute ops between its
    start and its done."""

    kind: str
    computation: str
    start: str
    compute_between: int

    @property
    def overlapped(self) -> bool:
        return self.compute_between > 0


def _bodies(hlo_text: str) -> dict[str, list[str]]:
    bodies, current = {}, None
    for line in hlo_text.splitlines():
        header = _COMPUTATION.match(line)
        if header and not line.startswith(" "):
            current = header.group(1)
            bodies[current] = []
        elif current is not None:
            bodies[current].append(line)
    return bodies


def async_pairs(hlo_text: str) -> list[AsyncPair]:
    """Every asynchronous collective of the module (an async-start wrapping anything but a
    collective is left out), in program order."""
    bodies = _bodies(hlo_text)
    out = []
    for computation, lines in bodies.items():
        open_pairs: dict[str, list] = {}  # start name -> [kind, compute ops so far]
        for line in lines:
            start = _START.match(line)
            done = _DONE.search(line)
            if start:
                kind = start.group("op")
                if kind == "async":
                    callee = _CALLS.search(line)
                    inner = _COLLECTIVE_IN.search("\n".join(bodies.get(callee.group(1), [])
                                                            if callee else []))
                    if inner is None:
                        continue
                    kind = inner.group(1)
                open_pairs[start.group("name")] = [kind, 0]
            elif done:
                name = next((n for n in open_pairs if re.search(rf"%{re.escape(n)}\b",
                                                                done.group("args"))), None)
                if name is not None:
                    kind, between = open_pairs.pop(name)
                    out.append(AsyncPair(kind, computation, name, between))
            elif _COMPUTE.search(line):
                for pair in open_pairs.values():
                    pair[1] += 1
    return out


def synchronous_collectives(hlo_text: str) -> int:
    """Collectives that run as one synchronous instruction (not a start/done pair, nor the
    collective an async-start wraps)."""
    bodies = _bodies(hlo_text)
    wrapped = {m.group(1) for lines in bodies.values() for line in lines
               if " async-start(" in line for m in [_CALLS.search(line)] if m}
    return sum(1 for name, lines in bodies.items() if name not in wrapped
               for line in lines if _SYNC.match(line))


def overlap_summary(hlo_text: str) -> dict:
    """{"pairs", "overlapped", "synchronous"}: the module's asynchronous collectives, those
    with compute scheduled inside them, and its synchronous ones."""
    pairs = async_pairs(hlo_text)
    return {"pairs": len(pairs), "overlapped": sum(p.overlapped for p in pairs),
            "synchronous": synchronous_collectives(hlo_text)}


__all__ = ["AsyncPair", "async_pairs", "overlap_summary", "synchronous_collectives"]
