"""Heterogeneous clusters: plan and run one model across mixed GPU types, with HexiScale's
asymmetric parallelism (arXiv:2409.01143): each pipeline its own share of the batch and
microbatch count, each stage its own chip, layer count and tensor degree.

    plan.py       the plan value, its string and JSON forms       HeteroPlan.parse("batch=...")
    validate.py   every check before predicting or running         check_plan(plan, cluster, model)
    costs.py      a stage's costs from the homogeneous predictor   unit_costs(setting, chip, t, b)
    links.py, dp.py, timing.py   hops, the gradient reduction, the 1F1B table per stage
    predict.py    a plan's step, memory per device, MFU            predict_plan(plan, cluster, ...)
    structure.py, split.py, estimate.py, search.py   the search   search(model, cluster, B, T)
    baselines.py  the best even split, the same-peak cluster       compare(model, cluster, B, T)
    report.py, draw.py, cli.py   text, JSON, pictures, `parex plan --cluster FILE`
The runner is parex.parallel.mpmd (a jitted program per stage on its own sub-mesh).
"""

from .baselines import Comparison, best_even_split, compare
from .costs import Setting
from .draw import plan_chart, plan_text
from .plan import HeteroPlan, Pipeline, PlanError, Stage
from .predict import HeteroPrediction, predict_plan
from .search import HeteroSearch, NoPlan, search
from .validate import check_plan

__all__ = ["Comparison", "HeteroPlan", "HeteroPrediction", "HeteroSearch", "NoPlan", "Pipeline",
           "PlanError", "Setting", "Stage", "best_even_split", "check_plan", "compare",
           "plan_chart", "plan_text", "predict_plan", "search"]
