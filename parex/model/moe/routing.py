"""Token routing of a mixture of experts: top-k gates, capacity, dispatch and combine masks, and
the router's auxiliary losses. Everything is per sequence, so that it does not depend on how a
layout splits the batch: the same tokens are dropped, and the same losses summed, on one device
and on any mesh that keeps sequences whole.

Shapes: B sequences, T tokens, D hidden, E routed experts, k experts per token, C capacity.

- Gates: softmax over the E router logits (float32), the top k kept; with k > 1 renormalised to
  sum to 1 (Mixtral, DeepSeek-V3), with k = 1 the probability itself (Switch), so that the router
  learns from the loss through its gate.
- Capacity: each expert takes at most C = ceil(cf·k·T/E) tokens of one sequence (a GShard group
  of one sequence), first choices before second choices, earlier tokens first; the rest are
  dropped (their expert output is zero, the residual carries them). Dropless (cf None): C = T,
  the most one sequence can send to one expert, so that nothing is dropped.
- Load-balancing loss, sequence-wise (DeepSeek-V3, arXiv:2412.19437, eqs. 17-20; Switch's
  α·E·Σ f_i·P_i per sequence): f_i = E/(k·T)·#{t: i in top-k(t)}, P_i = mean_t p_i(t);
  L_bal = mean over sequences of Σ_i f_i·P_i (≥ 1, = 1 when balanced).
- Router z-loss (ST-MoE, arXiv:2202.08906): mean over tokens of logsumexp(logits)².
- Auxiliary-loss-free balancing (DeepSeek-V3 §2.1.2, `bias_rate` γ): a bias b_i per expert
  and layer is added to the scores that choose the top k (not to the gates); after every step
  b_i += γ·sign(mean load − load_i), the load counted over the step's whole batch
  (`rebalance`). It is no gradient's: the optimizer sees a zero gradient for it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ...config import ModelConfig


def capacity(cfg: ModelConfig, T: int) -> int:
    """C, tokens one expert takes from one sequence of T tokens."""
    return int(slots(cfg.capacity_factor, cfg.top_k, cfg.experts, T))


def slots(capacity_factor: float | None, k: int, E: int, T):
    """ceil(cf·k·T/E) within [1, T], or T when dropless (cf None); T a number or a numpy column
    (the predictor's, parex.predict.shapes.ModelSizes.capacity)."""
    T = np.asarray(T)
    if capacity_factor is None:
        return T * 1
    return np.clip(np.ceil(capacity_factor * k * T / E), 1, T).astype(np.int64)


def route(x, w_router, cfg: ModelConfig, bias=None):
    """Gates and expert choices for x (B, T, D): (gates (B, T, k), choice (B, T, k), probs
    (B, T, E), logits (B, T, E)), in float32. `bias` (E,): DeepSeek-V3's balancing bias, added
    to the scores that choose the experts only; the gates stay the router's probabilities."""
    logits = jnp.einsum("btd,de->bte", x.astype(jnp.float32), w_router.astype(jnp.float32))
    probs = jax.nn.softmax(logits, -1)
    if bias is None:
        top, choice = top_k(probs, cfg.top_k)
    else:
        _, choice = top_k(probs + jax.lax.stop_gradient(bias.astype(jnp.float32)), cfg.top_k)
        top = jnp.take_along_axis(probs, choice, -1)
    gates = top / jnp.sum(top, -1, keepdims=True) if cfg.top_k > 1 else top
    return gates, choice, probs, logits


def top_k(probs, k: int):
    """(values, indices) of the k largest entries of the last dim, by k rounds of argmax (ties:
    the lower index first). XLA's SPMD partitioner all-gathers the batch of a lax.top_k; an
    argmax is a reduction it keeps local."""
    values, indices = [], []
    for _ in range(k):
        i = jnp.argmax(probs, -1)
        values.append(jnp.take_along_axis(probs, i[..., None], -1)[..., 0])
        indices.append(i)
        probs = jnp.where(jax.nn.one_hot(i, probs.shape[-1], dtype=bool), -jnp.inf, probs)
    return jnp.stack(values, -1), jnp.stack(indices, -1).astype(jnp.int32)


def dispatch_and_combine(gates, choice, E: int, C: int, order=None):
    """(dispatch, combine), each (B, T, E, C): dispatch[b, t, e, c] = 1 where token t of
    sequence b takes slot c of expert e; combine is the same weighted by its gate. `order`: the
    position of each stored token when the layout stores them out of order (ring attention's
    zig-zag), so that slots still go by position."""
    B, T, k = choice.shape
    chosen = jax.nn.one_hot(choice, E, dtype=jnp.int32)  # (B, T, k, E)
    ranked = chosen if order is None else jnp.take(chosen, np.argsort(order), 1)
    # slots in order of priority: all first choices (in token order), then second choices, ...
    ranked = ranked.transpose(0, 2, 1, 3).reshape(B, k * T, E)
    slot = jnp.cumsum(ranked, 1) - 1  # the slot each assignment would take in its expert
    slot = jnp.sum(slot * ranked, -1).reshape(B, k, T).transpose(0, 2, 1)  # (B, T, k)
    slot = slot if order is None else jnp.take(slot, np.asarray(order), 1)
    # each assignment's flat slot e·C + c, one past the last (E·C: all zeros) where it is
    # dropped (slot >= C); a token's k experts differ, so its k one-hots never overlap
    flat = jnp.where(slot < C, choice * C + slot, E * C)
    dispatch = jnp.sum(jax.nn.one_hot(flat, E * C, dtype=jnp.float32), 2).reshape(B, T, E, C)
    # the combine weighs each slot by its token's gate for that expert: (B, T, E) gates spread
    # over the slots, not a (B, T, k, E, C) product (its gradient then sums over C alone)
    gate_of_expert = jnp.einsum("btk,btke->bte", gates, chosen.astype(gates.dtype))
    return dispatch, dispatch * gate_of_expert[..., None]


def aux_stats(choice, probs, logits, dispatch, E: int) -> dict:
    """One layer's router statistics: the sequence-wise balance loss and z-loss (scalars), each
    expert's load (assignments, before capacity) and the assignments it kept, summed over the
    batch (E,)."""
    B, T, k = choice.shape
    assigned = jnp.sum(jax.nn.one_hot(choice, E, dtype=jnp.float32), 2)  # (B, T, E)
    f = E / (k * T) * jnp.sum(assigned, 1)  # (B, E)
    balance = jnp.mean(jnp.sum(f * jnp.mean(probs, 1), -1))
    z = jnp.mean(jnp.square(jax.nn.logsumexp(logits, -1)))
    return {"balance": balance, "z": z, "load": jnp.sum(assigned, (0, 1)),
            "kept": jnp.sum(dispatch, (0, 1, 3))}


def aux_loss(stats: dict, cfg: ModelConfig):
    """The router's losses added to the model's: α·L_bal + β·L_z, each the mean over layers."""
    return cfg.balance_loss * jnp.mean(stats["balance"]) + cfg.z_loss * jnp.mean(stats["z"])


def dropped_fraction(stats: dict):
    """The share of token-to-expert assignments that found no room (0 when dropless)."""
    load = jnp.sum(stats["load"])
    return 1.0 - jnp.sum(stats["kept"]) / jnp.maximum(load, 1.0)


def rebalance(bias, load, rate: float):
    """DeepSeek-V3's bias update after a step: each layer's bias (L, E) moved by `rate` toward
    balance, up for the experts below their layer's mean load (L, E), down for those above."""
    mean = jnp.mean(load, -1, keepdims=True)
    return bias + rate * jnp.sign(mean - load).astype(bias.dtype)
