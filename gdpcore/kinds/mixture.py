"""Mixtures of Gaussians (DP-MF / BandMF amplification, user-level sampling, Poisson sampling under replace-one), with
dp_accounting's privacy loss inverted for all losses at once. Registered by :mod:`gdpcore.kinds`."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
from dp_accounting.pld import pld_pmf, privacy_loss_mechanism
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy import special

from gdpcore.kinds import dp_events
from gdpcore.kinds._common import NOT_PURE, dpa_discretisation, floats_text, log_uniform
from gdpcore.kinds.registry import KindSpec, Unsupported, UnsupportedMechanismError
from gdpcore.mechanisms import MixtureOfGaussians, float_list

__all__ = ["MIXTURE_OF_GAUSSIANS"]


# -- mixtures of Gaussians (DP-MF / BandMF amplification, user-level sampling) -----------------------------------------
def _mog_cmax(m: MixtureOfGaussians) -> float:
    return max(float_list(m.sensitivities))


def _mog_single(m: MixtureOfGaussians) -> bool:
    return len(float_list(m.sensitivities)) == 1


def _mog_shift(m: MixtureOfGaussians) -> float:
    """The largest distance between the component means of the pair: c_max under add/remove, 2 c_max under
    replace-one (the record moves from +c to -c)."""
    return _mog_cmax(m) * (2.0 if m.neighbouring == "replace_one" else 1.0)


def _poisson_form(m: MixtureOfGaussians) -> tuple[float, float] | None:
    """(c, q) when the mixture is a Poisson-subsampled Gaussian: one positive sensitivity c taken with probability q
    (the rest at sensitivity 0), else None."""
    positive = {c for c, p in zip(float_list(m.sensitivities), float_list(m.probabilities), strict=True) if c > 0}
    if len(positive) != 1:
        return None
    (c,) = positive
    q = math.fsum(p for s, p in zip(float_list(m.sensitivities), float_list(m.probabilities), strict=True) if s == c)
    return c, min(q, 1.0)


def _mog_to_dp_event(m: MixtureOfGaussians) -> dp_accounting.DpEvent:
    """dp_accounting's ``MixtureOfGaussiansDpEvent`` (add/remove). Under replace-one dp_accounting's accountants take
    no mixture event: the Poisson form is its ``PoissonSampledDpEvent(q, GaussianDpEvent(s / c))`` (sensitivity one
    record's norm bound: N(1) vs N(-1), pld_privacy_accountant.py), q = 1 its ``GaussianDpEvent``; any other
    replace-one mixture has no event."""
    if m.neighbouring == "add_remove":
        inner: dp_accounting.DpEvent = dp_accounting.dp_event.MixtureOfGaussiansDpEvent(
            m.standard_deviation, list(float_list(m.sensitivities)), list(float_list(m.probabilities))
        )
    else:
        poisson = _poisson_form(m)
        if poisson is None:
            raise UnsupportedMechanismError(
                "dp_accounting has no DpEvent for a mixture of Gaussians under replace-one other than a "
                "Poisson-subsampled Gaussian (one positive sensitivity)"
            )
        c, q = poisson
        inner = dp_accounting.GaussianDpEvent(m.standard_deviation / c)
        if q < 1.0:
            inner = dp_accounting.PoissonSampledDpEvent(q, inner)
    return dp_accounting.SelfComposedDpEvent(inner, m.steps)


class _VectorisedMixtureLoss(privacy_loss_mechanism.MixtureGaussianPrivacyLoss):
    """dp_accounting's mixture-of-Gaussians privacy loss with its inverse's bisection run for all losses at once.

    dp_accounting bisects recursively, one scalar privacy loss per node (8 s for one PLD at step 1e-4). Here every
    target loss bisects in lock-step over the same range: the same midpoints, the same comparisons, the same output
    (for each loss l the smallest multiple of ``precision`` x with privacy_loss(x) <= l, rounded as dp_accounting
    rounds), with the privacy loss evaluated on arrays.
    """

    def _losses(self, x: np.ndarray) -> np.ndarray:
        x_loss = np.outer(x, self.sensitivities) / self._variance
        consts = self._precompute_privacy_loss_constants
        if self.adjacency_type == privacy_loss_mechanism.AdjacencyType.ADD:
            return -special.logsumexp(consts + x_loss, axis=1)
        return special.logsumexp(consts - x_loss, axis=1)

    def _inverse_one(self, loss: float, lo: float, hi: float, precision: float) -> float:
        consts = [float(c) for c in self._precompute_privacy_loss_constants]
        scaled = [float(c) / float(self._variance) for c in self.sensitivities]
        add = self.adjacency_type == privacy_loss_mechanism.AdjacencyType.ADD
        width = hi - lo
        while width > precision:
            mid = (lo + hi) / 2
            terms = [c + s * mid if add else c - s * mid for c, s in zip(consts, scaled, strict=True)]
            top = max(terms)
            value = top + math.log(math.fsum(math.exp(v - top) for v in terms))
            if loss < (-value if add else value):
                lo = mid
            else:
                hi = mid
            width /= 2
        return math.floor(hi / precision) * precision

    def _inverse_privacy_losses_with_range(self, privacy_losses, bounds, precision=1e-6):
        losses = np.asarray(privacy_losses, dtype=float)
        if losses.size == 0:
            return []
        if losses.size == 1:  # the privacy-buckets construction inverts one loss at a time: plain floats
            return np.array([self._inverse_one(float(losses[0]), float(bounds[0]), float(bounds[1]), precision)])
        lo = np.full(losses.size, float(bounds[0]))
        hi = np.full(losses.size, float(bounds[1]))
        width = float(bounds[1]) - float(bounds[0])
        while width > precision:
            mid = (lo + hi) / 2
            go_up = losses < self._losses(mid)
            lo = np.where(go_up, mid, lo)
            hi = np.where(go_up, hi, mid)
            width /= 2
        return np.floor(hi / precision) * precision


class _ReplaceOneMixtureLoss(privacy_loss_mechanism.MonotonePrivacyLoss):
    """The privacy loss of the replace-one mixture pair P = sum_i p_i N(-c_i, s^2) vs Q = sum_i p_i N(c_i, s^2).

    A replaced record moves its contribution from +c to -c (dp_accounting's REPLACE adjacency, privacy_loss_mechanism
    module docstring: mu_upper(x) = sum p_i mu(x + c_i), mu_lower(x) = sum p_i mu(x - c_i)); with c = (0, 1) and
    p = (1 - q, q) it is dp_accounting's replace-one Poisson-subsampled Gaussian, (1-q) N(0) + q N(-1) vs
    (1-q) N(0) + q N(1). With K(t) = log sum_i p_i exp(t c_i / s^2 - c_i^2 / (2 s^2)) (convex, K' >= 0 for c_i >= 0)
    the loss is K(-x) - K(x): decreasing, a bijection of the reals onto the reals. Everything is evaluated on arrays:
    the inverse is a lock-step bisection over all losses at once, and the privacy-buckets construction
    (:meth:`buckets_pmf`) is dp_accounting's loop (``_create_pld_pmf_from_monotone_privacy_loss``) vectorised.
    """

    def __init__(self, s: float, sensitivities, probabilities, *, log_mass_truncation_bound: float = -50.0):
        super().__init__(is_discrete=False)
        c, p = np.asarray(sensitivities, dtype=float), np.asarray(probabilities, dtype=float)
        keep = p > 0
        self._c, self._logp, self._s = c[keep], np.log(p[keep]), float(s)
        self._cmax = float(self._c.max())
        self._tail = 0.5 * math.exp(log_mass_truncation_bound)

    def _k(self, t: np.ndarray) -> np.ndarray:
        c, v = self._c, self._s**2
        return special.logsumexp(self._logp + np.outer(t, c) / v - c**2 / (2 * v), axis=1)

    def privacy_loss(self, x):
        xs = np.atleast_1d(np.asarray(x, dtype=float))
        out = self._k(-xs) - self._k(xs)
        return float(out[0]) if np.ndim(x) == 0 else out

    def mu_upper_cdf(self, x):
        xs = np.atleast_1d(np.asarray(x, dtype=float))
        out = (special.ndtr(np.add.outer(xs, self._c) / self._s) * np.exp(self._logp)).sum(axis=1)
        return float(out[0]) if np.ndim(x) == 0 else out

    def mu_lower_log_cdf(self, x):
        xs = np.atleast_1d(np.asarray(x, dtype=float))
        out = special.logsumexp(special.log_ndtr(np.add.outer(xs, -self._c) / self._s) + self._logp, axis=1)
        return float(out[0]) if np.ndim(x) == 0 else out

    def inverse_privacy_losses(self, losses: np.ndarray) -> np.ndarray:
        """For each loss l the largest x with privacy_loss(x) >= l, to 1e-12 s (bisection on all losses at once)."""
        losses = np.asarray(losses, dtype=float)
        # |d loss / dx| <= 2 cmax / s^2, so |x| >= |l| s^2 / (2 cmax); widen until the bracket holds every root.
        half = np.abs(losses) * self._s**2 / (2 * self._cmax) + 10.0 * self._s
        lo, hi = -half, half
        for _ in range(200):
            low_bad = self.privacy_loss(lo) < losses
            high_bad = self.privacy_loss(hi) > losses
            if not (low_bad.any() or high_bad.any()):
                break
            lo, hi = np.where(low_bad, 2 * lo, lo), np.where(high_bad, 2 * hi, hi)
        while np.max(hi - lo) > 1e-12 * self._s:  # x to 1e-12 s: the loss to 2e-12 cmax / s
            mid = 0.5 * (lo + hi)
            above = self.privacy_loss(mid) >= losses
            lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
        return lo

    def inverse_privacy_loss(self, privacy_loss: float) -> float:
        return float(self.inverse_privacy_losses(np.array([privacy_loss]))[0])

    def get_delta_for_epsilon(self, epsilon):
        eps = np.atleast_1d(np.asarray(epsilon, dtype=float))
        x = self.inverse_privacy_losses(eps)
        deltas = np.clip(self.mu_upper_cdf(x) - np.exp(eps + self.mu_lower_log_cdf(x)), 0.0, 1.0)
        deltas = np.maximum.accumulate(deltas[::-1])[::-1]  # non-increasing in eps (as dp_accounting's mixture)
        return float(deltas[0]) if np.ndim(epsilon) == 0 else deltas

    def _truncation(self) -> tuple[float, float]:
        """(lower, upper) x with P-mass <= the tail bound below lower (bisection in [z - cmax, z]) and above upper."""
        z = float(special.ndtri(self._tail)) * self._s
        lo, hi = z - self._cmax, z
        for _ in range(100):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if self.mu_upper_cdf(mid) <= self._tail else (lo, mid)
        return lo, -z

    def privacy_loss_tail(self) -> privacy_loss_mechanism.TailPrivacyLossDistribution:
        """Pessimistic: the P-mass below the lower truncation at +inf, above the upper one at the loss there."""
        lower, upper = self._truncation()
        return privacy_loss_mechanism.TailPrivacyLossDistribution(
            lower,
            upper,
            {math.inf: self.mu_upper_cdf(lower), self.privacy_loss(upper): 1.0 - self.mu_upper_cdf(upper)},
        )

    def connect_dots_bounds(self) -> privacy_loss_mechanism.ConnectDotsBounds:
        lower, upper = self._truncation()
        return privacy_loss_mechanism.ConnectDotsBounds(
            epsilon_upper=self.privacy_loss(lower), epsilon_lower=self.privacy_loss(upper)
        )

    def buckets_pmf(self, step: float) -> pld_pmf.PLDPmf:
        """Privacy buckets rounded down (optimistic): the P-mass of {x : loss(x) in [k step, (k+1) step)} at k step;
        the mass below the lower truncation at the loss there (rounded down), the mass above the upper one dropped.
        dp_accounting's loop (``_create_pld_pmf_from_monotone_privacy_loss``, pessimistic_estimate=False) with every
        inverse computed at once."""
        lower, upper = self._truncation()
        k_top = math.floor(self.privacy_loss(lower) / step)
        loss_upper = self.privacy_loss(upper)
        ks = np.arange(k_top, math.floor(loss_upper / step), -1)  # k step > loss(upper) for every k here
        ks = ks[ks * step > loss_upper]
        xs = np.concatenate(([lower], self.inverse_privacy_losses(ks * step), [upper]))
        probs = np.maximum(np.diff(self.mu_upper_cdf(xs)), 0.0)  # bucket j holds losses in [k_j step, (k_j+1) step)
        values = np.concatenate((ks, [ks[-1] - 1 if ks.size else k_top]))
        probs[0] += self.mu_upper_cdf(lower)  # the mass below lower: at loss >= loss(lower), rounded down to k_top
        dense = np.zeros(int(values[0] - values[-1]) + 1)
        np.add.at(dense, (values[0] - values).astype(int), probs)
        return pld_pmf.DensePLDPmf(step, int(values[-1]), dense[::-1].copy(), 0.0, pessimistic_estimate=False)


def _mog_pld(m: MixtureOfGaussians, *, step: float, pessimistic: bool) -> pld_lib.PrivacyLossDistribution:
    """dp_accounting's ``from_mixture_gaussian_mechanism`` construction with the vectorised inverse above (add/remove),
    or the replace-one pair of :class:`_ReplaceOneMixtureLoss` (symmetric: one PMF)."""
    if m.neighbouring == "replace_one":
        poisson = _poisson_form(m)
        if poisson is not None:  # dp_accounting's replace-one subsampled Gaussian, the same pair (closed-form inverse)
            c, q = poisson
            return pld_lib.from_gaussian_mechanism(
                m.standard_deviation,
                sensitivity=c,
                sampling_prob=q,
                neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE,
                **dpa_discretisation(step, pessimistic),
            )
        loss = _ReplaceOneMixtureLoss(m.standard_deviation, float_list(m.sensitivities), float_list(m.probabilities))
        if pessimistic:
            pmf = pld_lib._create_pld_pmf_from_monotone_privacy_loss(  # noqa: SLF001 - dp_accounting's own builder
                loss, **dpa_discretisation(step, pessimistic)
            )
        else:
            pmf = loss.buckets_pmf(step)
        return pld_lib.PrivacyLossDistribution(pmf)

    def single(adjacency: privacy_loss_mechanism.AdjacencyType):
        loss = _VectorisedMixtureLoss(
            m.standard_deviation,
            list(float_list(m.sensitivities)),
            list(float_list(m.probabilities)),
            pessimistic_estimate=pessimistic,
            log_mass_truncation_bound=-50,
            adjacency_type=adjacency,
        )
        return pld_lib._create_pld_pmf_from_monotone_privacy_loss(  # noqa: SLF001 - dp_accounting's own builder
            loss, **dpa_discretisation(step, pessimistic)
        )

    pld = pld_lib.PrivacyLossDistribution(
        single(privacy_loss_mechanism.AdjacencyType.REMOVE), single(privacy_loss_mechanism.AdjacencyType.ADD)
    )
    return pld


def _mog_draw(rng: np.random.Generator) -> MixtureOfGaussians:
    if rng.uniform() < 0.3:  # replace-one: a Poisson-subsampled Gaussian (dp_accounting's PoissonSampledDpEvent)
        q = log_uniform(rng, 0.01, 0.3)
        return MixtureOfGaussians(
            standard_deviation=log_uniform(rng, 1.0, 4.0),
            sensitivities=floats_text([0.0, 1.0]),
            probabilities=floats_text([1.0 - q, q]),
            steps=int(rng.integers(1, 20)),
            neighbouring="replace_one",
        )
    n = int(rng.integers(2, 4))
    w = rng.dirichlet(np.ones(n))
    w = np.round(w / w.sum(), 6)
    w[-1] = 1.0 - w[:-1].sum()
    return MixtureOfGaussians(  # cheap sizes: few privacy-loss buckets at step 1e-4
        standard_deviation=log_uniform(rng, 2.0, 5.0),
        sensitivities=floats_text([0.0, *sorted(float(x) for x in np.round(rng.uniform(0.2, 0.6, n - 1), 3))]),
        probabilities=floats_text(w),
        steps=int(rng.integers(1, 5)),
    )


MIXTURE_OF_GAUSSIANS = KindSpec(
    cls=MixtureOfGaussians,
    steps_param="steps",
    summary=(
        "mixture of Gaussians N(0,s^2) vs sum_i p_i N(c_i,s^2) (DP-MF/BandMF, user-level sampling; add/remove), or "
        "sum_i p_i N(-c_i,s^2) vs sum_i p_i N(c_i,s^2) (replace-one; Poisson sampling: c = 0,1, p = 1-q,q)"
    ),
    draw=_mog_draw,
    pld=_mog_pld,
    pure_epsilon=lambda m: NOT_PURE,
    # The vectorised inverse (_VectorisedMixtureLoss._losses) evaluates every component at every loss, both directions.
    construction_points=lambda m, n: 2.0 * n * len(float_list(m.sensitivities)),
    # Joint convexity: at most the Gaussian whose means are farthest apart (exact for a single component).
    rdp=lambda m, t: (
        m.steps * t * _mog_shift(m) ** 2 / (2.0 * m.standard_deviation**2),
        "exact" if _mog_single(m) else "upper",
    ),
    rho=lambda m: (
        m.steps * _mog_shift(m) ** 2 / (2.0 * m.standard_deviation**2),
        "exact" if _mog_single(m) else "upper",
        "any",
    ),
    to_dp_event=_mog_to_dp_event,
    from_dp_event=dp_events.mixture_of_gaussians_from_event,
    exact_mu=lambda m: math.sqrt(m.steps) * _mog_shift(m) / m.standard_deviation if _mog_single(m) else None,
    clt_mu_squared=Unsupported("the CLT accountant applies to Poisson-subsampled Gaussians only"),
    gdp_upper_bound=lambda m: (
        math.sqrt(m.steps) * _mog_shift(m) / m.standard_deviation,
        "exact" if _mog_single(m) else "upper",
    ),
)
