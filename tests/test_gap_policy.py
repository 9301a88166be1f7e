"""The gap floor (gdpcore/engine/gap.py ``GAP_FLOOR``): epsilons and advantages below 0.01 compared absolutely by
the one policy, on constructed brackets with closed-form values and on real small-epsilon cells against
dp_accounting's two PLD ends."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pld_oracle import poisson_gaussian_pld  # dp_accounting's own constructor (tests/pld_oracle.py)

import gdpcore as g
from gdpcore import engine
from gdpcore.curve import curve_from_profile
from gdpcore.engine.gap import _relative_change, certified_gap, relative_gap


def test_floor_is_the_documented_value_and_the_default_of_relative_gap():
    assert engine.GAP_FLOOR == 0.01
    # Below the floor: absolute width over 0.01; above it: relative to the upper end.
    assert float(relative_gap(0.0050, 0.0049)) == pytest.approx(1e-4 / 0.01)
    assert float(relative_gap(0.0200, 0.0198)) == pytest.approx(2e-4 / 0.02)
    assert float(relative_gap(0.5, 0.495)) == pytest.approx(0.01)
    # An explicit floor still wins (mu's).
    assert float(relative_gap(0.026, 0.025, engine.MU_GAP_FLOOR)) == pytest.approx(1e-3 / 0.2)


def test_doubling_comparison_reads_the_same_floors():
    # Probes are (epsilons..., advantage, mu): epsilon 0.0050 -> 0.0051 and advantage 0.0040 -> 0.0041 both
    # 1e-4 / 0.01 = 1%; mu 0.025 -> 0.026 is 1e-3 / 0.2 = 0.5%; an epsilon 0.30 -> 0.303 is relative (1%).
    coarse = np.array([0.0050, 0.0040, 0.025])
    fine = np.array([0.0051, 0.0040, 0.025])
    assert _relative_change(coarse, fine) == pytest.approx(1e-4 / 0.01)
    assert _relative_change(np.array([0.0040, 0.025]), np.array([0.0041, 0.025])) == pytest.approx(1e-4 / 0.01)
    assert _relative_change(np.array([0.0040, 0.025]), np.array([0.0040, 0.026])) == pytest.approx(1e-3 / 0.2)
    assert _relative_change(np.array([0.30, 0.1, 0.5]), np.array([0.303, 0.1, 0.5])) == pytest.approx(0.003 / 0.303)


def _rr_curve(eps0: float):
    """Randomized response with epsilon ``eps0``: profile delta(e) = (e^eps0 - e^e) / (e^eps0 + 1) on [0, eps0], whose
    two lines (e = 0, delta = tanh(eps0 / 2)) and (e = eps0, delta = 0) give the exact curve."""
    return curve_from_profile(np.array([0.0, eps0]), np.array([math.tanh(eps0 / 2), 0.0]))


def _rr_epsilon(eps0: float, delta: float) -> float:
    # Closed form: the e with (e^eps0 - e^e) / (e^eps0 + 1) = delta.
    return math.log(math.exp(eps0) - delta * (math.exp(eps0) + 1.0))


@pytest.mark.parametrize(("eps_up", "eps_lo"), [(0.005, 0.00495), (0.005, 0.004), (0.02, 0.0198), (0.5, 0.49)])
def test_certified_gap_on_randomized_response_brackets(eps_up, eps_lo):
    """The certified gap of two randomized responses (closed-form epsilon at delta and advantage tanh(eps0 / 2)) is
    the largest width over max(upper end, 0.01)."""
    deltas = np.array([1e-5, 1e-9])
    got = certified_gap(_rr_curve(eps_up), _rr_curve(eps_lo), deltas=deltas, alpha_min=1e-10, include_mu=False)
    widths = [(_rr_epsilon(eps_up, d) - _rr_epsilon(eps_lo, d)) / max(_rr_epsilon(eps_up, d), 0.01) for d in deltas]
    adv_u, adv_l = math.tanh(eps_up / 2), math.tanh(eps_lo / 2)
    widths.append((adv_u - adv_l) / max(adv_u, 0.01))
    assert got == pytest.approx(max(widths), rel=1e-6)


def test_a_met_bracket_below_the_floor_bounds_e_to_the_eps():
    # Below the floor a bracket within tolerance leaves e^eps uncertain by at most e^(tol x 0.01) - 1 (~1e-4 at 1%).
    eps_up = 0.004
    eps_lo = eps_up - 0.9 * engine.DEFAULT_GRID_TOLERANCE * engine.GAP_FLOOR
    deltas = np.array([1e-5])
    gap = certified_gap(_rr_curve(eps_up), _rr_curve(eps_lo), deltas=deltas, alpha_min=1e-10, include_mu=False)
    assert gap <= engine.DEFAULT_GRID_TOLERANCE
    width = _rr_epsilon(eps_up, 1e-5) - _rr_epsilon(eps_lo, 1e-5)
    assert math.expm1(width) <= 1e-4
    # The same absolute width is a 2.25% relative bracket: the relative policy would have refused it.
    assert width / _rr_epsilon(eps_up, 1e-5) > 0.02


@pytest.mark.parametrize(
    ("sigma", "q", "steps"),
    [(3.0, 1e-4, 10), (2.3, 1.1e-4, 430), (1.5, 1e-4, 1000), (2.0, 1e-3, 10)],
)
def test_small_epsilon_cells_stay_between_dp_accountings_ends(sigma, q, steps):
    """Cells of the mixed benchmark grid with epsilon(1e-5) 1e-4 - 6e-3, below the floor: the reported upper end is
    never below dp_accounting's optimistic PLD at 1e-5 (a lower bound on the truth), the lower end never above its
    pessimistic PLD (an upper bound), and the bracket meets the absolute rule."""
    (rep,) = g.analyze_grid([g.SubsampledGaussian(noise_multiplier=sigma, sampling_rate=q, steps=steps)], deltas=[1e-5])
    assert rep.status == "ok"
    up = float(rep.epsilon(1e-5))
    lo = float(rep.epsilon(1e-5, side="optimistic"))
    assert up < engine.GAP_FLOOR
    assert up >= poisson_gaussian_pld(sigma, q, steps, 1e-5, pessimistic=False).get_epsilon_for_delta(1e-5)
    assert lo <= poisson_gaussian_pld(sigma, q, steps, 1e-5, pessimistic=True).get_epsilon_for_delta(1e-5)
    tol = engine.DEFAULT_GRID_TOLERANCE
    assert 0.0 <= up - lo <= tol * engine.GAP_FLOOR * (1 + 1e-9)
    assert rep.certified_gap <= tol
