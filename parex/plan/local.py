"""Local-learning pipelines beside a plan's backprop ones (`parex plan --allow-local`).

    result = plan(model, train, "a100-80gb", nodes=4)
    rows = local_alternatives(result, k=3)   # ranked by result.objective, never in result.top

schedule=local changes the optimisation: each stage learns from its own loss and no gradient
crosses a stage boundary (parex.parallel.local), so the model it trains is not the one end-to-end
backprop trains. `plan` therefore ranks backprop layouts only and never picks a local one. Asked
for them, this module takes the plan's pipeline layouts (stage > 1, one chunk per stage), best
first, and folds each into what the local executor runs and parex.predict.local models (seq
into data, sp off, ZeRO-2/3 to ZeRO-1, layers split evenly: validation.rules.local_fold), with the
same stages, microbatches and remat. It predicts each distinct one with schedule=local and with
1F1B on the same mesh, keeps those that fit under the plan's cap and ranks them by the plan's
objective. Each row says where it would rank among the backprop rows and carries
`changes_optimisation: True`.
"""

from __future__ import annotations

import numpy as np

from ..layout import Layout, LayoutError
from ..predict import predict
from ..validation.checks import check_layout
from ..validation.rules import local_fold
from .search import Plan, layout_text

POOL = 40  # backprop pipeline layouts (distinct meshes, best first) turned into local ones
NOTE = ("changes the optimisation: each stage learns from its own loss (schedule=local), "
        "not the model end-to-end backprop trains; never picked, shown because asked")


def pipeline_rows(plan: Plan, pool: int = POOL) -> list[tuple[int, Layout]]:
    """(row, its local layout) for the plan's first `pool` fitting pipeline rows (best first)
    with one chunk per stage, one per distinct local layout and remat."""
    cols, seen, rows = plan.columns, set(), []
    for i in plan.order:
        if cols["stage"][i] < 2 or cols["virtual_stages"][i] != 1:
            continue
        local = local_fold(plan.layout(int(i))).replace(schedule="local")
        key = (local, plan.train_of(int(i)).remat)
        if key not in seen:
            seen.add(key)
            rows.append((int(i), local))
        if len(rows) == pool:
            break
    return rows


def _score(objective: str, step_s: np.ndarray, memory: np.ndarray) -> np.ndarray:
    """Lower is better under the plan's objective (MFU ranks as step time: same model FLOPs)."""
    return memory if objective == "memory" else step_s


def local_alternatives(plan: Plan, k: int = 5, pool: int = POOL) -> list[dict]:
    """Up to k local pipelines, best first under plan.objective (module docstring)."""
    cols, n = plan.columns, plan.cluster.n_devices
    fit = plan.order  # the fitting backprop rows, ranked
    backprop = _score(plan.objective, cols["step_time_s"][fit], cols["memory_total_bytes"][fit])
    out = []
    for i, layout in pipeline_rows(plan, pool):
        train = plan.train_of(i)
        try:
            check_layout(layout, plan.model, train, n)  # what the local model covers
        except LayoutError:
            continue
        p = predict(plan.model, train, layout, plan.cluster, **plan.settings)
        same_mesh = predict(plan.model, train, layout.replace(schedule="1f1b"), plan.cluster,
                            **plan.settings)
        memory = p.memory_bytes_per_device["total"]
        if memory > plan.memory_cap:
            continue
        score = float(_score(plan.objective, np.array(p.step_time_s["total"]),
                             np.array(memory)))
        out.append({"layout": layout_text(layout), "remat": train.remat,
                    "step_time_s": dict(p.step_time_s), "memory_bytes_per_device":
                    dict(p.memory_bytes_per_device), "mfu": p.mfu,
                    "from_layout": layout_text(plan.layout(i)),
                    "backprop_step_time_s": same_mesh.step_time_s["total"],
                    "would_rank": int(np.searchsorted(np.sort(backprop), score)) + 1,
                    "changes_optimisation": True, "note": NOTE, "_score": score})
    out.sort(key=lambda row: row["_score"])
    return [{k: v for k, v in row.items() if k != "_score"} for row in out[:k]]


def local_report(rows: list[dict]) -> str:
    """The table below `parex plan`'s: local pipelines, the rank each would take and 1F1B's
    step on the same mesh."""
    from ..measure.report import table
    from ..units import format_bytes, format_seconds

    if not rows:
        return "local-learning pipelines: none of the plan's pipeline layouts runs or fits as one"
    body = [[r["layout"], r["remat"], format_seconds(r["step_time_s"]["total"]),
             format_seconds(r["step_time_s"].get("fill", 0.0)),
             format_bytes(r["memory_bytes_per_device"]["total"]), f"#{r['would_rank']}",
             format_seconds(r["backprop_step_time_s"])] for r in rows]
    header = ["local layout (changes the optimisation)", "remat", "step", "fill (once)",
              "memory/dev", "would rank", "1F1B step (same mesh)"]
    return ("local-learning pipelines (--allow-local): " + NOTE + "\n"
            + table(body, header))


__all__ = ["NOTE", "local_alternatives", "local_report", "pipeline_rows"]
