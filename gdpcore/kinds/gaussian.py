"""The Gaussian family: Gaussian, Poisson-subsampled Gaussian (DP-SGD), discrete Gaussian, tree aggregation (DP-FTRL),
fixed-size and truncated batches. Registered in order by :mod:`gdpcore.kinds`."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from gdpcore.kinds import dp_events, formulas
from gdpcore.kinds._common import NOT_PURE, dpa_discretisation, log_uniform, relation
from gdpcore.kinds.dp_events import record_bound_factor
from gdpcore.kinds.registry import KindSpec, Unsupported, UnsupportedMechanismError
from gdpcore.mechanisms import (
    DiscreteGaussian,
    Gaussian,
    SampledWithoutReplacementGaussian,
    SubsampledGaussian,
    TreeAggregation,
    TruncatedSubsampledGaussian,
)

__all__ = [
    "DISCRETE_GAUSSIAN",
    "GAUSSIAN",
    "SAMPLED_WITHOUT_REPLACEMENT_GAUSSIAN",
    "SUBSAMPLED_GAUSSIAN",
    "TREE_AGGREGATION",
    "TRUNCATED_SUBSAMPLED_GAUSSIAN",
]

# The trade-off curve of a Gaussian depends on the relation only through the stated sensitivity; connect-the-dots
# is pessimistic only (the optimistic twin uses privacy buckets rounded down).
GAUSSIAN = KindSpec(
    cls=Gaussian,
    summary="query + N(0, (noise_multiplier * sensitivity)^2); exactly (1/noise_multiplier)-GDP",
    draw=lambda rng: Gaussian(
        noise_multiplier=log_uniform(rng, 0.3, 5.0),
        sensitivity=float(rng.choice([1.0, 2.0])),
        neighbouring=relation(rng),
    ),
    pld=lambda m, *, step, pessimistic: pld_lib.from_gaussian_mechanism(
        m.noise_multiplier * m.sensitivity,
        sensitivity=m.sensitivity,
        **dpa_discretisation(step, pessimistic),
    ),
    pure_epsilon=lambda m: NOT_PURE,
    rdp=lambda m, t: (t / (2.0 * m.noise_multiplier**2), "exact"),
    rho=lambda m: (1.0 / (2.0 * m.noise_multiplier**2), "exact", "any"),
    to_dp_event=lambda m: dp_accounting.GaussianDpEvent(m.noise_multiplier * record_bound_factor(m)),
    exact_mu=lambda m: 1.0 / m.noise_multiplier,
    clt_mu_squared=lambda m: 1.0 / m.noise_multiplier**2,  # exact, not an approximation
    gdp_upper_bound=lambda m: (1.0 / m.noise_multiplier, "exact"),
    from_dp_event=dp_events.gaussian_from_event,
)


def _sg_pld(m: SubsampledGaussian, *, step: float, pessimistic: bool) -> pld_lib.PrivacyLossDistribution:
    single = pld_lib.from_gaussian_mechanism(
        m.noise_multiplier * m.sensitivity,
        sensitivity=m.sensitivity,
        **dpa_discretisation(step, pessimistic),
        sampling_prob=m.sampling_rate,
    )
    return single


def _sg_rdp(m: SubsampledGaussian, t: np.ndarray) -> tuple[np.ndarray, str]:
    if m.sampling_rate == 1.0:
        return m.steps * t / (2.0 * m.noise_multiplier**2), "exact"
    return m.steps * formulas.rdp_subsampled_gaussian(m.sampling_rate, m.noise_multiplier, t), "exact"


def _sg_draw(rng: np.random.Generator) -> SubsampledGaussian:
    return SubsampledGaussian(
        noise_multiplier=log_uniform(rng, 0.7, 4.0),
        sampling_rate=1.0 if rng.uniform() < 0.1 else log_uniform(rng, 1e-3, 0.5),
        steps=int(round(log_uniform(rng, 1.0, 3000.0))),
    )


SUBSAMPLED_GAUSSIAN = KindSpec(
    cls=SubsampledGaussian,
    poisson_sampled_gaussian=True,
    steps_param="steps",
    summary="DP-SGD: steps compositions of a Poisson-subsampled Gaussian (add/remove)",
    draw=_sg_draw,
    pld=_sg_pld,
    pure_epsilon=lambda m: NOT_PURE,
    rdp=_sg_rdp,
    # T/(2 sigma^2), approached as t -> inf: subsampling gives no zCDP benefit (seed 000 App. C.3).
    rho=lambda m: (m.steps / (2.0 * m.noise_multiplier**2), "exact", "any" if m.sampling_rate == 1.0 else "inf"),
    to_dp_event=lambda m: dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(m.sampling_rate, dp_accounting.GaussianDpEvent(m.noise_multiplier)),
        m.steps,
    ),
    # With sampling_rate == 1 every step is a plain Gaussian: exactly (sqrt(T)/sigma)-GDP.
    exact_mu=lambda m: m.steps**0.5 / m.noise_multiplier if m.sampling_rate == 1.0 else None,
    clt_mu_squared=lambda m: (
        formulas.clt_mu_subsampled_gaussian(
            noise_multiplier=m.noise_multiplier, sampling_rate=m.sampling_rate, steps=m.steps
        )
        ** 2
    ),
    # Subsampling never hurts; seed 003 Sec. 5.3 shows it does not improve the worst-case tail.
    gdp_upper_bound=lambda m: (
        math.sqrt(m.steps) / m.noise_multiplier,
        "exact" if m.sampling_rate == 1.0 else "upper",
    ),
    subsampled_gaussian_phases=lambda m: (
        {(m.noise_multiplier, m.sampling_rate): m.steps} if m.sampling_rate < 1 else None
    ),
    from_dp_event=dp_events.subsampled_gaussian_from_event,
)

DISCRETE_GAUSSIAN = KindSpec(
    cls=DiscreteGaussian,
    summary="discrete Gaussian on the integers (Canonne, Kamath, Steinke 2020), integer sensitivity",
    draw=lambda rng: DiscreteGaussian(
        sigma=log_uniform(rng, 0.8, 10.0), sensitivity=int(rng.integers(1, 3)), neighbouring=relation(rng)
    ),
    pld=lambda m, *, step, pessimistic: pld_lib.from_discrete_gaussian_mechanism(
        m.sigma,
        sensitivity=m.sensitivity,
        **dpa_discretisation(step, pessimistic),
    ),
    pure_epsilon=lambda m: NOT_PURE,
    # dp_accounting tabulates the noise on [-ceil(11.6 sigma), ceil(11.6 sigma)] (DiscreteGaussianPrivacyLoss).
    construction_points=lambda m, n: n + 2.0 * math.ceil(11.6 * m.sigma) + 1.0 + m.sensitivity,
    # Upper bound: the discrete Gaussian is (Delta^2/(2 sigma^2))-zCDP (Canonne, Kamath, Steinke 2020).
    rdp=lambda m, t: (t * m.sensitivity**2 / (2.0 * m.sigma**2), "upper"),
    rho=lambda m: (m.sensitivity**2 / (2.0 * m.sigma**2), "upper", "any"),
    to_dp_event=Unsupported("dp_accounting has no DpEvent for the discrete Gaussian"),
    exact_mu=Unsupported("the discrete Gaussian is not exactly GDP"),
    gdp_upper_bound=Unsupported("no analytic GDP bound for the discrete Gaussian here; use analyze()"),
    from_dp_event=Unsupported("dp_accounting has no DpEvent for the discrete Gaussian"),
)


def _swor_pld(m: SampledWithoutReplacementGaussian, *, step: float, pessimistic: bool):
    if m.batch_size == 0:  # an empty batch: the output is noise whatever the data (dp_accounting's RDP gives 0)
        return pld_lib.identity(value_discretization_interval=step)
    return pld_lib.from_gaussian_mechanism(
        m.noise_multiplier * m.sensitivity,
        sensitivity=m.sensitivity,
        **dpa_discretisation(step, pessimistic),
        sampling_prob=m.sampling_rate,
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE,
    )


def _swor_draw(rng: np.random.Generator) -> SampledWithoutReplacementGaussian:
    n = int(rng.integers(100, 2000))  # cheap sizes: the generic engine refines dp_accounting's PLDs
    return SampledWithoutReplacementGaussian(
        noise_multiplier=log_uniform(rng, 0.8, 2.0),
        dataset_size=n,
        batch_size=max(1, int(n * log_uniform(rng, 0.05, 0.5))),
        steps=int(rng.integers(1, 20)),
    )


SAMPLED_WITHOUT_REPLACEMENT_GAUSSIAN = KindSpec(
    cls=SampledWithoutReplacementGaussian,
    steps_param="steps",
    summary="DP-SGD with fixed-size batches: steps of a Gaussian on a sample without replacement (replace-one)",
    draw=_swor_draw,
    pld=_swor_pld,
    pure_epsilon=lambda m: NOT_PURE,
    # Joint convexity of e^{(t-1) D_t}: at most the unsampled replace-one Gaussian, shift 2C: 2t / sigma^2 (0 for an
    # empty batch, exactly).
    rdp=lambda m, t: (
        m.steps * 2.0 * t / m.noise_multiplier**2 * (m.batch_size > 0),
        "exact" if m.sampling_rate in (0.0, 1.0) else "upper",
    ),
    rho=lambda m: (
        m.steps * 2.0 / m.noise_multiplier**2 * (m.batch_size > 0),
        "exact" if m.sampling_rate in (0.0, 1.0) else "upper",
        "any",
    ),
    to_dp_event=lambda m: dp_accounting.SelfComposedDpEvent(
        dp_accounting.SampledWithoutReplacementDpEvent(
            m.dataset_size, m.batch_size, dp_accounting.GaussianDpEvent(m.noise_multiplier)
        ),
        m.steps,
    ),
    from_dp_event=dp_events.sampled_without_replacement_gaussian_from_event,
    # With every record in every batch the steps are Gaussians moving the sum by 2C: exactly (2 sqrt(T)/sigma)-GDP.
    exact_mu=lambda m: 2.0 * math.sqrt(m.steps) / m.noise_multiplier if m.sampling_rate == 1.0 else None,
    clt_mu_squared=Unsupported("the CLT accountant applies to Poisson-subsampled Gaussians (add/remove) only"),
    gdp_upper_bound=lambda m: (
        2.0 * math.sqrt(m.steps) / m.noise_multiplier * (m.batch_size > 0),
        "exact" if m.sampling_rate in (0.0, 1.0) else "upper",
    ),
    subsampled_gaussian_phases=Unsupported("fixed-size batches are not Poisson-subsampled"),
)


def _tree_mu(m: TreeAggregation) -> float:
    return math.sqrt(m.depth) / m.noise_multiplier


TREE_AGGREGATION = KindSpec(
    cls=TreeAggregation,
    summary="single-epoch tree aggregation (DP-FTRL): exactly (sqrt(ceil(log2(steps+1)))/noise_multiplier)-GDP",
    draw=lambda rng: TreeAggregation(
        noise_multiplier=log_uniform(rng, 0.5, 10.0), steps=int(round(log_uniform(rng, 1.0, 5000.0)))
    ),
    pld=lambda m, *, step, pessimistic: pld_lib.from_gaussian_mechanism(
        m.noise_multiplier,
        sensitivity=math.sqrt(m.depth),
        **dpa_discretisation(step, pessimistic),
    ),
    pure_epsilon=lambda m: NOT_PURE,
    rdp=lambda m, t: (t * m.depth / (2.0 * m.noise_multiplier**2), "exact"),
    rho=lambda m: (m.depth / (2.0 * m.noise_multiplier**2), "exact", "any"),
    to_dp_event=lambda m: dp_accounting.SingleEpochTreeAggregationDpEvent(m.noise_multiplier, m.steps),
    from_dp_event=dp_events.tree_aggregation_from_event,
    exact_mu=_tree_mu,
    clt_mu_squared=lambda m: _tree_mu(m) ** 2,
    gdp_upper_bound=lambda m: (_tree_mu(m), "exact"),
)

_DPA_RELATION = {
    "add_remove": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
    "replace_one": dp_accounting.NeighboringRelation.REPLACE_ONE,
}


def _truncated_pld(m: TruncatedSubsampledGaussian, *, step: float, pessimistic: bool):
    if not pessimistic:
        raise UnsupportedMechanismError(
            "dp_accounting's truncated subsampled Gaussian PLD is an upper bound with no optimistic construction: "
            "lower ends are unavailable"
        )
    return pld_lib.from_truncated_subsampled_gaussian_mechanism(
        dataset_size=m.dataset_size,
        sampling_probability=m.sampling_rate,
        truncated_batch_size=m.truncated_batch_size,
        noise_multiplier=m.noise_multiplier,
        value_discretization_interval=step,
        use_connect_dots=True,
        neighboring_relation=_DPA_RELATION[m.neighbouring],
    )


def _truncated_draw(rng: np.random.Generator) -> TruncatedSubsampledGaussian:
    n = int(rng.integers(50, 5000))
    q = log_uniform(rng, 5e-3, 0.3)
    return TruncatedSubsampledGaussian(
        noise_multiplier=log_uniform(rng, 0.8, 4.0),
        sampling_rate=q,
        dataset_size=n,
        truncated_batch_size=max(1, int(n * q * rng.uniform(0.8, 1.5))),
        steps=int(rng.integers(1, 50)),
        neighbouring=relation(rng),
    )


# dp_accounting's construction mixes a sensitivity-1 subsampled Gaussian with a branch accounted as a replace-one
# Gaussian of standard deviation sigma/2 (mean shift 2 at noise sigma/2, mu = 4/sigma): the RDP, zCDP and GDP bounds
# below are those of that worst branch (joint convexity), upper bounds of dp_accounting's own upper bound.
TRUNCATED_SUBSAMPLED_GAUSSIAN = KindSpec(
    cls=TruncatedSubsampledGaussian,
    poisson_sampled_gaussian=True,
    steps_param="steps",
    summary="steps of a Gaussian on a Poisson sample truncated to a maximum batch size (upper bounds only)",
    draw=_truncated_draw,
    pld=_truncated_pld,
    pure_epsilon=lambda m: NOT_PURE,
    rdp=lambda m, t: (m.steps * 8.0 * t / m.noise_multiplier**2, "upper"),
    rho=lambda m: (m.steps * 8.0 / m.noise_multiplier**2, "upper", "any"),
    to_dp_event=lambda m: dp_accounting.SelfComposedDpEvent(
        dp_accounting.dp_event.TruncatedSubsampledGaussianDpEvent(
            m.dataset_size, m.sampling_rate, m.truncated_batch_size, m.noise_multiplier
        ),
        m.steps,
    ),
    from_dp_event=dp_events.truncated_subsampled_gaussian_from_event,
    exact_mu=lambda m: None,
    clt_mu_squared=Unsupported("the CLT accountant does not cover truncated batches"),
    gdp_upper_bound=lambda m: (4.0 * math.sqrt(m.steps) / m.noise_multiplier, "upper"),
    subsampled_gaussian_phases=Unsupported("truncated batches are not a plain Poisson-subsampled Gaussian"),
)
