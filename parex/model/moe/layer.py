"""The mixture-of-experts MLP, dense dispatch (GShard, arXiv:2006.16668; Switch, 2101.03961).

    route       gates, choices (B, T, k) from the router W_r[D, E]             (routing.route)
    dispatch    x_e[E, B, C, D] = Σ_t dispatch[B, T, E, C] · x[B, T, D]         (local: B is split;
                under seq the partial sums reduce-scattered over C: ops.dispatch)
    experts     ops.experts: under expert parallelism an all-to-all over `expert` sends slot block
                e of every sequence to the device holding expert e (x_e[E/ep, B_ep·, C, D]), each
                device runs its E/ep experts, and a second all-to-all returns the outputs;
                folded (expert_tensor=1) over expert × tensor, C split over tensor (`capacity`)
    combine     y[B, T, D] = Σ_{e,c} combine[B, T, E, C] · y_e[E, B, C, D]   (ops.combine)

Per block and microbatch the forward moves two all-to-alls of the dispatch buffer, each
B_local·E·C·D elements per device; the backward moves their two transposes. A dropped
assignment has no slot, so its expert output is zero and the residual carries the token.
The ragged form (tokens sorted by expert, `jax.lax.ragged_all_to_all`, no padding to C) is not
compiled by XLA:CPU in JAX 0.10 ("ragged-all-to-all is not supported"), so parex runs the dense
form everywhere; dropless is the dense form with C = T.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...config import ModelConfig
from . import routing

# Dims of the routed experts' parameters inside a block (the stacked `layers` dim stripped).
EXPERT_DIMS = {"w_in": ("experts", "expert_embed", "expert_mlp"),
               "w_gate": ("experts", "expert_embed", "expert_mlp"),
               "w_up": ("experts", "expert_embed", "expert_mlp"),
               "b_in": ("experts", "expert_mlp"),
               "w_out": ("experts", "expert_mlp", "expert_embed"),
               "b_out": ("experts", "hidden")}
SLOTS = (None, "batch", "capacity", "hidden")  # the dispatch buffer x_e[E, B, C, D]
# Expert-major, so that each expert's matmuls are a batched GEMM over a leading E with nothing
# transposed between them (B-major, XLA:CPU copied the buffer around every expert matmul)
DISPATCH = "btec,btd->ebcd"
COMBINE = "btec,ebcd->btd"
MASKS = ("batch", "seq", None, "capacity")  # dispatch and combine (B, T, E, C)
TOKENS = ("batch", "seq", "hidden")  # the layer's input and output (B, T, D), whole sequences


def expert_ffn(x, w, reduce, family: str):
    """Each expert's MLP on its slots: x (E, b, C, D) with the experts' weights (leading dim E);
    `reduce` sums the partial outputs of a split F_e (the tensor axis) before the output bias."""
    if family == "gpt":
        u = jax.nn.gelu(jnp.einsum("ebcd,edf->ebcf", x, w["w_in"]) + w["b_in"][:, None, None])
    else:  # SwiGLU
        u = (jax.nn.silu(jnp.einsum("ebcd,edf->ebcf", x, w["w_gate"]))
             * jnp.einsum("ebcd,edf->ebcf", x, w["w_up"]))
    y = reduce(jnp.einsum("ebcf,efd->ebcd", u, w["w_out"]))
    return y + w["b_out"][:, None, None] if "b_out" in w else y


def moe_mlp(x, p, cfg: ModelConfig, ops):
    """The routed experts on x (B, T, D): (y (B, T, D), the layer's router statistics)."""
    B, T, _ = x.shape
    C = routing.capacity(cfg, T)
    gates, choice, probs, logits = routing.route(x, p["router"], cfg, p.get("router_bias"))
    dispatch, combine = routing.dispatch_and_combine(gates, choice, cfg.experts, C,
                                                     ops.seq_positions(T))
    dispatch, combine = (ops.constrain(m, MASKS) for m in (dispatch, combine))
    slots = ops.constrain(ops.dispatch(dispatch, x), SLOTS)
    weights = {n: w for n, w in p["experts"].items()}
    out = ops.experts(lambda s, w, reduce: expert_ffn(s, w, reduce, cfg.family), slots, weights,
                      {n: EXPERT_DIMS[n] for n in weights})
    y = ops.combine(combine, ops.constrain(out, SLOTS))
    return ops.constrain(y, TOKENS), routing.aux_stats(choice, probs, logits, dispatch, cfg.experts)
