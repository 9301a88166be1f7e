"""GDPT (seed 003): identification, certified mu brackets, Thm 5.1 and Thm 3.1, against the paper's statements,
high-precision (mpmath) values (docs/references.md S003) and a brute-force hockey-stick computation."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from gdpcore import Gaussian, Laplace, RandomizedResponse, SubsampledGaussian, analyze
from gdpcore.closed_form import get_delta_from_gdp, get_mu_from_pure_dp
from gdpcore.gdpt import (
    bracket_mu,
    gdpt,
    get_delta_from_epsilon_delta,
    get_gdp_upper_bound,
    get_mu_from_gdpt,
    identify_gdp,
    implies,
)


def laplace2(e):  # seed 003: Laplace with Delta/b = 2, delta(eps) = max(1 - exp(eps/2 - 1), 0)
    return np.maximum(-np.expm1(np.minimum(np.asarray(e, float), 2.0) / 2 - 1), 0.0)


E2 = 1.1878489  # precise root (docs/references.md S003-1); delta2 = exp(-eps2^2)
D2 = math.exp(-(E2**2))


def sgd(e):  # seed 003 "SGD" refined profile, A = 2, B = 1, sigma = 2
    e = np.asarray(e, float)
    head = D2 + (1 - D2) * np.clip(math.exp(E2) - np.exp(np.minimum(e, E2)), 0, None) / (1 + math.exp(E2))
    return np.minimum(head, np.exp(-(np.minimum(e, 30.0) ** 2)) * (e < 30))


K = 4 / math.e**2
E3 = 1.1566070
D3 = K / E3


def icea(e):  # seed 003 ICEA refined profile, m = 20, n = 4
    e = np.asarray(e, float)
    head = D3 + (1 - D3) * np.clip(math.exp(E3) - np.exp(np.minimum(e, E3)), 0, None) / (1 + math.exp(E3))
    return np.minimum(head, np.minimum(1.0, K / np.maximum(e, 1e-300)))


def pure1(e):
    return get_delta_from_epsilon_delta(epsilon0=1.0, delta0=0.0, at_epsilon=e)


# -- brackets -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("profile", "truth"),
    [(laplace2, 1.8009052), (sgd, 1.8563573), (pure1, 1.232035385)],
)
@pytest.mark.parametrize("c", [10, 100])
@pytest.mark.parametrize("method", ["shuffled", "plain"])
def test_bracket_contains_truth_with_margin(profile, truth, c, method):
    b = bracket_mu(profile, eps_h=10, c=c, method=method)
    assert b.lower <= truth <= b.upper  # mpmath values of sup G (S003-2)
    assert b.upper - b.lower <= 1 / c  # the guaranteed margin
    assert not b.hit_mu_max


def test_shuffled_bisects_rarely():
    plain = bracket_mu(laplace2, eps_h=10, c=100, method="plain")
    shuffled = bracket_mu(laplace2, eps_h=10, c=100, method="shuffled")
    assert plain.n == 5015 and plain.step == pytest.approx(0.001994416, abs=1e-9)  # App. D example (S003-3)
    assert shuffled.n_bisections < plain.n_bisections / 20  # expected O(log n)
    assert (shuffled.lower, shuffled.upper) == (plain.lower, plain.upper)


def test_laplace_is_2_gdp_not_1_gdp():
    # Paper Fig. 1: "the Laplace mechanism ... is 2-GDP and 4-GDP but not 1-GDP" (Delta/b = 2).
    b = bracket_mu(laplace2, eps_h=10, c=100)
    assert b.upper <= 2.0 and b.lower > 1.0
    assert b.tail_residual < 1e-6  # and delta = 0 beyond eps = 2, so the tail is closed analytically
    # Same verdict from the accountant's pessimistic curve of Laplace(scale=0.5).
    rep = analyze(Laplace(scale=0.5), optimistic=False)
    pb = bracket_mu(lambda e: rep.delta(e), eps_h=10, c=100)
    assert pb.lower <= 1.8009052 + 1e-3 and pb.upper >= 1.8009052
    assert pb.upper <= 2.0 and pb.lower > 1.0


def test_icea_exceeds_mu_max():
    # S003-2: the ICEA profile crosses delta_4 at eps = 14.28, so it is not 4-GDP; a head of 20 finds it.
    b = bracket_mu(icea, eps_h=20, c=10, mu_max=4.0)
    assert b.hit_mu_max and math.isinf(b.upper)


# -- GDPT values and identification ------------------------------------------------------------------------------
def test_gdpt_values_match_mpmath():
    g = gdpt(pure1, np.array([0, 0.25, 0.5, 0.75, 0.99, 1.0, 2.0]))
    np.testing.assert_allclose(g, [1.232035, 1.206288, 1.123684, 0.958527, 0.501173, 0, 0], atol=2e-6)
    np.testing.assert_allclose(gdpt(sgd, np.array([1.0, 2.0, 10.0])), [1.5573688, 0.9790434, 0.7128950], atol=2e-6)
    assert gdpt(laplace2, 1.0) == pytest.approx(1.6859909, abs=1e-6)
    # G_{delta_mu} == mu (Property 2) against the closed-form GDP profile.
    e = np.array([0.0, 0.3, 2.0, 7.0])
    np.testing.assert_allclose(gdpt(lambda x: get_delta_from_gdp(mu=1.7, epsilon=x), e), 1.7, rtol=1e-9)


def test_identification_matches_thm_4_4_limits():
    # Paper: the limits are 0, sqrt(1/2) and +inf for Laplace, SGD and ICEA; Laplace and SGD are GDP, ICEA is not.
    lap = identify_gdp(laplace2)
    assert lap.is_gdp is True and lap.tail_limit == 0.0 and lap.bound == "estimate"
    s = identify_gdp(sgd, log_profile=lambda e: -(np.asarray(e, float) ** 2))
    assert s.is_gdp is True and s.tail_limit == pytest.approx(math.sqrt(0.5), rel=1e-9)
    ic = identify_gdp(icea, log_profile=lambda e: np.log(np.minimum(1.0, K / np.asarray(e, float))))
    assert ic.is_gdp is False
    # A profile with a floor (catastrophic failure, delta(0) = 1) is not GDP (Thm 4.3 / Prop. 6.2).
    assert identify_gdp(lambda e: np.ones_like(np.asarray(e, float))).is_gdp is False
    assert identify_gdp(lambda e: 1e-3 + 0 * np.asarray(e, float)).is_gdp is False


def test_analytic_upper_bounds():
    assert get_gdp_upper_bound(Gaussian(noise_multiplier=2.0)) == (0.5, "exact")
    mu, label = get_gdp_upper_bound(RandomizedResponse(epsilon=1.0))
    assert mu == pytest.approx(1.232035385, abs=1e-9) and label == "exact"  # Thm 5.1 (S003-2)
    mu_sg, label_sg = get_gdp_upper_bound(SubsampledGaussian(noise_multiplier=2.0, sampling_rate=0.1, steps=100))
    assert label_sg == "upper" and mu_sg == 5.0
    rep = analyze(SubsampledGaussian(noise_multiplier=2.0, sampling_rate=0.1, steps=100), optimistic=False)
    assert rep.mu <= mu_sg


# -- Thm 5.1 and Thm 3.1 -------------------------------------------------------------------------------------------
def test_thm_5_1_table():
    for eps, mu in ((0.1, 0.125309012), (0.5, 0.623892592), (1, 1.232035385), (2, 2.357961486), (10, 7.827914394)):
        assert get_mu_from_pure_dp(epsilon=eps) == pytest.approx(mu, abs=1e-8)
        assert get_mu_from_gdpt(epsilon=0.0, delta=(math.exp(eps) - 1) / (math.exp(eps) + 1)) == pytest.approx(
            mu, abs=1e-8
        )


def _four_outcome_profile(eps0, delta0, eps):
    # Seed 003 App. A.1: the tight (eps0, delta0) mechanism; brute-force hockey-stick over all 16 events.
    a0 = math.exp(eps0) / (1 + math.exp(eps0))
    p = [delta0, 0.0, (1 - delta0) * a0, (1 - delta0) * (1 - a0)]
    q = [0.0, delta0, (1 - delta0) * (1 - a0), (1 - delta0) * a0]
    best = 0.0
    for mask in itertools.product((0, 1), repeat=4):
        pe = sum(pi for pi, m in zip(p, mask, strict=True) if m)
        qe = sum(qi for qi, m in zip(q, mask, strict=True) if m)
        best = max(best, pe - math.exp(eps) * qe, qe - math.exp(eps) * pe)
    return best


def test_thm_3_1_tight_profile():
    prof = get_delta_from_epsilon_delta(epsilon0=1.0, delta0=0.1, at_epsilon=np.array([0.0, 0.5, 1.0, 2.0]))
    np.testing.assert_allclose(prof, [0.5159054, 0.3588842, 0.1, 0.1], atol=1e-7)  # S003-4
    for eps in (0.0, 0.2, 0.5, 0.9, 1.0, 1.7):
        brute = _four_outcome_profile(1.0, 0.1, eps)
        assert get_delta_from_epsilon_delta(epsilon0=1.0, delta0=0.1, at_epsilon=eps) == pytest.approx(brute, abs=1e-12)
        assert implies(epsilon0=1.0, delta0=0.1, epsilon=eps, delta=brute + 1e-9)
        assert not implies(epsilon0=1.0, delta0=0.1, epsilon=eps, delta=brute - 1e-6)


def test_sec_5_2_refinement_example():
    # Seed 003 Sec. 5.2: (0.334, 0.067)-DP implies (0.2, e^-2)-DP; optimum (0.33389234, 0.06722169), S003-4.
    assert implies(epsilon0=0.33389234, delta0=0.06722169 - 1e-8, epsilon=0.2, delta=math.exp(-2))
    assert not implies(epsilon0=0.33389234, delta0=0.06722169 + 1e-6, epsilon=0.2, delta=math.exp(-2))


def test_bad_input():
    with pytest.raises(ValueError, match="c"):
        bracket_mu(laplace2, eps_h=10, c=0)
    with pytest.raises(ValueError, match="eps_h"):
        bracket_mu(laplace2, eps_h=-1, c=10)
    with pytest.raises(ValueError, match="profile"):
        bracket_mu(3.0, eps_h=1, c=10)
    with pytest.raises(ValueError, match="non-increasing"):
        bracket_mu(lambda e: np.asarray(e, float) / 100, eps_h=1, c=10)
    with pytest.raises(ValueError, match="method"):
        bracket_mu(laplace2, eps_h=1, c=10, method="fast")
    with pytest.raises(ValueError, match="delta0"):
        implies(epsilon0=1.0, delta0=1.5, epsilon=1.0, delta=0.1)
    with pytest.raises(ValueError, match="epsilon"):
        get_mu_from_gdpt(epsilon=-1.0, delta=0.1)
