"""The defaults: what parex assumes for everything a user leaves out, in each regime. A value is
a default here and nowhere else; parex.setting.resolve is the one place they are applied.

The emulated regime (this machine's CPU mesh) describes parex's own step: the model's dtype,
the parex recipe (float32 master weights, gradients and Adam moments), the xla-cpu convention,
a small global batch (LOCAL_GLOBAL_BATCH), no remat, GPipe, naive attention. The accelerator
regime describes what real runs there use: bfloat16, the mixed recipe (ZeRO's 2 + 2 + 12 bytes
per parameter; parex's when float32 is asked for), the gpu convention, the global batch large
runs train with (`default_global_batch`) in microbatches of one sequence from 1B parameters,
1F1B for pipelines that name no schedule (Narayanan et al. 2021: GPipe's order stashes all m
microbatches' activations, 1F1B at most p), the flash attention kernel, and no remat (selective
recompute saves nothing under flash; it stays the default of naive attention from 1B).
"""

from __future__ import annotations

import math

from .stacks import stack as named_stack

DEVICES = 8  # emulated devices when neither the layout nor --devices says how many
HARDWARE = "cpu-local"  # every command's profile when --hardware is not given: this machine
MODEL = "tiny"  # every command's model preset when --model is not given
LOCAL_GLOBAL_BATCH = 16  # sequences per step on the emulated mesh: a step in well under a second
ACCELERATOR_DTYPE = "bfloat16"  # the compute dtype of real runs (every run since 2022)
LARGE_MODEL = 1e9  # parameters from which an accelerator run trains one sequence per microbatch
# tokens per step by model size on an accelerator: GPT-3's Table 2.1 (Brown et al. 2020: 0.5M
# tokens under 1B parameters, 1-2M up to 13B, 3.2M at 175B) and Llama 2's 4M for every size
TOKENS_PER_STEP = ((1e9, 2 ** 19), (20e9, 2 ** 21), (float("inf"), 2 ** 22))
# the attention kernel (parex.model.attention): flash on an accelerator, as every large run since
# 2023 (FlashAttention-2/3, cuDNN); naive on the emulated mesh, whose memory constants were read
# off its steps, and the score-materialising program Korthikanti et al. 2022's tables assume
ATTENTION_ACCELERATOR = "flash"
ATTENTION_LOCAL = "naive"
# a mixture of experts' most-loaded expert over the mean (predict.accelerator.expert_slots):
# balanced unless the caller says otherwise, a stated assumption, never fitted
EXPERT_IMBALANCE = 1.0


def default_dtype(model, own: bool) -> str:
    """The compute dtype: the model's own where parex runs it (the emulated mesh, an execution
    anywhere), else what accelerator runs use (ACCELERATOR_DTYPE), whatever the preset says."""
    return model.dtype if own else ACCELERATOR_DTYPE


def default_global_batch(model, seq_len: int, n_devices: int, local: bool) -> int:
    """The global batch when none is given. On the emulated mesh LOCAL_GLOBAL_BATCH. On an
    accelerator the tokens per step of published runs of that size (TOKENS_PER_STEP: 0.5M
    tokens under 1B parameters, 2M under 20B, 4M from 20B), as sequences of seq_len rounded to
    a power of two, then up to a multiple of the cluster's device count n_devices so that every
    data-parallel size of a layout that fills the cluster divides it. llama2-7b at 4096 tokens:
    512 sequences; llama2-70b on 256 GPUs: 1024."""
    if local:
        return LOCAL_GLOBAL_BATCH
    tokens = next(t for size, t in TOKENS_PER_STEP if model.n_params < size)
    sequences = 2 ** max(0, round(math.log2(max(tokens / seq_len, 1.0))))
    return -(-sequences // n_devices) * n_devices


def default_microbatch(model, local: bool) -> int | None:
    """b when the global batch is the default too and neither the train config nor the
    layout's microbatch count sets it: one sequence per microbatch for models from 1B
    parameters on an accelerator (gradient accumulation up to the global batch, as Megatron-LM's
    large runs with --micro-batch-size 1), so that a hand-typed layout under the default batch
    of millions of tokens keeps one sequence's activations, not B / dp of them; else None (no
    accumulation: b = B / dp)."""
    return 1 if not local and model.n_params >= LARGE_MODEL else None


def default_recipe(local: bool, dtype: str, stack: str | None = None) -> str:
    """mixed (16-bit compute over float32 master state) for bfloat16 on an accelerator, or the
    stack's own there (parex.stacks: torchtitan's fsdp2); parex (float32 state) on the emulated
    mesh, whose step keeps it, and for float32 training, whose weights, gradients and Adam
    moments are all float32 (4 + 4 + 8 bytes per parameter)."""
    if local or dtype != "bfloat16":
        return "parex"
    return (named_stack(stack).recipe if stack is not None else None) or "mixed"


def default_convention(local: bool) -> str:
    """xla-cpu (what the emulated mesh compiles) there; gpu (the ideal program) elsewhere."""
    return "xla-cpu" if local else "gpu"


def default_attention(local: bool, causal: bool = True) -> str:
    """flash on an accelerator, naive on the emulated CPU mesh; naive for attention that is not
    causal (a ViT's), which parex's blockwise kernel does not run (parex.model.attention)."""
    if not causal:
        return "naive"
    return ATTENTION_LOCAL if local else ATTENTION_ACCELERATOR


def default_remat(model, local: bool, attention: str) -> str:
    """Selective recompute (Korthikanti et al. 2022: the attention scores recomputed, not
    kept) for models from 1B parameters on an accelerator when the kernel keeps the scores;
    under flash attention, which keeps none, it would recompute for nothing, so none."""
    keeps_scores = attention == "naive"
    return "selective" if not local and keeps_scores and model.n_params >= LARGE_MODEL \
        else "none"


def default_schedule(local: bool) -> str:
    """The schedule of a pipeline that names none: 1F1B on an accelerator, GPipe (the order
    jax.grad over a scan of ticks gives) on the emulated mesh."""
    return "gpipe" if local else "1f1b"
