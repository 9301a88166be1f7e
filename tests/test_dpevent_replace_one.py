"""DpEvents dp_accounting accounts for and gdpcore used to refuse or bound loosely, each against dp_accounting computed
in the same test (or a closed form / numerical integration where dp_accounting has no number):

- ``PoissonSampledDpEvent(q, GaussianDpEvent(s))`` under ``REPLACE_ONE``, alone and inside compositions: dp_accounting's
  PLD accountant reads it as (1-q) N(0, s^2) + q N(-1, s^2) vs (1-q) N(0, s^2) + q N(1, s^2)
  (pld_privacy_accountant.py, privacy_loss_mechanism.AdditiveNoisePrivacyLoss); gdpcore's bracket [lower, upper] on
  eps(delta) holds its pessimistic value at a 10x finer step and is never below its optimistic value there;
- a fixed-size batch of 0 records releases nothing: eps = 0, as dp_accounting's RDP accountant says;
- ``SingleEpochTreeAggregationDpEvent`` under ``REPLACE_SPECIAL`` (the relation dp_accounting's RDP accountant requires
  for it): dp_accounting's Gaussian PLD with sensitivity sqrt(depth) inside the bracket, its RDP value above it;
- compositions of (xi, rho)-zCDP statements: the upper eps is never above dp_accounting's RDP conversion of the same
  statements, and never below the Gaussian that satisfies the composed statement.
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.rdp import rdp_privacy_accountant
from scipy import integrate, stats

import gdpcore as g
from gdpcore import closed_form
from gdpcore.kinds.mixture import _ReplaceOneMixtureLoss

DELTAS = (1e-5, 1e-9)
REPLACE_ONE = dp_accounting.NeighboringRelation.REPLACE_ONE
REPLACE_SPECIAL = dp_accounting.NeighboringRelation.REPLACE_SPECIAL
SLACK = 1e-7
"""Relative slack (as tests/test_dpevent_kinds.py): dp_accounting's replace-one subsampled-Gaussian PMF gains mass at
fine steps (its P-mass exceeds 1 by 1e-3 after 50 steps at 2.2e-6, measured) and sits that much above the truth."""


def _poisson(q: float, sigma: float, steps: int) -> dp_accounting.DpEvent:
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps
    )


def _assert_brackets_dp_accounting(
    event: dp_accounting.DpEvent, optimistic_reference, discretization: float | None = None
) -> None:
    """gdpcore's bracket holds dp_accounting's PLD accountant (pessimistic, its own event path) at a 10x finer step,
    and its upper end is not below dp_accounting's optimistic PLD there (``optimistic_reference(step)``). The report
    at ``discretization`` (None: refined to the default tolerance)."""
    r = g.analyze(g.from_dp_event(event, neighboring_relation=REPLACE_ONE), discretization=discretization)
    assert r.has_optimistic
    step = r.discretization / 10.0
    acc = pld_privacy_accountant.PLDAccountant(REPLACE_ONE, value_discretization_interval=step)
    assert acc.supports(event)
    acc.compose(event)
    opt = optimistic_reference(step)
    for d in DELTAS:
        lo, hi = float(r.epsilon(d, side="optimistic")), float(r.epsilon(d))
        ref, ref_opt = acc.get_epsilon(d), opt.get_epsilon_for_delta(d)
        assert lo * (1 - SLACK) <= ref <= hi * (1 + SLACK), (d, lo, ref, hi)
        assert ref_opt <= hi, (d, ref_opt, hi)


def _optimistic_poisson(q: float, sigma: float, steps: int):
    def build(step: float):
        return pld_lib.from_gaussian_mechanism(
            sigma,
            value_discretization_interval=step,
            sampling_prob=q,
            neighboring_relation=REPLACE_ONE,
            pessimistic_estimate=False,
            use_connect_dots=False,
        ).self_compose(steps)

    return build


# -- PoissonSampledDpEvent under REPLACE_ONE -----------------------------------------------------------------------------
def test_replace_one_poisson_gaussian_is_the_replace_one_mixture():
    event = _poisson(0.05, 1.2, 100)
    m = g.from_dp_event(event, neighboring_relation=REPLACE_ONE)
    assert m == g.MixtureOfGaussians(
        standard_deviation=1.2,
        sensitivities="0.0,1.0",
        probabilities="0.95,0.05",
        steps=100,
        neighbouring="replace_one",
    )
    assert g.kinds.to_dp_event(m) == event
    # Under add/remove the same event is still DP-SGD's subsampled Gaussian.
    assert g.from_dp_event(event) == g.SubsampledGaussian(noise_multiplier=1.2, sampling_rate=0.05, steps=100)


@pytest.mark.parametrize(
    ("q", "sigma", "steps", "discretization"),
    [
        pytest.param(0.3, 4.0, 5, 1e-4, id="q0.3-s4-T5-step1e-4"),
        pytest.param(0.3, 4.0, 5, None, id="q0.3-s4-T5", marks=pytest.mark.slow),  # 40 s at load 2
        pytest.param(0.01, 1.0, 10, None, id="q0.01-s1-T10", marks=pytest.mark.slow),  # ~90 s: dp_accounting at 1e-5
        pytest.param(0.1, 2.0, 50, None, id="q0.1-s2-T50", marks=pytest.mark.slow),  # 280 s: dp_accounting at 2.2e-6
    ],
)
def test_replace_one_poisson_gaussian_brackets_dp_accounting(q, sigma, steps, discretization):
    _assert_brackets_dp_accounting(_poisson(q, sigma, steps), _optimistic_poisson(q, sigma, steps), discretization)


def test_replace_one_poisson_gaussian_inside_a_composition():
    """Composed with a plain Gaussian (dp_accounting's REPLACE_ONE Gaussian: N(1) vs N(-1), sensitivity 2)."""
    q, sigma, steps, other = 0.3, 4.0, 5, 3.0
    event = dp_accounting.ComposedDpEvent([_poisson(q, sigma, steps), dp_accounting.GaussianDpEvent(other)])
    m = g.from_dp_event(event, neighboring_relation=REPLACE_ONE)
    assert isinstance(m, g.Composed) and m.mechanisms[0].kind == "mixture_of_gaussians"

    def optimistic(step: float):
        gauss = pld_lib.from_gaussian_mechanism(
            other / 2.0,
            value_discretization_interval=step,
            pessimistic_estimate=False,
            use_connect_dots=False,
        )
        return _optimistic_poisson(q, sigma, steps)(step).compose(gauss)

    _assert_brackets_dp_accounting(event, optimistic, discretization=1e-4)


def test_replace_one_mixture_pair_matches_dp_accounting_and_integration():
    """The general replace-one mixture construction (sum p_i N(-c_i) vs sum p_i N(c_i), used for mixtures other than a
    Poisson-subsampled Gaussian) against dp_accounting's own replace-one subsampled Gaussian on the Poisson form (both
    sides, same step), and against delta(eps) = int (P(x) - e^eps Q(x))_+ dx by quadrature on a three-point mixture."""
    step = 1e-3
    for q, sigma in ((0.05, 1.0), (0.4, 2.0)):
        loss = _ReplaceOneMixtureLoss(sigma, [0.0, 1.0], [1 - q, q])
        pess = pld_lib.PrivacyLossDistribution(
            pld_lib._create_pld_pmf_from_monotone_privacy_loss(
                loss, pessimistic_estimate=True, value_discretization_interval=step, use_connect_dots=True
            )
        )
        opt = pld_lib.PrivacyLossDistribution(loss.buckets_pmf(step))
        kw = {"value_discretization_interval": step, "sampling_prob": q, "neighboring_relation": REPLACE_ONE}
        ref_pess = pld_lib.from_gaussian_mechanism(sigma, **kw)
        ref_opt = pld_lib.from_gaussian_mechanism(sigma, pessimistic_estimate=False, use_connect_dots=False, **kw)
        for eps in (0.0, 0.05, 0.5):
            assert pess.get_delta_for_epsilon(eps) == pytest.approx(ref_pess.get_delta_for_epsilon(eps), rel=1e-9)
            assert opt.get_delta_for_epsilon(eps) == pytest.approx(ref_opt.get_delta_for_epsilon(eps), rel=1e-9)

    s, c, p = 1.5, np.array([0.0, 0.5, 1.0]), np.array([0.6, 0.3, 0.1])
    m = g.MixtureOfGaussians(
        standard_deviation=s, sensitivities="0.0,0.5,1.0", probabilities="0.6,0.3,0.1", neighbouring="replace_one"
    )
    r = g.analyze(m)

    def truth(eps: float) -> float:
        def integrand(x: float) -> float:
            upper = float(np.dot(p, stats.norm.pdf(x, loc=-c, scale=s)))
            lower = float(np.dot(p, stats.norm.pdf(x, loc=c, scale=s)))
            return max(upper - math.exp(eps) * lower, 0.0)

        return integrate.quad(integrand, -40 * s, 40 * s, points=[0.0], epsabs=1e-13, epsrel=1e-10, limit=400)[0]

    for eps in (0.0, 0.1, 0.4):
        exact = truth(eps)
        assert float(r.delta(eps, side="optimistic")) - 1e-10 <= exact <= float(r.delta(eps)) + 1e-10, eps


# -- the empty batch ----------------------------------------------------------------------------------------------------
def test_empty_fixed_size_batch_releases_nothing():
    """A batch of 0 records out of n: the output is noise whatever the data, eps = 0 at every delta (dp_accounting's
    RDP accountant, the one that takes SampledWithoutReplacementDpEvent, says 0 too); composed with a Gaussian it
    adds nothing to the Gaussian's exact eps (seed 000 Eq. 6, mu = 2/sigma under replace-one)."""
    empty = dp_accounting.SampledWithoutReplacementDpEvent(1000, 0, dp_accounting.GaussianDpEvent(1.0))
    rdp = rdp_privacy_accountant.RdpAccountant(neighboring_relation=REPLACE_ONE)
    rdp.compose(empty)
    assert rdp.get_epsilon(1e-5) == 0.0
    r = g.analyze(g.from_dp_event(empty, neighboring_relation=REPLACE_ONE))
    for d in DELTAS:
        assert float(r.epsilon(d)) == 0.0
    assert r.advantage == 0.0
    event = dp_accounting.ComposedDpEvent(
        [dp_accounting.SelfComposedDpEvent(empty, 5), dp_accounting.GaussianDpEvent(2.0)]
    )
    r = g.analyze(g.from_dp_event(event, neighboring_relation=REPLACE_ONE))
    exact = float(closed_form.get_epsilon_from_gdp(mu=1.0, delta=1e-5))
    assert float(r.epsilon(1e-5, side="optimistic")) <= exact <= float(r.epsilon(1e-5)) <= exact * (1 + 1e-3)


# -- REPLACE_SPECIAL tree aggregation -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("event", "depth"),
    [
        (dp_accounting.SingleEpochTreeAggregationDpEvent(4.0, 100), 7),
        (dp_accounting.SelfComposedDpEvent(dp_accounting.SingleEpochTreeAggregationDpEvent(2.0, [50, 100]), 3), 7),
    ],
    ids=["one-tree", "three-runs-of-two-trees"],
)
def test_tree_aggregation_under_replace_special(event, depth):
    """dp_accounting's RDP accountant takes SingleEpochTreeAggregationDpEvent under REPLACE_SPECIAL only; each record
    moves the depth nodes on its leaf's path (the largest tree counts; Kairouz et al. 2021 App. D), so one run is the
    Gaussian mechanism with sensitivity sqrt(depth): dp_accounting's PLD of it at a fine step, composed for the runs,
    brackets the (exact) report, and its RDP value on the event is an upper bound above it."""
    inner, runs = (event.event, event.count) if isinstance(event, dp_accounting.SelfComposedDpEvent) else (event, 1)
    m = g.from_dp_event(event, neighboring_relation=REPLACE_SPECIAL)
    r = g.analyze(m)
    assert r.exact
    refs = [
        pld_lib.from_gaussian_mechanism(
            inner.noise_multiplier,
            sensitivity=math.sqrt(depth),
            value_discretization_interval=1e-4,
            pessimistic_estimate=pessimistic,
            use_connect_dots=pessimistic,
        ).self_compose(runs)
        for pessimistic in (False, True)
    ]
    rdp = rdp_privacy_accountant.RdpAccountant(neighboring_relation=REPLACE_SPECIAL)
    rdp.compose(event)
    for d in DELTAS:
        eps = float(r.epsilon(d))
        low, high = (ref.get_epsilon_for_delta(d) for ref in refs)
        assert low * (1 - SLACK) <= eps <= high * (1 + SLACK), (d, low, eps, high)
        assert eps <= rdp.get_epsilon(d)
    assert r.mu == pytest.approx(math.sqrt(depth * runs) / inner.noise_multiplier, rel=1e-12)


def test_randomized_response_under_replace_special_is_refused():
    with pytest.raises(g.UnsupportedMechanismError, match="REPLACE_SPECIAL"):
        g.from_dp_event(
            dp_accounting.SelfComposedDpEvent(dp_accounting.RandomizedResponseDpEvent(0.5, 4), 2),
            neighboring_relation=REPLACE_SPECIAL,
        )


# -- compositions of zCDP statements ------------------------------------------------------------------------------------
ZCDP_CASES = [
    # rho 10, xi 1 in total: before merging, 36.56 from gdpcore against dp_accounting's 31.13 (measured).
    dp_accounting.ComposedDpEvent([dp_accounting.ZCDpEvent(1.0, 0.1)] * 10),
    # rho 12: 40.92 against 34.13 before merging.
    dp_accounting.SelfComposedDpEvent(dp_accounting.ZCDpEvent(1.0), 12),
    # rho 10.5, xi 1.5 with a Gaussian: 34.92 (without the Gaussian) against 32.63 before merging.
    dp_accounting.ComposedDpEvent(
        [
            dp_accounting.ZCDpEvent(0.5),
            dp_accounting.ZCDpEvent(2.0, 0.5),
            dp_accounting.ZCDpEvent(5.0),
            dp_accounting.ZCDpEvent(3.0, 1.0),
            dp_accounting.GaussianDpEvent(2.0),
        ]
    ),
]


@pytest.mark.parametrize(
    ("event", "rho"),
    list(zip(ZCDP_CASES, (10.0, 12.0, 10.5 + 1 / 8), strict=True)),
    ids=["ten-statements", "self-composed", "with-a-gaussian"],
)
def test_zcdp_composition_never_looser_than_dp_accountings_rdp_conversion(event, rho):
    """dp_accounting's RDP accountant composes the statements' RDP bounds (xi + rho t each) and converts once; gdpcore's
    upper eps is at most that, and at least the eps of the Gaussian with mu = sqrt(2 rho), rho the statements' rhos
    plus the Gaussian's 1/(2 sigma^2): it is rho-zCDP exactly (Bun & Steinke 2016 Prop. 1.6) and so satisfies the
    composed (xi, rho) statement, whose valid upper bounds cannot be below it."""
    rdp = rdp_privacy_accountant.RdpAccountant()
    rdp.compose(event)
    r = g.analyze(g.from_dp_event(event))
    for d in DELTAS:
        hi = float(r.epsilon(d))
        assert hi <= rdp.get_epsilon(d), (d, hi, rdp.get_epsilon(d))
        assert hi >= float(closed_form.get_epsilon_from_gdp(mu=math.sqrt(2 * rho), delta=d))


def test_zcdp_composition_built_in_python_is_merged_too():
    statements = g.Composed(
        mechanisms=(g.SelfComposed(mechanism=g.ZCDP(rho=1.0, xi=0.1), count=5), g.ZCDP(rho=5.0, xi=0.5))
    )
    merged = g.ZCDP(rho=10.0, xi=1.0)
    assert g.kinds.single_steps(statements) == [(merged, 1)]
    rdp = rdp_privacy_accountant.RdpAccountant()
    rdp.compose(g.kinds.to_dp_event(statements))
    assert float(g.analyze(statements).epsilon(1e-5)) <= rdp.get_epsilon(1e-5)
