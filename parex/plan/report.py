"""A Plan as text (the `parex plan` table) and as JSON (`parex plan --json`).

Both read only what every Plan offers — its ranked rows through `entry(i)`, the counts and the
timing — not how its candidates were produced.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..measure.report import Table, TextReport, table
from ..units import format_bytes, format_count, format_seconds
from .tensor3d import best_3d, disagreement

if TYPE_CHECKING:
    import pandas as pd


def plan_json(plan) -> dict:
    """The JSON of `parex plan --json`: the search, then the top layouts best first."""
    cluster = plan.cluster
    rate = plan.layouts_considered / plan.seconds if plan.seconds else 0.0
    return {
        "model": plan.model.name, "hardware": cluster.chip.name, "nodes": cluster.nodes,
        "n_devices": cluster.n_devices, "global_batch": plan.train.global_batch,
        "seq_len": plan.train.seq_len or plan.model.seq_len,
        "memory_cap_bytes": plan.memory_cap, "objective": plan.objective,
        "candidates": plan.n_candidates, "layouts_considered": plan.layouts_considered,
        "layouts_fitting": int(plan.fits.sum()), "layouts_per_s": rate, "seconds": plan.seconds,
        "rejected_by_validation": plan.rejected,
        "assumptions": plan.setting.to_json() | {"remat": ",".join(plan.remats),
                                                  "microbatch": None},
        "top": [{"rank": r + 1} | plan.entry(i) for r, i in enumerate(plan.top)],
        # AxoNN's 3D layouts and its own model beside parex's (plan.tensor3d)
        "top_3d": [plan.entry(i) for i in best_3d(plan)], "axonn": disagreement(plan),
        "top_3d_in_stages": [plan.entry(i) for i in best_3d(plan, stages=True)],
    }


def _ms(seconds: float) -> str:
    return format_seconds(seconds)


def plan_rows(plan, which=None) -> list[list]:
    rows = []
    for r, i in enumerate(plan.top if which is None else which):
        e = plan.entry(i)
        st, mem = e["step_time_s"], e["memory_bytes_per_device"]
        alike = f" (+{e['equivalent_layouts']} alike)" if e["equivalent_layouts"] else ""
        axonn = e.get("axonn_step_time_s")
        rows.append([f"{r + 1:>2}  {e['layout']}{alike}", e["remat"], e["microbatch"],
                     _ms(st["total"]), _ms(axonn) if axonn is not None else "–",
                     _ms(st["compute"]), _ms(st["exposed_comm"]),
                     _ms(st["bubble"]),
                     format_bytes(mem["total"]), format_bytes(e["memory_headroom_bytes"]),
                     f"{e['mfu']:.1%}", e["bottleneck"]])
    return rows


HEADER = [" #  layout", "remat", "b", "step", "AxoNN step", "compute", "exposed comm", "bubble",
          "memory/dev", "headroom", "MFU", "bottleneck"]


def plan_table(plan, which=None) -> Table:
    """The rows as a table; the AxoNN column only where AxoNN models one of them (a column of
    dashes would push MFU and the bottleneck out of a notebook's view)."""
    rows, header = plan_rows(plan, which), HEADER
    j = HEADER.index("AxoNN step")
    if all(row[j] == "–" for row in rows):
        rows, header = [row[:j] + row[j + 1:] for row in rows], HEADER[:j] + HEADER[j + 1:]
    return table(rows, header)


def plan_report(plan, defaulted=()) -> TextReport:
    """The header lines (the second: the plan's assumptions, and which of them are defaults
    rather than flags), the ranked table and how long the search took."""
    c, model = plan.cluster, plan.model
    head = (f"parex plan · {model.name} ({format_count(model.n_params)} parameters) · "
            f"{c.n_devices} × {c.chip.name} "
            f"({c.nodes} node{'s' if c.nodes > 1 else ''}) · global batch "
            f"{plan.train.global_batch} × {plan.train.seq_len or model.seq_len} tokens · cap "
            f"{format_bytes(plan.memory_cap)} per device · objective {plan.objective}\n"
            f"assumptions  {plan.describe()}"
            + (f" (defaults: {', '.join(defaulted)})" if defaulted else ""))
    rate = plan.layouts_considered / plan.seconds if plan.seconds else 0.0
    tail = (f"{plan.layouts_considered:,} layouts considered ({plan.n_candidates:,} enumerated), "
            f"{int(plan.fits.sum()):,} fit; enumerate + predict + rank in {plan.seconds:.2f} s "
            f"= {rate:,.0f} layouts/s. b = sequences per microbatch per replica; alike = layouts "
            f"predicted the same (e.g. data=N,zero=3 and fsdp=N); `parex predict` of a row with "
            f"the same flags and the row's (`--json` gives them: flags) gives its numbers; "
            f"bottleneck = memory when "
            f"under 10% headroom, else the largest part of the step.")
    extra = []
    for title, rows in (("the fastest 3D tensor layouts (AxoNN's tensor=XxYxZ):",
                         best_3d(plan)),
                        ("the fastest 3D tensor layouts inside pipeline stages:",
                         best_3d(plan, stages=True))):
        extra += ["", title, plan_table(plan, rows)] if rows else []
    return TextReport(head, "", plan_table(plan), *extra, "",
                      tail + axonn_line(plan))


def axonn_line(plan) -> str:
    """Where AxoNN's model (compute + its communication, parex.predict.axonn) ranks the rows it
    models otherwise than parex."""
    d = disagreement(plan)
    if d is None:
        return ""
    verdict = ("agree on the best" if d["agree"] else
               f"disagree: AxoNN's best is {d['axonn_best']['layout']} "
               f"({d['axonn_best']['remat']}), parex's {d['parex_best']['layout']} "
               f"({d['parex_best']['remat']})")
    return (f" AxoNN step = parex's compute + AxoNN's communication model, nothing overlapped "
            f"(– : pipelines and sequence parallelism, which it does not model); over parex's "
            f"first {d['rows_compared']} rows it models the two {verdict}; Kendall's tau "
            f"{d['kendall_tau']:.2f} ({len(d['flipped'])} pairs ordered the other way).")


def plan_frame(plan, rows) -> pd.DataFrame:
    """One tidy row per plan row: layout, remat, b, step time and its parts, memory, MFU."""
    import pandas as pd

    records = []
    for i in rows:
        e = plan.entry(int(i))
        records.append({"row": int(i), "layout": e["layout"], "remat": e["remat"],
                        "microbatch": e["microbatch"], "mfu": e["mfu"], "fits": e["fits"],
                        "bottleneck": e["bottleneck"]}
                       | {f"step_{k}_s": v for k, v in e["step_time_s"].items()}
                       | {f"memory_{k}_bytes": v for k, v in e["memory_bytes_per_device"].items()})
    return pd.DataFrame(records)


def chart_frame(plan, sample: int = 1500, seed: int = 0) -> pd.DataFrame:
    """What the Pareto chart draws: a random sample of the fitting rows, the Pareto front and
    the top rows, each row once, with `kind` (layout, pareto, top) and `rank` (top only)."""
    import numpy as np

    fitting = np.nonzero(plan.fits)[0]
    rng = np.random.default_rng(seed)
    picked = rng.choice(fitting, min(sample, len(fitting)), replace=False)
    front, top = set(plan.pareto().tolist()), list(plan.top)
    rows = list(dict.fromkeys([*top, *sorted(front), *picked.tolist()]))
    df = plan_frame(plan, rows)
    df["kind"] = ["top" if r in top else "pareto" if r in front else "layout" for r in rows]
    df["on_front"] = [r in front for r in rows]
    df["rank"] = [top.index(r) + 1 if r in top else None for r in rows]
    return df


__all__ = ["chart_frame", "plan_frame", "plan_json", "plan_report", "plan_rows", "plan_table"]
