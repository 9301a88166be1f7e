"""A proven, amplified upper bound for balls-in-bins batches (random allocation of 1 of T steps per epoch).

The mechanism (:class:`gdpcore.kinds.samplers.BallsInBinsGaussian`): every epoch each example is placed in one
uniformly chosen step of T = ``steps_per_epoch``, independently; each step releases its batch's clipped sum plus
N(0, sigma^2) noise (sigma = ``noise_multiplier``, in units of the clipping norm, which cancels).

**The dominating pair.** One epoch under add/remove (the differing example zeroed out) is dominated by

    remove: P = (1/T) sum_t N(e_t, sigma^2 I_T) against Q = N(0, sigma^2 I_T);   add: (Q, P),

the tightly dominating pair (P_B, Q_B) Chua et al. identify for ABLQ_B, adaptive queries included ("Balls-and-Bins
Sampling for DP-SGD", AISTATS 2025, arXiv 2412.16802); Feldman and Shenfeld ("Privacy amplification by random
allocation", 2025, arXiv 2502.08202) reduce random allocation over adaptive steps, each dominated by
(N(1, sigma^2), N(0, sigma^2)), to the allocation of that non-adaptive pair in the same way. Epochs draw independent
allocations, so ``epochs`` epochs are an adaptive composition of such epochs, dominated by the product pair (Zhu,
Dong and Wang 2022, Thm. 10), which is what the engine composes.

**Remove direction: exact Renyi divergence at integer orders.** With Y_t = exp((x_t - 1/2)/sigma^2), x ~ Q,
P/Q(x) = (1/T) sum_t Y_t, the Y_t independent with E[Y^k] = exp(k(k-1)/(2 sigma^2)). For an integer order a,

    E_Q[(P/Q)^a] = T^-a E[(Y_1 + ... + Y_T)^a] = T^-a a! [z^a] (sum_k E[Y^k] z^k / k!)^T,

the multinomial expansion of the a-th moment of a sum of i.i.d. variables (the sum over partitions of a into at most
T parts of Feldman and Shenfeld 2025, Cor. 6.2, Gaussian case, written as a power of a truncated exponential
generating function). Every coefficient is positive, so the power is computed in log space by repeated squaring
without cancellation (:func:`remove_log_moments`); D_a(P||Q) = log E_Q[(P/Q)^a] / (a - 1) exactly. A non-integer
order is bounded by the next integer (D_a is non-decreasing in a); orders above :data:`MAX_ORDER` are not used.

**Add direction: a pointwise bound.** The loss log(Q/P)(x) = -log((1/T) sum_t Y_t) <= -(1/T) sum_t log Y_t
(Jensen: the log of a mean is at least the mean of the logs) = 1/(2 sigma^2) - (1/(T sigma^2)) sum_t x_t. Under Q
that is N(1/(2 sigma^2), 1/(T sigma^2)): the loss of a Gaussian mechanism with mu_1 = 1/(sigma sqrt T), whose law
is N(mu_1^2/2, mu_1^2), shifted up by c = (1 - 1/T)/(2 sigma^2). delta(eps) = E_Q[(1 - e^(eps - L))_+] is
non-decreasing in the loss, so delta_add(eps) <= delta_{mu_1}(eps - c) (Dong, Roth and Su 2022, Cor. 2.13), and
D_a(Q||P) <= c + a mu_1^2 / 2 (the Gaussian's moment generating function). The shift is the same additive term as
Feldman and Shenfeld 2025's add-direction bound. A second bound, through the lower tail of S = (1/T) sum_t Y_t
(E S = 1): delta_add(eps) = E_Q[(1 - e^eps S)_+] = e^eps int_0^(e^-eps) Pr[S <= s] ds, and for a mean of T
independent non-negative variables Pr[S <= 1 - u] <= exp(-T u^2 / (2 E[Y^2])) (Maurer 2003, "A bound on the
deviation probability for sums of non-negative random variables", Thm. 1), E[Y^2] = e^(1/sigma^2): a Gaussian
integral in closed form (:func:`add_tail_delta`). The add direction's profile is the smaller of the two.

**What the kind reports.** Both the cyclic guarantee (:mod:`gdpcore.kinds.samplers`: every fixed allocation is a
cyclic run, exactly (1/sigma)-GDP per epoch, and the allocation is data-independent) and the bound above are upper
bounds on one epoch's privacy profile, so their pointwise minimum is one:

    delta_epoch(eps) <= min(delta_{1/sigma}(eps), max(delta_remove_RDP(eps), min(delta_{mu_1}(eps - c), tail(eps)))),

delta_remove_RDP the RDP curve's profile by the project's one conversion
(:func:`gdpcore.closed_form.get_delta_from_rdp`, Canonne, Kamath and Steinke 2020, Prop. 12, and the
total-variation bound). On a fine epsilon grid this is a privacy profile, turned into its symmetric discrete pair
(:func:`gdpcore.kinds.curves.profile_pair`: the weakest trade-off curve the grid's (eps, delta) statements allow, a
lower bound on the epoch's trade-off function, hence a pair that dominates the epoch) whose losses the engine
rounds up onto its lattice and composes over epochs. Every number of the report's pessimistic end is therefore a
proven upper bound, never above the cyclic one by more than the grid's rounding (:data:`GRID_STEP`), and
:data:`UPPER_LABEL` says which bounds it is the minimum of. When the amplified profile improves on the cyclic one
nowhere on the grid (small sigma), the epoch's PLD is the cyclic Gaussian's own construction.

The RDP hook is the same minimum at each order: min(a/(2 sigma^2), max(D_a remove, c + a mu_1^2/2)) per epoch.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy import special

from gdpcore import closed_form
from gdpcore.kinds.curves import MAX_EPSILON, DiscretePair, profile_pair
from gdpcore.kinds.curves import _pld as discrete_pair_pld

__all__ = [
    "CYCLIC_LABEL",
    "GRID_STEP",
    "MAX_ORDER",
    "UPPER_LABEL",
    "add_rdp_bound",
    "add_shift",
    "add_tail_delta",
    "epoch_pair",
    "epoch_profile",
    "epoch_rdp",
    "remove_log_moments",
    "remove_rdp",
    "upper_label",
]

MAX_ORDER = 256
"""Largest integer Renyi order whose remove-direction divergence is computed (the orders 2..MAX_ORDER are used)."""

ORDERS = np.arange(2, MAX_ORDER + 1, dtype=float)

_ROUNDING_SLACK = 1e-13
"""Relative slack added to each log moment for floating-point error (about 450 ulps of the terms' magnitudes)."""

GRID_STEP = 2e-3
"""Spacing of the epsilon grid on which one epoch's profile is turned into a discrete pair."""

_TAIL_Z = 12.0
"""The grid ends at eps = mu^2/2 + _TAIL_Z mu (mu = 1/sigma), where the cyclic delta is below Phi(-12) ~ 1.8e-33: the
discrete pair's +inf mass, composed over epochs, stays far below every delta the engine reads."""


UPPER_LABEL = (
    "upper (proven: the smaller of the cyclic guarantee and the random-allocation bound of Feldman and Shenfeld"
    " 2025 / Chua et al. 2025's dominating pair)"
)
CYCLIC_LABEL = "upper (proven: the cyclic guarantee; the random-allocation bound improves on it nowhere here)"


def _log_conv(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """log of the coefficients of (sum_k e^u_k z^k)(sum_k e^v_k z^k), truncated to len(u) terms: row j of the
    matrix holds u_i + v_(j-i) for i <= j (-inf elsewhere), reduced by logsumexp per row."""
    n = u.size
    j, i = np.indices((n, n))
    terms = np.where(i <= j, u[i] + v[np.maximum(j - i, 0)], -np.inf)
    return special.logsumexp(terms, axis=1)


@functools.lru_cache(maxsize=128)
def remove_log_moments(sigma: float, steps: int) -> np.ndarray:
    """log E_Q[(P/Q)^a] for a = 0, 1, ..., MAX_ORDER, the remove-direction pair of one epoch (module docstring):
    T^-a a! [z^a] g(z)^T with g(z) = sum_k exp(k(k-1)/(2 sigma^2)) z^k / k!, in log space."""
    k = np.arange(MAX_ORDER + 1, dtype=float)
    log_g = k * (k - 1.0) / (2.0 * sigma * sigma) - special.gammaln(k + 1.0)
    result = np.full(k.size, -np.inf)
    result[0] = 0.0
    base, n = log_g, int(steps)
    while n:
        if n & 1:
            result = _log_conv(result, base)
        n >>= 1
        if n:
            base = _log_conv(base, base)
    log_factorial = special.gammaln(k + 1.0)
    out = log_factorial + result - k * math.log(steps)
    # Floating-point slack, added (never optimistic): the three terms are each computed to a few ulps of their size
    # (the log-space products add ~1 ulp per level of the squaring); _ROUNDING_SLACK of their magnitudes covers it.
    out = out + _ROUNDING_SLACK * (log_factorial + np.abs(result) + k * math.log(steps) + 1.0)
    out[0] = 0.0
    out.setflags(write=False)
    return out


def remove_rdp(sigma: float, steps: int, orders: Any) -> np.ndarray:
    """D_a(P||Q) of one epoch's remove-direction pair: exact at integer orders 2..MAX_ORDER, the next integer's value
    at a non-integer order (D_a is non-decreasing in a), +inf above MAX_ORDER."""
    t = np.asarray(orders, dtype=float)
    logm = remove_log_moments(float(sigma), int(steps))
    up = np.ceil(t - 1e-12)
    inside = (up >= 2) & (up <= MAX_ORDER)
    idx = np.where(inside, up, 2).astype(np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.maximum(logm[idx] / (idx - 1.0), 0.0)
    return np.where(inside, value, np.inf)


def add_shift(sigma: float, steps: int) -> float:
    """c = (1 - 1/T) / (2 sigma^2): how far the add direction's loss may exceed a mu_1-Gaussian's (module docstring)."""
    return (1.0 - 1.0 / steps) / (2.0 * sigma * sigma)


def _mu_1(sigma: float, steps: int) -> float:
    return 1.0 / (sigma * math.sqrt(steps))


def add_rdp_bound(sigma: float, steps: int, orders: Any) -> np.ndarray:
    """D_a(Q||P) <= c + a mu_1^2 / 2 for one epoch's add direction (module docstring)."""
    t = np.asarray(orders, dtype=float)
    return add_shift(sigma, steps) + t * _mu_1(sigma, steps) ** 2 / 2.0


def epoch_rdp(sigma: float, steps: int, orders: Any) -> np.ndarray:
    """An upper bound on one epoch's RDP (both directions): min(cyclic a/(2 sigma^2), max(remove, add bound))."""
    t = np.asarray(orders, dtype=float)
    amplified = np.maximum(remove_rdp(sigma, steps, t), add_rdp_bound(sigma, steps, t))
    return np.minimum(t / (2.0 * sigma * sigma), amplified)


def _cyclic_log_delta(sigma: float, eps: np.ndarray) -> np.ndarray:
    return closed_form.log_delta_mu(1.0 / sigma, eps)


def _grid(sigma: float) -> np.ndarray | None:
    """The epsilon grid of one epoch's profile: GRID_STEP apart up to where the cyclic delta is below ~1e-33 (the
    pair's +inf mass is the last grid delta); None if that is beyond MAX_EPSILON."""
    mu = 1.0 / sigma
    # Gaussian tail: delta_mu(eps) <= Phi(-eps/mu + mu/2), and Phi(-12) ~ 1.8e-33.
    top = mu * mu / 2.0 + _TAIL_Z * mu
    if top > MAX_EPSILON:
        return None
    return np.arange(0.0, top + GRID_STEP, GRID_STEP)


def epoch_profile(sigma: float, steps: int, eps: Any) -> tuple[np.ndarray, np.ndarray]:
    """(amplified delta(eps), cyclic delta(eps)) of one epoch: both upper bounds on its privacy profile (module
    docstring); the amplified one is max(remove direction's RDP profile, the smaller of the add direction's two)."""
    e = np.asarray(eps, dtype=float)
    remove = closed_form.get_delta_from_rdp(
        orders=ORDERS, rdp=remove_rdp(sigma, steps, ORDERS), epsilon=e, total_variation=True
    )
    shifted = np.exp(closed_form.log_delta_mu(_mu_1(sigma, steps), e - add_shift(sigma, steps)))
    add = np.minimum(shifted, add_tail_delta(sigma, steps, e))
    cyclic = np.exp(_cyclic_log_delta(sigma, e))
    return np.minimum(np.maximum(remove, add), 1.0), cyclic


def add_tail_delta(sigma: float, steps: int, eps: Any) -> np.ndarray:
    """The add direction's delta(eps) bounded through the lower tail of S = (1/T) sum_t Y_t (module docstring):
    delta_add(eps) = E_Q[(1 - e^eps S)_+] = e^eps int_0^(e^-eps) Pr[S <= s] ds, and Maurer's inequality for
    non-negative independent summands (E S = 1, E[Y^2] = e^(1/sigma^2)) gives Pr[S <= s] <= exp(-(1 - s)^2 / (2 v)),
    v = e^(1/sigma^2) / T; the integral is e^eps sqrt(2 pi v) (Phi(-(1 - e^-eps)/sqrt v) - Phi(-1/sqrt v))."""
    e = np.asarray(eps, dtype=float)
    root_v = math.exp(1.0 / (2.0 * sigma * sigma)) / math.sqrt(steps)
    low = special.log_ndtr(np.expm1(-e) / root_v)
    high = float(special.log_ndtr(-1.0 / root_v))
    with np.errstate(divide="ignore", invalid="ignore"):
        log_gap = np.where(low > high, low + np.log1p(-np.exp(np.minimum(high - low, 0.0))), -np.inf)
    log_delta = e + 0.5 * math.log(2.0 * math.pi) + math.log(root_v) + log_gap
    # A relative slack for the few floating-point operations above (never optimistic).
    return np.minimum(np.exp(log_delta) * (1.0 + 1e-12), 1.0)


@functools.lru_cache(maxsize=64)
def epoch_pair(sigma: float, steps: int) -> DiscretePair | None:
    """The symmetric discrete pair of one epoch's profile min(cyclic, amplified) on the grid (module docstring), or
    None when the amplified profile is nowhere below the cyclic one (the cyclic Gaussian PLD is then used)."""
    eps = _grid(sigma)
    if eps is None or steps < 2:
        return None
    amplified, cyclic = epoch_profile(sigma, steps, eps)
    if not np.any(amplified < cyclic * (1.0 - 1e-9)):
        return None
    delta = np.minimum(amplified, cyclic)
    # Each bound is non-increasing in eps; the running minimum only removes floating-point wiggles (valid: a
    # delta(eps) bound holds at every larger eps too).
    delta = np.minimum.accumulate(np.clip(delta, 0.0, 1.0))
    return profile_pair(eps, delta)


def upper_label(sigma: float, steps: int) -> str:
    """Which bound the pessimistic end of a balls-in-bins run is (:data:`UPPER_LABEL` or :data:`CYCLIC_LABEL`)."""
    return CYCLIC_LABEL if epoch_pair(float(sigma), int(steps)) is None else UPPER_LABEL


def epoch_pld(sigma: float, steps: int, step: float) -> pld_lib.PrivacyLossDistribution | None:
    """One epoch's pessimistic PLD at lattice ``step`` (losses rounded up), or None when the cyclic PLD applies."""
    pair = epoch_pair(float(sigma), int(steps))
    if pair is None:
        return None
    return discrete_pair_pld((pair, None), step, True)
