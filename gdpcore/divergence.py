"""Comparing two mechanisms beyond one calibration point: the Delta-divergence, Bayes risk and Blackwell order
(seed 002, Kaissis et al. ICML 2024).

Delta(M1 || M2) = inf{kappa >= 0 : f1(alpha + kappa) - kappa <= f2(alpha) for all alpha}  (Def. 1) is the worst-case
regret, in the adversary's minimum Bayes error, of using M2 instead of M1. Three equivalent forms (Thm 2 / Cor. 1):

* trade-off:  the definition above (bisection on kappa, :func:`get_delta_divergence` with ``method="tradeoff"``);
* profile:    max(0, sup_eps (delta2(eps) - delta1(eps)) / (1 + e^eps))  (default; certified bracket, eps >= 0 is
  enough for the symmetric curves used here);
* Bayes risk: max_pi (R1_min(pi) - R2_min(pi)) with R_min(pi) = min_alpha pi alpha + (1 - pi) f(alpha)  (Eq. 2, Cor. 1).

Weighted variants (Sec. 5): Delta^Psi = max_pi Psi(pi) (R1(pi) - R2(pi)) with the Jeffreys prior Psi = Beta(1/2, 1/2)
(``weight="beta"``) or the U-quadratic density 12 (pi - 1/2)^2 on [0, 1] (``weight="uquadratic"``).
``symmetric=True`` gives max(Delta(M1||M2), Delta(M2||M1)) (Eq. 5), a metric (Cor. 2).

Mechanisms are accounted with :func:`gdpcore.analyze` (PLD, pessimistic side) unless they are exactly GDP. A
divergence computed from accountant curves is an ``"estimate"`` (both curves are pessimistic approximations, so the
error can go either way, bounded by the accountant's discretisation); from two closed forms it is ``"exact"`` (to the
certified bracket). Both mechanisms must use the same neighbouring relation.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from scipy import special

from gdpcore._validation import check_choice, check_open_unit_array, check_positive
from gdpcore.mechanisms import Mechanism
from gdpcore.report import PrivacyReport, analyze
from gdpcore.representations import _TAIL_EPS, certified_sup, mechanism_profile

__all__ = [
    "BLACKWELL_TOL",
    "WEIGHTS",
    "DivergenceResult",
    "DominanceResult",
    "blackwell_verdict",
    "delta_divergence",
    "get_bayes_risk",
    "get_delta_divergence",
    "get_extremal_divergences",
    "is_at_least_as_private",
]

WEIGHTS: tuple[str | None, ...] = (None, "beta", "uquadratic")


@dataclasses.dataclass(frozen=True)
class DivergenceResult:
    """Delta(M1 || M2) (or its symmetrised / weighted variant) with its bracket and label."""

    value: float
    lower: float
    upper: float
    bound: str
    method: str
    weight: str | None
    symmetric: bool
    argmax_prior: float  # the most exposed adversary prior pi (seed 002 A3); nan if not tracked


@dataclasses.dataclass(frozen=True)
class DominanceResult:
    """Is M1 uniformly at least as private as M2 (f1 >= f2 everywhere, Thm 1)? Decided from Delta(M2 || M1)."""

    at_least_as_private: bool | None  # None: undecided within the accountant's resolution
    divergence_upper: float  # upper end of the Delta(M2 || M1) bracket
    divergence_lower: float
    tolerance: float
    bound: str


def _as_report(m: Any, name: str, discretization: float | None) -> PrivacyReport:
    if isinstance(m, PrivacyReport):
        return m
    if isinstance(m, Mechanism):
        # The engine's default (refined to its tolerance) unless a fixed step is asked for: the same report
        # gdpcore.analyze(m) returns.
        return analyze(m, discretization=discretization, optimistic=discretization is None)
    raise ValueError(f"{name} must be a gdpcore mechanism or PrivacyReport, got {m!r}")


def _pair(m1: Any, m2: Any, discretization: float | None) -> tuple[PrivacyReport, PrivacyReport]:
    r1 = _as_report(m1, "m1", discretization)
    r2 = _as_report(m2, "m2", discretization)
    a1, a2 = r1.mechanism.neighbouring_relation, r2.mechanism.neighbouring_relation
    if a1 != a2:
        raise ValueError(
            f"m1 and m2 must use the same neighbouring relation, got {a1!r} and {a2!r}: divergences between "
            "guarantees for different adjacency notions have no meaning"
        )
    return r1, r2


def _weight(weight: str | None):
    """(w(eps) for eps >= 0 with pi = sigmoid(eps), tail factor for :func:`certified_sup`)."""
    if weight is None:
        return None, 1.0
    if weight == "beta":
        # Jeffreys Beta(1/2, 1/2): 1 / (pi_c sqrt(pi (1 - pi))) = 2 cosh(eps/2) / pi_c; w/(1+e^eps) is decreasing.
        return (lambda e: 2.0 * np.cosh(np.asarray(e) / 2.0) / math.pi), 2.0 * math.cosh(_TAIL_EPS / 2.0) / math.pi
    # U-quadratic on [0, 1]: 12 (pi - 1/2)^2 <= 3.
    return (lambda e: 12.0 * (special.expit(np.asarray(e)) - 0.5) ** 2), 3.0


def _one_way(r1: PrivacyReport, r2: PrivacyReport, weight: str | None, tol: float) -> tuple[float, float, float]:
    w, w_tail = _weight(weight)
    bp = None if r1.exact else r1.curve("pessimistic").eps
    lo, hi, arg = certified_sup(
        mechanism_profile(r2),
        mechanism_profile(r1),
        weight=w,
        weight_tail=w_tail,
        tol=tol,
        lower_breakpoints=bp,
        upper_convex=True,
    )
    return lo, hi, float(special.expit(arg))


def _tradeoff(r: PrivacyReport, alpha: np.ndarray) -> np.ndarray:
    return np.asarray(r.fnr(np.clip(alpha, 0.0, 1.0)), dtype=float)


def _one_way_tradeoff(r1: PrivacyReport, r2: PrivacyReport, n_alpha: int) -> float:
    # Def. 1 by bisection on kappa, f extended by 0 beyond 1 (seed 002 A4).
    alpha = np.linspace(0.0, 1.0, n_alpha)
    f2 = _tradeoff(r2, alpha)
    lo, hi = 0.0, 0.5
    for _ in range(50):
        k = 0.5 * (lo + hi)
        shifted = np.where(alpha + k <= 1.0, _tradeoff(r1, alpha + k), 0.0) - k
        if np.all(shifted <= f2 + 1e-12):
            hi = k
        else:
            lo = k
    return hi


def get_bayes_risk(m: Any, prior: np.ndarray | float, *, discretization: float | None = None) -> np.ndarray | float:
    """Minimum Bayes error R_min(pi) = min_alpha pi alpha + (1 - pi) f(alpha)  (seed 002 Eq. 2), vectorised over pi.

    Computed from the trade-off curve itself: the closed form pi Phi(-mu/2 - L/mu) + (1 - pi) Phi(-mu/2 + L/mu),
    L = log(pi/(1 - pi)), for exact GDP reports (exact); (1 - p)(1 - delta(log(p/(1 - p)))), p = max(pi, 1 - pi), from
    the accountant's pessimistic profile otherwise (a *lower* bound on the true R_min: that profile is above the true
    one).
    """
    r = _as_report(m, "m", discretization)
    pi = check_open_unit_array("prior", prior, allow_zero=True, allow_one=True)
    if r.exact:
        mu = float(r.mu)
        with np.errstate(divide="ignore"):
            lg = np.log(pi) - np.log1p(-pi)
        out = pi * special.ndtr(-mu / 2 - lg / mu) + (1 - pi) * special.ndtr(-mu / 2 + lg / mu)
        out = np.where((pi == 0) | (pi == 1), 0.0, out)
    else:
        # Through the profile instead of the curve's vertices: min_alpha c alpha + f(alpha) = -f*(-c) = 1 - delta(eps)
        # with c = e^eps (delta(eps) = 1 + f*(-e^eps), Dong et al. Prop. 2.12), and R(pi) = R(1 - pi) for a symmetric
        # curve, so R(pi) = (1 - p)(1 - delta(log(p / (1 - p)))) with p = max(pi, 1 - pi). Searching the vertices
        # for the one where the slopes cross -pi/(1 - pi) is not robust: in floating point the slopes of a
        # Gaussian-type curve are not monotone near alpha = 0 (beta == 1.0 over several vertices) nor where the curve
        # hugs 1 - alpha, and a running maximum of them sent every prior to the vertex (0, 1), i.e. R = 1 - pi.
        p = np.maximum(pi, 1.0 - pi)
        with np.errstate(divide="ignore"):
            eps = np.log(p) - np.log1p(-p)
        finite = np.isfinite(eps)
        d = np.asarray(r.delta(np.where(finite, eps, 0.0)), dtype=float)
        out = np.where(finite, (1.0 - p) * (1.0 - np.clip(d, 0.0, 1.0)), 0.0)
    return float(out) if np.ndim(prior) == 0 else out


def get_delta_divergence(
    m1: Any,
    m2: Any,
    *,
    weight: str | None = None,
    symmetric: bool = False,
    method: str = "profile",
    tol: float = 1e-9,
    discretization: float | None = None,
    n_grid: int = 100_001,
) -> DivergenceResult:
    """Delta(M1 || M2) (seed 002 Def. 1 / Thm 2 / Cor. 1) with bracket and label.

    ``method="profile"`` (default): certified sup of (delta2 - delta1)/(1 + e^eps), weighted if asked.
    ``method="tradeoff"``: bisection on kappa over an alpha grid of ``n_grid`` points (Def. 1; unweighted only).
    ``method="bayes_risk"``: max over a prior grid of ``n_grid`` points of Psi(pi)(R1 - R2) (Cor. 1, Sec. 5), R_min
    from :func:`get_bayes_risk`. The grid methods are cross-checks; their bracket is the single grid value.
    """
    check_choice("weight", weight, WEIGHTS)
    check_choice("method", method, ("profile", "tradeoff", "bayes_risk"))
    check_positive("tol", tol)
    if not isinstance(symmetric, bool):
        raise ValueError(f"symmetric must be True or False, got {symmetric!r}")
    if method == "tradeoff" and weight is not None:
        raise ValueError(f"method 'tradeoff' supports weight=None only, got weight={weight!r}")
    r1, r2 = _pair(m1, m2, discretization)
    label = "exact" if (r1.exact and r2.exact and method == "profile") else "estimate"
    pairs = [(r1, r2), (r2, r1)] if symmetric else [(r1, r2)]
    results = []
    for a, b in pairs:
        if method == "profile":
            results.append(_one_way(a, b, weight, tol))
        elif method == "tradeoff":
            v = _one_way_tradeoff(a, b, n_grid)
            results.append((v, v, math.nan))
        else:
            pi = np.linspace(0.0, 1.0, n_grid)
            w, _ = _weight(weight)
            ws = np.ones_like(pi) if w is None else w(np.abs(special.logit(np.clip(pi, 1e-300, 1 - 1e-16))))
            diff = np.asarray(get_bayes_risk(a, pi)) - np.asarray(get_bayes_risk(b, pi))
            vals = np.where((pi > 0) & (pi < 1), ws * diff, 0.0)
            i = int(np.argmax(vals))
            v = max(0.0, float(vals[i]))
            results.append((v, v, float(pi[i])))
    best = max(results, key=lambda x: x[1])
    lower = max(x[0] for x in results)
    return DivergenceResult(
        value=float(best[1]),
        lower=float(lower),
        upper=float(best[1]),
        bound=label,
        method=method,
        weight=weight,
        symmetric=symmetric,
        argmax_prior=float(best[2]),
    )


def delta_divergence(m1: Any, m2: Any, *, weight: str | None = None, symmetric: bool = False) -> float:
    """Delta(M1 || M2) as a float: the upper end of the certified profile-form bracket (seed 002 Thm 2).

    ``weight`` in None | "beta" | "uquadratic"; ``symmetric=True`` gives the metric Delta<-> (Eq. 5). Large values mean
    M2 can be much more vulnerable than M1 somewhere; 0 means M2 is everywhere at least as private as M1.
    """
    return get_delta_divergence(m1, m2, weight=weight, symmetric=symmetric).value


BLACKWELL_TOL = 1e-6
"""Default tolerance of the Blackwell verdict (:func:`blackwell_verdict`): the accountant's resolution."""


def blackwell_verdict(divergence: DivergenceResult, *, tol: float = BLACKWELL_TOL) -> bool | None:
    """The Blackwell verdict read off a computed Delta(M2 || M1) (seed 002 Thm 1: M1 is uniformly at least as
    private as M2 iff Delta(M2 || M1) = 0): True if its certified upper end is <= ``tol``, False if its lower end
    exceeds ``tol``, None (undecided within the accountant's resolution) otherwise."""
    check_positive("tol", tol)
    if divergence.upper <= tol:
        return True
    if divergence.lower > tol:
        return False
    return None


def is_at_least_as_private(
    m1: Any, m2: Any, *, tol: float = BLACKWELL_TOL, discretization: float | None = None
) -> DominanceResult:
    """Blackwell test (seed 002 Thm 1): is M1 uniformly at least as private as M2, i.e. f1 >= f2 for all alpha,
    delta1 <= delta2 for all eps, R1 >= R2 for all priors? Equivalent to Delta(M2 || M1) = 0.

    Verdict True if the certified upper end of Delta(M2 || M1) is <= ``tol`` (the accountant's resolution), False if
    its lower end exceeds ``tol``, None otherwise.
    """
    check_positive("tol", tol)
    r1, r2 = _pair(m1, m2, discretization)
    res = get_delta_divergence(r2, r1)
    return DominanceResult(
        at_least_as_private=blackwell_verdict(res, tol=tol),
        divergence_upper=res.upper,
        divergence_lower=res.lower,
        tolerance=float(tol),
        bound=res.bound,
    )


def get_extremal_divergences(m: Any, *, discretization: float | None = None) -> dict[str, Any]:
    """Divergences from perfect privacy and to blatant non-privacy (seed 002 Lemmas 3-5).

    ``from_perfect_privacy`` = Delta(M_PP || M) = TV/2 = delta(0)/2 (upper bound for PLD reports: delta(0) is);
    ``to_blatant_non_privacy`` = Delta(M || M_BNP) = R* = R_min(1/2) = alpha* (lower bound for PLD reports). They
    sum to 1/2 for symmetric curves (Lemma 5). Computed from the profile at 0 and from the Bayes risk independently.
    """
    r = _as_report(m, "m", discretization)
    tv = float(r.advantage)
    r_star = float(get_bayes_risk(r, 0.5))
    exact = r.exact
    return {
        "from_perfect_privacy": tv / 2.0,
        "from_perfect_privacy_bound": "exact" if exact else "upper",
        "to_blatant_non_privacy": r_star,
        "to_blatant_non_privacy_bound": "exact" if exact else "lower",
        "fixed_point": (1.0 - tv) / 2.0 if exact else float(r.curve("pessimistic").fixed_point),
        "sum": tv / 2.0 + r_star,
    }
