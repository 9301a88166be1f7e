"""Single steps of the Poisson-subsampled Gaussian: connect-the-dots (pessimistic, both directions) and privacy
buckets rounded down with their Q-mass bounds (optimistic), vectorised from closed-form divergences.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy import optimize, special

from gdpcore._validation import check_count, check_discretization, check_positive, check_probability
from gdpcore.closed_form import get_log_delta_from_gdp
from gdpcore.pld.composition import compose_loss_pmf
from gdpcore.pmf import LossPMF

LOG_MASS_TRUNCATION_BOUND = -50.0
"""log of the noise mass cut from each tail of the single step (dp_accounting's default)."""

SINGLE_STEP_TAIL = 1e-16
"""Budget of a composition of ``horizon`` steps for the single steps' upper tails (a tenth of the composition's own
``TAIL_MASS_TRUNCATION``): a single step built for ``horizon`` steps ends where its tail beyond holds at most
``SINGLE_STEP_TAIL / horizon`` (:func:`_tail_top_loss`, :func:`_tail_top_x`), so that ``horizon`` of them hold at most
this much together.

Why: the noise truncation at e^-50 alone puts the top of a small-q single step far beyond where its mass matters
(sigma 0.5, q 1e-4: the grid runs to loss 12.3 while the tail beyond 7.1 holds 1e-17), and that top sets both the
single step's length and, through the log-MGF at large orders, how wide the T-fold Chernoff window is. Validity does
not depend on where the grid ends: connect-the-dots on any finite grid is pessimistic, with delta at its top as mass at
+infinity (Doroshenko et al. 2022, Alg. 1; the value is computed, not assumed), and privacy buckets rounded down stay
optimistic whatever mass the top bucket takes in. Measured in docs/engine-measurements.md."""


# the extended transform's longdouble input (16) and clongdouble half spectrum (16) and its rounded copy (8)


def _log_delta_gauss(sigma: float, eps: np.ndarray) -> np.ndarray:
    return get_log_delta_from_gdp(mu=1.0 / sigma, epsilon=eps)


def horizon_bucket(horizon: int | None) -> int | None:
    """``horizon`` rounded up to a power of ten (None stays None): the horizon single steps are built for, so that
    compositions of 11 to 100 steps share theirs."""
    if horizon is None:
        return None
    horizon = check_count("horizon", horizon)
    bucket = 1
    while bucket < horizon:
        bucket *= 10
    return bucket


def _tail_mass(horizon: int | None) -> float | None:
    """Per-step upper-tail budget of a single step built for ``horizon`` compositions, the horizon rounded up to a
    power of ten (:func:`horizon_bucket`); None: no horizon, the noise truncation only."""
    bucket = horizon_bucket(horizon)
    return None if bucket is None else SINGLE_STEP_TAIL / bucket


@functools.lru_cache(maxsize=1024)
def _tail_top_loss(sigma: float, q: float, eta: float) -> float:
    """The smallest loss at which the remove pair's hockey-stick divergence is at most ``eta``.

    delta(eps) = q delta_G(l0) with e^l0 = (e^eps - 1 + q) / q and delta_G the Gaussian profile at mu = 1 / sigma
    (:func:`_deltas`), decreasing in eps: the root of log delta_G(l0) = log(eta / q) in l0 is mapped back,
    eps = log(1 - q + q e^l0). Any grid top is valid (the divergence there goes to +infinity); the root only sets how
    short the grid is, so it is solved to a loose tolerance and rounded up by the caller."""
    target = math.log(eta / q)

    def f(l0: float) -> float:
        return float(_log_delta_gauss(sigma, np.array([l0]))[0]) - target

    lo, hi = 0.0, 1.0
    if f(lo) <= 0.0:
        return 0.0
    while f(hi) > 0.0:
        lo, hi = hi, 2.0 * hi
    l0 = optimize.brentq(f, lo, hi, xtol=1e-9, rtol=1e-12)
    log1mq = math.log1p(-q) if q < 1 else -math.inf
    return float(np.logaddexp(log1mq, math.log(q) + l0))


def _grid_bounds(sigma: float, q: float, step: float, direction: str, eta: float | None = None) -> tuple[int, int]:
    """dp_accounting's connect-the-dots epsilon range: losses at the noise truncation points, rounded outwards; with a
    tail budget ``eta`` (remove direction) the top is lowered to where delta is at most ``eta``
    (``SINGLE_STEP_TAIL``)."""
    x_low = float(special.ndtri(0.5 * math.exp(LOG_MASS_TRUNCATION_BOUND))) * sigma
    x_high = -x_low
    log1mq = math.log1p(-q) if q < 1 else -math.inf
    log_q = math.log(q)
    if direction == "remove":
        x_low -= 1.0

        def loss(x: float) -> float:  # log((1-q) + q e^{l0(x)}), l0(x) = (-1/2 - x) / sigma^2
            return float(np.logaddexp(log1mq, log_q + (-0.5 - x) / sigma**2))

    else:
        x_high += 1.0

        def loss(x: float) -> float:  # -log((1-q) + q e^{(x - 1/2) / sigma^2})
            return -float(np.logaddexp(log1mq, log_q + (x - 0.5) / sigma**2))

    lo, hi = math.floor(loss(x_high) / step), math.ceil(loss(x_low) / step)
    if eta is not None and direction == "remove":
        hi = max(lo, min(hi, math.ceil(_tail_top_loss(sigma, q, eta) / step)))
    return lo, hi


def _deltas(sigma: float, q: float, eps: np.ndarray, direction: str) -> np.ndarray:
    """Exact hockey-stick divergence of one subsampled-Gaussian step at each eps (see the module docstring)."""
    out = np.zeros_like(eps)
    if direction == "remove":
        # e^l0 = (e^eps - 1 + q) / q, defined where e^eps > 1 - q.
        base = np.expm1(eps) + q
        inside = base > 0
        with np.errstate(divide="ignore"):
            l0 = np.log(base[inside]) - math.log(q)
        out[inside] = q * np.exp(_log_delta_gauss(sigma, l0))
        out[~inside] = -np.expm1(eps[~inside])
    else:
        # c = 1 - (1-q) e^eps, defined (positive) where e^eps < 1/(1-q); the divergence is 0 above.
        log1mq = math.log1p(-q) if q < 1 else -math.inf
        c = -np.expm1(log1mq + eps)
        inside = c > 0
        e_prime = eps[inside] + math.log(q) - np.log(c[inside])
        out[inside] = c[inside] * np.exp(_log_delta_gauss(sigma, e_prime))
    return np.clip(out, 0.0, 1.0)


def _connect_the_dots(deltas: np.ndarray, step: float) -> tuple[np.ndarray, float]:
    """Doroshenko et al. 2022 Alg. 1 on a fixed-gap grid (dp_accounting's fixed-gap formula, vectorised)."""
    deltas = np.minimum.accumulate(deltas)
    if deltas.size == 1:
        return np.array([1.0 - deltas[0]]), float(deltas[0])
    diffs = np.diff(deltas)
    em1 = math.expm1(step)
    probs = np.empty_like(deltas)
    probs[0] = 1.0 - deltas[0] + diffs[0] / em1
    probs[1:-1] = (diffs[1:] - diffs[:-1] * math.exp(step)) / em1
    probs[-1] = diffs[-1] / math.expm1(-step)
    return np.maximum(probs, 0.0), float(deltas[-1])


def single_step_pld(
    *,
    noise_multiplier: float,
    sampling_rate: float,
    discretization: float,
    direction: str = "remove",
    horizon: int | None = None,
) -> LossPMF:
    """Pessimistic (connect-the-dots) single-step PMF of the Poisson-subsampled Gaussian, one direction.

    The grid, noise truncation and formula are dp_accounting's ``from_gaussian_mechanism(sigma, sampling_prob=q,
    use_connect_dots=True)``; only the divergences are computed in closed form and all of it is vectorised. With a
    ``horizon`` (the number of steps it will be composed, at most) the remove grid ends where its divergence is at
    most ``SINGLE_STEP_TAIL / horizon`` (that delta is its mass at +infinity).
    """
    sigma = check_positive("noise_multiplier", noise_multiplier)
    q = check_probability("sampling_rate", sampling_rate)
    step = check_discretization(discretization)
    if direction not in ("remove", "add"):
        raise ValueError(f"direction must be 'remove' or 'add', got {direction!r}")
    lo, hi = _grid_bounds(sigma, q, step, direction, _tail_mass(horizon))
    eps = np.arange(lo, hi + 1) * step
    probs, inf_mass = _connect_the_dots(_deltas(sigma, q, eps, direction), step)
    return LossPMF(lower_index=lo, step=step, probs=_restore_mass(probs, inf_mass), infinity_mass=inf_mass)


def _restore_mass(probs: np.ndarray, inf_mass: float) -> np.ndarray:
    """Connect-the-dots masses scaled up to their exact total 1 - inf_mass when rounding left them short.

    The formula's second differences of delta telescope to 1 - delta(top) in exact arithmetic; in float64 their sum
    comes out up to ~2e-14 short (n u, with n ~ 1e4-1e5 atoms). A T-fold composition multiplies that deficit by T
    (2.9e-10 at T = 60,614), and a pessimistic curve then misses that much mass: its delta(0) fell below a proven
    lower bound (the twin, :func:`threshold_test_masses`) by 2.3e-10 on sigma 0.8909, q 0.02901. The rounding
    errors sit where the atoms are large (the bulk), so the deficit is restored in proportion; a total above the
    exact one (rounding the other way) only raises delta and is kept."""
    total = math.fsum(probs)
    target = 1.0 - inf_mass
    if 0.0 < total < target:
        return probs * (target / total)
    return probs


def single_step_length(
    *, noise_multiplier: float, sampling_rate: float, discretization: float, horizon: int | None = None
) -> int:
    """Number of grid points of the single-step remove PMF, in closed form (before anything is allocated)."""
    sigma = check_positive("noise_multiplier", noise_multiplier)
    q = check_probability("sampling_rate", sampling_rate)
    lo, hi = _grid_bounds(sigma, q, check_discretization(discretization), "remove", _tail_mass(horizon))
    return hi - lo + 1


# -- optimistic twin: privacy buckets rounded down (a lower bound, for the ``*_lower`` columns only) ---------------


@functools.lru_cache(maxsize=1024)
def _tail_top_x(sigma: float, q: float, eta: float) -> float:
    """The point x above which P = (1-q) N(0, s^2) + q N(1, s^2) holds ``eta``: the root of
    log((1-q) Phi(-x/s) + q Phi((1-x)/s)) = log(eta), decreasing in x (see :func:`_optimistic_remove_probs`)."""
    target = math.log(eta)
    log1mq = math.log1p(-q)
    log_q = math.log(q)

    def f(x: float) -> float:
        return float(np.logaddexp(log1mq + special.log_ndtr(-x / sigma), log_q + special.log_ndtr((1.0 - x) / sigma)))

    lo, hi = 0.5, 1.5
    while f(hi) - target > 0.0:
        lo, hi = hi, hi + 2.0 * (hi - 0.5)
    return float(optimize.brentq(lambda x: f(x) - target, lo, hi, xtol=1e-9, rtol=1e-12))


def _optimistic_x_range(sigma: float, q: float, eta: float | None) -> tuple[float, float]:
    """(x_low, x_high) of the optimistic remove PMF: the noise truncation points, x_high lowered to where the upper
    tail holds ``eta`` (``SINGLE_STEP_TAIL``); mass below x_low is discarded, above x_high rounded into the top."""
    z = float(special.ndtri(0.5 * math.exp(LOG_MASS_TRUNCATION_BOUND)))
    x_high = -z * sigma + 1.0
    if eta is not None:
        x_high = min(x_high, max(_tail_top_x(sigma, q, eta), 0.5))
    return z * sigma, x_high


def _optimistic_bounds(sigma: float, q: float, step: float, eta: float | None = None) -> tuple[int, int]:
    """(lowest, highest) bucket index of the optimistic remove PMF: losses at the truncation points, rounded down."""
    x_low, x_high = _optimistic_x_range(sigma, q, eta)
    log1mq = math.log1p(-q)
    log_q = math.log(q)

    def loss(x: float) -> float:
        return float(np.logaddexp(log1mq, log_q + (x - 0.5) / sigma**2))

    return math.floor(loss(x_low) / step), math.floor(loss(x_high) / step)


def optimistic_single_step_length(
    *, noise_multiplier: float, sampling_rate: float, discretization: float, horizon: int | None = None
) -> int:
    """Number of buckets of :func:`optimistic_single_step_pld`, in closed form (before anything is allocated)."""
    sigma = check_positive("noise_multiplier", noise_multiplier)
    q = check_probability("sampling_rate", sampling_rate)
    lo, hi = _optimistic_bounds(sigma, q, check_discretization(discretization), _tail_mass(horizon))
    return hi - lo + 1


def _optimistic_remove_probs(
    sigma: float, q: float, step: float, eta: float | None = None
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(lowest index, P-mass per loss bucket) of dp_accounting's optimistic privacy-buckets remove PMF.

    Mirror image of dp_accounting's convention: P = (1-q) N(0, s^2) + q N(1, s^2), Q = N(0, s^2), loss
    L(x) = log(1 - q + q e^{(2x - 1) / (2 s^2)}), increasing in x with inverse
    L^{-1}(l) = s^2 log((e^l - 1 + q) / q) + 1/2 (for e^l > 1 - q). The P-mass of x in [L^{-1}(k d), L^{-1}((k+1) d))
    is a difference of the mixture's closed-form CDF (or survival function in the upper half, for relative
    precision) and all of it goes to the lower end k d. Truncation as dp_accounting's optimistic
    ``privacy_loss_tail``: the mass beyond the upper truncation point (largest losses) goes to the top bucket; the
    mass below the lower one (smallest losses) is discarded. With a tail budget ``eta`` the upper truncation point is
    where the upper tail holds ``eta`` (:func:`_optimistic_x_range`).
    """
    # below x_low: discarded (losses near log(1-q)); above x_high: rounded down into the top bucket
    x_low, x_high = _optimistic_x_range(sigma, q, eta)
    log_q = math.log(q)
    k_low, k_top = _optimistic_bounds(sigma, q, step, eta)
    ks = np.arange(k_low + 1, k_top + 1)  # interior bucket boundaries k d, k_low < k <= k_top
    with np.errstate(divide="ignore"):
        # e^{kd} - 1 + q > 0 for k > k_low, since k d > L(x_low) > log(1 - q).
        xb = sigma**2 * (np.log(np.expm1(ks * step) + q) - log_q) + 0.5
    xb = np.clip(xb, x_low, x_high)
    edges = np.concatenate([[x_low], xb, [math.inf]])  # bucket k_low + i is [edges[i], edges[i + 1])
    upper = edges > 0.5
    # Each normal CDF is evaluated once over the edges and shared by the P and Q masses below.
    ndtr_lo = special.ndtr(edges / sigma)
    ndtr_hi = special.ndtr(-edges / sigma)
    cdf = np.where(upper, 0.0, (1.0 - q) * ndtr_lo + q * special.ndtr((edges - 1.0) / sigma))
    sf = np.where(upper, (1.0 - q) * ndtr_hi + q * special.ndtr((1.0 - edges) / sigma), 0.0)
    # mass = F(b) - F(a) in the lower half, S(a) - S(b) in the upper half; F(0.5) + S(0.5) = 1 joins them.
    f_mid = (1.0 - q) * special.ndtr(0.5 / sigma) + q * special.ndtr(-0.5 / sigma)
    a_up, b_up = upper[:-1], upper[1:]
    probs = np.where(
        b_up & a_up,
        sf[:-1] - sf[1:],
        np.where(~b_up, cdf[1:] - cdf[:-1], (f_mid - cdf[:-1]) + ((1.0 - f_mid) - sf[1:])),
    )
    # Q = N(0, s^2) mass of the same x-intervals, the same way.
    q_cdf = np.where(upper, 0.0, ndtr_lo)
    q_sf = np.where(upper, ndtr_hi, 0.0)
    g_mid = float(special.ndtr(0.5 / sigma))
    q_probs = np.where(
        b_up & a_up,
        q_sf[:-1] - q_sf[1:],
        np.where(~b_up, q_cdf[1:] - q_cdf[:-1], (g_mid - q_cdf[:-1]) + ((1.0 - g_mid) - q_sf[1:])),
    )
    p_mag = np.where(upper, sf, cdf)
    q_mag = np.where(upper, q_sf, q_cdf)
    straddle = ~a_up & b_up
    p_mag_k = np.where(straddle, 1.0, p_mag[:-1] + p_mag[1:])
    q_mag_k = np.where(straddle, 1.0, q_mag[:-1] + q_mag[1:])
    return k_low, np.maximum(probs, 0.0), np.maximum(q_probs, 0.0), p_mag_k, q_mag_k


def _residual_lower_bounds(k_low, probs, q_probs, p_mag, q_mag, step) -> np.ndarray:
    """Per bucket, a lower bound in [0, d] on its loss residual r_k = l_k - k d.

    Bucketing the output by loss bucket is post-processing, so the pair (P_k, Q_k) is dominated by the mechanism
    (data processing); its loss l_k = log(P_k / Q_k) lies in [k d, (k+1) d) (top bucket: >= k d) and privacy
    buckets round it down to k d. Lower bounds only: r_k is lowered by the propagated round-off of P_k and Q_k
    (each CDF value's error taken as 1e-15 of its magnitude ``*_mag``), set to 0 where that is not small, and
    clipped to [0, d]. They bound each bucket's Q-mass from above: Q_k = P_k e^{-k d - r_k} with P_k raised by its
    own round-off (``LossPMF.bucket_q_weights``, :func:`threshold_test_masses`)."""
    ks = k_low + np.arange(probs.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = 1e-15 * (p_mag / probs + q_mag / q_probs)
        r = np.log(probs) - np.log(q_probs) - ks * step - 2.0 * rel - 1e-12 * (1.0 + np.abs(ks * step))
    r = np.where((probs > 0) & (q_probs > 0) & (rel < 1e-3) & np.isfinite(r), r, 0.0)
    return np.clip(r, 0.0, step)


def optimistic_single_step_pld(
    *, noise_multiplier: float, sampling_rate: float, discretization: float, horizon: int | None = None
):
    """Optimistic (privacy buckets, rounded down) single-step remove PMF of the Poisson-subsampled Gaussian.

    dp_accounting's ``from_gaussian_mechanism(..., pessimistic_estimate=False, use_connect_dots=False)`` remove PMF,
    vectorised. Every loss is rounded *down* and the smallest-loss tail dropped, so delta(eps) of this PMF - and of
    its compositions - is a lower bound on the mechanism's: use it for the lower ends of brackets only. Its error is
    first order (about T * d / 2 in epsilon after T steps), against second order for connect-the-dots. With a
    ``horizon`` the top bucket starts where the upper tail holds ``SINGLE_STEP_TAIL / horizon``.
    """
    sigma = check_positive("noise_multiplier", noise_multiplier)
    q = check_probability("sampling_rate", sampling_rate)
    step = check_discretization(discretization)
    if not q < 1:
        raise ValueError(f"sampling_rate must be < 1 for the optimistic builder, got {sampling_rate!r}")
    lo, probs, q_probs, p_mag, q_mag = _optimistic_remove_probs(sigma, q, step, _tail_mass(horizon))
    r = _residual_lower_bounds(lo, probs, q_probs, p_mag, q_mag, step)
    single = LossPMF(
        lower_index=lo,
        step=step,
        probs=probs,
        infinity_mass=0.0,
        pessimistic=False,
        bucket_q_weights=(probs + 1e-15 * p_mag) * np.exp(-r),
    )
    single.cached("bucket_residual_mean", lambda: float(np.sum(probs * r)) / max(float(probs.sum()), 1e-300))
    return single


def single_step(
    noise_multiplier: float,
    sampling_rate: float,
    discretization: float,
    *,
    side: str = "pessimistic",
    direction: str = "remove",
    horizon: int | None = None,
) -> LossPMF:
    """The one single-step builder of the Poisson-subsampled Gaussian: :func:`single_step_pld` in ``direction``
    (connect-the-dots) if ``side`` is "pessimistic", else :func:`optimistic_single_step_pld` (privacy buckets, remove
    direction: a lower bound on the remove profile is one on the mechanism's, so ``direction`` is not read). A
    ``horizon`` (most steps it will be composed) shortens the remove grids' upper tails (``SINGLE_STEP_TAIL``)."""
    if side == "pessimistic":
        return single_step_pld(
            noise_multiplier=noise_multiplier,
            sampling_rate=sampling_rate,
            discretization=discretization,
            direction=direction,
            horizon=horizon,
        )
    return optimistic_single_step_pld(
        noise_multiplier=noise_multiplier, sampling_rate=sampling_rate, discretization=discretization, horizon=horizon
    )


def subsampled_gaussian_loss_pmf(
    *,
    noise_multiplier: float,
    sampling_rate: float,
    steps: int,
    discretization: float,
    pessimistic: bool = True,
    include_add: bool = True,
) -> tuple[LossPMF, LossPMF | None]:
    """(remove PMF, add PMF or None) of ``steps`` compositions of the Poisson-subsampled Gaussian.

    Drop-in for ``loss_pmfs(build_pld(SubsampledGaussian(...), discretization=d), pessimistic=True)``: the same
    connect-the-dots construction, built vectorised (see the module docstring). The add PMF is None when
    ``sampling_rate == 1`` (symmetric) or ``include_add`` is False. Only the pessimistic construction exists:
    ``pessimistic=False`` raises.
    """
    if pessimistic is not True:
        raise ValueError(f"pessimistic must be True (only connect-the-dots is implemented), got {pessimistic!r}")
    steps = check_count("steps", steps)

    def one(direction: str) -> LossPMF:
        return single_step_pld(
            noise_multiplier=noise_multiplier,
            sampling_rate=sampling_rate,
            discretization=discretization,
            direction=direction,
        )

    remove = compose_loss_pmf(one("remove"), steps)
    if not include_add or float(sampling_rate) == 1.0:
        return remove, None
    add = compose_loss_pmf(one("add"), steps)
    return remove, add
