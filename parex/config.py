"""Model and training configurations, and the named model presets.

A preset is a plain function of no arguments returning a ModelConfig; `model_preset(name)` looks one up.
Sizes of the published models come from their papers (see data/reference/).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from .errors import InputError, unknown
from .precision import PRECISION_NAMES

FAMILIES = ("gpt", "llama")
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}  # compute dtypes and the bytes of one element
DTYPES = tuple(DTYPE_BYTES)
REMAT_POLICIES = ("none", "selective", "full")
ATTENTION_KERNELS = ("flash", "naive")  # parex.model.attention: blockwise (no scores kept) or einsum


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer. GPT: LayerNorm, learned positions, GELU MLP, biases.
    Llama: RMSNorm, RoPE, SwiGLU MLP, grouped-query attention, no biases.
    With `image` > 0, a vision transformer (ViT, Dosovitskiy et al. 2021, arXiv:2010.11929) on
    GPT's blocks: the (image/patch)² patches of an image, flattened, enter through a linear map,
    a class token is prepended, attention is not causal, and the head classifies the class
    token's output into `vocab` classes (parex.model.vision)."""

    name: str = "custom"  # preset name, for reports
    family: str = "gpt"  # "gpt" or "llama"
    layers: int = 4  # L, transformer blocks
    hidden: int = 128  # D (h in Megatron's papers), the residual width
    heads: int = 8  # H (a), query heads
    kv_heads: int | None = None  # K, key/value heads; None means K = H (multi-head attention)
    ffn: int | None = None  # F, MLP inner width; None means 4·D
    vocab: int = 256  # V
    seq_len: int = 128  # T (s), the longest sequence; GPT's position table has T rows
    dtype: str = "float32"  # compute dtype; master weights and optimizer state stay float32
    # --- mixture of experts (parex.model.moe): every block's MLP becomes E routed experts ---------------
    experts: int = 0  # E, routed experts per block; 0: a dense model
    top_k: int = 1  # k, experts each token is sent to (its gates renormalised to sum to 1)
    expert_ffn: int | None = None  # F_e, each expert's MLP width; None means ffn
    shared_experts: int = 0  # experts every token passes through (DeepSeekMoE), width F_e each
    capacity_factor: float | None = None  # C = ceil(cf·k·T/E) tokens per expert per sequence,
    # the rest dropped; None: dropless (C = T, room for every token)
    balance_loss: float = 0.01  # α of the sequence-wise load-balancing loss α·Σ_i f_i·P_i
    z_loss: float = 0.0  # coefficient of the router z-loss, mean(logsumexp(logits)²) (ST-MoE)
    bias_rate: float = 0.0  # γ of DeepSeek-V3's auxiliary-loss-free balancing: a per-expert
    # bias on the scores that choose the top k (not the gates), moved by γ toward balance after
    # every step (0: off)
    # --- the shapes other frameworks' configurations name (docs/models.md) -----------------------
    head_dim: int | None = None  # Dh, each head's width; None means D / H (Gemma and MaxText name
    # their own, e.g. Gemma 7B: D = 3072, H = 16, Dh = 256)
    parallel_block: bool = False  # GPT-J / PaLM: x + attn(norm(x)) + mlp(norm(x)), one norm per
    # block feeding both (Wang & Komatsuzaki 2021; Chowdhery et al. 2022, §2)
    tied_embeddings: bool = False  # the output layer reads the token table, logits = x·Eᵀ
    # (Press & Wolf 2017): no separate unembedding matrix
    sliding_window: int | None = None  # W, each query sees itself and the W − 1 positions
    # before it (Mistral, Gemma 2); None: all earlier positions
    # --- a vision transformer (parex.model.vision); vocab is then its number of classes ----------
    image: int = 0  # the side of a square image in pixels; 0: a language model
    patch: int = 4  # P, the side of a square patch in pixels (ViT's "/P")
    channels: int = 3  # C, colour channels of a pixel

    def __post_init__(self):
        if self.image:
            self._check_vision()
            # T = N + 1: the N = (image/P)² patches and the class token
            object.__setattr__(self, "seq_len", self.patches + 1)
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.ffn is None:
            object.__setattr__(self, "ffn", 4 * self.hidden)
        if self.expert_ffn is None:
            object.__setattr__(self, "expert_ffn", self.ffn)
        if self.head_dim is None:
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        if self.sliding_window is not None and self.sliding_window < 1:
            raise InputError(f"ModelConfig(sliding_window={self.sliding_window}): a window sees "
                             f"at least its own position; give 1 or more, or None for none")

    def _check_vision(self):
        if self.image % self.patch:
            raise InputError(f"ModelConfig(image={self.image}, patch={self.patch}): the patches "
                             f"must tile the image; give an image side divisible by the patch")
        if self.family != "gpt" or self.experts or self.tied_embeddings or self.sliding_window:
            raise InputError("ModelConfig(image=...): a vision transformer is built on GPT's "
                             "dense blocks; give family='gpt' without experts, tied embeddings "
                             "or a sliding window")

    @property
    def vision(self) -> bool:
        """Whether this is a vision transformer (image > 0): inputs are images, not tokens."""
        return self.image > 0

    @property
    def patches(self) -> int:
        """N = (image / P)², the patches of one image (0 for a language model)."""
        return (self.image // self.patch) ** 2 if self.vision else 0

    @property
    def patch_dim(self) -> int:
        """P²·C, the length of one flattened patch: the patch embedding's input width."""
        return self.patch * self.patch * self.channels

    @property
    def causal(self) -> bool:
        """Whether a query sees only earlier positions: a language model's; a ViT's sees all."""
        return not self.vision

    @property
    def moe(self) -> bool:
        """Whether the blocks' MLPs are mixtures of experts."""
        return self.experts > 0

    def _mlp_params(self, width: int) -> int:
        """One MLP of inner width `width` (GELU with biases, or SwiGLU)."""
        D = self.hidden
        return 2 * D * width + width + D if self.family == "gpt" else 3 * D * width

    def _block_mlp_params(self, experts: int) -> int:
        """A block's MLP parameters with `experts` routed experts counted (dense: the MLP)."""
        if not self.moe:
            return self._mlp_params(self.ffn)
        shared = self._mlp_params(self.shared_experts * self.expert_ffn) if self.shared_experts \
            else 0
        return self.hidden * self.experts + experts * self._mlp_params(self.expert_ffn) + shared

    @property
    def n_params(self) -> int:
        """Exact parameter count; tests check it against the real pytree."""
        return self._count_params(self.experts)

    @property
    def n_active_params(self) -> int:
        """Parameters one token passes through: the router, k routed experts and the shared
        ones (n_params for a dense model)."""
        return self._count_params(self.top_k if self.moe else 0)

    def _count_params(self, experts: int) -> int:
        D, V, T = self.hidden, self.vocab, self.seq_len
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        mlp = self._block_mlp_params(experts)
        norms = 1 if self.parallel_block else 2  # a parallel block's one norm feeds both
        unembed = 0 if self.tied_embeddings else D * V
        if self.vision:  # patch map W[P²C, D] and its bias, the class token, positions
            read_in = self.patch_dim * D + 2 * D + T * D
            block = D * q + q + 2 * (D * kv + kv) + q * D + D + mlp + 2 * 2 * D
            return read_in + self.layers * block + 2 * D + unembed
        if self.family == "gpt":
            attn = D * q + q + 2 * (D * kv + kv) + q * D + D  # QKV and output, with biases
            block = attn + mlp + norms * 2 * D  # LayerNorms, scale and bias
            return V * D + T * D + self.layers * block + 2 * D + unembed
        attn = D * q + 2 * D * kv + q * D
        block = attn + mlp + norms * D  # SwiGLU has three matrices; RMSNorm scales
        return V * D + self.layers * block + D + unembed

    def attended_keys(self, T: int) -> int:
        """Keys each query is counted against in model FLOPs: T (causal attention counted in
        full, as in Megatron's papers), or the window W when it is shorter."""
        return T if self.sliding_window is None else min(self.sliding_window, T)

    def replace(self, **changes) -> "ModelConfig":
        """A copy with `changes`; a head width that was D / H follows new hidden or heads."""
        derived = self.head_dim == self.hidden // self.heads
        if derived and "head_dim" not in changes and {"hidden", "heads"} & set(changes):
            changes["head_dim"] = None
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class TrainConfig:
    """What one optimizer step consumes and how the optimizer behaves."""

    global_batch: int | None = None  # B, sequences per optimizer step across all devices;
    # None: the regime's default (parex.defaults.default_global_batch: 16 on the emulated mesh)
    microbatch: int | None = None  # b, sequences per data-parallel replica per microbatch;
    # None: the Layout's microbatch count decides, else parex.defaults.default_microbatch
    seq_len: int | None = None  # tokens per sequence; None means the model's seq_len
    steps: int = 20  # optimizer steps
    learning_rate: float = 3e-3  # peak learning rate
    warmup_steps: int = 5  # linear warm-up from 0 to the peak
    min_lr_ratio: float = 0.1  # cosine decay ends at peak · min_lr_ratio
    weight_decay: float = 0.1  # AdamW decay, applied to matrices only
    grad_clip: float = 1.0  # global-norm clipping threshold
    seed: int = 0  # parameter initialisation and synthetic data
    remat: str | None = None  # "none", "selective" (recompute attention scores), "full"
    # (blocks); None: the regime's default (parex.defaults.default_remat)
    attention: str | None = None  # "flash" or "naive" (parex.model.attention); None: the
    # regime's default (parex.defaults.default_attention)
    precision: str | None = None  # the matmul recipe (parex.precision): fp32, bf16 or an FP8
    # recipe; None: the compute dtype's (fp32 or bf16)

    def __post_init__(self):
        for what, value, known in (("attention kernel", self.attention, ATTENTION_KERNELS),
                                   ("remat policy", self.remat, REMAT_POLICIES),
                                   ("precision", self.precision, PRECISION_NAMES)):
            if value is not None and value not in known:
                raise InputError(unknown(what, value, known))
        for name in ("global_batch", "microbatch"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InputError(f"TrainConfig({name}={value}): give at least 1 sequence")

    def replace(self, **changes) -> "TrainConfig":
        return dataclasses.replace(self, **changes)

    def tokens_per_step(self, model: ModelConfig) -> int:
        """B · T of a resolved config (parex.setting fills global_batch)."""
        return self.global_batch * (self.seq_len or model.seq_len)


@dataclass(frozen=True)
class OuterOptimizer:
    """DiLoCo's outer optimizer (Douillard et al. 2023, arXiv:2311.08105): Nesterov SGD on the
    replicas' mean pseudo-gradient g, m <- mu*m + g, theta <- theta - lr*(g + mu*m). An
    optimizer setting, not a mesh or technique field: a Layout carries it as `outer`, and its
    string form writes it as the keys outer_lr and outer_momentum (the paper's 0.7 and 0.9)."""

    lr: float = 0.7  # outer learning rate
    momentum: float = 0.9  # outer Nesterov momentum, in [0, 1)

    def replace(self, **changes) -> "OuterOptimizer":
        return dataclasses.replace(self, **changes)


# --- presets ---------------------------------------------------------------------------------
# GPT-2 and GPT-3's 50257 tokens are padded to 50304 (a multiple of 128, as Megatron and nanoGPT
# do) so that the vocabulary splits over tensor axes; Megatron's papers use V = 51200; Llama sizes
# are from the model cards.

def tiny() -> ModelConfig:
    """~0.9M parameters: a step in well under a second on a laptop CPU."""
    return ModelConfig("tiny", layers=4, hidden=128, heads=8, vocab=256, seq_len=128)


def small() -> ModelConfig:
    """~13M parameters: big enough that layouts differ visibly on the emulated mesh."""
    return ModelConfig("small", layers=6, hidden=384, heads=8, vocab=512, seq_len=256)


def tiny_llama() -> ModelConfig:
    """The tiny model in the Llama family (GQA with 4 KV heads, SwiGLU)."""
    return ModelConfig("tiny-llama", "llama", layers=4, hidden=128, heads=8, kv_heads=4,
                       ffn=344, vocab=256, seq_len=128)


def tiny_moe() -> ModelConfig:
    """tiny-llama with 8 routed experts of width 128, top-2 (Mixtral's routing), dropless:
    ~2.1M parameters, ~0.9M active per token."""
    return tiny_llama().replace(name="tiny-moe", experts=8, top_k=2, expert_ffn=128)


def tiny_vit() -> ModelConfig:
    """A ViT for the emulated mesh: 16×16×3 synthetic images in 4×4 patches (16 patches and the
    class token, T = 17), 4 blocks of width 64, 10 classes; ~0.2M parameters."""
    return ModelConfig("tiny-vit", layers=4, hidden=64, heads=4, vocab=10, image=16, patch=4)


# PPLL's ViT (Guo et al. 2024, arXiv:2411.12780) trains on CIFAR-10, SVHN and STL-10 on 4 GPUs,
# one block of the network per GPU (abstract). CIFAR-10's images are 32×32×3 in 10 classes
# (Krizhevsky 2009). The depth and widths below are DeiT's ViT-S (Touvron et al. 2021,
# arXiv:2012.12877, Table 1: 12 blocks, D = 384, 6 heads) with the 4×4 patches usual on 32×32
# images: an assumption, not the paper's statement; parex.figures.ppll brackets the width over
# DeiT's Ti, S and B (192, 384, 768).
PPLL_VIT_WIDTHS = {"ti": (192, 3), "s": (384, 6), "b": (768, 12)}  # D, heads (DeiT, Table 1)


def ppll_vit(width: str = "s") -> ModelConfig:
    """A 12-block ViT on CIFAR-10 (32×32×3, 4×4 patches: T = 65, 10 classes), DeiT's widths."""
    hidden, heads = PPLL_VIT_WIDTHS[width]
    return ModelConfig("ppll-vit" if width == "s" else f"ppll-vit-{width}", layers=12,
                       hidden=hidden, heads=heads, vocab=10, image=32, patch=4)


def _gpt(name, layers, hidden, heads, vocab=50304, seq_len=1024):
    return ModelConfig(name, "gpt", layers, hidden, heads, vocab=vocab, seq_len=seq_len)


def _llama(name, layers, hidden, heads, kv_heads, ffn, vocab, seq_len):
    return ModelConfig(name, "llama", layers, hidden, heads, kv_heads, ffn, vocab, seq_len)


_PRESETS: dict[str, Callable[[], ModelConfig]] = {
    "tiny": tiny,
    "small": small,
    "tiny-llama": tiny_llama,
    "tiny-moe": tiny_moe,
    "tiny-vit": tiny_vit,
    "ppll-vit": ppll_vit,
    "gpt2-small": lambda: _gpt("gpt2-small", 12, 768, 12),
    "gpt2-medium": lambda: _gpt("gpt2-medium", 24, 1024, 16),
    "gpt2-large": lambda: _gpt("gpt2-large", 36, 1280, 20),
    "gpt2-xl": lambda: _gpt("gpt2-xl", 48, 1600, 25),
    "gpt3-175b": lambda: _gpt("gpt3-175b", 96, 12288, 96, seq_len=2048),
    "llama2-7b": lambda: _llama("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096),
    "llama2-13b": lambda: _llama("llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096),
    "llama2-70b": lambda: _llama("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096),
    # LLaMA 30B (Touvron et al. 2023, arXiv:2302.13971, Table 2: 60 layers, D = 6656, 52 heads,
    # 2048 tokens; SwiGLU width 2/3·4D rounded up to a multiple of 256 = 17920, as its params.json's
    # multiple_of = 256 gives). HexiScale trains it at 4096 tokens.
    "llama-30b": lambda: _llama("llama-30b", 60, 6656, 52, 52, 17920, 32000, 2048),
    "llama3-8b": lambda: _llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192),
    "llama3-70b": lambda: _llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192),
    "llama3-405b": lambda: _llama("llama3-405b", 126, 16384, 128, 8, 53248, 128256, 8192),
    # Mixtral 8x7B (Jiang et al. 2024, arXiv:2401.04088): Mistral 7B's blocks with 8 SwiGLU
    # experts, top-2; 46.7B parameters, 12.9B active. Sequence 4096 as in Megatron-LM's example.
    "mixtral-8x7b": lambda: _llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 4096).replace(
        experts=8, top_k=2),
    # DeepSeek-V3 (arXiv:2412.19437): 61 blocks, 256 routed experts of width 2048, top-8, one
    # shared expert, V = 129280, pre-training at 4096 tokens. For prediction only, and two
    # approximations: multi-head latent attention is counted as 128-head attention at D = 7168
    # (its low-rank projections are smaller), and its first 3 dense blocks as MoE blocks.
    "deepseek-v3": lambda: _llama("deepseek-v3", 61, 7168, 128, 128, 18432, 129280,
                                  4096).replace(experts=256, top_k=8, expert_ffn=2048,
                                                shared_experts=1),
}

# Megatron-LM weak scaling, Narayanan et al. 2021, Table 1: (params B, heads, hidden, layers).
_MEGATRON_TABLE1 = [(1.7, 24, 2304, 24), (3.6, 32, 3072, 30), (7.5, 32, 4096, 36),
                    (18.4, 48, 6144, 40), (39.1, 64, 8192, 48), (76.1, 80, 10240, 60),
                    (145.6, 96, 12288, 80), (310.1, 128, 16384, 96), (529.6, 128, 20480, 105),
                    (1008, 160, 25600, 128)]
for _b, _a, _h, _l in _MEGATRON_TABLE1:
    _n = f"megatron-{_b:g}b"
    _PRESETS[_n] = (lambda n=_n, a=_a, h=_h, l=_l:
                    _gpt(n, l, h, a, vocab=51200, seq_len=2048))

# Activation recomputation, Korthikanti et al. 2022, Table 3: (name, heads, hidden, layers).
for _n, _a, _h, _l in [("22b", 64, 6144, 48), ("175b", 96, 12288, 96),
                       ("530b", 128, 20480, 105), ("1t", 160, 25600, 128)]:
    _PRESETS[f"korthikanti-{_n}"] = (lambda n=f"korthikanti-{_n}", a=_a, h=_h, l=_l:
                                     _gpt(n, l, h, a, vocab=51200, seq_len=2048))


def preset_names() -> list[str]:
    return list(_PRESETS)


def model_preset(name: str) -> ModelConfig:
    """The named model; an unknown name raises with the list of known ones."""
    try:
        return _PRESETS[name]()
    except KeyError:
        raise InputError(unknown("model preset", name, _PRESETS)) from None
