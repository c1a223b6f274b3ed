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
    report.py, draw.py   text, JSON, pictures (`parex plan --cluster FILE`: parex.cli.hetero)
The runner is parex.hetero.mpmd (a jitted program per stage on its own sub-mesh), exported
here as MpmdRunner; clusters are read by parex.cluster (load_hetero_cluster, cluster_from_dict).

    cluster = load_hetero_cluster("het-48")                  data/clusters/het-48.toml
    result = compare(model, cluster, 256, 4096)              asymmetric, even split, same peak
    print(comparison_report(result)); plan_chart(result.search.best.plan)
"""

from ..cluster import HeteroCluster, cluster_from_dict, load_hetero_cluster
from .mpmd import MpmdRunner
from .baselines import Comparison, best_even_split, compare
from .costs import stage_setting
from .draw import plan_chart, plan_text
from .plan import HeteroPlan, Pipeline, PlanError, Stage
from .predict import HeteroPrediction, predict_plan
from .report import comparison_json, comparison_report
from .search import HeteroSearch, NoPlan, search
from .studies import network_study
from .validate import check_plan

__all__ = ["Comparison", "HeteroCluster", "HeteroPlan", "HeteroPrediction", "HeteroSearch",
           "MpmdRunner", "NoPlan", "Pipeline", "PlanError", "Stage", "best_even_split",
           "check_plan", "cluster_from_dict", "compare", "comparison_json", "comparison_report",
           "load_hetero_cluster", "network_study", "plan_chart", "plan_text", "predict_plan",
           "search", "stage_setting"]
