"""The producer: curves for one mechanism or a batch (see :mod:`gdpcore.engine`)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import numpy as np

from gdpcore import kinds
from gdpcore.curve import (
    SymmetricCurve,
)
from gdpcore.engine.gap import DEFAULT_DELTAS, DEFAULT_TOLERANCE
from gdpcore.engine.generic import _GenericPath
from gdpcore.engine.plan import Budget
from gdpcore.engine.results import Curves, Provenance
from gdpcore.engine.subsampled_gaussian import _MAX_FAST_PHASES, _SubsampledGaussianPath
from gdpcore.engine.twin import _smallest_query, optimistic_curve
from gdpcore.kinds import subsampled_gaussian_phases
from gdpcore.mechanisms import Mechanism


class Producer(_SubsampledGaussianPath, _GenericPath):
    """Curves for one mechanism or a batch, sharing single steps (and their FFTs) across mechanisms.

    One producer per batch: single steps are cached by (sigma, q, step, direction, side); :meth:`release` drops
    them (the grid releases after each (sigma, q) group).

    State: a producer holds caches and hints only; everything one call computes (planned bytes, the tilt, the
    diagnostics, why the twin stopped) travels in the records :class:`_Composed`, :class:`_Pessimistic` and
    :class:`_Twin`, passed and returned explicitly. Concurrent calls on one producer are safe: the single-step cache
    is read and filled under a lock (a step built twice by two threads is the same deterministic PMF; one copy is
    kept), the other caches are dicts whose single get / set / clear operations are atomic, so a race only costs a
    recomputation. The hints (the error and gap laws measured on an earlier cell) make a cell's step depend on the
    cells produced before it on the same producer; :meth:`curve_at` reads none, and concurrent :meth:`produce` calls
    that must not depend on their interleaving need one producer each.
    """

    def produce(
        self,
        mechanism: Mechanism,
        *,
        discretization: float | None = None,
        optimistic: bool = True,
        accountant: str = "auto",
    ) -> Curves:
        """Curves of ``mechanism``: refined to the tolerance when ``discretization`` is None, at that step otherwise.

        ``accountant``: "auto" (closed form when exact, else PLD), "pld", or "closed_form".
        """
        start = time.perf_counter()
        exact_mu = kinds.exact_mu(mechanism)
        if accountant == "closed_form" and exact_mu is None:
            raise ValueError(
                f"accountant='closed_form' needs a composition of plain Gaussian mechanisms, got {mechanism.kind!r}"
            )
        if accountant in ("auto", "closed_form") and exact_mu is not None:
            return Curves(
                None, None, float(exact_mu), Provenance(accountant="closed_form.gaussian", engine="closed_form")
            )
        phases = subsampled_gaussian_phases(mechanism)
        if phases is not None and len(phases) <= _MAX_FAST_PHASES:
            out = self._subsampled_gaussian(mechanism, phases, discretization, optimistic, start)
        else:
            out = self._generic(mechanism, discretization, optimistic, start)
        prov = dataclasses.replace(out.provenance, seconds=time.perf_counter() - start)
        return dataclasses.replace(out, provenance=prov)

    def curve_at(self, mechanism: Mechanism, step: float, *, side: str = "pessimistic") -> SymmetricCurve:
        """One side's curve at a fixed ``step`` (no refinement, no budget): the calibration evaluator's primitive.
        Single steps stay cached across calls, so a search over T recomposes only."""
        phases = subsampled_gaussian_phases(mechanism)
        if side == "pessimistic":
            if phases is not None and len(phases) <= _MAX_FAST_PHASES:
                return self._compose(phases, step).curve
            return self._compose_generic(self._generic_parts(mechanism, step, "pessimistic"))[0]
        smallest = _smallest_query(self.deltas, self.alpha_min, None)
        if phases is not None and len(phases) <= _MAX_FAST_PHASES:
            parts = self._phase_singles(phases, step, side="optimistic")
            return optimistic_curve(parts, mechanism, step, smallest)[0]
        singles = [(r, steps) for r, _, steps in self._generic_parts(mechanism, step, "optimistic")]
        return optimistic_curve(singles, mechanism, step, smallest)[0]


def produce(
    mechanism: Mechanism,
    *,
    deltas: Sequence[float] | np.ndarray = DEFAULT_DELTAS,
    alpha_min: float,
    tolerance: float = DEFAULT_TOLERANCE,
    budget: Budget | None = None,
    discretization: float | None = None,
    optimistic: bool = True,
    accountant: str = "auto",
    add_guard: bool = False,
) -> Curves:
    """Curves of one mechanism (see the module docstring); :class:`Producer` for batches."""
    producer = Producer(deltas=deltas, alpha_min=alpha_min, tolerance=tolerance, budget=budget, add_guard=add_guard)
    return producer.produce(mechanism, discretization=discretization, optimistic=optimistic, accountant=accountant)
