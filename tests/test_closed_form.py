"""Closed forms against the papers' tables and a 50-digit mpmath reference."""

import math

import mpmath
import numpy as np
import pytest

import gdpcore as g

# Seed 000 Table 3 (unrounded values, docs/references.md S000-4): mu for (eps, delta).
TABLE3 = {
    0.1: (0.0325, 0.0275, 0.0199),
    0.5: (0.1422, 0.1241, 0.0937),
    1.0: (0.2681, 0.2367, 0.1820),
    2.0: (0.5016, 0.4483, 0.3515),
    4.0: (0.9249, 0.8379, 0.6721),
    6.0: (1.3095, 1.1963, 0.9744),
    8.0: (1.6660, 1.5315, 1.2622),
    10.0: (2.0004, 1.8481, 1.5379),
}
# The printed (2-decimal) table of the paper.
TABLE3_PRINTED = {
    0.1: (0.03, 0.03, 0.02),
    0.5: (0.14, 0.12, 0.09),
    1.0: (0.27, 0.24, 0.18),
    2.0: (0.50, 0.45, 0.35),
    4.0: (0.92, 0.84, 0.67),
    6.0: (1.31, 1.20, 0.97),
    8.0: (1.67, 1.53, 1.26),
    10.0: (2.00, 1.85, 1.54),
}
DELTAS = (1e-5, 1e-6, 1e-9)


@pytest.mark.parametrize("eps", sorted(TABLE3))
def test_table3_all_24_entries(eps):
    for delta, expected, printed in zip(DELTAS, TABLE3[eps], TABLE3_PRINTED[eps], strict=True):
        mu = g.get_mu_from_epsilon_delta(epsilon=eps, delta=delta)
        assert mu == pytest.approx(expected, abs=5e-5)
        assert round(mu, 2) == pytest.approx(printed, abs=1e-9)


def _mp_delta(mu, eps):
    mpmath.mp.dps = 50
    mu, eps = mpmath.mpf(mu), mpmath.mpf(eps)
    return mpmath.ncdf(-eps / mu + mu / 2) - mpmath.exp(eps) * mpmath.ncdf(-eps / mu - mu / 2)


@pytest.mark.parametrize("mu", [0.1, 0.5, 1.0, 2.0, 5.0])
@pytest.mark.parametrize("eps", [0.0, 0.5, 2.0, 10.0, 30.0, 60.0])
def test_gdp_profile_log_space_matches_mpmath(mu, eps):
    ref = _mp_delta(mu, eps)
    got = g.get_delta_from_gdp(mu=mu, epsilon=eps)
    if ref < mpmath.mpf("1e-300"):
        assert got < 1e-290
    else:
        assert got == pytest.approx(float(ref), rel=1e-9)


# Closed-form GDP oracles (seed 000 Eq. 4; docs/references.md S000-7).
ORACLES_47 = [
    (0.5, 0.1974126515, 0.0068295950, 9.43917e-6, 1.993091, 0.78276092, 0.99520444),
    (1.0, 0.3829249225, 0.1269367375, 0.0209236358, 4.377178, 0.61085631, 0.98170153),
    (2.0, 0.6826894921, 0.5098616601, 0.3318979988, 9.997256, 0.23624042, 0.86219459),
]


@pytest.mark.parametrize("row", ORACLES_47, ids=lambda r: f"mu={r[0]}")
def test_gdp_oracles_of_section_4_7(row):
    mu, d0, d1, d2, eps5, f01, f001 = row
    assert g.get_delta_from_gdp(mu=mu, epsilon=0.0) == pytest.approx(d0, abs=1e-9)
    assert g.get_advantage_from_gdp(mu=mu) == pytest.approx(d0, abs=1e-9)
    assert g.get_delta_from_gdp(mu=mu, epsilon=1.0) == pytest.approx(d1, abs=1e-9)
    assert g.get_delta_from_gdp(mu=mu, epsilon=2.0) == pytest.approx(d2, rel=1e-5)
    assert g.get_epsilon_from_gdp(mu=mu, delta=1e-5) == pytest.approx(eps5, abs=1e-6)
    assert g.get_beta_from_gdp(mu=mu, alpha=0.1) == pytest.approx(f01, abs=1e-8)
    assert g.get_beta_from_gdp(mu=mu, alpha=1e-3) == pytest.approx(f001, abs=1e-8)


def test_epsilon_from_gdp_is_vectorised_and_inverts_delta():
    deltas = np.array([1e-12, 1e-9, 1e-5, 0.1])
    eps = g.get_epsilon_from_gdp(mu=1.3, delta=deltas)
    assert eps.shape == deltas.shape
    np.testing.assert_allclose(g.get_delta_from_gdp(mu=1.3, epsilon=eps), deltas, rtol=1e-8)
    assert g.get_epsilon_from_gdp(mu=1.3, delta=0.9) == 0.0  # delta above the advantage


@pytest.mark.parametrize(("eps", "mu"), [(0.75, 0.9308068), (1.0, 1.2320354), (1.5, 1.8123205), (2.0, 2.3579615)])
def test_mu_from_pure_dp_prop_6_1(eps, mu):
    # Values from gdpnum 0.1.1's converter tests (docs/references.md S000-6).
    assert g.get_mu_from_pure_dp(epsilon=eps) == pytest.approx(mu, abs=1e-7)
    # Prop 6.1's proof: the TVs match, Eq. 29 = Eq. 31.
    assert g.get_advantage_from_gdp(mu=mu) == pytest.approx(math.tanh(eps / 2), abs=1e-7)


def test_randomized_response_and_laplace_curves():
    eps = 1.0
    a = np.linspace(0, 1, 101)
    rr = g.get_beta_from_randomized_response(epsilon=eps, alpha=a)
    vertex = 1 / (1 + math.e)
    assert g.get_beta_from_randomized_response(epsilon=eps, alpha=vertex) == pytest.approx(vertex)
    assert np.all(rr <= 1 - a + 1e-15)
    lap = g.get_beta_from_laplace(scale=1.0, alpha=a)
    # The Laplace curve is continuous at its pieces' joins and lies above RR_eps (RR is the least private eps-DP).
    assert g.get_beta_from_laplace(scale=1.0, alpha=math.exp(-1) / 2) == pytest.approx(0.5)
    assert g.get_beta_from_laplace(scale=1.0, alpha=0.5) == pytest.approx(math.exp(-1) / 2)
    assert np.all(lap >= rr - 1e-15)


@pytest.mark.parametrize("bad", [0.0, 1.0, -1e-3, float("nan")])
def test_delta_out_of_range_is_rejected(bad):
    with pytest.raises(ValueError, match="delta"):
        g.get_mu_from_epsilon_delta(epsilon=1.0, delta=bad)
    with pytest.raises(ValueError, match="delta"):
        g.get_epsilon_from_gdp(mu=1.0, delta=bad)
