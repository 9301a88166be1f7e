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
"""The pessimistic side's step keeps its estimated relative discretisation error (the measured law c d^2) within this
fraction of the tolerance; the twin takes up the rest of the gap."""


_GAP_FLOOR = 1e-3
"""Epsilons, mus and advantages below this are compared absolutely by :func:`relative_gap` (relative gaps there are
meaningless and harmless)."""


def relative_gap(upper: np.ndarray | float, lower: np.ndarray | float, floor: float = _GAP_FLOOR) -> np.ndarray:
    """The one relative-difference policy of the engine, elementwise and signed: (upper - lower) / max(|upper|,
    ``floor``). Values below ``floor`` are thereby compared absolutely (a relative gap of two tiny epsilons is
    meaningless and harmless); where ``upper`` is infinite the gap is 0 if ``lower`` is too (both beyond e^700: as
    tight as float64 allows), +inf otherwise; NaN reads stay NaN. The certified gap reads it with upper and lower
    ends (clamped at 0), the doubling comparison with the finer and the coarser estimate (its absolute value)."""
    u = np.asarray(upper, dtype=float)
    lo = np.asarray(lower, dtype=float)
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
    (values below 1e-3 compared absolutely; 0 where both ends are +inf, i.e. beyond e^700). ``inf`` without an
    optimistic curve. ``include_mu=False`` leaves mu out (the engine asks whether mu alone is short)."""
    if optimistic is None:
        return math.inf
    gaps = [_rel(pessimistic.advantage, optimistic.advantage, _GAP_FLOOR)]
    if deltas.size:
        eu = np.atleast_1d(pessimistic.epsilon_at(deltas))
        # Both ends beyond the last line (e^eps overflows past 700): [700, inf] is as tight as float64 allows.
        el = np.atleast_1d(optimistic.epsilon_at(deltas)).astype(float)
        gaps += [_rel(float(u), float(v), _GAP_FLOOR) for u, v in zip(eu, el, strict=True)]
    if include_mu:
        mu_u = pessimistic.mu(alpha_min=alpha_min)[0]
        mu_l = optimistic.mu(alpha_min=alpha_min)[0]
        gaps.append(_rel(mu_u, mu_l, _GAP_FLOOR))
    return float(max(gaps))


def optimistic_epsilon(curve: SymmetricCurve, deltas: np.ndarray) -> np.ndarray:
    """Lower ends of epsilon: where the optimistic profile floors above delta (its lines stop at e^700), the
    mechanism's epsilon exceeds the last line's epsilon, which is reported instead of +inf."""
    eps = np.atleast_1d(curve.epsilon_at(deltas)).astype(float)
    return np.where(np.isinf(eps), curve.eps[-1], eps)


def _relative_change(coarse: np.ndarray, fine: np.ndarray) -> float:
    """Largest relative change between two probes (:meth:`Producer._probe`) by :func:`relative_gap`, relative to the
    finer one; NaN reads (not compared) are skipped."""
    rel = np.abs(relative_gap(fine, coarse))
    return float(np.nanmax(rel)) if rel.size else 0.0
