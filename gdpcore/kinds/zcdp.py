"""(xi, rho)-zCDP statements (Bun & Steinke 2016): upper bounds only, their PLD the tightest profile they imply.
Registered by :mod:`gdpcore.kinds`."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.rdp import rdp_privacy_accountant

from gdpcore.closed_form import cks_log_delta, get_delta_from_rdp
from gdpcore.curve import curve_from_profile
from gdpcore.kinds import dp_events
from gdpcore.kinds._common import NOT_PURE, log_uniform, relation
from gdpcore.kinds.registry import KindSpec, Unsupported, UnsupportedMechanismError
from gdpcore.mechanisms import ZCDP

__all__ = ["ZCDP_STATEMENT"]

# -- rho-zCDP statements (upper bounds only) ---------------------------------------------------------------------------
_ZCDP_ORDERS = np.union1d(1.0 + np.geomspace(1e-3, 1e4, 400), rdp_privacy_accountant.DEFAULT_RDP_ORDERS)
"""A geometric grid of orders and dp_accounting's default orders: the profile is the minimum of the conversion over
all of them, so it is never above the conversion dp_accounting's RDP accountant makes at its orders."""
_ZCDP_DELTA_FLOOR = 1e-30  # the profile is carried down to this delta; the rest is put at +inf loss (pessimistic)


def _best_order_log_delta(m: ZCDP, eps: np.ndarray) -> np.ndarray:
    """The conversion at the best order for each eps, not only at grid orders: for RDP xi + rho t the log of
    Canonne-Kamath-Steinke's bound (:func:`gdpcore.closed_form.cks_log_delta`) is convex in t, with derivative
    g(t) = xi + rho (2t - 1) - eps + log(1 - 1/t), increasing from -inf to +inf: its root, found by bisection on
    log(t - 1), is the best order. Any order gives a valid bound, so the result is one whatever the bisection's
    precision; it is below dp_accounting's conversion at its grid of orders (where the root lies between them)."""
    lo = np.full(eps.shape, -40.0)
    hi = np.full(eps.shape, 40.0)
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        t = 1.0 + np.exp(mid)
        up = m.xi + m.rho * (2.0 * t - 1.0) - eps + np.log1p(-1.0 / t) > 0
        lo, hi = np.where(up, lo, mid), np.where(up, mid, hi)
    t = 1.0 + np.exp(0.5 * (lo + hi))
    return cks_log_delta(t, m.xi + m.rho * t, eps)


def _zcdp_profile_pld(m: ZCDP, *, step: float, pessimistic: bool) -> pld_lib.PrivacyLossDistribution:
    """The pessimistic PLD of a (xi, rho)-zCDP statement: the tightest profile the statement implies, as a PMF.

    Every order t gives delta(eps) <= exp((t-1)(xi + rho t - eps + log(1 - 1/t)) - log t) (Canonne, Kamath, Steinke
    2020 Prop. 12; :func:`gdpcore.closed_form.get_delta_from_rdp`), so the true profile lies below the minimum
    over a grid of orders, sampled at eps_k = k * step. A privacy profile is convex in v = e^eps, hence below the
    greatest convex minorant H of those samples (the lower convex hull of the points (v_k, delta_k)), which is
    piecewise linear with vertices on the grid. H is the profile of the PMF with mass v_k (s_k - s_(k-1)) at loss
    eps_k (s_k the slopes of H in v) and H(v_K) at +inf: a valid pessimistic PLD whose delta(eps) >= the true
    delta(eps) for every mechanism satisfying the statement. There is no optimistic side: many mechanisms satisfy
    one statement (Bun & Steinke 2016), so lower ends are unavailable.
    """
    if not pessimistic:
        raise UnsupportedMechanismError(
            "a zCDP statement is an upper bound satisfied by many mechanisms: its lower ends are unavailable"
        )
    rdp = m.xi + m.rho * _ZCDP_ORDERS
    # Largest eps needed: Bun & Steinke 2016 Prop. 1.3 at the floor (an upper bound on the eps the profile reaches it).
    e_max = m.xi + m.rho + 2.0 * math.sqrt(m.rho * math.log(1.0 / _ZCDP_DELTA_FLOOR))
    k = np.arange(int(math.ceil(e_max / step)) + 1)
    eps = k * step
    delta = np.asarray(get_delta_from_rdp(orders=_ZCDP_ORDERS, rdp=rdp, epsilon=eps, total_variation=True), dtype=float)
    delta = np.minimum(delta, np.exp(np.minimum(_best_order_log_delta(m, eps), 0.0)))
    v = np.exp(eps)
    hull: list[int] = []  # lower convex hull (Andrew's monotone chain) of (v, delta), v increasing
    for i in range(v.size):
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            if (delta[b] - delta[a]) * (v[i] - v[a]) >= (delta[i] - delta[a]) * (v[b] - v[a]):
                hull.pop()
            else:
                break
        hull.append(i)
    idx = np.asarray(hull)
    # The symmetric curve of those supporting lines and their mirrors (valid: the statement holds in both directions;
    # seed 000 Thm A.9), then the symmetric pair that realises it: segment i of the curve, slope -e^l, is an atom of
    # P-mass -d(beta) at loss l (Q-mass d(alpha)); the P-mass at alpha = 0 is the +inf atom. Losses are rounded up to
    # the grid (P-mass moved to a larger loss only raises delta: pessimistic).
    curve = curve_from_profile(eps[idx], delta[idx])
    alphas, betas = curve.breakpoints()
    d_alpha, d_beta = np.diff(alphas), -np.diff(betas)
    # Below the fixed point the vertices are the curve's own (breakpoints() starts with them): there the beta steps
    # are taken from 1 - beta (``tail``) directly, accurate where beta is within 1e-9 of 1 (the losses that matter;
    # from 1 - (1 - tail) their losses were off by up to 1e-3 and so rounded a step or more up: 5e-5 on eps at
    # delta 1e-9 for rho = 12).
    n = int(np.count_nonzero(curve.alpha < curve.fixed_point))
    d_beta[: max(n - 1, 0)] = np.diff(curve.tail[curve.alpha < curve.fixed_point])
    seg = (d_alpha > 0) & (d_beta > 0)
    losses = np.log(d_beta[seg]) - np.log(d_alpha[seg])
    pmf: dict[int, float] = {}
    for loss, mass in zip(np.ceil(losses / step).astype(int), d_beta[seg], strict=True):
        pmf[int(loss)] = pmf.get(int(loss), 0.0) + float(mass)
    infinity = float(max(1.0 - betas[0], 0.0))
    return pld_lib.PrivacyLossDistribution.create_from_rounded_probability(
        pmf, infinity, step, pessimistic_estimate=True, symmetric=True
    )


ZCDP_STATEMENT = KindSpec(
    cls=ZCDP,
    summary="a (xi, rho)-zCDP statement (Bun & Steinke 2016): its curve is an upper bound, lower ends unavailable",
    draw=lambda rng: ZCDP(
        rho=log_uniform(rng, 0.01, 2.0),
        xi=0.0 if rng.uniform() < 0.7 else log_uniform(rng, 1e-3, 0.1),
        neighbouring=relation(rng),
    ),
    pld=_zcdp_profile_pld,
    pure_epsilon=lambda m: NOT_PURE,
    rdp=lambda m, t: (m.xi + m.rho * t, "upper"),
    # sup_t (xi + rho t)/t = xi + rho, approached as t -> 1.
    rho=lambda m: (m.xi + m.rho, "upper", "one" if m.xi > 0 else "any"),
    to_dp_event=lambda m: dp_accounting.ZCDpEvent(m.rho, m.xi),
    from_dp_event=dp_events.zcdp_from_event,
    exact_mu=lambda m: None,
    clt_mu_squared=Unsupported("a zCDP statement has no central-limit mu"),
    gdp_upper_bound=Unsupported("rho-zCDP does not imply mu-GDP for any mu"),
    subsampled_gaussian_phases=Unsupported("a zCDP statement is not a Poisson-subsampled Gaussian"),
)
