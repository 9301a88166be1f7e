"""gdpcore.evidence: lower bounds from canary attacks, one-run audits, verdicts against certified curves.

Validity is checked by simulation (vectorised over score sets): a bound at 95 % may exceed the truth in at most 5 %
of sets plus binomial slack; the slack is the 99.9 % quantile of Binomial(n_sets, 0.05), so a correct method fails
a test with probability < 0.1 %. Reference numbers: docs/references.md E-1 (jax_privacy 2.0.0) and E-2 (Steinke,
Nasr & Jagielski 2023).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import special, stats

import gdpcore as g
from gdpcore import closed_form
from gdpcore.evidence import THREAT_MODEL_INDEPENDENT, THREAT_MODEL_ONE_RUN, threshold_ranks

ALPHA = 0.05


def slack_limit(n_sets: int, p: float = ALPHA) -> int:
    """Largest number of violations accepted: the 99.9 % quantile of Binomial(n_sets, p)."""
    return int(stats.binom.ppf(0.999, n_sets, p))


def subsampled_gaussian_loss_scores(rng, n, sigma, q, steps, member):
    """Scores = the privacy loss log(P/Q) of ``steps`` Poisson-subsampled Gaussian steps (the optimal attack),
    sampled under P (member: each step includes the canary w.p. q, shifting the output by 1) or Q (non-member)."""
    include = (rng.random((n, steps)) < q) if member else np.zeros((n, steps), dtype=bool)
    x = rng.normal(0.0, sigma, (n, steps)) + include
    return np.logaddexp(np.log1p(-q), np.log(q) + (2.0 * x - 1.0) / (2.0 * sigma**2)).sum(axis=1)


# -- contract ----------------------------------------------------------------------------------------------------------
def test_contract_and_labels():
    rng = np.random.default_rng(0)
    ev = g.evidence_from_scores(rng.normal(1, 1, 500), rng.normal(0, 1, 400))
    assert isinstance(ev.mu_lower, float) and ev.mu_lower > 0
    assert ev.confidence == 0.95 and ev.bound == "lower" and "Bonferroni" in ev.method
    assert (ev.n_members, ev.n_non_members) == (500, 400)
    assert ev.epsilon_lower(1e-5) >= 0.0 and ev.epsilon_lower(0.0) >= ev.epsilon_lower(1e-2)
    assert ev.threat_model == THREAT_MODEL_INDEPENDENT and "one_run" in ev.threat_model
    d = ev.to_dict(deltas=(0.0, 1e-5))
    json.dumps(d, allow_nan=False)
    assert d["mu"]["bound"] == "lower" and d["tradeoff_region"][0]["fpr_bound"] == "upper"
    assert all(0 <= p["fpr"] <= 1 and 0 <= p["tpr"] <= 1 for p in d["tradeoff_region"])
    eps = g.one_run_epsilon_lower(canaries=1000, guesses=100, correct=90, delta=1e-5)
    assert isinstance(eps, float) and eps > 0
    one = g.one_run_evidence(canaries=1000, guesses=100, correct=90, delta=1e-5)
    assert one.epsilon_lower == eps and one.threat_model == THREAT_MODEL_ONE_RUN
    json.dumps(one.to_dict(), allow_nan=False)
    check = g.check_evidence(g.Gaussian(noise_multiplier=1.0), ev)
    assert check.verdict in {"consistent", "violates_claim"} and check.tightness == pytest.approx(ev.mu_lower)
    assert "not a proof of privacy" in check.explanation
    json.dumps(check.to_dict(), allow_nan=False)


def test_no_signal_gives_zero():
    ev = g.evidence_from_scores(np.zeros(50), np.zeros(50))  # all ties: no member is strictly above any threshold
    assert ev.mu_lower == 0.0 and ev.epsilon_lower(1e-5) == 0.0 and ev.mu_lower_fpr is None
    assert g.one_run_epsilon_lower(canaries=100, guesses=10, correct=5, delta=0.0) == 0.0
    assert g.one_run_epsilon_lower(canaries=100, guesses=0, correct=0, delta=1e-5) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"member_scores": [1.0, float("nan")], "non_member_scores": [0.0]}, "member_scores"),
        ({"member_scores": [1.0], "non_member_scores": [0.0, float("inf")]}, "non_member_scores"),
        ({"member_scores": [], "non_member_scores": [0.0]}, "member_scores"),
        ({"member_scores": [1.0], "non_member_scores": []}, "non_member_scores"),
        ({"member_scores": ["a", "b"], "non_member_scores": [0.0]}, "member_scores"),
        ({"member_scores": "1.0", "non_member_scores": [0.0]}, "member_scores"),
        ({"member_scores": [True, False], "non_member_scores": [0.0]}, "member_scores"),
        ({"member_scores": [1.0], "non_member_scores": [0.0], "confidence": 1.0}, "confidence"),
        ({"member_scores": [1.0], "non_member_scores": [0.0], "confidence": 0.0}, "confidence"),
        ({"member_scores": [1.0], "non_member_scores": [0.0], "confidence": float("nan")}, "confidence"),
    ],
)
def test_score_input_errors(kwargs, field):
    member = kwargs.pop("member_scores")
    non = kwargs.pop("non_member_scores")
    with pytest.raises(ValueError, match=field):
        g.evidence_from_scores(member, non, **kwargs)


def test_other_input_errors():
    ev = g.evidence_from_scores([1.0, 2.0], [0.0, 0.5])
    for bad in (-0.1, 1.0, float("nan"), "x"):
        with pytest.raises(ValueError, match="delta"):
            ev.epsilon_lower(bad)
    base = {"canaries": 100, "guesses": 10, "correct": 5, "delta": 1e-5}
    for field, value in (
        ("canaries", 0),
        ("guesses", 101),
        ("correct", 11),
        ("guesses", -1),
        ("correct", 2.5),
        ("delta", 1.0),
        ("confidence", 1.5),
    ):
        with pytest.raises(ValueError, match=field):
            g.one_run_epsilon_lower(**{**base, field: value})
    with pytest.raises(ValueError, match="certified must be"):
        g.check_evidence("gaussian", ev)
    with pytest.raises(ValueError, match="evidence"):
        g.check_evidence(g.Gaussian(noise_multiplier=1.0), 0.5)
    with pytest.raises(ValueError, match="n_versions"):
        g.registry_confidence(0)
    for bad in (0.0, 1.0, float("nan"), "0.05"):
        with pytest.raises(ValueError, match="alpha"):
            g.registry_confidence(20, bad)
    with pytest.raises(ValueError, match="member_scores"):
        g.evidence_from_scores([[1.0, 2.0], [3.0, 4.0]], [0.0])
    with pytest.raises(ValueError, match="member_scores"):
        g.evidence_from_scores([1.0, None], [0.0])


def test_ranks_depend_on_size_only():
    for n in (1, 2, 3, 10, 1000, 10**6):
        ks = threshold_ranks(n)
        assert ks.min() >= 0 and ks.max() <= n - 1 and np.all(np.diff(ks) > 0)
    assert threshold_ranks(10**6).size <= 2 * math.log2(10**6) + 2


def test_ties_are_conservative():
    """Discrete scores: the order-statistic FPR bound stays valid (FPR(X_(r)) <=_st Beta(k + 1, n - k))."""
    rng = np.random.default_rng(11)
    sets, n = 2000, 200
    non = rng.integers(0, 4, (sets, n)).astype(float)  # 4 atoms: heavy ties
    ks = threshold_ranks(n)
    a = 0.05 / (2 * ks.size)
    t = np.sort(non, axis=1)[:, n - 1 - ks]
    true_fpr = np.select([t < 0.5, t < 1.5, t < 2.5], [0.75, 0.5, 0.25], 0.0)
    fpr_hi = special.betaincinv(ks + 1.0, n - ks, 1 - a)
    assert np.mean(np.any(true_fpr > fpr_hi, axis=1)) <= 0.05


# -- validity ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mu", [0.5, 1.0, 2.0, 4.0])
def test_validity_gaussian(mu):
    rng = np.random.default_rng(int(mu * 100))
    sets, n = 1000, 1000
    members = rng.normal(mu, 1.0, (sets, n))
    non = rng.normal(0.0, 1.0, (sets, n))
    deltas = (1e-5, 1e-2)
    true_eps = [closed_form.get_epsilon_from_gdp(mu=mu, delta=d) for d in deltas]
    mu_bad = 0
    eps_bad = [0, 0]
    for i in range(sets):
        ev = g.evidence_from_scores(members[i], non[i])
        mu_bad += ev.mu_lower > mu
        for j, d in enumerate(deltas):
            eps_bad[j] += ev.epsilon_lower(d) > true_eps[j]
    limit = slack_limit(sets)
    assert mu_bad <= limit and max(eps_bad) <= limit, (mu_bad, eps_bad, limit)


def test_validity_dpsgd_privacy_loss():
    """Scores = exact privacy loss of a subsampled Gaussian (sigma 0.8, q 0.25, T 4): the optimal attack, whose ROC
    is the mechanism's curve. Truth is the accountant's *optimistic* end (the smaller one: a stricter test)."""
    sigma, q, steps = 0.8, 0.25, 4
    report = g.analyze(g.SubsampledGaussian(noise_multiplier=sigma, sampling_rate=q, steps=steps))
    true_mu = report.mu_lower
    deltas = (1e-3, 1e-2)
    true_eps = [float(report.epsilon(d, side="optimistic")) for d in deltas]
    rng = np.random.default_rng(7)
    sets, n = 1000, 1000
    members = subsampled_gaussian_loss_scores(rng, sets * n, sigma, q, steps, True).reshape(sets, n)
    non = subsampled_gaussian_loss_scores(rng, sets * n, sigma, q, steps, False).reshape(sets, n)
    mu_bad = 0
    eps_bad = [0, 0]
    for i in range(sets):
        ev = g.evidence_from_scores(members[i], non[i])
        mu_bad += ev.mu_lower > true_mu
        for j, d in enumerate(deltas):
            eps_bad[j] += ev.epsilon_lower(d) > true_eps[j]
    limit = slack_limit(sets)
    assert mu_bad <= limit and max(eps_bad) <= limit, (mu_bad, eps_bad, limit)


@pytest.mark.parametrize(("eps", "delta"), [(1.0, 0.0), (2.0, 1e-5)])
def test_validity_one_run_randomized_response(eps, delta):
    """The worst case of the theorem: each guess is right independently w.p. e^eps / (1 + e^eps) (randomized response
    on each canary's inclusion bit is eps-DP per canary)."""
    rng = np.random.default_rng(3)
    sets, m, r = 1000, 1000, 200
    correct = rng.binomial(r, special.expit(eps), sets)
    bad = sum(g.one_run_epsilon_lower(canaries=m, guesses=r, correct=int(v), delta=delta) > eps for v in correct)
    assert bad <= slack_limit(sets)


def test_validity_one_run_gaussian_guesser():
    """One run: canary i shifts coordinate i by b_i * mu (b_i ~ Bernoulli(1/2)) plus N(0, 1) noise: mu-GDP per canary.
    The guesser says "in" for the top r/2 and "out" for the bottom r/2 coordinates and abstains on the rest."""
    mu, delta = 2.0, 1e-5
    true_eps = closed_form.get_epsilon_from_gdp(mu=mu, delta=delta)
    rng = np.random.default_rng(4)
    sets, m, r = 1000, 1000, 100
    b = rng.random((sets, m)) < 0.5
    x = rng.normal(0.0, 1.0, (sets, m)) + mu * b
    order = np.argsort(x, axis=1)
    top = np.take_along_axis(b, order[:, -r // 2 :], axis=1).sum(axis=1)
    bottom = (~np.take_along_axis(b, order[:, : r // 2], axis=1)).sum(axis=1)
    correct = top + bottom
    bad = sum(g.one_run_epsilon_lower(canaries=m, guesses=r, correct=int(v), delta=delta) > true_eps for v in correct)
    assert bad <= slack_limit(sets)
    assert (
        np.median([g.one_run_epsilon_lower(canaries=m, guesses=r, correct=int(v), delta=delta) for v in correct[:50]])
        > 1.0
    )


# -- power -------------------------------------------------------------------------------------------------------------
def test_power_large_sample():
    rng = np.random.default_rng(10)
    ev = g.evidence_from_scores(rng.normal(1.0, 1.0, 10**5), rng.normal(0.0, 1.0, 10**5))
    assert ev.mu_lower >= 0.9
    assert 0.0 < ev.mu_lower_fpr < 1.0


@pytest.mark.parametrize("claim", [0.0, 0.5])
def test_detectable_mu_matches_simulation(claim):
    """The deterministic detectable mu is within 20 % of the smallest mu flagged (mu_lower > claim) in >= 50 % of
    simulated audits (Gaussian scores, 1000 per side, 400 audits per mu on a grid of 1 % steps)."""
    n, sims = 1000, 400
    predicted = g.detectable_mu(n_members=n, n_non_members=n, claim=claim)
    rng = np.random.default_rng(int(claim * 10) + 20)
    z_m = rng.normal(0.0, 1.0, (sims, n))
    z_o = rng.normal(0.0, 1.0, (sims, n))

    def flagged_share(mu):
        return np.mean([g.evidence_from_scores(z_m[i] + mu, z_o[i]).mu_lower > claim for i in range(sims)])

    lo, hi = 0.5 * predicted, 1.5 * predicted  # bisection on the monotone share curve (common random numbers)
    assert flagged_share(lo) < 0.5 <= flagged_share(hi)
    for _ in range(7):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if flagged_share(mid) >= 0.5 else (mid, hi)
    assert abs(hi - predicted) <= 0.2 * hi, (predicted, hi)


def test_detectable_mu_shrinks_with_size():
    values = [g.detectable_mu(n_members=n, n_non_members=n) for n in (100, 1000, 10**4, 10**5)]
    assert all(a > b for a, b in zip(values, values[1:], strict=False))
    assert g.detectable_mu(n_members=1000, n_non_members=1000, claim=1.0) > 1.0


# -- anchors -----------------------------------------------------------------------------------------------------------
# docs/references.md E-1: jax_privacy 2.0.0, auditing._epsilon_one_run(0, m, r, v, significance, delta).
JAX_ONE_RUN = [
    ((1000, 100, 100, 0.0, 0.05), 3.492965346169885),
    ((1000, 100, 95, 1e-05, 0.05), 2.165175787875041),
    ((10000, 1000, 900, 1e-05, 0.05), 2.015194451629058),
    ((100000, 5000, 4000, 1e-06, 0.05), 1.327018787644409),
    ((1000, 200, 150, 1e-3, 0.01), 0.0),
]


@pytest.mark.parametrize(("args", "ref"), JAX_ONE_RUN)
def test_one_run_matches_jax_privacy(args, ref):
    m, r, v, d, s = args
    ours = g.one_run_epsilon_lower(canaries=m, guesses=r, correct=v, delta=d, confidence=1 - s)
    assert ours == pytest.approx(ref, rel=1e-6, abs=1e-6)


# docs/references.md E-1: jax_privacy 2.0.0 CanaryScoreAuditor(mem, non).epsilon_clopper_pearson(2a, 1e-5,
# threshold_strategy=Explicit(nextafter(t_k, inf))) at our order-statistic thresholds t_k, a = 0.05 / 40.
JAX_CP = {
    (1.0, 10000, 1): [
        1.1945100479154842,
        1.7971841852375254,
        1.8807866527334274,
        1.4577819624332529,
        0.8510449635892571,
    ],
    (2.0, 2000, 2): [3.281340933973485, 2.914524452950819, 2.3715748308798923, 1.102009189201293, 1.1176598718399422],
}
JAX_CP_BONFERRONI_ALL = {(1.0, 10000, 1): 2.1014219049504335, (2.0, 2000, 2): 3.2049729366568167}


@pytest.mark.parametrize("case", list(JAX_CP))
def test_clopper_pearson_matches_jax_privacy(case):
    """Same scores, same thresholds, same level per interval: the per-threshold eps bound agrees to round-off."""
    from gdpcore.evidence import _epsilon_points, _fpr_upper, _tpr_lower

    mu, n, seed = case
    rng = np.random.default_rng(seed)
    mem = rng.normal(mu, 1.0, n)
    non = rng.normal(0.0, 1.0, n)
    k = np.array([1, 8, 64, 512, n // 4], dtype=float)
    a = 0.05 / 40
    t = np.sort(non)[n - 1 - k.astype(int)]
    tp = (mem[:, None] > t).sum(axis=0).astype(float)
    fpr_hi, tpr_lo = _fpr_upper(k, n, a), _tpr_lower(tp, n, a)
    with np.errstate(divide="ignore"):
        ours = np.log(tpr_lo - 1e-5) - np.log(fpr_hi)  # the one-sided TPR/FPR form jax_privacy uses
    np.testing.assert_allclose(ours, JAX_CP[case], rtol=1e-9)
    assert np.all(_epsilon_points(fpr_hi, tpr_lo, 1e-5) >= ours - 1e-12)
    # Whole-audit numbers differ by design (docs/references.md E-1): jax_privacy's Bonferroni() splits alpha over
    # every observed score as a threshold; ours over 2K data-independent order statistics.
    full = g.evidence_from_scores(mem, non).epsilon_lower(1e-5)
    assert abs(full / JAX_CP_BONFERRONI_ALL[case] - 1) < 0.1


def test_one_run_paper_theorem_values():
    """Steinke, Nasr & Jagielski 2023, main theorem (delta = 0): r guesses all correct at confidence 1 - beta give
    eps = log(p / (1 - p)) with p = beta^(1 / r); e.g. r = 100, beta = 0.05: 3.4930 (docs/references.md E-2)."""
    for r in (10, 100, 1000):
        p = 0.05 ** (1 / r)
        assert g.one_run_epsilon_lower(canaries=10 * r, guesses=r, correct=r, delta=0.0) == pytest.approx(
            math.log(p / (1 - p)), rel=1e-9
        )
    assert g.one_run_epsilon_lower(canaries=1000, guesses=100, correct=100, delta=0.0) == pytest.approx(
        3.4930, abs=1e-4
    )
    # delta only lowers the bound, and more canaries (larger 2 m delta) lower it further
    base = g.one_run_epsilon_lower(canaries=1000, guesses=500, correct=450, delta=0.0)
    with_delta = g.one_run_epsilon_lower(canaries=1000, guesses=500, correct=450, delta=1e-5)
    more = g.one_run_epsilon_lower(canaries=10**5, guesses=500, correct=450, delta=1e-5)
    assert base > with_delta > more > 0


# Mahloujifar, Melis & Chaudhuri, "Auditing f-Differential Privacy in One Run" (ICML 2025, arXiv 2410.22235),
# Table 1 (Section 4.2), column "Theoretical": eps at delta 1e-5 of the Gaussian mechanism with noise sigma (sensitivity
# 1). The paper's calculate_epsilon_gaussian (Appendix D) bisects to 0.001 and the table truncates to two decimals.
MMC_TABLE1_THEORETICAL = [(0.5, 9.99), (1.0, 4.37), (2.0, 1.99), (4.0, 0.92)]


@pytest.mark.parametrize(("sigma", "paper"), MMC_TABLE1_THEORETICAL)
def test_gaussian_epsilon_matches_mahloujifar_table1(sigma, paper):
    """docs/references.md E-4: ours 9.9973, 4.3772, 1.9931, 0.9263 against 9.99, 4.37, 1.99, 0.92 (truncated)."""
    ours = g.analyze(g.Gaussian(noise_multiplier=sigma)).epsilon(1e-5)
    assert paper <= ours < paper + 0.011


def test_one_run_at_mahloujifar_appendix_b_operating_point():
    """Mahloujifar et al. 2025, Appendix B ("Varying delta and confidence levels"): m = 10^5 canaries, 1500 guesses,
    1429 correct, the idealized setting's count for the Gaussian mechanism with sigma 1 (mu 1). The paper gives the
    resulting bounds only in Figures 10 and 11 (plots); its Appendix D audit code, transcribed outside the repository,
    gives mu 0.7818128 here, ours 0.7818127 (bisection tolerance). Both bounds stay below the truth (docs E-4)."""
    m, r, v = 100_000, 1500, 1429
    mu = g.one_run_mu_lower(canaries=m, guesses=r, correct=v)
    assert mu == pytest.approx(0.7818128, abs=2e-6)
    eps_fdp = g.analyze(g.Gaussian(noise_multiplier=1 / mu)).epsilon(1e-5)
    eps_steinke = g.one_run_epsilon_lower(canaries=m, guesses=r, correct=v, delta=1e-5)
    truth = g.analyze(g.Gaussian(noise_multiplier=1.0)).epsilon(1e-5)
    # the paper's Table 1 ordering (Steinke et al. < ours < theoretical) at this operating point
    assert 0 < eps_steinke < eps_fdp < truth
    assert eps_steinke == pytest.approx(2.6688, abs=1e-3) and eps_fdp == pytest.approx(3.2992, abs=1e-3)


# -- verdicts ----------------------------------------------------------------------------------------------------------
def test_verdict_flags_fourfold_sampling_rate():
    """True run: sigma 1, q 0.1, T 10 (scores = its privacy loss, 10^4 canaries per side); declared: q 0.025."""
    sigma, q, steps = 1.0, 0.1, 10
    declared = g.SubsampledGaussian(noise_multiplier=sigma, sampling_rate=q / 4, steps=steps)
    truth = g.analyze(g.SubsampledGaussian(noise_multiplier=sigma, sampling_rate=q, steps=steps))
    rng = np.random.default_rng(5)
    mem = subsampled_gaussian_loss_scores(rng, 10**4, sigma, q, steps, True)
    non = subsampled_gaussian_loss_scores(rng, 10**4, sigma, q, steps, False)
    ev = g.evidence_from_scores(mem, non)
    check = g.check_evidence(declared, ev)
    assert check.verdict == "violates_claim" and check.margin > 0 and 0 < check.strongest_fpr < 1
    assert "violates_claim" in check.explanation
    honest = g.check_evidence(truth, ev)  # against the true mechanism: consistent, and reasonably tight
    assert honest.verdict == "consistent" and honest.margin <= 0
    assert 0.3 < honest.tightness <= 1.0


def test_registry_family_wise_false_alarms():
    """200 registries of 20 honest versions (Gaussian mechanism mu = 1, optimal attack on 300 canaries per side) at
    alpha = 0.05: the share of registries with any false `violates_claim` stays <= 5 % plus binomial slack."""
    report = g.analyze(g.Gaussian(noise_multiplier=1.0))
    assert g.registry_confidence(20, 0.05) == pytest.approx(0.9975)
    rng = np.random.default_rng(8)
    registries, versions, n = 200, 20, 300
    mem = rng.normal(1.0, 1.0, (registries, versions, n))
    non = rng.normal(0.0, 1.0, (registries, versions, n))
    alarms = 0
    for i in range(registries):
        audit = g.audit_registry([(report, mem[i, j], non[i, j]) for j in range(versions)], alpha=0.05)
        alarms += audit.any_violation
    assert alarms <= slack_limit(registries)
    assert len(audit.verdicts) == versions and audit.per_version_confidence == pytest.approx(0.9975)
    json.dumps(audit.to_dict(), allow_nan=False)


# -- one-run f-DP audit (Mahloujifar, Melis & Chaudhuri 2024) ----------------------------------------------------------
# docs/references.md E-1: jax_privacy 2.0.0 auditing._epsilon_one_run_fdp(0, m, r, v, 0.05, 1e-5) tests the Gaussian
# mechanism's curve at (eps, 1e-5); mapped to mu = 1 / dp_accounting.get_sigma_gaussian(eps, 1e-5).
JAX_FDP_MU = [
    ((1000, 100, 100), 1.2255334716449877),
    ((1000, 100, 95), 0.7868118148693689),
    ((10000, 1000, 900), 0.6771926141783058),
    ((100000, 5000, 4000), 0.41235869320951113),
    ((1000, 200, 150), 0.3394663284806477),
]


@pytest.mark.parametrize(("args", "ref"), JAX_FDP_MU)
def test_one_run_fdp_mu_matches_jax_privacy(args, ref):
    m, r, v = args
    assert g.one_run_mu_lower(canaries=m, guesses=r, correct=v) == pytest.approx(ref, abs=2e-7)


def _gaussian_one_run(rng, sets, m, r, mu):
    """Canary i shifts coordinate i by b_i * mu (b_i ~ Bernoulli(1/2)) plus N(0, 1): mu-GDP per canary. The guesser
    says "in" for the top r/2 and "out" for the bottom r/2 coordinates and abstains on the rest."""
    b = rng.random((sets, m)) < 0.5
    order = np.argsort(rng.normal(0.0, 1.0, (sets, m)) + mu * b, axis=1)
    top = np.take_along_axis(b, order[:, -r // 2 :], axis=1).sum(axis=1)
    bottom = (~np.take_along_axis(b, order[:, : r // 2], axis=1)).sum(axis=1)
    return top + bottom


def test_validity_one_run_fdp():
    rng = np.random.default_rng(12)
    sets, m, r, mu = 1000, 1000, 200, 1.0
    correct = _gaussian_one_run(rng, sets, m, r, mu)
    mus = np.array([g.one_run_mu_lower(canaries=m, guesses=r, correct=int(v)) for v in correct])
    assert np.sum(mus > mu) <= slack_limit(sets)
    assert np.median(mus) > 0.3
    eps = 1.0  # worst case of eps-DP: each guess right independently w.p. e^eps / (1 + e^eps)
    rr = rng.binomial(r, special.expit(eps), sets)
    bad = sum(g.one_run_fdp_epsilon_lower(canaries=m, guesses=r, correct=int(v), delta=0.0) > eps for v in rr)
    assert bad <= slack_limit(sets)
    # the (eps, delta)-curve version is valid for every (eps, delta)-DP algorithm, so it stays below the Gaussian-
    # family number jax_privacy reports (5.549 at (1000, 100, 100), delta 1e-5) and near the Steinke et al. bound
    ours = g.one_run_fdp_epsilon_lower(canaries=1000, guesses=100, correct=100, delta=1e-5)
    assert ours < 5.549 and ours == pytest.approx(
        g.one_run_epsilon_lower(canaries=1000, guesses=100, correct=100, delta=1e-5), rel=0.02
    )


def test_check_one_run_against_certified_curve():
    rng = np.random.default_rng(13)
    sets, m, r = 200, 1000, 200
    correct = _gaussian_one_run(rng, sets, m, r, 1.0)
    honest = g.analyze(g.Gaussian(noise_multiplier=1.0))  # mu = 1: the truth
    declared = g.analyze(g.Gaussian(noise_multiplier=4.0))  # mu = 0.25: claims 4x more noise than was used
    verdicts = [g.check_one_run(honest, canaries=m, guesses=r, correct=int(v)).verdict for v in correct]
    assert verdicts.count("violates_claim") <= slack_limit(sets)
    flagged = [g.check_one_run(declared, canaries=m, guesses=r, correct=int(v)).verdict for v in correct[:50]]
    assert flagged.count("violates_claim") >= 40
    # a PLD-accounted curve (not a Gaussian) is checked on its own certified curve
    dpsgd = g.analyze(g.SubsampledGaussian(noise_multiplier=1.0, sampling_rate=0.025, steps=10))
    check = g.check_one_run(dpsgd, canaries=m, guesses=r, correct=int(correct[0]))
    assert check.verdict in {"consistent", "violates_claim"}
    json.dumps(check.to_dict(), allow_nan=False)


def test_validity_discrete_scores_randomized_response():
    """Binary scores (heavy ties) from randomized response at eps = 1.5: P[score 1] = e^eps / (1 + e^eps) for members,
    1 / (1 + e^eps) for non-members; unequal sample sizes. Truth: eps(delta = 0) = 1.5 and mu = get_mu_from_pure_dp."""
    eps = 1.5
    true_mu = closed_form.get_mu_from_pure_dp(epsilon=eps)
    rng = np.random.default_rng(14)
    sets = 1000
    members = (rng.random((sets, 700)) < special.expit(eps)).astype(float)
    non = (rng.random((sets, 400)) < special.expit(-eps)).astype(float)
    evs = [g.evidence_from_scores(members[i], non[i]) for i in range(sets)]
    assert sum(ev.epsilon_lower(0.0) > eps for ev in evs) <= slack_limit(sets)
    assert sum(ev.mu_lower > true_mu for ev in evs) <= slack_limit(sets)
    assert np.median([ev.epsilon_lower(0.0) for ev in evs]) > 0.5


# -- certified curve objects (no re-analysis), strongest point, method ids, basis ------------------------------------
AUDIT_FPRS = np.array(sorted({0.0, *np.logspace(-10, -2, 33).tolist(), *np.linspace(0.01, 1.0, 100).tolist()}))


def _sg_report():
    return g.analyze(g.SubsampledGaussian(noise_multiplier=1.0, sampling_rate=0.05, steps=20))


def test_curve_samples_lower_bound_the_pessimistic_curve_not_the_chord():
    """Samples at the audit row's FPRs: fnr_lower <= the exact pessimistic curve everywhere (exact at the samples);
    the chord (np.interp) overstates it somewhere, which is why it is not used."""
    from gdpcore.evidence import pessimistic_curve_samples

    rep = _sg_report()
    samples = pessimistic_curve_samples(AUDIT_FPRS, rep.fnr(AUDIT_FPRS), mu=rep.mu)
    x = np.unique(np.concatenate([np.logspace(-12, 0, 4000), np.linspace(0, 1, 4001)]))
    exact = np.asarray(rep.fnr(x))
    low = samples.fnr_lower(x)
    assert np.all(low <= exact)
    np.testing.assert_allclose(samples.fnr_lower(AUDIT_FPRS), rep.fnr(AUDIT_FPRS), rtol=0, atol=1e-15)
    chord = np.interp(x, AUDIT_FPRS, rep.fnr(AUDIT_FPRS))
    assert np.max(chord - exact) > 1e-6  # the chord would claim a smaller certified TPR than proven
    assert np.max(exact - low) < 0.05  # and the bound stays useful
    tiny = g.analyze(g.Gaussian(noise_multiplier=200.0))  # nearly 1 - alpha: slopes carry round-off, still accepted
    pessimistic_curve_samples(AUDIT_FPRS, tiny.fnr(AUDIT_FPRS), mu=tiny.mu)
    for bad in (([0.0, 0.5, 1.0], [1.0, 0.9, 0.0]), ([0.0, 0.5, 1.0], [0.5, 0.6, 0.0]), ([0.5, 0.2], [0.1, 0.2])):
        with pytest.raises(ValueError):
            pessimistic_curve_samples(*bad, mu=1.0)


def test_check_evidence_accepts_curves_same_verdicts():
    """A report, its pessimistic SymmetricCurve and the audit row's samples give the same verdicts on clear cases."""
    from gdpcore.evidence import pessimistic_curve_samples

    rep = _sg_report()
    samples = pessimistic_curve_samples(AUDIT_FPRS, rep.fnr(AUDIT_FPRS), mu=rep.mu)
    rng = np.random.default_rng(11)
    for mu_true, expected in ((0.2, "consistent"), (3.0, "violates_claim")):
        ev = g.evidence_from_scores(rng.normal(mu_true, 1, 5000), rng.normal(0, 1, 5000))
        checks = [g.check_evidence(c, ev) for c in (rep, rep.curve("pessimistic"), samples)]
        assert {c.verdict for c in checks} == {expected}
        assert checks[0].certified_mu == pytest.approx(rep.mu) and checks[2].certified_mu == rep.mu
        # samples: certified TPR upper bound >= the exact one (never a false alarm from sampling)
        assert np.all(checks[2].tpr_upper >= checks[0].tpr_upper - 1e-12)
        assert np.all(checks[2].margin <= checks[0].margin + 1e-12)
    with pytest.raises(ValueError, match="certified must be"):
        g.check_evidence(rep.fnr, ev)


def test_strongest_fpr_consistent_is_closest_point_in_probit_scale():
    """Consistent: strongest_fpr is the argmax of Phi^-1(TPR_lo) - Phi^-1(certified TPR), not the trivial FPR ~ 1
    where every TPR gap shrinks to 0; the points are exposed."""
    rep = g.analyze(g.Gaussian(noise_multiplier=1.0))  # mu = 1
    rng = np.random.default_rng(3)
    ev = g.evidence_from_scores(rng.normal(0.9, 1, 20000), rng.normal(0, 1, 20000))
    check = g.check_evidence(rep, ev)
    assert check.verdict == "consistent" and check.probit_margin <= 0 and check.margin <= 0
    np.testing.assert_array_equal(check.fpr_upper, ev.fpr_upper)
    np.testing.assert_array_equal(check.tpr_lower, ev.tpr_lower)
    probit = special.ndtri(check.tpr_lower) - special.ndtri(check.tpr_upper)
    assert check.strongest_fpr == check.fpr_upper[int(np.nanargmax(np.where(np.isnan(probit), -np.inf, probit)))]
    assert check.strongest_fpr < 0.9
    assert check.probit_margin > -0.6  # mu 0.9 vs mu 1: within a few tenths on the mu scale
    d = check.to_dict()
    assert d["strongest_fpr"] == check.strongest_fpr and len(d["points"]) == ev.fpr_upper.size
    json.dumps(d, allow_nan=False)
    # no member above any threshold: no strongest point
    nothing = g.check_evidence(rep, g.evidence_from_scores(np.zeros(50), np.arange(50.0) + 1))
    assert nothing.to_dict()["strongest_fpr"] is None and nothing.verdict == "consistent"


def test_method_ids_and_estimate_basis():
    from gdpcore.evidence import METHOD_ID_FDP_ONE_RUN, METHOD_ID_ONE_RUN, METHOD_ID_SCORES

    rep = g.analyze(g.Gaussian(noise_multiplier=1.0))
    rng = np.random.default_rng(4)
    ev = g.evidence_from_scores(rng.normal(0.5, 1, 200), rng.normal(0, 1, 200))
    assert ev.method_id == METHOD_ID_SCORES == "cp-orderstat-bonferroni" and ev.to_dict()["method_id"] == ev.method_id
    check = g.check_evidence(rep, ev, basis="estimate")
    assert check.method_id == METHOD_ID_SCORES and "Bonferroni" in check.method
    assert check.basis == "estimate" and "ESTIMATE" in check.explanation and check.to_dict()["basis"] == "estimate"
    assert g.check_evidence(rep, ev).basis == "certified"
    with pytest.raises(ValueError, match="basis"):
        g.check_evidence(rep, ev, basis="guess")
    one = g.one_run_evidence(canaries=1000, guesses=100, correct=90, delta=1e-5)
    assert one.method_id == METHOD_ID_ONE_RUN == "one-run-steinke2023" and one.to_dict()["method_id"] == one.method_id
    run = g.check_one_run(_sg_report().curve("pessimistic"), canaries=1000, guesses=100, correct=90, basis="estimate")
    assert run.method_id == METHOD_ID_FDP_ONE_RUN == "fdp-one-run-mahloujifar2024" and run.basis == "estimate"
    assert run.certified_mu == pytest.approx(_sg_report().mu) and "ESTIMATE" in run.explanation
