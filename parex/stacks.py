"""Software stacks: which communication overlaps (and MoE dispatch) a framework runs, at a
named version.

A stack is a value: the overlaps it turns on (OVERLAPS, user-facing names) and its gradient
bucket size. parex.setting.resolve turns it into the flags of parex.predict.comm.Convention
(`flags`), which the predictor prices (parex.predict.overlap); an explicit `--overlap` list
replaces the stack's.

    tp-comm       Transformer Engine's chunked TP-communication overlap (Megatron-Core
                  --tp-comm-overlap, needs sequence parallelism): SP's all-gathers split into
                  ring-exchange chunks behind their GEMM, its reduce-scatters pipelined behind
                  the GEMM that produces them (TE `initialize_ub`'s default methods)
    async-tp      PyTorch's micro-pipelined ("async") tensor parallelism (torchtitan
                  `enable_async_tensor_parallel`): the same two decompositions, t chunks each
    grad-reduce   the data-parallel gradient reduction in buckets during the backward
    param-gather  the distributed optimizer's parameter all-gather in buckets during the next
                  step's forward (Megatron-Core --overlap-param-gather)
    tp-backward   the column-parallel layers' input-gradient all-reduce (SP: reduce-scatter)
                  beside their weight-gradient GEMM (Megatron-LM from September 2021)
    moe-a2a       a mixture's expert-parallel all-to-alls beside another microbatch's compute
                  (Megatron-Core --overlap-moe-expert-parallel-comm)
    deepep        not an overlap but the dispatch's algorithm: a token sent once to each remote
                  node holding one of its experts, forwarded there over NVLink (DeepEP or
                  HybridEP under Megatron-Core's flex dispatcher, --moe-token-dispatcher-type
                  flex), where the default all-to-all sends a copy per expert

These stacks only name overlaps. The step-efficiency fits of the published 2021-22 runs
(parex.predict.published.STACKS: megatron-lm-2021, megatron-lm-2022, megatron-deepspeed) take
each run's overlaps from its CSV row instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import InputError, unknown

# user-facing name -> the parex.predict.comm.Convention flag it sets
OVERLAPS = {"tp-comm": "overlaps_tp_comm", "async-tp": "async_tp",
            "grad-reduce": "overlaps_grad_reduce", "param-gather": "overlaps_param_gather",
            "tp-backward": "overlaps_tp_backward", "moe-a2a": "overlaps_moe_a2a",
            "deepep": "dispatch_per_node"}
# Megatron-Core's DistributedDataParallelConfig.bucket_size default: max(40M, 1M x data-parallel
# size) parameters (megatron/core/distributed/distributed_data_parallel.py, core_r0.9-0.12)
MEGATRON_BUCKET_PARAMS = 40e6
MEGATRON_BUCKET_PER_RANK = 1e6


@dataclass(frozen=True)
class Stack:
    """One framework's overlaps at a version (module docstring)."""

    name: str
    version: str
    overlaps: tuple[str, ...]  # names among OVERLAPS that are on
    bucket_params: float  # gradient / parameter bucket size in parameters; 0: one per layer
    source: str
    recipe: str | None = None  # the memory recipe its bfloat16 training keeps (parex.predict.
    #                            memory.RECIPES); None: parex.defaults'

    def flags(self, overlaps=None) -> dict:
        """Convention flags: every overlap on or off (`overlaps`, names, replacing the stack's
        own where given) and the bucket size."""
        on = self.overlaps if overlaps is None else tuple(overlaps)
        return {flag: name in on for name, flag in OVERLAPS.items()} | {
            "bucket_params": self.bucket_params}


STACKS = {s.name: s for s in (
    Stack("parex", "-", ("grad-reduce",), 0.0,
          "parex's ideal program (the gpu convention): gradients reduced layer by layer "
          "behind the backward, nothing else overlapped"),
    Stack("megatron-core", "core_r0.12 (2025)", ("tp-backward",), MEGATRON_BUCKET_PARAMS,
          "Megatron-LM megatron/training/arguments.py: --overlap-grad-reduce, "
          "--overlap-param-gather and --tp-comm-overlap are off unless given; the async "
          "input-gradient reduction of tensor_parallel/layers.py is on"),
    Stack("nemo", "2.x (2025)", ("tp-comm", "grad-reduce", "param-gather", "tp-backward"),
          MEGATRON_BUCKET_PARAMS,
          "NeMo 2 performance recipes (nemo/collections/llm/recipes, e.g. llama3_70b.py): "
          "MegatronCommOverlapCallback(tp_comm_overlap=True) and DistributedDataParallelConfig("
          "overlap_grad_reduce=True, overlap_param_gather=True) on Megatron-Core"),
    Stack("torchtitan", "0.1 (2025)", ("grad-reduce",), 0.0,
          "torchtitan: FSDP2 reduce-scatters each block's gradients behind the backward and "
          "prefetches its gathers; parallelism.enable_async_tensor_parallel is off unless "
          "given (then add async-tp); float32 shards gathered in bfloat16, gradients reduced "
          "in float32 (recipe fsdp2)", recipe="fsdp2"),
    Stack("maxtext", "2025", ("grad-reduce",), 0.0,
          "MaxText on XLA: the latency-hiding scheduler runs the gradient reductions as async "
          "collectives behind the backward; collective matmul is off unless configured"),
)}


def stack(name: str) -> Stack:
    if name not in STACKS:
        raise InputError(unknown("stack", name, tuple(STACKS)))
    return STACKS[name]


def parse_overlaps(text: str) -> tuple[str, ...]:
    """`--overlap tp-comm,grad-reduce`: the names on ("none": no overlap), checked."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if names == ("none",):
        return ()
    for name in names:
        if name not in OVERLAPS:
            raise InputError(unknown("overlap", name, tuple(OVERLAPS) + ("none",)))
    return check_overlaps(names)


def check_overlaps(names) -> tuple[str, ...]:
    if "tp-comm" in names and "async-tp" in names:
        raise InputError("overlaps tp-comm and async-tp are two implementations of the same "
                         "overlap (Transformer Engine's, PyTorch's): name one of them")
    return tuple(names)


def overlap_flags(stack_name: str | None, overlaps=None) -> dict:
    """The Convention flags of a stack (parex's own when None) with `overlaps` (names) replacing
    its list where given (a list of names, or `--overlap`'s text); {} when neither is given
    (the convention's own flags stand)."""
    if isinstance(overlaps, str):
        overlaps = parse_overlaps(overlaps)
    if stack_name is None and overlaps is None:
        return {}
    return stack(stack_name or "parex").flags(None if overlaps is None
                                              else check_overlaps(overlaps))


def bucket_params(size: float, dp) -> np.ndarray:
    """A stack's bucket over `dp` data-parallel ranks (columns): Megatron-Core's max(40M, 1M x
    dp) parameters; 0 (one bucket per layer) where the stack has none."""
    return np.where(size > 0, np.maximum(size, MEGATRON_BUCKET_PER_RANK * np.asarray(dp)), 0.0)


__all__ = ["OVERLAPS", "STACKS", "Stack", "bucket_params", "check_overlaps", "overlap_flags",
           "parse_overlaps", "stack"]
