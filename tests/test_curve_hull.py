"""gdpcore.curve.hull_with_advantage: an optimistic curve lowered onto a second lower bound on the advantage.

Independent truth: the geometry of the lower convex hull (a supporting line through the tangent vertex and the
diagonal point, symmetric under (alpha, beta) -> (beta, alpha)), the SymmetricCurve invariants of its docstring, the
closed-form trade-off curve of randomized response (Dong, Roth & Su 2022, Sec. 2.4, the curve f_{eps,0} of
eps-DP: f(alpha) = max(0, 1 - e^eps alpha, e^-eps (1 - alpha)); docs/references.md A-2), and the definition of the
regret (sup over eps >= 0 of (delta_mu(eps) - delta_f(eps)) / (1 + e^eps), evaluated on a fine grid).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from gdpcore import engine
from gdpcore import fast_pld as f
from gdpcore.closed_form import get_log_delta_from_gdp
from gdpcore.curve import curve_from_profile, curve_from_remove_pmf, hull_with_advantage


def _twin_and_a2(sigma: float, q: float, T: int, d: float):
    """The twin before the hull (curve-wide tail 1e-14) and the advantage's own lower bound, as the engine forms them."""
    single = f.optimistic_single_step_pld(noise_multiplier=sigma, sampling_rate=q, discretization=d)
    parts = [(single, T)]
    tail = engine.twin_tail(1e-10)
    composed, slack = f.optimistic_composition(parts, wrap_tail=tail)
    pmf, offset, _ = f.shift_by_residuals(composed, parts, tail=tail, wrap_slack=slack)
    curve = curve_from_remove_pmf(pmf, delta_offset=offset)
    a2 = f.certified_advantage_lower_bound(composed, parts, wrap_slack=slack)
    return curve, a2


@pytest.fixture(scope="module")
def twin():
    curve, a2 = _twin_and_a2(0.8, 1e-3, 3000, 1.25e-4)
    return curve, a2, hull_with_advantage(curve, advantage=a2)


def test_hull_keeps_the_symmetric_curve_invariants(twin):
    curve, a2, hull = twin
    assert a2 > curve.advantage  # the point lies below the curve: the hull is not the identity here
    a_p = (1.0 - a2) / 2.0
    # Grid: eps[0] = 0, strictly increasing; delta non-increasing with delta(0) = A2.
    assert hull.eps[0] == 0.0 and np.all(np.diff(hull.eps) > 0)
    assert np.all(np.diff(hull.delta) <= 0) and hull.delta[0] == pytest.approx(a2, abs=1e-15)
    # Vertices: one per line, alpha and tail non-decreasing, beta non-increasing; the last one is P.
    K = hull.eps.size - 1
    assert hull.alpha.size == hull.tail.size == hull.beta.size == K + 1
    assert np.all(np.diff(hull.alpha) >= 0) and np.all(np.diff(hull.tail) >= 0) and np.all(np.diff(hull.beta) <= 0)
    assert hull.alpha[-1] == hull.beta[-1] == pytest.approx(a_p, rel=1e-15)
    assert hull.tail[-1] == pytest.approx((1.0 + a2) / 2.0, rel=1e-15)
    assert hull.fixed_point == pytest.approx(a_p, rel=1e-15) and hull.fixed_point >= a_p
    assert hull.advantage == pytest.approx(a2, rel=1e-13) and hull.advantage <= a2
    # Vertex i lies on the lines K - i and K - i + 1 (checked at the junction: v - 1, v, P). The new line (1) and the
    # eps = 0 line through P to round-off; the kept vertices to their float-error allowance (curve._vertices_on_grid
    # moves them by 4 (n + 2) u relative and the lines' values carry the profile's own rounding: 1e-8 relative).
    for i, line, rel in ((K, 0, 1e-13), (K, 1, 1e-13), (K - 1, 1, 1e-13), (K - 1, 2, 1e-8), (K - 2, 2, 1e-8)):
        on_line = hull.tail[i] - math.exp(hull.eps[line]) * hull.alpha[i]
        assert on_line == pytest.approx(hull.delta[line], rel=rel)
    # Convex at the junction and on the diagonal: slope(v-1, v) <= slope(v, P) <= -1 <= its mirror 1 / slope(v, P).
    s_in = (hull.beta[K - 1] - hull.beta[K - 2]) / (hull.alpha[K - 1] - hull.alpha[K - 2])
    s_vp = (hull.beta[K] - hull.beta[K - 1]) / (hull.alpha[K] - hull.alpha[K - 1])
    assert s_in <= s_vp <= -1.0 and s_vp == pytest.approx(-math.exp(hull.eps[1]), rel=1e-12)
    # The segment v-P supports the whole original curve (lower convex hull): every vertex on or above its line.
    v_a, v_b = hull.alpha[K - 1], hull.beta[K - 1]
    line = v_b + s_vp * (curve.alpha - v_a)
    assert np.all(curve.beta >= line - 1e-12)
    # The original curve is kept up to v and lowered beyond it; the hull is symmetric.
    x = np.linspace(0.0, 1.0, 40_001)
    assert np.all(hull.fnr(x) <= curve.fnr(x) + 1e-15)
    left = x <= v_a
    np.testing.assert_allclose(hull.fnr(x[left]), curve.fnr(x[left]), rtol=0, atol=1e-15)
    mid = (x > 1e-3) & (x < 1 - 1e-3)
    np.testing.assert_allclose(hull.fnr(hull.fnr(x[mid])), x[mid], rtol=0, atol=1e-12)


def test_hull_queries_read_the_new_line(twin):
    curve, a2, hull = twin
    e_new = float(hull.eps[1])
    a_p = hull.fixed_point
    # delta on [0, eps'] is the line through P, tail_P - e^eps a_P; unchanged (lines of the curve) beyond eps'.
    e = np.linspace(0.0, e_new, 51)
    np.testing.assert_allclose(hull.delta_at(e), (1.0 - a_p) - np.exp(e) * a_p, rtol=1e-13)
    far = np.linspace(e_new * 1.01, 3.0, 301)
    np.testing.assert_allclose(hull.delta_at(far), curve.delta_at(far), rtol=0, atol=1e-15)
    assert np.all(hull.delta_at(e) >= curve.delta_at(e))
    # epsilon_at inverts delta_at on the new line, and the epsilons read below it are unchanged.
    for delta in np.linspace(0.99 * a2, float(hull.delta[1]), 7):
        assert float(hull.delta_at(float(hull.epsilon_at(delta)))) == pytest.approx(delta, rel=1e-12)
        assert float(hull.epsilon_at(delta)) >= float(curve.epsilon_at(delta))
    for delta in (1e-5, 1e-9):
        assert float(hull.epsilon_at(delta)) == float(curve.epsilon_at(delta))
    # mu: read near the diagonal the hull binds (the curve is lower there); read at 1e-10 it does not.
    assert hull.mu(alpha_min=0.45)[0] > curve.mu(alpha_min=0.45)[0]
    assert hull.mu(alpha_min=1e-10)[0] == curve.mu(alpha_min=1e-10)[0]
    # The regret bracket against f_mu contains the definition's sup over a fine eps grid.
    mu = hull.mu(alpha_min=0.45)[0]
    lo, hi = hull.regret_against_gdp(mu)
    # (the sup sits at a kink of delta_f, i.e. at a grid line such as eps', so the lines are sampled too)
    grid = np.union1d(np.linspace(0.0, 5.0, 200_001), hull.eps[hull.eps <= 5.0])
    sup = float(
        np.max((np.exp(get_log_delta_from_gdp(mu=mu, epsilon=grid)) - hull.delta_at(grid)) / (1 + np.exp(grid)))
    )
    assert lo <= hi and lo - 1e-12 <= sup <= hi + 1e-12


def test_hull_of_a_weak_curve_is_randomized_response():
    # One line at eps = 0 (delta 0.2) and one at eps = 1 (delta 0): vertex 0 is (0, 1). With A2 = 1/2 the tangent
    # from P = (1/4, 1/4) touches (0, 1) (slope -3 > -3.24 towards the other vertex), so the hull is
    # max(0, 1 - 3 alpha, (1 - alpha) / 3): randomized response at eps = log 3 (advantage (3 - 1) / (3 + 1) = 1/2).
    curve = curve_from_profile(np.array([0.0, 1.0]), np.array([0.2, 0.0]))
    hull = hull_with_advantage(curve, advantage=0.5)
    alpha = np.linspace(0.0, 1.0, 10_001)
    rr = np.maximum(0.0, np.maximum(1.0 - 3.0 * alpha, (1.0 - alpha) / 3.0))
    np.testing.assert_allclose(hull.fnr(alpha), rr, rtol=0, atol=1e-15)
    np.testing.assert_allclose(hull.eps, [0.0, math.log(3.0)], rtol=1e-15)
    assert hull.advantage == pytest.approx(0.5, rel=1e-15)
    eps = np.linspace(0.0, 2.0, 201)
    # RR's profile: delta(eps) = max(0, (3 - e^eps) / 4) (docs/references.md A-2).
    np.testing.assert_allclose(hull.delta_at(eps), np.maximum(0.0, (3.0 - np.exp(eps)) / 4.0), atol=1e-15)


def test_hull_is_the_identity_when_the_point_lies_on_or_above_the_curve(twin):
    curve, _, _ = twin
    assert hull_with_advantage(curve, advantage=curve.advantage) is curve
    assert hull_with_advantage(curve, advantage=0.0) is curve
    # An advantage of 1 puts P in the corner: its line would need e^eps > e^700; the curve is kept (valid, looser).
    assert hull_with_advantage(curve, advantage=1.0) is curve


@pytest.mark.parametrize("bad", [-0.1, 1.5, math.nan, math.inf])
def test_hull_rejects_an_advantage_outside_the_unit_interval(bad):
    curve = curve_from_profile(np.array([0.0, 1.0]), np.array([0.2, 0.0]))
    with pytest.raises(ValueError, match="advantage must be a number in"):
        hull_with_advantage(curve, advantage=bad)
