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


# -- App. B: refined profiles computed, not hard-coded ---------------------------------------------------------------
def test_refined_profile_roots_match_the_paper():
    from gdpcore.gdpt import refine_profile

    # S003-1 (mpmath): SGD eps2 = 1.1878489, delta2 = 0.2439029 (paper 1.187 / 0.244); ICEA eps3 = 1.1566070,
    # delta3 = 0.4680424 (paper prints 1.159 / 0.468).
    sgd_ref = refine_profile(lambda e: np.exp(-(np.asarray(e) ** 2)))
    assert sgd_ref.eps_i == pytest.approx(E2, abs=5e-8) and sgd_ref.delta_i == pytest.approx(D2, abs=5e-8)
    for deriv in (None, lambda e: -K / np.asarray(e) ** 2):
        icea_ref = refine_profile(lambda e: K / np.asarray(e), derivative=deriv)
        assert icea_ref.eps_i == pytest.approx(E3, abs=5e-8) and icea_ref.delta_i == pytest.approx(D3, abs=5e-8)
    # The refined profile is the profile of the module's hand-written versions, and equals the brute-force
    # inf_{eps0 >= eps} g(eps, eps0) of App. B (independent: a dense grid over eps0).
    e = np.array([0.0, 0.3, 0.8, 1.1, 1.5, 3.0])
    np.testing.assert_allclose(sgd_ref(e), sgd(e), atol=1e-7)
    np.testing.assert_allclose(refine_profile(lambda x: K / np.asarray(x))(e[1:]), icea(e[1:]), atol=1e-7)
    e0 = np.linspace(0.0, 20.0, 400_001)
    naive = np.exp(-(e0**2))
    for eps in e:
        keep = e0 >= eps
        g = (1 - naive[keep]) * (np.exp(e0[keep]) - math.exp(eps)) / (1 + np.exp(e0[keep])) + naive[keep]
        assert float(sgd_ref(eps)) == pytest.approx(float(g.min()), abs=1e-8)
    with pytest.raises(ValueError, match="no root"):
        refine_profile(lambda x: np.zeros_like(np.asarray(x, float)))


# -- Sec. 5.2: noise reduction through the partial order -------------------------------------------------------------
def test_noise_reduction_reproduces_sec_5_2():
    from gdpcore.gdpt import refine_noise

    # Feldman et al. 2018's sigma = -C log(delta)/eps at (0.2, e^-2): naive 10 C; paper "eps ~ 0.334 and
    # delta ~ 0.067 ... 8.086 C"; S003-4: (0.33389234, 0.06722169), sigma/C = 8.0857179.
    for c in (1.0, 2.5):
        r = refine_noise(lambda e, d, c=c: -c * math.log(d) / e, epsilon=0.2, delta=math.exp(-2))
        assert r.naive_noise == pytest.approx(10.0 * c, rel=1e-12)
        assert r.noise / c == pytest.approx(8.0857179, abs=2e-7)
        assert r.epsilon0 == pytest.approx(0.33389234, abs=2e-6) and r.delta0 == pytest.approx(0.06722169, abs=2e-7)
        # The chosen (eps0, delta0) implies the target (Thm 3.1), so sigma- is as private as 10 C for it.
        assert implies(epsilon0=r.epsilon0, delta0=r.delta0, epsilon=0.2, delta=math.exp(-2) + 1e-12)
    # Nothing to gain when the trade-off already grows with eps: the naive noise is kept.
    flat = refine_noise(lambda e, d: 1.0 + e, epsilon=0.5, delta=1e-5)
    assert flat.noise == flat.naive_noise == 1.5 and flat.epsilon0 == 0.5


# -- Sec. 5.3: subsampling -------------------------------------------------------------------------------------------
def test_subsampled_profile_matches_the_accountant_and_keeps_the_tail():
    from gdpcore import SubsampledLaplace
    from gdpcore.closed_form import get_delta_from_gdp, get_log_delta_from_gdp
    from gdpcore.gdpt import subsample_profile

    q = 0.2
    lap1 = subsample_profile(lambda e: np.maximum(-np.expm1(np.minimum(np.asarray(e, float), 1.0) / 2 - 0.5), 0.0), q)
    # dp_accounting's Poisson-subsampled Laplace (b = 1) brackets the Sec. 5.3 profile (optimistic <= it <= pessimistic)
    r = analyze(SubsampledLaplace(scale=1.0, sampling_rate=q), discretization=1e-5)
    e = np.array([0.0, 0.05, 0.1, 0.2, 0.25])
    assert np.all(r.delta(e, side="optimistic") <= lap1(e) + 1e-12) and np.all(lap1(e) <= r.delta(e) + 1e-12)
    # A pure eps0-DP profile vanishes from log(1 + q(e^eps0 - 1)) on (Balle, Barthe, Gaboardi 2018 Thm 8).
    pure = subsample_profile(pure1, q)
    edge = math.log1p(q * (math.e - 1.0))
    assert float(pure(edge - 1e-6)) > 0 and float(pure(edge + 1e-9)) == 0.0
    # Seed 003 Sec. 5.3: subsampling lowers the GDPT near 0 but not its tail; for delta_mu the sup stays mu.
    sub = subsample_profile(lambda x: get_delta_from_gdp(mu=1.0, epsilon=x), 0.1)
    log_sub = subsample_profile(lambda x: get_log_delta_from_gdp(mu=1.0, epsilon=x), 0.1, log=True)
    g = gdpt(sub, np.array([0.0, 30.0]))
    assert g[0] < 0.1 and 0.9 < g[1] < 1.0
    ident = identify_gdp(sub, log_profile=log_sub)
    assert ident.is_gdp and ident.tail_limit == pytest.approx(1.0, abs=1e-3)
    with pytest.raises(ValueError, match="sampling_rate"):
        subsample_profile(pure1, 0.0)


# -- Thm 4.7: clip and rectify ---------------------------------------------------------------------------------------
def test_clip_and_rectify_makes_a_head_gdp_mechanism_gdp():
    from scipy import special

    from gdpcore.closed_form import get_delta_from_gdp
    from gdpcore.gdpt import clip_and_rectify

    # A: w.p. 1 - p the Gaussian x + N(0, 1) (x in {0, 1}), w.p. p it discloses (outputs 0 or 1000). Its profile is
    # >= p for every eps: head GDP, not GDP. Head upper bound p + (1 - p) delta_1 (joint convexity).
    lo, hi, eps_h, p = -2.5, 3.5, 6.0, 1e-3

    def head(e):
        return p + (1 - p) * get_delta_from_gdp(mu=1.0, epsilon=e)

    cr = clip_and_rectify(head, lower=lo, upper=hi, eps_h=eps_h, c=100)
    assert cr.laplace_scale == pytest.approx((hi - lo) / eps_h) and cr.bound == "upper"
    assert cr.head.lower <= cr.mu <= cr.head.lower + 1 / 100
    assert head(8.0) > get_delta_from_gdp(mu=cr.mu, epsilon=8.0)  # A itself is not mu-GDP beyond the head
    # Independent: the exact output densities of R o C o A by quadrature, their profile against delta_mu.
    b = cr.laplace_scale
    y = np.linspace(-30, 30, 12001)
    z = np.linspace(lo, hi, 1201)
    dy, dz = y[1] - y[0], z[1] - z[0]

    def lap(u):
        return np.exp(-np.abs(u) / b) / (2 * b)

    def density(x, atom):
        wz = np.exp(-((z - x) ** 2) / 2) / math.sqrt(2 * math.pi) * dz
        wz[[0, -1]] *= 0.5
        clipped = (
            lap(y[:, None] - z[None, :]) @ wz + special.ndtr(lo - x) * lap(y - lo) + special.ndtr(x - hi) * lap(y - hi)
        )
        return (1 - p) * clipped + p * lap(y - min(max(atom, lo), hi))

    p0, p1 = density(0.0, 0.0), density(1.0, 1000.0)
    assert p0.sum() * dy == pytest.approx(1.0, abs=1e-5) and p1.sum() * dy == pytest.approx(1.0, abs=1e-5)
    for eps in np.linspace(0.0, 10.0, 41):
        d = max(np.maximum(p0 - math.exp(eps) * p1, 0).sum(), np.maximum(p1 - math.exp(eps) * p0, 0).sum()) * dy
        assert d <= get_delta_from_gdp(mu=cr.mu, epsilon=eps) + 1e-6
        assert d <= float(cr.profile(head)(eps)) + 1e-6
    out = cr.apply(np.array([-100.0, 0.5, 100.0] * 20000), np.random.default_rng(1))
    noise = out - np.clip(np.array([-100.0, 0.5, 100.0] * 20000), lo, hi)
    assert np.mean(np.abs(noise)) == pytest.approx(b, rel=0.02)  # E|Laplace(b)| = b
    with pytest.raises(ValueError, match="lower"):
        clip_and_rectify(head, lower=1.0, upper=1.0, eps_h=1.0)
    with pytest.raises(ValueError, match="mu_max"):
        clip_and_rectify(
            lambda e: np.full_like(np.asarray(e, float), 0.999), lower=0.0, upper=1.0, eps_h=1.0, mu_max=2.0
        )
