"""The engine's generic path ("never optimistic"): dp_accounting single steps composed by gdpcore.pld.

Independent truth: dp_accounting's own PLDs of the same mechanisms at a 10x finer step (pessimistic connect-the-dots
and optimistic privacy buckets, composed by dp_accounting's ``compose`` / ``self_compose``), and the exact epsilon of
five discrete Gaussians (tests/test_engine.py, mpmath summation; docs/references.md G-1).
"""

from __future__ import annotations

import numpy as np
import pytest
from pld_oracle import dp_accounting_pld  # dp_accounting's own composition (tests/pld_oracle.py)

import gdpcore as g
from gdpcore import kinds

TRUNCATION = 1e-14
"""dp_accounting moves up to 1e-15 of tail mass per composition to +inf (``tail_mass_truncation``)."""
SUMMATION = 1e-10
"""Relative rounding of a delta summed over a PMF of up to ~1e6 atoms (as in tests/test_contract.py)."""


def _le(a: float, b: float, slack: float = TRUNCATION) -> bool:
    return a <= b + slack + SUMMATION * abs(b)


def _excess_mass(pld) -> float:
    """Mass a dp_accounting PLD holds beyond 1 (its composed PMFs gain some at fine steps): the most by which its
    delta can overstate its own construction."""
    excess = 0.0
    for pmf in (pld._pmf_remove, pld._pmf_add):
        dense = pmf.to_dense_pmf()
        excess = max(excess, float(np.clip(dense._probs, 0, None).sum() + dense._infinity_mass) - 1.0)
    return excess


MIXED = g.Composed(
    mechanisms=(
        g.SubsampledGaussian(noise_multiplier=1.1, sampling_rate=0.02, steps=200),
        g.Laplace(scale=2.0),
        g.DiscreteLaplace(noise_parameter=0.5),
    )
)


@pytest.mark.parametrize("delta", [1e-5, 1e-10])
@pytest.mark.slow  # 39 s per delta at load 8 on the 2 shared cores
def test_mixed_composition_bracket_contains_dp_accounting_at_a_finer_step(delta):
    """DP-SGD + a Laplace release + a discrete Laplace release (the generic path): at a 10x finer step dp_accounting's
    pessimistic delta at our upper epsilon is at most delta (upper >= truth), its optimistic delta there too, and its
    pessimistic delta at our lower epsilon at least delta (lower <= truth <= its pessimistic side)."""
    r = g.analyze(MIXED, deltas=[1e-5, 1e-10])
    assert r.provenance.engine == "gdpcore.pld" and r.status == "ok"
    assert "gdpcore.pld" in r.provenance.accountant
    step = r.discretization / 10.0
    pess = dp_accounting_pld(MIXED, step=step, pessimistic=True)
    opt = dp_accounting_pld(MIXED, step=step, pessimistic=False)
    hi, lo = float(r.epsilon(delta)), float(r.epsilon(delta, side="optimistic"))
    assert 0.0 < lo <= hi
    assert _le(pess.get_delta_for_epsilon(hi), delta, TRUNCATION + _excess_mass(pess))
    assert _le(opt.get_delta_for_epsilon(hi), delta)
    assert _le(delta, pess.get_delta_for_epsilon(lo))


def test_single_steps_flatten_the_tree_and_merge_equal_steps():
    """Composition is commutative: SelfComposed(Composed([SL(T=3), Lap, Lap]), 2) is one subsampled-Laplace step
    6 times and one Laplace 4 times."""
    sl = g.SubsampledLaplace(scale=1.0, sampling_rate=0.1, steps=3)
    lap = g.Laplace(scale=2.0)
    m = g.SelfComposed(mechanism=g.Composed(mechanisms=(sl, lap, lap)), count=2)
    parts = kinds.single_steps(m)
    assert [(type(leaf).__name__, n) for leaf, n in parts] == [("SubsampledLaplace", 6), ("Laplace", 4)]
    assert parts[0][0].steps == 1 and parts[1][0] == lap


def test_discrete_gaussian_tail_bracket_holds_at_a_fixed_step():
    """The cell whose bracket once inverted, at the step it failed at (1e-4): both ends bracket the exact 26.11102
    (tests/test_engine.py::_exact_discrete_gaussian_epsilon) at delta = 1e-12, asked for explicitly."""
    m = g.SelfComposed(mechanism=g.DiscreteGaussian(sigma=1.437, sensitivity=2), count=5)
    r = g.analyze(m, discretization=1e-4, deltas=[1e-12])
    assert float(r.epsilon(1e-12, side="optimistic")) <= 26.11102 <= float(r.epsilon(1e-12))
