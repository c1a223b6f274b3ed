"""`parex figure`: the paper-figure gallery.

    parex figure --list
    parex figure NAME [--out DIR] [--json]          one figure; PNG + SVG in DIR
    parex figure --all --out docs/figures [--json]  every figure + scoreboard.md / .html
    parex figure --all --fast ...                   only the fast (predicted) figures

A figure's emulated devices are requested before JAX starts; `--all` runs each slow figure in
its own process (parex.figures.runner).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from ..errors import InputError
from ..measure.report import table


# a figure reproduces a paper: its model, hardware, batch, dtype and recipe are the paper's, set
# in parex.figures, never parex.defaults
ASSUMPTIONS = "each figure's paper's own setup (parex.figures), not parex.defaults"


def cmd_list() -> int:
    from ..figures.runner import ordered_specs

    rows = [[s.name, "slow" if s.slow else "fast", s.devices or "-", s.title]
            for s in ordered_specs()]
    print(table(rows, ["figure", "cost", "devices", "what it reproduces"]))
    return 0


def cmd_one(args) -> int:
    from ..figures.runner import compute_and_save, spec
    from ..figures.scoreboard import text_report
    from ..executor.mesh import emulate_devices

    s = spec(args.name)
    if s.devices:
        emulate_devices(s.devices)  # before anything uses JAX
    result = compute_and_save(s, Path(args.out) if args.out else None)
    if args.json:
        print(json.dumps(result.to_json() | {"assumptions": ASSUMPTIONS}))
    else:
        print(f"assumptions  {ASSUMPTIONS}\n{text_report(result)}")
    if result.files and not args.json:
        print("\nwrote " + ", ".join(str(p) for p in result.files.values()))
    return 1 if result.status in ("failed", "error") else 0


def cmd_all(args) -> int:
    from ..figures import scoreboard
    from ..figures.runner import run_all

    out = Path(args.out or "docs/figures")
    start = time.perf_counter()

    def save(results):  # after every figure: an interrupted run keeps what it finished
        scoreboard.write(results, out, time.perf_counter() - start)
    results = run_all(out, fast=args.fast, timeout=args.timeout, done=save)
    seconds = time.perf_counter() - start
    paths = scoreboard.write(results, out, seconds)
    if args.json:
        print(json.dumps({"figures": [r.to_json() for r in results], "seconds": seconds,
                          "assumptions": ASSUMPTIONS}))
    else:
        print(f"assumptions  {ASSUMPTIONS}")
        rows = [[s["name"], s["numbers"], s["within"], s["out_of_scope"], s["worst"],
                 s["status"]] for s in map(scoreboard.summary, results)]
        print(table(rows, ["figure", "parex's numbers", "within / scored", "out of scope",
                           "worst ratio", "status"]))
        print(scoreboard.headline(results).replace("**", ""))
        print(f"\n{len(results)} figures in {seconds:.0f} s; wrote {paths['md']} and "
              f"{paths['html']}")
    return 1 if any(r.status in ("failed", "error") for r in results) else 0


def cmd_figure(args) -> int:
    if args.list:
        return cmd_list()
    if args.all:
        return cmd_all(args)
    if not args.name:
        raise InputError("name a figure (parex figure --list shows them), or pass --all")
    return cmd_one(args)


def add_figure(sub) -> None:
    p = sub.add_parser("figure", help="reproduce a paper figure: the paper's numbers beside "
                       "parex's, their ratio and a tolerance; --all writes the scoreboard")
    p.add_argument("name", nargs="?", help="the figure (see --list)")
    p.add_argument("--list", action="store_true", help="list the figures")
    p.add_argument("--all", action="store_true", help="every figure, and the scoreboard")
    p.add_argument("--out", default=None,
                   help="folder for the PNG and SVG (and the scoreboard with --all; default "
                        "docs/figures there)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--fast", action="store_true", help="with --all: leave out the slow figures")
    p.add_argument("--timeout", type=float, default=1800,
                   help="with --all: seconds each slow figure may take (default 1800)")
    p.set_defaults(func=cmd_figure)


COMMANDS = [add_figure]
