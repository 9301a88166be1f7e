"""The certified gap: the accuracy targets and the one relative-difference policy the engine refines by."""

from __future__ import annotations

import math

import numpy as np

from gdpcore.curve import (
    SymmetricCurve,
)

DEFAULT_TOLERANCE = 1e-3
"""Target certified gap of one report: relative width of the epsilon, mu and advantage brackets (see
:func:`certified_gap`). Batches default to ``DEFAULT_GRID_TOLERANCE``."""


DEFAULT_GRID_TOLERANCE = 1e-2
"""Target certified gap per cell of a batch (sweeps trade a 1% bracket for throughput)."""


DEFAULT_DELTAS = (1e-3, 1e-5, 1e-6, 1e-9)
"""The deltas whose epsilon brackets are controlled when the caller names none."""


ERROR_TARGET_RATIO = 0.2
"""Where the pessimistic side's error is measured (one report; a batch cell whose first step missed the gap), its step
keeps the estimated relative discretisation error (the measured law c d^2) within this fraction of the tolerance;
the twin takes up the rest of the gap. A batch cell whose first step meets the gap is not measured: the gap bounds
its error (``gdpcore.engine.subsampled_gaussian._START_OVER_RULE``)."""


GAP_FLOOR = 1e-2
"""Epsilons and advantages below this are compared absolutely: an epsilon or advantage bracket is within tolerance
``tol`` when its width is at most ``tol`` x max(value, 0.01), i.e. 1e-4 absolute at a batch's 1% and 1e-5 at a
report's 0.1%. :func:`relative_gap`, :func:`certified_gap` and the doubling comparison (:func:`_relative_change`) all
read this one constant. Both ends stay proven bounds; only what counts as met changes.

Why absolute below a floor: what an attacker can do is bounded through e^eps (TPR <= e^eps FPR + delta), and an
epsilon bracket [lo, up] leaves e^eps uncertain by the factor e^(up - lo), i.e. by the *absolute* width. A relative
epsilon bracket asks a cell with epsilon 0.003 for an e^eps accurate to 3e-5 where a cell with epsilon 1 gets 1e-2.
The advantage (TPR - FPR, Bayes security 1 - advantage) is itself an absolute attack bound: its width moves any
attack's success bound by that width, the same scale as e^eps FPR moves with an absolute epsilon width. Below 0.01
the brackets stay within ``tol`` x 0.01 absolute: e^eps known to 1e-4 (batch), 100x finer than at epsilon 1.

Why 0.01, measured on the mixed grid's --quick subset (benchmarks/bench_grid.py: 36 cells, sigma 0.5-3,
q 1e-4-0.2, T 10-1e5), floor candidates interleaved per cell in one process, CPU seconds (docs/engine-measurements.md
has the table):

* 1e-3 (before) -> 0.01: total 10.0x -> 10.9x dp_accounting's per-point time, all 36 cells ok, none below
  dp_accounting's optimistic epsilon; the gain is on small-q cells whose *advantage* (4e-4 - 1e-3) bound the gap:
  sigma 0.5, q 1e-4, T 10 (epsilon 0.039, advantage 4.0e-4) 0.20 s -> 0.11 s (262,658 -> 65,671 atoms). Largest
  change of a reported upper end: epsilon(1e-5) +3.0e-5 absolute (e^eps +3.0e-5; relative +8% only on epsilon
  1.1e-4, sigma 3, q 1e-4, T 10), mu +2.8e-6 absolute, advantage +1.9e-5 absolute. On the whole mixed grid (82
  cells): 10.9x -> 11.9x, cells slower than dp_accounting 6 -> 5, 82/82 ok, epsilon(1e-5) upper ends +3.8e-5 at most.
* 0.1: 12.3x, one cell slower than dp_accounting instead of three, but the sigma 3, q 1e-4, T 1e5 corner came out
  tolerance_not_met (its pessimistic mu, read at FPR 1e-10, rose from 0.0109 to 0.0152 at the coarser step the
  looser epsilon target allowed); it also contradicts tests/test_engine.py's policy test (epsilon 0.0101 compared
  relatively).
* 1: 16.2x, no cell slower, but epsilon(1e-5) upper ends move by up to 4.7e-3 absolute (2.45x on epsilon 1.1e-4)
  and two tests against dp_accounting and prv_accountant that hold a 1% *relative* bracket at epsilon 0.13-0.2
  (tests/test_pld.py, tests/test_grid.py) fail: epsilons of 0.1-1 are read, and compared with other accountants,
  relatively.

Epsilon floors alone (advantage kept at 1e-3) moved the total by at most 10.0x -> 10.6x: on the small-q cells the
advantage's relative gap binds as often as epsilon's, hence one floor for both."""


MU_GAP_FLOOR = 0.2
"""mus below this are compared absolutely: a mu bracket is within tolerance ``tol`` when its width is at most
``tol`` x max(mu, 0.2), i.e. 2e-3 absolute at a batch's 1% and 2e-4 at a report's 0.1%. Both ends stay proven
bounds; only what counts as met changes.

Why 0.2: on each of nine subsampled-Gaussian cells measured (sigma 0.5-2.2, q 1e-4 to 0.1, T 300 to 2000) mu binds at the
cut-off FPR ``alpha_min`` = 1e-10, where a small mu is set by tail masses of about 1e-10 that both ends know only
to ~1e-12 absolute (the compositions' round-off allowances, n atoms x ~1e-16, and the twin's bucketing there); since
mu = Phi^{-1}(1 - alpha) - Phi^{-1}(beta), a relative error r of that tail moves mu by about r / Phi^{-1}(1 - 1e-10)
= r / 6.4, i.e. ~1e-3 absolute whatever mu is. Measured on sigma 0.9, q 1e-4, T 300 (mu 0.026): the ends stay
0.8e-3 to 1.1e-3 apart at every step from 2e-4 down to 1.25e-5 (a relative gap of 3-4%, no step reaches 1%; at
T 1e4, 1.15e-3). The cut-off convention itself resolves no finer: doubling the cut-off to 2e-10 moves that mu by
2.1e-3 (T 2000: 2.5e-3). So 1% of the floor is that resolution, 2e-3. At and above 0.2 the bracket is relative as
before (there 1% is >= 2e-3).

What sets the ~1e-3: the a-priori round-off allowances, summed over every atom a test rejects. On sigma 0.9, q 1e-4,
T 300 at step 2.5e-5 the twin's mu is 0.02542 with them and 0.02625 with the twin's P-law and Q-weight allowances
set to 0 (the pessimistic end, allowance set to 0: 0.02626), i.e. the discretisation itself is within 0.05%; tilted
tails (pld.refine_tail) do not help there (the tilted law of a subsampled Gaussian is a sum of rare large jumps).
The allowance grows with the support: at T 1e5 that cell's ends are 2.7e-3 apart (a 1.3% gap, not met)."""


def _floors(size: int) -> np.ndarray:
    # The floor of each entry of a probe (Producer._probe: epsilons, the advantage, mu last).
    floors = np.full(size, GAP_FLOOR)
    if size:
        floors[-1] = MU_GAP_FLOOR
    return floors


def relative_gap(
    upper: np.ndarray | float, lower: np.ndarray | float, floor: np.ndarray | float | None = None
) -> np.ndarray:
    """The one relative-difference policy of the engine, elementwise and signed: (upper - lower) / max(|upper|,
    ``floor``), ``floor`` ``GAP_FLOOR`` = 0.01 unless given. Values below ``floor`` are thereby compared absolutely
    (below 0.01 an epsilon's absolute width is what bounds e^eps, see ``GAP_FLOOR``); where ``upper`` is infinite the gap is 0 if ``lower`` is too (both beyond e^700: as
    tight as float64 allows), +inf otherwise; NaN reads stay NaN. The certified gap reads it with upper and lower
    ends (clamped at 0), the doubling comparison with the finer and the coarser estimate (its absolute value)."""
    u = np.asarray(upper, dtype=float)
    lo = np.asarray(lower, dtype=float)
    if floor is None:
        floor = GAP_FLOOR
    with np.errstate(invalid="ignore"):
        gap = (u - lo) / np.maximum(np.abs(u), floor)
    return np.where(np.isinf(u), np.where(np.isinf(lo), 0.0, math.inf), gap)


def _rel(upper: float, lower: float, floor: float) -> float:
    # One number of the certified gap: a bracket narrower than nothing (or a NaN read) counts as 0.
    return max(0.0, float(relative_gap(upper, lower, floor)))


def certified_gap(
    pessimistic: SymmetricCurve,
    optimistic: SymmetricCurve | None,
    *,
    deltas: np.ndarray,
    alpha_min: float,
    include_mu: bool = True,
) -> float:
    """max over the numbers a report states of (upper - lower) / upper: epsilon at each delta, mu, advantage
    (epsilons and advantages below ``GAP_FLOOR`` = 0.01 and mus below ``MU_GAP_FLOOR`` = 0.2 compared absolutely; 0 where both
    ends are +inf, i.e. beyond e^700). ``inf`` without an
    optimistic curve. ``include_mu=False`` leaves mu out (the engine asks whether mu alone is short)."""
    if optimistic is None:
        return math.inf
    gaps = [_rel(pessimistic.advantage, optimistic.advantage, GAP_FLOOR)]
    if deltas.size:
        eu = np.atleast_1d(pessimistic.epsilon_at(deltas))
        # Both ends beyond the last line (e^eps overflows past 700): [700, inf] is as tight as float64 allows.
        el = np.atleast_1d(optimistic.epsilon_at(deltas)).astype(float)
        gaps += [_rel(float(u), float(v), GAP_FLOOR) for u, v in zip(eu, el, strict=True)]
    if include_mu:
        mu_u = pessimistic.mu(alpha_min=alpha_min)[0]
        mu_l = optimistic.mu(alpha_min=alpha_min)[0]
        gaps.append(_rel(mu_u, mu_l, MU_GAP_FLOOR))
    return float(max(gaps))


def optimistic_epsilon(curve: SymmetricCurve, deltas: np.ndarray) -> np.ndarray:
    """Lower ends of epsilon: where the optimistic profile floors above delta (its lines stop at e^700), the
    mechanism's epsilon exceeds the last line's epsilon, which is reported instead of +inf."""
    eps = np.atleast_1d(curve.epsilon_at(deltas)).astype(float)
    return np.where(np.isinf(eps), curve.eps[-1], eps)


def _relative_change(coarse: np.ndarray, fine: np.ndarray) -> float:
    """Largest relative change between two probes (:meth:`Producer._probe`: epsilons, the advantage, mu last) by
    :func:`relative_gap` with the floors :func:`certified_gap` uses, relative to the finer one; NaN reads (not
    compared) are skipped."""
    rel = np.abs(relative_gap(fine, coarse, _floors(np.size(fine))))
    return float(np.nanmax(rel)) if rel.size else 0.0
