"""`parex lowcomm` and `parex launch`, and the DiLoCo lines of `parex run` and `parex predict`.

    parex lowcomm --model llama2-70b --hardware h100-sxm \
        --layout replica=2,data=4,tensor=8,stage=4,schedule=1f1b,microbatches=16,inner_steps=100 \
        --global-batch 512 --seq 4096 --wan-gbps 1
    parex launch --processes 2 --devices-per-process 4 -- \
        run --layout replica=2,data=4,inner_steps=10
"""

from __future__ import annotations

import json

from ..errors import InputError
from ..measure.report import human_bytes, table
from ..units import format_count, format_seconds


def add_wan_args(p) -> None:
    p.add_argument("--wan-gbps", type=float, default=None,
                   help="bandwidth between replicas in Gb/s (DiLoCo layouts; default 1)")
    p.add_argument("--wan-latency-ms", type=float, default=None,
                   help="latency between replicas in ms (DiLoCo layouts; default 10)")


def wan_from_args(args):
    """The WAN link of the flags; parex.lowcomm.predict.wan_link's defaults where not given."""
    from ..lowcomm.predict import wan_link

    given = {"gbps": args.wan_gbps, "latency_ms": args.wan_latency_ms}
    return wan_link(**{k: v for k, v in given.items() if v is not None})


def refuse_wan_args(args, layout) -> None:
    """The WAN flags describe the link between DiLoCo replicas: refused for other layouts."""
    given = [f for f, v in (("--wan-gbps", args.wan_gbps),
                            ("--wan-latency-ms", args.wan_latency_ms)) if v is not None]
    if given and not layout.diloco:
        raise InputError(f"{' and '.join(given)} set the link between DiLoCo replicas, and "
                         f"layout {layout} has none: drop them, or add replica=R and "
                         f"inner_steps=H to the layout")


def _rate(bytes_per_s: float) -> str:
    return f"{bytes_per_s * 8 / 1e9:.3g} Gb/s"


def diloco_report(block: dict) -> str:
    """The lines a measured or predicted `diloco` block adds to a report."""
    lines = [f"diloco        {block['replicas']} replicas · H = {block['inner_steps']} inner steps"
             f" · {block['fragments']} fragment(s) · exchange {block['outer_dtype']}"
             f"{' · one-step-delay overlap' if block['overlap'] else ''}",
             f"traffic/dev   inner {human_bytes(block['inner_bytes_per_device_per_step'])} per "
             f"step · across replicas {human_bytes(block['cross_replica_bytes_per_step'])} per "
             f"step (amortised), {human_bytes(block['outer_bytes_per_sync'])} per sync"]
    if "exposed_wan_s" in block:  # predicted
        lines.append(f"over the WAN  {block['wan']}: inner step "
                     f"{format_seconds(block['inner_step_s'])} + exposed "
                     f"{format_seconds(block['exposed_wan_s'])} per step (sync DP "
                     f"{format_seconds(block['sync_dp_step_s'])}) · needs "
                     f"{_rate(block['avg_bandwidth'])} "
                     f"average, {_rate(block['peak_bandwidth'])} peak · WAN off the critical "
                     f"path from H = {block['h_crossover']}")
    if block.get("outer_step_time_s") is not None:  # measured
        lines.append(f"outer step    median {format_seconds(block['outer_step_time_s'])} over "
                     f"{block['syncs']} syncs · outer program memory "
                     f"{human_bytes(block['outer_memory_bytes_per_device'])} per device")
    return "\n".join(lines)


# --- parex lowcomm --------------------------------------------------------------------------------

def cmd_lowcomm(args) -> int:
    from ..calibrate.local import ready
    from ..entry import predict
    from ..lowcomm.predict import wan_rows
    from ..setting import as_cluster
    from .args import assumptions_line, defaulted, hardware_of, layout_from_args, model_from_args

    hardware = hardware_of(args)
    ready(hardware, progress=not args.json)  # calibrate this machine on first use
    layout = layout_from_args(args.layout, None, microbatch=args.microbatch)
    cluster = as_cluster(hardware, layout.n_devices)
    model, train = model_from_args(args)
    if not layout.diloco:
        raise InputError(f"layout {layout} has no replicas: add replica=R and inner_steps=H, "
                         f"e.g. replica=2,{layout},inner_steps=100")
    wan = wan_from_args(args)
    p = predict(model, train, layout, cluster, wan=wan, dtype=args.dtype)
    rows = wan_rows(p.diloco["inner_step_s"], model.n_params, layout.replica, layout.inner_steps,
                    wan, fragments=layout.fragments, outer_dtype=layout.outer_dtype)
    if args.json:
        print(json.dumps({"prediction": p.to_json(), "methods": rows,
                          "assumptions": p.assumptions}, indent=2))
        return 0
    print(f"parex lowcomm · {model.name} ({format_count(model.n_params)} parameters) · "
          f"{layout.replica} replicas of {layout.n_devices // layout.replica} devices "
          f"({p.hardware}) · {wan.name}, {format_seconds(wan.latency)} · H = {layout.inner_steps}, "
          f"P = {layout.fragments}, exchange {layout.outer_dtype} (sync DP: f32 gradients)")
    print(assumptions_line(p.assumptions, defaulted(args, ("hardware", "dtype", "global_batch",
                                                          "remat"))) + "\n")
    body = [[r["method"], format_seconds(r["step_time_s"]), format_seconds(r["exposed_wan_s"]),
             f"{r['slowdown']:.3g}×", human_bytes(r["wan_bytes_per_step"]),
             _rate(r["avg_bandwidth"]), _rate(r["peak_bandwidth"])] for r in rows]
    print(table(body, ["method", "step", "exposed WAN", "vs compute", "WAN bytes/step",
                       "avg bandwidth", "peak bandwidth"]))
    print(f"\ninner step {format_seconds(p.diloco['inner_step_s'])}; the WAN stops being the "
          f"bottleneck "
          f"from H = {rows[1]['h_crossover']} (one sync's time / one inner step).")
    return 0


def add_lowcomm(sub) -> None:
    from .args import add_predict_model_args

    p = sub.add_parser("lowcomm", help="predict sync DP against DiLoCo, streaming and overlap "
                                       "for replicas joined by a slow link")
    add_predict_model_args(p)
    p.add_argument("--layout", required=True,
                   help="a DiLoCo layout, e.g. replica=2,data=8,tensor=8,inner_steps=100")
    from .args import add_hardware_arg

    add_hardware_arg(p, "the chips inside each replica")
    add_wan_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_lowcomm)


COMMANDS = [add_lowcomm]
