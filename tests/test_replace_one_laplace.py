"""``PoissonSampledDpEvent(q, LaplaceDpEvent(b))`` and ``PoissonSampledDpEvent(q, DiscreteLaplaceDpEvent(a, D))`` under
``REPLACE_ONE`` (gdpcore/kinds/replace_one.py): dp_accounting's REPLACE adjacency with sub-sampling
(privacy_loss_mechanism.AdditiveNoisePrivacyLoss), (1-q) L(0) + q L(-D) vs (1-q) L(0) + q L(D). dp_accounting has no
construction for this pair (its PLD accountant refuses both events under REPLACE_ONE), so the truths are independent:

- one step: the hockey-stick divergence delta(eps) = int max(0, p - e^eps q), by numerical quadrature (continuous
  noise) or an exact sum over the integers (discrete noise), in both directions (P vs Q and Q vs P);
- q = 1: the pair is L(-D) vs L(D), the Laplace mechanism with sensitivity 2D: delta(eps) = 1 - e^((eps - eps0)/2),
  eps0 = 2D/b, in closed form, and dp_accounting's Laplace PLD at sensitivity 2D over T steps;
- T steps, any q: group privacy. A replace-one neighbour D' of D is D with one record x removed and x' added, so the
  run's (eps, delta) for the pair (D, D') follows from its add/remove guarantees of the two legs D -> D - x -> D':
  if the run is (e, d)-DP under add/remove (both directions; dp_accounting's PLD accountant on the same event), it
  is (2e, d (1 + e^e))-DP under replace-one. So gdpcore's replace-one eps at delta' = d (1 + e^e) is at most 2e
  (asserted of both ends: the lower end by the theorem, the upper end as a tightness check with room to spare).
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import pld_privacy_accountant, privacy_loss_mechanism
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy import integrate

import gdpcore as g
from gdpcore import kinds
from gdpcore.kinds.replace_one import _ReplaceOneLaplaceLoss, replace_one_max_loss
from gdpcore.mechanisms import ReplaceOneSubsampledDiscreteLaplace, ReplaceOneSubsampledLaplace
from gdpcore.representations import get_epsilon_from_mechanism

REPLACE_ONE = dp_accounting.NeighboringRelation.REPLACE_ONE
ADD_OR_REMOVE = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
EPSILONS = (0.0, 0.02, 0.1, 0.3, 0.6, 1.0)


def _laplace_pdf(x: float, mean: float, b: float) -> float:
    return 0.5 / b * math.exp(-abs(x - mean) / b)


def _quadrature_delta(q: float, b: float, d: float, eps: float, *, swap: bool) -> float:
    """int max(0, p - e^eps q) dx for the pair (P vs Q, or Q vs P when ``swap``), split at the kinks -D, 0, D."""

    def p(x):
        return (1 - q) * _laplace_pdf(x, 0, b) + q * _laplace_pdf(x, -d, b)

    def qq(x):
        return (1 - q) * _laplace_pdf(x, 0, b) + q * _laplace_pdf(x, d, b)

    first, second = (qq, p) if swap else (p, qq)
    edges = [-d - 80 * b, -d, 0.0, d, d + 80 * b]
    return math.fsum(
        integrate.quad(lambda x: max(0.0, first(x) - math.exp(eps) * second(x)), lo, hi, epsabs=1e-16, epsrel=1e-13)[0]
        for lo, hi in zip(edges, edges[1:], strict=False)
    )


def _integer_delta(q: float, a: float, d: int, eps: float, *, swap: bool) -> float:
    """sum_z max(0, P(z) - e^eps Q(z)) over the integers, DLap(a) having mass tanh(a/2) e^(-a|z|)."""
    z = np.arange(-4000, 4001)

    def dlap(mean: int) -> np.ndarray:
        return math.tanh(a / 2) * np.exp(-a * np.abs(z - mean))

    p, qq = (1 - q) * dlap(0) + q * dlap(-d), (1 - q) * dlap(0) + q * dlap(d)
    first, second = (qq, p) if swap else (p, qq)
    return math.fsum(np.maximum(first - math.exp(eps) * second, 0.0))


def _assert_brackets(r: g.PrivacyReport, truth: float, eps: float) -> None:
    hi, lo = float(r.delta(eps)), float(r.delta(eps, side="optimistic"))
    assert lo <= truth + 1e-13 <= hi + 2e-13, (eps, lo, truth, hi)
    assert hi - truth <= 1e-4 * max(truth, 1e-3), (eps, lo, truth, hi)  # the upper end tight, not merely valid
    assert truth - lo <= 2 * r.discretization, (eps, lo, truth, hi)  # losses rounded down by at most one step


def _assert_within_dp_accounting(r, construction, parameter, sensitivity, steps):
    """q = 1: the report's ends bracket dp_accounting's optimistic and pessimistic PLD of the replaced record's
    mechanism at sensitivity 2D, composed ``steps`` times, at a 10x finer step."""
    step = r.discretization / 10
    ref = {
        side: construction(
            parameter,
            sensitivity=sensitivity,
            value_discretization_interval=step,
            pessimistic_estimate=side,
            use_connect_dots=side,
        ).self_compose(steps)
        for side in (True, False)
    }
    for delta in (1e-3, 1e-6, 1e-9):
        lo, hi = float(r.epsilon(delta, side="optimistic")), float(r.epsilon(delta))
        assert ref[False].get_epsilon_for_delta(delta) <= hi + 1e-9
        assert lo <= ref[True].get_epsilon_for_delta(delta) + 1e-9


@pytest.mark.parametrize(("q", "b", "d"), [(0.1, 1.0, 1.0), (0.5, 0.5, 1.0), (0.01, 0.3, 1.0), (0.2, 2.0, 0.5)])
def test_one_step_brackets_the_hockey_stick_by_quadrature(q, b, d):
    r = g.analyze(ReplaceOneSubsampledLaplace(scale=b, sampling_rate=q, sensitivity=d))
    for eps in EPSILONS:
        forward = _quadrature_delta(q, b, d, eps, swap=False)
        backward = _quadrature_delta(q, b, d, eps, swap=True)
        assert backward == pytest.approx(forward, rel=1e-9, abs=1e-15)  # the pair is symmetric
        _assert_brackets(r, forward, eps)
    # the pure epsilon: delta vanishes at L, not below
    big = replace_one_max_loss(d / b, q)
    assert get_epsilon_from_mechanism(r.mechanism) == pytest.approx(big, rel=1e-12)
    assert _quadrature_delta(q, b, d, big, swap=False) < 1e-14 < _quadrature_delta(q, b, d, 0.99 * big, swap=False)


@pytest.mark.parametrize(("q", "a", "d"), [(0.1, 1.0, 2), (0.3, 0.5, 1), (0.05, 2.0, 3)])
def test_one_step_discrete_brackets_the_exact_sum(q, a, d):
    r = g.analyze(ReplaceOneSubsampledDiscreteLaplace(noise_parameter=a, sampling_rate=q, sensitivity=d))
    for eps in EPSILONS:
        forward = _integer_delta(q, a, d, eps, swap=False)
        assert _integer_delta(q, a, d, eps, swap=True) == pytest.approx(forward, rel=1e-9, abs=1e-15)
        _assert_brackets(r, forward, eps)


def test_full_sampling_is_the_laplace_with_twice_the_sensitivity():
    """q = 1: Lap(-D) vs Lap(D), delta(eps) = 1 - e^((eps - eps0)/2) with eps0 = 2D/b (closed form); over T steps
    dp_accounting's Laplace PLD at sensitivity 2D (pessimistic and optimistic) brackets the same truth."""
    b, d = 1.3, 0.8
    eps0 = 2 * d / b
    r = g.analyze(ReplaceOneSubsampledLaplace(scale=b, sampling_rate=1.0, sensitivity=d))
    assert get_epsilon_from_mechanism(r.mechanism) == pytest.approx(eps0, rel=1e-12)
    for eps in (0.0, 0.3, 0.9, 1.2):
        _assert_brackets(r, -math.expm1((eps - eps0) / 2), eps)
    steps = 8
    r = g.analyze(ReplaceOneSubsampledLaplace(scale=b, sampling_rate=1.0, sensitivity=d, steps=steps))
    _assert_within_dp_accounting(r, pld_lib.from_laplace_mechanism, b, 2 * d, steps)


@pytest.mark.parametrize(("q", "b", "steps"), [(0.05, 1.0, 50), (0.2, 2.0, 20), (0.01, 0.5, 200)])
def test_t_steps_within_group_privacy_of_dp_accountings_add_remove(q, b, steps):
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.LaplaceDpEvent(b)), steps
    )
    r = g.analyze(g.from_dp_event(event, neighboring_relation=REPLACE_ONE))
    acc = pld_privacy_accountant.PLDAccountant(ADD_OR_REMOVE, value_discretization_interval=1e-4)
    acc.compose(event)
    for delta in (1e-4, 1e-6, 1e-9):
        e = acc.get_epsilon(delta)
        bound = 2 * e
        replace_delta = delta * (1 + math.exp(e))
        lo, hi = float(r.epsilon(replace_delta, side="optimistic")), float(r.epsilon(replace_delta))
        assert lo <= hi <= bound, (delta, lo, hi, bound)


def test_dp_events_map_to_the_replace_one_kinds_and_dp_accounting_refuses_them():
    laplace = dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.LaplaceDpEvent(2.0))
    discrete = dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.dp_event.DiscreteLaplaceDpEvent(0.5, 2))
    assert kinds.mechanism_from_dp_event(laplace, neighbouring="replace_one") == ReplaceOneSubsampledLaplace(
        scale=2.0, sampling_rate=0.1
    )
    assert kinds.mechanism_from_dp_event(
        dp_accounting.SelfComposedDpEvent(discrete, 7), neighbouring="replace_one"
    ) == ReplaceOneSubsampledDiscreteLaplace(noise_parameter=0.5, sampling_rate=0.1, sensitivity=2, steps=7)
    for event in (laplace, discrete):
        assert not pld_privacy_accountant.PLDAccountant(REPLACE_ONE).supports(event)
    # inside a composition, beside a replace-one Poisson Gaussian
    both = dp_accounting.ComposedDpEvent(
        [laplace, dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(2.0)), discrete]
    )
    r = g.analyze(g.from_dp_event(both, neighboring_relation=REPLACE_ONE))
    parts = [g.analyze(g.from_dp_event(e, neighboring_relation=REPLACE_ONE)) for e in both.events]
    assert float(r.epsilon(1e-6)) >= max(float(p.epsilon(1e-6, side="optimistic")) for p in parts)
    # add/remove still reads them as the add/remove kinds
    assert kinds.mechanism_from_dp_event(laplace).kind == "subsampled_laplace"


@pytest.mark.parametrize(("b", "d", "q"), [(0.3, 1.0, 0.5), (1.0, 1.0, 0.1), (2.0, 0.5, 1.0), (1.0, 1.0, 0.01)])
def test_vectorised_constructions_equal_dp_accountings_loops(b, d, q):
    """The kind's vectorised hockey-stick and privacy-buckets PMF are dp_accounting's own scalar code paths
    (AdditiveNoisePrivacyLoss.get_delta_for_epsilon, _create_pld_pmf_from_monotone_privacy_loss) on the same loss."""
    loss = _ReplaceOneLaplaceLoss(b, d, q)
    eps = np.linspace(-loss._max_loss - 0.1, loss._max_loss + 0.1, 301)
    scalar = privacy_loss_mechanism.AdditiveNoisePrivacyLoss.get_delta_for_epsilon(loss, eps)
    np.testing.assert_array_equal(loss.get_delta_for_epsilon(eps), scalar)
    ours = loss.buckets_pmf(1e-3).to_dense_pmf()
    theirs = pld_lib._create_pld_pmf_from_monotone_privacy_loss(
        loss, pessimistic_estimate=False, value_discretization_interval=1e-3, use_connect_dots=False
    ).to_dense_pmf()
    assert ours._lower_loss == theirs._lower_loss
    np.testing.assert_allclose(ours._probs, theirs._probs, rtol=0, atol=1e-16)


def test_discrete_full_sampling_is_the_discrete_laplace_with_twice_the_sensitivity():
    """q = 1: DLap(-D) vs DLap(D) is the discrete Laplace mechanism with sensitivity 2D: pure eps 2aD, and delta(eps)
    the exact integer sum; dp_accounting's connect-the-dots PLD of it at sensitivity 2D (over T steps) is bracketed."""
    a, d, steps = 0.4, 2, 6
    r = g.analyze(ReplaceOneSubsampledDiscreteLaplace(noise_parameter=a, sampling_rate=1.0, sensitivity=d))
    assert get_epsilon_from_mechanism(r.mechanism) == pytest.approx(2 * a * d, rel=1e-12)
    for eps in (0.0, 0.5, 1.2):
        _assert_brackets(r, _integer_delta(1.0, a, d, eps, swap=False), eps)
    r = g.analyze(ReplaceOneSubsampledDiscreteLaplace(noise_parameter=a, sampling_rate=1.0, sensitivity=d, steps=steps))
    _assert_within_dp_accounting(r, pld_lib.from_discrete_laplace_mechanism, a, 2 * d, steps)
