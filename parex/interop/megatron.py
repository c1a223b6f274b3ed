"""Megatron-LM launch arguments <-> parex's (ModelConfig, TrainConfig, Layout), both ways.

    run = from_megatron("torchrun --nnodes 8 --nproc-per-node 8 pretrain_gpt.py --num-layers 96 "
                        "... --tensor-model-parallel-size 8 --use-distributed-optimizer")
    run.predict("h100-sxm")
    to_megatron(model, train, layout, "h100-sxm")   # 'torchrun ... pretrain_gpt.py ...'

Option names and defaults are Megatron-LM's at core_v0.15.0 (megatron/training/arguments.py
and validate_args there); data/interop/megatron-lm.json lists every option of that version,
and an option it lacks is refused with the nearest name. Megatron derives the data-parallel
size from the world size (WORLD_SIZE, set by torchrun from --nnodes x --nproc-per-node): a
command without a torchrun prefix needs `world_size`.

The mapping, one option per parex field (docs/interop.md has the table):
    --tensor/--pipeline/--context/--expert-model-parallel-size   tensor, stage, seq, expert
    world size / (TP x PP x CP)                                  data x expert (EP is carved out
                                                                 of the data-parallel ranks)
    --num-virtual-stages-per-pipeline-rank v, or
    --num-layers-per-virtual-pipeline-stage n (v = L / PP / n)   virtual_stages, schedule
                                                                 interleaved (else 1f1b)
    --use-distributed-optimizer                                  zero=1
    --use-megatron-fsdp --data-parallel-sharding-strategy S      zero=2 (optim_grads) or 3
    --use-torch-fsdp2                                            fsdp (all data-parallel ranks)
    --sequence-parallel                                          sp
    --cp-comm-type p2p | a2a                                     cp=ring | ulysses
    --micro-batch-size b, --global-batch-size B                  microbatches = B / (b x dp)
    --recompute-activations | --recompute-granularity full       remat selective | full
    --bf16 | --fp16 | neither                                    dtype bfloat16 (fp16 as
                                                                 bfloat16: same bytes) | float32
    --bf16 (float32 gradient reduction, its default),            recipe mixed-fp32-grads |
    --grad-reduce-in-bf16, --main-grads-dtype bf16,              mixed (16-bit gradients)
    --accumulate-allreduce-grads-in-fp32
    --use-flash-attn, --attention-backend                        attention flash | naive
    --fp8-format, --fp8-recipe, --fp8-amax-*, --fp8-param-gather precision fp8-delayed |
                                                                 fp8-current | fp8-blockwise |
                                                                 mxfp8
                                                                 (parex.interop.fp8)
    --tp-comm-overlap, --overlap-grad-reduce,                    stack megatron-core, overlaps
    --overlap-param-gather,                                      tp-comm, grad-reduce,
    --overlap-moe-expert-parallel-comm                           param-gather, moe-a2a
                                                                 (+ tp-backward)
    --moe-token-dispatcher-type flex --moe-enable-deepep         overlaps + deepep (a token
                                                                 sent once per remote node)
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence

from ..config import ModelConfig, TrainConfig
from ..errors import InputError
from ..stacks import stack
from ..layout import Layout
from ..setting import Setting, resolve
from . import fp8
from .result import (Imported, divide, option_list, refuse, refuse_parex_only, unknown_option,
                     whole)

FRAMEWORK = "Megatron-LM"
VERSION = "core_v0.15.0"
SCRIPT = "pretrain_gpt.py"  # the GPT (decoder-only) entry point every exported command runs
OPTIONS_FILE = "megatron-lm"  # data/interop/megatron-lm.json

# Megatron-LM's pipeline schedules, by parex's name: 1F1B, and with virtual stages the
# interleaved 1F1B of Narayanan et al. 2021. The nearest of parex's others it can run:
NEAREST_SCHEDULE = {"gpipe": "schedule=1f1b (same stages, at most p microbatches in flight)",
                    "zbh1": "schedule=1f1b (the same order without the split backward)",
                    "bfs": "schedule=interleaved with the same virtual stages",
                    "zbv": "schedule=interleaved,virtual=2 (two chunks per rank, in a loop "
                           "rather than a V)",
                    "local": "schedule=1f1b (end-to-end backprop)"}
CP_COMM = {"ring": "p2p", "ulysses": "a2a"}  # --cp-comm-type of parex's context-parallel modes
ZERO_STRATEGY = {2: "optim_grads", 3: "optim_grads_params"}  # Megatron FSDP's sharding
ATTENTION_BACKEND = {"flash": "flash", "naive": "unfused"}  # --attention-backend of each kernel
# --attention-backend values whose kernels keep no attention scores (auto: Transformer Engine
# picks a fused or flash kernel)
FUSED_BACKENDS = ("flash", "fused", "auto")

# Options that change the step in a way parex cannot express: refused, with the nearest run.
REFUSED = {
    "--pipeline-model-parallel-layout": "a custom placement of layers on stages; drop it for an "
                                        "even split",
    "--decoder-first-pipeline-num-layers": "an uneven pipeline split; drop it for an even split",
    "--decoder-last-pipeline-num-layers": "an uneven pipeline split; drop it for an even split",
    "--account-for-embedding-in-pipeline-split": "an uneven pipeline split; drop it",
    "--account-for-loss-in-pipeline-split": "an uneven pipeline split; drop it",
    "--multi-latent-attention": "multi-latent attention; drop it to predict multi-head attention",
    "--fp4-format": "FP4 training; use --bf16",
    "--num-experts-per-layer": "experts differing by layer; give --num-experts",
    "--moe-layer-freq": "dense layers between MoE layers; drop it (every layer MoE)",
    "--distribute-saved-activations": "activations split over tensor ranks; drop it",
    "--cpu-offloading": "activations offloaded to the host; drop it",
}

# Options read and left out of the prediction, by the reason they do not change its numbers.
IGNORED_REASONS = (
    (("--data", "--split", "--vocab-file", "--merge-file", "--tokenizer", "--mock-data",
      "--num-workers", "--vocab-extra-ids", "--dataloader", "--eod-mask-loss",
      "--reset-", "--no-create-attention-mask"), "data and tokenizer"),
    (("--save", "--load", "--ckpt", "--no-load", "--no-save", "--finetune", "--pretrained",
      "--dist-ckpt", "--auto-detect", "--async-save", "--use-dist-ckpt", "--use-checkpoint",
      "--exit", "--non-persistent", "--use-persistent"), "checkpoints and exits"),
    (("--log", "--tensorboard", "--wandb", "--timing", "--eval", "--profile", "--record",
      "--one-logger", "--logging", "--check-for", "--calculate-per-token-loss"),
     "logging and evaluation"),
    (("--lr", "--min-lr", "--weight-decay", "--start-weight-decay", "--end-weight-decay",
      "--adam", "--clip-grad", "--init-method", "--seed", "--attention-dropout",
      "--hidden-dropout", "--train-iters", "--train-samples", "--loss-scale",
      "--initial-loss-scale", "--min-loss-scale", "--hysteresis", "--norm-epsilon",
      "--rotary", "--use-rope-scaling", "--rope-scaling", "--sgd-momentum",
      "--override-opt", "--use-checkpoint-opt", "--decoupled", "--moe-aux-loss-coeff",
      "--moe-z-loss-coeff", "--moe-router-load-balancing-type", "--moe-router-score-function",
      "--moe-router-pre-softmax", "--moe-grouped-gemm", "--moe-permute-fusion",
      "--moe-router-dtype", "--moe-router-bias-update-rate", "--moe-router-enable-expert-bias"),
     "optimizer, schedule and numerics"),
    (("--overlap", "--no-", "--tp-comm", "--transformer-impl", "--distributed-backend",
      "--distributed-timeout", "--use-mcore-models", "--accumulate-allreduce", "--grad-reduce",
      "--apply-query-key-layer-scaling", "--attention-softmax-in-fp32", "--bias-",
      "--masked-softmax", "--cross-entropy", "--use-legacy-models", "--ddp-",
      "--manual-gc", "--empty-unused-memory", "--deterministic", "--use-cpu-initialization",
      "--spec", "--align-", "--delay-", "--defer-", "--use-nccl-ub", "--nccl-"),
     "kernels, fusions and overlaps (parex's gpu convention states its own)"),
)

# Megatron-LM's overlap options and the overlaps (parex.stacks) they turn on
OVERLAP_OPTIONS = {"--tp-comm-overlap": "tp-comm", "--overlap-grad-reduce": "grad-reduce",
                   "--overlap-param-gather": "param-gather",
                   "--overlap-moe-expert-parallel-comm": "moe-a2a"}
# Megatron-Core's flex dispatcher (DeepEP, a token sent once per remote node: the `deepep` of
# parex.stacks) and core_v0.15.0's option for its backend (later releases name it, DeepEP or
# HybridEP, by --moe-flex-dispatcher-backend)
DISPATCHER, DEEPEP = "--moe-token-dispatcher-type", "--moe-enable-deepep"
# the options this module maps to parex fields (the rest are refused or ignored)
MAPPED = set(OVERLAP_OPTIONS) | set(fp8.MEGATRON_OPTIONS) | {DISPATCHER, DEEPEP} | {
    "--num-layers", "--hidden-size", "--num-attention-heads", "--ffn-hidden-size",
    "--group-query-attention", "--num-query-groups", "--kv-channels", "--seq-length",
    "--max-position-embeddings", "--vocab-size", "--padded-vocab-size",
    "--make-vocab-size-divisible-by", "--tokenizer-type", "--swiglu", "--normalization",
    "--position-embedding-type", "--disable-bias-linear", "--untie-embeddings-and-output-weights",
    "--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size",
    "--moe-shared-expert-intermediate-size", "--moe-expert-capacity-factor",
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size",
    "--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank",
    "--context-parallel-size", "--cp-comm-type", "--expert-model-parallel-size",
    "--expert-tensor-parallel-size", "--use-distributed-optimizer", "--use-torch-fsdp2",
    "--use-megatron-fsdp", "--data-parallel-sharding-strategy", "--sequence-parallel",
    "--micro-batch-size", "--global-batch-size", "--recompute-activations",
    "--recompute-granularity", "--recompute-method", "--recompute-num-layers", "--bf16",
    "--fp16", "--use-flash-attn", "--attention-backend", "--optimizer", "--rampup-batch-size",
    "--grad-reduce-in-bf16", "--main-grads-dtype", "--accumulate-allreduce-grads-in-fp32",
}


def known_options() -> dict[str, str]:
    """Every option of Megatron-LM at VERSION, and whether it takes a value (data/interop)."""
    return option_list(OPTIONS_FILE)["options"]


# --- import ------------------------------------------------------------------------------------

def from_megatron(command: str | Sequence[str], world_size: int | None = None,
                  name: str = "megatron") -> Imported:
    """A Megatron-LM launch (a command line, its words, or the text of a launch script's
    arguments) as parex's model, train config and layout. The world size comes from a torchrun
    prefix (--nnodes x --nproc-per-node) or `world_size`; an option Megatron-LM does not have,
    two that contradict each other, or one whose effect parex cannot express is an InputError
    naming it and the fix. `name` names the model in reports."""
    words = _words(command)
    launcher, options = _split_launcher(words)
    world = _world_size(launcher, world_size)
    given = _parse_options(options)
    return _Reader(given, world, name).imported()


def _words(command) -> list[str]:
    if isinstance(command, str):
        # a launch script's continuation lines, and its comments, are one command
        try:
            words = shlex.split(command.replace("\\\n", " "), comments=True)
        except ValueError as err:
            raise InputError(f"cannot split the Megatron-LM command into words: {err}; check "
                             f"its quotes") from None
    else:
        words = [str(w) for w in command]
    for word in words:
        if "$" in word:
            raise InputError(f"{word}: an unexpanded shell variable; give the command with its "
                             f"values (e.g. as `bash -x` prints it)")
    return words


def _split_launcher(words: list[str]) -> tuple[list[str], list[str]]:
    """(the launcher's words up to the training script, the script's options)."""
    for i, word in enumerate(words):
        if word.endswith(".py"):
            return words[:i + 1], words[i + 1:]
    if words and not words[0].startswith("-"):
        raise InputError(f"{words[0]}: the command has no training script (a word ending in "
                         f".py, e.g. {SCRIPT}); give the script's options, or the whole "
                         f"torchrun command")
    return [], words


def _world_size(launcher: list[str], world_size: int | None) -> int:
    """Devices of the run: torchrun's --nnodes x --nproc-per-node, or world_size."""
    found = {}
    i = 0
    while i < len(launcher):
        word = launcher[i]
        key, eq, value = word.partition("=")
        key = key.replace("_", "-")
        if key in ("--nnodes", "--nproc-per-node"):
            if not eq:
                i += 1
                value = launcher[i] if i < len(launcher) else ""
            if ":" in value:
                raise InputError(f"{key} {value}: an elastic range; give the run's node count")
            found[key] = whole(key, value)
        i += 1
    if found:
        launched = found.get("--nnodes", 1) * found.get("--nproc-per-node", 1)
        if world_size is not None and world_size != launched:
            raise InputError(f"world size {world_size} contradicts torchrun's {launched} "
                             f"(--nnodes x --nproc-per-node): give one of them")
        return launched
    if world_size is None:
        raise InputError("the world size: Megatron-LM reads it from torchrun; give the torchrun "
                         "prefix (--nnodes N --nproc-per-node P pretrain_gpt.py ...) or the "
                         "device count (world_size=, or --nodes with --hardware on the "
                         "command line)")
    if world_size < 1:
        raise InputError(f"world size {world_size}: give at least 1 device")
    return world_size


def _parse_options(words: list[str]) -> dict[str, object]:
    """{option: value} of the script's words: True for a flag, a list for a multi-value
    option, else the value's text. Unknown options, repeats and missing values are errors."""
    known = known_options()
    given: dict[str, object] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("--"):
            raise InputError(f"{word}: a value with no option before it; check the command "
                             f"near {' '.join(words[max(0, i - 1):i + 1])!r}")
        option, eq, value = word.partition("=")
        if option not in known:
            raise unknown_option(FRAMEWORK, VERSION, option, known)
        if option in given:
            raise InputError(f"{option} is given twice; keep one")
        kind = known[option]
        i += 1
        if kind == "flag":
            if eq:
                raise InputError(f"{word}: {option} is a switch and takes no value; write "
                                 f"{option}")
            given[option] = True
        elif kind == "values":
            values = [value] if eq else []
            while not eq and i < len(words) and not words[i].startswith("--"):
                values.append(words[i])
                i += 1
            if not values:
                raise InputError(f"{option} needs a value")
            given[option] = values
        else:
            if not eq:
                if i >= len(words) or words[i].startswith("--"):
                    raise InputError(f"{option} needs a value")
                value = words[i]
                i += 1
            given[option] = value
    return given


class _Reader:
    """Turns the parsed options into parex's values, noting what it ignores and assumes."""

    def __init__(self, given: dict, world: int, name: str):
        self.given, self.world, self.name = given, world, name
        self.ignored, self.assumed, self.approximated = [], [], []

    # --- helpers --------------------------------------------------------------------------
    def has(self, option: str) -> bool:
        return option in self.given

    def int(self, option: str, default=None, note: str | None = None):
        """The option's whole number, or `default` (noted as assumed when `note` says why)."""
        if option in self.given:
            return whole(option, self.given[option])
        if default is None:
            return None
        if note is not None:
            self.assumed.append(f"{option} {default}{note}")
        return default

    def require(self, option: str, example: str):
        if option not in self.given:
            raise InputError(f"{option}: Megatron-LM {VERSION} has no default for it; add "
                             f"{option} {example}")
        return whole(option, self.given[option])

    def conflict(self, a: str, b: str, fix: str):
        if self.has(a) and self.has(b):
            raise InputError(f"{a} and {b} contradict each other: {fix}")

    # --- the reading ----------------------------------------------------------------------
    def imported(self) -> Imported:
        self.refuse_what_parex_cannot_express()
        self.contradictions()
        tp = self.int("--tensor-model-parallel-size", 1)
        model = self.model(tp)
        layout = self.layout(model, tp)
        train, layout = self.batch(layout)
        self.note_ignored()
        overlaps = self.overlaps()  # before the notes are taken: it may add one
        return Imported(FRAMEWORK, VERSION, model, train, layout, dtype=self.dtype(),
                        ignored=tuple(self.ignored), assumed=tuple(self.assumed),
                        approximated=tuple(self.approximated), stack="megatron-core",
                        overlaps=overlaps, recipe=self.recipe())

    def overlaps(self) -> tuple[str, ...]:
        """Megatron-Core's overlaps (parex.stacks): its default list and the options that
        turn more on, checked as Megatron-LM's arguments.py checks them."""
        if self.has("--tp-comm-overlap") and not self.has("--sequence-parallel"):
            raise InputError("--tp-comm-overlap needs --sequence-parallel (Megatron-LM refuses "
                             "it without): add --sequence-parallel or drop --tp-comm-overlap")
        for needed in ("--use-distributed-optimizer", "--overlap-grad-reduce"):
            if self.has("--overlap-param-gather") and not self.has(needed):
                raise InputError(f"--overlap-param-gather needs {needed} (Megatron-LM refuses "
                                 f"it without): add {needed} or drop --overlap-param-gather")
        return stack("megatron-core").overlaps + tuple(
            name for option, name in OVERLAP_OPTIONS.items() if self.has(option)) + (
                self.dispatcher())

    def dispatcher(self) -> tuple[str, ...]:
        """("deepep",) under the flex dispatcher (either backend sends a token once per remote
        node); the all-to-all and all-gather dispatchers are priced as parex's all-to-all."""
        kind = self.given.get(DISPATCHER, "allgather")
        if kind == "flex":
            return ("deepep",)
        if kind == "allgather" and self.int("--num-experts", 0) > 1 and self.int(
                "--expert-model-parallel-size", 1) > 1:
            self.approximated.append(f"{DISPATCHER} allgather: predicted as the alltoall "
                                     "dispatcher (a copy of each token per expert)")
        return ()

    def refuse_what_parex_cannot_express(self):
        for option, why in REFUSED.items():
            if self.has(option):
                raise InputError(f"{option}: parex cannot predict {why}")
        if self.given.get("--optimizer", "adam") != "adam":
            raise InputError(f"--optimizer {self.given['--optimizer']}: parex predicts Adam's "
                             f"state; use --optimizer adam")

    def contradictions(self):
        self.conflict("--bf16", "--fp16", "give one precision")
        self.conflict("--num-layers-per-virtual-pipeline-stage",
                      "--num-virtual-stages-per-pipeline-rank", "give one of them")
        self.conflict("--use-distributed-optimizer", "--use-torch-fsdp2",
                      "torch FSDP2 shards the optimizer state itself; give one of them")
        self.conflict("--use-megatron-fsdp", "--use-torch-fsdp2", "give one of them")
        self.conflict("--use-distributed-optimizer", "--use-megatron-fsdp",
                      "Megatron FSDP's --data-parallel-sharding-strategy optim is the "
                      "distributed optimizer; give one of them")
        if self.has("--recompute-activations") and \
                self.given.get("--recompute-granularity", "selective") != "selective":
            raise InputError("--recompute-activations and --recompute-granularity full "
                             "contradict each other (Megatron-LM's --recompute-activations "
                             "means selective): give one of them")
        if self.has("--num-query-groups") and not self.has("--group-query-attention"):
            raise InputError("--num-query-groups without --group-query-attention: Megatron-LM "
                             "ignores it; add --group-query-attention or drop it")
        backend = self.given.get("--attention-backend")
        if self.has("--use-flash-attn") and backend not in (None, "flash"):
            raise InputError(f"--use-flash-attn and --attention-backend {backend} contradict "
                             f"each other: give one of them")
        strategy = self.given.get("--data-parallel-sharding-strategy")
        if strategy not in (None, "no_shard") and not self.has("--use-megatron-fsdp"):
            raise InputError(f"--data-parallel-sharding-strategy {strategy} shards only under "
                             f"--use-megatron-fsdp: add it, or use --use-distributed-optimizer")

    def model(self, tp: int) -> ModelConfig:
        L = self.require("--num-layers", "32")
        D = self.require("--hidden-size", "4096")
        H = self.require("--num-attention-heads", "32")
        T = self.require("--seq-length", "4096")
        max_pos = self.require("--max-position-embeddings", str(T))
        if max_pos < T:
            raise InputError(f"--max-position-embeddings {max_pos} is below --seq-length {T} "
                             f"(Megatron-LM refuses it): raise it to {T}")
        gated = self.has("--swiglu")
        family = "llama" if gated else "gpt"
        kv_channels = self.int("--kv-channels")  # the head width; None: hidden / heads
        if kv_channels is None and D % H:
            raise InputError(f"--hidden-size {D} is not divisible by --num-attention-heads {H}: "
                             f"name the head width with --kv-channels")
        ffn = self.int("--ffn-hidden-size")
        if ffn is None:  # validate_args' rule
            ffn = int((4 * D * 2 / 3) / 64) * 64 if gated else 4 * D
            self.assumed.append(f"--ffn-hidden-size {ffn} ("
                                + ("4·h·2/3 to a multiple of 64, with --swiglu)" if gated
                                   else "4·h)"))
        K = H
        if self.has("--group-query-attention"):
            K = self.int("--num-query-groups", 1, " (one key/value head: multi-query)")
        self.family_notes(family)
        experts = self.int("--num-experts", 0)
        moe = {}
        if experts:
            top_k = self.int("--moe-router-topk", 2, "")
            expert_ffn = self.int("--moe-ffn-hidden-size")
            if expert_ffn is None:
                expert_ffn = ffn
                self.assumed.append(f"--moe-ffn-hidden-size {ffn} (--ffn-hidden-size)")
            shared = self.int("--moe-shared-expert-intermediate-size", 0)
            factor = self.given.get("--moe-expert-capacity-factor")
            moe = {"experts": experts, "top_k": top_k, "expert_ffn": expert_ffn,
                   "shared_experts": divide(shared, expert_ffn,
                                            "--moe-shared-expert-intermediate-size",
                                            "give a multiple of --moe-ffn-hidden-size"),
                   "capacity_factor": None if factor is None else float(factor)}
        else:
            for option in ("--moe-router-topk", "--moe-ffn-hidden-size",
                           "--moe-shared-expert-intermediate-size",
                           "--moe-expert-capacity-factor", "--expert-model-parallel-size"):
                if self.has(option) and not (option == "--expert-model-parallel-size"
                                             and self.int(option) == 1):
                    raise InputError(f"{option} without --num-experts: a dense model has no "
                                     f"experts; add --num-experts or drop {option}")
        self.seq_len = None if T == max_pos else T  # the train config's, where shorter
        return ModelConfig(self.name, family, L, D, H, K, ffn, self.vocab(tp), max_pos,
                           dtype=self.dtype(), head_dim=kv_channels,
                           tied_embeddings=not self.has("--untie-embeddings-and-output-weights"),
                           **moe)

    def family_notes(self, family: str):
        """parex's two families bundle norm, positions, MLP and biases; say where the run's
        own options differ from the bundle."""
        norm = self.given.get("--normalization", "LayerNorm")
        positions = self.given.get("--position-embedding-type", "learned_absolute")
        biases = not self.has("--disable-bias-linear")
        bundle = {"gpt": ("LayerNorm", "learned_absolute", True),
                  "llama": ("RMSNorm", "rope", False)}[family]
        label = {"gpt": "GPT (GELU MLP)", "llama": "Llama (SwiGLU MLP, from --swiglu)"}[family]
        for what, have, want in (("--normalization", norm, bundle[0]),
                                 ("--position-embedding-type", positions, bundle[1]),
                                 ("biases", "on" if biases else "off (--disable-bias-linear)",
                                  "on" if bundle[2] else "off (--disable-bias-linear)")):
            if have != want:
                self.approximated.append(f"{what} {have}: predicted with parex's {label} "
                                         f"family's {want} (parameter counts differ by the "
                                         f"norms', positions' or biases' few weights)")

    def vocab(self, tp: int) -> int:
        if self.has("--padded-vocab-size"):
            return self.int("--padded-vocab-size")
        multiple = self.int("--make-vocab-size-divisible-by", 128) * tp
        tokenizer = self.given.get("--tokenizer-type")
        if tokenizer == "NullTokenizer" and self.has("--vocab-size"):
            raw = self.int("--vocab-size") + 1  # the null tokenizer adds its end-of-document id
        elif tokenizer == "GPT2BPETokenizer" and not self.has("--vocab-size"):
            raw = 50257
            self.assumed.append("GPT-2's 50257 tokens (GPT2BPETokenizer)")
        elif tokenizer is None and self.has("--vocab-file") and self.has("--merge-file"):
            raise InputError("the tokenizer: Megatron-LM has no default --tokenizer-type; for "
                             "the --vocab-file/--merge-file pair (GPT-2's BPE) add "
                             "--tokenizer-type GPT2BPETokenizer")
        else:
            raise InputError("the vocabulary: parex cannot read a tokenizer's files; add "
                             "--padded-vocab-size V (the model's vocabulary, e.g. 32000)")
        return math.ceil(raw / multiple) * multiple

    def recipe(self) -> str | None:
        """16-bit weights with float32 or 16-bit gradient reductions: arguments.py (VERSION)
        sets accumulate_allreduce_grads_in_fp32 under --bf16 unless --grad-reduce-in-bf16 (or
        16-bit main gradients, --main-grads-dtype bf16) says otherwise; under --fp16 only
        --accumulate-allreduce-grads-in-fp32 does. None: float32 training's default."""
        sixteen = self.has("--grad-reduce-in-bf16") or self.given.get(
            "--main-grads-dtype", "fp32") != "fp32"
        if self.has("--bf16"):
            if sixteen:
                return "mixed"
            self.assumed.append("float32 gradient accumulation and reduction (--bf16 sets "
                                "accumulate_allreduce_grads_in_fp32; --grad-reduce-in-bf16 "
                                "reduces them in bf16)")
            return "mixed-fp32-grads"
        if self.has("--fp16"):
            fp32 = self.has("--accumulate-allreduce-grads-in-fp32") and not sixteen
            return "mixed-fp32-grads" if fp32 else "mixed"
        return None

    def dtype(self) -> str:
        if self.has("--bf16"):
            return "bfloat16"
        if self.has("--fp16"):
            return "bfloat16"
        return "float32"

    def layout(self, model: ModelConfig, tp: int) -> Layout:
        pp = self.int("--pipeline-model-parallel-size", 1)
        cp = self.int("--context-parallel-size", 1)
        ep = self.int("--expert-model-parallel-size", 1)
        etp = self.int("--expert-tensor-parallel-size")
        folded = etp is not None and etp != tp  # MoE parallel folding: EP spans TP x DP ranks
        if folded and (etp != 1 or cp > 1 or ep % tp):
            raise InputError(f"--expert-tensor-parallel-size {etp}: parex folds all {tp} tensor "
                             f"ranks into the expert group (ETP 1, EP a multiple of TP, no CP) "
                             f"or none of them (ETP = TP); give 1 or {tp}")
        dp = divide(self.world, tp * pp * cp, f"world size {self.world}",
                    f"give a multiple of TP x PP x CP = {tp * pp * cp} devices")
        ep = ep // tp if folded else ep  # parex's expert axis: EP's data-parallel part
        data = divide(dp, ep, f"data-parallel size {dp}",
                      "--expert-model-parallel-size must divide it")
        virtual = self.virtual_stages(model.layers, pp)
        zero, fsdp = 0, 1
        if self.has("--use-distributed-optimizer"):
            zero = 1
        elif self.has("--use-megatron-fsdp"):
            strategy = self.given.get("--data-parallel-sharding-strategy", "no_shard")
            zero = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}[strategy]
            if strategy == "no_shard":
                self.assumed.append("--data-parallel-sharding-strategy no_shard")
        elif self.has("--use-torch-fsdp2"):
            if ep > 1:
                raise InputError("--use-torch-fsdp2 with --expert-model-parallel-size: parex's "
                                 "fsdp axis is all data-parallel ranks; drop one of them")
            data, fsdp = 1, dp
        sp = self.has("--sequence-parallel")
        if sp and tp == 1:
            sp = False
            self.ignored.append("--sequence-parallel (Megatron-LM turns it off at TP 1)")
        cp_mode = "none"
        if cp > 1:
            kinds = self.given.get("--cp-comm-type", ["p2p"])
            if not self.has("--cp-comm-type"):
                self.assumed.append("--cp-comm-type p2p (ring attention)")
            modes = {v: k for k, v in CP_COMM.items()}
            if len(kinds) != 1 or kinds[0] not in modes:
                raise InputError(f"--cp-comm-type {' '.join(kinds)}: parex predicts p2p (ring) "
                                 f"or a2a (Ulysses) for every layer; give one of them")
            cp_mode = modes[kinds[0]]
        elif self.has("--cp-comm-type"):
            self.ignored.append("--cp-comm-type (no context parallelism)")
        schedule = None if pp == 1 else "interleaved" if virtual > 1 else "1f1b"
        if pp > 1:
            self.assumed.append("the pipeline schedule "
                                + ("interleaved 1F1B (virtual stages)" if virtual > 1
                                   else "1F1B"))
        return Layout(data=data, fsdp=fsdp, expert=ep, tensor=tp, seq=cp, stage=pp, zero=zero,
                      sp=sp, cp=cp_mode, schedule=schedule, virtual_stages=virtual,
                      expert_tensor=1 if folded else None)

    def virtual_stages(self, layers: int, pp: int) -> int:
        per_chunk = self.int("--num-layers-per-virtual-pipeline-stage")
        v = self.int("--num-virtual-stages-per-pipeline-rank")
        if per_chunk is None and v is None:
            return 1
        option = ("--num-layers-per-virtual-pipeline-stage" if per_chunk is not None
                  else "--num-virtual-stages-per-pipeline-rank")
        if pp == 1:
            raise InputError(f"{option} needs --pipeline-model-parallel-size above 1; drop it")
        per_stage = divide(layers, pp, f"--num-layers {layers}",
                           f"--pipeline-model-parallel-size {pp} must divide it")
        if per_chunk is not None:
            v = divide(per_stage, per_chunk, f"{per_stage} layers per pipeline stage",
                       "--num-layers-per-virtual-pipeline-stage must divide them")
        return v

    def batch(self, layout: Layout) -> tuple[TrainConfig, Layout]:
        """The train config, and the layout with its microbatch count m = B / (b x dp)."""
        b = self.require("--micro-batch-size", "1")
        dp = layout.data_parallel
        B = self.int("--global-batch-size")
        if B is None:
            B = b * dp
            self.assumed.append(f"--global-batch-size {B} (micro batch x data-parallel size: "
                                f"no accumulation)")
        m = divide(B, b * dp, f"--global-batch-size {B}",
                   f"give a multiple of --micro-batch-size x data-parallel size = {b * dp}")
        train = TrainConfig(global_batch=B, microbatch=b if m == 1 else None,
                            seq_len=self.seq_len, remat=self.remat(),
                            attention=self.attention(), precision=self.precision())
        return train, layout.replace(microbatches=m)

    def precision(self) -> str | None:
        """The FP8 recipe of the --fp8-* options (parex.interop.fp8); None: the dtype's."""
        name = fp8.megatron_precision(self.given, self.approximated)
        if name is not None and not self.has("--bf16"):
            raise InputError(f"--fp8-format {self.given['--fp8-format']} without --bf16: "
                             f"parex prices FP8 over bfloat16 weights, as Megatron-Core's FP8 "
                             f"recipes run; add --bf16")
        return name

    def remat(self) -> str:
        if self.has("--recompute-activations"):
            return "selective"
        granularity = self.given.get("--recompute-granularity")
        if granularity is None:
            return "none"
        if granularity == "selective":
            return "selective"
        method = self.given.get("--recompute-method")
        count = self.int("--recompute-num-layers")
        if method != "uniform" or count != 1:
            raise InputError(f"--recompute-granularity full with --recompute-method {method} "
                             f"--recompute-num-layers {count}: parex's full recompute "
                             f"checkpoints every layer; use --recompute-method uniform "
                             f"--recompute-num-layers 1")
        return "full"

    def attention(self) -> str:
        if self.has("--use-flash-attn"):
            return "flash"
        backend = self.given.get("--attention-backend")
        if backend is None:
            self.assumed.append("--attention-backend auto (Transformer Engine picks a fused "
                                "kernel that keeps no scores: flash)")
            return "flash"
        if backend not in FUSED_BACKENDS + ("unfused", "local"):
            raise InputError(f"--attention-backend {backend}: use one of flash, fused, "
                             f"unfused, local, auto")
        return "flash" if backend in FUSED_BACKENDS else "naive"

    def note_ignored(self):
        if self.has("--fp16"):
            self.approximated.append("--fp16 predicted as bfloat16 (the same bytes and "
                                     "tensor-core rate; loss scaling not modelled)")
        if self.has("--rampup-batch-size"):
            self.approximated.append("--rampup-batch-size: predicted at the full "
                                     "--global-batch-size (the ramp's first steps are smaller)")
        if not self.has("--bf16") and not self.has("--fp16"):
            self.assumed.append("float32 training (neither --bf16 nor --fp16)")
        for option in self.given:
            if option in MAPPED:
                continue
            reason = next((why for prefixes, why in IGNORED_REASONS
                           if option.startswith(prefixes)), "not modelled by parex")
            self.ignored.append(f"{option} ({reason})")


# --- export ------------------------------------------------------------------------------------

def to_megatron(model: ModelConfig, train: TrainConfig, layout: Layout, hardware, *,
                launcher: bool = True, **keywords) -> str:
    """The Megatron-LM command of (model, train, layout) on `hardware`, resolved as
    parex.predict resolves it (keywords: its dtype, recipe, convention): a torchrun prefix
    with the cluster's nodes, `pretrain_gpt.py`, and the options, one per parex field. What
    Megatron-LM cannot express is refused (Unexpressible) naming the nearest layout it can."""
    return megatron_command(resolve(model, train, layout, hardware, **keywords), launcher)


def megatron_command(setting: Setting, launcher: bool = True) -> str:
    """The command of one resolved Setting (a plan's row: Plan.setting_of)."""
    words = megatron_options(setting)
    if launcher:
        words = _launcher(setting) + words
    return " ".join(shlex.quote(w) for w in words)


def _launcher(setting: Setting) -> list[str]:
    n = setting.layout.n_devices
    nodes = setting.cluster.nodes if setting.cluster is not None else 1
    if n % nodes:
        nodes = 1
    return ["torchrun", "--nnodes", str(nodes), "--nproc-per-node", str(n // nodes), SCRIPT]


def megatron_options(setting: Setting) -> list[str]:
    """The options (words) of one resolved Setting, without the launcher."""
    model, train, layout = setting.model, setting.train, setting.layout
    _check_expressible(setting)
    words = ["--num-layers", model.layers, "--hidden-size", model.hidden,
             "--num-attention-heads", model.heads, "--ffn-hidden-size", model.ffn]
    if model.kv_heads != model.heads:
        words += ["--group-query-attention", "--num-query-groups", model.kv_heads]
    if model.family == "llama":
        words += ["--swiglu", "--normalization", "RMSNorm", "--position-embedding-type", "rope",
                  "--disable-bias-linear"]
    if model.head_dim != model.hidden // model.heads:
        words += ["--kv-channels", model.head_dim]
    if not model.tied_embeddings:  # Megatron-LM ties them unless told
        words += ["--untie-embeddings-and-output-weights"]
    words += ["--seq-length", setting.seq_len,
              "--max-position-embeddings", max(model.seq_len, setting.seq_len),
              "--padded-vocab-size", model.vocab]
    if model.moe:
        words += ["--num-experts", model.experts, "--moe-router-topk", model.top_k,
                  "--moe-ffn-hidden-size", model.expert_ffn]
        if model.shared_experts:
            words += ["--moe-shared-expert-intermediate-size",
                      model.shared_experts * model.expert_ffn]
        if model.capacity_factor is not None:
            words += ["--moe-expert-capacity-factor", model.capacity_factor]
    words += ["--tensor-model-parallel-size", layout.tensor,
              "--pipeline-model-parallel-size", layout.stage]
    if layout.virtual_stages > 1:
        words += ["--num-virtual-stages-per-pipeline-rank", layout.virtual_stages]
    if layout.seq > 1:
        words += ["--context-parallel-size", layout.seq, "--cp-comm-type", CP_COMM[layout.cp]]
    if layout.expert_parallel > 1:
        words += ["--expert-model-parallel-size", layout.expert_parallel]
    if layout.folds_experts:
        words += ["--expert-tensor-parallel-size", layout.expert_tensor]
    if layout.sp:
        words += ["--sequence-parallel"]
    if layout.fsdp > 1:
        words += ["--use-torch-fsdp2"]
    elif layout.zero == 1:
        words += ["--use-distributed-optimizer"]
    elif layout.zero > 1:
        words += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy",
                  ZERO_STRATEGY[layout.zero]]
    words += ["--micro-batch-size", setting.microbatch, "--global-batch-size",
              train.global_batch]
    words += {"none": [], "selective": ["--recompute-activations"],
              "full": ["--recompute-granularity", "full", "--recompute-method", "uniform",
                       "--recompute-num-layers", 1]}[train.remat]
    if setting.dtype == "bfloat16":  # reducing float32 gradients unless told (`recipe`)
        words += ["--bf16"] + (["--grad-reduce-in-bf16"] if setting.recipe == "mixed" else [])
    words += fp8.megatron_options(setting.precision.name, layout.zero >= 1 or layout.fsdp > 1)
    words += ["--attention-backend", ATTENTION_BACKEND[setting.attention]]
    words += _overlap_options(setting)
    return [str(w) for w in words]


def _overlap_options(setting: Setting) -> list[str]:
    """The setting's overlaps as Megatron-LM's options, those its arguments.py accepts: the
    TP overlap with sequence parallelism, the parameter gather with the distributed optimizer
    (or Megatron FSDP), the overlapped gradient reduce and, with expert parallelism, the
    expert all-to-all beside another microbatch's compute and the dispatcher parex priced
    (flex with DeepEP under `deepep`, else alltoall: Megatron-Core's default, allgather, is
    another algorithm)."""
    on, layout = setting.overlap_names, setting.layout
    possible = {"tp-comm": bool(layout.sp),
                "grad-reduce": True,
                "param-gather": "grad-reduce" in on and layout.zero >= 1 and layout.fsdp == 1,
                "moe-a2a": layout.expert > 1}
    dispatcher = []
    if layout.expert > 1:
        dispatcher = [DISPATCHER, "flex", DEEPEP] if "deepep" in on else [DISPATCHER, "alltoall"]
    return [option for option, name in OVERLAP_OPTIONS.items()
            if name in on and possible[name]] + dispatcher


def _check_expressible(setting: Setting) -> None:
    """Unexpressible, naming the nearest layout, for what Megatron-LM has no option for."""
    layout, model = setting.layout, setting.model
    if layout is None:
        raise InputError("a Setting without a layout: give it one (Setting.with_layout)")
    refuse_parex_only(FRAMEWORK, layout)
    if layout.stage > 1 and layout.schedule in NEAREST_SCHEDULE:
        raise refuse(FRAMEWORK, f"schedule={layout.schedule}", NEAREST_SCHEDULE[layout.schedule])
    if layout.stage > 1 and layout.schedule == "interleaved" and layout.virtual_stages == 1:
        raise refuse(FRAMEWORK, "schedule=interleaved with one virtual stage",
                     "schedule=1f1b (the same order)")
    if layout.virtual_stages > 1 and layout.stage == 1:
        raise refuse(FRAMEWORK, "virtual stages without a pipeline", "virtual=1")
    if layout.layers_per_stage is not None:
        raise refuse(FRAMEWORK, f"partition={layout.layers_per_stage} in parex's layout keys",
                     "the even split (drop partition)")
    if layout.fsdp > 1 and (layout.data > 1 or layout.expert > 1 or layout.zero):
        raise refuse(FRAMEWORK, "fsdp beside data, expert or zero (torch FSDP2 shards every "
                     "data-parallel rank)", f"fsdp={layout.fsdp * layout.data * layout.expert}"
                     f" alone")
    if layout.seq > 1 and layout.cp not in CP_COMM:
        raise refuse(FRAMEWORK, f"cp={layout.cp}", "cp=ring (--cp-comm-type p2p)")
    if layout.sp and layout.tensor == 1:
        raise refuse(FRAMEWORK, "sp=on at tensor=1 (it turns sequence parallelism off)", "sp=off")
    # --bf16 reduces float32 gradients (mixed-fp32-grads), with --grad-reduce-in-bf16 16-bit ones
    if setting.recipe not in (("mixed", "mixed-fp32-grads") if setting.dtype == "bfloat16"
                              else ("parex",)):
        raise refuse(FRAMEWORK, f"recipe {setting.recipe} with {setting.dtype}",
                     f"recipe {'mixed' if setting.dtype == 'bfloat16' else 'parex'} (--bf16 "
                     f"keeps 16-bit weights over float32 master state; no flag float32)")
    if model.parallel_block:
        raise refuse(FRAMEWORK, f"parallel attention and MLP blocks (no option of {VERSION} "
                     f"names them)", "sequential blocks (parallel_block False)")
    if model.sliding_window is not None:
        raise refuse(FRAMEWORK, "a sliding window in parex's export (its --window-size pairs "
                     "with Transformer Engine's attention; parex writes none)",
                     "full attention (sliding_window None), or MaxText's local_sliding")
    if model.bias_rate:
        raise refuse(FRAMEWORK, "parex's bias_rate (the router bias's step)", "bias_rate=0")
    m, b = layout.microbatches, setting.microbatch
    if b * m * layout.data_parallel != setting.train.global_batch:
        raise refuse(FRAMEWORK, f"a global batch of {setting.train.global_batch} over {m} "
                     f"microbatches of {layout.data_parallel} replicas",
                     f"a global batch that is a multiple of {m * layout.data_parallel}")
    if setting.seq_len > model.seq_len:
        raise refuse(FRAMEWORK, f"sequences of {setting.seq_len} tokens beyond the model's "
                     f"{model.seq_len}", f"--seq-length {model.seq_len}")


__all__ = ["FRAMEWORK", "VERSION", "from_megatron", "known_options", "megatron_command",
           "megatron_options", "to_megatron"]
