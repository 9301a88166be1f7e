"""Curves as input (gdpcore.kinds.curves): a privacy profile, a piecewise-linear trade-off curve and a dp_accounting PLD,
each against independent truth.

* A profile sampled from the Gaussian mechanism's exact delta(eps) (Dong, Roth & Su 2022 Cor. 2.13, evaluated by
  scipy here) is a finite set of (eps, delta)-DP statements: their intersection is a *weaker* guarantee than the
  Gaussian's (a curve below G_mu, seed 000 Thm A.9), so its mu is at or above the Gaussian's - and close on a fine grid.
* A breakpoint curve sampled from G_mu's trade-off function f_mu(alpha) = Phi(Phi^-1(1 - alpha) - mu) (seed 000
  Eq. 4): f_mu is convex, so its chords lie above it and the sampled curve claims a *stronger* guarantee (mu at or
  below the Gaussian's); the profile is the tangent-line construction (below f_mu). Together they bracket mu.
* A dp_accounting PLD of a Gaussian: mu within the PLD's discretisation of the closed form, at or above it (the PLD is
  pessimistic); of a Laplace (and a Poisson-subsampled Laplace, both adjacency directions): dp_accounting's own
  eps(delta) of the same PLD inside the report's bracket; an (eps, delta)-DP PLD's +inf mass kept (eps = inf below
  its delta).
* An asymmetric two-outcome curve: the report's delta(eps) brackets max(H_{e^eps}(Q||P), H_{e^eps}(P||Q)) computed by
  hand (the symmetrisation, Dong, Roth & Su 2022 Def. F.1).
* Rejections name the point; a sweep row (the chunk task's pure part) and a card (the audit row, rendered) for each.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld.common import DifferentialPrivacyParameters
from scipy.stats import norm

import gdpcore as g
from gdpcore import kinds
from gdpcore.kinds import curves
from gdpcore.mechanisms import ParameterError

DELTAS = np.array([1e-2, 1e-3, 1e-5, 1e-7, 1e-9])
REL = 1e-9  # float slack on "lower <= truth <= upper"


def gaussian_delta(mu: float, eps: np.ndarray) -> np.ndarray:
    """delta_mu(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) (Dong, Roth & Su 2022 Cor. 2.13), scipy only."""
    eps = np.asarray(eps, float)
    return norm.cdf(-eps / mu + mu / 2) - np.exp(eps) * norm.cdf(-eps / mu - mu / 2)


def gaussian_epsilon(mu: float, delta: float) -> float:
    from scipy.optimize import brentq

    return brentq(lambda e: gaussian_delta(mu, np.array([e]))[0] - delta, 0.0, 60.0, xtol=1e-14)


# ---------------------------------------------------------------------------------------------------------------------
# (a) privacy profile
# ---------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mu", [0.5, 1.0, 2.0])
def test_profile_of_a_gaussian_gives_mu_at_or_above_the_gaussians_and_close(mu):
    top = mu * mu / 2 + 9 * mu
    fine = np.linspace(0.0, top, 400)
    r = g.analyze(g.from_privacy_profile(fine, gaussian_delta(mu, fine)))
    assert r.status == "ok"
    # Finitely many statements: a weaker guarantee, never a stronger one.
    assert r.mu_lower >= mu * (1 - 1e-9) and r.mu >= r.mu_lower
    assert r.mu <= mu * 1.002  # a fine grid: close
    for d in DELTAS:
        assert float(r.epsilon(d)) >= gaussian_epsilon(mu, d) * (1 - REL)
    # The intersection honours every statement and is tight at the grid points (delta_mu is convex in e^eps).
    on_grid = fine[(fine > 0.1) & (fine < 5)]
    np.testing.assert_allclose(r.delta(on_grid), gaussian_delta(mu, on_grid), rtol=2e-3)
    coarse = np.linspace(0.0, top, 25)
    r_coarse = g.analyze(g.from_privacy_profile(coarse, gaussian_delta(mu, coarse)))
    assert r_coarse.mu_lower >= r.mu * (1 - 1e-3)  # fewer statements: weaker still


def test_single_profile_point_is_f_eps_delta():
    """One (eps, delta) statement: delta(e) = delta + (1 - delta)(e^eps - e^e)/(1 + e^eps) on [0, eps], 0 above...
    except the +inf mass delta (Dong, Roth & Su 2022 Prop. 2.5, f_{eps,delta})."""
    eps0, d0 = 1.0, 1e-3
    r = g.analyze(g.from_privacy_profile([eps0], [d0]))
    for e in (0.0, 0.3, 0.7, 1.0, 2.0):
        truth = d0 + (1 - d0) * max(0.0, math.exp(eps0) - math.exp(e)) / (1 + math.exp(eps0))
        assert float(r.delta(e, side="optimistic")) <= truth * (1 + REL) + 1e-15
        assert truth <= float(r.delta(e)) * (1 + REL) + 1e-15
        assert float(r.delta(e)) == pytest.approx(truth, rel=2e-3)
    assert math.isinf(float(r.epsilon(1e-4))) and math.isinf(r.mu)  # below delta: no finite eps; f(0) < 1: no mu
    assert float(r.epsilon(d0)) <= eps0 * (1 + 1e-3)


# ---------------------------------------------------------------------------------------------------------------------
# (b) piecewise-linear trade-off curve
# ---------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mu", [0.5, 1.0, 2.0])
def test_sampled_gaussian_curve_and_profile_bracket_mu(mu):
    alpha = np.concatenate([[0.0], np.geomspace(1e-12, 1.0, 300)])
    beta = norm.cdf(norm.isf(alpha) - mu)  # f_mu (seed 000 Eq. 4), scipy only
    beta[-1] = 0.0
    chords = g.from_tradeoff_curve(alpha, beta)
    # f_mu is symmetric, but its chords between points sampled at these FPRs are not (the mirror images of the
    # breakpoints are other points): the symmetrisation lowers the chord curve a little, staying above f_mu.
    assert chords.asymmetry < 5e-3
    r = g.analyze(chords)
    assert r.status == "ok"
    # Chords of a convex curve lie above it: the sampled curve claims more, its mu is at most the Gaussian's.
    assert r.mu_lower <= mu * (1 + REL)
    assert r.mu_lower >= mu * (1 - 5e-3)
    fine = np.linspace(0.0, mu * mu / 2 + 9 * mu, 400)
    tangents = g.analyze(g.from_privacy_profile(fine, gaussian_delta(mu, fine)))
    assert r.mu_lower <= mu <= tangents.mu  # the bracket
    # Between breakpoints the report's FNR is the chord: at or above f_mu.
    a = np.array([1e-6, 1e-3, 0.05, 0.3])
    assert np.all(np.asarray(r.fnr(a, side="optimistic")) >= norm.cdf(norm.isf(a) - mu) - 1e-12)


def _hockey_stick(upper: np.ndarray, lower: np.ndarray, eps: float) -> float:
    return float(np.sum(np.maximum(upper - math.exp(eps) * lower, 0.0)))


def test_asymmetric_curve_is_analysed_as_its_symmetrisation():
    # P = (0.2, 0.8), Q = (0.6, 0.4): T(P, Q) has vertices (0, 1), (0.2, 0.4), (1, 0); T(Q, P) is its inverse.
    P, Q = np.array([0.2, 0.8]), np.array([0.6, 0.4])
    m = g.from_tradeoff_curve([0.0, 0.2, 1.0], [1.0, 0.4, 0.0])
    assert m.asymmetry == pytest.approx(0.1, abs=1e-12)  # f(0.4) = 0.3, conv(min(f, f^-1))(0.4) = 0.2
    r = g.analyze(m)
    assert r.accountant.startswith("user-supplied trade-off curve") and "asymmetric" in r.accountant
    for e in (0.0, 0.2, 0.5, 0.69, 1.0, 1.2):
        truth = max(_hockey_stick(Q, P, e), _hockey_stick(P, Q, e))  # both orders of the pair
        assert float(r.delta(e, side="optimistic")) <= truth + 1e-12
        assert truth <= float(r.delta(e)) + 1e-12
    assert r.advantage == pytest.approx(0.4, abs=1e-3)  # TV(P, Q) = 0.4


def test_symmetric_input_is_kept_and_json_round_trips():
    m = g.from_tradeoff_curve([0.0, 0.1, 0.4, 1.0], [1.0, 0.4, 0.1, 0.0])
    assert m.asymmetry == 0.0
    assert g.mechanism_from_dict(m.to_dict()) == m
    r = g.analyze(m)
    a, b = r.breakpoints(side="optimistic")
    assert np.interp(0.1, a, b) >= 0.4 - 1e-12  # the optimistic end never claims more than the input


# ---------------------------------------------------------------------------------------------------------------------
# (c) dp_accounting PLD
# ---------------------------------------------------------------------------------------------------------------------
def test_gaussian_pld_gives_the_closed_form_mu_within_its_discretisation():
    pld = pld_lib.from_gaussian_mechanism(1.0, value_discretization_interval=1e-4)
    r = g.analyze(g.from_pld(pld))
    assert r.mu >= 1.0 * (1 - REL) and r.mu == pytest.approx(1.0, abs=1e-3)  # pessimistic PLD: at or above
    assert r.mu_lower == pytest.approx(1.0, abs=1e-3)
    for d in DELTAS:
        dpa = pld.get_epsilon_for_delta(d)
        assert float(r.epsilon(d, side="optimistic")) <= dpa * (1 + REL) and dpa <= float(r.epsilon(d)) * (1 + REL)
        assert dpa >= gaussian_epsilon(1.0, d) * (1 - 1e-6)


@pytest.mark.parametrize("sampling_prob", [1.0, 0.3])
def test_laplace_pld_gives_dp_accountings_own_epsilon(sampling_prob):
    pld = pld_lib.from_laplace_mechanism(1.0, value_discretization_interval=1e-3, sampling_prob=sampling_prob)
    m = g.from_pld(pld)
    assert bool(m.add_pmf) == (sampling_prob < 1.0)  # both adjacency directions kept when they differ
    r = g.analyze(m)
    assert r.status == "ok" and r.accountant.startswith("user-supplied dp_accounting PLD")
    for d in (*DELTAS, 0.3):
        dpa = pld.get_epsilon_for_delta(d)
        lo, hi = float(r.epsilon(d, side="optimistic")), float(r.epsilon(d))
        assert lo <= dpa * (1 + REL) + 1e-12 and dpa <= hi * (1 + REL) + 1e-12
        assert hi == pytest.approx(dpa, rel=2e-3, abs=2e-3)  # within the discretisation
    if sampling_prob == 1.0:
        assert kinds.evaluate(m, "pure_epsilon") == pytest.approx(1.0, abs=1e-3)  # Laplace: pure 1-DP


def test_pld_whose_add_direction_dominates_is_bracketed_as_tightly():
    """Swapping a PLD's two directions changes nothing the relation sees (the curve is their pointwise max): the
    bracket still contains dp_accounting's epsilon (which takes the max of both) and is as narrow."""
    pld = pld_lib.from_laplace_mechanism(1.0, value_discretization_interval=1e-3, sampling_prob=0.3)
    swapped = pld_lib.PrivacyLossDistribution(pld._pmf_add, pld._pmf_remove)
    r = g.analyze(g.from_pld(swapped))
    assert r.status == "ok" and r.certified_gap < 1e-3
    for d in DELTAS:
        dpa = swapped.get_epsilon_for_delta(d)
        assert float(r.epsilon(d, side="optimistic")) <= dpa * (1 + REL) and dpa <= float(r.epsilon(d)) * (1 + REL)


def test_pld_infinity_mass_is_kept():
    pld = pld_lib.from_privacy_parameters(DifferentialPrivacyParameters(1.0, 1e-3), value_discretization_interval=1e-3)
    r = g.analyze(g.from_pld(pld))
    assert math.isinf(float(r.epsilon(1e-4))) and math.isinf(r.mu)
    assert float(r.epsilon(1e-2)) == pytest.approx(pld.get_epsilon_for_delta(1e-2), rel=2e-3)
    assert float(r.epsilon(1e-2)) >= pld.get_epsilon_for_delta(1e-2) * (1 - REL)


def test_optimistic_or_foreign_pld_is_refused():
    opt = pld_lib.from_laplace_mechanism(1.0, pessimistic_estimate=False, value_discretization_interval=1e-3)
    with pytest.raises(ParameterError, match="pessimistic"):
        g.from_pld(opt)
    with pytest.raises(ParameterError, match="PrivacyLossDistribution"):
        g.from_pld({"probs": [1.0]})


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("discretization=0.001;lower_index=0;infinity_mass=0.0;probs=0.5,-0.1,0.5", r"probs\[1\] = -0\.1"),
        ("discretization=0.001;lower_index=0;infinity_mass=0.0;probs=0.5,nan", r"probs\[1\] must be a finite real"),
        ("discretization=0.001;lower_index=0;infinity_mass=0.0;probs=0.9,0.9", r"total mass at most 1"),
        (
            "discretization=-1;lower_index=0;infinity_mass=0.0;probs=1",
            r"remove_pmf discretization must be a finite real > 0",
        ),
        ("discretization=0.001;lower_index=0;infinity_mass=2;probs=1", r"infinity_mass must be in \[0, 1\]"),
        ("lower_index=0;probs=1", r"lacks discretization, infinity_mass"),
    ],
)
def test_bad_pmf_text_is_rejected_naming_the_atom(text, match):
    with pytest.raises(ValueError, match=match) as info:
        g.mechanism_from_dict({"kind": "privacy_loss_distribution", "remove_pmf": text})
    assert isinstance(info.value, ParameterError) and info.value.key == "remove_pmf"


def test_negative_roundoff_atoms_move_to_the_infinity_mass():
    text = "discretization=0.1;lower_index=0;infinity_mass=0.0;probs=0.5,-1e-14,0.5"
    m = g.mechanism_from_dict({"kind": "privacy_loss_distribution", "remove_pmf": text})
    assert "infinity_mass=1e-14" in m.remove_pmf and "-1e-14" not in m.remove_pmf


# ---------------------------------------------------------------------------------------------------------------------
# Rejections name the point
# ---------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fpr", "fnr", "match"),
    [
        ([0, 0.2, 0.5, 1], [1, 0.3, 0.25, 0], r"convex in fpr: breakpoint 2 \(fpr\[2\] = 0\.5, fnr\[2\] = 0\.25\)"),
        ([0, 0.5, 0.4, 1], [1, 0.2, 0.1, 0], r"fpr must be strictly increasing: fpr\[2\] = 0\.4"),
        ([0, 0.2, 0.5, 1], [1, 0.3, 0.4, 0], r"fnr must be non-increasing: fnr\[2\] = 0\.4"),
        ([0, 0.2, 1.5], [1, 0.3, 0], r"fpr must be in \[0, 1\]: fpr\[2\] = 1\.5"),
        ([0, 0.2, 1], [1, -0.3, 0], r"fnr must be in \[0, 1\]: fnr\[1\] = -0\.3"),
        ([0, float("nan"), 1], [1, 0.3, 0], r"fpr\[1\] must be a finite real, got nan"),
        ([0, 0.2, 1], [1, 0.9, 0], r"f\(alpha\) <= 1 - alpha .*fnr\[1\] = 0\.9"),
        ([0.1, 0.2, 1], [1, 0.3, 0], r"fpr must start at 0: fpr\[0\] = 0\.1|fpr must start at 0"),
        ([0, 0.2, 1], [1, 0.3, 0.1], r"fnr must end at 0"),
        ([0, 1], [1, 0, 0], r"same length"),
        ([0, "x", 1], [1, 0.3, 0], r"fpr\[1\] must be a number"),
    ],
)
def test_bad_curve_is_rejected_naming_the_point(fpr, fnr, match):
    with pytest.raises(ValueError, match=match) as info:
        g.from_tradeoff_curve(fpr, fnr)
    assert isinstance(info.value, ParameterError)
    assert info.value.key in ("breakpoint_fpr", "breakpoint_fnr")


@pytest.mark.parametrize(
    ("eps", "delta", "match"),
    [
        ([0, 1, 2], [0.5, 0.6, 0.1], r"deltas must be non-increasing .*deltas\[1\] = 0\.6 > deltas\[0\] = 0\.5"),
        ([0, 1, 1], [0.5, 0.4, 0.1], r"epsilons must be strictly increasing: epsilons\[2\] = 1\.0"),
        ([0, 1, 2], [0.5, 0.4, 1.5], r"deltas must be in \[0, 1\]: deltas\[2\] = 1\.5"),
        ([-1, 1], [0.5, 0.4], r"epsilons must be in \[0, 700\]: epsilons\[0\] = -1\.0"),
        ([0, float("nan")], [0.5, 0.4], r"epsilons\[1\] must be a finite real, got nan"),
        ([0, 1], [0.5, float("inf")], r"deltas\[1\] must be a finite real, got inf"),
        ([0, 1], [0.5], r"same length"),
        ([], [], r"must not be empty"),
    ],
)
def test_bad_profile_is_rejected_naming_the_point(eps, delta, match):
    with pytest.raises(ParameterError, match=match) as info:
        g.from_privacy_profile(eps, delta)
    assert info.value.key in ("epsilons", "deltas")


def test_errors_are_bounded():
    with pytest.raises(ParameterError) as info:
        g.from_tradeoff_curve(list(np.linspace(0, 1, 100000)), "x" * 100000)
    assert len(str(info.value)) < 500


# ---------------------------------------------------------------------------------------------------------------------
# A full report, a sweep row and a card for each
# ---------------------------------------------------------------------------------------------------------------------
def _inputs() -> list[g.Mechanism]:
    eps = np.linspace(0.0, 12.0, 121)
    alpha = np.concatenate([[0.0], np.geomspace(1e-10, 1.0, 60)])
    beta = norm.cdf(norm.isf(alpha) - 1.0)
    beta[-1] = 0.0
    return [
        g.from_privacy_profile(eps, gaussian_delta(1.0, eps)),
        g.from_tradeoff_curve(alpha, beta),
        g.from_pld(pld_lib.from_laplace_mechanism(1.0, value_discretization_interval=1e-3)),
    ]


def test_every_number_says_it_is_relative_to_the_input():
    for m in _inputs():
        r = g.analyze(m)
        assert kinds.input_notes(m) and r.accountant.startswith(curves.USER_SUPPLIED)
        assert r.summary()["accountant"] == r.accountant
        composed = g.Composed(mechanisms=(m, g.Gaussian(noise_multiplier=2.0)))
        assert g.analyze(composed).accountant.startswith(curves.USER_SUPPLIED)  # composed inputs too
    assert not kinds.input_notes(g.Gaussian(noise_multiplier=1.0))


def test_sweep_row_for_each_input():
    from tasks.evaluate import Chunk, EvalSettings, compute_chunk_table
    from tasks.lake import code_version

    settings = EvalSettings(
        deltas=(1e-5, 1e-6),
        fprs=(0.0, 0.01, 0.5, 1.0),
        representations=("gdp", "epsilon_delta"),
        discretization=None,
        alpha_min=1e-10,
        code_version=code_version(),
    )
    for m in _inputs():
        chunk = Chunk(spec_name="unit", kind=m.kind, mechanisms=(m.to_json(),), settings=settings)
        (row,) = compute_chunk_table(chunk, "run-curves").to_pylist()
        r = g.analyze(m)
        assert row["status"] == "ok" and row["cell_id"] == m.content_hash
        assert row["accountant"].startswith(curves.USER_SUPPLIED)
        assert row["mu"] == pytest.approx(r.mu, rel=1e-3)
        assert row["epsilon"] == pytest.approx([float(r.epsilon(d)) for d in (1e-5, 1e-6)], rel=1e-3)


def test_spec_carries_the_arrays_as_text(tmp_path):
    from tasks.spec import load_grid_spec

    spec = tmp_path / "curves.yaml"
    spec.write_text(
        "name: curve-inputs\n"
        "mechanism: {kind: tradeoff_curve, breakpoint_fpr: '0,0.1,0.4,1'}\n"
        "grid:\n  breakpoint_fnr: ['1,0.4,0.1,0', '1,0.5,0.15,0']\n"
        "deltas: [1.0e-5]\n",
        encoding="utf-8",
    )
    cells = list(load_grid_spec(spec).iter_cells())
    assert [g.mechanism_from_dict(c).kind for c in cells] == ["tradeoff_curve"] * 2
    bad = tmp_path / "bad.yaml"
    bad.write_text(spec.read_text().replace("'1,0.5,0.15,0'", "'1,0.3,0.25,0'").replace("0.4,1", "0.5,1"))
    with pytest.raises(ValueError, match=r"convex"):
        load_grid_spec(bad)


def test_card_for_each_input():
    from tasks.audit import compute_audit_row
    from tasks.cards import render_markdown
    from tasks.manifest import ModelManifest

    for i, m in enumerate(_inputs()):
        manifest = ModelManifest.model_validate(
            {
                "name": f"curve-input-{i}",
                "version": 1,
                "dataset_size": 10000,
                "delta": 1e-5,
                "mechanism": {"gdpcore": m.to_dict()},
            }
        )
        row = compute_audit_row(manifest, "run-card")
        assert row["accountant"].startswith(curves.USER_SUPPLIED) and row["mu_bound"] == "upper"
        text = render_markdown(row, png_name=None)
        assert curves.USER_SUPPLIED in text
