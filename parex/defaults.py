"""The defaults every entry point shares (the CLI, the Planner, the Explorer, sweeps): a value is a
default here and nowhere else, and `assume` is the one function that turns a hardware profile,
a model and what the user said into the `Assumptions` a prediction or a plan was made under.

    a = assume(cluster, model, dtype=None, global_batch=None, ...)   # None: the default here
    a.describe()   # "cpu-local×1 (8 devices) · float32 · recipe parex · ..."
    a.to_json()    # the `assumptions` object of every JSON output

Two regimes, keyed on the profile. A calibrated profile (`cpu-local`, this machine's emulated
mesh) describes parex's own step: the model's dtype, the parex recipe (float32 master weights,
gradients and Adam moments), the xla-cpu convention, the small global batch of TrainConfig, no
remat, GPipe. An accelerator profile describes what real runs there use: bfloat16, the mixed
recipe (ZeRO's 2 + 2 + 12 bytes per parameter; the parex recipe when float32 is asked for), the
gpu convention, a global batch of the size large runs train with (`default_global_batch`),
selective remat from 1B parameters on (Korthikanti et al. 2022, Megatron-LM's default for its
22B-1T runs), 1F1B for pipelines that name no schedule (Narayanan et al. 2021: GPipe's order
stashes all m microbatches' activations, 1F1B at most p), and the flash attention kernel (the
emulated mesh keeps naive attention, whose scores it materialises).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .config import DTYPES, TrainConfig
from .errors import InputError

DEVICES = 8  # emulated devices when neither the layout nor --devices says how many
HARDWARE = "cpu-local"  # every command's profile when --hardware is not given: this machine
MODEL = "tiny"  # every command's model preset when --model is not given
LOCAL_GLOBAL_BATCH = TrainConfig.global_batch  # sequences per step on the emulated mesh
LARGE_MODEL = 1e9  # parameters from which an accelerator run defaults to selective remat
# tokens per step by model size on an accelerator: GPT-3's Table 2.1 (Brown et al. 2020: 0.5M
# tokens under 1B parameters, 1-2M up to 13B, 3.2M at 175B) and Llama 2's 4M for every size
TOKENS_PER_STEP = ((1e9, 2 ** 19), (20e9, 2 ** 21), (float("inf"), 2 ** 22))
# the attention kernel (parex.attention): flash on an accelerator, as every large run since 2023
# (FlashAttention-2/3, cuDNN); naive on the emulated mesh, whose memory constants were read off
# its steps, and the score-materialising program Korthikanti et al. 2022's tables assume
ATTENTION_ACCELERATOR = "flash"
ATTENTION_LOCAL = "naive"


@dataclass(frozen=True)
class Assumptions:
    """Everything a predicted number depends on besides the model and the layout."""

    hardware: str  # hardware profile name (data/hardware/ or cpu-local)
    nodes: int  # nodes of that profile in the cluster
    n_devices: int  # devices in the cluster
    dtype: str  # compute dtype: float32 or bfloat16
    recipe: str  # bytes of model state: parex (fp32 everything) or mixed (ZeRO's 2 + 2 + 12)
    convention: str  # gpu (the ideal program) or xla-cpu (what the emulated mesh compiles)
    global_batch: int  # B, sequences per optimizer step
    seq_len: int  # tokens per sequence
    remat: str  # none, selective or full; a plan's header lists the policies it searched
    microbatch: int | None  # b, sequences per replica per microbatch (None: searched per row)
    schedule: str  # the pipeline schedule (the default for pipelines that name none)
    attention: str | None = None  # the attention kernel: flash or naive (default_attention)
    expert_imbalance: float | None = None  # a mixture of experts' busiest expert's load over
    # the mean (1.0: balanced; parex.predict.EXPERT_IMBALANCE); None for a dense model

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        """One line for a report's header."""
        batch = f"global batch {self.global_batch} × {self.seq_len} tokens"
        micro = "" if self.microbatch is None else f" (b={self.microbatch})"
        return (f"{self.hardware}×{self.nodes} ({self.n_devices} devices) · {self.dtype} · "
                f"recipe {self.recipe} · convention {self.convention} · {batch}{micro} · "
                f"remat {self.remat} · schedule {self.schedule}"
                + (f" · attention {self.attention}" if self.attention else "")
                + (f" · expert imbalance {self.expert_imbalance:g}"
                   if self.expert_imbalance is not None else ""))

    def replace(self, **changes) -> "Assumptions":
        return dataclasses.replace(self, **changes)

    def of_layout(self, layout, microbatch: int | None = None, remat: str | None = None
                  ) -> "Assumptions":
        """These assumptions for one layout: its pipeline schedule, its microbatch size b
        (B / (data-parallel size · m) unless given) and remat."""
        dp = max(1, layout.data_parallel)
        b = microbatch or max(1, self.global_batch // (dp * max(1, layout.microbatches)))
        schedule = layout.schedule if layout.stage > 1 else self.schedule
        return self.replace(microbatch=int(b), remat=remat or self.remat, schedule=schedule)


def emulated(cluster) -> bool:
    """A calibrated profile (this machine's emulated mesh) rather than an accelerator."""
    return cluster.chip.calibration is not None


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
    sequences = 2 ** max(0, round(_log2(tokens / seq_len)))
    return -(-sequences // n_devices) * n_devices


def _log2(x: float) -> float:
    return math.log2(max(x, 1.0))


def default_recipe(local: bool, dtype: str) -> str:
    """mixed (16-bit compute over float32 master state) for bfloat16 on an accelerator; parex
    (float32 state) on the emulated mesh, whose step keeps it, and for float32 training, whose
    weights, gradients and Adam moments are all float32 (4 + 4 + 8 bytes per parameter)."""
    return "mixed" if not local and dtype == "bfloat16" else "parex"


def default_remat(model, cluster) -> str:
    """Selective recompute for models from 1B parameters on an accelerator, else none."""
    return "selective" if not emulated(cluster) and model.n_params >= LARGE_MODEL else "none"


def default_attention(local: bool) -> str:
    """flash on an accelerator (a profile, or a GPU/TPU that `parex run` meets), naive on the
    emulated CPU mesh (ATTENTION_ACCELERATOR, ATTENTION_LOCAL)."""
    return ATTENTION_LOCAL if local else ATTENTION_ACCELERATOR


def attention_of(train, local: bool) -> str:
    """The kernel a TrainConfig asks for, or the default where it names none."""
    return train.attention or default_attention(local)


def assume(cluster, model, *, dtype: str | None = None, recipe: str | None = None,
           convention: str | None = None, global_batch: int | None = None,
           seq_len: int | None = None, remat: str | None = None, microbatch: int | None = None,
           schedule: str | None = None, attention: str | None = None) -> Assumptions:
    """The assumptions of one prediction or plan on `cluster` (a parex.hardware.Cluster):
    what is given, and the profile's default (module docstring) for each None. `model`'s own
    dtype counts as given only on the emulated mesh, where parex runs it."""
    local = emulated(cluster)
    dtype = dtype or (model.dtype if local else "bfloat16")
    if dtype not in DTYPES:
        raise InputError(f"dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    seq_len = seq_len or model.seq_len
    return Assumptions(
        hardware=cluster.chip.name, nodes=cluster.nodes, n_devices=cluster.n_devices,
        dtype=dtype, recipe=_name(recipe) or default_recipe(local, dtype),
        convention=_name(convention) or ("xla-cpu" if local else "gpu"),
        global_batch=global_batch or default_global_batch(model, seq_len, cluster.n_devices,
                                                          local),
        seq_len=seq_len, remat=remat or default_remat(model, cluster), microbatch=microbatch,
        schedule=schedule or ("gpipe" if local else "1f1b"),
        attention=attention or default_attention(local))


def _name(value) -> str | None:
    """A recipe or convention given by name or as its dataclass (which has a `name`)."""
    return value if value is None or isinstance(value, str) else value.name
