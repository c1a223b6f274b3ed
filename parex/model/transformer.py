"""A decoder-only transformer as pure functions over a parameter pytree.

Only logical dims appear here. Every parameter is declared once in `param_table` with its shape and its
dims; the layout maps those dims to mesh axes. The few layout-dependent operations go through an `Ops`
object the caller supplies: `ops.constrain(x, dims)` pins an activation's sharding (identity on one
device), `ops.attention(q, k, v)` runs the attention core (`ops.kernel`'s, parex.model.attention: the
naive einsum or the blockwise flash kernel; ring or all-to-all under context parallelism),
`ops.column_parallel` / `ops.row_parallel` are the matmuls that enter and leave the
tensor-parallel regions (explicit all-gather / reduce-scatter under sequence parallelism), and
`ops.seq_order` is the order of positions along the sequence dim (zig-zag under ring attention).
A mixture of experts' MLP (parex.model.moe) runs its experts through `ops.experts` (the all-to-alls of
expert parallelism on a mesh).
So this file never names a mesh axis. Blocks are stacked on a leading `layers` dim and run with
`lax.scan`.

Shapes: B batch, T sequence, D hidden, H heads, K kv heads, Dh head dim, F mlp width, V vocab, L layers.
"""

from __future__ import annotations

import copy
import math
from functools import partial

import jax
import jax.numpy as jnp

from . import fp8, vision
from .attention import attention as attention_kernel
from .attention import naive_attention as attention_core  # noqa: F401 (its old home)
from ..config import ModelConfig
from ..layout import is_dims
from .moe import routing
from .moe import layer as moe_layer
from .moe.layer import moe_mlp


class Ops:
    """The layout-dependent operations, as run on one device. `parex.parallel.sharding.MeshOps` overrides
    them for a mesh."""

    kernel = "naive"  # the attention kernel (parex.model.attention): naive or flash
    precision = None  # the FP8 recipe of the blocks' projections (parex.precision), or None

    def with_precision(self, precision) -> "Ops":
        """These ops with the blocks' projections in `precision` (FP8 recipes only)."""
        ops = copy.copy(self)
        ops.precision = precision if precision is not None and precision.fp8 else None
        return ops

    def matmul(self, eq, x, w, w_dims, state=None):
        """einsum(eq, x, w): in FP8 under an FP8 precision (parex.model.fp8, `state` its
        delayed-scaling histories), the weight gathered as the layout gathers it."""
        if self.precision is None:
            return jnp.einsum(eq, x, w)
        if not self.precision.gathers_fp8:
            w = self.weight_whole(w, w_dims)  # gathered in the compute dtype, then quantised
        return fp8.einsum(eq, x, w, self.precision, state, self.fp8_gather(w_dims))

    def weight_whole(self, w, w_dims):
        """The weight as the matmul uses it (one device: as it is)."""
        return w

    def fp8_gather(self, w_dims):
        """The all-gather of an FP8 weight's shards, or None where it is whole."""
        return None

    def with_kernel(self, kernel: str) -> "Ops":
        """These ops with attention by `kernel`."""
        ops = copy.copy(self)
        ops.kernel = kernel
        return ops

    def constrain(self, x, dims: tuple):
        return x

    def attention(self, q, k, v, window=None, causal=True):
        """Causal attention, each query seeing at most `window` positions (None: all); with
        `causal` False (a ViT), every query sees every key."""
        return attention_kernel(q, k, v, self.kernel, window, causal)

    def lookup(self, table, tokens):
        """Rows of the embedding table (V, D) for token ids (B, T): (B, T, D)."""
        return table[tokens]

    def stage_tables(self, params: dict, length: int) -> dict:
        """The embedding's parameters as a pipeline's first stage hands them to `embed`, for
        sequences of `length` tokens."""
        return params

    def cross_entropy(self, logits, targets):
        """The mean loss of logits as the ops produce them (`cross_entropy`)."""
        return cross_entropy(logits, targets)

    def column_parallel(self, eq, x, ws, w_dims, out_dims, states=None):
        """einsum(eq, x, w) for each w in ws; x comes from the residual region (B, T, D);
        `states`: each w's FP8 scaling state (parex.model.fp8), or None."""
        states = states or (None,) * len(ws)
        return tuple(self.matmul(eq, x, w, w_dims, st) for w, st in zip(ws, states))

    def row_parallel(self, eq, u, w, u_dims, w_dims, state=None):
        """einsum(eq, u, w), contracting the split dim: the result returns to the residual."""
        return self.matmul(eq, u, w, w_dims, state)

    def seq_order(self, x, axis: int = 1):
        """x with its sequence dim in the order the layout stores positions."""
        return x

    def seq_positions(self, T: int):
        """seq_order of positions 0..T-1 as a numpy array (known while tracing), or None when
        the layout stores them in order."""
        return None

    def dispatch(self, mask, x):
        """A mixture of experts' dispatch buffer x_e[E, B, C, D] = Σ_t mask[B, T, E, C]·x[B, T, D]
        (parex.model.moe.layer)."""
        return jnp.einsum(moe_layer.DISPATCH, mask.astype(x.dtype), x)

    def combine(self, mask, out):
        """The experts' outputs back to the tokens: y[B, T, D] = Σ_{e,c} mask[B, T, E, C]·out[E, B, C, D]."""
        return jnp.einsum(moe_layer.COMBINE, mask.astype(out.dtype), out)

    def experts(self, ffn, slots, weights, dims):
        """A mixture of experts' expert MLPs, ffn(slots, weights, reduce), on the dispatch buffer
        (E, B, C, D); `dims` names the weights' dims (parex.model.moe.layer)."""
        return ffn(slots, weights, lambda y: y)

    def weighted(self, fn, x, params):
        """fn(x, params): one place where a block's parameters meet an activation (a norm, a
        projection and its bias). `fn` is linear or affine in `params`, so its weight gradient
        needs only x and the output's cotangent: the pipeline's split backward
        (parex.parallel.split) taps these calls to run input and weight gradients apart."""
        return fn(x, params)


SINGLE_DEVICE = Ops()


# --- parameters --------------------------------------------------------------------------------

def param_table(cfg: ModelConfig) -> dict:
    """Nested dict of (shape, dims) for every parameter: the single source of shapes and dims."""
    D, H, K, Dh, F, V, L = (cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.ffn,
                            cfg.vocab, cfg.layers)
    gpt = cfg.family == "gpt"

    def layer(*shape_dims):  # stacked over layers
        shape, dims = zip(*shape_dims) if shape_dims else ((), ())
        return (L, *shape), ("layers", *dims)

    def norm(stacked):
        entry = layer((D, "hidden")) if stacked else ((D,), ("hidden",))
        return {"scale": entry, "bias": entry} if gpt else {"scale": entry}

    # Fused QKV grouped by KV head: for each of the K kv heads, its G = H/K query heads, then its
    # key, then its value. Splitting kv_heads over the tensor axis keeps every group on one device,
    # and one matmul means one all-reduce of the input gradient under TP (not three).
    qkv = (H // K + 2, None)
    attn = {"wqkv": layer((D, "embed"), (K, "kv_heads"), qkv, (Dh, "head_dim")),
            "wo": layer((H, "heads"), (Dh, "head_dim"), (D, "embed"))}
    if gpt:
        attn |= {"bqkv": layer((K, "kv_heads"), qkv, (Dh, "head_dim")),
                 "bo": layer((D, "hidden"))}
        mlp = {"w_in": layer((D, "embed"), (F, "mlp")), "b_in": layer((F, "mlp")),
               "w_out": layer((F, "mlp"), (D, "embed")), "b_out": layer((D, "hidden"))}
    else:  # SwiGLU
        mlp = {"w_gate": layer((D, "embed"), (F, "mlp")), "w_up": layer((D, "embed"), (F, "mlp")),
               "w_out": layer((F, "mlp"), (D, "embed"))}
    if cfg.moe:
        mlp = _moe_table(cfg, layer, mlp)
    if cfg.vision:  # the patch map, the class token and positions (parex.model.vision)
        table = vision.read_in_table(cfg)
    else:
        table = {"tokens": ((V, D), ("vocab", "embed"))}
    if gpt and not cfg.vision:
        table["positions"] = ((cfg.seq_len, D), (None, "embed"))
    norms = {"norm1": norm(True)} if cfg.parallel_block else {"norm1": norm(True),
                                                              "norm2": norm(True)}
    table |= {"blocks": {**norms, "attn": attn, "mlp": mlp}, "final_norm": norm(False)}
    if not cfg.tied_embeddings:  # tied: the output layer reads `tokens` (`unembed`)
        table["unembed"] = ((D, V), ("embed", "vocab"))
    return table


def _moe_table(cfg: ModelConfig, layer, dense: dict) -> dict:
    """A block's mixture of experts (parex.model.moe): the router W_r[D, E], the routed experts'
    weights with a leading experts dim (their D is `expert_embed`, their width `expert_mlp`), and
    the shared experts as one dense MLP of width S·F_e, shaped like `dense`."""
    D, E, Fe = cfg.hidden, cfg.experts, cfg.expert_ffn
    experts = {}
    for name, entry in dense.items():
        shape, dims = entry[0][1:], entry[1][1:]
        renamed = tuple({"embed": "expert_embed", "mlp": "expert_mlp"}.get(d, d) for d in dims)
        sized = tuple(Fe if d == "mlp" else n for n, d in zip(shape, dims))
        experts[name] = layer((E, "experts"), *zip(sized, renamed))
    table = {"router": layer((D, "embed"), (E, None)), "experts": experts}
    if cfg.bias_rate > 0:  # not learned by gradient: moved after each step (routing.rebalance)
        table["router_bias"] = layer((E, None))
    if cfg.shared_experts:
        width = cfg.shared_experts * Fe
        table["shared"] = {name: layer(*((width if d == "mlp" else n, d)
                                         for n, d in zip(entry[0][1:], entry[1][1:])))
                           for name, entry in dense.items()}
    return table


def fp8_state_table(cfg: ModelConfig, history: int) -> dict:
    """Delayed scaling's state: for each FP8 projection of the blocks, the amax histories of
    its x, W and dY, (L, history) float32 each (parex.model.fp8.history_state)."""
    mlp = ("w_in",) if cfg.family == "gpt" else ("w_gate", "w_up")
    state = partial(fp8.history_state, cfg.layers, history)
    return {"blocks": {"attn": {"wqkv": state(), "wo": state()},
                       "mlp": {name: state() for name in mlp + ("w_out",)}}}


def _is_entry(x) -> bool:
    return isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], tuple)


def param_dims(cfg: ModelConfig) -> dict:
    """The parameter pytree's structure with each leaf replaced by its tuple of dims."""
    return jax.tree.map(lambda e: e[1], param_table(cfg), is_leaf=_is_entry)


def param_shapes(cfg: ModelConfig) -> dict:
    return jax.tree.map(lambda e: jax.ShapeDtypeStruct(e[0], jnp.float32), param_table(cfg),
                        is_leaf=_is_entry)


def init_params(cfg: ModelConfig, key: jax.Array) -> dict:
    """GPT-2 initialisation: N(0, 0.02) matrices, residual projections scaled by 1/sqrt(2L),
    zero biases, unit norm scales. Master weights are float32."""
    entries, treedef = jax.tree.flatten_with_path(param_table(cfg), is_leaf=_is_entry)
    leaves = []
    for (path, (shape, _)), k in zip(entries, jax.random.split(key, len(entries))):
        name = path[-1].key
        if name == "scale":
            leaves.append(jnp.ones(shape, jnp.float32))
        elif name in _BIASES:
            leaves.append(jnp.zeros(shape, jnp.float32))
        else:
            std = 0.02 / math.sqrt(2 * cfg.layers) if name in ("wo", "w_out") else 0.02
            leaves.append(std * jax.random.normal(k, shape, jnp.float32))
    return jax.tree.unflatten(treedef, leaves)


_BIASES = ("bias", "bqkv", "bo", "b_in", "b_out", "router_bias", "patch_bias")


# --- layers ------------------------------------------------------------------------------------

def _norm(x, p, family):
    x32 = x.astype(jnp.float32)
    if family == "gpt":  # LayerNorm
        mean = x32.mean(-1, keepdims=True)
        var = jnp.square(x32 - mean).mean(-1, keepdims=True)
        y = (x32 - mean) * jax.lax.rsqrt(var + 1e-5) * p["scale"] + p["bias"]
    else:  # RMSNorm
        y = x32 * jax.lax.rsqrt(jnp.square(x32).mean(-1, keepdims=True) + 1e-5) * p["scale"]
    return y.astype(x.dtype)


def _rope(x, positions):
    """Rotary embedding on (B, T, N, Dh): rotate feature pairs (i, i + Dh/2) by position · θ_i."""
    half = x.shape[-1] // 2
    freqs = 10000.0 ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angle = positions[:, None].astype(jnp.float32) * freqs[None, :]  # (T, Dh/2)
    cos, sin = jnp.cos(angle)[None, :, None, :], jnp.sin(angle)[None, :, None, :]
    x1, x2 = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).astype(x.dtype)


def _qkv_projection(x, w, ops, fp8_state=None):
    # (B, T, K, G + 2, Dh), column-parallel
    qkv, = ops.column_parallel("btd,dkgh->btkgh", x, (w["wqkv"],), _QKV_W, _QKV,
                               fp8_state and (fp8_state["wqkv"],))
    return qkv + w["bqkv"] if "bqkv" in w else qkv


def _out_projection(u, w, ops, eq, u_dims, w_dims, fp8_state=None):
    y = ops.row_parallel(eq, u, w["w"], u_dims, w_dims, fp8_state)  # TP reduces here
    return y + w["b"] if "b" in w else y


def _mlp_in(x, w, ops, fp8_state=None):
    names = [n for n in ("w_in", "w_gate", "w_up") if n in w]
    us = ops.column_parallel("btd,df->btf", x, tuple(w[n] for n in names), _MLP_W, _MLP,
                             fp8_state and tuple(fp8_state[n] for n in names))
    return (us[0] + w["b_in"],) if "b_in" in w else us


def _params(p, **names):
    """The parameters one weighted op reads, under the names its function uses."""
    return {short: p[long] for short, long in names.items() if long in p}


def _attention(x, p, cfg, ops, remat, fp8_state=None):
    """`fp8_state`: delayed scaling's histories of this block's projections (fp8_state_table)."""
    fs = fp8_state or {}
    qkv = ops.weighted(partial(_qkv_projection, ops=ops, fp8_state=fp8_state), x,
                       _params(p, wqkv="wqkv", bqkv="bqkv"))
    B, T, K, G2, Dh = qkv.shape
    q = qkv[:, :, :, :-2].reshape(B, T, K * (G2 - 2), Dh)  # (B, T, H, Dh), head = kv·G + g
    k, v = qkv[:, :, :, -2], qkv[:, :, :, -1]  # (B, T, K, Dh)
    if cfg.family == "llama":
        positions = ops.seq_order(jnp.arange(x.shape[1]), 0)
        q, k = _rope(q, positions), _rope(k, positions)
    q = ops.constrain(q, ("batch", "seq", "heads", "head_dim"))
    k = ops.constrain(k, ("batch", "seq", "kv_heads", "head_dim"))
    v = ops.constrain(v, ("batch", "seq", "kv_heads", "head_dim"))
    core = partial(ops.attention, window=cfg.sliding_window, causal=cfg.causal)
    core = jax.checkpoint(core) if remat == "selective" else core
    out = ops.constrain(core(q, k, v), ("batch", "seq", "heads", "head_dim"))
    return ops.weighted(partial(_out_projection, ops=ops, eq="bthk,hkd->btd", u_dims=_HEADS,
                                w_dims=_HEADS_W, fp8_state=fs.get("wo")), out,
                        _params(p, w="wo", b="bo"))


def _mlp(x, p, cfg, ops, fp8_state=None):
    fs = fp8_state or {}
    us = ops.weighted(partial(_mlp_in, ops=ops, fp8_state=fp8_state), x,
                      _params(p, w_in="w_in", b_in="b_in", w_gate="w_gate", w_up="w_up"))
    if cfg.family == "gpt":
        u = jax.nn.gelu(us[0])
    else:  # SwiGLU
        u = jax.nn.silu(us[0]) * us[1]
    u = ops.constrain(u, _MLP)  # (B, T, F), column-parallel
    return ops.weighted(partial(_out_projection, ops=ops, eq="btf,fd->btd", u_dims=_MLP,
                                w_dims=_MLP_OUT_W, fp8_state=fs.get("w_out")), u,
                        _params(p, w="w_out", b="b_out"))


# Dims of the tensor-parallel matmuls' operands: weights W_in[D, F_tensor], W_out[F_tensor, D].
_QKV = ("batch", "seq", "kv_heads", None, "head_dim")
_QKV_W = ("embed", "kv_heads", None, "head_dim")
_HEADS = ("batch", "seq", "heads", "head_dim")
_HEADS_W = ("heads", "head_dim", "embed")
_MLP = ("batch", "seq", "mlp")
_MLP_W = ("embed", "mlp")
_MLP_OUT_W = ("mlp", "embed")


def block(x, p, cfg: ModelConfig, ops: Ops = SINGLE_DEVICE, remat: str = "none"):
    """One pre-norm transformer block on the residual stream x (B, T, D)."""
    return block_with_stats(x, p, cfg, ops, remat)[0]


def block_with_stats(x, p, cfg: ModelConfig, ops: Ops = SINGLE_DEVICE, remat: str = "none",
                     fp8_state=None):
    """(block(x), its router statistics: parex.model.moe.routing.aux_stats, {} for a dense MLP).
    Sequential: x + attn(norm1(x)), then + mlp(norm2(·)). Parallel (cfg.parallel_block, GPT-J,
    PaLM): x + attn(norm1(x)) + mlp(norm1(x)), both branches reading one normalised input.
    `fp8_state`: this block's delayed-scaling histories (fp8_state_table), or None."""
    res = ("batch", "seq_res", "hidden")  # sequence-parallel region under SP
    norm = partial(_norm, family=cfg.family)
    fs = fp8_state or {}
    h = ops.weighted(norm, ops.constrain(x, res), p["norm1"])
    attended = _attention(h, p["attn"], cfg, ops, remat, fs.get("attn"))
    if cfg.parallel_block:
        x = x + attended
    else:
        x = ops.constrain(x + attended, res)
        h = ops.weighted(norm, x, p["norm2"])
    if not cfg.moe:
        return ops.constrain(x + _mlp(h, p["mlp"], cfg, ops, fs.get("mlp")), res), {}
    shared = _mlp(h, p["mlp"]["shared"], cfg, ops) if "shared" in p["mlp"] else 0.0
    # routing needs whole sequences: under SP they are gathered over tensor first (Megatron's
    # all-gather before the MoE layer; its output, the same on every tensor device, is sliced)
    y, stats = moe_mlp(ops.constrain(h, ("batch", "seq", "hidden")), p["mlp"], cfg, ops)
    return ops.constrain(x + y + shared, res), stats


def run_blocks(x, blocks, cfg, ops: Ops = SINGLE_DEVICE, remat="none", with_stats=False,
               fp8_blocks=None):
    """Scan the stacked blocks over x; `full` remat keeps only each block's input. With
    `with_stats`: (x, the router statistics stacked over layers). `fp8_blocks`: the blocks'
    delayed-scaling histories, stacked over layers as the blocks are."""
    def body(h, p_and_state):
        p, state = p_and_state
        return block_with_stats(h, p, cfg, ops, remat, state)

    if remat == "full":
        body = jax.checkpoint(body, policy=jax.checkpoint_policies.nothing_saveable)
    x, stats = jax.lax.scan(body, x, (blocks, fp8_blocks))
    return (x, stats) if with_stats else x


def embed(params, tokens, cfg, ops: Ops = SINGLE_DEVICE):
    """The read-in: token ids (B, T), or a ViT's patches (B, N, P²C), to (B, T, D)."""
    if cfg.vision:
        return vision.embed(params, tokens, cfg, ops)
    x = ops.lookup(params["tokens"], tokens)  # (B, T, D), from the vocab-split table
    if cfg.family == "gpt":  # tokens arrive in ops.seq_order, so their positions must too
        x = x + ops.seq_order(params["positions"][: tokens.shape[1]], 0)
    return ops.constrain(x, ("batch", "seq_res", "hidden"))


def unembed(params, x, cfg, ops: Ops = SINGLE_DEVICE):
    """Logits (B, T, V); a ViT's of its class token alone, (B, 1, V)."""
    if cfg.vision:
        x = vision.class_token(x)
    x = _norm(x, params["final_norm"], cfg.family)
    head = ops.with_precision(None)  # every FP8 recipe keeps the output head in 16 bits
    if cfg.tied_embeddings:  # logits = x·Eᵀ from the token table E[V_tensor, D]
        logits, = head.column_parallel("btd,vd->btv", x, (params["tokens"],),
                                       ("vocab", "embed"), ("batch", "seq", "vocab"))
    else:
        logits, = head.column_parallel("btd,dv->btv", x, (params["unembed"],),
                                       ("embed", "vocab"), ("batch", "seq", "vocab"))
    return ops.constrain(logits, ("batch", "seq", "vocab"))


TOKEN_READ_IN = ("tokens", "positions")  # a language model's read-in (GPT's positions too)


def read_in_names(cfg: ModelConfig) -> tuple:
    """The parameters a pipeline's first stage reads the inputs with: the token (and position)
    table, or a ViT's patch map, class token and positions (parex.model.vision)."""
    return vision.READ_IN if cfg.vision else TOKEN_READ_IN


def positions_of(cfg: ModelConfig, inputs) -> int:
    """T, the sequence an input batch (..., B, T) becomes: its tokens, or a ViT's patches
    (..., B, N, P²C) and the class token."""
    return cfg.seq_len if cfg.vision else inputs.shape[-1]


def labels_per_sequence(cfg: ModelConfig, T: int) -> int:
    """Targets of one sequence: every position's next token, or a ViT's one class per image."""
    return 1 if cfg.vision else T


def whole_vectors(params, cfg: ModelConfig, ops: Ops = SINGLE_DEVICE):
    """The parameters with the norms' scales and the D-sized biases (their `hidden` dim) as the
    layers use them: whole. Where the layout partitions their state along D (FSDP, ZeRO-3, as
    ZeRO partitions every parameter) this gathers each leaf once, before the layer scan (XLA
    hoists it out of a microbatch loop), instead of one D-vector per layer and pass: 55
    gathers of 512 bytes in tiny's fsdp=8 step under full remat, each a collective's latency,
    became 8 (parex.predict.comm's fsdp-gather)."""
    def whole(dims, w):
        return ops.constrain(w, dims) if "hidden" in dims else w

    return jax.tree.map(whole, param_dims(cfg), params, is_leaf=is_dims)


def cast(params, dtype):
    """Compute copies of the float32 master weights."""
    return jax.tree.map(lambda p: p.astype(dtype), params)


def forward(params, tokens, cfg: ModelConfig, ops: Ops = SINGLE_DEVICE, remat="none",
            with_stats=False, fp8_state=None):
    """Logits (B, T, V) for tokens (B, T), both in ops.seq_order (natural on one device); with
    `with_stats`, (logits, the router statistics per layer). `fp8_state`: delayed scaling's
    histories (fp8_state_table's shapes) under ops.precision, else None."""
    params = whole_vectors(cast(params, jnp.dtype(cfg.dtype)), cfg, ops)
    x = embed(params, tokens, cfg, ops)
    x, stats = run_blocks(x, params["blocks"], cfg, ops, remat, with_stats=True,
                          fp8_blocks=fp8_state and fp8_state["blocks"])
    logits = unembed(params, x, cfg, ops)
    return (logits, stats) if with_stats else logits


def cross_entropy(logits, targets):
    """Mean next-token loss in float32. The one-hot product keeps a vocab-split logits tensor
    split: each shard reduces locally, then one small all-reduce over the tensor axis."""
    logits = logits.astype(jnp.float32)
    target_logit = jnp.sum(logits * jax.nn.one_hot(targets, logits.shape[-1]), -1)
    return jnp.mean(jax.nn.logsumexp(logits, -1) - target_logit)


def loss_fn(params, batch, cfg: ModelConfig, ops: Ops = SINGLE_DEVICE, remat="none",
            fp8_state=None):
    """batch = {"inputs": (B, T) int32, "targets": (B, T) int32}. The mean loss does not depend
    on the order of positions, so both are put in the layout's ops.seq_order."""
    logits, stats = forward(params, ops.seq_order(batch["inputs"]), cfg, ops, remat, True,
                            fp8_state)
    loss = cross_entropy(logits, ops.seq_order(batch["targets"]))
    return loss + routing.aux_loss(stats, cfg) if cfg.moe else loss


def loss_and_router_load(params, batch, cfg: ModelConfig, ops: Ops = SINGLE_DEVICE,
                         remat="none"):
    """(loss_fn's loss, each layer's expert load (L, E)): what the auxiliary-loss-free
    balancing moves the router's bias with (parex.model.moe.routing.rebalance)."""
    logits, stats = forward(params, ops.seq_order(batch["inputs"]), cfg, ops, remat, True)
    loss = cross_entropy(logits, ops.seq_order(batch["targets"])) + routing.aux_loss(stats, cfg)
    return loss, stats["load"]


def router_stats(params, batch, cfg: ModelConfig, ops: Ops = SINGLE_DEVICE) -> dict:
    """A mixture of experts' routing on `batch`: per layer (L, ...) the balance and z losses,
    each expert's load and kept assignments, and the dropped fraction over all layers."""
    _, stats = forward(params, ops.seq_order(batch["inputs"]), cfg, ops, with_stats=True)
    return stats | {"dropped": routing.dropped_fraction(stats)}


def flops_per_token(cfg: ModelConfig, seq_len: int | None = None) -> float:
    """Model FLOPs of forward + backward per token (multiply-add = 2, no recompute), with the
    parameters a token passes through (a mixture of experts' active ones, router included).
    Causal attention is counted in full (T² scores, as in Megatron's papers), a sliding window
    as its W keys per query (cfg.attended_keys): 6N + 12·L·H·Dh·T. Tied embeddings count the
    output layer's V·D once more: the lookup is free, the logits matmul is not."""
    T = seq_len or cfg.seq_len
    if cfg.vision:
        return _vision_flops_per_token(cfg)
    positions = cfg.seq_len * cfg.hidden if cfg.family == "gpt" else 0
    output = cfg.vocab * cfg.hidden if cfg.tied_embeddings else 0
    non_embedding = cfg.n_active_params - cfg.vocab * cfg.hidden - positions + output
    return 6 * non_embedding + 12 * cfg.layers * cfg.heads * cfg.head_dim * cfg.attended_keys(T)


def _vision_flops_per_token(cfg: ModelConfig) -> float:
    """A ViT's model FLOPs per token (of T = N + 1), forward + backward: the blocks' matmuls
    (6 per parameter and token) and attention over all T keys (12·L·H·Dh·T, not causal), the
    patch map on the N patch tokens (6·P²C·D each) and the classifier on the class token alone
    (6·D·V per image, so per token / T)."""
    T, D = cfg.seq_len, cfg.hidden
    read_in = cfg.patch_dim * D + 2 * D + T * D
    blocks = cfg.n_params - read_in - D * cfg.vocab
    per_image = 6 * (blocks * T + cfg.patch_dim * D * cfg.patches + D * cfg.vocab)
    return per_image / T + 12 * cfg.layers * cfg.heads * cfg.head_dim * T
