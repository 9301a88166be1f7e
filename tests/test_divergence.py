"""Delta-divergence, Bayes risk and Blackwell order (seed 002) against the paper's numbers, closed-form
identities (docs/references.md S002) and riskcal's Bayes-risk functions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from riskcal.analysis import conversions as riskcal_conv
from scipy import stats

from gdpcore import Gaussian, Laplace, RandomizedResponse, SubsampledGaussian, analyze
from gdpcore.accounting import build_pld
from gdpcore.divergence import (
    delta_divergence,
    get_bayes_risk,
    get_delta_divergence,
    get_extremal_divergences,
    is_at_least_as_private,
)

G1 = Gaussian(noise_multiplier=1.0)  # mu = 1
LAP1 = Laplace(scale=1.0)  # eps0 = 1


@pytest.fixture(scope="module")
def lap_report():
    return analyze(LAP1, optimistic=False)


# -- O1: Gaussian sigma = 1 vs Laplace b = 1 -----------------------------------------------------------------------
def test_gauss_vs_laplace_matches_paper_and_closed_forms(lap_report):
    d_gl = delta_divergence(G1, lap_report)
    d_lg = delta_divergence(lap_report, G1)
    # Paper: Delta(Gauss||Lap) = 0.005 < Delta(Lap||Gauss) = 0.034 (abs tol 5e-4, docs/references.md S002-1).
    assert d_gl == pytest.approx(0.005, abs=5e-4)
    assert d_lg == pytest.approx(0.034, abs=5e-4)
    # Closed forms (S002-1): (TV_Lap - TV_Gauss)/2 and delta_Gauss(1)/(1 + e).
    tv_lap = 1 - math.exp(-0.5)
    tv_gauss = 2 * stats.norm.cdf(0.5) - 1
    assert d_gl == pytest.approx((tv_lap - tv_gauss) / 2, abs=2e-6)
    delta_g1 = stats.norm.cdf(-1 + 0.5) - math.e * stats.norm.cdf(-1 - 0.5)
    assert d_lg == pytest.approx(delta_g1 / (1 + math.e), abs=2e-6)
    assert delta_divergence(G1, lap_report, symmetric=True) == pytest.approx(d_lg, abs=1e-12)


def test_three_forms_agree(lap_report):
    # Trade-off (Def. 1 bisection), profile (Thm 2.2) and Bayes-risk (Cor. 1) forms; S002-1: 0.0052722 / 0.0341385.
    for a, b, expected in ((G1, lap_report, 0.0052722), (lap_report, G1, 0.0341385)):
        for method in ("profile", "tradeoff", "bayes_risk"):
            res = get_delta_divergence(a, b, method=method)
            assert res.value == pytest.approx(expected, abs=2e-6), method
    res = get_delta_divergence(lap_report, G1)
    # Most exposed prior: pi = e/(1 + e) = 0.7311 (S002-1).
    assert res.argmax_prior == pytest.approx(math.e / (1 + math.e), abs=1e-3)


def test_weighted_divergences_match_recomputation(lap_report):
    # docs/references.md S002-2: Beta(.5,.5) 0.003356 / 0.024507; UQuad 0.000104 / 0.021871.
    assert delta_divergence(G1, lap_report, weight="beta") == pytest.approx(0.003356, abs=2e-6)
    assert delta_divergence(lap_report, G1, weight="beta") == pytest.approx(0.024507, abs=2e-6)
    assert delta_divergence(G1, lap_report, weight="uquadratic") == pytest.approx(0.000104, abs=2e-6)
    assert delta_divergence(lap_report, G1, weight="uquadratic") == pytest.approx(0.021871, abs=2e-6)
    # Bayes-risk form with the same weights agrees.
    res = get_delta_divergence(lap_report, G1, weight="beta", method="bayes_risk")
    assert res.value == pytest.approx(0.024507, abs=2e-5)


def test_gaussian_pairs_are_blackwell_ordered():
    g2 = Gaussian(noise_multiplier=0.5)  # mu = 2
    # S002-3: Delta(G1 || G2) = Phi(-0.5) - Phi(-1) = 0.149882; Delta(G2 || G1) = 0.
    assert delta_divergence(G1, g2) == pytest.approx(stats.norm.cdf(-0.5) - stats.norm.cdf(-1), abs=1e-9)
    assert delta_divergence(g2, G1) == 0.0
    yes = is_at_least_as_private(G1, g2)
    assert yes.at_least_as_private is True and yes.bound == "exact"
    assert is_at_least_as_private(g2, G1).at_least_as_private is False


def test_more_gaussian_laplace_pairs():
    # S002-3: mu=0.5 vs eps0=0.5 -> 0.011893 / 0.019798; mu=2 vs eps0=2 -> 0 / 0.039563; mu=1 vs eps0=0.5 -> 0 / 0.090014.
    cases = [
        (Gaussian(noise_multiplier=2.0), Laplace(scale=2.0), 0.011893, 0.019798),
        (Gaussian(noise_multiplier=0.5), Laplace(scale=0.5), 0.0, 0.039563),
        (Gaussian(noise_multiplier=1.0), Laplace(scale=2.0), 0.0, 0.090014),
    ]
    for g, lap, d_gl, d_lg in cases:
        assert delta_divergence(g, lap) == pytest.approx(d_gl, abs=5e-6)
        assert delta_divergence(lap, g) == pytest.approx(d_lg, abs=5e-6)


def test_crossing_curves_are_not_ordered(lap_report):
    assert is_at_least_as_private(G1, lap_report).at_least_as_private is False
    assert is_at_least_as_private(lap_report, G1).at_least_as_private is False


# -- extremal mechanisms (Lemmas 3-5) ------------------------------------------------------------------------------
def test_extremal_identities(lap_report):
    g = get_extremal_divergences(G1)
    assert g["from_perfect_privacy"] == pytest.approx(0.1914625, abs=1e-7)  # TV/2
    assert g["to_blatant_non_privacy"] == pytest.approx(0.3085375, abs=1e-7)  # Phi(-1/2)
    assert g["sum"] == pytest.approx(0.5, abs=1e-12)
    lap = get_extremal_divergences(lap_report)
    assert lap["from_perfect_privacy"] == pytest.approx(0.1967347, abs=1e-6)
    assert lap["to_blatant_non_privacy"] == pytest.approx(0.3032653, abs=1e-6)  # e^-1/2 / 2
    assert lap["fixed_point"] == pytest.approx(math.exp(-0.5) / 2, abs=1e-6)
    assert lap["sum"] == pytest.approx(0.5, abs=1e-9)
    assert (lap["from_perfect_privacy_bound"], lap["to_blatant_non_privacy_bound"]) == ("upper", "lower")


# -- Bayes risk against riskcal ------------------------------------------------------------------------------------
def test_bayes_risk_matches_riskcal(lap_report):
    pi = np.array([0.05, 0.2, 0.41854, 0.5, 0.7311, 0.95])
    np.testing.assert_allclose(get_bayes_risk(G1, pi), riskcal_conv.get_bayes_risk_from_gdp(1.0, pi), atol=1e-12)
    peer = riskcal_conv.get_bayes_risk_from_pld(build_pld(LAP1), pi)
    np.testing.assert_allclose(get_bayes_risk(lap_report, pi), peer, atol=1e-9)
    # S002-1: the two Bayes-risk curves cross at pi = 0.41854 and 0.58146.
    grid = np.linspace(0.3, 0.5, 20001)
    diff = get_bayes_risk(G1, grid) - get_bayes_risk(lap_report, grid)
    crossing = grid[np.argmax(np.sign(diff) != np.sign(diff[0]))]
    assert crossing == pytest.approx(0.41854, abs=2e-4)


def test_bayes_risk_properties():
    pi = np.linspace(0, 1, 101)
    r = get_bayes_risk(analyze(RandomizedResponse(epsilon=1.0), optimistic=False), pi)
    assert r[0] == 0 and r[-1] == pytest.approx(0, abs=1e-12)
    assert np.all(r <= np.minimum(pi, 1 - pi) + 1e-12)
    # RR_eps: R* = 1/(1 + e^eps) (its fixed point).
    assert r[50] == pytest.approx(1 / (1 + math.e), abs=1e-6)


def test_bayes_risk_of_gaussian_type_pld_curves():
    # Regression: on Gaussian-type PLD curves beta rounds to 1.0 over the first vertices, and the slope search over
    # the vertices sent every prior to the vertex (0, 1): R = 1 - pi, above the trivial min(pi, 1 - pi).
    pi = np.array([0.0, 1e-6, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.999, 1.0])
    for mech in (SubsampledGaussian(noise_multiplier=1.0, sampling_rate=0.1, steps=50), G1):
        r = analyze(mech, accountant="pld", optimistic=False)
        a, b = r.breakpoints()
        a, b = np.concatenate([[0.0], a]), np.concatenate([[1.0], b])
        brute = np.array([np.min(p * a + (1 - p) * b) for p in pi])  # the definition: min over the curve's vertices
        np.testing.assert_allclose(get_bayes_risk(r, pi), brute, atol=1e-12)
    # The Gaussian through the PLD accountant: a lower bound on its exact Bayes risk, within the discretisation.
    exact = riskcal_conv.get_bayes_risk_from_gdp(1.0, pi[1:-1])
    got = get_bayes_risk(r, pi[1:-1])
    assert np.all(got <= exact + 1e-12) and np.all(exact - got <= 1e-4)


def test_dpsgd_pair_calibrated_differently():
    # Seed 002 O6 style: a larger sampling rate at (nearly) the same eps is less private in the Blackwell sense;
    # checked against the Lemma 3 identity Delta(PP||M) = delta(0)/2 and the triangle inequality (Def. 1 property).
    base = analyze(SubsampledGaussian(noise_multiplier=1.0, sampling_rate=0.01, steps=500), optimistic=False)
    other = analyze(SubsampledGaussian(noise_multiplier=3.0, sampling_rate=0.2, steps=500), optimistic=False)
    d = delta_divergence(base, other)
    d_rev = delta_divergence(other, base)
    pp_base = get_extremal_divergences(base)["from_perfect_privacy"]
    pp_other = get_extremal_divergences(other)["from_perfect_privacy"]
    assert d >= pp_other - pp_base - 1e-9  # Delta(PP||other) <= Delta(PP||base) + Delta(base||other)
    assert d_rev >= pp_base - pp_other - 1e-9
    assert delta_divergence(base, other, symmetric=True) == pytest.approx(max(d, d_rev), abs=1e-12)


# -- bad input ----------------------------------------------------------------------------------------------------
def test_bad_input():
    with pytest.raises(ValueError, match="weight"):
        delta_divergence(G1, LAP1, weight="jeffreys")
    with pytest.raises(ValueError, match="neighbouring relation"):
        delta_divergence(G1, RandomizedResponse(epsilon=1.0))
    with pytest.raises(ValueError, match="m2"):
        delta_divergence(G1, 3.0)
    with pytest.raises(ValueError, match="method"):
        get_delta_divergence(G1, LAP1, method="grid")
    with pytest.raises(ValueError, match="symmetric"):
        delta_divergence(G1, LAP1, symmetric="yes")
    with pytest.raises(ValueError, match="prior"):
        get_bayes_risk(G1, 1.5)


# -- where the order flips, approximate dominance, composition, general hyper-priors ---------------------------------
def test_crossing_priors_match_fig_3(lap_report):
    from gdpcore.divergence import get_crossing_priors

    # Paper Fig. 3: "the Bayes error functions cross at pi ~ 0.4"; S002-1: 0.41854 and 0.58146.
    cross = get_crossing_priors(G1, lap_report)
    assert len(cross) == 2
    assert cross[0] == pytest.approx(0.41854, abs=5e-5) and cross[1] == pytest.approx(0.58146, abs=5e-5)
    assert round(cross[0], 1) == 0.4
    # Independent: at the crossing the closed-form risks agree (Gaussian R_min; Laplace (1-p)(1-delta_L(logit p))).
    for p in cross:
        q = max(p, 1 - p)
        e = math.log(q / (1 - q))
        r_lap = (1 - q) * (1 - max(0.0, 1 - math.exp(e / 2 - 0.5)))
        assert float(get_bayes_risk(G1, p)) == pytest.approx(r_lap, abs=1e-9)
    assert get_crossing_priors(G1, Gaussian(noise_multiplier=2.0)) == ()  # Blackwell-ordered: no crossing (Thm 1)


def test_approximate_dominance_thm_2(lap_report):
    from gdpcore.divergence import is_approximately_dominating

    # S002-1: Delta(G||L) = 0.0052722, Delta(L||G) = 0.0341385.
    yes = is_approximately_dominating(G1, lap_report, 0.006)
    assert yes.verdict is True
    # Thm 2: the three forms hold together (every violation <= 0 on its grid).
    assert max(yes.tradeoff_form, yes.profile_form, yes.bayes_risk_form) <= 1e-9
    no = is_approximately_dominating(G1, lap_report, 0.005)
    assert no.verdict is False and min(no.tradeoff_form, no.profile_form, no.bayes_risk_form) > 0
    # Bayes form: max_pi R1 - R2 - D = 0.0052722 - 0.005 exactly at pi = 1/2.
    assert no.bayes_risk_form == pytest.approx(0.0052722 - 0.005, abs=1e-6)
    assert is_approximately_dominating(lap_report, G1, 0.035).verdict is True
    assert is_approximately_dominating(lap_report, G1, 0.034).verdict is False
    with pytest.raises(ValueError, match="D must be"):
        is_approximately_dominating(G1, lap_report, 0.6)


def test_plrv_moments_against_closed_forms_and_quadrature():
    from scipy import integrate

    from gdpcore.divergence import get_plrv_moments

    # Gaussian mu: X = mu z - mu^2/2: v1 = mu^2/2, v2 = mu^2 + mu^4/4, v3 = 2 sqrt(2/pi) mu^3, eta = mu/2 (Eq. 8).
    exact = get_plrv_moments(G1)
    assert exact.bound == "exact" and exact.eta == 0.5 and exact.v1 == 0.5 and exact.v2 == 1.25
    assert exact.v3 == pytest.approx(2 * math.sqrt(2 / math.pi), rel=1e-12)
    v4 = stats.norm.expect(lambda z: abs(z - 0.5) ** 3)
    assert exact.v4 == pytest.approx(v4, rel=1e-9)
    # The same functionals of the accountant's piecewise-linear curve (Eqs. 9-12 as sums over its segments).
    pld = get_plrv_moments(analyze(G1, accountant="pld"))
    for a, b in ((pld.v1, 0.5), (pld.v2, 1.25), (pld.v3, exact.v3), (pld.v4, v4), (pld.eta, 0.5)):
        assert a == pytest.approx(b, rel=1e-6)
    # Laplace b = 1: the PLRV L(y) = |y - 1| - |y|, y ~ Lap(0, 1), by quadrature (KL = e^-1).
    dens = lambda y: math.exp(-abs(y)) / 2  # noqa: E731
    loss = lambda y: abs(y - 1) - abs(y)  # noqa: E731

    def e(h):
        return integrate.quad(lambda y: h(loss(y)) * dens(y), -60, 60, points=[0, 1], limit=400)[0]

    kl = e(lambda x: x)
    assert kl == pytest.approx(math.exp(-1), abs=1e-9)
    lap = get_plrv_moments(LAP1)
    assert lap.v1 == pytest.approx(kl, rel=1e-6) and lap.v2 == pytest.approx(e(lambda x: x * x), rel=1e-6)
    assert lap.v3 == pytest.approx(e(lambda x: abs(x - kl) ** 3), rel=1e-6)
    assert lap.v4 == pytest.approx(e(lambda x: abs(x) ** 3), rel=1e-6)
    assert lap.eta == pytest.approx(kl / math.sqrt(e(lambda x: x * x) - kl * kl), rel=1e-6)


def test_emergent_blackwell_dominance_lemma_6_thm_3():
    from gdpcore import SelfComposed
    from gdpcore.divergence import predict_composition_dominance

    # Laplace b = 1 (eta = 0.4537) vs Gaussian mu = 0.8 (eta = 0.4): one step, the curves cross (neither dominates);
    # after 50 steps each, Laplace^50 Blackwell-dominates as Lemma 6 predicts (N eta^2 > N~ eta~^2), and the exact
    # Delta(Lap^50 || G^50) (G^50 = G_{0.8 sqrt 50}, Dong et al. Cor. 3.3) is below the Thm 3 bound.
    g08 = Gaussian(noise_multiplier=1 / 0.8)
    assert get_delta_divergence(LAP1, g08).value > 1e-4 and get_delta_divergence(g08, LAP1).value > 1e-4
    pred = predict_composition_dominance(LAP1, 50, g08, 50)
    assert pred.precondition and pred.eventual == "m1"
    assert pred.mu == pytest.approx(2 * math.sqrt(50) * pred.moments.eta) and pred.mu_tilde == pytest.approx(
        0.8 * math.sqrt(50)
    )
    # Eq. 15 with N = N~: 0.56/sqrt(N) (skew + skew~), skew~ = 2 sqrt(2/pi) for the Gaussian.
    assert pred.bound == pytest.approx(0.56 / math.sqrt(50) * (pred.moments.skew + 2 * math.sqrt(2 / math.pi)))
    composed = get_delta_divergence(
        SelfComposed(mechanism=LAP1, count=50), Gaussian(noise_multiplier=1 / (0.8 * 50**0.5))
    )
    assert composed.upper <= pred.bound and composed.upper <= 1e-6  # Lap^50 >= G^50: emergent dominance
    # The precondition fails the other way round (eta~ > eta): no bound is claimed.
    rev = predict_composition_dominance(g08, 50, LAP1, 50)
    assert not rev.precondition and rev.bound == 0.5 and rev.eventual == "m2"


def test_general_hyper_priors_match_named_weights_and_an_independent_maximum(lap_report):
    from gdpcore.divergence import get_weighted_delta_divergence

    # S002-2: Beta(.5, .5) 0.003356 / 0.024507; UQuad 0.000104 / 0.021871; Beta(1, 1) = unweighted (S002-1).
    jeff = get_weighted_delta_divergence(G1, lap_report, beta=(0.5, 0.5))
    assert jeff.value == pytest.approx(0.003356, abs=2e-6) and jeff.bound == "estimate"
    assert get_weighted_delta_divergence(lap_report, G1, beta=(0.5, 0.5)).value == pytest.approx(0.024507, abs=2e-6)
    assert jeff.value == pytest.approx(get_delta_divergence(G1, lap_report, weight="beta").value, abs=1e-9)
    uq = get_weighted_delta_divergence(lap_report, G1, density=lambda p: 12 * (p - 0.5) ** 2)
    assert uq.value == pytest.approx(0.021871, abs=2e-6)
    assert get_weighted_delta_divergence(G1, lap_report, density=lambda p: 12 * (p - 0.5) ** 2).value == pytest.approx(
        0.000104, abs=2e-6
    )
    assert get_weighted_delta_divergence(G1, lap_report, beta=(1, 1)).value == pytest.approx(0.0052722, abs=1e-7)
    # An asymmetric Beta(2, 5) against an independent maximisation of the closed-form risks (scipy.stats.beta).
    pi = np.linspace(1e-6, 1 - 1e-6, 400_001)
    q = np.maximum(pi, 1 - pi)
    e = np.log(q / (1 - q))
    r_lap = (1 - q) * (1 - np.maximum(0.0, 1 - np.exp(e / 2 - 0.5)))
    r_g = np.asarray(get_bayes_risk(G1, pi))
    for m1, m2, diff in ((G1, lap_report, r_g - r_lap), (lap_report, G1, r_lap - r_g)):
        ref = float(np.max(stats.beta.pdf(pi, 2, 5) * diff))
        got = get_weighted_delta_divergence(m1, m2, beta=(2, 5))
        # within the Laplace accountant curve's discretisation (S002-2's tolerance)
        assert got.value == pytest.approx(max(ref, 0.0), abs=2e-6) and got.weight == "beta(2, 5)"
    with pytest.raises(ValueError, match="exactly one"):
        get_weighted_delta_divergence(G1, lap_report)
    with pytest.raises(ValueError, match="beta"):
        get_weighted_delta_divergence(G1, lap_report, beta=(0.0, 1.0))
    with pytest.raises(ValueError, match="density must be >= 0"):
        get_weighted_delta_divergence(G1, lap_report, density=lambda p: p - 0.5)
