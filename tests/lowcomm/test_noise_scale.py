"""The gradient noise scale estimator (parex.lowcomm.noise_scale) on a loss whose gradient noise
is known: loss(θ) = mean_i θ·x_i with x_i ~ N(μ, σ²·I_d), so the per-example gradient is x_i,
|G|² = |μ|² and tr(Σ) = d·σ²."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from parex.errors import InputError
from parex.lowcomm.noise_scale import (KAPLAN_ALPHA_B, KAPLAN_B_STAR_TOKENS,
                                       kaplan_critical_batch, noise_scale)

D, SIGMA = 64, 1.0
MU = jnp.full(D, 0.5)  # |μ|² = 16, tr(Σ) = 64: B_simple = 4


def _grad(theta, batch):
    return jax.grad(lambda t: jnp.mean(batch["x"] @ t))(theta)


def _batches(n, big, seed=0):
    rng = np.random.default_rng(seed)
    return [{"x": jnp.asarray(MU + SIGMA * rng.standard_normal((big, D)), jnp.float32)}
            for _ in range(n)]


def test_recovers_the_known_gradient_and_noise():
    est = noise_scale(_grad, jnp.zeros(D), _batches(32, 64), small=4)
    # sampling error of 32 batches: a few percent (the tolerances are ~4 standard errors)
    assert est.gradient_sq == pytest.approx(float(MU @ MU), rel=0.1)
    assert est.trace == pytest.approx(D * SIGMA ** 2, rel=0.1)
    assert est.b_simple == pytest.approx(4.0, rel=0.15)


def test_noiseless_examples_have_no_noise_scale():
    batches = [{"x": jnp.tile(MU, (8, 1))} for _ in range(2)]
    est = noise_scale(_grad, jnp.zeros(D), batches, small=2)
    assert abs(est.trace) < 1e-4 and est.b_simple == pytest.approx(0.0, abs=1e-5)


@pytest.mark.parametrize("small", [0, 3, 8])
def test_small_batch_must_split_the_big_one(small):
    with pytest.raises(InputError, match="must divide"):
        noise_scale(_grad, jnp.zeros(D), _batches(1, 8), small=small)


def test_kaplans_critical_batch_is_b_star_at_one_nat_and_grows_as_the_loss_falls():
    assert kaplan_critical_batch(1.0) == pytest.approx(KAPLAN_B_STAR_TOKENS)
    # halving the loss multiplies B_crit by 2^(1/α_B) ≈ 27: the noise scale grows in training
    ratio = kaplan_critical_batch(1.5) / kaplan_critical_batch(3.0)
    assert ratio == pytest.approx(2 ** (1 / KAPLAN_ALPHA_B))
    assert 20 < ratio < 30


@pytest.mark.parametrize("loss", [0.0, -1.0])
def test_critical_batch_needs_a_positive_loss(loss):
    with pytest.raises(InputError, match="must be positive"):
        kaplan_critical_batch(loss)
