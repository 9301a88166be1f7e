"""The producer's shared machinery: state (caches and hints), single steps, one repeated step composed, and the one
refinement skeleton."""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gdpcore import pld
from gdpcore.curve import (
    SymmetricCurve,
    curve_from_remove_pmf,
    remove_profile,
)
from gdpcore.engine.gap import DEFAULT_DELTAS, DEFAULT_TOLERANCE
from gdpcore.engine.ladder import LADDER_FINEST, ladder_floor
from gdpcore.engine.parts import generic_parts
from gdpcore.engine.plan import Budget, _Planner, _Refused
from gdpcore.engine.twin import _smallest_query
from gdpcore.mechanisms import Mechanism
from gdpcore.pmf import LossPMF


@dataclasses.dataclass(frozen=True)
class _Law:
    """How a refinement walks the ladder (:meth:`Producer._refine_steps`): the gap shrinks like d^``order``, so the
    next step aims at ``share`` x the tolerance; ``predict(elapsed, last round's seconds, step ratio)`` is the time the
    next round is expected to take; ``stalled(gap, previous gap, step ratio)`` says the step no longer sets the gap;
    each round refines the step by at least ``min_ratio`` (a halving unless the law says otherwise)."""

    order: float
    share: float
    predict: Callable[[float, float, float], float]
    stalled: Callable[[float, float, float], bool]
    stall_reason: str
    min_ratio: float = 2.0


@dataclasses.dataclass(frozen=True)
class _Refinement:
    """What :meth:`Producer._refine_steps` kept: the best round (value, step, gap) or None, why it stopped short (or
    None), and the refusal that ended it (or None)."""

    best: tuple[Any, float, float | None] | None
    short: str | None
    refused: _Refused | None


_ROUNDOFF_SHARE = 1e-3
"""A composition's tail is recomputed tilted (:func:`gdpcore.pld.refine_tail`) when its round-off allowance could
move a value the report reads by more than this share of it."""


def _lines_matter(eps: np.ndarray, delta: np.ndarray, pmf: LossPMF, smallest: float) -> bool:
    """The lines' half of :func:`_roundoff_matters`: whether the allowance could move a delta(eps) >= ``smallest``
    read on the lines (``eps``, ``delta``) by more than ``_ROUNDOFF_SHARE`` of it (True too when no line is read)."""
    b = pmf.max_roundoff
    if b <= 0.0:
        return False
    top = pmf.lower_index + pmf.probs.size - 1
    above = np.maximum(top - np.round(eps / pmf.step), 0.0) + 1.0  # atoms with loss above each line's eps
    read = delta >= smallest
    return not read.any() or bool(np.any(b * above[read] > _ROUNDOFF_SHARE * delta[read]))


def _roundoff_matters(curve: SymmetricCurve, pmf: LossPMF, smallest: float) -> bool:
    """Whether the allowance (``pmf.max_roundoff`` added to every atom) could move a number read from ``curve`` by more
    than ``_ROUNDOFF_SHARE`` of it. The reads are delta(eps) >= ``smallest`` (epsilon at the asked deltas) and the
    vertices' tails there (mu, FNR); each moves by at most the allowance times the number of atoms above its eps."""
    b = pmf.max_roundoff
    if b <= 0.0:
        return False
    if _lines_matter(curve.eps, curve.delta, pmf, smallest):
        return True
    top = pmf.lower_index + pmf.probs.size - 1
    above = np.maximum(top - np.round(curve.eps / pmf.step), 0.0) + 1.0
    # Vertex i (i >= 1) sits on line K - i + 1 and above line K - i: its tail counts the atoms above eps_{K-i}.
    K = curve.eps.size - 1
    v_above = above[K - np.arange(1, K + 1)]
    v_tail = curve.tail[1:]
    v_read = v_tail >= smallest
    return bool(np.any(b * v_above[v_read] > _ROUNDOFF_SHARE * v_tail[v_read]))


_FAR_FROM_THE_DIAGONAL = 0.01
"""A composition whose delta(0) is at most 1 - this - 2 alpha_min has its curve's fixed point above alpha_min (its
line at eps = 0 alone keeps the curve ``_FAR_FROM_THE_DIAGONAL`` above the diagonal at FPR alpha_min, against
vertices moved by under 1e-8 for float error): the smallest query is then the deltas' and alpha_min's
(:func:`gdpcore.engine.twin._smallest_query`), known before any vertex is computed."""


def _pmf_diagnostics(remove: LossPMF) -> dict[str, float]:
    return {
        "support_length": float(remove.probs.size),
        "infinity_mass": remove.infinity_mass,
        "remove_p_mass": remove.p_mass,
        # Sum p e^-l of the remove PMF: the mass-consistency check. Values away from 1 flag the truncated lower tail
        # (never read by the curve construction; see gdpcore.accounting).
        "remove_q_mass": remove.q_mass,
        "roundoff_per_atom": remove.max_roundoff,
    }


class _ProducerBase(_Planner):
    """State and shared steps of :class:`gdpcore.engine.Producer` (see its docstring)."""

    def __init__(
        self,
        *,
        deltas: Sequence[float] | np.ndarray = DEFAULT_DELTAS,
        alpha_min: float,
        tolerance: float = DEFAULT_TOLERANCE,
        budget: Budget | None = None,
        add_guard: bool = False,
    ) -> None:
        self.deltas = np.asarray(deltas, dtype=float).reshape(-1)
        self.alpha_min = float(alpha_min)
        self.tolerance = float(tolerance)
        self.budget = budget or Budget()
        self.add_guard = add_guard
        self._lock = threading.Lock()  # guards the single-step cache (see the class docstring)
        self._single: dict[tuple[float, float, float, str, bool, int | None], LossPMF] = {}
        self._generic_singles: dict[tuple[str, float, str], tuple[LossPMF, LossPMF | None]] = {}
        # The twin's gap law (c of gap ~ c d^1.8) measured where it met the tolerance, per single step (or schedule)
        # of this batch: the next cell starts where it reaches _TWIN_HINT_SHARE of the tolerance.
        self._twin_hints: dict[object, float] = {}
        # Measured discretisation-error law of the pessimistic side, per single step (or schedule) of this batch:
        # (coefficient c of err ~ c d^2, total steps of the cell it was measured on).
        self._error_hints: dict[object, tuple[float, int]] = {}

    def release(self) -> None:
        self._single.clear()
        self._generic_singles.clear()

    _MAX_CACHED_SINGLES = 64

    def _single_step(
        self,
        sigma: float,
        q: float,
        d: float,
        *,
        side: str = "pessimistic",
        direction: str = "remove",
        horizon: int | None = None,
    ) -> LossPMF:
        """The cached single step, built for the horizon rounded up to a power of ten (``pld.horizon_bucket``): the
        cells of a batch group whose T fall in one decade share it, and a cell's numbers do not depend on which other
        cells it was batched with."""
        horizon = pld.horizon_bucket(horizon)
        key = (sigma, q, d, direction, side == "pessimistic", horizon)
        with self._lock:
            s = self._single.get(key)
        if s is not None:
            return s
        # Built outside the lock (other threads' steps need not wait); a step two threads built at once is kept once.
        built = pld.single_step(sigma, q, d, side=side, direction=direction, horizon=horizon)
        with self._lock:
            s = self._single.get(key)
            if s is None:
                if len(self._single) >= self._MAX_CACHED_SINGLES:
                    self._single.clear()
                s = self._single[key] = built
        return s

    def _phase_singles(
        self, phases: dict[tuple[float, float], int], d: float, *, side: str = "pessimistic", direction: str = "remove"
    ) -> list[tuple[LossPMF, int]]:
        """Each phase's cached single step with its count, every one built for the schedule's whole length (its
        horizon: ``pld.SINGLE_STEP_TAIL``)."""
        horizon = sum(phases.values())
        return [
            (self._single_step(s, q, d, side=side, direction=direction, horizon=horizon), steps)
            for (s, q), steps in phases.items()
        ]

    def _generic_parts(
        self, mechanism: Mechanism, d: float, side: str, check: Callable[[], None] | None = None
    ) -> list[tuple[LossPMF, LossPMF | None, int]]:
        """:func:`generic_parts` with this producer's caches (Poisson-subsampled Gaussian steps share the SG path's)."""
        return generic_parts(
            mechanism, d, side=side, cache=self._generic_singles, sg_single=self._single_step, check=check
        )

    @staticmethod
    def _fft_len(single: LossPMF, steps: int) -> int | None:
        """A transform length already cached for a larger T of this single step, when it is close to what ``steps``
        needs (reused instead of a new forward transform)."""
        n = pld.fft_length(single, steps)
        reusable = [m for m in single.cached_fft_lengths() if n <= m <= 1.25 * n]
        return reusable[0] if reusable else None

    def _compose_direction(
        self,
        parts: list[tuple[LossPMF, int]],
        *,
        planned_bytes: float = 0.0,
        check: Callable[[], None] | None = None,
    ) -> tuple[LossPMF, float | None]:
        """One direction's pessimistic composition and, when its tail was tilted, the loss the tilt centres on.

        Each part by FFT power (:func:`gdpcore.pld.compose_loss_pmf`, a-priori round-off bound, truncated tails
        at +inf), the parts by linear convolution (:func:`gdpcore.pld.compose_phases`). A single repeated step
        whose round-off allowance could matter where the report reads gets its tail recomputed tilted towards that
        region (:meth:`_compose_single`, shared with the subsampled-Gaussian path)."""
        if len(parts) > 1:
            return pld.compose_phases(parts, check=check), None
        single, steps = parts[0]
        pmf, _, tilt_loss = self._compose_single(single, steps, planned_bytes=planned_bytes)
        return pmf, tilt_loss

    def _compose_single(
        self, single: LossPMF, steps: int, *, fft_len: int | None = None, planned_bytes: float = 0.0
    ) -> tuple[LossPMF, SymmetricCurve, float | None]:
        """One repeated step composed (extended-precision transforms), its remove curve, and the loss its tail was
        tilted towards (None if not). Where the round-off allowance could move a number the report reads by more
        than ``_ROUNDOFF_SHARE`` of it (:func:`_roundoff_matters`), the tail is recomputed on the step tilted by
        ``pld.TILT_FRACTION`` of the tilt that centres it on the smallest delta or FPR read."""
        pmf = pld.compose_loss_pmf(single, steps, fft_len=fft_len)
        if steps == 1:
            return pmf, curve_from_remove_pmf(pmf), None
        # The lines decide first: where they alone call for the tilt (and the smallest query is known without the
        # curve's fixed point), the untilted composition's vertices are never computed (they were 8% of the mixed
        # grid's CPU time, benchmarks/bench_grid.py, computed and thrown away on 45 of its 84 compositions).
        profile = remove_profile(pmf)
        smallest = _smallest_query(self.deltas, self.alpha_min, None)
        far = profile.delta[0] <= 1.0 - _FAR_FROM_THE_DIAGONAL - 2.0 * self.alpha_min
        if not (far and _lines_matter(profile.eps, profile.delta, pmf, smallest)):
            curve = profile.curve()
            smallest = _smallest_query(self.deltas, self.alpha_min, curve)
            if not _roundoff_matters(curve, pmf, smallest):
                return pmf, curve, None
        theta = pld.TILT_FRACTION * pld.tilt_for_tail(single, steps, smallest)
        spare = self.budget.memory_bytes - planned_bytes
        pmf = pld.refine_tail(pmf, single, steps, theta, max_bytes=spare)
        return pmf, curve_from_remove_pmf(pmf), steps * pld.tilted_log_mgf(single, theta)[1]

    def _refine_steps(
        self,
        attempt: Callable[[float], tuple[Any, float | None]],
        d: float,
        *,
        rounds: int,
        law: _Law,
        t0: float,
        stop: Callable[[Any, float], str | None],
    ) -> _Refinement:
        """The one refinement skeleton (the twin of a subsampled Gaussian, and both sides of every other mechanism):
        ``attempt(d)`` builds a round at step ``d`` and returns (what it built, its certified gap; None: there is no
        gap to refine), or raises :class:`_Refused`. The round with the smallest gap is kept. Refinement stops when
        the gap is within tolerance (or None), the step is ``LADDER_FINEST``, ``rounds`` were run, the next round
        would not fit the time budget (``law.predict``), ``stop(value, gap)`` gives a reason, or the gap stalled
        (``law.stalled``: it is not the step's); otherwise the next step is the rung where ``law`` puts the gap at
        ``law.share`` of the tolerance, at least ``law.min_ratio`` below the last."""
        best: tuple[Any, float, float | None] | None = None
        previous_gap: float | None = None
        ratio = 2.0  # the step ratio between the previous round and this one
        for _ in range(rounds):
            tic = time.perf_counter()
            try:
                value, gap = attempt(d)
            except _Refused as why:
                return _Refinement(best, None, why)
            if best is None or (gap is not None and best[2] is not None and gap < best[2]):
                best = (value, d, gap)
            if gap is None or gap <= self.tolerance or d <= LADDER_FINEST:
                break
            now = time.perf_counter()
            if math.isfinite(gap):
                d_new = ladder_floor(d * (law.share * self.tolerance / gap) ** (1.0 / law.order))
            else:
                d_new = d / 2
            d_new = max(min(d_new, ladder_floor(d / law.min_ratio)), LADDER_FINEST)
            if now - t0 + law.predict(now - t0, now - tic, d / d_new) > self.budget.seconds:
                break
            reason = stop(value, gap)
            if reason is not None:
                return _Refinement(best, reason, None)
            if previous_gap is not None and law.stalled(gap, previous_gap, ratio):
                return _Refinement(best, law.stall_reason, None)
            previous_gap, ratio = gap, d / d_new
            d = d_new
        return _Refinement(best, None, None)
