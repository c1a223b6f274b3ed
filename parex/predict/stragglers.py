"""Stragglers: a synchronous step goes at the pace of its slowest device.

Chips of one SKU do not run at one speed: Sinha et al., "Not All GPUs Are Created Equal:
Characterizing Variability in Large-Scale, Accelerator-Rich Systems" (SC'22, arXiv 2208.11035),
measured an 8 % average performance variation (22 % at most) between the GPUs of five clusters
(Summit, Vortex, Frontera, Longhorn: V100; Corona: MI50/MI60) running the same kernels, from power
management and manufacturing, with outliers beyond it. parex reads that 8 % as the spread of the
non-outlier devices, the whiskers of a box plot, ±2.7σ of a normal distribution, so each device
runs at the mean speed times 1 − σ·z with z standard normal and

    σ = 0.08 / 5.4 ≈ 1.5 %                                  (SPEED_SIGMA, not fitted)

Every synchronising collective makes its participants wait for the slowest of them, and in a
training step they chain: the data-parallel reduction joins every replica, a pipeline's stages
wait on their neighbours, a tensor-parallel group on its slowest member. So the whole step runs at
the pace of the slowest of its n devices: the compute on the critical path (and the pipeline's
fill and drain, made of it) stretches by 1 + σ·E[max of n], with the expected maximum of n standard
normals from Blom's approximation Φ⁻¹((n − 0.375) / (n + 0.25)): 1.4 for 8 devices, 3.0 for
512, 3.6 for 4,096, 4.1 for 32,768. The outliers (a device 1.5× slower than the median) are not
modelled: the paper gives their size, not how often they occur.
"""

from __future__ import annotations

import numpy as np

SPEED_SIGMA = 0.08 / 5.4  # relative spread of device speeds (module docstring)


def expected_max(n) -> np.ndarray:
    """E[max of n standard normals] (Blom's approximation); 0 for one device."""
    n = np.maximum(np.asarray(n, dtype=np.float64), 1.0)
    p = (n - 0.375) / (n + 0.25)
    return np.where(n > 1, _probit(p), 0.0)


def slowdown(n, sigma: float = SPEED_SIGMA) -> np.ndarray:
    """The factor a step of n synchronised devices takes over one of mean-speed devices."""
    return 1.0 + sigma * expected_max(n)


def _probit(p) -> np.ndarray:
    """Φ⁻¹(p) for 0.5 ≤ p < 1: Acklam's rational approximation (relative error < 1.2e-9)."""
    a = (-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
         1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00)
    b = (-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
         6.680131188771972e+01, -1.328068155288572e+01)
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
         -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00)
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
         3.754408661907416e+00)
    p = np.asarray(p, dtype=np.float64)
    q = p - 0.5
    r = q * q
    central = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q / (
        ((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1)
    t = np.sqrt(-2 * np.log(np.maximum(1 - p, 1e-300)))
    tail = -(((((c[0] * t + c[1]) * t + c[2]) * t + c[3]) * t + c[4]) * t + c[5]) / (
        (((d[0] * t + d[1]) * t + d[2]) * t + d[3]) * t + 1)
    return np.where(p > 0.97575, tail, central)


__all__ = ["SPEED_SIGMA", "expected_max", "slowdown"]
