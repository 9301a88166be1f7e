"""gdpcore.curve.curve_from_threshold_tests: the optimistic curve through the error rates of tests on a
post-processed output, checked against closed forms (docs/references.md A-2, Dong, Roth & Su 2022)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

from gdpcore.curve import curve_from_threshold_tests


def test_randomized_response_is_reproduced_exactly():
    # Two outcomes with P = (1, e^eps) / (1 + e^eps) and Q the reverse: the trade-off curve of eps-DP,
    # f(alpha) = max(0, 1 - e^eps alpha, e^-eps (1 - alpha)) (Dong, Roth & Su 2022, Sec. 2.4).
    eps = math.log(3.0)
    e = math.exp(eps)
    p = np.array([1.0, e]) / (1.0 + e)
    q = np.array([e, 1.0]) / (1.0 + e)
    curve = curve_from_threshold_tests(p, q)
    assert curve.advantage == pytest.approx((e - 1.0) / (e + 1.0), abs=1e-14)  # 1/2
    alphas = np.linspace(0.0, 1.0, 101)
    exact = np.maximum(0.0, np.maximum(1.0 - e * alphas, (1.0 - alphas) / e))
    assert np.allclose(curve.fnr(alphas), exact, atol=1e-14)
    assert np.all(curve.fnr(alphas) >= exact - 1e-15)  # never below: the optimistic side
    ee = np.array([0.0, 0.3, 0.7, 1.0, 2.0])
    assert np.allclose(curve.delta_at(ee), np.maximum(0.0, (e - np.exp(ee)) / (1.0 + e)), atol=1e-14)


@pytest.mark.parametrize("mu", [0.5, 2.0, 6.0])
def test_binned_gaussian_pair_stays_above_and_close_to_g_mu(mu):
    # Binning N(mu, 1) against N(0, 1) is post-processing: the curve of the bins' tests lies on or above
    # G_mu(alpha) = Phi(Phi^-1(1 - alpha) - mu) (Dong, Roth & Su 2022, Def. 2.7), and close to it for narrow bins.
    edges = np.concatenate([[-np.inf], np.linspace(-12.0, 12.0 + mu, 4001), [np.inf]])

    def mass(shift: float) -> np.ndarray:
        # Bin masses to full relative precision: CDF differences below the mean, survival differences above.
        x = edges - shift
        lower = np.diff(special.ndtr(x))
        upper = -np.diff(special.ndtr(-x))
        return np.where(x[1:] <= 0.0, lower, upper)

    p, q = mass(mu), mass(0.0)
    curve = curve_from_threshold_tests(p, q)
    alphas = np.geomspace(1e-12, 0.5, 200)
    exact = special.ndtr(-special.ndtri(alphas) - mu)
    got = curve.fnr(alphas)
    assert np.all(got >= exact * (1 - 1e-12) - 1e-15)
    assert np.all(got <= exact + 2e-3 * np.maximum(exact, 1e-6))  # bins of 0.006: informative
    assert curve.advantage == pytest.approx(2.0 * special.ndtr(mu / 2.0) - 1.0, abs=1e-5)
    assert curve.advantage <= 2.0 * special.ndtr(mu / 2.0) - 1.0


def test_order_of_the_outcomes_does_not_matter():
    rng = np.random.default_rng(3)
    p = rng.random(50)
    q = rng.random(50)
    p, q = p / p.sum(), q / q.sum()
    a = curve_from_threshold_tests(p, q)
    perm = rng.permutation(50)
    b = curve_from_threshold_tests(p[perm], q[perm])
    alphas = np.linspace(0.0, 1.0, 57)
    assert np.allclose(a.fnr(alphas), b.fnr(alphas), atol=1e-14)
    # Slack on the P side only raises the curve (the optimistic direction).
    c = curve_from_threshold_tests(p, q, p_slack=1e-3)
    assert np.all(c.fnr(alphas) >= a.fnr(alphas) - 1e-15)


@pytest.mark.parametrize(
    ("p", "q", "slack", "needle"),
    [
        ([0.5, -0.1], [0.5, 0.5], 0.0, "p_low"),
        ([0.5, 0.5], [0.5, math.nan], 0.0, "q_high"),
        ([0.5, 0.5], [1.0], 0.0, "one entry per outcome"),
        ([[0.5, 0.5]], [[0.5, 0.5]], 0.0, "p_low"),
        ([0.5, 0.5], [0.5, 0.5], -1e-3, "p_slack"),
    ],
)
def test_bad_input_is_rejected_naming_the_field(p, q, slack, needle):
    with pytest.raises(ValueError, match=needle):
        curve_from_threshold_tests(np.array(p), np.array(q), p_slack=slack)
