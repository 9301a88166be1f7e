"""Randomized response: binary (exactly f_{eps,0}) and k-ary, optionally Poisson-subsampled (replace-one).
Registered in order by :mod:`gdpcore.kinds`."""

from __future__ import annotations

import math

import dp_accounting
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from gdpcore import closed_form
from gdpcore.kinds import dp_events, formulas
from gdpcore.kinds._common import log_uniform
from gdpcore.kinds.registry import KindSpec, Unsupported
from gdpcore.mechanisms import KaryRandomizedResponse, RandomizedResponse

__all__ = ["KARY_RANDOMIZED_RESPONSE", "RANDOMIZED_RESPONSE"]


def _rr_noise_parameter(epsilon: float) -> float:
    # Binary RR reporting the truth w.p. e^eps/(1+e^eps) is dp_accounting's RR with noise parameter 2/(1+e^eps),
    # written 2 e^-eps / (1 + e^-eps) past eps = 700, so that it underflows to 0 instead of overflowing.
    if epsilon <= 700.0:
        return 2.0 / (1.0 + math.exp(epsilon))
    tail = math.exp(-epsilon)
    return 2.0 * tail / (1.0 + tail)


RANDOMIZED_RESPONSE = KindSpec(
    cls=RandomizedResponse,
    summary="binary randomized response, truth w.p. e^epsilon/(1 + e^epsilon); exactly f_{epsilon,0}",
    draw=lambda rng: RandomizedResponse(epsilon=log_uniform(rng, 0.05, 4.0)),
    pld=lambda m, *, step, pessimistic: pld_lib.from_randomized_response(
        noise_parameter=_rr_noise_parameter(m.epsilon),
        num_buckets=2,
        pessimistic_estimate=pessimistic,
        value_discretization_interval=step,
    ),
    pure_epsilon=lambda m: m.epsilon,
    # Beyond eps ~ 745 the noise parameter underflows to 0, which dp_accounting cannot take: never planned.
    construction_points=lambda m, n: n if _rr_noise_parameter(m.epsilon) > 0.0 else math.inf,
    rdp=lambda m, t: (formulas.rdp_randomized_response(m.epsilon, t), "exact"),
    # eps(t)/t is largest as t -> 1, where it is the KL divergence eps tanh(eps/2).
    rho=lambda m: (m.epsilon * math.tanh(m.epsilon / 2.0), "exact", "one"),
    to_dp_event=lambda m: dp_accounting.RandomizedResponseDpEvent(_rr_noise_parameter(m.epsilon), 2),
    exact_mu=Unsupported("randomized response is not exactly GDP"),
    gdp_upper_bound=lambda m: (closed_form.get_mu_from_pure_dp(epsilon=m.epsilon), "exact"),
    from_dp_event=dp_events.randomized_response_from_event,
)


# -- k-ary randomized response (optionally Poisson-subsampled) ---------------------------------------------------------
def _krr_eps(m: KaryRandomizedResponse) -> float:
    p = m.effective_noise_parameter
    ratio = m.num_buckets * (1.0 - p) / p
    if math.isfinite(ratio):
        return math.log1p(ratio)
    return math.log(m.num_buckets) + math.log1p(-p) - math.log(p)  # the ratio overflows (p = 1e-300, k = 1e18)


def _krr_event(m: KaryRandomizedResponse) -> dp_accounting.DpEvent:
    rr = dp_accounting.RandomizedResponseDpEvent(m.noise_parameter, m.num_buckets)
    return rr if m.sampling_rate == 1.0 else dp_accounting.PoissonSampledDpEvent(m.sampling_rate, rr)


KARY_RANDOMIZED_RESPONSE = KindSpec(
    cls=KaryRandomizedResponse,
    summary="k-ary randomized response (replace-one), optionally Poisson-subsampled; pure log(1 + k(1-p)/p)-DP",
    draw=lambda rng: KaryRandomizedResponse(
        noise_parameter=float(rng.uniform(0.05, 0.95)),
        num_buckets=int(rng.integers(3, 12)),
        sampling_rate=1.0 if rng.uniform() < 0.5 else float(rng.uniform(0.05, 1.0)),
    ),
    pld=lambda m, *, step, pessimistic: pld_lib.from_randomized_response(
        noise_parameter=m.effective_noise_parameter,
        num_buckets=m.num_buckets,
        pessimistic_estimate=pessimistic,
        value_discretization_interval=step,
    ),
    pure_epsilon=_krr_eps,
    rdp=lambda m, t: (formulas.rdp_kary_randomized_response(m.effective_noise_parameter, m.num_buckets, t), "exact"),
    rho=lambda m: (_krr_eps(m) ** 2 / 2.0, "upper", "any"),
    to_dp_event=_krr_event,
    from_dp_event=dp_events.kary_randomized_response_from_event,
    exact_mu=Unsupported("randomized response is not exactly GDP"),
    gdp_upper_bound=lambda m: (closed_form.get_mu_from_pure_dp(epsilon=_krr_eps(m)), "upper"),
)
