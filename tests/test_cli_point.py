"""``gdp calibrate / compare / convert / bayes-security``: the numbers are the Python API's, and they agree with
independent truth.

Independent truth: seed 000 Table 3 (*Gaussian DP for Reporting Differential Privacy Guarantees in Machine
Learning*; unrounded values docs/references.md S000-4); the Gaussian closed forms evaluated with scipy here (mu-GDP
of a Gaussian mechanism is sensitivity/sigma, its profile Dong et al. Cor. 2.13, its Bayes risk seed 002 Eq. 2, and
G_mu1 is Blackwell-more private than G_mu2 iff mu1 <= mu2); seed 004 Cor. 7 written out with math.erf and the
paper's own example (sigma 0.5, q 0.001, 100 epochs: 0.527 closed form, docs/references.md S004-2).
"""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
from scipy import optimize, stats

import gdpcore
from flows.cli import main

# seed 000 Table 3 (docs/references.md S000-4): mu for (eps, delta), 4 decimals.
TABLE3 = {
    0.1: (0.0325, 0.0275, 0.0199),
    1.0: (0.2681, 0.2367, 0.1820),
    6.0: (1.3095, 1.1963, 0.9744),
    8.0: (1.6660, 1.5315, 1.2622),
    10.0: (2.0004, 1.8481, 1.5379),
}
DELTAS = (1e-5, 1e-6, 1e-9)


def _strict(text: str):
    """json.loads that refuses NaN / Infinity (RFC 8259)."""

    def refuse(constant):
        raise AssertionError(f"not JSON: bare {constant}")

    return json.loads(text, parse_constant=refuse)


def _run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _json(capsys, *argv):
    rc, out, err = _run(capsys, *argv, "--json")
    assert rc == 0, err
    return _strict(out)


def _gdp_delta(mu: float, eps: float) -> float:
    """Dong et al. Cor. 2.13 with scipy."""
    return stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)


# -- convert -----------------------------------------------------------------------------------------------------------
def test_convert_without_values_prints_table_3(capsys):
    out = _json(capsys, "convert")
    assert out["computed"] == "mu" and out["bound"] == "exact"
    got = {(r["epsilon"], r["delta"]): r["mu"] for r in out["rows"]}
    assert len(got) == 24
    for eps, mus in TABLE3.items():
        for delta, mu in zip(DELTAS, mus, strict=True):
            assert got[(eps, delta)] == pytest.approx(mu, abs=5e-5)
            assert got[(eps, delta)] == gdpcore.get_mu_from_epsilon_delta(epsilon=eps, delta=delta)  # the API's
    # seed 000 Sec. 5: "(eps = 8, delta = 1e-9) is more private than (eps = 6, delta = 1e-5)"
    assert got[(8.0, 1e-9)] < got[(6.0, 1e-5)]


def test_convert_mu_to_epsilon_inverts_table_3(capsys):
    out = _json(capsys, "convert", "--mu", "1.6660", "0.2681", "--delta", "1e-5")
    assert out["computed"] == "epsilon"
    eps = {r["mu"]: r["epsilon"] for r in out["rows"]}
    assert eps[1.666] == pytest.approx(8.0, abs=1e-3) and eps[0.2681] == pytest.approx(1.0, abs=1e-3)
    for mu, e in eps.items():
        assert _gdp_delta(mu, e) == pytest.approx(1e-5, rel=1e-6)  # independent: the profile at that eps
        assert e == gdpcore.get_epsilon_from_gdp(mu=mu, delta=1e-5)


def test_convert_mu_and_epsilon_give_delta(capsys):
    out = _json(capsys, "convert", "--mu", "1", "--epsilon", "0", "1", "2")
    assert out["computed"] == "delta"
    for r in out["rows"]:
        assert r["delta"] == pytest.approx(_gdp_delta(1.0, r["epsilon"]), rel=1e-9)
    # delta(0) is the advantage 2 Phi(mu/2) - 1 (seed 000 Eq. 8)
    assert out["rows"][0]["delta"] == pytest.approx(2 * stats.norm.cdf(0.5) - 1, rel=1e-9)


def test_convert_text_is_the_json_numbers(capsys):
    rc, out, _ = _run(capsys, "convert", "--epsilon", "8", "--delta", "1e-9")
    assert rc == 0 and "1.26225" in out and "exact" in out


# -- compare -----------------------------------------------------------------------------------------------------------
def _gaussian_bayes_risk(mu: float, pi: np.ndarray) -> np.ndarray:
    lg = np.log(pi) - np.log1p(-pi)
    return pi * stats.norm.cdf(-mu / 2 - lg / mu) + (1 - pi) * stats.norm.cdf(-mu / 2 + lg / mu)  # seed 002 Eq. 2


def test_compare_two_gaussians_is_the_closed_form(capsys):
    out = _json(capsys, "compare", "gaussian --noise-multiplier 1", "gaussian --noise-multiplier 2")
    # mu_A = 1, mu_B = 0.5: B is Blackwell-more private (mu_B <= mu_A), A is not more private than B.
    assert out["b_at_least_as_private_as_a"] is True and out["a_at_least_as_private_as_b"] is False
    assert out["delta_a_b"]["value"] == 0.0
    pi = np.linspace(1e-6, 1 - 1e-6, 200_001)
    truth = float(np.max(_gaussian_bayes_risk(0.5, pi) - _gaussian_bayes_risk(1.0, pi)))  # Delta(B || A), Cor. 1
    assert out["delta_b_a"]["value"] == pytest.approx(truth, abs=1e-8)
    assert out["delta_b_a"]["bound"] == "exact" and out["symmetric"]["value"] == out["delta_b_a"]["value"]
    # the API's numbers
    a, b = gdpcore.Gaussian(noise_multiplier=1.0), gdpcore.Gaussian(noise_multiplier=2.0)
    assert out["delta_b_a"]["value"] == gdpcore.get_delta_divergence(b, a).value
    assert out["delta_a_b"]["value"] == gdpcore.get_delta_divergence(a, b).value
    assert out["crossing_priors"] == []  # Blackwell-ordered: the order never flips (seed 002 Thm 1)


def test_compare_crossing_curves_say_neither_dominates(capsys):
    out = _json(capsys, "compare", "gaussian --noise-multiplier 1", "laplace --scale 1")
    api_ab = gdpcore.get_delta_divergence(gdpcore.Gaussian(noise_multiplier=1.0), gdpcore.Laplace(scale=1.0))
    api_ba = gdpcore.get_delta_divergence(gdpcore.Laplace(scale=1.0), gdpcore.Gaussian(noise_multiplier=1.0))
    assert out["delta_a_b"]["value"] == api_ab.value and out["delta_b_a"]["value"] == api_ba.value
    assert out["delta_a_b"]["value"] > 1e-3 and out["delta_b_a"]["value"] > 1e-3
    assert out["a_at_least_as_private_as_b"] is False and out["b_at_least_as_private_as_a"] is False
    assert "neither dominates" in out["verdict"]
    # seed 002 Fig. 3 (docs/references.md S002-1): the Gaussian sigma = 1 and Laplace b = 1 Bayes risks cross at
    # pi = 0.41854 and 0.58146 (the closed-form risks are checked in tests/test_divergence.py)
    a_cross = out["crossing_priors"]
    assert a_cross == pytest.approx([0.41854, 0.58146], abs=5e-6)
    assert a_cross[0] + a_cross[1] == pytest.approx(1.0, abs=1e-9)  # both curves are symmetric
    # Def. 2 / Thm 2: the smallest D with A >=_D B is Delta(A || B) itself (the bracket's upper end)
    assert out["approximate_dominance"]["a_over_b_min_D"]["value"] == api_ab.upper
    assert out["approximate_dominance"]["b_over_a_min_D"]["value"] == api_ba.upper


@pytest.mark.parametrize("weight", ["beta", "uquadratic"])
def test_compare_weighted_is_the_apis_and_keeps_the_unweighted_verdict(capsys, weight):
    out = _json(capsys, "compare", "gaussian --noise-multiplier 1", "gaussian --noise-multiplier 2", "--weight", weight)
    a, b = gdpcore.Gaussian(noise_multiplier=1.0), gdpcore.Gaussian(noise_multiplier=2.0)
    w = out["weighted"]
    assert w["weight"] == weight and w["delta_b_a"]["value"] == gdpcore.get_delta_divergence(b, a, weight=weight).value
    assert w["delta_a_b"]["value"] == gdpcore.get_delta_divergence(a, b, weight=weight).value
    assert out["delta_b_a"]["value"] == gdpcore.get_delta_divergence(b, a).value
    assert out["b_at_least_as_private_as_a"] is True  # Blackwell from the unweighted Delta (seed 002 Thm 1)


def test_compare_takes_a_spec(capsys):
    out = _json(
        capsys, "compare", '--spec {"kind": "gaussian", "noise_multiplier": 2}', "gaussian --noise-multiplier 2"
    )
    same = gdpcore.Gaussian(noise_multiplier=2.0)
    assert out["a"] == same.to_dict() and out["delta_a_b"]["value"] == gdpcore.get_delta_divergence(same, same).value
    assert out["delta_a_b"]["lower"] == 0.0 and out["delta_b_a"]["value"] <= gdpcore.divergence.BLACKWELL_TOL
    assert "equally private" in out["verdict"]


# -- calibrate ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("steps", "mu"), [(1, 0.5), (4, 0.5), (9, 2.0)])
def test_calibrate_gaussian_for_mu_is_sqrt_t_over_mu(capsys, steps, mu):
    """q = 1: T Gaussian steps of noise sigma are exactly (sqrt(T)/sigma)-GDP, so sigma = sqrt(T)/mu (1/mu for T = 1)."""
    out = _json(capsys, "calibrate", "--sampling-rate", "1", "--steps", str(steps), "--target-mu", str(mu))
    assert out["solved_for"] == "noise_multiplier" and out["value_bound"] == "exact"
    assert out["value"] == pytest.approx(math.sqrt(steps) / mu, rel=1e-9)
    true_mu = math.sqrt(steps) / out["value"]
    assert out["advantage"]["value"] == pytest.approx(2 * stats.norm.cdf(true_mu / 2) - 1, rel=1e-7)
    eps = optimize.brentq(lambda e: _gdp_delta(true_mu, e) - 1e-5, 0.0, 100.0, xtol=1e-13)
    assert out["epsilon"]["delta"] == 1e-5 and out["epsilon"]["value"] == pytest.approx(eps, rel=1e-7)
    assert out["epsilon"]["bound"] == "exact" and out["advantage"]["bound"] == "exact"


def test_calibrate_dpsgd_is_the_apis_answer(capsys):
    from gdpcore.calibration import calibrate_noise

    out = _json(
        capsys, "calibrate", "--sampling-rate", "0.01", "--steps", "1000", "--target-epsilon", "8", "--delta", "1e-5"
    )
    api = calibrate_noise(sampling_rate=0.01, steps=1000, target_epsilon=8.0, delta=1e-5)
    assert out["value"] == api.noise_multiplier and out["value_bound"] == "upper"
    assert out["achieved"]["value"] == api.achieved <= 8.0
    report = gdpcore.analyze(api.mechanism)
    assert out["epsilon"]["value"] == float(report.epsilon(1e-5)) <= 8.0 and out["epsilon"]["bound"] == "upper"
    assert out["advantage"]["value"] == report.advantage and out["advantage"]["bound"] == "upper"


@pytest.mark.parametrize(
    ("argv", "solve", "api_call"),
    [
        (
            ["--noise-multiplier", "1", "--sampling-rate", "0.01", "--target-tpr", "0.1", "--fpr", "0.01"],
            "steps",
            lambda c: c.calibrate_steps(noise_multiplier=1.0, sampling_rate=0.01, target_tpr=0.1, fpr=0.01),
        ),
        (
            ["--noise-multiplier", "1", "--steps", "1000", "--target-advantage", "0.1"],
            "sampling_rate",
            lambda c: c.calibrate_sampling_rate(noise_multiplier=1.0, steps=1000, target_advantage=0.1),
        ),
        (
            ["--noise-multiplier", "1", "--steps", "1000", "--target-accuracy", "0.6", "--fpr", "0.1"],
            "sampling_rate",
            lambda c: c.calibrate_sampling_rate(
                noise_multiplier=1.0, steps=1000, target_fnr=c.fnr_target_from_accuracy(accuracy=0.6, fpr=0.1), fpr=0.1
            ),
        ),
        (
            ["--sampling-rate", "0.01", "--steps", "100", "--target-bayes-security", "0.9"],
            "noise_multiplier",
            lambda c: c.calibrate_noise(sampling_rate=0.01, steps=100, target_bayes_security=0.9),
        ),
    ],
)
def test_calibrate_solves_for_what_is_missing(capsys, argv, solve, api_call):
    from gdpcore import calibration

    out = _json(capsys, "calibrate", *argv)
    api = api_call(calibration)
    assert out["solved_for"] == solve and out["value"] == api.value and out["achieved"]["value"] == api.achieved


# -- bayes-security ----------------------------------------------------------------------------------------------------
def test_bayes_security_cor7_and_its_warnings(capsys):
    out = _json(capsys, "bayes-security", "--sampling-rate", "0.001", "--noise-multiplier", "0.5", "--steps", "100000")
    closed = 1 - math.erf(0.001 * math.sqrt(100_000) / (math.sqrt(2) * 0.5))  # seed 004 Cor. 7, replace-one
    assert out["closed_form"]["value"] == pytest.approx(closed, rel=1e-12)
    assert round(out["closed_form"]["value"], 3) == 0.527  # docs/references.md S004-2 (sigma 0.5, 100 epochs)
    assert out["closed_form"]["bound"] == "estimate"
    api = gdpcore.bayes_security.get_bayes_security_from_dpsgd(sampling_rate=0.001, noise_multiplier=0.5, steps=100_000)
    assert out["closed_form"]["value"] == api.value and out["closed_form"]["error_term"] == api.error_term
    assert any("< 1" in w for w in out["warnings"])  # seed 004 Sec. 6: not advisable for sigma < 1
    rc, text, _ = _run(
        capsys, "bayes-security", "--sampling-rate", "0.001", "--noise-multiplier", "0.5", "--steps", "100000"
    )
    assert rc == 0 and "WARNING" in text and "0.527089" in text


def test_bayes_security_no_warning_in_the_validated_regime_and_accountant_alongside(capsys):
    out = _json(
        capsys,
        "bayes-security",
        "--sampling-rate",
        "0.001",
        "--noise-multiplier",
        "2",
        "--steps",
        "1000",
        "--relation",
        "add_remove",
    )
    assert out["warnings"] == []
    from gdpcore.bayes_security import check_bayes_security_from_dpsgd

    api = check_bayes_security_from_dpsgd(sampling_rate=0.001, noise_multiplier=2.0, steps=1000, relation="add_remove")
    acc = out["accountant"]
    assert acc["value"] == api.exact_lower and acc["bound"] == "lower"
    # and the certified value is the subsampled Gaussian's beta* = 1 - advantage (seed 004 Prop. 3), within the
    # accountant's discretisation of the default analysis
    report = gdpcore.analyze(gdpcore.SubsampledGaussian(noise_multiplier=2.0, sampling_rate=0.001, steps=1000))
    assert acc["value"] == pytest.approx(report.bayes_security, abs=1e-4)
    # The closed form is an estimate close to the certified value here (seed 004 Fig. 4: error <= 0.01).
    assert abs(out["closed_form"]["value"] - acc["value"]) < 0.01


def test_bayes_security_plan_and_epsilon_delta(capsys):
    out = _json(capsys, "bayes-security", "--target", "0.98", "--noise-multiplier", "1", "--steps", "5000")
    # seed 004 Fig. 3: slope q/sigma = 0.00035453 at beta* = 0.98, T = 5000 (docs/references.md S004)
    assert out["solved_for"] == "sampling_rate" and out["value"] == pytest.approx(0.00035453, rel=1e-4)
    out = _json(capsys, "bayes-security", "--epsilon", "1", "--delta", "1e-5")
    assert out["bayes_security"]["value"] == pytest.approx((2 - 2e-5) / (math.e + 1), rel=1e-12)  # Eq. 5
    assert out["bayes_security"]["bound"] == "lower"


# -- one family of conventions -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["compare", "gaussian", "laplace --scale 1"], "--noise-multiplier"),
        (["compare", "no_such_kind --x 1", "laplace --scale 1"], "no_such_kind"),
        (["compare", "gaussian --noise-multiplier -1", "laplace --scale 1"], "noise_multiplier"),
        (["compare", "gaussian --noise-multiplier 1 --neighbouring replace_one", "laplace --scale 1"], "neighbouring"),
        (["compare", "gaussian --noise-multiplier 'x", "laplace --scale 1"], "quotation"),
        (["calibrate", "--steps", "10", "--target-mu", "1"], "two of"),
        (["calibrate", "--steps", "10", "--sampling-rate", "0.1"], "exactly one target"),
        (["calibrate", "--steps", "10", "--sampling-rate", "0.1", "--target-epsilon", "1"], "--delta"),
        (["calibrate", "--steps", "10", "--sampling-rate", "0.1", "--target-mu", "1", "--fpr", "0.1"], "--fpr"),
        (["calibrate", "--steps", "0", "--sampling-rate", "0.1", "--target-mu", "1"], "--steps"),
        (["calibrate", "--steps", "10", "--sampling-rate", "0.1", "--target-tpr", "0.001", "--fpr", "0.01"], "fpr"),
        (["convert", "--mu", "-1"], "--mu"),
        (["convert", "--mu", "nan"], "--mu"),
        (["convert", "--delta", "1"], "--delta"),
        (["convert", "--mu", "1", "--epsilon", "1", "--delta", "1e-5"], "two of"),
        (["bayes-security", "--steps", "10"], "--sampling-rate"),
        (["bayes-security", "--epsilon", "1"], "--delta"),
        (["bayes-security", "--sampling-rate", "2", "--noise-multiplier", "1", "--steps", "1"], "--sampling-rate"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, argv, needle):
    rc, out, err = _run(capsys, *argv)
    assert rc == 2 and out == "" and needle in err, err
    assert err.startswith(f"gdp {argv[0]}: error:") and len(err.strip().splitlines()) == 1


def test_each_command_answers_within_3_seconds_warm(capsys):
    """Issue brief: each answers one question in <= 3 s on a warm machine (in-process, after one warm-up call)."""
    commands = [
        ["convert", "--mu", "1", "--delta", "1e-5"],
        ["compare", "gaussian --noise-multiplier 1", "laplace --scale 1"],
        ["calibrate", "--sampling-rate", "0.01", "--steps", "1000", "--target-epsilon", "8", "--delta", "1e-5"],
        ["bayes-security", "--sampling-rate", "0.001", "--noise-multiplier", "1", "--steps", "10000"],
    ]
    for argv in commands:
        assert _run(capsys, *argv)[0] == 0  # warm-up: imports, kind registry
        start = time.process_time()
        assert _run(capsys, *argv)[0] == 0
        assert time.process_time() - start < 3.0, argv  # CPU seconds: a shared machine's load does not count


def test_the_readme_examples_run(capsys):
    """README "What a report looks like": each one-point example line answers (exit 0, strict JSON with --json)."""
    import re
    import shlex
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    lines = [
        line.split("  #")[0].strip()
        for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S)
        for line in block.splitlines()
        if line.startswith(("gdp calibrate", "gdp compare", "gdp convert", "gdp bayes-security"))
    ]
    assert len(lines) >= 4
    for line in lines:
        _json(capsys, *shlex.split(line)[1:])
