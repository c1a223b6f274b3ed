"""`--from FRAMEWORK SOURCE` and `--emit FRAMEWORK`: `parex predict` and `parex plan` reading
and writing other frameworks' configurations (parex.interop).

    parex predict --from megatron "torchrun --nnodes 16 --nproc-per-node 8 pretrain_gpt.py ..." \
        --hardware h100-sxm
    parex predict --from megatron @launch_args.txt --nodes 16 --hardware h100-sxm
    parex predict --from torchtitan llama3_8b.toml --nodes 8 --hardware h100-sxm
    parex predict --from maxtext MaxText/configs/base.yml model_name=llama3-8b \
        per_device_batch_size=2 ici_tensor_parallelism=4 --nodes 8 --hardware h100-sxm
    parex predict --model llama3-8b --layout data=8,tensor=8 --hardware h100-sxm --emit megatron
    parex plan --model gpt3-175b --hardware h100-sxm --nodes 16 --emit megatron
"""

from __future__ import annotations

import math
from pathlib import Path

from ..errors import InputError
from ..interop import FRAMEWORKS

# the frameworks `--from` reads and `--emit` writes
IMPORTERS = ("megatron", "torchtitan", "maxtext")
EXPORTERS = tuple(FRAMEWORKS)

# predict's flags that --from's configuration sets itself: given beside it, they would
# contradict it or be silently overridden
SET_BY_IMPORT = ("model", "layout", "global_batch", "microbatch", "seq", "remat", "attention",
                 "dtype", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "experts",
                 "top_k", "expert_ffn", "bias_rate", "capacity_factor")


def add_from_arg(p) -> None:
    p.add_argument("--from", dest="from_", nargs="+", default=None,
                   metavar=("FRAMEWORK", "SOURCE"),
                   help="predict another framework's run: megatron \"<launch arguments>\" "
                   "(or @FILE of them; the world size from its torchrun prefix or --nodes), "
                   "torchtitan JOB.toml (the world size from its degrees or --nodes), maxtext "
                   "CONFIG.yml [key=value ...] (likewise); "
                   "sets the model, layout, batch, remat, attention and dtype, and prints what "
                   "it ignored and assumed (docs/interop.md)")


def add_emit_arg(p, what: str) -> None:
    p.add_argument("--emit", default=None, choices=EXPORTERS,
                   help=f"print {what} as the framework's options instead of the report")


def refuse_flags_beside_from(args) -> None:
    given = [f"--{name.replace('_', '-')}" for name in SET_BY_IMPORT
             if getattr(args, name, None) is not None]
    if given:
        raise InputError(f"--from {args.from_[0]} sets {' '.join(given)} from its "
                         f"configuration: drop {' '.join(given)}")


def read_source(text: str) -> str:
    """A configuration given inline, or as @FILE (its text)."""
    if not text.startswith("@"):
        return text
    path = Path(text[1:])
    if not path.is_file():
        raise InputError(f"{text}: no file {path}; give @PATH of a file, or the options inline")
    return path.read_text()


def imported_run(args, chip):
    """The Imported run of --from (parex.interop), checked against the other flags."""
    framework, *sources = args.from_
    if framework not in IMPORTERS:
        from ..errors import unknown

        raise InputError(unknown("--from framework", framework, IMPORTERS))
    refuse_flags_beside_from(args)
    world = args.nodes * chip.devices_per_node if args.nodes else None
    if framework == "maxtext":  # a .yml and key=value overrides, or the whole command
        from ..interop import from_maxtext

        if not sources:
            raise InputError("--from maxtext takes its .yml and key=value overrides")
        config = read_source(sources[0]) if sources[0].startswith("@") else sources[0]
        return from_maxtext(config, sources[1:], world_size=world)
    what = {"megatron": "the launch arguments in quotes, or @FILE",
            "torchtitan": "the job's TOML file"}[framework]
    if len(sources) != 1:
        raise InputError(f"--from {framework} takes one SOURCE ({what}), not {len(sources)}")
    from ..interop import from_megatron, from_torchtitan

    if framework == "torchtitan":
        return from_torchtitan(sources[0], world_size=world)
    return from_megatron(read_source(sources[0]), world_size=world)


def nodes_for(n_devices: int, chip, nodes: int | None) -> int:
    return nodes or max(1, math.ceil(n_devices / chip.devices_per_node))


def plan_emitted(framework: str, plan) -> str:
    """The command of the plan's best row the framework can express, below a comment line
    saying which row it is (a shell comment: the text imports back as it is)."""
    from ..interop import Unexpressible, emit

    skipped = []
    for rank, i in enumerate(plan.top, 1):
        try:
            text = emit(framework, plan.setting_of(i))
        except Unexpressible as err:
            skipped.append(f"# row {rank} ({plan.flags(i)}): {err}")
            continue
        return "\n".join(skipped + [f"# parex plan's row {rank}: {plan.flags(i)}", text])
    raise InputError(f"none of the plan's top {len(plan.top)} rows can be written for "
                     f"{framework}: {skipped[0][2:] if skipped else 'no rows'}; raise --top, or "
                     f"search what it can run (e.g. --remat full)")


__all__ = ["EXPORTERS", "IMPORTERS", "add_emit_arg", "add_from_arg",
           "imported_run", "plan_emitted", "read_source"]
