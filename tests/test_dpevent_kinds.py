"""The kinds users already describe with dp_accounting DpEvents (gdpcore/kinds/: discrete and subsampled Laplace,
k-ary randomized response, fixed-size and truncated batches, mixtures of Gaussians, tree aggregation, zCDP) against
independent truth.

(1) dp_accounting at a 10x finer step: the report's bracket [lower, upper] of eps at delta in {1e-5, 1e-9} contains
dp_accounting's pessimistic value computed here on the kind's DpEvent with its PLD accountant where that accountant
takes the event, else with dp_accounting's own PLD constructor for the release the event describes (named per case).
(2) Closed forms where they exist, with their source named in each test.
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.rdp import rdp_privacy_accountant

import gdpcore as g
from gdpcore import closed_form, kinds
from gdpcore.mechanisms import (
    DiscreteLaplace,
    KaryRandomizedResponse,
    MixtureOfGaussians,
    SampledWithoutReplacementGaussian,
    SubsampledDiscreteLaplace,
    SubsampledLaplace,
    TreeAggregation,
    TruncatedSubsampledGaussian,
)

DELTAS = (1e-5, 1e-9)
REL = {
    "add_remove": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
    "replace_one": dp_accounting.NeighboringRelation.REPLACE_ONE,
}
SLACK = 1e-7
"""Relative slack: a 10x finer pessimistic PLD may sit a hair above a coarser one by the tail mass dp_accounting
truncates per composition (1e-15 each) and its eps root finding (measured: 5e-9 relative on subsampled Laplace)."""


def _accountant_eps(m, step: float) -> list[float]:
    acc = pld_privacy_accountant.PLDAccountant(REL[m.neighbouring_relation], value_discretization_interval=step)
    event = kinds.to_dp_event(m)
    assert acc.supports(event), event
    acc.compose(event)
    return [acc.get_epsilon(d) for d in DELTAS]


def _pld_eps(pld) -> list[float]:
    return [pld.get_epsilon_for_delta(d) for d in DELTAS]


def _assert_bracket(report: g.PrivacyReport, reference: list[float]) -> None:
    for d, ref in zip(DELTAS, reference, strict=True):
        hi = float(report.epsilon(d))
        lo = float(report.epsilon(d, side="optimistic")) if report.has_optimistic else 0.0
        assert lo * (1 - SLACK) <= ref <= hi * (1 + SLACK), (d, lo, ref, hi)


def _finer(report: g.PrivacyReport) -> float:
    return (report.discretization or 1e-4) / 10.0


# -- (1) brackets contain dp_accounting at a 10x finer step --------------------------------------------------------------
ACCOUNTANT_CASES = [
    DiscreteLaplace(noise_parameter=0.7, sensitivity=2),
    SubsampledLaplace(scale=1.5, sampling_rate=0.1, steps=20),
    KaryRandomizedResponse(noise_parameter=0.4, num_buckets=6),
    MixtureOfGaussians(standard_deviation=2.0, sensitivities=[0.0, 0.5, 1.0], probabilities=[0.5, 0.3, 0.2], steps=3),
    TruncatedSubsampledGaussian(
        noise_multiplier=1.5, sampling_rate=0.05, dataset_size=1000, truncated_batch_size=55, steps=10
    ),
]


@pytest.mark.parametrize("m", ACCOUNTANT_CASES, ids=lambda m: m.kind)
@pytest.mark.slow  # dp_accounting's PLD accountant per kind: up to 249 s at load 8 on the 2 shared cores
def test_bracket_contains_dp_accounting_pld_accountant(m):
    """dp_accounting's PLDAccountant on the kind's own DpEvent (PoissonSampled(Laplace), DiscreteLaplace,
    RandomizedResponse with k buckets, MixtureOfGaussians, TruncatedSubsampledGaussian)."""
    r = g.analyze(m)
    _assert_bracket(r, _accountant_eps(m, _finer(r)))


def test_truncated_reports_upper_ends_only():
    m = ACCOUNTANT_CASES[-1]
    r = g.analyze(m)
    assert not r.has_optimistic and r.status.startswith("upper_bound_only")
    assert math.isnan(r.mu_lower) and math.isnan(r.advantage_lower)
    summary = r.summary()
    assert all(row["lower"] is None for row in summary["epsilon"])
    assert math.isnan(summary["advantage"]["lower"]) and math.isnan(summary["mu"]["lower"])


def test_subsampled_discrete_laplace_against_dp_accounting_constructor():
    """dp_accounting's PLD accountant refuses PoissonSampled(DiscreteLaplace); its from_discrete_laplace_mechanism
    takes the sampling probability (add/remove pair of Zhu, Dong, Wang 2022) - the reference here."""
    m = SubsampledDiscreteLaplace(noise_parameter=1.0, sampling_rate=0.2, steps=10, sensitivity=1)
    r = g.analyze(m)
    ref = pld_lib.from_discrete_laplace_mechanism(
        1.0, sensitivity=1, value_discretization_interval=_finer(r), sampling_prob=0.2, use_connect_dots=True
    ).self_compose(10)
    _assert_bracket(r, _pld_eps(ref))


@pytest.mark.slow  # 114 s at load 8 on the 2 shared cores
def test_sampled_without_replacement_against_dp_accounting_replace_one_pld():
    """Fixed-size batches, replace-one: dp_accounting's replace-one subsampled-Gaussian PLD with q = m/n (the pair
    the Fourier accountant of Koskela et al. 2020 uses for sampling without replacement under substitution)."""
    m = SampledWithoutReplacementGaussian(noise_multiplier=1.2, dataset_size=1000, batch_size=50, steps=10)
    r = g.analyze(m)
    ref = pld_lib.from_gaussian_mechanism(
        1.2,
        value_discretization_interval=_finer(r),
        sampling_prob=0.05,
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE,
    ).self_compose(10)
    _assert_bracket(r, _pld_eps(ref))
    # dp_accounting's RDP accountant refuses this event under add/remove, and so does gdpcore.
    with pytest.raises(g.UnsupportedMechanismError, match="SampledWithoutReplacementDpEvent"):
        g.from_dp_event(kinds.to_dp_event(m).event, neighboring_relation="add_remove")


@pytest.mark.slow  # 12 s at load 8 on the 2 shared cores
def test_tree_aggregation_against_dp_accounting():
    """The tree release is exactly a Gaussian with mu = sqrt(h)/sigma, h = ceil(log2(T+1)) (Kairouz et al. 2021
    App. D): dp_accounting's Gaussian PLD of that mu at a fine step sits in the (exact) report, and dp_accounting's
    RDP accountant on the SingleEpochTreeAggregationDpEvent (REPLACE_SPECIAL) is an upper bound above it."""
    m = TreeAggregation(noise_multiplier=4.0, steps=100)
    assert m.depth == 7
    r = g.analyze(m)
    assert r.exact and r.mu == pytest.approx(math.sqrt(7) / 4.0, rel=1e-15)
    ref = pld_lib.from_gaussian_mechanism(4.0, sensitivity=math.sqrt(7), value_discretization_interval=1e-5)
    for d, e in zip(DELTAS, _pld_eps(ref), strict=True):
        assert float(r.epsilon(d)) <= e + SLACK and e == pytest.approx(float(r.epsilon(d)), rel=2e-3)
    rdp = rdp_privacy_accountant.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_SPECIAL)
    rdp.compose(kinds.to_dp_event(m))
    for d in DELTAS:
        assert rdp.get_epsilon(d) >= float(r.epsilon(d))


# -- (2) closed forms ----------------------------------------------------------------------------------------------------
def test_discrete_laplace_closed_forms():
    """DLap(a) has P(z) = tanh(a/2) e^{-a|z|} (dp_accounting's DiscreteLaplaceDpEvent docstring): pure eps = a*Delta
    (the likelihood ratio is at most e^{a Delta}), and for Delta = 1 the total variation is P(0) = tanh(a/2)."""
    a = 0.7
    r = g.analyze(DiscreteLaplace(noise_parameter=a, sensitivity=1))
    step = r.discretization
    assert float(r.delta(a + step)) <= 1e-12 < float(r.delta(a - step))  # (a, 0)-DP and no better
    assert r.advantage_lower - 1e-12 <= math.tanh(a / 2) <= r.advantage + 1e-12
    assert g.analyze(DiscreteLaplace(noise_parameter=a, sensitivity=3)).epsilon(1e-12) <= 3 * a + 1e-9


def test_subsampled_laplace_pure_epsilon():
    """Poisson subsampling of an eps0-DP mechanism gives log(1 + q(e^eps0 - 1)) (Balle, Barthe, Gaboardi 2018 Thm 8),
    attained by Laplace noise: delta vanishes there and not below."""
    m = SubsampledLaplace(scale=1.0, sampling_rate=0.1, steps=1)
    eps = math.log1p(0.1 * math.expm1(1.0))
    r = g.analyze(m)
    assert float(r.delta(eps + r.discretization)) <= 1e-12 < float(r.delta(eps - r.discretization))


def _rr_exact_delta(p: float, k: int, q: float, eps: float) -> float:
    """delta(eps) of (Poisson-subsampled) k-ary RR by direct summation over the k outputs: a respondent takes part
    with probability q; a non-participant's output is uniform. Independent of dp_accounting and of the kind's
    p' = 1 - q (1 - p) reduction."""

    def law(x: int) -> np.ndarray:
        rr = np.full(k, p / k)
        rr[x] += 1 - p
        return q * rr + (1 - q) * np.full(k, 1.0 / k)

    a, b = law(0), law(1)
    return float(np.maximum(a - math.exp(eps) * b, 0).sum())


@pytest.mark.parametrize(("p", "k", "q"), [(0.4, 6, 1.0), (0.2, 3, 0.3), (0.7, 10, 0.5)])
def test_kary_randomized_response_exact(p, k, q):
    """k-ary RR (replace-one): pure eps = log(1 + k(1-p)/p) for the effective p (Wang et al. 2017 / Kairouz et al.
    2016 k-RR form), delta(eps) by summation over outputs."""
    m = KaryRandomizedResponse(noise_parameter=p, num_buckets=k, sampling_rate=q)
    pe = 1 - q * (1 - p)
    eps0 = math.log1p(k * (1 - pe) / pe)
    r = g.analyze(m)
    step = r.discretization  # the pessimistic PLD rounds the loss eps0 up to the next multiple of its step
    assert float(r.delta(eps0 + step)) <= 1e-12 < float(r.delta(eps0 - step))
    for eps in (0.0, 0.3 * eps0, 0.8 * eps0):
        truth = _rr_exact_delta(p, k, q, eps)
        assert float(r.delta(eps, side="optimistic")) - 1e-12 <= truth <= float(r.delta(eps)) + 1e-12
    assert r.advantage == pytest.approx(1 - pe, abs=1e-3)


def test_kary_randomized_response_self_composed_counts_every_run():
    """dp_accounting's PLDAccountant composes SelfComposed(RandomizedResponse, n) once (its RR branch ignores the
    count); gdpcore composes n times: 3 runs of eps0-DP RR are 3 eps0-DP, checked by exact summation over outputs."""
    m = KaryRandomizedResponse(noise_parameter=0.5, num_buckets=4)
    three = g.SelfComposed(mechanism=m, count=3)
    eps0 = math.log1p(4 * 0.5 / 0.5)
    r = g.analyze(three)
    step = r.discretization
    assert float(r.delta(3 * (eps0 + step))) <= 1e-12 < float(r.delta(3 * (eps0 - step)))


@pytest.mark.slow  # 69 s at load 8 on the 2 shared cores
def test_mixture_single_component_is_the_gaussian():
    """A one-component mixture is the Gaussian mechanism: exactly (c sqrt(T)/s)-GDP (Dong et al. 2022 Cor. 3.3)."""
    m = MixtureOfGaussians(standard_deviation=2.0, sensitivities=[1.0], probabilities=[1.0], steps=4)
    r = g.analyze(m)
    assert r.exact and r.mu == pytest.approx(1.0, rel=1e-15)
    mix = MixtureOfGaussians(standard_deviation=2.0, sensitivities=[0.0, 1.0], probabilities=[0.5, 0.5], steps=4)
    r_mix = g.analyze(mix)
    assert r_mix.mu <= r.mu + 1e-9  # mixing in sensitivity 0 (subsampling, q = 1/2) never hurts


def test_truncated_without_truncation_is_the_subsampled_gaussian():
    """With a cap no batch can exceed (truncated_batch_size >= dataset_size) dp_accounting's construction is the
    plain Poisson-subsampled Gaussian; its upper ends sit at or above that mechanism's bracket computed by the
    independent gdpcore.pld path."""
    m = TruncatedSubsampledGaussian(
        noise_multiplier=1.1, sampling_rate=0.02, dataset_size=500, truncated_batch_size=500, steps=50
    )
    sg = g.analyze(g.SubsampledGaussian(noise_multiplier=1.1, sampling_rate=0.02, steps=50))
    r = g.analyze(m)
    for d in DELTAS:
        assert float(r.epsilon(d)) >= float(sg.epsilon(d, side="optimistic")) - SLACK
        assert float(r.epsilon(d)) == pytest.approx(float(sg.epsilon(d)), rel=5e-3)


def test_sampled_without_replacement_full_batch_is_gaussian_with_sensitivity_two():
    """batch = dataset: every step is a Gaussian whose sum moves by 2C under replace-one: (2 sqrt(T)/sigma)-GDP."""
    m = SampledWithoutReplacementGaussian(noise_multiplier=2.0, dataset_size=10, batch_size=10, steps=9)
    r = g.analyze(m)
    assert r.exact and r.mu == pytest.approx(3.0)
    assert float(r.epsilon(1e-5)) == pytest.approx(float(closed_form.get_epsilon_from_gdp(mu=3.0, delta=1e-5)))


@pytest.mark.parametrize("rho", [0.01, 0.1, 1.0])
def test_zcdp_statement_is_an_upper_bound_between_closed_forms(rho):
    """A rho-zCDP statement (dp_accounting's ZCDpEvent): its curve is an upper bound only. Below it: the Gaussian
    with mu = sqrt(2 rho), which is rho-zCDP (Bun & Steinke 2016 Prop. 1.6), so no valid statement curve is better.
    Above it: the conversion eps = rho + 2 sqrt(rho log(1/delta)) (Bun & Steinke 2016 Prop. 1.3). dp_accounting's RDP
    accountant on the event (the only dp_accounting accountant that takes it) agrees to 0.1%."""
    m = g.ZCDP(rho=rho)
    r = g.analyze(m)
    assert not r.has_optimistic and r.status.startswith("upper_bound_only")
    assert math.isnan(r.mu_lower) and math.isnan(r.advantage_lower)
    with pytest.raises(ValueError):
        r.epsilon(1e-5, side="optimistic")
    rdp = rdp_privacy_accountant.RdpAccountant()
    rdp.compose(kinds.to_dp_event(m))
    for d in DELTAS:
        eps = float(r.epsilon(d))
        gauss = float(closed_form.get_epsilon_from_gdp(mu=math.sqrt(2 * rho), delta=d))
        bun_steinke = rho + 2 * math.sqrt(rho * math.log(1 / d))
        assert gauss <= eps <= bun_steinke
        assert eps == pytest.approx(rdp.get_epsilon(d), rel=1e-3)
    assert g.from_dp_event(dp_accounting.ZCDpEvent(rho)) == m
