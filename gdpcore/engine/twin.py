"""The optimistic twin: privacy buckets read through the threshold tests on the composed bucket index."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from gdpcore import pld
from gdpcore.curve import (
    SymmetricCurve,
    curve_from_threshold_tests,
)
from gdpcore.engine.parts import generic_parts
from gdpcore.mechanisms import Mechanism
from gdpcore.pmf import LossPMF

TWIN_TAIL_FACTOR = 1e-4


def _smallest_query(deltas: np.ndarray, alpha_min: float, pessimistic: SymmetricCurve | None) -> float:
    # mu is read down to alpha_min, or below it where the curve meets the diagonal first (SymmetricCurve.mu).
    smallest = float(alpha_min)
    if pessimistic is not None and pessimistic.fixed_point <= alpha_min:
        smallest = pessimistic.fixed_point * 1e-6
    if deltas.size:
        smallest = min(smallest, float(deltas.min()))
    return max(smallest, 1e-300)


def twin_tail(smallest_query: float) -> float:
    """The twin's FFT wrap-around slack: ``TWIN_TAIL_FACTOR`` x min(smallest delta or FPR read, 1e-10)."""
    return TWIN_TAIL_FACTOR * min(smallest_query, 1e-10)


def _wrap_tail(smallest_query: float) -> float:
    """The FFT wrap-around slack every plan and twin composition uses: :func:`twin_tail`, never below
    ``pld.WRAP_TAIL``."""
    return max(twin_tail(smallest_query), pld.WRAP_TAIL)


def optimistic_curve(
    phases: list[tuple[LossPMF, int]] | None,
    mechanism: Mechanism,
    step: float,
    smallest_query: float,
    *,
    tilt_target: float | None = None,
    tilt_max_bytes: float = math.inf,
    check: Callable[[], None] | None = None,
) -> tuple[SymmetricCurve, str]:
    """The optimistic twin at ``step`` and its label: a curve whose profile is a proven lower bound.

    ``phases`` are optimistic single steps with their step counts: ``pld.optimistic_single_step_pld`` for a
    schedule of Poisson-subsampled Gaussians, :func:`generic_parts` (dp_accounting's privacy buckets per single step)
    for every other mechanism (None: built here). The curve is the hull of the threshold tests {K > k0} on the
    composed bucket index K (``pld.threshold_test_masses``, ``curve.curve_from_threshold_tests``): bucketing is
    post-processing, and both laws of K are convolution powers (P of the bucket masses, Q of the bucket masses moved
    by e^{-k d}, bounded through each bucket's residual lower bound; 0 for dp_accounting's buckets). ``check`` (if
    given) is called between pieces of work (the engine's deadline, :class:`gdpcore.engine.plan.Deadline`).
    """
    if phases is None:
        # Every other mechanism: its optimistic single steps (generic_parts), composed below like a schedule.
        phases = [
            (single, steps) for single, _, steps in generic_parts(mechanism, step, side="optimistic", check=check)
        ]
    # FFT wrap-around slack: 1e-4 of the smallest query (the buffer then needs no more than the output window;
    # pld.WRAP_TAIL), but never below WRAP_TAIL: reads below ~1e-30 (mu read at FPR 1.6e-37 in
    # tests/test_properties.py::test_mu_when_the_curve_hugs_the_axes) would otherwise ask for longer buffers.
    wrap = _wrap_tail(smallest_query)
    composed, slack = pld.optimistic_composition(
        phases, tilt_target=tilt_target, tilt_max_bytes=tilt_max_bytes, wrap_tail=wrap, check=check
    )
    _, p_low, q_high = pld.threshold_test_masses(composed, phases, check=check)
    curve = curve_from_threshold_tests(p_low, q_high, p_slack=slack)
    return curve, "privacy buckets + threshold tests on the composed bucket index"
