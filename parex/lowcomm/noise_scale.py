"""The gradient noise scale: the batch beyond which a bigger batch stops buying proportionally more
progress per step (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training",
arXiv:1812.06162, §2.2 and Appendix A.1).

With G the true gradient and Σ the per-example gradient covariance,

    B_simple = tr(Σ) / |G|²

and the steps a run needs grow as S = S_min · (1 + B_noise / B) (their eq. 2.7, B_noise ≈
B_simple): a batch well below B_simple is noise-dominated, one well above it wastes examples.
DiLoCo's comparison is the two sides of that line: each worker's batch against sync DP's k
times larger one.

Both terms come from squared norms of mean gradients at two batch sizes B_small < B_big, whose
expectations are |G|² + tr(Σ)/B; the unbiased estimators of Appendix A.1 solve for each:

    |G|²  ≈ (B_big·|G_big|² − B_small·|G_small|²) / (B_big − B_small)
    tr(Σ) ≈ (|G_small|² − |G_big|²) / (1/B_small − 1/B_big)

Here an example is one sequence: each batch gives |G_big|² over its B_big sequences and the mean
|G_small|² over its B_big / B_small pieces.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import InputError

# Kaplan et al. 2020 ("Scaling Laws for Neural Language Models", arXiv:2001.08361), eq. (1.4)
# and §5.1: the critical batch of a language model at loss L (nats per token) is
# B_crit(L) ≈ B* / L^(1/α_B), B* ≈ 2·10⁸ tokens, α_B ≈ 0.21, fitted on their WebText2
# transformers, which §5.1 identifies with McCandlish et al.'s noise scale B_noise (B_simple
# approximates it).
KAPLAN_B_STAR_TOKENS = 2e8
KAPLAN_ALPHA_B = 0.21


@dataclass(frozen=True)
class NoiseScale:
    gradient_sq: float  # |G|², the true gradient's squared norm
    trace: float  # tr(Σ), per example
    small: int  # B_small, B_big: the batch sizes measured (examples)
    big: int

    @property
    def b_simple(self) -> float:
        """tr(Σ) / |G|², in examples."""
        return self.trace / self.gradient_sq


def _sq_norm(tree) -> float:
    return float(sum(jnp.vdot(x, x) for x in jax.tree.leaves(tree)))


def noise_scale(grad_fn, params, batches: list[dict], small: int) -> NoiseScale:
    """B_simple from `batches` (dicts of arrays with the examples on dim 0, all of one size
    B_big, a multiple of `small`); `grad_fn(params, batch)` is the mean gradient over a batch."""
    big = len(next(iter(batches[0].values())))
    if not 0 < small < big or big % small:
        raise InputError(f"noise scale: B_small = {small} must divide B_big = {big} and be "
                         "smaller; pass a small batch size that splits each batch evenly")
    sq_big, sq_small = [], []
    for batch in batches:
        sq_big.append(_sq_norm(grad_fn(params, batch)))
        sq_small += [_sq_norm(grad_fn(params, {k: v[i:i + small] for k, v in batch.items()}))
                     for i in range(0, big, small)]
    g_big, g_small = float(np.mean(sq_big)), float(np.mean(sq_small))
    gradient_sq = (big * g_big - small * g_small) / (big - small)
    trace = (g_small - g_big) / (1 / small - 1 / big)
    return NoiseScale(gradient_sq, trace, small, big)


def model_noise_scale(model, params, *, seq_len: int, big: int = 64, small: int = 2,
                      batches: int = 4, seed: int = 1) -> NoiseScale:
    """B_simple of a language model at `params` (host or device parameters in the model's layer
    order), in sequences of `seq_len` corpus tokens, from `batches` batches of `big` sequences
    drawn with `seed`, on one device."""
    from ..executor.data import Batches
    from ..model import transformer as gpt

    grad_fn = jax.jit(jax.grad(partial(gpt.loss_fn, cfg=model)))
    data = Batches("corpus", big, seq_len, model.vocab, seed)
    params = jax.device_put(params, jax.devices()[0])
    return noise_scale(grad_fn, params, [data[i] for i in range(batches)], small)


def kaplan_critical_batch(loss: float) -> float:
    """B_crit(L) in tokens (Kaplan et al. 2020, eq. 1.4), L the loss in nats per token: the
    published noise scale of a language model at that loss, for a model parex cannot measure."""
    if not loss > 0:
        raise InputError(f"critical batch: loss = {loss} nats must be positive; pass a "
                         "cross-entropy loss per token")
    return KAPLAN_B_STAR_TOKENS / loss ** (1 / KAPLAN_ALPHA_B)
