"""The planner: which layout should I run, and will it fit?

    plan(model, train, hardware, nodes, memory_cap=..., objective="time", top=5) -> Plan

enumerates every layout of the model on the cluster as numpy columns (candidates.py), predicts
them with `parex.predict.predict_batch` once per remat policy, drops what does not fit under the
memory cap, ranks the rest (rank.py) and checks the top ones with parex.validation (search.py).
report.py prints a Plan and turns it into JSON; verify.py measures its top layouts on the
emulated mesh; fits.py checks its fits/does-not-fit calls against XLA's compiled memory.
"""

from .candidates import Candidates
from .rank import OBJECTIVES
from .search import NoFit, Plan, plan

__all__ = ["Candidates", "NoFit", "OBJECTIVES", "Plan", "plan"]
