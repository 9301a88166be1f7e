"""What the engine returns: curves and their provenance."""

from __future__ import annotations

import dataclasses

from gdpcore.curve import (
    SymmetricCurve,
)

PLD_ENGINE = "gdpcore.pld"
"""``Provenance.engine`` of every curve gdpcore's PLD composition (:mod:`gdpcore.pld`) produced."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Provenance:
    """Where a pair of curves comes from and how accurate it is.

    ``status`` is "ok" (gap within tolerance, or a fixed step), "tolerance_not_met: ..." (valid bounds, wider than
    asked), "discretization_limited: ..." (a finer pessimistic step was refused by the budget), or
    "over_budget: ..." (RDP fallback: upper bounds only), or "bracket_of_bounds: ..." (the two ends bound different
    mechanisms, :func:`gdpcore.kinds.ends_notes`: the gap is that bracket's width). ``certified_gap`` is the achieved gap
    (:func:`certified_gap`), ``discretization_error`` the estimated relative error of the pessimistic numbers the gap
    reads (doubling comparison, or the batch group's measured law; subsampled Gaussians with a chosen step only;
    None where it was not estimated: a batch cell whose first step met the gap, which then bounds that error).
    """

    accountant: str
    engine: str
    """Which code composed the curves (the lake's ``engine`` column): "closed_form" (exact mu, nothing composed),
    ``PLD_ENGINE`` ("gdpcore.pld", the lake's name for gdpcore's round-off-bounded PLD composition, :mod:`gdpcore.pld`, on the
    subsampled-Gaussian path and on the generic path alike; ``accountant`` says where the single steps came from,
    dp_accounting's constructions on the generic path) or "rdp_fallback" (dp_accounting's RDP conversion)."""
    status: str = "ok"
    discretization: float | None = None
    discretization_lower: float | None = None
    discretization_error: float | None = None
    certified_gap: float | None = None
    tolerance: float | None = None
    support_length: int | None = None
    memory_estimate_bytes: int | None = None
    seconds: float = 0.0
    diagnostics: dict[str, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, eq=False)
class Curves:
    """The engine's output: pessimistic and optimistic curves (or an exact mu) and their provenance."""

    pessimistic: SymmetricCurve | None
    optimistic: SymmetricCurve | None
    exact_mu: float | None
    provenance: Provenance
