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
``symmetric=True`` gives max(Delta(M1||M2), Delta(M2||M1)) (Eq. 5), a metric (Cor. 2). Any Beta(a, b) hyper-prior or a
user-given density Psi(pi): :func:`get_weighted_delta_divergence`.

Where the order flips: :func:`get_crossing_priors` (the priors pi at which R1_min - R2_min changes sign, seed 002
Fig. 3: "the Bayes error functions cross at pi ~ 0.4"). Approximate dominance (Def. 2 / Thm 2):
:func:`is_approximately_dominating`, M1 >=_D M2 iff Delta(M1 || M2) <= D, checked in the three equivalent forms.
Emergent Blackwell dominance under composition (Sec. 4, Eqs. 8-15, Lemma 6 / Thm 3): :func:`get_plrv_moments`
(v1..v4, eta) and :func:`predict_composition_dominance` (the eventual winner, the Thm 3 bound and its precondition).

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

from gdpcore._validation import (
    bounded_repr,
    check_choice,
    check_count,
    check_open_unit_array,
    check_positive,
    check_real,
)
from gdpcore.mechanisms import Mechanism
from gdpcore.report import PrivacyReport, analyze
from gdpcore.representations import _TAIL_EPS, certified_sup, mechanism_profile

__all__ = [
    "BERRY_ESSEEN",
    "BLACKWELL_TOL",
    "WEIGHTS",
    "ApproximateDominance",
    "CompositionDominance",
    "DivergenceResult",
    "DominanceResult",
    "PlrvMoments",
    "blackwell_verdict",
    "get_crossing_priors",
    "get_plrv_moments",
    "get_weighted_delta_divergence",
    "is_approximately_dominating",
    "predict_composition_dominance",
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


def _grid_size(n_grid: Any) -> int:
    n = check_count("n_grid", n_grid, minimum=3)
    if n > MAX_GRID:
        raise ValueError(f"n_grid must be <= {MAX_GRID}, got {bounded_repr(n_grid)}")
    return n


# -- where the order flips (Fig. 3) ---------------------------------------------------------------------------------
def _risk_difference(r1: PrivacyReport, r2: PrivacyReport) -> Any:
    def diff(pi: np.ndarray | float) -> np.ndarray:
        return np.asarray(get_bayes_risk(r1, pi), float) - np.asarray(get_bayes_risk(r2, pi), float)

    return diff


def get_crossing_priors(
    m1: Any, m2: Any, *, n_grid: int = 20_001, atol: float = 1e-12, discretization: float | None = None
) -> tuple[float, ...]:
    """The adversary priors pi in (0, 1) at which R1_min(pi) - R2_min(pi) changes sign: where the Delta order of the
    two mechanisms flips (seed 002 Sec. 3, Fig. 3: Gaussian sigma = 1 vs Laplace b = 1 "cross at pi ~ 0.4"; exactly
    0.41854 and 0.58146, docs/references.md S002-1). Empty when the mechanisms are Blackwell-ordered (Thm 1).

    Sign changes on a grid of ``n_grid`` priors (differences within ``atol`` of 0 count as touching, not crossing),
    each refined by Brent's method on R_min from :func:`get_bayes_risk`. Exact to 1e-12 for two closed-form reports;
    for accountant curves within their discretisation (an estimate).
    """
    from scipy import optimize

    n = _grid_size(n_grid)
    check_positive("atol", atol)
    r1, r2 = _pair(m1, m2, discretization)
    diff = _risk_difference(r1, r2)
    pi = np.linspace(0.0, 1.0, n)[1:-1]
    d = diff(pi)
    sign = np.where(d > atol, 1, np.where(d < -atol, -1, 0))
    nz = np.flatnonzero(sign)
    out = []
    for a, b in zip(nz[:-1], nz[1:], strict=True):
        if sign[a] != sign[b]:
            root = optimize.brentq(lambda x: float(diff(x)), float(pi[a]), float(pi[b]), xtol=1e-13)
            out.append(float(root))
    return tuple(out)


# -- approximate dominance (Def. 2, Thm 2) --------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ApproximateDominance:
    """M1 >=_D M2 (seed 002 Def. 2): Delta(M1 || M2) <= D. ``verdict`` True / False / None (undecided: D inside the
    certified bracket [``divergence_lower``, ``divergence_upper``]). ``tradeoff_form`` / ``profile_form`` /
    ``bayes_risk_form`` are the largest violations of the three equivalent conditions of Thm 2 on grids (<= ~0 when
    the verdict is True): max_alpha f1(alpha + D) - D - f2(alpha), max_eps delta2 - delta1 - D (1 + e^eps) and
    max_pi R1 - R2 - D."""

    verdict: bool | None
    D: float
    divergence_lower: float
    divergence_upper: float
    tradeoff_form: float
    profile_form: float
    bayes_risk_form: float
    bound: str


def is_approximately_dominating(
    m1: Any, m2: Any, D: float, *, discretization: float | None = None, n_grid: int = 20_001
) -> ApproximateDominance:
    """Does M1 D-approximately dominate M2 (seed 002 Def. 2 / Thm 2), i.e. is M2 at most D more vulnerable than M1
    anywhere (every FPR, every eps, every prior)? Decided from the certified bracket of Delta(M1 || M2); the three
    equivalent forms of Thm 2 are evaluated on grids alongside (they agree up to the grids and the accountant)."""
    d = check_real("D", D)
    n = _grid_size(n_grid)
    if not 0.0 <= d <= 0.5:
        raise ValueError(f"D must be in [0, 1/2] (Delta never exceeds 1/2), got {bounded_repr(D)}")
    r1, r2 = _pair(m1, m2, discretization)
    res = get_delta_divergence(r1, r2)
    verdict = True if res.upper <= d else (False if res.lower > d else None)
    alpha = np.linspace(0.0, 1.0, n)
    shifted = np.where(alpha + d <= 1.0, _tradeoff(r1, alpha + d), 0.0) - d
    tradeoff_form = float(np.max(shifted - _tradeoff(r2, alpha)))
    eps = np.linspace(-20.0, 20.0, n)
    profile_form = float(np.max(_signed_delta(r2, eps) - _signed_delta(r1, eps) - d * (1.0 + np.exp(eps))))
    pi = np.linspace(0.0, 1.0, n)
    bayes_form = float(np.max(_risk_difference(r1, r2)(pi) - d))
    return ApproximateDominance(
        verdict=verdict,
        D=d,
        divergence_lower=res.lower,
        divergence_upper=res.upper,
        tradeoff_form=tradeoff_form,
        profile_form=profile_form,
        bayes_risk_form=bayes_form,
        bound=res.bound,
    )


def _signed_delta(r: PrivacyReport, eps: np.ndarray) -> np.ndarray:
    """delta(eps) for all real eps of a symmetric curve: delta(-e) = 1 - e^{-e} + e^{-e} delta(e) (seed 002 Thm 2.2)."""
    a = np.abs(eps)
    d = np.asarray(r.delta(a), float)
    return np.where(eps >= 0, d, 1.0 - np.exp(-a) + np.exp(-a) * d)


# -- composition: moments, eta, Lemma 6 / Thm 3 ---------------------------------------------------------------------
BERRY_ESSEEN = 0.56
"""The Berry-Esseen constant of seed 002 Thm 3 (Eq. 14)."""


@dataclasses.dataclass(frozen=True)
class PlrvMoments:
    """Seed 002 Eqs. 8-12, functionals of the trade-off curve: v1 = -int log|f'| (the KL divergence), v2 = int log^2|f'|,
    v3 = int |log|f'| + v1|^3 (third absolute central moment), v4 = int |log|f'||^3, eta = v1 / sqrt(v2 - v1^2).
    ``skew`` = eta^3 v3 / v1^3 = v3 / (v2 - v1^2)^{3/2}, the per-step term of Thm 3. ``bound``: "exact" for mu-GDP
    (eta = mu/2), "estimate" from an accountant's piecewise-linear curve (its segments' slopes)."""

    v1: float
    v2: float
    v3: float
    v4: float
    eta: float
    skew: float
    bound: str


def _gdp_moments(mu: float) -> PlrvMoments:
    # log|f_mu'(alpha)| = mu z - mu^2/2, z = Phi^-1(1 - alpha) ~ N(0, 1).
    from scipy import integrate

    v1 = mu * mu / 2.0
    v2 = mu * mu + mu**4 / 4.0
    v3 = 2.0 * math.sqrt(2.0 / math.pi) * mu**3
    v4 = float(
        integrate.quad(
            lambda z: abs(mu * z - mu * mu / 2.0) ** 3 * math.exp(-z * z / 2.0) / math.sqrt(2.0 * math.pi),
            -math.inf,
            math.inf,
            points=None,
        )[0]
    )
    return PlrvMoments(v1=v1, v2=v2, v3=v3, v4=v4, eta=mu / 2.0, skew=v3 / mu**3, bound="exact")


_UNRESOLVED_MASS_LIMIT = 1e-12
MAX_GRID = 10**7
"""Largest prior / alpha / eps grid the grid-based checks accept (80 MB per array)."""


def get_plrv_moments(m: Any, *, discretization: float | None = None) -> PlrvMoments:
    """The moments v1..v4 and eta of one mechanism (seed 002 Eqs. 8-12) from its trade-off curve: closed form for
    mu-GDP; for an accountant curve, log|f'| is constant (the segment's slope) on each segment, so every integral is a
    finite sum over the breakpoints of the pessimistic curve (an estimate: the curve is the accountant's). A curve
    with a flat part (f = 0 on an interval, i.e. an infinite privacy loss) has infinite moments."""
    r = _as_report(m, "m", discretization)
    if r.exact:
        return _gdp_moments(float(r.mu))
    a, b = r.curve("pessimistic").breakpoints()
    da = np.diff(a)
    keep = da > 0
    slope = np.diff(b)[keep] / da[keep]
    w = da[keep]
    # Segments without a usable slope: f = 0 on an interval (infinite privacy loss: the accountant's truncated tail),
    # or vertices so close to beta = 1 that the slope is lost to rounding. Below _UNRESOLVED_MASS_LIMIT of alpha-width their
    # contribution is negligible and they are left out; above it the moments are infinite.
    bad = slope >= 0
    if w[bad].sum() > _UNRESOLVED_MASS_LIMIT:
        return PlrvMoments(math.inf, math.inf, math.inf, math.inf, math.nan, math.inf, "estimate")
    t = np.log(-slope[~bad])
    w = w[~bad] / w[~bad].sum()
    v1 = -float(np.sum(w * t))
    v2 = float(np.sum(w * t * t))
    var = max(v2 - v1 * v1, float(np.sum(w * (t + v1) ** 2)))
    v3 = float(np.sum(w * np.abs(t + v1) ** 3))
    v4 = float(np.sum(w * np.abs(t) ** 3))
    eta = v1 / math.sqrt(var) if var > 0 else math.inf
    return PlrvMoments(
        v1=v1, v2=v2, v3=v3, v4=v4, eta=eta, skew=v3 / var**1.5 if var > 0 else math.inf, bound="estimate"
    )


@dataclasses.dataclass(frozen=True)
class CompositionDominance:
    """Seed 002 Sec. 4 for M^(N) vs M~^(N~). ``precondition`` = N / N~ >= eta~^2 / eta^2 (Thm 3); ``bound`` = Eq. 14,
    0.56 (eta^3 v3 / (sqrt(N) v1^3) + eta~^3 v~3 / (sqrt(N~) v~1^3)), an upper bound on Delta(M^(N) || M~^(N~)) when
    the precondition holds (inf otherwise); ``mu`` / ``mu_tilde`` = 2 sqrt(N) eta, the CLT Gaussians (Dong et al.
    2022) the compositions approach; ``eventual`` names the mechanism whose composition Lemma 6 predicts to Blackwell-
    dominate (be less private) for large N at this ratio: "m1" if N eta^2 > N~ eta~^2, "m2" if smaller, None if tied."""

    moments: PlrvMoments
    moments_tilde: PlrvMoments
    n: int
    n_tilde: int
    precondition: bool
    bound: float
    mu: float
    mu_tilde: float
    eventual: str | None


def predict_composition_dominance(
    m1: Any, n: int, m2: Any, n_tilde: int, *, discretization: float | None = None
) -> CompositionDominance:
    """Emergent Blackwell dominance (seed 002 Lemma 6 / Thm 3): the moments of one step of each mechanism, the Thm 3
    precondition and Eq. 14 bound on Delta(M1^(n) || M2^(n_tilde)), and the predicted eventual order."""
    n = check_count("n", n)
    nt = check_count("n_tilde", n_tilde)
    mo = get_plrv_moments(m1, discretization=discretization)
    mt = get_plrv_moments(m2, discretization=discretization)
    pre = bool(n * mo.eta**2 >= nt * mt.eta**2)
    bound = BERRY_ESSEEN * (mo.skew / math.sqrt(n) + mt.skew / math.sqrt(nt)) if pre else math.inf
    lhs, rhs = n * mo.eta**2, nt * mt.eta**2
    eventual = "m1" if lhs > rhs else ("m2" if lhs < rhs else None)
    return CompositionDominance(
        moments=mo,
        moments_tilde=mt,
        n=n,
        n_tilde=nt,
        precondition=pre,
        bound=float(min(bound, 0.5)),
        mu=2.0 * math.sqrt(n) * mo.eta,
        mu_tilde=2.0 * math.sqrt(nt) * mt.eta,
        eventual=eventual,
    )


# -- general hyper-priors (Sec. 5) ----------------------------------------------------------------------------------
def get_weighted_delta_divergence(
    m1: Any,
    m2: Any,
    *,
    beta: tuple[float, float] | None = None,
    density: Any = None,
    n_grid: int = 200_001,
    discretization: float | None = None,
) -> DivergenceResult:
    """Delta^Psi(M1 || M2) = max_pi Psi(pi) (R1_min(pi) - R2_min(pi)) (seed 002 Sec. 5) for any hyper-prior: a
    Beta(a, b) density (``beta=(a, b)``; the paper's Jeffreys prior is (1/2, 1/2)) or a user-given density ``density``
    (a vectorised callable on (0, 1), non-negative; it need not be normalised - the paper's Psi multiplies R_min
    pointwise). Maximised over a grid of ``n_grid`` priors, then refined by a bounded Brent search around the best
    grid point: an ``"estimate"`` (grid-free certification needs a monotone weight; the named weights of
    :func:`get_delta_divergence` are certified)."""
    from scipy import optimize, stats

    if (beta is None) == (density is None):
        raise ValueError("exactly one of beta=(a, b) or density=callable must be given")
    if beta is not None:
        try:
            a, b = (float(x) for x in beta)
        except (TypeError, ValueError):
            raise ValueError(f"beta must be a pair (a, b) of positive numbers, got {beta!r}") from None
        if not (a > 0 and b > 0 and math.isfinite(a) and math.isfinite(b)):
            raise ValueError(f"beta must be a pair (a, b) of positive numbers, got {beta!r}")

        def psi(x: np.ndarray) -> np.ndarray:
            return np.asarray(stats.beta.pdf(x, a, b), float)

        name = f"beta({a:g}, {b:g})"
    else:
        if not callable(density):
            raise ValueError(f"density must be a callable Psi(pi), got {density!r}")

        def psi(x: np.ndarray) -> np.ndarray:
            return np.asarray(density(np.asarray(x, float)), float) * np.ones_like(np.asarray(x, float))

        name = "user"
    n = _grid_size(n_grid)
    r1, r2 = _pair(m1, m2, discretization)
    diff = _risk_difference(r1, r2)
    pi = np.linspace(0.0, 1.0, n)[1:-1]
    wv = psi(pi)
    if np.isnan(wv).any() or (wv < 0).any():
        i = int(np.argmax(np.isnan(wv) | (wv < 0)))
        raise ValueError(f"density must be >= 0 on (0, 1), got {wv[i]!r} at pi = {pi[i]!r}")
    vals = wv * diff(pi)
    j = int(np.argmax(vals))
    best, arg = float(vals[j]), float(pi[j])
    lo, hi = float(pi[max(j - 1, 0)]), float(pi[min(j + 1, pi.size - 1)])
    if hi > lo:
        res = optimize.minimize_scalar(
            lambda x: -float(psi(np.asarray(x)) * diff(x)), bounds=(lo, hi), method="bounded", options={"xatol": 1e-12}
        )
        if -float(res.fun) > best:
            best, arg = -float(res.fun), float(res.x)
    best = max(0.0, best)
    return DivergenceResult(
        value=best,
        lower=best,
        upper=best,
        bound="estimate",
        method="bayes_risk",
        weight=name,
        symmetric=False,
        argmax_prior=arg if best > 0 else math.nan,
    )
