"""Precision as a recipe: which matmuls run in FP8, in which formats, how their scales are found.

    p = precision("fp8-delayed")
    p.fp8, p.forward_format, p.backward_format, p.scaling, p.history, p.gathers_fp8

A recipe names what the published stacks do; parex's executor runs each one on the emulated mesh
(parex.model.fp8) and its predictor prices each one per chip (parex.predict.fp8):

    bf16           no FP8: every matmul in the compute dtype (fp32: float32 throughout)
    fp8-delayed    Transformer Engine's DelayedScaling (NeMo / Megatron-Core, MaxText's fp8 through
                   Flax's Fp8DotGeneral): one scale per tensor, fp8_max / max(amax history of the
                   last 1024 steps) (TE's defaults amax_history_len=1024, amax_compute_algo="max",
                   margin 0); the HYBRID format, E4M3 forward (x, W) and E5M2 for the gradients
    fp8-current    TE's Float8CurrentScaling / torchao's float8 "tensorwise": one scale per tensor
                   from its own amax this step; HYBRID formats as above
    fp8-rowwise    torchao's float8 "rowwise": a scale per row along each GEMM's contraction
                   axis, rounded down to a power of two, E4M3 for every operand
    fp8-blockwise  DeepSeek-V3 (arXiv:2412.19437, section 3.3): a scale per 1x128 tile of
                   activations and gradients and per 128x128 block of weights, current amax,
                   E4M3 for every operand
    mxfp8          OCP Microscaling (MX) FP8, Blackwell's block-scaled tensor cores: a
                   power-of-two (E8M0) scale per 32 consecutive elements along each GEMM's
                   contraction axis, weights too (one-dimensional blocks), E4M3 for every
                   operand; each GEMM quantises its operands from the 16-bit copies (rowwise
                   and columnwise MXFP8 differ)

What every recipe keeps out of FP8 (all the stacks above agree): the embedding lookup, the output
head, the attention score and value products, norms, the softmax, a mixture of experts' router;
master weights, gradients and Adam moments stay in the memory recipe's dtypes (float32 master
weights and moments). FP8 covers the blocks' projections: QKV, the attention output and the MLP's.

Amaxes are global: the amax of a tensor sharded over the mesh is reduced over every shard (an
all-reduce of one float32 scalar per tensor; a per-row or per-tile amax over the shards of its
contraction axis), so every shard quantises with the same scale and a layout's FP8 step equals
one device's running the same recipe.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InputError, unknown

E4M3, E5M2 = "float8_e4m3fn", "float8_e5m2"  # OCP FP8 formats (JAX's dtype names)
FP8_MAX = {E4M3: 448.0, E5M2: 57344.0}  # largest finite value of each (OCP FP8 spec, 2023)


@dataclass(frozen=True)
class Precision:
    """One precision recipe; see the module's table."""

    name: str
    fp8: bool  # whether the blocks' projections run in FP8
    forward_format: str | None = None  # x and W
    backward_format: str | None = None  # the output gradient dY
    scaling: str | None = None  # "tensor" | "row" | "block"
    history: int = 0  # steps of amax history (delayed scaling); 0: the current amax
    tile: int = 0  # the tile (1 x tile along the contraction axis) and block (tile x tile) size
    power_of_two: bool = False  # scales rounded down to a power of two (torchao rowwise)
    gathers_fp8: bool = False  # FSDP / ZeRO-3 all-gathers the FP8 weights (one scale per tensor)
    weight_blocks: bool = False  # block scaling: W's scales per tile x tile block, not 1 x tile
    scale_bytes: int = 4  # one scale's bytes: float32, or E8M0's 1
    peak: str = "float8"  # the chip's peak_flops entry its GEMMs run at (parex.hardware.Chip)
    source: str = ""

    @property
    def delayed(self) -> bool:
        return self.history > 0

    @property
    def saves_fp8_inputs(self) -> bool:
        """Whether the forward keeps its GEMM inputs in FP8 for the weight gradients, as
        Transformer Engine's modules do under every recipe of theirs and torchao's tensorwise
        float8; torchao's rowwise keeps the 16-bit input, which its backward requantises along
        the other axis."""
        return self.fp8 and self.scaling != "row"

    @property
    def amax_pass(self) -> bool:
        """Whether a cast first reads its tensor once more for the amax: a current scale over a
        whole tensor or row does; a block's amax is found inside the cast kernel, among the
        elements it is casting, and delayed scaling reads the history."""
        return self.scaling in ("tensor", "row") and not self.delayed


# which recipe a stack's precision setting is; every number is the stack's documented default
PRECISIONS = {
    "fp32": Precision("fp32", False, source="float32 throughout"),
    "bf16": Precision("bf16", False, source="bfloat16 compute over float32 master state"),
    "fp8-delayed": Precision(
        "fp8-delayed", True, E4M3, E5M2, "tensor", history=1024, gathers_fp8=True,
        source="Transformer Engine DelayedScaling (fp8_format=HYBRID, amax_history_len=1024, "
               "amax_compute_algo='max', margin=0); Megatron-Core --fp8-format hybrid with "
               "--fp8-param-gather; MaxText quantization=fp8 (Flax Fp8DotGeneral)"),
    "fp8-current": Precision(
        "fp8-current", True, E4M3, E5M2, "tensor", gathers_fp8=True,
        source="Transformer Engine Float8CurrentScaling; torchao float8 'tensorwise' with "
               "enable_fsdp_float8_all_gather (torchtitan --float8)"),
    "fp8-rowwise": Precision(
        "fp8-rowwise", True, E4M3, E4M3, "row", power_of_two=True,
        source="torchao float8 'rowwise' recipe: axiswise scales, E4M3 for all operands, "
               "scales rounded to powers of two; weights all-gathered in bfloat16"),
    "fp8-blockwise": Precision(
        "fp8-blockwise", True, E4M3, E4M3, "block", tile=128, weight_blocks=True,
        source="DeepSeek-V3 technical report (arXiv:2412.19437) section 3.3.2: 1x128 tiles for "
               "activations, 128x128 blocks for weights, online scaling, E4M3 for all tensors"),
    "mxfp8": Precision(
        "mxfp8", True, E4M3, E4M3, "block", tile=32, power_of_two=True, scale_bytes=1,
        peak="mxfp8",
        source="OCP Microscaling Formats (MX) Specification v1.0: MXFP8, blocks of 32 elements "
               "sharing an E8M0 scale; Transformer Engine MXFP8BlockScaling (fp8_format E4M3 "
               "for both passes; one-dimensional blocks; the scale's exponent rounded up, so "
               "the block's amax never saturates; rowwise and columnwise copies quantised from "
               "the 16-bit tensor); Megatron-LM --fp8-format e4m3 --fp8-recipe mxfp8"),
}
PRECISION_NAMES = tuple(PRECISIONS)
# the precision a dtype means when no precision is named, and the compute dtype of each recipe
DTYPE_PRECISION = {"float32": "fp32", "bfloat16": "bf16"}
FP8_COMPUTE_DTYPE = "bfloat16"  # what the non-FP8 ops of every FP8 recipe run in


def precision(name: str) -> Precision:
    """The recipe called `name`; an unknown name lists the known ones."""
    try:
        return PRECISIONS[name]
    except KeyError:
        raise InputError(unknown("precision", name, PRECISION_NAMES)) from None


def compute_dtype(name: str, dtype: str | None) -> str | None:
    """The compute dtype a precision implies (fp32: float32, bf16 and FP8: bfloat16), or the
    given dtype where it agrees; an FP8 recipe over float32 compute is allowed (the executor's
    parity tests run it so). None: the precision leaves the dtype to the defaults."""
    implied = {"fp32": "float32", "bf16": "bfloat16"}.get(name)
    if dtype is not None and implied is not None and dtype != implied:
        raise InputError(f"precision {name!r} means dtype {implied}, not {dtype}: drop --dtype "
                         f"or name the precision of {dtype} ({DTYPE_PRECISION.get(dtype)})")
    if dtype is not None:
        return dtype
    return implied or FP8_COMPUTE_DTYPE


def check_chip(name: str, chip) -> None:
    """Refuse an FP8 recipe on a chip whose profile lists no rate for it: no FP8 at all (A100,
    TPU v4/v5/v6e), or FP8 without MX block scaling (Hopper, MI300X) for mxfp8."""
    recipe = PRECISIONS[name]
    if not recipe.fp8 or recipe.peak in chip.peak_flops or chip.calibration is not None:
        return
    if "float8" in chip.peak_flops:
        raise InputError(f"precision {name}: {chip.name}'s matmul units have no microscaling "
                         f"(MX) block scales (Blackwell's do: b200, gb200-nvl72); use "
                         f"--precision fp8-blockwise or fp8-current on it")
    raise InputError(f"precision {name}: {chip.name} has no FP8 matmul units (its profile "
                     f"lists {', '.join(chip.peak_flops)}); use --precision bf16, or an FP8 "
                     f"chip (h100-sxm, h200, h800, b200, mi300x)")


__all__ = ["E4M3", "E5M2", "FP8_MAX", "PRECISIONS", "PRECISION_NAMES", "Precision",
           "check_chip", "compute_dtype", "precision"]
