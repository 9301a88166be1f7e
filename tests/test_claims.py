"""Published-claim checks (gdpcore.claims): reproduce with the named accountant, certify with the tight one.

Independent truth used here:

* Seed 000 Table 4 (= De et al. Table 14): the published eps 1, 2, 3, 4, 6, 8 at delta = 1e-5 for
  (sigma, T) = (40, 906) ... (9.4, 2000), q = 16384/50000, made with an RDP accountant.
* The PLD brackets of the tight eps (0.909-0.918 ... 7.414-7.434), docs/references.md S000-2.
* RDP of the subsampled Gaussian by quadrature (gdpcore.representations, independent of dp_accounting's series),
  converted with dp_accounting's own conversion on the same integer orders: checks the DpEvents we build.
* The CLT mu of Bu et al. 2020 (docs/references.md S000-1: mu_CLT = 1.5634 for the eps=8 run), and the Gaussian
  privacy profile (seed 000 Eq. 5) evaluated with scipy in this file.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant
from scipy import stats

import gdpcore as g
from gdpcore.claims import CLAIM_STATUSES, check_claim, get_epsilon_from_named_accountant, reproduction_family
from gdpcore.representations import get_rdp_from_mechanism

Q = 16384 / 50000
# paper eps: (sigma, T, S000-2 bracket of the tight eps at 1e-5)
TABLE4 = {
    1: (40.0, 906, (0.909, 0.918)),
    2: (24.0, 1156, (1.832, 1.844)),
    3: (20.0, 1656, (2.751, 2.768)),
    4: (16.0, 1765, (3.682, 3.700)),
    6: (12.0, 2007, (5.548, 5.568)),
    8: (9.4, 2000, (7.414, 7.434)),
}


@pytest.mark.parametrize("paper_eps", sorted(TABLE4))
def test_table4_claims_are_reproduced_by_rdp_and_certified_by_pld(paper_eps):
    sigma, steps, (lo, hi) = TABLE4[paper_eps]
    mech = g.SubsampledGaussian(noise_multiplier=sigma, sampling_rate=Q, steps=steps)
    check = check_claim(mech, epsilon=paper_eps, delta=1e-5, accountant="RDP")
    assert check.status == "reproduced"
    # the published eps are De et al.'s RDP values, rounded (docs/references.md S000-2)
    assert abs(check.reproduced_epsilon - paper_eps) <= 0.05
    assert check.reproduction.bound == "upper" and check.reproduction.family == "rdp"
    assert lo - 0.005 <= check.tight_epsilon <= hi + 0.005  # S000-2 bracket
    assert check.certified and check.tight_epsilon < check.reproduced_epsilon


def test_rdp_events_match_quadrature_rdp_on_integer_orders():
    # A heterogeneous two-phase schedule: exercises Composed + SelfComposed + PoissonSampled event building.
    mech = g.Composed(
        mechanisms=(
            g.SubsampledGaussian(noise_multiplier=1.1, sampling_rate=0.01, steps=1000),
            g.SelfComposed(mechanism=g.SubsampledGaussian(noise_multiplier=0.9, sampling_rate=0.02, steps=50), count=4),
        )
    )
    orders = np.arange(2, 65, dtype=float)
    rdp = get_rdp_from_mechanism(mech, orders=orders)
    eps_quadrature, _ = rdp_privacy_accountant.compute_epsilon(orders, rdp, 1e-6)
    acc = rdp_privacy_accountant.RdpAccountant(orders=list(orders))
    from gdpcore.kinds import to_dp_event as _dp_event  # the event builder under test

    acc.compose(_dp_event(mech))
    assert acc.get_epsilon(1e-6) == pytest.approx(eps_quadrature, rel=1e-6)
    # On dp_accounting's default grid (fractional orders and 128..1024 too) the named accountant equals quadrature
    # RDP converted the same way; never below it (its fractional-order series can only overestimate).
    named = get_epsilon_from_named_accountant(mech, delta=1e-6, accountant="rdp").epsilon
    default = np.asarray(rdp_privacy_accountant.DEFAULT_RDP_ORDERS, dtype=float)
    eps_default, _ = rdp_privacy_accountant.compute_epsilon(default, get_rdp_from_mechanism(mech, orders=default), 1e-6)
    assert eps_default * (1 - 1e-9) <= named <= eps_default * (1 + 1e-4)
    assert named <= eps_quadrature * (1 + 1e-9)


def test_table4_rdp_reproduction_is_close_to_quadrature():
    # Large q: dp_accounting's fractional-order RDP is above the quadrature value, by < 0.01 in eps.
    default = np.asarray(rdp_privacy_accountant.DEFAULT_RDP_ORDERS, dtype=float)
    mech = g.SubsampledGaussian(noise_multiplier=9.4, sampling_rate=Q, steps=2000)
    eps_q, _ = rdp_privacy_accountant.compute_epsilon(default, get_rdp_from_mechanism(mech, orders=default), 1e-5)
    named = get_epsilon_from_named_accountant(mech, delta=1e-5, accountant="rdp").epsilon
    assert eps_q <= named <= eps_q + 0.01


def test_clt_reproduction_matches_bu_et_al_and_is_labelled_an_estimate():
    mech = g.SubsampledGaussian(noise_multiplier=9.4, sampling_rate=Q, steps=2000)
    rep = get_epsilon_from_named_accountant(mech, delta=1e-5, accountant="GDP")
    mu = Q * math.sqrt(2000 * math.expm1(1 / 9.4**2))
    assert mu == pytest.approx(1.5634, abs=1e-4)  # docs/references.md S000-1
    assert rep.family == "clt" and rep.bound == "estimate" and f"{mu:.6g}" in rep.detail
    # eps solves the Gaussian profile (seed 000 Eq. 5) at delta = 1e-5
    e = rep.epsilon
    delta = stats.norm.cdf(-e / mu + mu / 2) - math.exp(e) * stats.norm.cdf(-e / mu - mu / 2)
    assert delta == pytest.approx(1e-5, rel=1e-8)


def test_clt_claim_below_the_tight_bound_is_not_certified():
    # Small sigma, small q: the CLT underestimates eps (seed 001: "mu-GDP (CLT) approximations are not safe").
    mech = g.SubsampledGaussian(noise_multiplier=0.7, sampling_rate=0.01, steps=1000)
    clt = get_epsilon_from_named_accountant(mech, delta=1e-5, accountant="clt").epsilon
    check = check_claim(mech, epsilon=round(clt, 2), delta=1e-5, accountant="Opacus GDP".split()[1])
    assert check.status == "reproduced"
    assert not check.certified and check.tight_epsilon > 1.2 * check.claimed_epsilon
    assert "does NOT certify" in check.summary()


def test_understated_claim_is_not_reproduced():
    mech = g.SubsampledGaussian(noise_multiplier=9.4, sampling_rate=Q, steps=2000)
    check = check_claim(mech, epsilon=7.0, delta=1e-5, accountant="rdp")
    assert check.status == "not reproduced" and not check.certified  # tight 7.42 > 7


def test_looser_claim_and_pld_claims():
    mech = g.SubsampledGaussian(noise_multiplier=9.4, sampling_rate=Q, steps=2000)
    loose = check_claim(mech, epsilon=9.0, delta=1e-5, accountant="moments accountant")
    assert loose.status == "claim looser than its accountant" and loose.certified
    pld = check_claim(mech, epsilon=7.5, delta=1e-5, accountant="PRV", tight_epsilon=7.42439)
    assert pld.reproduced_epsilon == 7.42439 and pld.status == "claim looser than its accountant"


def test_gaussian_claims_reproduce_the_closed_form():
    mech = g.Gaussian(noise_multiplier=2.0)
    rdp = get_epsilon_from_named_accountant(mech, delta=1e-5, accountant="Renyi").epsilon
    clt = get_epsilon_from_named_accountant(mech, delta=1e-5, accountant="gdp").epsilon
    exact = g.get_epsilon_from_gdp(mu=0.5, delta=1e-5)
    assert clt == pytest.approx(exact, rel=1e-10)  # the CLT is exact for one Gaussian
    assert exact < rdp < 1.25 * exact  # RDP is a valid but looser bound


def test_unknown_accountant_and_unsupported_mechanism_are_reported_not_raised():
    lap = g.Laplace(scale=1.0)
    unknown = check_claim(lap, epsilon=1.0, delta=1e-5, accountant="my-own")
    assert unknown.status == "accountant not reproducible" and "my-own" in unknown.reproduction.detail
    clt = check_claim(lap, epsilon=1.0, delta=1e-5, accountant="clt")
    assert clt.status == "accountant not reproducible" and "Laplace" in clt.reproduction.detail
    dg = get_epsilon_from_named_accountant(g.DiscreteGaussian(sigma=2.0), delta=1e-5, accountant="rdp")
    assert dg.epsilon is None and "DiscreteGaussian" in dg.detail
    assert set(CLAIM_STATUSES) >= {unknown.status, "reproduced", "not reproduced"}


def test_laplace_and_randomized_response_rdp_claims():
    # Pure eps-DP mechanisms: RDP -> (eps, delta) is at most eps0 plus the order-grid slack, and above the tight eps.
    for mech, eps0 in ((g.Laplace(scale=2.0), 0.5), (g.RandomizedResponse(epsilon=1.0), 1.0)):
        check = check_claim(mech, epsilon=eps0, delta=1e-5, accountant="RDP")
        assert check.tight_epsilon <= eps0 + 1e-9 and check.certified
        assert check.tight_epsilon <= check.reproduced_epsilon <= eps0 * 1.01


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"epsilon": -1.0, "delta": 1e-5, "accountant": "rdp"}, "epsilon"),
        ({"epsilon": 1.0, "delta": 1.5, "accountant": "rdp"}, "delta"),
        ({"epsilon": 1.0, "delta": 1e-5, "accountant": "rdp", "rtol": 2.0}, "rtol"),
        ({"epsilon": 1.0, "delta": 1e-5, "accountant": 3}, "accountant"),
        ({"epsilon": 1.0, "delta": 1e-5, "accountant": "rdp", "tight_epsilon": float("nan")}, "tight_epsilon"),
    ],
)
def test_bad_input_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        check_claim(g.Gaussian(noise_multiplier=1.0), **kwargs)


def test_family_names():
    assert reproduction_family(" Moments_Accountant ") == "rdp"
    assert reproduction_family("PRV") == "pld" and reproduction_family("GDP") == "clt"
    assert reproduction_family("unspecified") is None
