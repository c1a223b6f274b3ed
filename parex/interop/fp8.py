"""The frameworks' FP8 settings as parex's precision recipes (parex.precision), both ways.

    Megatron-LM   --fp8-format hybrid --fp8-recipe delayed     fp8-delayed
                  --fp8-format hybrid --fp8-recipe tensorwise  fp8-current
                  --fp8-format e4m3 --fp8-recipe blockwise     fp8-blockwise
                  --fp8-format e4m3 --fp8-recipe mxfp8         mxfp8
    torchtitan    converters ["quantize.linear.float8"], [quantize.linear.float8]
                  recipe_name "tensorwise" (or unset)          fp8-current
                  recipe_name "rowwise"                        fp8-rowwise
                  converters ["quantize.linear.mx"], [quantize.linear.mx]
                  recipe_name "mxfp8_cublas" (or unset)        mxfp8
    MaxText       quantization "fp8" | "nanoo_fp8"             fp8-delayed

Each reader returns the recipe's name (None: no FP8) and appends to `approximated` what parex
prices differently from the run; what no recipe expresses is refused in one line naming the
nearest one. Each writer returns the framework's settings of a recipe, or refuses.

Sources, at the versions parex reads (data/interop/*.json): Megatron-LM core_v0.15.0
megatron/training/arguments.py (--fp8-recipe defaults to delayed, --fp8-amax-history-len to 1,
--fp8-amax-compute-algo to most_recent); torchtitan v0.2.2 torchtitan/config/job_config.py
(Float8Linear: recipe_name None is tensorwise, enable_fsdp_float8_all_gather defaults to false)
and torchao's float8 recipes; MaxText's base.yml `quantization` (fp8: Flax's Fp8DotGeneralOp,
delayed scaling; nanoo_fp8: the same on AMD's FNUZ formats).
"""

from __future__ import annotations

from ..errors import InputError
from ..precision import PRECISIONS
from .result import refuse

# --- Megatron-LM ---------------------------------------------------------------------------

MEGATRON_RECIPES = {("hybrid", "delayed"): "fp8-delayed", ("hybrid", "tensorwise"): "fp8-current",
                    ("e4m3", "blockwise"): "fp8-blockwise", ("e4m3", "mxfp8"): "mxfp8"}
MEGATRON_OPTIONS = ("--fp8-format", "--fp8-recipe", "--fp8-amax-history-len",
                    "--fp8-amax-compute-algo", "--fp8-param-gather", "--fp8-margin")


def megatron_precision(given: dict, approximated: list) -> str | None:
    """The recipe of a Megatron-LM command's FP8 options (`given`: option -> value)."""
    fmt = given.get("--fp8-format")
    if fmt is None:
        return None  # Megatron-LM trains without FP8; its other --fp8-* options do nothing
    recipe = given.get("--fp8-recipe", "delayed")
    name = MEGATRON_RECIPES.get((fmt, recipe))
    if name is None:
        nearest = {"custom": "--fp8-format hybrid --fp8-recipe delayed"}.get(recipe)
        if nearest is None:
            wanted = "e4m3" if recipe in ("blockwise", "mxfp8") else "hybrid"
            nearest = f"--fp8-format {wanted} --fp8-recipe {recipe}"
        raise InputError(f"--fp8-format {fmt} --fp8-recipe {recipe}: not one of parex's FP8 "
                         f"recipes; the nearest: {nearest}")
    if name == "fp8-delayed":
        history = given.get("--fp8-amax-history-len", "1")
        algorithm = given.get("--fp8-amax-compute-algo", "most_recent")
        if (str(history), algorithm) != ("1024", "max"):
            approximated.append(f"--fp8-amax-history-len {history} --fp8-amax-compute-algo "
                                f"{algorithm} priced as fp8-delayed's 1024-step max history: "
                                f"the same GEMMs and casts, histories of 12 KiB per projection "
                                f"per layer")
    gathers_fp8 = "--fp8-param-gather" in given
    if gathers_fp8 != PRECISIONS[name].gathers_fp8:
        approximated.append(f"{name} gathers sharded weights in "
                            f"{'FP8' if PRECISIONS[name].gathers_fp8 else 'bf16'}; this run "
                            f"{'does' if gathers_fp8 else 'does not'} give --fp8-param-gather")
    return name


def megatron_options(name: str, gathers: bool) -> list[str]:
    """Megatron-LM's options for recipe `name`; `gathers`: the layout gathers parameters
    (the distributed optimizer or FSDP), where --fp8-param-gather applies."""
    if not PRECISIONS[name].fp8:
        return []
    for (fmt, recipe), ours in MEGATRON_RECIPES.items():
        if ours == name:
            words = ["--fp8-format", fmt, "--fp8-recipe", recipe]
            if PRECISIONS[name].delayed:
                words += ["--fp8-amax-history-len", str(PRECISIONS[name].history),
                          "--fp8-amax-compute-algo", "max"]
            return words + (["--fp8-param-gather"] if gathers and PRECISIONS[name].gathers_fp8
                            else [])
    raise refuse("Megatron-LM", f"--precision {name} (torchao's rowwise scaling)",
                 "--precision fp8-blockwise (--fp8-recipe blockwise) or fp8-current")


# --- torchtitan --------------------------------------------------------------------------

TORCHTITAN_CONVERTER = "quantize.linear.float8"
TORCHTITAN_TABLE = "quantize.linear.float8"
TORCHTITAN_MX = "quantize.linear.mx"  # torchao's MX linears: the converter and its table
TORCHTITAN_RECIPES = {None: "fp8-current", "tensorwise": "fp8-current",
                      "rowwise": "fp8-rowwise"}
TORCHTITAN_MX_RECIPES = {"mxfp8_cublas": "mxfp8"}  # recipe_name (its default) -> ours


def torchtitan_precision(converters: list, tables: dict, shards: bool,
                         approximated: list) -> str | None:
    """The recipe of torchtitan's model.converters and their `tables` ({"quantize.linear.
    float8": table, "quantize.linear.mx": table}); `shards`: the run has FSDP (where the FP8
    all-gather applies)."""
    linears = (TORCHTITAN_CONVERTER, TORCHTITAN_MX)
    others = [c for c in converters if c not in linears]
    if others:
        raise InputError(f"model.converters {others}: parex prices float8 and MX linears "
                         f"(\"{TORCHTITAN_CONVERTER}\", \"{TORCHTITAN_MX}\"), not grouped-GEMM "
                         f"converters; drop them")
    for name in linears:
        if tables.get(name) and name not in converters:
            raise InputError(f"[{name}] without \"{name}\" in model.converters does nothing: "
                             f"add the converter or drop the table")
    if all(name in converters for name in linears):
        raise InputError(f"model.converters {converters}: a linear is converted once, to "
                         f"float8 or to MX; keep one")
    if TORCHTITAN_MX in converters:
        return _torchtitan_mx(tables.get(TORCHTITAN_MX, {}), approximated)
    if not converters:
        return None
    table = tables.get(TORCHTITAN_TABLE, {})
    recipe = table.get("recipe_name")
    if recipe not in TORCHTITAN_RECIPES:
        raise InputError(f"{TORCHTITAN_TABLE}.recipe_name {recipe!r}: not one of parex's FP8 "
                         f"recipes; use \"tensorwise\" or \"rowwise\"")
    if table.get("emulate"):
        raise InputError(f"{TORCHTITAN_TABLE}.emulate: FP8 emulated in high precision, not "
                         f"an FP8 GEMM's speed; drop it")
    name = TORCHTITAN_RECIPES[recipe]
    if shards and bool(table.get("enable_fsdp_float8_all_gather")) != PRECISIONS[name].gathers_fp8:
        approximated.append(f"{name} gathers FSDP's weights in "
                            f"{'FP8' if PRECISIONS[name].gathers_fp8 else 'bf16'}; this run's "
                            f"enable_fsdp_float8_all_gather is "
                            f"{str(bool(table.get('enable_fsdp_float8_all_gather'))).lower()}")
    return name


def _torchtitan_mx(table: dict, approximated: list) -> str:
    """The recipe of [quantize.linear.mx]: torchao's MXFP8 linears (every one but the output
    layer by default, as parex keeps the head out of FP8)."""
    recipe = table.get("recipe_name", "mxfp8_cublas")
    if recipe not in TORCHTITAN_MX_RECIPES:
        raise InputError(f"{TORCHTITAN_MX}.recipe_name {recipe!r}: parex prices MXFP8 on "
                         f"the hardware's block-scaled GEMMs; use \"mxfp8_cublas\"")
    skipped = [fqn for fqn in table.get("filter_fqns", ["output"]) if fqn != "output"]
    if skipped:
        approximated.append(f"{TORCHTITAN_MX}.filter_fqns {skipped} priced in MXFP8 too: "
                            f"parex runs every block projection in it")
    return TORCHTITAN_MX_RECIPES[recipe]


def torchtitan_table(name: str, shards: bool) -> tuple[str, dict] | None:
    """(the converter, its table) of recipe `name` (None: no FP8)."""
    if not PRECISIONS[name].fp8:
        return None
    if name in TORCHTITAN_MX_RECIPES.values():
        recipe = next(k for k, v in TORCHTITAN_MX_RECIPES.items() if v == name)
        return TORCHTITAN_MX, {"recipe_name": recipe}
    recipes = {"fp8-current": "tensorwise", "fp8-rowwise": "rowwise"}
    if name not in recipes:
        nearest = {"fp8-delayed": "fp8-current (torchao's float8 has no delayed scaling)",
                   "fp8-blockwise": "fp8-rowwise or mxfp8"}[name]
        raise refuse("torchtitan", f"--precision {name}", f"--precision {nearest}")
    table = {"recipe_name": recipes[name]}
    if shards and PRECISIONS[name].gathers_fp8:
        table |= {"enable_fsdp_float8_all_gather": True,
                  "precompute_float8_dynamic_scale_for_fsdp": True}
    return TORCHTITAN_CONVERTER, table


# --- MaxText -----------------------------------------------------------------------------

MAXTEXT_RECIPES = {"": None, "fp8": "fp8-delayed", "nanoo_fp8": "fp8-delayed"}


def maxtext_precision(quantization: str, approximated: list) -> str | None:
    """The recipe of MaxText's `quantization` ("" : none)."""
    if quantization not in MAXTEXT_RECIPES:
        raise InputError(f"quantization {quantization!r}: parex prices no int8, int4 or mixed "
                         f"quantization; use \"fp8\" or \"\" (bfloat16)")
    if quantization == "nanoo_fp8":
        approximated.append("quantization nanoo_fp8 priced as fp8: AMD's E4M3FNUZ / E5M2FNUZ "
                            "have the same bytes and rate as OCP's E4M3 / E5M2")
    return MAXTEXT_RECIPES[quantization]


def maxtext_quantization(name: str) -> str:
    """MaxText's `quantization` of recipe `name`."""
    if not PRECISIONS[name].fp8:
        return ""
    if name != "fp8-delayed":
        raise refuse("MaxText", f"--precision {name} (its fp8 is delayed scaling per tensor)",
                     "--precision fp8-delayed (quantization: fp8)")
    return "fp8"


__all__ = ["MEGATRON_OPTIONS", "TORCHTITAN_CONVERTER", "TORCHTITAN_MX", "TORCHTITAN_TABLE",
           "maxtext_precision", "maxtext_quantization", "megatron_options", "megatron_precision",
           "torchtitan_precision", "torchtitan_table"]
