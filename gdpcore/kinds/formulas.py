"""Closed-form RDP, amplification and central-limit formulas the kind declarations use (no registry state).

Each function cites the paper it implements; the kinds in the sibling modules turn them into hooks.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

__all__ = [
    "amplified_epsilon",
    "clt_mu_subsampled_gaussian",
    "rdp_from_pure",
    "rdp_kary_randomized_response",
    "rdp_laplace",
    "rdp_randomized_response",
    "rdp_subsampled_gaussian",
    "solve_clt_subsampled_gaussian",
]


def clt_mu_subsampled_gaussian(*, noise_multiplier: float, sampling_rate: float, steps: int) -> float:
    """mu = q sqrt(T (e^{1/sigma^2} - 1)) (Bu et al. 2020, Dong et al. 2022 Cor. 5.4); exactly sqrt(T)/sigma at q = 1.

    The central-limit estimate, not a bound: it can understate the privacy loss of few, strongly subsampled steps.
    """
    if sampling_rate == 1.0:
        return math.sqrt(steps) / noise_multiplier
    return sampling_rate * math.sqrt(steps * math.expm1(1.0 / noise_multiplier**2))


def solve_clt_subsampled_gaussian(
    mu: float,
    *,
    noise_multiplier: float | None = None,
    sampling_rate: float | None = None,
    steps: float | None = None,
) -> float:
    """The one parameter left as None for which :func:`clt_mu_subsampled_gaussian` equals ``mu`` (real-valued:
    ``steps`` is not rounded, ``sampling_rate`` may exceed 1; the caller clamps). A starting point for calibration,
    never an answer: the CLT mu is an estimate."""
    given = {"noise_multiplier": noise_multiplier, "sampling_rate": sampling_rate, "steps": steps}
    missing = [k for k, v in given.items() if v is None]
    if len(missing) != 1:
        raise ValueError(f"exactly one of noise_multiplier, sampling_rate, steps must be None, got {missing!r}")
    if not (math.isfinite(mu) and mu > 0):
        raise ValueError(f"mu must be finite and > 0, got {mu!r}")
    if noise_multiplier is None:
        q, t = float(sampling_rate or 0.0), float(steps or 0.0)
        return math.sqrt(t) / mu if q == 1.0 else 1.0 / math.sqrt(math.log1p(mu**2 / (q * q * t)))
    sigma = float(noise_multiplier)
    growth = math.expm1(1.0 / sigma**2)
    if steps is None:
        q = float(sampling_rate or 0.0)
        return mu**2 / (q * q * growth) if q < 1.0 else (mu * sigma) ** 2
    return mu / math.sqrt(float(steps) * growth)


def rdp_laplace(eps0: float, t: np.ndarray) -> np.ndarray:
    # Mironov 2017 Prop. 6: (1/(t-1)) log(t/(2t-1) e^{(t-1) eps0} + (t-1)/(2t-1) e^{-t eps0}), written stably.
    c = np.expm1((1.0 - 2.0 * t) * eps0) / (2.0 * t - 1.0)
    return eps0 + np.log1p((t - 1.0) * c) / (t - 1.0)


def rdp_randomized_response(eps: float, t: np.ndarray) -> np.ndarray:
    # D_t(Bern(p) || Bern(1-p)) with p = e^eps/(1+e^eps): (1/(t-1)) log(p^t q^{1-t} + q^t p^{1-t}).
    lp, lq = -np.logaddexp(0.0, -eps), -np.logaddexp(0.0, eps)
    return np.logaddexp(t * lp + (1 - t) * lq, t * lq + (1 - t) * lp) / (t - 1.0)


_SG_GRID_POINTS = 2**20
"""Above this many quadrature points per order, :func:`rdp_subsampled_gaussian` grids the two modes only."""
_SG_WINDOW = 60.0
"""Half-width, in sigmas, of each mode's window when the modes are gridded apart."""


def _sg_log_integrand(x: np.ndarray, q: float, sigma: float, ti: float) -> np.ndarray:
    log_phi = -0.5 * (x / sigma) ** 2 - math.log(sigma * math.sqrt(2.0 * math.pi))
    z = (2.0 * x - 1.0) / (2.0 * sigma**2)
    # Two branches evaluated everywhere by np.where: clip z so the unused one cannot overflow (z reaches ~1e3
    # at order 1024 with sigma ~ 1).
    log_ratio = np.log1p(q * np.expm1(np.minimum(z, 30.0)))
    with np.errstate(over="ignore", divide="ignore"):  # the unused branch at z << 0 (a small sigma) overflows
        upper = math.log(q) + z + np.log1p((1 - q) * np.exp(-np.minimum(z, 700)) / q)
    log_ratio = np.where(z > 30, upper, log_ratio)
    return log_phi + ti * log_ratio


def rdp_subsampled_gaussian(q: float, sigma: float, t: np.ndarray) -> np.ndarray:
    """eps_1(t) = (1/(t-1)) log E_{x~N(0,sigma^2)} [(1 - q + q e^{(2x-1)/(2 sigma^2)})^t] (seed 000 Sec. 2.3),
    by trapezoidal quadrature in log space on a grid covering both modes (x ~ 0 and x ~ t). The integrand is smooth
    and Gaussian-tailed, so the trapezoid rule with step sigma/64 is accurate to machine precision.

    Memory: when one grid over [-40 sigma, t + 40 sigma + 1] would exceed ``_SG_GRID_POINTS`` (a small sigma: 1.3e8
    points at sigma = 1e-6), only the windows of ``_SG_WINDOW`` sigmas around the two modes are gridded and the rest
    is bounded from above: (1 - q + q e^z)^t <= 2^t max((1-q)^t, q^t e^{t z}), and the log of the Gaussian density
    times either term is a parabola of curvature 1/sigma^2 peaking at x = 0 (A) or x = t (B), so outside the windows
    the integrand is below e^{t log 2 + max(A, B) - 1800}; that times the uncovered width is added (never optimistic)."""
    out = np.empty(t.size)
    for i, ti in enumerate(t):
        h = sigma / 64.0
        x_hi = max(0.0, ti) + 40.0 * sigma + 1.0
        if (x_hi + 40.0 * sigma) / h <= _SG_GRID_POINTS:
            x = np.arange(-40.0 * sigma, x_hi, h)
            log_int = special.logsumexp(_sg_log_integrand(x, q, sigma, ti)) + math.log(x[1] - x[0])
        else:
            w = _SG_WINDOW * sigma
            windows = [np.arange(-w, w, h), np.arange(ti - w, ti + w, h)]
            logs = [special.logsumexp(_sg_log_integrand(x, q, sigma, ti)) + math.log(h) for x in windows]
            log_norm = -math.log(sigma * math.sqrt(2.0 * math.pi))
            peak_a = log_norm + ti * math.log1p(-q) if q < 1.0 else -math.inf
            peak_b = log_norm + (ti * ti - ti) / (2.0 * sigma**2) + ti * math.log(q)
            rest = math.log(ti + 4.0 * w) + ti * math.log(2.0) + max(peak_a, peak_b) - 0.5 * _SG_WINDOW**2
            log_int = float(special.logsumexp([*logs, rest]))
        out[i] = log_int / (ti - 1.0)
    return np.maximum(out, 0.0)


def rdp_from_pure(eps: float, t: np.ndarray) -> np.ndarray:
    """RDP upper bound of a pure eps-DP mechanism: min(eps, t eps^2 / 2) (eps-DP implies (eps^2/2)-zCDP, Bun &
    Steinke 2016 Prop. 3.3; and D_t <= D_inf = eps)."""
    return np.minimum(eps, t * eps * eps / 2.0)


def amplified_epsilon(eps0: float, q: float) -> float:
    """Pure eps of a Poisson-subsampled eps0-DP mechanism, log(1 + q (e^eps0 - 1)) (Balle, Barthe, Gaboardi 2018
    Thm 8; attained by Laplace noise, whose loss reaches eps0 on a set of positive mass). Written as
    eps0 + log(q + (1 - q) e^-eps0) above eps0 = 30, where e^eps0 would overflow."""
    if eps0 <= 30.0:
        return math.log1p(q * math.expm1(eps0))
    return eps0 + math.log(q + (1.0 - q) * math.exp(-eps0))


def rdp_kary_randomized_response(p: float, k: int, t: np.ndarray) -> np.ndarray:
    """Exact replace-one RDP of k-ary RR: outputs x, x' carry (A, B) and (B, A), A = 1 - p + p/k, B = p/k, the other
    k - 2 outputs B each: eps(t) = log(A^t B^(1-t) + B^t A^(1-t) + (k - 2) B) / (t - 1)."""
    la, lb = math.log1p(-p + p / k), math.log(p) - math.log(k)  # p / k may underflow (p = 1e-300, k = 1e18)
    terms = [t * la + (1 - t) * lb, t * lb + (1 - t) * la]
    if k > 2:
        terms.append(np.full_like(t, math.log(k - 2) + lb))
    return np.maximum(special.logsumexp(np.stack(terms), axis=0) / (t - 1.0), 0.0)
