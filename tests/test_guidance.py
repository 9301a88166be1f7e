"""Seed 000 reporting guidance: the rule-of-thumb regime warning next to the computed regret, the curve's fixed point
alpha* in the FPR table, and R_min(pi) from the public API (docs/references.md S000-11)."""

from __future__ import annotations

import json
import math

import pytest
from scipy import special

import gdpcore as g
from gdpcore.guidance import dpsgd_regime_warning, fixed_point, regime_warning


def test_regime_boundaries_follow_the_paper():
    # Seed 000 Sec. 4: sigma >= 2 and T >= 400.
    assert dpsgd_regime_warning(noise_multiplier=2.0, steps=400) is None
    assert "sigma = 1.99 < 2" in dpsgd_regime_warning(noise_multiplier=1.99, steps=400)
    assert "T = 399 < 400" in dpsgd_regime_warning(noise_multiplier=2.0, steps=399)
    both = dpsgd_regime_warning(noise_multiplier=1.0, steps=10)
    assert "sigma = 1 < 2" in both and "T = 10 < 400" in both
    assert regime_warning(g.Gaussian(noise_multiplier=0.5)) is None  # the rule is stated for DP-SGD only
    assert regime_warning(g.Laplace(scale=1.0)) is None
    fixed = g.SampledWithoutReplacementGaussian(noise_multiplier=1.0, dataset_size=1000, batch_size=10, steps=50)
    assert regime_warning(fixed) is not None
    with pytest.raises(ValueError, match="noise_multiplier"):
        dpsgd_regime_warning(noise_multiplier=-1.0, steps=10)


def test_warning_sits_next_to_the_computed_regret():
    # Outside the regime (sigma = 1, T = 400, q = 0.1): regret 0.0313 >= 0.01 (S000-11; independently "up to ~0.05").
    out = g.analyze(g.SubsampledGaussian(noise_multiplier=1.0, sampling_rate=0.1, steps=400)).summary()
    out = json.loads(json.dumps(out))
    assert out["gdp_regret"]["regime_warning"] is not None and "sigma = 1 < 2" in out["gdp_regret"]["regime_warning"]
    assert out["gdp_regret"]["value"] >= 0.01
    # Inside the regime no warning, but the regret is still computed - and the rule fails there (S000-11: an
    # independent FFT-PLD gives 0.0151 at sigma = 2, T = 400, q = 0.1; gdpcore 0.0132 at its alpha_min).
    inside = g.analyze(g.SubsampledGaussian(noise_multiplier=2.0, sampling_rate=0.1, steps=400)).summary()
    assert inside["gdp_regret"]["regime_warning"] is None
    assert 0.01 < inside["gdp_regret"]["value"] <= 0.0153
    assert g.analyze(g.Gaussian(noise_multiplier=1.0)).summary()["gdp_regret"]["regime_warning"] is None


def test_fixed_point_in_the_default_fpr_table():
    # mu-GDP: alpha* = Phi(-mu/2) = 0.308538 at mu = 1 (S000-11).
    r = g.analyze(g.Gaussian(noise_multiplier=1.0))
    a, bound = fixed_point(r)
    assert bound == "exact" and a == pytest.approx(0.3085375387, abs=1e-9)
    assert float(r.fnr(a)) == pytest.approx(a, abs=1e-12)
    s = r.summary()
    assert s["fixed_point"] == {"value": a, "bound": "exact"}
    last = s["tpr"][-1]
    assert last["fpr"] == a and last["value"] == pytest.approx(1 - a, abs=1e-12)
    assert [row["fpr"] for row in s["tpr"][:-1]] == [1e-10, 1e-8, 1e-6, 1e-4, 1e-3, 1e-2, 1e-1]
    # Laplace eps0 = 1 (PLD curve): alpha* = e^{-1/2}/2 = 0.303265 (TV = 1 - e^{-eps0/2}); pessimistic => lower.
    lap = g.analyze(g.Laplace(scale=1.0))
    a, bound = fixed_point(lap)
    assert bound == "lower" and a <= math.exp(-0.5) / 2 + 1e-12 and a == pytest.approx(math.exp(-0.5) / 2, abs=1e-3)
    assert float(lap.fnr(a)) == pytest.approx(a, abs=1e-9)
    assert lap.summary()["tpr"][-1]["fpr"] == a


def test_bayes_risk_is_public():
    # R_min(pi) (seed 002 Eq. 2; seed 000's regret is its sup difference): for mu-GDP at pi = 1/2 it is alpha*.
    r = g.analyze(g.Gaussian(noise_multiplier=1.0))
    assert g.get_bayes_risk(r, 0.5) == pytest.approx(float(special.ndtr(-0.5)), abs=1e-12)
