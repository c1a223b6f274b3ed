"""`parex predict`, `parex calibrate` and `parex compare`: the analytic model on the command line.

    parex predict --model gpt3-175b --layout data=8,tensor=8,stage=8,schedule=1f1b,microbatches=16 \
        --hardware a100-80gb --nodes 64 --global-batch 1024 --remat full
    parex predict --model llama --layers 32 --hidden 4096 --heads 32 --kv-heads 8 --ffn 14336 \
        --vocab 128256 --seq 8192 --layout fsdp=8 --hardware h100-sxm --json
    parex calibrate                      # this machine's cpu-local profile, in ~/.cache/parex
    parex calibrate --from-run 18.13 --name a100-mystack --model gpt3-175b --hardware a100-80gb \
        --layout data=1,tensor=8,stage=8,schedule=interleaved,virtual=3 --global-batch 64 \
        --microbatch 1 --remat full      # a profile whose step efficiency gives that step time
    parex compare --model tiny --layout dp_tp     # measured and predicted on the emulated mesh
"""

from __future__ import annotations

import json

from ..calibrate.local import ready
from ..config import ModelConfig
from ..layout import Layout
from ..measure.report import human_bytes, table
from ..units import format_count, format_flops, format_seconds
from ..setting import RECIPE_NAMES, resolve, resolve_run
from ..validation import validate
from .args import (
    DEFAULT_DEVICES,
    add_device_args,
    add_hardware_arg,
    add_predict_model_args,
    add_overlap_args,
    assumptions_line,
    at_least,
    configs_from_args,
    defaulted,
    hardware_of,
    layout_from_args,
    model_from_args,
    setup_devices,
)


def prediction_report(p, model: ModelConfig, cluster, defaults: list[str] = ()) -> str:
    st, mem = p.step_time_s, p.memory_bytes_per_device
    capacity = cluster.chip.hbm_bytes
    counted = "as XLA's cost analysis counts them" if p.convention == "xla-cpu" else "hardware"
    fits = ("fits" if p.fits else
            f"DOES NOT FIT: {human_bytes(p.over_capacity_bytes)} over")
    lines = [
        f"parex predict · {model.name} ({format_count(model.n_params)} parameters) · layout "
        f"{p.layout} · {cluster.name} ({p.n_devices} of {cluster.n_devices} devices) · "
        f"convention {p.convention}",
        assumptions_line(p.assumptions, defaults),
        f"step time    {format_seconds(st['total'])} = compute {format_seconds(st['compute'])}"
        f" + exposed comm {format_seconds(st['exposed_comm'])}"
        f" + bubble {format_seconds(st['bubble'])}",
        *_overlaps_lines(p),
        f"throughput   {p.tokens_per_s:,.0f} tokens/s · "
        f"{format_flops(p.tflops_per_device * 1e12, per_second=True)} per device · "
        f"MFU {p.mfu:.1%} · HFU {p.hfu:.1%}",
        f"FLOPs/dev    {format_flops(p.flops_per_device)} per step ({counted}; model "
        f"{format_flops(p.model_flops_per_device)})",
        "memory/dev   " + " · ".join(f"{k} {human_bytes(mem[k])}" for k in
                                     ("params", "grads", "optimizer", "activations", "temp"))
        + f" ({p.assumptions.get('attention') or 'naive'} attention)",
        f"             argument {human_bytes(mem['argument'])} · total {human_bytes(mem['total'])}"
        f" of {human_bytes(capacity)}: {fits}"]
    if not p.executable:
        lines.append(f"executable   no, predicted only: {p.executable_reason}")
    lines.append("")
    if p.collectives:
        rows = [[c["name"], c["kind"], ",".join(c["axes"]), f"{c['count']:g}",
                 human_bytes(c["bytes"]), format_seconds(c["seconds"])] for c in p.collectives]
        lines.append(table(rows, ["collective", "kind", "axes", "count", "bytes", "time"]))
    else:
        lines.append("no collectives")
    return "\n".join(lines)


def _overlaps_lines(p) -> list[str]:
    """One line per overlap of the stack: the collective's seconds, what it leaves exposed and
    the GEMMs' loss beside it (parex.predict.overlap); none on the emulated mesh."""
    return [f"{'overlaps' if i == 0 else '':12s} {name} {format_seconds(part['comm'])} -> "
            f"{format_seconds(part['exposed'])} exposed"
            + (f" + {format_seconds(part['contention'])} GEMMs slowed"
               if part["contention"] else "")
            for i, (name, part) in enumerate((p.overlaps or {}).items())]


# --- parex predict --------------------------------------------------------------------------------

def cmd_predict(args) -> int:
    from ..entry import predict
    from .lowcomm import diloco_report, refuse_wan_args, wan_from_args

    (model, train, layout, cluster), keywords = _predict_inputs(args)
    refuse_wan_args(args, layout)
    # the command's numbers are parex.predict's of the same inputs: nothing decided here
    setting = resolve(model, train, layout, cluster, **keywords)
    if args.emit:  # the framework's options of this run, instead of the report
        from ..interop import emit

        print(emit(args.emit, setting))
        return 0
    p = predict(model, train, layout, cluster, wan=wan_from_args(args), **keywords)
    alts = [] if p.fits or p.diloco else fits_instead(p, setting)
    explained = _explained(args, p, setting) | _time_to_train(args, p, setting)
    run = getattr(args, "imported", None)  # --from: what the import ignored and assumed
    if args.json:
        out = p.to_json() | ({"fits_instead": [alt.to_json() for alt in alts]}
                             if not p.fits else {})
        if run is not None:
            out["imported"] = {"framework": run.framework, "version": run.version,
                               "ignored": list(run.ignored), "assumed": list(run.assumed),
                               "approximated": list(run.approximated)}
        if "time_to_train" in explained:
            explained["time_to_train"] = explained["time_to_train"].to_json()
        print(json.dumps(out | explained, indent=2))
    else:
        if run is not None:
            print(f"imported from {run.framework} ({run.version} option names and defaults)")
            print(run.notes() + "\n" if run.notes() else "")
        said = defaulted(args) if run is None else defaulted(args, ("hardware", "recipe",
                                                                    "convention"))
        print(prediction_report(p, setting.model, setting.cluster, said))
        if not p.fits:
            print(fits_instead_text(alts, p))
        if "explain" in explained:
            from ..predict.explain import explain_text

            print("\n" + explain_text(explained["explain"]))
        if "time_to_train" in explained:
            from .goodput import time_to_train_report

            print("\n" + time_to_train_report(explained["time_to_train"]))
    if p.diloco and not args.json:
        print(diloco_report(p.diloco))
    return 0


def _explained(args, p, setting) -> dict:
    """{"explain": the step by effect} under --explain (one synchronous layout), else {}."""
    if not getattr(args, "explain", False):
        return {}
    from ..errors import InputError

    if p.diloco:
        raise InputError("--explain breaks down one synchronous step: predict the layout "
                         "without replicas to see it")
    from ..predict.explain import setting_breakdown

    result = setting_breakdown(setting)
    return {"explain": {"parts": result["parts"], "tiers": result["tiers"],
                        "overlaps": result["overlaps"], "launch": result["launch"]}}


def _time_to_train(args, p, setting) -> dict:
    """{"time_to_train": TimeToTrain} with --tokens or --steps (parex.predict.goodput)."""
    from ..errors import InputError
    from ..predict.goodput import of_prediction
    from .goodput import reliability_from_args, run_length

    length = run_length(args, setting.model)
    if not length:
        if args.price is not None:
            raise InputError("--price needs the run's length: add --tokens or --steps")
        return {}
    if p.diloco:
        raise InputError("time to train of DiLoCo's replicas is not modelled; drop --tokens "
                         "and --steps, or predict a synchronous layout")
    return {"time_to_train": of_prediction(p, setting.model, setting.cluster, **length,
                                           reliability=reliability_from_args(args),
                                           price_per_gpu_hour=args.price)}


def _predict_inputs(args):
    """((model, train, layout, cluster), keywords) as the flags give them, None where they say
    nothing: what parex.predict takes, so that the command and the Python API resolve the same
    inputs. The cluster is the profile (shipped in data/hardware/ or written to the cache by
    `parex calibrate --from-run`) with nodes enough for the layout unless given."""
    from ..hardware import load_chip

    hardware = hardware_of(args)
    ready(hardware, progress=not args.json)  # calibrate this machine on first use
    chip = load_chip(hardware)
    if getattr(args, "from_", None):  # another framework's run (parex.interop)
        return _imported_inputs(args, chip)
    args.layout = args.layout or "dp"
    nodes = args.nodes
    if nodes is None:
        probe = args.layout if args.layout.strip() not in _layout_presets() else None
        n = Layout.parse(probe).n_devices if probe else chip.devices_per_node
        nodes = max(1, -(-n // chip.devices_per_node))
    cluster = _cluster(chip, nodes, getattr(args, "network", None))
    model, train = model_from_args(args)
    layout = layout_from_args(args.layout, cluster.n_devices, args.microbatch)
    keywords = {"dtype": args.dtype, "recipe": getattr(args, "recipe", None),
                "convention": getattr(args, "convention", None),
                "expert_imbalance": getattr(args, "expert_imbalance", None),
                "stack": getattr(args, "stack", None), "overlaps": getattr(args, "overlap", None)}
    return (model, train, layout, cluster), keywords


def _imported_inputs(args, chip):
    """_predict_inputs of --from: the run another framework's configuration describes, its
    notes (what was ignored and assumed) kept on args for the report."""
    from .interop import imported_run, nodes_for

    run = imported_run(args, chip)
    args.imported = run
    cluster = _cluster(chip, nodes_for(run.layout.n_devices, chip, args.nodes),
                       getattr(args, "network", None))
    # the run's own recipe, stack and overlaps (a Megatron-LM command's --bf16,
    # --tp-comm-overlap, ...), unless the flags name others
    flags = {"recipe": getattr(args, "recipe", None), "stack": getattr(args, "stack", None),
             "overlaps": getattr(args, "overlap", None)}
    keywords = run.keywords | {k: v for k, v in flags.items() if v is not None} | {
        "convention": getattr(args, "convention", None),
        "expert_imbalance": getattr(args, "expert_imbalance", None)}
    return (run.model, run.train, run.layout, cluster), keywords


def fits_instead(p, setting) -> list:
    """The planner's fastest layouts that fit on the same devices (parex.plan.alternatives)."""
    from ..plan.alternatives import fitting_layouts

    return fitting_layouts(setting.model, setting.train, setting.cluster.chip, p.n_devices,
                           current_step_s=p.step_time_s["total"], convention=setting.convention,
                           recipe=setting.recipe, dtype=setting.dtype)


def fits_instead_text(alts: list, p) -> str:
    """The lines `parex predict` adds under a layout that does not fit."""
    from ..plan.alternatives import saving_text

    if not alts:
        return (f"\nno layout of these {p.n_devices} devices fits (or too many to search here):"
                f" `parex plan` names the smallest cluster that works")
    lines = [f"\nfits instead (the planner's fastest on the same {p.n_devices} devices; "
             f"`parex plan` ranks them all):"]
    for alt in alts:
        lines.append(f"  {alt.flags} · "
                     f"{format_seconds(alt.step_time_s)} "
                     f"({saving_text(alt, p.step_time_s['total'])}) · "
                     f"{human_bytes(alt.memory_total_bytes)}")
    return "\n".join(lines)


def _cluster(chip, nodes, network=None):
    """`nodes` of the profile `chip`, on the network file `network` (data/networks/) where
    named, else on the profile's own."""
    from ..hardware import Cluster
    from ..network import load_network

    return Cluster(chip, nodes, network=load_network(network) if network else None)


def _layout_presets():
    from ..layout import LAYOUT_PRESETS

    return LAYOUT_PRESETS


def add_predict(sub) -> None:
    p = sub.add_parser("predict", help="predict step time, memory, FLOPs and communication")
    add_predict_model_args(p)
    p.add_argument("--layout", default=None,
                   help="e.g. data=8,tensor=8,stage=4 or a preset name (default dp)")
    add_hardware_arg(p)
    p.add_argument("--nodes", type=at_least(1), default=None,
                   help="nodes in the cluster (default: enough for the layout)")
    p.add_argument("--network", default=None, metavar="NAME",
                   help="the fabric and collective library above the nodes, a file of "
                   "data/networks/ (e.g. frontier-unconfigured: another launch of the same "
                   "machine); default: the hardware profile's own")
    p.add_argument("--convention", default=None, choices=["gpu", "xla-cpu"],
                   help="gpu: the ideal program; xla-cpu: what the emulated mesh compiles "
                   "(default: xla-cpu for cpu-local, else gpu)")
    from .interop import add_emit_arg, add_from_arg

    add_from_arg(p)
    add_emit_arg(p, "the run")
    p.add_argument("--recipe", default=None, choices=RECIPE_NAMES,
                   help="bytes of model state: parex (fp32 weights, grads, Adam), mixed "
                   "(ZeRO's 2 + 2 + 12; the default for bfloat16 on accelerator profiles, parex "
                   "on cpu-local and for float32), mixed-fp32-grads (Megatron-LM's bf16: "
                   "2 + 4 + 12, gradients reduced in fp32) or fsdp2 (torchtitan's FSDP2: "
                   "4 + 4 + 8, gathered in bf16, reduced in fp32; --stack torchtitan's)")
    p.add_argument("--expert-imbalance", type=float, default=None,
                   help="a mixture of experts' busiest expert's load over the mean, which "
                   "sets the step (default 1.0: balanced; an assumption, stated in the output)")
    from .lowcomm import add_wan_args

    add_wan_args(p)
    add_overlap_args(p)
    from .goodput import add_run_length_args

    add_run_length_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--explain", action="store_true",
                   help="break the step down by effect: ideal compute, kernel efficiency and "
                   "shapes, communication (congestion, library stalls), stragglers, bubble "
                   "(parex.predict.explain)")
    p.set_defaults(func=cmd_predict)


# --- parex calibrate ----------------------------------------------------------------------------

def cmd_calibrate(args) -> int:
    if args.from_run is not None:
        return cmd_from_run(args)
    given = [f"--{f}" for f in ("name", "hardware", "nodes") if getattr(args, f) is not None]
    if given:
        from ..errors import InputError

        raise InputError(f"{', '.join(given)}: only with --from-run SECONDS (without it "
                         f"`parex calibrate` measures this machine's cpu-local profile)")
    from ..executor.mesh import emulate_devices

    emulate_devices(args.devices)
    from ..calibrate import run as calibrate

    chip, path, seconds = calibrate.run(args.devices, progress=not args.json)
    if args.json:
        print(json.dumps(chip.to_json(), indent=2))
    else:
        print(calibrate.summary(chip))
        print(f"\nwrote {path} in {seconds:.0f} s")
    return 0


def cmd_from_run(args) -> int:
    """`parex calibrate --from-run SECONDS`: the step efficiency that makes `parex predict` of
    these flags take SECONDS, saved as a copy of the profile (parex.calibrate.from_run)."""
    from ..calibrate import from_run as fr
    from ..errors import InputError
    from ..predict import predict

    hardware = hardware_of(args)
    if hardware.lower() == "cpu-local":
        raise InputError("--from-run calibrates an accelerator profile; this machine's "
                         "cpu-local profile is measured by `parex calibrate` without it")
    name = fr.check_name(args.name or f"{hardware}-from-run")
    (model, train, layout, cluster), keywords = _predict_inputs(args)
    s = resolve(model, train, layout, cluster, **keywords)
    model, train, layout = s.model, s.train, s.layout
    kwargs = {"convention": s.convention, "recipe": s.recipe, "dtype": s.dtype}
    efficiency = fr.from_run(model, train, layout, cluster, args.from_run, **kwargs)
    source = (f"from-run: {model.name} {layout} {args.from_run:g} s (global batch "
              f"{train.global_batch} x {s.seq_len}, microbatch {s.microbatch}, "
              f"remat {train.remat}, {s.dtype}, {cluster.name})")
    chip = fr.calibrated_chip(cluster.chip, name, efficiency, source)
    path = fr.write_profile(chip)
    p = predict(model, train, layout, _cluster(chip, cluster.nodes), **kwargs)
    if args.json:
        print(json.dumps(chip.to_json() | {"path": str(path)}, indent=2))
        return 0
    print(f"parex calibrate --from-run · {model.name} · layout {layout} · {cluster.name} · "
          f"measured {format_seconds(args.from_run)} per step")
    print(assumptions_line(p.assumptions, defaulted(args)))
    print(f"step efficiency {efficiency:.4f} (profile {hardware}: "
          f"{cluster.chip.step_efficiency:.4f}): predicted step "
          f"{format_seconds(p.step_time_s['total'])}; wrote {path}")
    print(f"use it: parex predict --hardware {name} ...")
    return 0


def add_calibrate(sub) -> None:
    p = sub.add_parser("calibrate", help="measure this machine and write its cpu-local profile "
                       "(to $PAREX_CACHE or ~/.cache/parex), or with --from-run fit an "
                       "accelerator profile's step efficiency to one measured step")
    p.add_argument("--devices", type=at_least(2), default=DEFAULT_DEVICES,
                   help=f"emulated devices (default {DEFAULT_DEVICES})")
    p.add_argument("--from-run", type=float, default=None, metavar="SECONDS",
                   help="a measured step time (seconds per iteration) of your own code at the "
                   "layout the predict flags describe: fit --hardware's step efficiency to it")
    p.add_argument("--name", default=None,
                   help="--from-run: the new profile's name (default <hardware>-from-run)")
    add_predict_model_args(p)
    p.add_argument("--layout", default="dp", help="--from-run: the measured run's layout")
    add_hardware_arg(p, "--from-run: the profile to fit")
    p.add_argument("--nodes", type=at_least(1), default=None,
                   help="--from-run: nodes in the cluster (default: enough for the layout)")
    p.add_argument("--convention", default=None, choices=["gpu", "xla-cpu"])
    p.add_argument("--recipe", default=None, choices=RECIPE_NAMES)
    p.add_argument("--json", action="store_true", help="print the profile as JSON")
    p.set_defaults(func=cmd_calibrate)


# --- parex compare ------------------------------------------------------------------------------

def cmd_compare(args) -> int:
    n = setup_devices(args, args.layout)
    model, train = configs_from_args(args)
    layout = layout_from_args(args.layout, n, microbatch=args.microbatch)
    import jax

    from ..entry import measure
    from ..predict import predict, shared_fields

    platform = jax.devices()[0].platform
    layout = validate(layout, model, train, n, platform=platform)
    run = resolve_run(model, train, layout, platform)  # the program that is measured
    hardware = hardware_of(args)
    if hardware.lower() == "cpu-local":
        ready(hardware, progress=not args.json)  # calibrate this machine on first use
    # predicted as measured: its batch, remat, kernel and dtype, whatever the profile's defaults
    p = predict(run.model, run.train, run.layout, hardware, convention=args.convention,
                dtype=run.dtype)
    m = measure(run.model, run.train, run.layout, devices=jax.devices()[:n],
                progress=not args.json)
    fields = shared_fields(m, p)
    if args.json:
        print(json.dumps({"convention": p.convention, "hardware": p.hardware, "fields": fields,
                          "prediction": p.to_json(), "measurement": m.to_json(),
                          "assumptions": p.assumptions}, indent=2))
        return 0
    rows = [[f["field"], _fmt(f["field"], f["predicted"]), _fmt(f["field"], f["measured"]),
             f"{f['ratio']:.3f}" if f["measured"] else "-"] for f in fields]
    print(f"parex compare · {model.name} · layout {layout} · {n} devices · predicted on "
          f"{p.hardware} under the {p.convention} convention")
    print(assumptions_line(p.assumptions, defaulted(args, ("hardware", "dtype", "convention",
                                                          "global_batch", "remat"))) + "\n")
    print(table(rows, ["field", "predicted", "measured", "ratio"]))
    return 0


def _fmt(field: str, value: float) -> str:
    if field.endswith("_bytes"):
        return human_bytes(value)
    if field == "step_time_s":
        return format_seconds(value)
    return f"{value:,.4g}"


def add_compare(sub) -> None:
    from .args import add_model_args

    p = sub.add_parser("compare", help="measure and predict one layout on the emulated mesh")
    add_model_args(p)
    add_device_args(p)
    p.add_argument("--layout", default="dp", help="e.g. data=2,tensor=4 or a preset name")
    p.add_argument("--steps", type=at_least(1), default=6)
    add_hardware_arg(p, "profile to predict with")
    p.add_argument("--convention", default=None, choices=["gpu", "xla-cpu"])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_compare)


COMMANDS = [add_predict, add_calibrate, add_compare]
