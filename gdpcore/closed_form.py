"""Closed forms: Gaussian DP, pure DP, randomized response and Laplace.

Used two ways: as exact fast paths (a composition of plain Gaussians needs no accountant, seed 000 Sec. 5) and as
test oracles for the numerical accountant. Naming follows ``get_<metric>_from_<representation>``.

Numerics: the GDP profile delta_mu(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) (Dong et al. Cor. 2.13)
cancels catastrophically for large eps; it is evaluated in log space with ``log_ndtr`` so that values down to
1e-300 keep full relative precision.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import optimize, special, stats

from gdpcore._validation import check_open_unit_array, check_positive, check_probability, check_real

__all__ = [
    "get_advantage_from_gdp",
    "get_beta_from_epsilon_delta",
    "get_beta_from_gdp",
    "get_beta_from_laplace",
    "get_beta_from_randomized_response",
    "epsilon_delta_profile",
    "get_delta_from_epsilon_delta",
    "get_delta_from_gdp",
    "get_delta_from_laplace",
    "get_delta_from_randomized_response",
    "cks_log_delta",
    "get_delta_from_rdp",
    "get_epsilon_from_gdp",
    "get_log_delta_from_gdp",
    "get_mu_from_epsilon_delta",
    "get_mu_from_pure_dp",
    "log_delta_mu",
]


def _log_sub_exp(log_a: np.ndarray, log_b: np.ndarray) -> np.ndarray:
    """log(e^a - e^b) for a >= b, elementwise; -inf where a == b."""
    with np.errstate(divide="ignore", invalid="ignore"):
        diff = np.minimum(log_b - log_a, 0.0)
        return np.where(np.isneginf(log_a), -np.inf, log_a + np.log1p(-np.exp(diff)))


def log_delta_mu(mu: np.ndarray | float, epsilon: np.ndarray | float) -> np.ndarray:
    """log delta_mu(eps) without argument checks, broadcast over ``mu`` (> 0) and ``epsilon``: the one formula behind
    :func:`get_log_delta_from_gdp`, for inner loops that vary mu (the GDPT bisection, seed 003 Alg. 0/1)."""
    mu = np.asarray(mu, dtype=float)
    eps = np.asarray(epsilon, dtype=float)
    ratio = -eps / mu  # shared by both terms (the same float operations as writing it twice)
    return _log_sub_exp(special.log_ndtr(ratio + mu / 2), eps + special.log_ndtr(ratio - mu / 2))


def get_log_delta_from_gdp(*, mu: float, epsilon: np.ndarray | float) -> np.ndarray:
    """log delta_mu(eps) of mu-GDP, stable for large eps. eps may be any real (negative eps is fine)."""
    mu = check_positive("mu", mu)
    eps = np.asarray(epsilon, dtype=float)
    if np.isnan(eps).any():
        raise ValueError(f"epsilon must not contain NaN, got {epsilon!r}")
    return log_delta_mu(mu, eps)


def get_delta_from_gdp(*, mu: float, epsilon: np.ndarray | float) -> np.ndarray | float:
    """delta_mu(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)  (Dong et al. 2022, Cor. 2.13)."""
    out = np.exp(get_log_delta_from_gdp(mu=mu, epsilon=epsilon))
    return float(out) if np.ndim(epsilon) == 0 else out


def get_epsilon_from_gdp(*, mu: float, delta: np.ndarray | float) -> np.ndarray | float:
    """Smallest eps >= 0 with delta_mu(eps) <= delta; 0 where delta >= delta_mu(0) (the advantage)."""
    mu = check_positive("mu", mu)
    deltas = check_open_unit_array("delta", delta)
    log_d = np.log(deltas)
    log_adv = float(get_log_delta_from_gdp(mu=mu, epsilon=0.0))
    out = np.zeros_like(log_d)
    for idx, target in np.ndenumerate(log_d):
        if target >= log_adv:
            continue
        hi = 1.0
        while float(get_log_delta_from_gdp(mu=mu, epsilon=hi)) > target:
            hi *= 2.0
        out[idx] = optimize.brentq(
            lambda e, t=target: float(get_log_delta_from_gdp(mu=mu, epsilon=e)) - t, 0.0, hi, xtol=1e-14, rtol=1e-14
        )
    return float(out) if np.ndim(delta) == 0 else out


def get_beta_from_gdp(*, mu: float, alpha: np.ndarray | float) -> np.ndarray | float:
    """f_mu(alpha) = Phi(Phi^{-1}(1 - alpha) - mu)  (seed 000 Eq. 4)."""
    mu = check_real("mu", mu)
    if mu < 0:
        raise ValueError(f"mu must be >= 0, got {mu!r}")
    alphas = check_open_unit_array("alpha", alpha, allow_zero=True, allow_one=True)
    out = special.ndtr(special.ndtri(1.0 - alphas) - mu) if math.isfinite(mu) else np.where(alphas > 0, 0.0, 1.0)
    # ndtri(1 - alpha) loses the tail for alpha < 1e-16; isf is exact there.
    small = alphas < 1e-8
    if small.any():
        out = np.where(small, stats.norm.cdf(stats.norm.isf(np.where(small, alphas, 0.5)) - mu), out)
    return float(out) if np.ndim(alpha) == 0 else out


def get_advantage_from_gdp(*, mu: float) -> float:
    """Maximum TPR - FPR of mu-GDP: 2 Phi(mu/2) - 1 (seed 000 Eqs. 30-31)."""
    mu = check_real("mu", mu)
    if mu < 0:
        raise ValueError(f"mu must be >= 0, got {mu!r}")
    return float(special.erf(mu / (2.0 * math.sqrt(2.0)))) if math.isfinite(mu) else 1.0


def get_mu_from_epsilon_delta(*, epsilon: float, delta: float) -> float:
    """The mu of the Gaussian mechanism calibrated to (eps, delta): solves delta_mu(eps) = delta (seed 000 Table 3)."""
    eps = check_real("epsilon", epsilon)
    if eps < 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    delta = check_probability("delta", delta, high_open=True)
    log_delta = math.log(delta)

    def gap(mu: float) -> float:
        return float(get_log_delta_from_gdp(mu=mu, epsilon=eps)) - log_delta

    lo, hi = 1e-8, 1.0
    while gap(hi) < 0:
        hi *= 2.0
    return float(optimize.brentq(gap, lo, hi, xtol=1e-14, rtol=1e-14))


def get_mu_from_pure_dp(*, epsilon: float) -> float:
    """Every eps-DP mechanism is mu-GDP with mu = -2 Phi^{-1}(1/(e^eps + 1))  (seed 000 Prop. 6.1, Eqs. 32-34)."""
    eps = check_positive("epsilon", epsilon)
    return float(-2.0 * special.ndtri(special.expit(-eps)))


def get_beta_from_epsilon_delta(*, epsilon: float, delta: float, alpha: np.ndarray | float) -> np.ndarray | float:
    """f_{eps,delta}(alpha) = max{0, 1 - delta - e^eps alpha, e^-eps (1 - delta - alpha)}  (seed 000 Eq. 2)."""
    eps = check_real("epsilon", epsilon)
    if eps < 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    delta = check_probability("delta", delta, low_open=False, high_open=True)
    a = check_open_unit_array("alpha", alpha, allow_zero=True, allow_one=True)
    out = np.maximum.reduce([np.zeros_like(a), 1 - delta - math.exp(eps) * a, math.exp(-eps) * (1 - delta - a)])
    return float(out) if np.ndim(alpha) == 0 else out


def epsilon_delta_profile(epsilon0: float, delta0: float, epsilon: np.ndarray | float) -> np.ndarray:
    """The tight profile of an (eps0, delta0)-DP statement without argument checks (``epsilon0 = inf`` gives 1):
    delta(eps) = delta0 + (1 - delta0)(e^eps0 - e^eps)_+ / (1 + e^eps0), eps >= 0 (seed 003 Thm 3.1 / Cor. 3.2)."""
    e = np.asarray(epsilon, dtype=float)
    if math.isinf(epsilon0):
        return np.ones_like(e)
    c = math.exp(epsilon0)
    with np.errstate(over="ignore"):
        return delta0 + (1.0 - delta0) * np.clip(c - np.exp(np.minimum(e, epsilon0)), 0.0, None) / (1.0 + c)


def get_delta_from_epsilon_delta(
    *, epsilon0: float, delta0: float, at_epsilon: np.ndarray | float
) -> np.ndarray | float:
    """Tight profile implied by (eps0, delta0)-DP (seed 003 Cor. 3.2, exact):
    delta(eps) = delta0 + (1 - delta0)(e^eps0 - e^eps)_+ / (1 + e^eps0), eps >= 0; the profile form of
    :func:`get_beta_from_epsilon_delta`."""
    e0 = check_real("epsilon0", epsilon0)
    if e0 < 0:
        raise ValueError(f"epsilon0 must be >= 0, got {epsilon0!r}")
    d0 = check_probability("delta0", delta0, low_open=False, high_open=True)
    e = np.asarray(at_epsilon, float)
    if np.isnan(e).any() or (e < 0).any():
        raise ValueError(f"at_epsilon must be >= 0, got {at_epsilon!r}")
    out = epsilon_delta_profile(e0, d0, e)
    return float(out) if out.ndim == 0 else out


def get_beta_from_randomized_response(*, epsilon: float, alpha: np.ndarray | float) -> np.ndarray | float:
    """Binary randomized response has trade-off exactly f_{eps,0}."""
    return get_beta_from_epsilon_delta(epsilon=check_positive("epsilon", epsilon), delta=0.0, alpha=alpha)


def get_delta_from_randomized_response(*, epsilon: float, at_epsilon: np.ndarray | float) -> np.ndarray | float:
    """Profile of RR_eps: (e^eps - e^eps') / (1 + e^eps) for 0 <= eps' <= eps, 0 beyond (symmetric)."""
    eps = check_positive("epsilon", epsilon)
    e = np.abs(np.asarray(at_epsilon, dtype=float))
    out = np.where(e < eps, (math.exp(eps) - np.exp(np.minimum(e, eps))) / (1 + math.exp(eps)), 0.0)
    neg = np.asarray(at_epsilon, dtype=float) < 0
    out = np.where(neg, 1 - np.exp(-e) + np.exp(-e) * out, out)  # delta(-e) = 1 - e^-e + e^-e delta(e)
    return float(out) if np.ndim(at_epsilon) == 0 else out


def get_beta_from_laplace(*, scale: float, alpha: np.ndarray | float, sensitivity: float = 1.0) -> np.ndarray | float:
    """Trade-off of the Laplace mechanism with eps = sensitivity/scale (Dong et al. 2022; seed 000 Sec. 2.4)."""
    eps = check_positive("sensitivity", sensitivity) / check_positive("scale", scale)
    a = check_open_unit_array("alpha", alpha, allow_zero=True, allow_one=True)
    with np.errstate(divide="ignore"):
        mid = math.exp(-eps) / (4 * np.where(a > 0, a, 1.0))
    out = np.where(a < math.exp(-eps) / 2, 1 - math.exp(eps) * a, np.where(a <= 0.5, mid, math.exp(-eps) * (1 - a)))
    return float(out) if np.ndim(alpha) == 0 else out


def get_delta_from_laplace(
    *, scale: float, at_epsilon: np.ndarray | float, sensitivity: float = 1.0
) -> np.ndarray | float:
    """Profile of Laplace: 1 - exp((eps' - eps)/2) for 0 <= eps' <= eps, 0 beyond."""
    eps = check_positive("sensitivity", sensitivity) / check_positive("scale", scale)
    e = np.asarray(at_epsilon, dtype=float)
    if (e < 0).any():
        raise ValueError(f"at_epsilon must be >= 0, got {at_epsilon!r}")
    out = np.where(e < eps, -np.expm1((np.minimum(e, eps) - eps) / 2), 0.0)
    return float(out) if np.ndim(at_epsilon) == 0 else out


def cks_log_delta(t: np.ndarray | float, rdp: np.ndarray | float, eps: np.ndarray | float) -> np.ndarray:
    """log delta(eps) <= (t - 1)(rdp_t - eps + log(1 - 1/t)) - log t for one order t > 1 with RDP rdp_t (Canonne,
    Kamath, Steinke 2020 Prop. 12 v4), elementwise with broadcasting."""
    t = np.asarray(t, dtype=float)
    return (t - 1.0) * (np.asarray(rdp) - np.asarray(eps) + np.log1p(-1.0 / t)) - np.log(t)


def get_delta_from_rdp(
    *,
    orders: Sequence[float] | np.ndarray,
    rdp: Sequence[float] | np.ndarray,
    epsilon: np.ndarray | float,
    total_variation: bool = False,
) -> np.ndarray | float:
    """delta(eps) = min_t min(1, exp((t-1)(eps_t - eps + log(1 - 1/t)) - log t)): the RDP curve's implied profile
    (Canonne, Kamath, Steinke 2020 Prop. 12 v4; seed 000 App. C.2 - the RDP representation whose regret seed 000
    Fig. 1(c) reports). ``total_variation=True`` also takes the total-variation bound delta(eps) <= TV <=
    sqrt(1 - exp(-KL)) (Bretagnolle-Huber; KL = D_1 <= D_t for every order t >= 1): the two bounds dp_accounting's
    RDP accountant takes the minimum of (rdp_privacy_accountant.compute_delta); it only matters at large delta. An
    upper bound on the mechanism's profile for every order grid either way; vectorised over eps."""
    try:
        t = np.asarray(orders, dtype=float).ravel()
    except (TypeError, ValueError):
        raise ValueError(f"orders must be an array of numbers > 1, got {orders!r}") from None
    if t.size == 0 or not np.isfinite(t).all() or (t <= 1).any():
        raise ValueError(f"orders must be finite and > 1, got {orders!r}")
    r = np.asarray(rdp, dtype=float)
    if r.shape != t.shape:
        raise ValueError(f"rdp must have one value per order ({t.size}), got shape {r.shape}")
    if (r < 0).any() or np.isnan(r).any():
        raise ValueError(f"rdp must be >= 0, got {r[(r < 0) | np.isnan(r)][0]!r}")
    e = np.asarray(epsilon, dtype=float)
    ee = np.atleast_1d(e)
    out = np.empty(ee.shape)
    chunk = max(1, 2_000_000 // t.size)
    flat = ee.ravel()
    res = out.ravel()
    for s in range(0, flat.size, chunk):
        block = flat[s : s + chunk, None]
        logd = cks_log_delta(t, r, block)
        res[s : s + chunk] = np.exp(np.minimum(logd.min(axis=1), 0.0))
    if total_variation:
        with np.errstate(divide="ignore"):  # an order with RDP 0: TV 0
            res = np.minimum(res, float(np.sqrt(-np.expm1(-r.min()))))
    out = res.reshape(ee.shape)
    return float(out[0]) if e.ndim == 0 else out
