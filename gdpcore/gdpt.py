"""Gaussian DP Transformation (seed 003): GDP identification, certified mu brackets, eps-DP => mu-GDP, and the exact
(eps0, delta0) => (eps, delta) implication.

* GDPT (Def. 4.1): G_f(eps) = mu_GDP(eps, f(eps)), where mu_GDP(x, y) solves delta_mu(x) = y (delta_mu: Dong et al.
  Cor. 2.13). The tightest GDP parameter is mu* = sup_{eps >= 0} G_{delta_A}(eps) (Cor. 4.1).
* Identification (Thm 4.3 / 4.4, Alg. 4): A is GDP iff delta_A(0) < 1 and lim eps / sqrt(-2 log delta_A(eps)) < inf.
  Numerically this is an *estimate* (:func:`identify_gdp`); for mechanism descriptions the verdict is analytic
  (:func:`get_gdp_upper_bound`).
* Head bracket (Thm 4.6, App. D Alg. 2 corrected and Alg. 3, docs/references.md S003-5): with D <= 1/(sqrt(8 pi) c) and bisection
  tolerance 1/(4c), the *lower* end uses exact point values G(x_i) = mu_GDP(x_i, delta(x_i)) (bisection lower ends) and
  the *upper* end the staircase G+(x_i) = mu_GDP(x_{i+1}, delta(x_i)) (bisection upper ends). By Thm 4.5
  (0 <= d mu_GDP / d eps <= sqrt(2 pi)/2), U - L <= (sqrt(2 pi)/2) D + 2/(4c) <= 3/(4c) < 1/c. The paper's printed
  Alg. 2 swaps the two staircases, starts mu+ at mu_max and offsets the grid by eps_h; those bugs are not copied.
  Alg. 3 visits the grid in random order and bisects only when the current bound would be beaten (expected O(log n)
  bisections). The bracket certifies the head [0, eps_h]; the tail needs its own argument (``tail_residual`` reports
  delta_U(eps_h), the largest delta the tail may still have).
* Thm 3.1: (eps0, delta0)-DP implies (eps, delta)-DP iff delta >= delta0 + (1 - delta0)(e^eps0 - e^eps)_+/(1 + e^eps0).
* Thm 5.1 / Prop 6.1: every eps-DP mechanism is mu-GDP with mu = -2 Phi^{-1}(1/(1 + e^eps))
  (:func:`gdpcore.closed_form.get_mu_from_pure_dp`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
from scipy import special

from gdpcore import closed_form, kinds
from gdpcore._validation import check_count, check_positive, check_probability, check_real
from gdpcore.closed_form import (  # get_delta_from_epsilon_delta stays importable from here (its former home)
    get_delta_from_epsilon_delta,
    log_delta_mu,
)
from gdpcore.mechanisms import Mechanism

__all__ = [
    "GdpIdentification",
    "MuBracket",
    "bracket_mu",
    "get_delta_from_epsilon_delta",
    "get_gdp_upper_bound",
    "get_mu_from_gdpt",
    "gdpt",
    "identify_gdp",
    "implies",
]

_SQRT_2PI = math.sqrt(2.0 * math.pi)


def _bisect(x: np.ndarray, y: np.ndarray, mu_max: float, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """Seed 003 Alg. 1, vectorised: lo <= mu_GDP(x, y) <= hi with hi - lo <= tol; hi = inf if above mu_max."""
    x = np.asarray(x, float)
    y = np.asarray(y, float)
    lo = np.zeros(np.broadcast(x, y).shape)
    hi = np.full(lo.shape, float(mu_max))
    with np.errstate(divide="ignore"):
        log_y = np.log(y)
    while np.any(hi - lo > tol):
        mid = 0.5 * (lo + hi)
        above = log_delta_mu(mid, x) > log_y  # delta_mid(x) > y  =>  mu_GDP < mid
        hi = np.where(above, mid, hi)
        lo = np.where(above, lo, mid)
    over = log_delta_mu(np.full(lo.shape, float(mu_max)), x) < log_y
    hi = np.where(over | (y >= 1), np.inf, hi)
    lo = np.where(y >= 1, np.inf, lo)
    zero = y <= 0
    return np.where(zero, 0.0, lo), np.where(zero, 0.0, hi)


def get_mu_from_gdpt(*, epsilon: np.ndarray | float, delta: np.ndarray | float) -> np.ndarray | float:
    """mu_GDP(eps, delta): the mu with delta_mu(eps) = delta (seed 003 Def. 4.1); 0 for delta <= 0, inf for
    delta >= 1, 2 Phi^{-1}((1 + delta)/2) at eps = 0. Exact (root-found to 1e-14)."""
    e = np.asarray(epsilon, float)
    d = np.asarray(delta, float)
    if np.isnan(e).any() or (e < 0).any():
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    if np.isnan(d).any() or (d < 0).any():
        raise ValueError(f"delta must be >= 0, got {delta!r}")
    e, d = np.broadcast_arrays(e, d)
    out = np.empty(e.shape)
    for idx in np.ndindex(e.shape):
        ei, di = float(e[idx]), float(d[idx])
        if di <= 0:
            out[idx] = 0.0
        elif di >= 1:
            out[idx] = math.inf
        elif ei == 0:
            out[idx] = 2.0 * special.ndtri((1.0 + di) / 2.0)
        else:
            out[idx] = closed_form.get_mu_from_epsilon_delta(epsilon=ei, delta=di)
    return float(out) if out.ndim == 0 else out


def gdpt(profile: Callable[[np.ndarray], np.ndarray], epsilon: np.ndarray | float) -> np.ndarray | float:
    """G_f(eps) = mu_GDP(eps, f(eps)) for a profile callable f (seed 003 Def. 4.1)."""
    if not callable(profile):
        raise ValueError(f"profile must be a callable delta(eps), got {profile!r}")
    e = np.asarray(epsilon, float)
    return get_mu_from_gdpt(epsilon=e, delta=np.clip(np.asarray(profile(e), float), 0.0, 1.0))


@dataclasses.dataclass(frozen=True)
class MuBracket:
    """Certified bracket of sup_{eps in [0, eps_h]} G_{delta_A}(eps) (seed 003 Thm 4.6, corrected Alg. 2'/3).

    ``lower`` is a lower bound on mu* (needs exact or lower-bound profile values); ``upper`` makes the mechanism
    (eps_h, upper)-head GDP (needs upper-bound profile values); ``upper - lower <= 1/c``. ``upper`` is inf if
    mu_GDP exceeded ``mu_max`` somewhere on the head (``hit_mu_max``). ``tail_residual`` = delta_upper(eps_h).
    """

    lower: float
    upper: float
    eps_h: float
    c: float
    n: int
    step: float
    n_bisections: int
    hit_mu_max: bool
    tail_residual: float
    method: str


def bracket_mu(
    profile: Callable[[np.ndarray], np.ndarray],
    *,
    eps_h: float,
    c: float,
    mu_max: float = 10.0,
    mu_t: float | None = None,
    method: str = "shuffled",
    seed: int = 0,
) -> MuBracket:
    """Bracket mu* on the head [0, eps_h] with guaranteed margin 1/c (seed 003 Thm 4.6; corrected Alg. 2' / Alg. 3).

    Args:
        profile: vectorised, non-increasing delta_A(eps) on [0, inf).
        eps_h: head length (the paper suggests 100 or 200 for a negligible tail).
        c: reciprocal of the margin: ``upper - lower <= 1/c``.
        mu_max: search ceiling (the paper's 10).
        mu_t: an optional known lower bound on mu* (e.g. the Thm 4.4 tail limit).
        method: ``"shuffled"`` (Alg. 3: random order, bisect only when a record can be beaten) or ``"plain"``
            (Alg. 2': every grid point bisected, vectorised).
    """
    if not callable(profile):
        raise ValueError(f"profile must be a callable delta(eps), got {profile!r}")
    eps_h = check_positive("eps_h", eps_h)
    c = check_positive("c", c)
    mu_max = check_positive("mu_max", mu_max)
    if method not in ("shuffled", "plain"):
        raise ValueError(f"method must be one of 'shuffled', 'plain', got {method!r}")
    n = int(math.ceil(math.sqrt(8.0 * math.pi) * c * eps_h)) + 1
    step = eps_h / (n - 1)
    tol = 1.0 / (4.0 * c)
    x = np.arange(n + 1) * step  # x_0 .. x_n (x_{n-1} = eps_h)
    d = np.clip(np.asarray(profile(x), float), 0.0, 1.0)
    if np.any(np.diff(d) > 1e-12):
        raise ValueError("profile must be non-increasing in eps")
    lower = 0.0 if mu_t is None else check_real("mu_t", mu_t)
    n_bis = 0
    if method == "plain":
        lo_pts, _ = _bisect(x[:n], d[:n], mu_max, tol)  # exact point values G(x_i), i = 0..n-1
        _, hi_st = _bisect(x[1:n], d[: n - 1], mu_max, tol)  # staircase G+(x_i) on cells [x_i, x_{i+1}]
        lower = max(lower, float(lo_pts.max()))
        upper = float(hi_st.max()) if hi_st.size else lower
        n_bis = 2 * n - 1
    else:
        rng = np.random.default_rng(seed)
        upper = 0.0
        for i in rng.permutation(n):
            xi, di = x[i], d[i]
            # Lower end: bisect G(x_i) only if delta_L(x_i) < delta(x_i), i.e. G(x_i) > L.
            if di > 0 and (lower <= 0 or log_delta_mu(lower, xi) < math.log(di)):
                lo_i, _ = _bisect(np.array([xi]), np.array([di]), mu_max, tol)
                lower = max(lower, float(lo_i[0]))
                n_bis += 1
            if i < n - 1:
                xn = x[i + 1]
                # Upper end: bisect G+(x_i) = mu_GDP(x_{i+1}, delta(x_i)) only if it can exceed U.
                if di > 0 and (upper <= 0 or log_delta_mu(upper, xn) < math.log(di)):
                    _, hi_i = _bisect(np.array([xn]), np.array([di]), mu_max, tol)
                    upper = max(upper, float(hi_i[0]))
                    n_bis += 1
        upper = max(upper, lower) if math.isfinite(upper) else upper
    upper = max(upper, lower)
    tail = float(np.exp(log_delta_mu(upper, eps_h))) if 0 < upper < math.inf else (0.0 if upper == 0 else 1.0)
    return MuBracket(
        lower=float(lower),
        upper=float(upper),
        eps_h=eps_h,
        c=c,
        n=n,
        step=step,
        n_bisections=n_bis,
        hit_mu_max=not math.isfinite(upper),
        tail_residual=tail,
        method=method,
    )


@dataclasses.dataclass(frozen=True)
class GdpIdentification:
    """Seed 003 Alg. 4: is the mechanism GDP for some finite mu? ``tail_limit`` estimates
    lim eps / sqrt(-2 log delta(eps)) (Thm 4.4), a lower bound on mu* when finite. ``bound`` = "estimate"."""

    is_gdp: bool | None
    tail_limit: float
    delta_at_zero: float
    bound: str = "estimate"


def identify_gdp(
    profile: Callable[[np.ndarray], np.ndarray],
    *,
    log_profile: Callable[[np.ndarray], np.ndarray] | None = None,
    max_power: int = 12,
    growth: float = 1.5,
) -> GdpIdentification:
    """GDP identification test (seed 003 Thm 4.3/4.4, Alg. 4), numerically on eps = 2^k, k = 0..max_power.

    Not GDP if delta(0) >= 1 (G(0) = inf) or if r(eps) = eps / sqrt(-2 log delta(eps)) keeps growing (the last value
    exceeds ``growth`` times the value at half the log-range). Otherwise GDP with tail limit ~ r at the largest eps
    with delta > 0 (0 if delta vanishes). A numerical limit is evidence, not proof (the paper's caveat): the label
    is ``"estimate"``; use :func:`get_gdp_upper_bound` for mechanism descriptions. ``log_profile`` (log delta) avoids
    the underflow of Gaussian-type tails (delta ~ e^{-eps^2} is 0 in floating point beyond eps ~ 27, which would
    read as a tail limit of 0).
    """
    if not callable(profile):
        raise ValueError(f"profile must be a callable delta(eps), got {profile!r}")
    max_power = check_count("max_power", max_power, minimum=2)
    d0 = float(np.asarray(profile(np.array([0.0])), float)[0])
    if d0 >= 1.0:
        return GdpIdentification(is_gdp=False, tail_limit=math.inf, delta_at_zero=d0)
    e = 2.0 ** np.arange(max_power + 1)
    if log_profile is not None:
        if not callable(log_profile):
            raise ValueError(f"log_profile must be a callable log delta(eps), got {log_profile!r}")
        log_d = np.minimum(np.asarray(log_profile(e), float), 0.0)
    else:
        with np.errstate(divide="ignore"):
            log_d = np.log(np.clip(np.asarray(profile(e), float), 0.0, 1.0))
    pos = log_d > -np.inf
    if not pos.any():
        return GdpIdentification(is_gdp=True, tail_limit=0.0, delta_at_zero=d0)
    if not pos[-1]:
        return GdpIdentification(is_gdp=True, tail_limit=0.0, delta_at_zero=d0)
    with np.errstate(divide="ignore"):
        r = e / np.sqrt(-2.0 * log_d)
    mid = r[max_power // 2]
    if r[-1] > growth * mid and np.all(np.diff(r[max_power // 2 :]) > 0):
        return GdpIdentification(is_gdp=False, tail_limit=math.inf, delta_at_zero=d0)
    return GdpIdentification(is_gdp=True, tail_limit=float(r[-1]), delta_at_zero=d0)


def get_gdp_upper_bound(mechanism: Mechanism) -> tuple[float, str]:
    """Analytic identification for mechanism descriptions: a finite mu with the mechanism mu-GDP, and its label.

    Gaussian: exact 1/sigma. eps-DP mechanisms (Laplace, randomized response): Thm 5.1, -2 Phi^{-1}(1/(1 + e^eps))
    ("upper"; exact for RR). Subsampled Gaussian: sqrt(T)/sigma (subsampling never hurts; seed 003 Sec. 5.3 shows it
    does not improve the worst-case tail), "upper". Compositions: sqrt(sum mu_i^2) (Dong et al. Cor. 3.3), "upper".
    Discrete Gaussian: not covered analytically here (raises :class:`gdpcore.kinds.UnsupportedMechanismError`, a
    ValueError). Declared per kind in :mod:`gdpcore.kinds`.
    """
    mu, label = kinds.evaluate(mechanism, "gdp_upper_bound")
    return float(mu), str(label)


def implies(*, epsilon0: float, delta0: float, epsilon: float, delta: float) -> bool:
    """Seed 003 Thm 3.1 (exact): does (eps0, delta0)-DP imply (eps, delta)-DP?"""
    eps = check_real("epsilon", epsilon)
    if eps < 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    d = check_probability("delta", delta, low_open=False)
    return bool(d >= get_delta_from_epsilon_delta(epsilon0=epsilon0, delta0=delta0, at_epsilon=eps) - 1e-15)
