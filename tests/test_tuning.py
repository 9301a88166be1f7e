"""Best-of-K tuning (gdpcore.tuning) against independent truth.

* the formulas of Papernot & Steinke 2022 (Thm 2, truncated negative binomial; Thm 6, Poisson) written out here for a
  Gaussian single run, whose RDP curve t mu^2 / 2 and privacy profile are closed forms, with the CKS conversion
  (Canonne, Kamath, Steinke 2020 Prop. 12) written out too;
* dp_accounting's own implementation of the same theorems (``_compute_rdp_repeat_and_select``);
* exact enumeration of best-of-K randomized response (outputs {0, 1}, "1" best; the best is 0 only if every run is
  0), with the law of K from scipy.stats: its exact RDP curve and privacy profile lie below the bound.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as rdp_acc
from scipy import optimize, special, stats

from gdpcore import Gaussian, Laplace, RandomizedResponse, SubsampledGaussian, analyze
from gdpcore.engine import kind_rdp_curve
from gdpcore.tuning import RepetitionDistribution, analyze_tuning, get_tuned_report_bound

ORDERS = np.asarray(rdp_acc.DEFAULT_RDP_ORDERS, dtype=float)
SIGMA = 2.0
MU = 1.0 / SIGMA


def _cks_epsilon(orders: np.ndarray, rdp: np.ndarray, delta: float) -> float:
    """eps(delta) = min_t rdp(t) + log(1 - 1/t) - log(delta t) / (t - 1) (CKS 2020 Prop. 12), orders > 1.01."""
    keep = orders > 1.01
    t, r = orders[keep], rdp[keep]
    return max(0.0, float(np.min(r + np.log1p(-1.0 / t) - np.log(delta * t) / (t - 1.0))))


def _envelope(r: np.ndarray) -> np.ndarray:
    out = r.copy()
    for i in range(out.size):
        out[i] = r[i:].min()
    return out


def _gauss_delta(mu: float, eps: np.ndarray) -> np.ndarray:
    """Exact profile of the Gaussian mechanism with sensitivity / sigma = mu (Balle & Wang 2018 Thm 8)."""
    return stats.norm.cdf(-eps / mu + mu / 2) - np.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)


def _gauss_epsilon(mu: float, delta: float) -> float:
    return float(optimize.brentq(lambda e: _gauss_delta(mu, np.asarray(e)) - delta, 0.0, 200.0, xtol=1e-14))


def _tnb_mean(eta: float, gamma: float) -> float:
    """Papernot & Steinke 2022 Def. 1 / Sec. 3: E[K] of D_{eta, gamma}."""
    if eta == 0:
        return (1 / gamma - 1) / math.log(1 / gamma)
    return eta * (1 - gamma) / (gamma * (1 - gamma**eta))


# -- the paper's formulas, Gaussian single run -------------------------------------------------------------------------
@pytest.mark.parametrize("eta", [0.0, 0.5, 1.0, 3.0])
@pytest.mark.parametrize("gamma", [0.5, 0.1, 0.01])
def test_truncated_negative_binomial_matches_theorem_2(eta, gamma):
    dist = RepetitionDistribution.truncated_negative_binomial(eta, gamma=gamma)
    assert dist.mean == pytest.approx(_tnb_mean(eta, gamma), rel=1e-12)
    bound = get_tuned_report_bound(analyze(Gaussian(noise_multiplier=SIGMA)), distribution=dist, deltas=[1e-5, 1e-8])
    eps_single = ORDERS * MU**2 / 2  # RDP of the Gaussian mechanism
    lam_hat_term = np.min((1 - 1 / ORDERS) * eps_single + math.log(1 / gamma) / ORDERS)
    paper = eps_single + (1 + eta) * lam_hat_term + math.log(_tnb_mean(eta, gamma)) / (ORDERS - 1)
    np.testing.assert_allclose(bound.rdp, _envelope(paper), rtol=1e-12)
    for d, e in zip(bound.deltas, bound.epsilons, strict=True):
        assert e == pytest.approx(_cks_epsilon(ORDERS, _envelope(paper), d), rel=1e-12)
        assert e <= _cks_epsilon(ORDERS, paper, d) + 1e-12
    assert bound.bound == "upper" and "Papernot & Steinke 2022, Thm 2" in bound.analysis
    assert bound.expected_k == dist.mean


@pytest.mark.parametrize("mean", [1.0, 2.0, 10.0, 300.0])
def test_poisson_matches_theorem_6(mean):
    bound = get_tuned_report_bound(
        analyze(Gaussian(noise_multiplier=SIGMA)), distribution=RepetitionDistribution.poisson(mean), deltas=[1e-5]
    )
    eps_hat = np.log(ORDERS / (ORDERS - 1))  # e^eps_hat = 1 + 1/(t - 1)
    paper = ORDERS * MU**2 / 2 + mean * _gauss_delta(MU, eps_hat) + math.log(mean) / (ORDERS - 1)
    np.testing.assert_allclose(bound.rdp, _envelope(paper), rtol=1e-9, atol=1e-15)
    assert bound.value == pytest.approx(_cks_epsilon(ORDERS, _envelope(paper), 1e-5), rel=1e-9)
    assert "Papernot & Steinke 2022, Thm 6" in bound.analysis


def test_agrees_with_dp_accountings_repeat_and_select():
    """dp_accounting implements the same theorems (RepeatAndSelectDpEvent); Thm 2 agrees, and gdpcore's Thm 6 is
    at most dp_accounting's (delta_hat from the exact profile instead of the RDP conversion)."""
    report = analyze(Gaussian(noise_multiplier=SIGMA))
    rdp = ORDERS * MU**2 / 2
    for shape, mean in [(1.0, 10.0), (0.0, 20.0), (2.0, 5.0)]:
        ours = get_tuned_report_bound(
            report, distribution=RepetitionDistribution.truncated_negative_binomial(shape, mean=mean)
        )
        peer = rdp_acc._compute_rdp_repeat_and_select(ORDERS, rdp, mean, shape)
        np.testing.assert_allclose(ours.rdp, peer, rtol=1e-6)
    ours = get_tuned_report_bound(report, distribution=RepetitionDistribution.poisson(10.0))
    peer = rdp_acc._compute_rdp_repeat_and_select(ORDERS, rdp, 10.0, np.inf)
    assert (np.asarray(ours.rdp) <= peer * (1 + 1e-12)).all()


# -- fixed K -----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("k", [1, 4, 25])
def test_fixed_k_is_the_composition(k):
    """K Gaussians compose to sqrt(K) mu-GDP (Dong, Roth, Su 2022 Cor. 3.3): the engine's composition is exact."""
    bound = analyze_tuning(Gaussian(noise_multiplier=SIGMA), distribution={"distribution": "fixed", "count": k})
    assert bound.value == pytest.approx(_gauss_epsilon(math.sqrt(k) * MU, 1e-5), rel=1e-9)
    assert bound.bound == "upper"
    if k == 1:
        assert bound.epsilons == bound.single_run_epsilons


def test_fixed_k_best_of_randomized_response_attains_the_composition():
    """No bound better than the K-fold composition holds for a fixed K: the best of K randomized responses is 0 only
    when all K are 0, with likelihood ratio e^(K eps) - exactly the composition's pure-DP parameter."""
    eps, k = 0.7, 6
    p = math.exp(eps) / (1 + math.exp(eps))
    ratio = math.log(p**k / (1 - p) ** k)
    assert ratio == pytest.approx(k * eps, rel=1e-12)
    bound = analyze_tuning(RandomizedResponse(epsilon=eps), distribution=RepetitionDistribution.fixed(k), deltas=[1e-9])
    exact = _binary_epsilon(np.array([(1 - p) ** k, 1 - (1 - p) ** k]), np.array([p**k, 1 - p**k]), 1e-9)
    assert exact <= bound.value
    assert bound.value <= k * eps + 1e-9  # the composition's pure DP parameter bounds every delta


# -- exact best-of-K of randomized response ------------------------------------------------------------------------------
def _binary_epsilon(P: np.ndarray, Q: np.ndarray, delta: float) -> float:
    """Smallest eps with sum_o (P - e^eps Q)_+ <= delta both ways (exact, finite outputs)."""

    def d(e: float) -> float:
        return max(np.clip(P - math.exp(e) * Q, 0, None).sum(), np.clip(Q - math.exp(e) * P, 0, None).sum())

    if d(0.0) <= delta:
        return 0.0
    return float(optimize.brentq(lambda e: d(e) - delta, 0.0, 100.0, xtol=1e-13))


def _renyi(P: np.ndarray, Q: np.ndarray, t: float) -> float:
    keep = (P > 0) | (Q > 0)
    P, Q = P[keep], Q[keep]
    fwd = special.logsumexp(t * np.log(P) + (1 - t) * np.log(Q)) / (t - 1)
    bwd = special.logsumexp(t * np.log(Q) + (1 - t) * np.log(P)) / (t - 1)
    return float(max(fwd, bwd))


def _k_law(name: str, **kw) -> np.ndarray:
    """P[K = k] for k = 0..N from scipy.stats (independent of gdpcore)."""
    k = np.arange(0, 20001)
    if name == "geometric":
        return stats.geom.pmf(k, kw["gamma"])
    if name == "logarithmic":
        return stats.logser.pmf(k, 1 - kw["gamma"])
    if name == "tnb":
        raw = stats.nbinom.pmf(k, kw["eta"], kw["gamma"])
        return np.where(k >= 1, raw, 0.0) / (1 - raw[0])
    return stats.poisson.pmf(k, kw["mean"])


@pytest.mark.parametrize(
    ("name", "kw", "dist"),
    [
        ("geometric", {"gamma": 0.1}, RepetitionDistribution.geometric(gamma=0.1)),
        ("geometric", {"gamma": 0.5}, RepetitionDistribution.geometric(gamma=0.5)),
        ("logarithmic", {"gamma": 0.05}, RepetitionDistribution.logarithmic(gamma=0.05)),
        ("tnb", {"eta": 0.5, "gamma": 0.1}, RepetitionDistribution.truncated_negative_binomial(0.5, gamma=0.1)),
        ("poisson", {"mean": 8.0}, RepetitionDistribution.poisson(8.0)),
    ],
)
@pytest.mark.parametrize("eps", [0.3, 1.0])
def test_exact_best_of_k_randomized_response_is_below_the_bound(name, kw, dist, eps):
    law = _k_law(name, **kw)
    k = np.arange(law.size)
    np.testing.assert_allclose(dist.pmf(k), law, rtol=1e-9, atol=1e-300)
    assert dist.mean == pytest.approx(float((k * law).sum()), rel=1e-9)
    p = math.exp(eps) / (1 + math.exp(eps))
    # outputs: nothing (K = 0), 0 (every run 0), 1 (some run 1)
    P = np.array([law[0], (law * (1 - p) ** k).sum() - law[0], 1 - (law * (1 - p) ** k).sum()])
    Q = np.array([law[0], (law * p**k).sum() - law[0], 1 - (law * p**k).sum()])
    bound = analyze_tuning(RandomizedResponse(epsilon=eps), distribution=dist, deltas=[1e-3, 1e-6])
    exact_rdp = np.array([_renyi(P, Q, t) for t in bound.orders])
    assert (exact_rdp <= np.asarray(bound.rdp) * (1 + 1e-9)).all()
    for d, e in zip(bound.deltas, bound.epsilons, strict=True):
        assert _binary_epsilon(P, Q, d) <= e


# -- never below the single run, monotone in E[K] ----------------------------------------------------------------------
MECHANISMS = [
    Gaussian(noise_multiplier=0.8),
    Laplace(scale=2.0),
    RandomizedResponse(epsilon=2.0),
    SubsampledGaussian(noise_multiplier=1.1, sampling_rate=0.01, steps=500),
]
DISTRIBUTIONS = [
    RepetitionDistribution.fixed(3),
    RepetitionDistribution.geometric(mean=1.0001),
    RepetitionDistribution.geometric(mean=20),
    RepetitionDistribution.logarithmic(mean=5),
    RepetitionDistribution.truncated_negative_binomial(2.0, mean=50),
    RepetitionDistribution.poisson(1.0),
    RepetitionDistribution.poisson(30),
]


@pytest.mark.parametrize("mech", MECHANISMS, ids=lambda m: type(m).__name__)
def test_never_below_the_single_run(mech):
    report = analyze(mech)
    deltas = [1e-3, 1e-5, 1e-9]
    for dist in DISTRIBUTIONS:
        bound = get_tuned_report_bound(report, distribution=dist, deltas=deltas)
        for d, e in zip(deltas, bound.epsilons, strict=True):
            assert e >= float(report.epsilon(d))
        assert bound.bound == "upper"
        if bound.rdp is not None:  # the tuned RDP curve is at least the single run's at every order (E[K] >= 1)
            assert (np.asarray(bound.rdp) >= _envelope(kind_rdp_curve(mech)[1])).all()


@pytest.mark.parametrize("kind", ["geometric", "logarithmic", "poisson"])
def test_monotone_in_expected_runs(kind):
    report = analyze(Gaussian(noise_multiplier=SIGMA))
    make = {
        "geometric": lambda m: RepetitionDistribution.geometric(mean=m),
        "logarithmic": lambda m: RepetitionDistribution.logarithmic(mean=m),
        "poisson": RepetitionDistribution.poisson,
    }[kind]
    values = [get_tuned_report_bound(report, distribution=make(m)).value for m in (1.5, 2, 5, 10, 100, 1e4)]
    assert all(b >= a for a, b in zip(values, values[1:], strict=False)), values
    assert values[-1] > values[0]


def test_k_equal_to_one_is_the_single_run():
    report = analyze(Gaussian(noise_multiplier=SIGMA))
    for dist in (
        RepetitionDistribution.fixed(1),
        RepetitionDistribution.geometric(gamma=1.0),
        RepetitionDistribution.truncated_negative_binomial(3.0, mean=1.0),
        RepetitionDistribution.from_dict({"distribution": "logarithmic", "mean": 1}),
    ):
        assert dist.kind == "fixed" and dist.count == 1
        bound = get_tuned_report_bound(report, distribution=dist, deltas=[1e-5])
        assert bound.value == float(report.epsilon(1e-5))


# -- the manifest block and bad input ----------------------------------------------------------------------------------
def test_manifest_block_round_trip():
    for block in (
        {"distribution": "fixed", "count": 12},
        {"distribution": "geometric", "mean": 10},
        {"distribution": "truncated_negative_binomial", "shape": 0.5, "gamma": 0.2},
        {"distribution": "poisson", "mean": 7.5},
    ):
        dist = RepetitionDistribution.from_dict(block)
        assert RepetitionDistribution.from_dict(dist.to_dict()) == dist
    out = analyze_tuning(
        Gaussian(noise_multiplier=SIGMA), distribution={"distribution": "poisson", "mean": 4}
    ).to_dict()
    assert out["analysis"].startswith("Papernot & Steinke 2022, Thm 6")
    assert out["expected_runs"] == 4.0 and out["epsilon"][0]["bound"] == "upper"


@pytest.mark.parametrize(
    ("block", "needle"),
    [
        ({"distribution": "uniform", "mean": 3}, "tuning.distribution"),
        ({"distribution": "fixed", "count": 0}, "tuning.count must be an integer"),
        ({"distribution": "fixed", "count": True}, "count"),
        ({"distribution": "geometric", "mean": 0.5}, "mean"),
        ({"distribution": "geometric", "gamma": 1.5}, "gamma"),
        ({"distribution": "geometric", "gamma": 0.5, "mean": 2}, "tuning.gamma and mean: give exactly one"),
        ({"distribution": "truncated_negative_binomial", "shape": -0.5, "mean": 3}, "shape"),
        ({"distribution": "poisson", "mean": float("nan")}, "mean"),
        ({"distribution": "poisson", "mean": 3, "count": 2}, "tuning.count"),
        ("geometric", "mapping"),
        ({"distribution": "poisson", "mean": 3, 7: 1}, "tuning.7 is not a field"),
    ],
)
def test_bad_blocks_name_the_field(block, needle):
    with pytest.raises(ValueError, match=needle):
        RepetitionDistribution.from_dict(block)


# -- the tuned procedure's full report ---------------------------------------------------------------------------------
def _exact_tpr(P: np.ndarray, Q: np.ndarray, fpr: np.ndarray) -> np.ndarray:
    """Neyman-Pearson: the most powerful (randomised) test of Q against P on finite outputs, both directions."""

    keep = (P > 0) | (Q > 0)
    P, Q = P[keep], Q[keep]

    def one(null: np.ndarray, alt: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            order = np.argsort(-(alt / null))
        a = np.concatenate([[0.0], np.cumsum(null[order])])
        b = np.concatenate([[0.0], np.cumsum(alt[order])])
        return np.interp(fpr, a, b)

    return np.maximum(one(P, Q), one(Q, P))


@pytest.mark.parametrize(
    "dist", [RepetitionDistribution.geometric(gamma=0.2), RepetitionDistribution.poisson(5.0)], ids=["geom", "poisson"]
)
def test_tuned_report_bounds_the_exact_best_of_k_tradeoff(dist):
    eps = 1.0
    law = _k_law("geometric", gamma=0.2) if dist.kind != "poisson" else _k_law("poisson", mean=5.0)
    k = np.arange(law.size)
    p = math.exp(eps) / (1 + math.exp(eps))
    P = np.array([law[0], (law * (1 - p) ** k).sum() - law[0], 1 - (law * (1 - p) ** k).sum()])
    Q = np.array([law[0], (law * p**k).sum() - law[0], 1 - (law * p**k).sum()])
    bound = analyze_tuning(RandomizedResponse(epsilon=eps), distribution=dist, deltas=[1e-5])
    tuned = bound.report()
    fpr = np.geomspace(1e-8, 0.5, 60)
    assert (np.asarray(tuned.tpr(fpr)) >= _exact_tpr(P, Q, fpr) - 1e-12).all()
    assert tuned.bound_types["tpr"] == "upper"
    single = bound.single
    assert tuned.mu >= single.mu and tuned.advantage >= single.advantage
    for e in (0.0, 1.0, 3.0):
        assert bound.delta(e) >= float(single.delta(e))


def test_fixed_k_report_is_the_composition():
    bound = analyze_tuning(Gaussian(noise_multiplier=SIGMA), distribution=RepetitionDistribution.fixed(9))
    assert bound.report().mu == pytest.approx(3 * MU, rel=1e-12)  # 9 Gaussians: 3 mu-GDP, exact


def test_bad_points_name_the_field():
    bound = analyze_tuning(Gaussian(noise_multiplier=SIGMA), distribution=RepetitionDistribution.geometric(mean=3))
    for bad in (0.0, 1.0, [1e-5, 1e-6], float("nan")):
        with pytest.raises(ValueError, match="delta"):
            bound.epsilon(bad)
    for bad in (-1.0, float("inf"), True):
        with pytest.raises(ValueError, match="epsilon"):
            bound.delta(bad)
    with pytest.raises(ValueError, match="deltas"):
        get_tuned_report_bound(bound.single, distribution=RepetitionDistribution.poisson(2), deltas=[])
