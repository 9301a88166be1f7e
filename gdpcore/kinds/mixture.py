"""Mixtures of Gaussians (DP-MF / BandMF amplification, user-level sampling), with dp_accounting's privacy loss
inverted for all losses at once. Registered by :mod:`gdpcore.kinds`."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld import privacy_loss_mechanism
from scipy import special

from gdpcore.kinds import dp_events
from gdpcore.kinds._common import NOT_PURE, dpa_discretisation, floats_text, log_uniform
from gdpcore.kinds.registry import KindSpec, Unsupported
from gdpcore.mechanisms import MixtureOfGaussians, float_list

__all__ = ["MIXTURE_OF_GAUSSIANS"]


# -- mixtures of Gaussians (DP-MF / BandMF amplification, user-level sampling) -----------------------------------------
def _mog_cmax(m: MixtureOfGaussians) -> float:
    return max(float_list(m.sensitivities))


def _mog_single(m: MixtureOfGaussians) -> bool:
    return len(float_list(m.sensitivities)) == 1


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


def _mog_pld(m: MixtureOfGaussians, *, step: float, pessimistic: bool) -> pld_lib.PrivacyLossDistribution:
    """dp_accounting's ``from_mixture_gaussian_mechanism`` construction with the vectorised inverse above."""

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
    summary="mixture of Gaussians N(0,s^2) vs sum_i p_i N(c_i,s^2) (DP-MF/BandMF, user-level sampling; add/remove)",
    draw=_mog_draw,
    pld=_mog_pld,
    pure_epsilon=lambda m: NOT_PURE,
    # The vectorised inverse (_VectorisedMixtureLoss._losses) evaluates every component at every loss, both directions.
    construction_points=lambda m, n: 2.0 * n * len(float_list(m.sensitivities)),
    # Joint convexity: at most the Gaussian with the largest sensitivity (exact for a single component).
    rdp=lambda m, t: (
        m.steps * t * _mog_cmax(m) ** 2 / (2.0 * m.standard_deviation**2),
        "exact" if _mog_single(m) else "upper",
    ),
    rho=lambda m: (
        m.steps * _mog_cmax(m) ** 2 / (2.0 * m.standard_deviation**2),
        "exact" if _mog_single(m) else "upper",
        "any",
    ),
    to_dp_event=lambda m: dp_accounting.SelfComposedDpEvent(
        dp_accounting.dp_event.MixtureOfGaussiansDpEvent(
            m.standard_deviation, list(float_list(m.sensitivities)), list(float_list(m.probabilities))
        ),
        m.steps,
    ),
    from_dp_event=dp_events.mixture_of_gaussians_from_event,
    exact_mu=lambda m: math.sqrt(m.steps) * _mog_cmax(m) / m.standard_deviation if _mog_single(m) else None,
    clt_mu_squared=Unsupported("the CLT accountant applies to Poisson-subsampled Gaussians only"),
    gdp_upper_bound=lambda m: (
        math.sqrt(m.steps) * _mog_cmax(m) / m.standard_deviation,
        "exact" if _mog_single(m) else "upper",
    ),
)
