"""`parex plan --cluster FILE`: the heterogeneous planner on the command line.

    parex plan --cluster data/clusters/het-48.toml --model llama2-7b --global-batch 256 \
        --seq 4096 --top 5 [--zero 1] [--json]
    parex plan --cluster het-48 ...          (a name from data/clusters/)
"""

from __future__ import annotations

import json

from ..errors import InputError


def cmd_plan_cluster(args) -> int:
    from ..cluster import load_hetero_cluster
    from ..hetero.baselines import compare
    from ..hetero.report import comparison_json, comparison_report
    from ..plan.names import model_named

    model = model_named(args.model)
    cluster = load_hetero_cluster(args.cluster)
    # a mixed cluster is accelerators only: bf16 compute and ZeRO's mixed recipe, as
    # `parex predict` defaults to on an accelerator profile
    options = {"top": args.top, "recipe": "mixed", "zero": args.zero or 0}
    if args.memory_cap is not None:
        options["memory_cap"] = args.memory_cap * 1e9  # and never more than a chip's own
    if args.dtype == "float32":
        raise InputError("--cluster plans predict bf16 training (the mixed recipe); drop "
                         "--dtype float32")
    if args.verify or args.objective != "time":
        raise InputError("--cluster ranks by step time and predicts only: drop --verify and "
                         "--objective (an asymmetric plan runs with "
                         "parex.hetero.mpmd.MpmdRunner)")
    result = compare(model, cluster, args.global_batch, args.seq, **options)
    if args.json:
        print(json.dumps(comparison_json(result), indent=2, default=float))
    else:
        print(comparison_report(result))
    return 0


__all__ = ["cmd_plan_cluster"]
