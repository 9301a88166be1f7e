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
* Refined profile from a trade-off equation sigma = f(eps, delta) (Sec. 3, App. B): :func:`refine_profile` finds the
  root eps_i of (1 + e^x) delta~'(x) + e^x (1 - delta~(x)) and returns
  min(delta_i + (1 - delta_i)(e^eps_i - e^eps)_+/(1 + e^eps_i), delta~(eps)).
* Noise reduction through the partial order (Sec. 5.2, App. C): :func:`refine_noise` minimises f(eps0, delta0*(eps0))
  over the (eps0, delta0) that imply the target by Thm 3.1 (Feldman et al.'s sigma = -C log(delta)/eps at
  (0.2, e^-2): 10 C -> 8.0857 C).
* Subsampling (Sec. 5.3, Balle et al. 2020a): :func:`subsample_profile`, delta'(eps') = gamma delta(log(1 + (e^eps' -
  1)/gamma)) under Poisson subsampling (add/remove); it lowers the GDPT near 0 but not its tail.
* Clip and rectify (Thm 4.7): :func:`clip_and_rectify` turns an (eps_h, mu)-head-GDP scalar mechanism into a mu-GDP
  one by clipping to [y-, y+] and adding Laplace((y+ - y-)/eps_h) noise.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
from scipy import optimize, special

from gdpcore import closed_form, kinds
from gdpcore._validation import check_count, check_positive, check_probability, check_real
from gdpcore.closed_form import (  # get_delta_from_epsilon_delta stays importable from here (its former home)
    epsilon_delta_profile,
    get_delta_from_epsilon_delta,
    log_delta_mu,
)
from gdpcore.mechanisms import Mechanism

__all__ = [
    "ClipAndRectify",
    "GdpIdentification",
    "MuBracket",
    "NoiseRefinement",
    "RefinedProfile",
    "bracket_mu",
    "clip_and_rectify",
    "refine_noise",
    "refine_profile",
    "subsample_profile",
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


# -- Sec. 5.3: subsampling ------------------------------------------------------------------------------------------
def _subsampled_epsilon(eps: np.ndarray, gamma: float) -> np.ndarray:
    """log(1 + (e^eps - 1)/gamma), stable for large eps (= eps - log gamma + log1p(-(1 - gamma) e^-eps))."""
    small = eps < 1.0
    with np.errstate(over="ignore"):
        near = np.log1p(np.expm1(np.where(small, eps, 0.0)) / gamma)
    far = eps - math.log(gamma) + np.log1p(-(1.0 - gamma) * np.exp(-np.where(small, 1.0, eps)))
    return np.where(small, near, far)


def subsample_profile(
    profile: Callable[[np.ndarray], np.ndarray], sampling_rate: float, *, log: bool = False
) -> Callable[[np.ndarray], np.ndarray]:
    """The privacy profile of A o S_gamma (Poisson subsampling with rate gamma, add/remove neighbours) from that of A
    (seed 003 Sec. 5.3, after Balle et al. 2020a): delta'(eps') = gamma delta_A(log(1 + (e^eps' - 1)/gamma)).

    An *upper* bound when ``profile`` is one. ``log=True``: ``profile`` is log delta_A and the result is log delta'
    (for :func:`identify_gdp`'s ``log_profile``). The inner eps grows like eps' + log(1/gamma), so the Thm 4.4 tail
    limit - and, for delta_A = delta_mu, sup G = mu - is unchanged: subsampling does not improve mu in the worst case.
    """
    if not callable(profile):
        raise ValueError(f"profile must be a callable delta(eps), got {profile!r}")
    gamma = check_probability("sampling_rate", sampling_rate)

    def sub(eps: np.ndarray) -> np.ndarray:
        e = np.asarray(eps, float)
        inner = _subsampled_epsilon(e, gamma)
        if log:
            return np.asarray(math.log(gamma) + np.asarray(profile(inner), float), float)
        return np.asarray(gamma * np.asarray(profile(inner), float), float)

    return sub


# -- Thm 4.7: clip and rectify --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ClipAndRectify:
    """R o C o A of seed 003 Thm 4.7: clip the scalar output to [lower, upper], add Laplace(``laplace_scale``) with
    laplace_scale = (upper - lower)/eps_h. The result is eps_h-DP (delta = 0 beyond eps_h) and, below eps_h, no worse
    than A (post-processing), so it is ``mu``-GDP where ``mu`` = the certified head bracket's upper end (``bound``
    "upper"; ``head`` is that :class:`MuBracket`)."""

    lower: float
    upper: float
    eps_h: float
    laplace_scale: float
    mu: float
    bound: str
    head: MuBracket

    def profile(self, head_profile: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
        """An upper bound on the profile of R o C o A: the head profile below eps_h, 0 from eps_h on."""

        def prof(eps: np.ndarray) -> np.ndarray:
            e = np.asarray(eps, float)
            return np.where(e >= self.eps_h, 0.0, np.asarray(head_profile(e), float))

        return prof

    def apply(self, values: np.ndarray | float, rng: np.random.Generator) -> np.ndarray:
        """Release ``values`` through R o C: clip to [lower, upper], then add independent Laplace noise."""
        v = np.asarray(values, float)
        if np.isnan(v).any():
            raise ValueError("values must not contain NaN")
        return np.clip(v, self.lower, self.upper) + rng.laplace(0.0, self.laplace_scale, size=v.shape)


def clip_and_rectify(
    head_profile: Callable[[np.ndarray], np.ndarray],
    *,
    lower: float,
    upper: float,
    eps_h: float,
    c: float = 100.0,
    mu_max: float = 10.0,
) -> ClipAndRectify:
    """Seed 003 Thm 4.7: certify the head [0, eps_h] of ``head_profile`` (an upper bound on the profile of a scalar
    mechanism A) with :func:`bracket_mu` and return the clip-and-rectify construction that makes A mu-GDP for the
    bracket's upper end: C(y) = min(max(y, lower), upper), R(z) = z + Laplace((upper - lower)/eps_h). Raises
    ValueError if the head is not GDP below ``mu_max``."""
    lo = check_real("lower", lower)
    hi = check_real("upper", upper)
    if not lo < hi:
        raise ValueError(f"lower must be < upper, got lower={lower!r}, upper={upper!r}")
    eps_h = check_positive("eps_h", eps_h)
    head = bracket_mu(head_profile, eps_h=eps_h, c=c, mu_max=mu_max)
    if head.hit_mu_max:
        raise ValueError(f"the head [0, {eps_h:g}] is not mu-GDP for mu <= mu_max = {mu_max!r}")
    return ClipAndRectify(
        lower=lo, upper=hi, eps_h=eps_h, laplace_scale=(hi - lo) / eps_h, mu=head.upper, bound="upper", head=head
    )


# -- App. B: refined profile from a trade-off equation -------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class RefinedProfile:
    """The refined profile of seed 003 App. B: delta_A(eps) = min(delta_i + (1 - delta_i)(e^eps_i - e^eps)_+ /
    (1 + e^eps_i), delta~(eps)), delta_i = delta~(eps_i). Call it on eps (vectorised)."""

    eps_i: float
    delta_i: float
    naive: Callable[[np.ndarray], np.ndarray] = dataclasses.field(repr=False)

    def __call__(self, eps: np.ndarray | float) -> np.ndarray:
        e = np.asarray(eps, float)
        naive = np.minimum(1.0, np.asarray(self.naive(np.maximum(e, 1e-300)), float))
        return np.minimum(epsilon_delta_profile(self.eps_i, self.delta_i, e), naive)


def _derivative(f: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> np.ndarray:
    h = np.minimum(1e-6 * np.maximum(1.0, np.abs(x)), np.abs(x) / 2.0)
    return (np.asarray(f(x + h), float) - np.asarray(f(x - h), float)) / (2.0 * h)


def refine_profile(
    naive: Callable[[np.ndarray], np.ndarray],
    *,
    derivative: Callable[[np.ndarray], np.ndarray] | None = None,
    eps_max: float = 50.0,
) -> RefinedProfile:
    """Refine the naive profile delta~(eps) of a trade-off equation sigma = f(eps, delta) (seed 003 Sec. 3, App. B).

    delta_A(eps) = inf_{eps0 >= eps} g(eps, eps0), g = (1 - delta~(eps0))(e^eps0 - e^eps)/(1 + e^eps0) + delta~(eps0);
    dg/deps0 has the sign of h(x) = (1 + e^x) delta~'(x) + e^x (1 - delta~(x)) (independent of eps). The root eps_i
    where h turns from negative to positive is found by a scan of (0, ``eps_max``] and Brent's method; below eps_i the
    profile is the Thm 3.1 line through (eps_i, delta~(eps_i)). ``derivative`` is delta~' (central differences if
    omitted). Paper examples: SGD delta~ = exp(-eps^2) -> eps_i = 1.1878489, delta_i = 0.2439029; ICEA
    delta~ = K/eps, K = 4/e^2 -> 1.1566070, 0.4680424 (docs/references.md S003-1). Raises ValueError when h has no
    such sign change (the naive profile is then already tight, or the infimum is at eps0 -> inf).
    """
    if not callable(naive):
        raise ValueError(f"naive must be a callable delta~(eps), got {naive!r}")
    if derivative is not None and not callable(derivative):
        raise ValueError(f"derivative must be a callable delta~'(eps) or None, got {derivative!r}")
    eps_max = check_positive("eps_max", eps_max)
    deriv = derivative if derivative is not None else (lambda x: _derivative(naive, np.asarray(x, float)))

    def h(x: np.ndarray | float) -> np.ndarray:
        xa = np.asarray(x, float)
        d = np.asarray(naive(xa), float)
        # h / e^x: the same sign, no overflow
        return np.asarray((1.0 + np.exp(-xa)) * np.asarray(deriv(xa), float) + (1.0 - d), float)

    grid = np.geomspace(1e-6, eps_max, 20_001)
    hv = h(grid)
    turn = np.flatnonzero((hv[:-1] < 0) & (hv[1:] >= 0))
    if turn.size == 0:
        raise ValueError(
            f"h(x) = (1 + e^x) delta~'(x) + e^x (1 - delta~(x)) has no root on (0, {eps_max:g}] where it turns from "
            "negative to positive: the naive profile needs no refinement there"
        )
    i = int(turn[0])
    root = float(optimize.brentq(lambda x: float(h(x)), grid[i], grid[i + 1], xtol=1e-14, rtol=1e-14))
    d_i = float(np.asarray(naive(np.asarray(root)), float))
    if not 0.0 <= d_i < 1.0:
        raise ValueError(f"delta~(eps_i) must be in [0, 1), got {d_i!r} at eps_i = {root!r}")
    return RefinedProfile(eps_i=root, delta_i=d_i, naive=naive)


# -- Sec. 5.2 / App. C: noise reduction through the partial order ---------------------------------------------------
@dataclasses.dataclass(frozen=True)
class NoiseRefinement:
    """sigma- = min over (eps0, delta0) implying (epsilon, delta) (Thm 3.1) of the trade-off f(eps0, delta0), against
    the naive f(epsilon, delta). Any (eps0, delta0)-DP mechanism is (epsilon, delta)-DP, so ``noise`` is as private
    as ``naive_noise`` for the target (``bound`` "upper": enough noise for it)."""

    noise: float
    naive_noise: float
    epsilon0: float
    delta0: float
    epsilon: float
    delta: float
    bound: str = "upper"


def _admissible_delta0(eps0: np.ndarray, epsilon: float, delta: float) -> np.ndarray:
    """The largest delta0 with (eps0, delta0) => (epsilon, delta) by Thm 3.1, eps0 >= epsilon (Cor. 3.1)."""
    return ((1.0 + np.exp(eps0)) * delta - np.exp(eps0) + math.exp(epsilon)) / (1.0 + math.exp(epsilon))


def refine_noise(
    tradeoff: Callable[[float, float], float], *, epsilon: float, delta: float, n_grid: int = 4001
) -> NoiseRefinement:
    """Seed 003 Sec. 5.2 / App. C: sigma- = inf_{eps0 >= eps} f(eps0, delta0*(eps0)) with delta0*(eps0) =
    ((1 + e^eps0) delta - e^eps0 + e^eps)/(1 + e^eps), the largest source delta that implies the target (Thm 3.1).

    ``tradeoff(eps, delta)`` returns the noise that gives (eps, delta)-DP (e.g. Feldman et al. 2018's
    -C log(delta)/eps). A grid over the admissible eps0 (delta0* > 0) then a bounded Brent refinement. Paper example:
    f = -C log(delta)/eps at (0.2, e^-2): 10 C -> 8.0857179 C at (0.33389234, 0.06722169) (S003-4)."""
    if not callable(tradeoff):
        raise ValueError(f"tradeoff must be a callable sigma(eps, delta), got {tradeoff!r}")
    eps = check_positive("epsilon", epsilon)
    d = check_probability("delta", delta, high_open=True)
    n = check_count("n_grid", n_grid, minimum=3)
    eps0_max = math.log((d + math.exp(eps)) / (1.0 - d))  # delta0*(eps0) > 0 below it

    def cost(e0: float) -> float:
        d0 = float(_admissible_delta0(np.asarray(e0), eps, d))
        if not d0 > 0.0:
            return math.inf
        out = float(tradeoff(float(e0), d0))
        return out if math.isfinite(out) else math.inf

    naive = float(tradeoff(eps, d))
    grid = eps + (eps0_max - eps) * np.linspace(0.0, 1.0, n)[:-1]
    vals = np.array([cost(float(x)) for x in grid])
    j = int(np.argmin(vals))
    lo, hi = grid[max(j - 1, 0)], grid[min(j + 1, n - 2)] if j + 1 < n - 1 else eps0_max
    res = optimize.minimize_scalar(cost, bounds=(float(lo), float(hi)), method="bounded", options={"xatol": 1e-12})
    e0 = float(res.x) if float(res.fun) <= vals[j] else float(grid[j])
    best = min(float(res.fun), float(vals[j]))
    if not math.isfinite(best):
        raise ValueError(f"tradeoff returned no finite noise for any admissible (eps0, delta0), e.g. at eps0={eps!r}")
    if naive <= best:
        e0, best = eps, naive
    return NoiseRefinement(
        noise=best,
        naive_noise=naive,
        epsilon0=e0,
        delta0=float(_admissible_delta0(np.asarray(e0), eps, d)),
        epsilon=eps,
        delta=d,
    )
