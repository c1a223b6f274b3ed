"""The options of a whole run's length and its failures, shared by `parex predict` and `parex
plan --objective time-to-train`, and the time-to-train lines they print (parex.predict.goodput).

    parex predict --model llama3-405b --hardware h100-sxm --nodes 2048 --tokens 15.6e12 ...
"""

from __future__ import annotations

from ..errors import InputError
from ..measure.report import human_bytes
from ..predict.goodput import (CHINCHILLA_TOKENS_PER_PARAM, DEFAULT_FAILURES, FAILURE_RATES,
                               HOUR, RESTART_S, STORAGE_BANDWIDTH, Reliability, TimeToTrain)
from ..units import format_count, format_seconds
from .args import at_least, positive_number


def add_run_length_args(p, *, steps: bool = True, tokens_help: str = "") -> None:
    """--tokens (and --steps unless the command has its own), the failure model's inputs and
    --price."""
    p.add_argument("--tokens", type=positive_number, default=None,
                   help="train this many tokens: report days, goodput, interruptions, GPU-hours "
                   "and energy" + tokens_help)
    if steps:
        p.add_argument("--steps", type=at_least(1), default=None,
                       help="the run's length in optimizer steps instead of --tokens")
    p.add_argument("--failures", default=DEFAULT_FAILURES, metavar="SOURCE|RATE",
                   help=f"failures per node-day: {', '.join(FAILURE_RATES)} (arXiv 2410.21680;"
                   f" default {DEFAULT_FAILURES}: both clusters pooled) or a number per 1000 "
                   f"node-days")
    p.add_argument("--storage-bandwidth", type=positive_number, default=STORAGE_BANDWIDTH / 1e9,
                   metavar="GB/S", help="aggregate checkpoint write and read bandwidth "
                   f"(default {STORAGE_BANDWIDTH / 1e9:g} GB/s, an assumption)")
    p.add_argument("--restart-minutes", type=float, default=RESTART_S / 60,
                   help=f"time a failure costs before the restore begins (default "
                   f"{RESTART_S / 60:g}, an assumption)")
    p.add_argument("--checkpoint-minutes", type=positive_number, default=None,
                   help="checkpoint interval in minutes of work (default: Daly's optimum)")
    p.add_argument("--price", type=positive_number, default=None, metavar="PER_GPU_HOUR",
                   help="price of one device-hour: report the run's cost")


def reliability_from_args(args) -> Reliability:
    changes = {"storage_bandwidth": args.storage_bandwidth * 1e9,
               "restart_s": args.restart_minutes * 60,
               "interval_s": None if args.checkpoint_minutes is None
               else args.checkpoint_minutes * 60}
    if args.failures in FAILURE_RATES:
        return Reliability.named(args.failures, **changes)
    try:
        rate = float(args.failures) / 1000
    except ValueError:
        raise InputError(f"--failures {args.failures!r}: give one of "
                         f"{', '.join(FAILURE_RATES)} or failures per 1000 node-days") from None
    return Reliability(rate, "given", **changes)


def run_length(args, model) -> dict:
    """time_to_train's length keyword: --tokens, --steps, or {} when neither is given."""
    if args.tokens is not None and getattr(args, "steps", None) is not None:
        raise InputError("give --tokens or --steps, not both")
    if args.tokens is not None:
        return {"tokens": args.tokens}
    if getattr(args, "steps", None) is not None:
        return {"steps": args.steps}
    return {}


def chinchilla_tokens(model) -> float:
    """Compute-optimal tokens for the model (Hoffmann et al. 2022: ~20 per parameter)."""
    return CHINCHILLA_TOKENS_PER_PARAM * model.n_params


def duration(seconds: float) -> str:
    """Days from one day up, else hours."""
    return f"{seconds / 86_400:,.1f} days" if seconds >= 86_400 else f"{seconds / HOUR:.2f} h"


def time_to_train_report(t: TimeToTrain) -> str:
    rel = t.reliability
    source = (f"{rel.failures_source}, arXiv 2410.21680" if rel.failures_source != "given"
              else "given")
    energy = (f"{t.energy_kwh / 1000:,.0f} MWh at {t.power_w:g} W per device ({t.power_source};"
              f" hosts, network and cooling not counted)" if t.energy_kwh is not None
              else t.power_source)
    cost = (f" · cost {t.cost:,.0f} at {t.price_per_gpu_hour:g} per device-hour"
            if t.cost is not None else "")
    return "\n".join([
        f"time to train  {duration(t.wall_s)} for {format_count(t.tokens)} tokens "
        f"({t.steps:,.0f} steps of {format_seconds(t.step_time_s)}) · goodput {t.goodput:.1%}",
        f"failures       {rel.failures_per_node_day * 1000:.2f} per 1000 node-days ({source}) "
        f"× {t.nodes:g} nodes: MTTF {t.mttf_s / HOUR:.2f} h · {t.interruptions:,.0f} "
        f"interruptions expected",
        f"checkpoints    {human_bytes(t.checkpoint_bytes)} of state at "
        f"{rel.storage_bandwidth / 1e9:g} GB/s: save {format_seconds(t.save_s)}, restore "
        f"{format_seconds(t.restore_s)}, restart {format_seconds(rel.restart_s)} · every "
        f"{format_seconds(t.interval_s)} ({t.interval_chosen})",
        f"resources      {t.gpu_hours:,.0f} device-hours · energy {energy}{cost}"])


def time_to_train_plan(args, full, show: bool) -> dict:
    """`parex plan --objective time-to-train`: the job sizes ranked (parex.plan.time_to_train),
    printed when `show`; its JSON."""
    from ..plan.time_to_train import plan_time_to_train

    length = run_length(args, full.model) or {"tokens": chinchilla_tokens(full.model)}
    options = {"memory_cap": full.memory_cap, "objective": "time", "recipe": full.setting.recipe,
               "convention": full.setting.convention, "dtype": full.setting.dtype,
               "remats": full.remats}
    result = plan_time_to_train(full.model, full.train, full.cluster, **length,
                                reliability=reliability_from_args(args),
                                price_per_gpu_hour=args.price, full=full, **options)
    if show:
        print("\n" + time_to_train_plan_report(result))
    return result.to_json()


def time_to_train_plan_report(result) -> str:
    from ..measure.report import table

    rows = [[f"{c.nodes} ({c.plan.cluster.n_devices})", c.plan.entry(c.row)["layout"],
             format_seconds(c.run.step_time_s), f"{c.run.goodput:.1%}",
             f"{c.run.mttf_s / HOUR:.2f} h", f"{c.run.interruptions:,.0f}",
             format_seconds(c.run.interval_s), duration(c.run.wall_s),
             f"{c.run.gpu_hours:,.0f}"] for c in result.sizes]
    best, by_step = result.best, result.by_step
    verdict = (f"time-to-train picks {best.nodes} nodes ({best.plan.flags(best.row)}): "
               f"{duration(best.run.wall_s)}, against {duration(by_step.run.wall_s)} for "
               f"--objective time's pick on all {by_step.nodes} nodes"
               if result.differs else
               f"time-to-train and --objective time agree: all {by_step.nodes} nodes, "
               f"{by_step.plan.flags(by_step.row)}")
    t = best.run
    return "\n".join([
        f"time to train {format_count(t.tokens)} tokens · failures "
        f"{t.reliability.failures_per_node_day * 1000:.2f} per 1000 node-days "
        f"({t.reliability.failures_source}) · checkpoint {human_bytes(t.checkpoint_bytes)} at "
        f"{t.reliability.storage_bandwidth / 1e9:g} GB/s · restart "
        f"{format_seconds(t.reliability.restart_s)} · interval: Daly's optimum",
        table(rows, ["nodes (devices)", "best layout", "step", "goodput", "MTTF",
                     "interruptions", "interval", "time to train", "device-hours"]),
        verdict])


__all__ = ["add_run_length_args", "chinchilla_tokens", "reliability_from_args", "run_length",
           "time_to_train_plan", "time_to_train_report"]
