"""How much each common way of stating a guarantee loses: representation regret (seed 000 Fig. 1(c), App. C).

For a mechanism with (pessimistic) privacy profile delta_f and a *representation* - a concise statement that the
mechanism satisfies, with its own implied profile delta_rep >= delta_f - the regret is the Delta-divergence
(seed 000 Eq. 6 = Eq. 24; seed 002 Thm 2)

    Delta(f, f_rep) = sup_{eps >= 0} (delta_rep(eps) - delta_f(eps)) / (1 + e^eps),

eps >= 0 being enough because every curve here is symmetric. Representations (``REPRESENTATIONS``):

========================  ===============================  =============================================================
representation            fitted parameter                 implied profile delta_rep(eps)
========================  ===============================  =============================================================
``"pure_dp"``             eps0 (exact, from the mechanism  (e^eps0 - e^eps)_+ / (1 + e^eps0): randomized response, the
                          structure; inf if not pure DP)   worst eps0-DP mechanism (seed 000 Sec. 2.4; seed 003 Cor 3.2)
``"epsilon_delta"``       eps(delta) from the accountant   delta0 + (1 - delta0)(e^eps0 - e^eps)_+ / (1 + e^eps0): the
                          (upper bound)                    tight profile of one (eps0, delta0) pair (seed 003 Thm 3.1)
``"zcdp"``                rho* = sup_{t>1} eps(t)/t        min over an order grid of CKS(t, rho* t, eps) (Eq. 25)
                          (seed 000 Eq. 25)
``"rdp"``                 the RDP curve on an order grid   min over the grid of CKS(t, eps(t), eps) (Canonne, Kamath,
                                                           Steinke 2020 Prop. 12 v4; dp_accounting's ``compute_delta``)
``"gdp"``                 mu* (report.mu, Eq. 21)          delta_mu (Dong et al. Cor. 2.13)
========================  ===============================  =============================================================

The sup is computed to a *certified bracket* by a generalisation of :meth:`SymmetricCurve.regret_against_gdp`:
both profiles are non-increasing in eps, so on a cell [a, b] the ratio is at most
w(b) (delta_rep(a) - delta_f(b)) / (1 + e^a); cells whose bound can still beat the best value found are split until the
bracket is narrower than ``tol`` (:func:`certified_sup`). No fixed eps grid decides the answer.

Grid dependence (seed 000 Sec. 4.1 / App. C.2; the paper does not state its grids) - what is and is not reproducible:

* eps-DP, (eps, delta) and GDP regrets do not depend on any unstated grid (only on the PLD discretisation, 1e-4 by
  default): Laplace b=1 gives 3.4323% / 3.4322% / 3.7016% (paper 3.43 / 3.42 / 3.70); DP-SGD (sigma=9.4,
  q=2^14/50000, T=2000) gives (eps, 1e-5) 21.7% and GDP 0.10% (paper 21.70 / 0.10).
* The RDP curve regret depends on the order grid. The default :data:`DEFAULT_ORDERS` (500 orders, geometric in t-1
  from 1.001 to 4096) gives 3.383% for Laplace (paper 3.38); dp_accounting's ``DEFAULT_RDP_ORDERS`` gives 3.391%.
* rho* over a finite grid is *not* a valid zCDP parameter when eps(t)/t is still rising past the largest order: for
  DP-SGD eps_T(t)/t increases towards T/(2 sigma^2) = 11.32 as t -> inf, and a grid capped at 256 or 512 gives the
  paper-style 3.5883 or 6.9756 - an optimistic rho (a recomputation printed 6.2473 for 512, docs/references.md S000-10; dp_accounting's exact
  integer-order value is 6.9756). This module therefore takes rho* from the analytic supremum where
  it is known (:func:`get_rho_from_mechanism`: Gaussian and subsampled Gaussian limits, Laplace/RR KL limit at t -> 1),
  so the DP-SGD zCDP regret sits at its cap (~21.7%, paper 21.80). Laplace: rho* = KL = e^-1, regret 4.81% (the paper
  prints 4.83; docs/references.md S000-5: 4.81).
* dp_accounting 0.6.0's fractional-order RDP of the Poisson-subsampled Gaussian (``_compute_log_a_frac``) is wrong
  for large sampling rates: at q=0.32768, sigma=9.4 it returns 0.0297 at t=1.01 where the true value is 0.000615 (it
  agrees to 1e-13 at integer orders). :func:`get_rdp_from_mechanism` computes that RDP by quadrature instead (checked
  against dp_accounting's exact integer-order expansion in tests). The DP-SGD RDP-curve regret is then 10.76% with
  :data:`DEFAULT_ORDERS` (10.78% on dp_accounting's default grid; docs/references.md S000-1: 10.7% with
  orders down to 1.01-1.1), and 21.77% (the cap (1 - delta(0))/2) when only integer orders >= 2 are used - or when
  dp_accounting's faulty fractional values are used on its default grid. The paper's 20.80% lies between and cannot
  be reproduced: it depends on an unstated grid (and possibly on that RDP error). Only the integer-order value is
  asserted in tests.

Labels: regrets against a PLD accountant's curve are ``"estimate"`` (the fit of the representation to the
pessimistic curve), parameters read off that curve are ``"upper"``; against a closed-form (exact Gaussian) report
both are ``"exact"``. ``pure_dp`` for a mechanism that is not pure DP has parameter and regret ``inf``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gdpcore import closed_form, kinds
from gdpcore._certified import refine_cells
from gdpcore._validation import check_choice, check_positive, check_probability
from gdpcore.closed_form import get_delta_from_rdp  # re-exported: its public home before closed_form
from gdpcore.mechanisms import Mechanism

__all__ = [
    "DEFAULT_ORDERS",
    "REPRESENTATIONS",
    "RepresentationRegret",
    "certified_sup",
    "get_delta_from_rdp",
    "get_epsilon_from_mechanism",
    "get_rdp_and_label",
    "get_rdp_from_mechanism",
    "get_regret",
    "get_representation_table",
    "get_rho_from_mechanism",
    "mechanism_profile",
]

REPRESENTATIONS: tuple[str, ...] = ("pure_dp", "epsilon_delta", "zcdp", "rdp", "gdp")

DEFAULT_ORDERS: np.ndarray = 1.0 + np.geomspace(1e-3, 4095.0, 500)
"""RDP orders used by default: 500 orders with t - 1 geometric from 1e-3 to 4095 (t in [1.001, 4096])."""

_TAIL_EPS = 60.0  # beyond this eps every ratio below is < 1e-13 (added to the upper end of each bracket)


# ---------------------------------------------------------------------------------------------------------------------
# Certified supremum of a weighted profile difference
# ---------------------------------------------------------------------------------------------------------------------
def certified_sup(
    upper_profile: Callable[[np.ndarray], np.ndarray],
    lower_profile: Callable[[np.ndarray], np.ndarray],
    *,
    weight: Callable[[np.ndarray], np.ndarray] | None = None,
    weight_tail: float = 1.0,
    tol: float = 1e-9,
    max_iter: int = 60,
    eps_max: float = _TAIL_EPS,
    lower_breakpoints: np.ndarray | None = None,
    upper_convex: bool = False,
) -> tuple[float, float, float]:
    """Certified bracket (lower, upper, argmax eps) of max(0, sup_{eps >= 0} w(eps) (A(eps) - B(eps)) / (1 + e^eps)).

    ``A = upper_profile`` and ``B = lower_profile`` must be non-increasing on [0, inf) and in [0, 1]; ``weight`` (if
    given) must be non-negative and non-decreasing on [0, inf). This is seed 000 Eq. 24 / seed 002 Cor. 1 in profile
    form (Bayes prior pi = e^eps / (1 + e^eps)). On a cell [a, b] the ratio is at most w(b)(A(a) - B(b)) / (1 + e^a);
    cells that may still beat the best point value are split 8-fold (largest bounds first) until the bracket is
    narrower than ``tol``. Beyond ``eps_max`` the ratio is bounded by ``weight_tail * A(eps_max) / (1 + e^eps_max)``
    (``weight_tail`` must bound sup_{eps >= eps_max} w(eps) (1 + e^eps_max)/(1 + e^eps)), added to the upper end.

    If ``lower_breakpoints`` are given, B is affine in gamma = e^eps between consecutive breakpoints (and constant
    beyond the last), as for an accountant's piecewise-linear curve; if moreover ``upper_convex`` (A convex in gamma,
    true for the profile of any single trade-off curve, Thm A.9), A - B is convex in gamma on every cell and peaks at an
    endpoint - the idea of :meth:`SymmetricCurve.regret_against_gdp` - and the smaller of the two bounds is used.
    The bracket is valid whenever the loop stops (``max_iter`` rounds at most).
    """
    w = weight if weight is not None else (lambda e: np.ones_like(e))

    def value(e: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return w(e) * (np.asarray(A(e)) - np.asarray(B(e))) / (1.0 + np.exp(e))

    A, B = upper_profile, lower_profile
    grid = np.unique(np.concatenate([np.linspace(0.0, 20.0, 4001), np.linspace(20.0, eps_max, 401)]))
    convex_cells = lower_breakpoints is not None and upper_convex
    if lower_breakpoints is not None:
        bp = np.asarray(lower_breakpoints, dtype=float)
        grid = np.unique(np.concatenate([grid, bp[(bp >= 0) & (bp <= eps_max)]]))

    def cell_bound(av, bv, wv, dv):
        # av, bv, wv, dv: values at the cell endpoints along the last axis (left = [..., :-1], right = [..., 1:]).
        mono = wv[..., 1:] * (av[..., :-1] - bv[..., 1:]) / dv[..., :-1]
        if not convex_cells:
            return mono
        n_max = np.maximum(av[..., :-1] - bv[..., :-1], av[..., 1:] - bv[..., 1:])
        conv = np.where(n_max > 0, wv[..., 1:] * n_max / dv[..., :-1], n_max * wv[..., :-1] / dv[..., 1:])
        return np.minimum(mono, conv)

    a_vals = np.asarray(A(grid), dtype=float)
    b_vals = np.asarray(B(grid), dtype=float)
    w_vals = np.asarray(w(grid), dtype=float)
    with np.errstate(over="ignore"):
        denom = 1.0 + np.exp(grid)
    point = w_vals * (a_vals - b_vals) / denom
    i_best = int(np.argmax(point))
    lower = max(0.0, float(point[i_best]))
    arg = float(grid[i_best]) if lower > 0 else 0.0
    tail = weight_tail * float(a_vals[-1]) / (1.0 + math.exp(eps_max))
    lo, hi = grid[:-1], grid[1:]
    up = cell_bound(a_vals, b_vals, w_vals, denom)
    alive = up > lower + tol
    lo, hi, up = lo[alive], hi[alive], up[alive]

    def refine(pts: np.ndarray, _: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        flat = pts.ravel()
        av = np.asarray(A(flat), dtype=float).reshape(pts.shape)
        bv = np.asarray(B(flat), dtype=float).reshape(pts.shape)
        wv = np.asarray(w(flat), dtype=float).reshape(pts.shape)
        with np.errstate(over="ignore"):
            dv = 1.0 + np.exp(pts)
        return wv * (av - bv) / dv, cell_bound(av, bv, wv, dv)

    # Cells set aside here and in the refinement are at most lower + tol: the bracket is narrower than tol, as stated.
    out = refine_cells(lo, hi, up, lower, refine, tol=tol, max_iter=max_iter)
    arg = out.arg if out.arg is not None else arg
    upper = max(out.lower, float(out.live.max()) if out.live.size else out.lower) + tail
    return out.lower, upper, arg


# ---------------------------------------------------------------------------------------------------------------------
# Mechanism-level quantities: pure eps, RDP curve, rho*
# ---------------------------------------------------------------------------------------------------------------------
def get_epsilon_from_mechanism(mechanism: Mechanism) -> float:
    """Exact pure-DP epsilon from the mechanism's structure (inf if the mechanism is not pure DP).

    Laplace: sensitivity/scale; randomized response: epsilon; compositions add (basic composition is tight for the
    pure-DP parameter: the supports of the worst-case outputs compose). Gaussian-type mechanisms have delta(eps) > 0
    for every eps and are not pure DP. Declared per kind in :mod:`gdpcore.kinds`.
    """
    return float(kinds.evaluate(mechanism, "pure_epsilon"))


def _check_orders(orders: Any) -> np.ndarray:
    if orders is None:
        return DEFAULT_ORDERS
    try:
        arr = np.asarray(orders, dtype=float).ravel()
    except (TypeError, ValueError):
        raise ValueError(f"orders must be an array of numbers > 1, got {orders!r}") from None
    if arr.size == 0:
        raise ValueError(f"orders must not be empty, got {orders!r}")
    bad = ~np.isfinite(arr) | (arr <= 1.0)
    if bad.any():
        raise ValueError(f"orders must be finite and > 1, got {arr[bad][0]!r}")
    return np.unique(arr)


def get_rdp_from_mechanism(mechanism: Mechanism, *, orders: Sequence[float] | np.ndarray | None = None) -> np.ndarray:
    """RDP curve eps(t) at ``orders`` (all > 1), exact for each mechanism kind, summed over compositions.

    Gaussian: t/(2 sigma^2). Laplace: Mironov 2017 Prop. 6 (seed 000 Sec. 2.3). Randomized response: the Renyi
    divergence of the two output Bernoullis. Poisson-subsampled Gaussian: Mironov et al. 2019 integral by quadrature
    (times the number of steps). Discrete Gaussian: t Delta^2 / (2 sigma^2), an *upper* bound (Canonne, Kamath, Steinke
    2020: the discrete Gaussian is (Delta^2/(2 sigma^2))-zCDP).
    """
    return get_rdp_and_label(mechanism, orders=orders)[0]


def get_rdp_and_label(
    mechanism: Mechanism, *, orders: Sequence[float] | np.ndarray | None = None
) -> tuple[np.ndarray, str]:
    """(RDP curve at ``orders``, ``"exact"`` or ``"upper"``): upper when any part's RDP is only a bound (discrete
    Gaussian). Declared per kind in :mod:`gdpcore.kinds`; summed over the distinct single steps by the engine's one
    RDP composition (:func:`gdpcore.engine.rdp.rdp_at_orders`), which bounds a long schedule's cost by rounding its
    steps to a grid (then ``"upper"``)."""
    from gdpcore.engine.rdp import rdp_at_orders

    t = _check_orders(orders)
    return rdp_at_orders(mechanism, np.asarray(t, dtype=float), coarsen=True)


def get_rho_from_mechanism(mechanism: Mechanism) -> tuple[float, str]:
    """Tight zCDP parameter rho* = sup_{t > 1} eps(t)/t (seed 000 Eq. 25) and its label ("exact" or "upper").

    Gaussian: 1/(2 sigma^2). Subsampled Gaussian: T/(2 sigma^2), approached as t -> inf (eps_1(t) <= t/(2 sigma^2) by
    joint convexity and eps_1(t)/t -> 1/(2 sigma^2)): subsampling gives no zCDP benefit (seed 000 App. C.3). Laplace
    and randomized response: eps(t)/t is largest as t -> 1, where it equals the KL divergence (e^-eps0 + eps0 - 1 for
    Laplace, eps tanh(eps/2) for RR); the module's tests check this on a dense order grid. Discrete Gaussian:
    Delta^2/(2 sigma^2) (upper). Compositions: the sum of the parts' rho (exact if all parts attain their supremum in
    the same limit, otherwise an upper bound).
    """
    parts = _rho_parts(mechanism)
    rho = float(sum(r for r, _, _ in parts))
    limits = {lim for _, _, lim in parts if lim != "any"}
    exact = all(lab == "exact" for _, lab, _ in parts) and len(limits) <= 1
    return rho, "exact" if exact else "upper"


def _rho_parts(mechanism: Mechanism) -> list[tuple[float, str, str]]:
    # (rho, label, where the supremum is attained: "one" (t -> 1), "inf" (t -> inf) or "any" (constant ratio))
    return kinds.evaluate(mechanism, "rho")


# ---------------------------------------------------------------------------------------------------------------------
# Regret of one representation
# ---------------------------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class RepresentationRegret:
    """Regret of stating a mechanism's guarantee in one representation (seed 000 Fig. 1(c)).

    ``regret`` is the upper end of the certified bracket ``(regret_lower, regret)`` of Eq. 24 against the report's
    pessimistic curve. ``parameter`` is the representation's fitted parameter (eps0 for pure_dp / epsilon_delta,
    rho* for zcdp, mu* for gdp, nan for the rdp curve) with its label ``parameter_bound``.
    """

    representation: str
    parameter_name: str
    parameter: float
    parameter_bound: str
    regret: float
    regret_lower: float
    regret_bound: str
    delta: float | None = None
    argmax_epsilon: float = math.nan
    orders: tuple[float, ...] | None = None
    note: str = ""

    def to_row(self) -> dict[str, Any]:
        """A flat JSON-ready dict (one row of the representation table)."""
        return {
            "representation": self.representation,
            "parameter_name": self.parameter_name,
            "parameter": self.parameter,
            "parameter_bound": self.parameter_bound,
            "delta": self.delta,
            "regret": self.regret,
            "regret_lower": self.regret_lower,
            "regret_bound": self.regret_bound,
            "argmax_epsilon": self.argmax_epsilon,
            "n_orders": None if self.orders is None else len(self.orders),
            "min_order": None if self.orders is None else min(self.orders),
            "max_order": None if self.orders is None else max(self.orders),
            "note": self.note,
        }


def mechanism_profile(report: Any) -> Callable[[np.ndarray], np.ndarray]:
    """The report's (pessimistic) profile delta(eps) as a vectorised callable on eps >= 0."""
    if report.exact:
        mu = float(report.mu)
        return lambda e: np.asarray(closed_form.get_delta_from_gdp(mu=mu, epsilon=np.asarray(e, float)))
    curve = report.curve("pessimistic")
    return lambda e: np.asarray(curve.delta_at(np.asarray(e, float)))


def _pair_profile(eps0: float, delta0: float) -> Callable[[np.ndarray], np.ndarray]:
    return lambda e: closed_form.epsilon_delta_profile(eps0, delta0, e)


def get_regret(
    report: Any,
    representation: str,
    *,
    delta: float | None = None,
    orders: Sequence[float] | np.ndarray | None = None,
    tol: float = 1e-9,
) -> RepresentationRegret:
    """Regret of ``representation`` for the mechanism of ``report`` (seed 000 Eq. 24, Fig. 1(c)).

    Args:
        report: a :class:`gdpcore.PrivacyReport`.
        representation: one of :data:`REPRESENTATIONS`.
        delta: required for ``"epsilon_delta"`` (the delta at which eps is stated), rejected otherwise.
        orders: RDP orders (> 1) for ``"rdp"`` and the CKS conversion of ``"zcdp"``; default :data:`DEFAULT_ORDERS`.
        tol: width of the certified regret bracket.
    """
    check_choice("representation", representation, REPRESENTATIONS)
    if representation == "epsilon_delta":
        if delta is None:
            raise ValueError("delta must be given for representation 'epsilon_delta', got None")
        delta = check_probability("delta", delta, high_open=True)
    elif delta is not None:
        raise ValueError(f"delta is only used by representation 'epsilon_delta', got delta={delta!r}")
    check_positive("tol", tol)
    t = _check_orders(orders)
    exact = bool(report.exact)
    regret_label = "exact" if exact else "estimate"
    param_label = "exact" if exact else "upper"
    mech = report.mechanism
    base = mechanism_profile(report)

    if representation == "gdp":
        lo, hi = report.gdp_regret_bracket
        return RepresentationRegret(
            representation="gdp",
            parameter_name="mu",
            parameter=float(report.mu),
            parameter_bound=param_label,
            regret=float(hi),
            regret_lower=float(lo),
            regret_bound=regret_label,
            note="mu* of Eq. 21 at FPR/FNR >= report.alpha_min",
        )

    orders_used: tuple[float, ...] | None = None
    note = ""
    if representation == "pure_dp":
        eps0 = get_epsilon_from_mechanism(mech)
        if math.isinf(eps0):
            return RepresentationRegret(
                representation="pure_dp",
                parameter_name="epsilon",
                parameter=math.inf,
                parameter_bound="exact",
                regret=math.inf,
                regret_lower=math.inf,
                regret_bound="exact",
                note="not pure DP: delta(eps) > 0 for every eps",
            )
        rep = _pair_profile(eps0, 0.0)
        name, param, plabel = "epsilon", eps0, "exact"
    elif representation == "epsilon_delta":
        assert delta is not None  # checked above
        eps0 = float(report.epsilon(delta))
        rep = _pair_profile(eps0, float(delta))
        name, param, plabel = "epsilon", eps0, param_label
    elif representation == "zcdp":
        rho, rlabel = get_rho_from_mechanism(mech)
        rep = _cks_profile(t, rho * t)
        name, param, plabel = "rho", rho, rlabel
        orders_used = tuple(float(x) for x in t)
        note = "rho* = sup_t eps(t)/t (analytic); profile = min over orders of CKS(t, rho* t, eps)"
    else:  # rdp
        rdp, plabel = get_rdp_and_label(mech, orders=t)
        rep = _cks_profile(t, rdp)
        name, param = "rdp_curve", math.nan
        orders_used = tuple(float(x) for x in t)
        note = f"CKS conversion over {t.size} orders in [{t.min():.6g}, {t.max():.6g}] (grid-dependent)"

    breakpoints = None if exact else report.curve("pessimistic").eps
    convex = representation in ("pure_dp", "epsilon_delta")
    lo, hi, arg = certified_sup(rep, base, tol=tol, lower_breakpoints=breakpoints, upper_convex=convex)
    return RepresentationRegret(
        representation=representation,
        parameter_name=name,
        parameter=float(param),
        parameter_bound=plabel,
        regret=float(hi),
        regret_lower=float(lo),
        regret_bound=regret_label,
        delta=delta,
        argmax_epsilon=arg,
        orders=orders_used,
        note=note,
    )


def _cks_profile(t: np.ndarray, rdp: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    t = np.asarray(t, float)
    r = np.asarray(rdp, float)
    return lambda e: np.asarray(get_delta_from_rdp(orders=t, rdp=r, epsilon=np.asarray(e, float)))


def get_representation_table(
    report: Any,
    *,
    delta: float = 1e-5,
    orders: Sequence[float] | np.ndarray | None = None,
    tol: float = 1e-9,
) -> list[dict[str, Any]]:
    """The full comparison of representations for one mechanism (seed 000 Fig. 1(c)), one dict row each.

    Rows, in order: pure_dp, epsilon_delta (at ``delta``), zcdp, rdp, gdp - each with parameter, regret bracket and
    bound labels (see :class:`RepresentationRegret`), ready to be stored as table rows by the pipeline.
    """
    rows = []
    for rep in REPRESENTATIONS:
        res = get_regret(report, rep, delta=delta if rep == "epsilon_delta" else None, orders=orders, tol=tol)
        row = res.to_row()
        row["mechanism_hash"] = report.mechanism.content_hash
        row["accountant"] = report.accountant
        rows.append(row)
    return rows
