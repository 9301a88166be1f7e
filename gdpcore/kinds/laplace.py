"""The Laplace family: Laplace, discrete Laplace and their Poisson-subsampled ``steps``-fold compositions (pure DP).
Registered in order by :mod:`gdpcore.kinds`."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import dp_accounting
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from gdpcore import closed_form
from gdpcore.kinds import dp_events, formulas
from gdpcore.kinds._common import dpa_discretisation, log_uniform, relation
from gdpcore.kinds.dp_events import record_bound_factor
from gdpcore.kinds.registry import KindSpec, Unsupported
from gdpcore.mechanisms import DiscreteLaplace, Laplace, SubsampledDiscreteLaplace, SubsampledLaplace

__all__ = ["DISCRETE_LAPLACE", "LAPLACE", "SUBSAMPLED_DISCRETE_LAPLACE", "SUBSAMPLED_LAPLACE"]


LAPLACE = KindSpec(
    cls=Laplace,
    summary="query + Lap(scale); pure (sensitivity/scale)-DP",
    draw=lambda rng: Laplace(
        scale=log_uniform(rng, 0.3, 5.0), sensitivity=float(rng.choice([1.0, 0.5])), neighbouring=relation(rng)
    ),
    pld=lambda m, *, step, pessimistic: pld_lib.from_laplace_mechanism(
        m.scale,
        sensitivity=m.sensitivity,
        **dpa_discretisation(step, pessimistic),
    ),
    pure_epsilon=lambda m: m.sensitivity / m.scale,
    rdp=lambda m, t: (formulas.rdp_laplace(m.sensitivity / m.scale, t), "exact"),
    # eps(t)/t is largest as t -> 1, where it is the KL divergence e^-eps0 + eps0 - 1.
    rho=lambda m: (m.sensitivity / m.scale + math.expm1(-m.sensitivity / m.scale), "exact", "one"),
    # dp_accounting's LaplaceDpEvent takes the scale in units of the L1 sensitivity.
    to_dp_event=lambda m: dp_accounting.LaplaceDpEvent(m.scale / m.sensitivity * record_bound_factor(m)),
    exact_mu=Unsupported("Laplace is not exactly GDP"),
    # seed 003 Thm 5.1: every eps-DP mechanism is mu-GDP with mu = -2 Phi^-1(1/(1 + e^eps)).
    gdp_upper_bound=lambda m: (closed_form.get_mu_from_pure_dp(epsilon=m.sensitivity / m.scale), "upper"),
    from_dp_event=dp_events.laplace_from_event,
)


def pure_step_hooks(step_eps: Callable[[Any], float]) -> dict[str, Any]:
    """The hooks every ``steps``-fold composition of a pure-DP step derives from the step's epsilon ``step_eps(m)``:
    pure epsilon T eps (basic composition), RDP and zCDP from it (Bun & Steinke 2016 Prop. 3.3 and D_t <= D_inf) and
    the GDP bound of a pure eps-DP mechanism (seed 003 Thm 5.1); all upper bounds. Shared by the add/remove kinds here
    (the amplified epsilon) and the replace-one kinds (:mod:`gdpcore.kinds.replace_one`)."""
    return {
        "pure_epsilon": lambda m: m.steps * step_eps(m),
        "rdp": lambda m, t: (m.steps * formulas.rdp_from_pure(step_eps(m), t), "upper"),
        "rho": lambda m: (m.steps * step_eps(m) ** 2 / 2.0, "upper", "any"),
        "gdp_upper_bound": lambda m: (
            math.sqrt(m.steps) * closed_form.get_mu_from_pure_dp(epsilon=step_eps(m)),
            "upper",
        ),
    }


def _amplified_pure_hooks(eps0: Callable[[Any], float]) -> dict[str, Any]:
    """:func:`pure_step_hooks` of a Poisson-subsampled pure-DP step (add/remove): its amplified epsilon
    log(1 + q (e^eps0 - 1)), given the base epsilon ``eps0(m)``."""
    return pure_step_hooks(lambda m: formulas.amplified_epsilon(eps0(m), m.sampling_rate))


# -- discrete Laplace ---------------------------------------------------------------------------------------------------
DISCRETE_LAPLACE = KindSpec(
    cls=DiscreteLaplace,
    summary="discrete Laplace on the integers, P(z) ~ exp(-a|z|); pure (a * sensitivity)-DP (add/remove)",
    draw=lambda rng: DiscreteLaplace(noise_parameter=log_uniform(rng, 0.1, 3.0), sensitivity=int(rng.integers(1, 3))),
    pld=lambda m, *, step, pessimistic: pld_lib.from_discrete_laplace_mechanism(
        m.noise_parameter,
        sensitivity=m.sensitivity,
        **dpa_discretisation(step, pessimistic),
    ),
    pure_epsilon=lambda m: m.noise_parameter * m.sensitivity,
    # dp_accounting enumerates the integer outputs between the two noise centres (DiscreteLaplacePrivacyLoss).
    construction_points=lambda m, n: n + m.sensitivity,
    rdp=lambda m, t: (formulas.rdp_from_pure(m.noise_parameter * m.sensitivity, t), "upper"),
    rho=lambda m: ((m.noise_parameter * m.sensitivity) ** 2 / 2.0, "upper", "any"),
    to_dp_event=lambda m: dp_accounting.dp_event.DiscreteLaplaceDpEvent(m.noise_parameter, m.sensitivity),
    from_dp_event=dp_events.discrete_laplace_from_event,
    exact_mu=Unsupported("the discrete Laplace mechanism is not exactly GDP"),
    gdp_upper_bound=lambda m: (closed_form.get_mu_from_pure_dp(epsilon=m.noise_parameter * m.sensitivity), "upper"),
)


# -- Poisson-subsampled Laplace and discrete Laplace --------------------------------------------------------------------


def _sl_eps0(m: SubsampledLaplace) -> float:
    return m.sensitivity / m.scale


def subsampled_laplace_event(m: Any) -> dp_accounting.DpEvent:
    """T Poisson-sampled Laplace steps as dp_accounting states them (noise relative to the sensitivity); the same
    event under either neighbouring relation (the relation is the accountant's argument)."""
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(m.sampling_rate, dp_accounting.LaplaceDpEvent(m.scale / m.sensitivity)),
        m.steps,
    )


def subsampled_discrete_laplace_event(m: Any) -> dp_accounting.DpEvent:
    """T Poisson-sampled discrete Laplace steps as dp_accounting states them."""
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(
            m.sampling_rate, dp_accounting.dp_event.DiscreteLaplaceDpEvent(m.noise_parameter, m.sensitivity)
        ),
        m.steps,
    )


SUBSAMPLED_LAPLACE = KindSpec(
    cls=SubsampledLaplace,
    steps_param="steps",
    summary="steps compositions of a Poisson-subsampled Laplace mechanism (add/remove)",
    draw=lambda rng: SubsampledLaplace(
        scale=log_uniform(rng, 0.3, 5.0),
        sampling_rate=log_uniform(rng, 1e-2, 0.5),
        steps=int(rng.integers(1, 30)),
        sensitivity=float(rng.choice([1.0, 0.5])),
    ),
    pld=lambda m, *, step, pessimistic: pld_lib.from_laplace_mechanism(
        m.scale,
        sensitivity=m.sensitivity,
        **dpa_discretisation(step, pessimistic),
        sampling_prob=m.sampling_rate,
    ),
    **_amplified_pure_hooks(_sl_eps0),
    to_dp_event=subsampled_laplace_event,
    from_dp_event=dp_events.subsampled_laplace_from_event,
    exact_mu=Unsupported("the subsampled Laplace mechanism is not exactly GDP"),
)


def _sdl_eps0(m: SubsampledDiscreteLaplace) -> float:
    return m.noise_parameter * m.sensitivity


SUBSAMPLED_DISCRETE_LAPLACE = KindSpec(
    cls=SubsampledDiscreteLaplace,
    steps_param="steps",
    summary="steps compositions of a Poisson-subsampled discrete Laplace mechanism (add/remove)",
    draw=lambda rng: SubsampledDiscreteLaplace(
        noise_parameter=log_uniform(rng, 0.2, 3.0),
        sampling_rate=log_uniform(rng, 1e-2, 0.5),
        steps=int(rng.integers(1, 30)),
        sensitivity=int(rng.integers(1, 3)),
    ),
    pld=lambda m, *, step, pessimistic: pld_lib.from_discrete_laplace_mechanism(
        m.noise_parameter,
        sensitivity=m.sensitivity,
        **dpa_discretisation(step, pessimistic),
        sampling_prob=m.sampling_rate,
    ),
    **_amplified_pure_hooks(_sdl_eps0),
    construction_points=lambda m, n: n + m.sensitivity,
    to_dp_event=subsampled_discrete_laplace_event,
    from_dp_event=dp_events.subsampled_discrete_laplace_from_event,
    exact_mu=Unsupported("the subsampled discrete Laplace mechanism is not exactly GDP"),
)
