"""The certified branch-and-bound both regret brackets refine: cells of eps with an upper bound each, split 8 ways.

Used by :meth:`gdpcore.curve.SymmetricCurve.regret_against_gdp` (an accountant's curve against mu-GDP) and
:func:`gdpcore.representations.certified_sup` (any two profiles); the callers own the objective and the cell bounds
(seed 000 Eq. 24), this module the bookkeeping. Proof sketch of validity: every cell ever created keeps a valid upper
bound of the objective on it; a cell is refined (its bound replaced by its 8 sub-cells' bounds) or set aside only when
its bound is at most the best point value found plus ``tol`` (then its bound enters ``dead``). At any stop the sup is
at most max(dead, bounds of the live cells), and at least the best point value: the bracket is valid whatever
``max_iter`` is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

__all__ = ["BATCH", "SPLIT", "Refined", "refine_cells"]

SPLIT = 8
"""Sub-cells per refined cell."""
BATCH = 4096
"""Cells refined per round (those with the largest bounds)."""
_FRAC = np.linspace(0.0, 1.0, SPLIT + 1)


class Refined(NamedTuple):
    lower: float
    """The best point value found (the lower end of the bracket)."""
    arg: float | None
    """Where it was found, or None if no refined point beat the ``lower`` given."""
    dead: float
    """The largest bound of a cell set aside by the refinement (0.0 if none)."""
    live: np.ndarray
    """The bounds of the cells still alive when the loop stopped."""


def refine_cells(
    lo: np.ndarray,
    hi: np.ndarray,
    bounds: np.ndarray,
    lower: float,
    refine: Callable[[np.ndarray, np.ndarray | None], tuple[np.ndarray, np.ndarray]],
    *,
    tol: float,
    max_iter: int,
    payload: np.ndarray | None = None,
) -> Refined:
    """Refine the cells [lo, hi] (upper bounds ``bounds``) until no bound exceeds ``lower + tol`` or ``max_iter`` rounds.

    Each round takes the :data:`BATCH` cells with the largest bounds (those above ``lower + tol``), splits each into
    :data:`SPLIT` equal sub-cells with points ``pts`` (shape (cells, SPLIT + 1)) and calls ``refine(pts, payload of
    those cells)``, which returns (objective at ``pts``, upper bounds of the sub-cells, shape (cells, SPLIT)). A
    sub-cell inherits its parent's ``payload`` entry (e.g. the curve vertex that is affine on it).
    """
    arg: float | None = None
    dead = 0.0
    for _ in range(max_iter):
        if bounds.size == 0 or bounds.max() <= lower + tol:
            break
        m = min(BATCH, bounds.size)
        top = np.argpartition(bounds, -m)[-m:]
        top = top[bounds[top] > lower + tol]
        pts = lo[top, None] + (hi[top] - lo[top])[:, None] * _FRAC[None, :]
        vals, sub_bounds = refine(pts, None if payload is None else payload[top])
        j = int(np.argmax(vals))
        if vals.flat[j] > lower:
            lower = float(vals.flat[j])
            arg = float(pts.flat[j])
        keep = np.ones(bounds.size, dtype=bool)
        keep[top] = False
        lo = np.concatenate([lo[keep], pts[:, :-1].ravel()])
        hi = np.concatenate([hi[keep], pts[:, 1:].ravel()])
        if payload is not None:
            payload = np.concatenate([payload[keep], np.repeat(payload[top], SPLIT)])
        bounds = np.concatenate([bounds[keep], sub_bounds.ravel()])
        # Cells that cannot beat the best value found by more than tol are done (their bound is kept in dead).
        alive = bounds > lower + tol
        if not alive.all():
            dead = max(dead, float(bounds[~alive].max()))
        lo, hi, bounds = lo[alive], hi[alive], bounds[alive]
        if payload is not None:
            payload = payload[alive]
    return Refined(lower, arg, dead, bounds)
