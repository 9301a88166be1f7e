"""The ladder: every step the engine chooses is a rung ``LADDER_TOP * 2^(-k/2)``, so cells with nearby
parameters share single steps; and the a-priori first step of a Poisson-subsampled Gaussian."""

from __future__ import annotations

import math

LADDER_TOP = 6.4e-2


LADDER_FINEST = 1e-7


GENERIC_START = 1e-4
"""First step of every mechanism outside the subsampled-Gaussian path (dp_accounting's default discretisation). The
one step that is not a ladder rung (the nearest rungs are 1.25e-4 and 8.8e-5): moving it to one would move every
number of those mechanisms, so it stays; each refinement from it lands on a rung (:func:`ladder_floor`), and those
steps share single steps like every other."""


_START_TOP = 3.2e-2
"""The coarsest first step of the pessimistic side."""


def ladder_floor(d: float, *, per_octave: int = 2) -> float:
    """Largest rung ``LADDER_TOP * 2^(-k/2)`` that is <= ``d``, clamped to [LADDER_FINEST, LADDER_TOP];
    ``per_octave=1`` keeps every other rung (``LADDER_TOP * 2^-k``)."""
    k = max(0, math.ceil(per_octave * math.log2(LADDER_TOP / max(d, 1e-300)) - 1e-9))
    return max(LADDER_TOP * 2.0 ** (-k / per_octave), LADDER_FINEST)


def start_step(sigma: float, q: float, error: float) -> float:
    """A priori step for a Poisson-subsampled Gaussian: connect-the-dots error ~ 0.08 (step / s1)^2 relative, with
    ``s1 = q sqrt(e^{1/sigma^2} - 1)`` the per-step loss spread (measured on DP-SGD grids, docs/references.md P-1 case D)."""
    s1 = q * math.sqrt(math.expm1(min(1.0 / sigma**2, 700.0)))
    # Every other rung (LADDER_TOP * 2^-k): the rule's margin is the one it was measured with.
    return ladder_floor(min(s1 * math.sqrt(error / 0.3), _START_TOP), per_octave=1)
