"""Poisson-subsampled Laplace and discrete Laplace under replace-one (dp_accounting's convention for replace-one
Poisson sampling: the replaced record's contribution moves from +D to -D, each included with probability q).
Registered by :mod:`gdpcore.kinds`.

One step releases P = (1-q) L(0) + q L(-D) against Q = (1-q) L(0) + q L(D), L(m) the Laplace (or discrete Laplace)
noise centred at m: dp_accounting's REPLACE adjacency with sub-sampling (privacy_loss_mechanism.
AdditiveNoisePrivacyLoss, class docstring), whose ``LaplacePrivacyLoss`` / ``DiscreteLaplacePrivacyLoss`` lack the
inverse, tails and connect-the-dots bounds for it. With u = x / b (u = a x for the discrete noise) and d = D / b
(d = a D) the privacy loss is

    l(x) = log((1-q) e^-|u| + q e^-|u+d|) - log((1-q) e^-|u| + q e^-|u-d|),

odd in x, equal to L = log((1-q) + q e^d) - log((1-q) + q e^-d) for x <= -D, to -L for x >= D, and strictly
decreasing in between, where for -D <= x <= 0 it is log((1-q) + q e^(-2u-d)) - log((1-q) + q e^-d) and inverts in
closed form. L is the exact pure epsilon of one step (attained on x <= -D, a set of positive mass); at q = 1 the pair
is L(-D) against L(D), the Laplace mechanism with sensitivity 2D. The PLD is dp_accounting's own construction
(``_create_pld_pmf_from_monotone_privacy_loss``: connect-the-dots on the pessimistic side, privacy buckets rounded
down on the optimistic side) on this loss; the pair is symmetric (x -> -x swaps P and Q), so one PMF serves both
directions.
"""

from __future__ import annotations

import collections
import math

import numpy as np
from dp_accounting.pld import pld_pmf, privacy_loss_mechanism
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from gdpcore.kinds import dp_events
from gdpcore.kinds._common import dpa_discretisation, log_uniform
from gdpcore.kinds.laplace import pure_step_hooks, subsampled_discrete_laplace_event, subsampled_laplace_event
from gdpcore.kinds.registry import KindSpec, Unsupported
from gdpcore.mechanisms import ReplaceOneSubsampledDiscreteLaplace, ReplaceOneSubsampledLaplace

__all__ = ["REPLACE_ONE_SUBSAMPLED_DISCRETE_LAPLACE", "REPLACE_ONE_SUBSAMPLED_LAPLACE", "replace_one_max_loss"]

_REPLACE = privacy_loss_mechanism.AdjacencyType.REPLACE


def _log_weights(q: float) -> tuple[float, float]:
    with np.errstate(divide="ignore"):
        return float(np.log1p(-q)), math.log(q)


def replace_one_max_loss(d: float, q: float) -> float:
    """L = log((1-q) + q e^d) - log((1-q) + q e^-d): the largest privacy loss of the pair (module docstring), the
    exact pure epsilon of one step; d = D / b (a D for the discrete noise). Stable for any d and q in (0, 1]."""
    log_rest, log_q = _log_weights(q)
    return float(np.logaddexp(log_rest, log_q + d) - np.logaddexp(log_rest, log_q - d))


class _ReplaceOneLoss:
    """The replace-one pair's privacy loss, its inverse, tails and connect-the-dots bounds, shared by the continuous
    and the discrete noise (mixed into dp_accounting's loss classes, which give the CDFs and the hockey-stick)."""

    sensitivity: float
    sampling_prob: float
    _scale: float  # x -> u = x / _scale

    def _setup(self, scale: float) -> None:
        self._scale = scale
        self._d = self.sensitivity / scale
        self._log_rest, self._log_q = _log_weights(self.sampling_prob)
        self._max_loss = replace_one_max_loss(self._d, self.sampling_prob)

    def privacy_loss(self, x):
        """ln(mu_upper(x) / mu_lower(x)) in closed form (module docstring), scalars or arrays."""
        u = np.asarray(x, dtype=float) / self._scale
        near = self._log_rest - np.abs(u)
        out = np.logaddexp(near, self._log_q - np.abs(u + self._d)) - np.logaddexp(
            near, self._log_q - np.abs(u - self._d)
        )
        return float(out) if np.ndim(x) == 0 else out

    def _inverses(self, losses: np.ndarray) -> np.ndarray:
        """For each loss the largest x with l(x) >= loss: -inf above L, +inf at or below -L, -D at L, else the root in
        [-D, D] (closed form on [-D, 0] for loss >= 0, odd symmetry below)."""
        losses = np.asarray(losses, dtype=float)
        a = np.minimum(np.abs(losses), self._max_loss)
        # (1-q) + q e^(-2u-d) = e^a ((1-q) + q e^-d)  <=>  q e^(-2u-d) = (1-q) expm1(a) + q e^(a-d)
        with np.errstate(divide="ignore", invalid="ignore"):
            log_expm1 = np.where(a > 0, a + np.log(-np.expm1(-a)), -np.inf)
        rhs = np.logaddexp(self._log_rest + log_expm1, self._log_q + a - self._d)
        root = np.clip(-(self._d + rhs - self._log_q) / 2.0 * self._scale, -self.sensitivity, 0.0)
        x = np.where(losses < 0, -root, root)
        x = np.where(losses == self._max_loss, -self.sensitivity, x)
        x = np.where(losses > self._max_loss, -np.inf, x)
        return np.where(losses <= -self._max_loss, np.inf, x)

    def _inverse_privacy_loss_replace(self, privacy_loss: float) -> float:
        """The largest x with l(x) >= ``privacy_loss`` (dp_accounting's contract for the REPLACE inverse)."""
        return float(self._inverses(np.array([privacy_loss]))[0])

    def connect_dots_bounds(self) -> privacy_loss_mechanism.ConnectDotsBounds:
        return privacy_loss_mechanism.ConnectDotsBounds(epsilon_upper=self._max_loss, epsilon_lower=-self._max_loss)


class _ReplaceOneLaplaceLoss(_ReplaceOneLoss, privacy_loss_mechanism.LaplacePrivacyLoss):
    """dp_accounting's Laplace privacy loss under REPLACE adjacency with sub-sampling (module docstring)."""

    def __init__(self, scale: float, sensitivity: float, sampling_prob: float) -> None:
        self.sensitivity, self.sampling_prob = sensitivity, sampling_prob
        self._setup(scale)
        super().__init__(scale, sensitivity=sensitivity, sampling_prob=sampling_prob, adjacency_type=_REPLACE)

    def get_delta_for_epsilon(self, epsilon):
        """dp_accounting's hockey-stick mu_upper_cdf(x) - e^eps mu_lower_cdf(x) at x the inverse of eps
        (AdditiveNoisePrivacyLoss.get_delta_for_epsilon, REPLACE branch), with every inverse computed at once."""
        eps = np.atleast_1d(np.asarray(epsilon, dtype=float))
        x = self._inverses(eps)
        deltas = np.clip(self.mu_upper_cdf(x) - np.exp(eps + self.mu_lower_log_cdf(x)), 0.0, 1.0)
        return float(deltas[0]) if np.ndim(epsilon) == 0 else deltas

    def buckets_pmf(self, step: float) -> pld_pmf.PLDPmf:
        """Privacy buckets rounded down (optimistic): dp_accounting's loop (``_create_pld_pmf_from_monotone_privacy_loss``,
        pessimistic_estimate=False) with every inverse computed at once: the P-mass of {x : l(x) in [k step,
        (k+1) step)} at k step, the tails (x <= -D at L, x >= D at -L) rounded down."""
        d, tail = self.sensitivity, self.privacy_loss_tail().tail_probability_mass_function
        masses: collections.defaultdict[int, float] = collections.defaultdict(float)
        for loss, prob in tail.items():
            masses[math.floor(loss / step)] += prob
        top, bottom = math.floor(self.privacy_loss(-d) / step), self.privacy_loss(d)
        ks = np.arange(top, math.floor(bottom / step) - 1, -1)
        ks = ks[: int(np.argmax(ks * step <= bottom)) + 1]  # down to the first k with k step <= l(D), as the loop
        xs = np.concatenate(([-d], self._inverses(ks[:-1] * step), [d]))
        for k, prob in zip(ks.tolist(), np.diff(self.mu_upper_cdf(xs)).tolist(), strict=True):
            masses[k] += prob
        return pld_pmf.create_pmf(dict(masses), step, 0.0, pessimistic_estimate=False)

    def privacy_loss_tail(self) -> privacy_loss_mechanism.TailPrivacyLossDistribution:
        """P-mass below -D at loss L, above D at -L (the loss is constant there)."""
        d = self.sensitivity
        return privacy_loss_mechanism.TailPrivacyLossDistribution(
            -d, d, {self._max_loss: self.mu_upper_cdf(-d), -self._max_loss: 1.0 - self.mu_upper_cdf(d)}
        )


class _ReplaceOneDiscreteLaplaceLoss(_ReplaceOneLoss, privacy_loss_mechanism.DiscreteLaplacePrivacyLoss):
    """dp_accounting's discrete Laplace privacy loss under REPLACE adjacency with sub-sampling (integer outputs)."""

    def __init__(self, parameter: float, sensitivity: int, sampling_prob: float) -> None:
        self.sensitivity, self.sampling_prob = sensitivity, sampling_prob
        self._setup(1.0 / parameter)
        super().__init__(parameter, sensitivity=sensitivity, sampling_prob=sampling_prob, adjacency_type=_REPLACE)

    def _inverse_privacy_loss_replace(self, privacy_loss: float) -> float:
        """The largest integer x with l(x) >= ``privacy_loss``: the floor of the real root, checked on the integers
        (a root within round-off of an integer is settled by the loss itself)."""
        x = super()._inverse_privacy_loss_replace(privacy_loss)
        if not math.isfinite(x):
            return x
        n = math.floor(x)
        while n + 1 <= self.sensitivity and self.privacy_loss(n + 1) >= privacy_loss:
            n += 1
        while n > -self.sensitivity and self.privacy_loss(n) < privacy_loss:
            n -= 1
        return n

    def privacy_loss_tail(self) -> privacy_loss_mechanism.TailPrivacyLossDistribution:
        """P-mass at x <= -D at loss L, at x >= D at -L; the integers in between enumerated by dp_accounting."""
        d = int(self.sensitivity)
        return privacy_loss_mechanism.TailPrivacyLossDistribution(
            1 - d, d - 1, {self._max_loss: self.mu_upper_cdf(-d), -self._max_loss: 1.0 - self.mu_upper_cdf(d - 1)}
        )

    def connect_dots_bounds(self) -> privacy_loss_mechanism.ConnectDotsBounds:
        d = int(self.sensitivity)
        return privacy_loss_mechanism.ConnectDotsBounds(lower_x=-d, upper_x=d)


def _pld(loss: privacy_loss_mechanism.MonotonePrivacyLoss, step: float, pessimistic: bool):
    if not pessimistic and isinstance(loss, _ReplaceOneLaplaceLoss):
        pmf = loss.buckets_pmf(step)
    else:
        pmf = pld_lib._create_pld_pmf_from_monotone_privacy_loss(  # noqa: SLF001 - dp_accounting's own builder
            loss, **dpa_discretisation(step, pessimistic)
        )
    return pld_lib.PrivacyLossDistribution(pmf)  # symmetric pair: one PMF for both directions


def _laplace_d(m: ReplaceOneSubsampledLaplace) -> float:
    return m.sensitivity / m.scale


def _discrete_d(m: ReplaceOneSubsampledDiscreteLaplace) -> float:
    return m.noise_parameter * m.sensitivity


def _hooks(d) -> dict:
    """:func:`gdpcore.kinds.laplace.pure_step_hooks` of the replace-one step, whose pure epsilon is its largest
    privacy loss (exact per step: T L composed)."""
    return pure_step_hooks(lambda m: replace_one_max_loss(d(m), m.sampling_rate))


def _draw_laplace(rng: np.random.Generator) -> ReplaceOneSubsampledLaplace:
    return ReplaceOneSubsampledLaplace(
        scale=log_uniform(rng, 0.3, 5.0),
        sampling_rate=log_uniform(rng, 1e-2, 0.5),
        steps=int(rng.integers(1, 30)),
        sensitivity=float(rng.choice([1.0, 0.5])),
    )


def _draw_discrete(rng: np.random.Generator) -> ReplaceOneSubsampledDiscreteLaplace:
    return ReplaceOneSubsampledDiscreteLaplace(
        noise_parameter=log_uniform(rng, 0.2, 3.0),
        sampling_rate=log_uniform(rng, 1e-2, 0.5),
        steps=int(rng.integers(1, 30)),
        sensitivity=int(rng.integers(1, 3)),
    )


REPLACE_ONE_SUBSAMPLED_LAPLACE = KindSpec(
    cls=ReplaceOneSubsampledLaplace,
    steps_param="steps",
    summary=(
        "steps compositions of a Poisson-subsampled Laplace mechanism under replace-one: "
        "(1-q) Lap(0,b) + q Lap(-D,b) vs (1-q) Lap(0,b) + q Lap(D,b)"
    ),
    draw=_draw_laplace,
    pld=lambda m, *, step, pessimistic: _pld(
        _ReplaceOneLaplaceLoss(m.scale, m.sensitivity, m.sampling_rate), step, pessimistic
    ),
    **_hooks(_laplace_d),
    to_dp_event=subsampled_laplace_event,
    from_dp_event=dp_events.replace_one_subsampled_laplace_from_event,
    exact_mu=Unsupported("the subsampled Laplace mechanism is not exactly GDP"),
)

REPLACE_ONE_SUBSAMPLED_DISCRETE_LAPLACE = KindSpec(
    cls=ReplaceOneSubsampledDiscreteLaplace,
    steps_param="steps",
    summary=(
        "steps compositions of a Poisson-subsampled discrete Laplace mechanism under replace-one: "
        "(1-q) DLap(0,a) + q DLap(-D,a) vs (1-q) DLap(0,a) + q DLap(D,a)"
    ),
    draw=_draw_discrete,
    pld=lambda m, *, step, pessimistic: _pld(
        _ReplaceOneDiscreteLaplaceLoss(m.noise_parameter, m.sensitivity, m.sampling_rate), step, pessimistic
    ),
    **_hooks(_discrete_d),
    # dp_accounting's discrete constructions enumerate the integer outputs between -D and D.
    construction_points=lambda m, n: n + 2 * m.sensitivity,
    to_dp_event=subsampled_discrete_laplace_event,
    from_dp_event=dp_events.replace_one_subsampled_discrete_laplace_from_event,
    exact_mu=Unsupported("the subsampled discrete Laplace mechanism is not exactly GDP"),
)
