"""Does the planner's "fits" agree with XLA? Random layouts, compiled (not run) on the emulated
mesh, their measured total memory per device against the planner's predicted one.

    check_fits("tiny", count=100) -> {"rows": [...], "cap_bytes": ..., ...}

The cap is the median measured total of the sample (so about half fit, and every call near the
line is tested); agreement is the share of layouts on which "predicted total <= cap" and
"measured total <= cap" say the same. Precision: of the layouts the planner says fit, the share
that do; recall: of those that do, the share the planner says fit.
"""

from __future__ import annotations

import numpy as np

from ..config import TrainConfig, model_preset
from .search import plan, validated


def sample_rows(model, train: TrainConfig, count: int, seed: int, n_devices: int = 8):
    """(Plan, rows): `count` distinct random rows of the plan of `model` on the emulated mesh
    that parex.validation accepts (any memory: the cap comes from the measurements)."""
    p = plan(model, train, "cpu-local", nodes=max(1, n_devices // 8), memory_cap=np.inf,
             top=1)
    rng = np.random.default_rng(seed)
    rows, _ = validated(p, rng.permutation(len(p.columns["step_time_s"])), count)
    return p, rows


def compiled_total(model, train: TrainConfig, layout) -> int:
    """XLA's total memory per device (argument + output − alias + temp) of the compiled step."""
    import jax

    from ..measure.compiled import compile_layout, memory_stats

    _, compiled, _ = compile_layout(model, train, layout, jax.devices()[:layout.n_devices])
    return memory_stats(compiled)["total"]


def agreement(predicted, measured, cap: float) -> dict:
    """Agreement, precision and recall of predicted <= cap against measured <= cap."""
    return agreement_of(np.asarray(predicted) <= cap, np.asarray(measured) <= cap)


def agreement_of(said, did) -> dict:
    """Agreement, precision and recall of the planner's fit calls (said) against XLA's (did)."""
    said, did = np.asarray(said, bool), np.asarray(did, bool)
    both = int((said & did).sum())
    return {"n": int(len(said)), "agreement": float((said == did).mean()),
            "precision": both / max(int(said.sum()), 1), "recall": both / max(int(did.sum()), 1),
            "predicted_fit": int(said.sum()), "measured_fit": int(did.sum())}


def check_fits(model_name: str, count: int = 100, seed: int = 0,
               global_batch: int | None = None, progress: bool = True) -> dict:
    """Compile `count` random layouts of a preset and compare fits under the median cap."""
    from tqdm.auto import tqdm

    model = model_preset(model_name)
    train = TrainConfig(global_batch=global_batch)
    p, rows = sample_rows(model, train, count, seed)
    out = []
    for i in tqdm(rows, desc=f"compile {model_name}", disable=not progress):
        layout, train_i = p.layout(i), p.train_of(i)
        out.append({"model": model_name, "layout": str(layout), "remat": train_i.remat,
                    "predicted_bytes": float(p.columns["memory_total_bytes"][i]),
                    "measured_bytes": float(compiled_total(model, train_i, layout))})
    cap = float(np.median([r["measured_bytes"] for r in out]))
    return agreement([r["predicted_bytes"] for r in out], [r["measured_bytes"] for r in out],
                     cap) | {"cap_bytes": cap, "rows": out}


__all__ = ["agreement", "agreement_of", "check_fits", "compiled_total", "sample_rows"]
