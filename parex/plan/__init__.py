"""The planner: which layout should I run, and will it fit?

    plan(model, train, hardware, nodes, memory_cap=..., objective="time", top=5) -> Plan

enumerates every layout of the model on the cluster as numpy columns (candidates.py), predicts
them with `parex.predict.predict_batch` once per remat policy, drops what does not fit under the
memory cap, ranks the rest (rank.py) and checks the top ones with parex.validation (search.py).
report.py prints a Plan and turns it into JSON; verify.py measures its top layouts on the
emulated mesh; fits.py checks its fits/does-not-fit calls against XLA's compiled memory;
alternatives.py is the fit guidance of `parex predict` and the Explorer (the fastest layouts that
fit on the same devices); local.py ranks local-learning pipelines beside a plan's when asked. A Plan's `setting` (parex.setting) is the one predict() resolves.

    print(plan_report(p))                    the ranked table; plan_json(p) for JSON
    pareto_chart(chart_frame(p), p.memory_cap)   (parex.charts) every fitting layout as a point
    print(verify_report(verify(p, k=3)))     the top layouts measured: does the order hold?
"""

from .alternatives import Alternative, fitting_layouts
from .candidates import Candidates
from .local import local_alternatives, local_report  # --allow-local: never picked, shown
from .rank import OBJECTIVES
from .report import chart_frame, plan_json, plan_report
from .search import NoFit, Plan, plan
from .verify import verify, verify_report

__all__ = ["Alternative", "Candidates", "NoFit", "OBJECTIVES", "Plan", "chart_frame",
           "fitting_layouts", "local_alternatives", "local_report", "plan", "plan_json",
           "plan_report", "verify", "verify_report"]
