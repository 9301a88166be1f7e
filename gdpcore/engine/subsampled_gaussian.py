"""The subsampled-Gaussian path: schedules of Poisson-subsampled Gaussians composed by :mod:`gdpcore.pld`."""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from gdpcore import pld
from gdpcore.curve import (
    SymmetricCurve,
    curve_from_loss_pmf,
    curve_from_remove_pmf,
)
from gdpcore.engine.base import _Law, _pmf_diagnostics, _ProducerBase
from gdpcore.engine.gap import DEFAULT_GRID_TOLERANCE, ERROR_TARGET_RATIO, _relative_change, certified_gap
from gdpcore.engine.ladder import _START_TOP, LADDER_FINEST, LADDER_TOP, ladder_floor, start_step
from gdpcore.engine.plan import _Refused
from gdpcore.engine.rdp import rdp_fallback
from gdpcore.engine.results import PLD_ENGINE, Curves, Provenance
from gdpcore.engine.twin import _smallest_query, optimistic_curve
from gdpcore.mechanisms import Mechanism

_MAX_FAST_PHASES = 64  # schedules with more distinct (sigma, q) phases go through dp_accounting


_START_OVER_RULE = 2.0**1.5
"""A batch cell without a measured error law starts its pessimistic side this many times (three rungs, x 2^1.5) above
the a-priori step (:func:`gdpcore.engine.ladder.start_step`), composes once and lets the certified gap check it: the
upper end is then within the gap of the truth, which the twin proves. Its error is measured (doubling comparison)
only when the gap is missed.

Why, measured on the mixed grid of benchmarks/bench_grid.py (82 cells, sigma 0.5-3, q 1e-4-0.2, T 10-1e5; one
process, each cell alone, CPU seconds): the step the measured law chose (a doubling comparison of two float64
compositions at 2 and 4 x the a-priori step, kept within ERROR_TARGET_RATIO of the tolerance) was 2^(k/2) x the
a-priori one with k = 0, 1, 2, 3, 4, 5, 6, 8 on 2, 7, 35, 26, 7, 3, 1, 1 cells (the reference grid's 100 cells: k = 1,
2, 3, 4 on 10, 53, 35, 2): the a-priori rule is 2-3x conservative, and the law's two compositions cost more than the
coarser step saved. Starting unmeasured at 2 x: 2.11 -> 1.92 s over the grid; at 2^1.5 x: 1.56 s; at 4 x: 1.75 s
(more gaps missed, each paying the doubling comparison and a second twin); all 82 cells 'ok' in each. The reference
grid (groups of four T per (sigma, q), three runs): 2.39 -> 2.17 s."""

_NOISE_MARGIN = 100.0
"""An estimate's read is compared only when it is this many times its round-off noise floor (:meth:`_estimate`)."""


def _phases_key(phases: dict[tuple[float, float], int]) -> object:
    """Hint key of a cell: its (sigma, q), or the set of a schedule's phases."""
    return frozenset(phases.items()) if len(phases) > 1 else next(iter(phases))


_GAP_MAX_ROUNDS = 3


_GAP_ORDER = 1.8
"""The twin's certified gap shrinks like d^1.8 per refinement: both ends are second order in the step (the twin is
the hull of threshold tests on the bucketed composition, pld.threshold_test_masses); the measured ratios per
halving are in docs/engine-measurements.md."""


_TWIN_START = 4.0
"""The twin's first step is this many times the pessimistic step, unless its batch group measured a gap law (see
:meth:`Producer._twin_start`): its error is second order and 10-20x smaller than the residual shift's was at the
same step, so it rarely needs the pessimistic step's resolution (docs/engine-measurements.md)."""


_SMALL_SUPPORT = 1 << 15
"""A pessimistic composition shorter than this (atoms) starts its twin at ``_SMALL_TWIN`` x its step instead of
``_TWIN_START`` x: below it a composition's cost is its calls' fixed overhead (~1 ms a twin on cells of n < 1e4, 20-50
FFT round trips of their length), not its FFT, so a finer first twin costs about what a coarser one does and misses
the tolerance less often (a second twin costs a whole round). Larger compositions keep ``_TWIN_START``: their twin's
cost grows as 1 / step."""


_SMALL_TWIN = 2.0**1.5
"""The first twin step of a short composition, in units of its pessimistic step (see ``_SMALL_SUPPORT``). Measured
on the mixed grid of benchmarks/bench_grid.py (82 cells, each alone, two runs alternating per cell, CPU seconds):
4 x (as the long ones) 3.03 s, 2^1.5 x 2.85 s, 2 x 2.87 s, all 82 cells 'ok'; the reference grid (100 cells, four
runs): 2.59 -> 2.52 s, 98/100 'ok' at both (the same two cells, only mu short). 2^1.5 x for every composition: 2.81 s
on the mixed grid, the gain then being the short ones'."""

_GAP_STALL = 0.5
"""A twin refinement by at least a halving of the step (the gap should shrink 3.5x by ``_GAP_ORDER``) that leaves more
than this fraction of the previous gap ends the refinement: the gap is not the step's. A one-rung refinement (x 2^-1/2)
is not judged (its pessimistic part, which does not shrink, can hold the gap above 0.7x; the round cap bounds it)."""


_TWIN_SHARE = 0.8
"""A twin refinement aims its gap law at this share of the tolerance: the law is read on the whole gap, whose
pessimistic part does not shrink with the twin's step; one rung finer (x 2^-1/2) when the gap is within 1.49x the
tolerance, more otherwise."""


_TWIN_HINT_SHARE = 0.6
"""A hinted twin start aims its gap law at this share of the tolerance (the ladder rounds the step down)."""


_GAP_WORK_FACTOR = 4  # the optimistic FFT may be at most this many times the pessimistic support (or 2^16 points)


@dataclasses.dataclass(frozen=True)
class _Composed:
    """One pessimistic composition of one call: its curve, support length, the loss its tail was tilted towards (None
    if not; the twin tilts at the same loss) and the diagnostics of its remove PMF (:func:`_pmf_diagnostics`)."""

    curve: SymmetricCurve
    support: int
    tilt_loss: float | None
    diagnostics: dict[str, float]


@dataclasses.dataclass(frozen=True)
class _Pessimistic:
    """The pessimistic side of one call (:meth:`Producer._refine_pessimistic`)."""

    composed: _Composed
    step: float
    error: float | None
    status: str
    support: int
    memory: int | None


@dataclasses.dataclass(frozen=True)
class _Twin:
    """The optimistic side of one call (:meth:`Producer._refine_twin`): its curve (None if over budget), label, step
    and certified gap, and why its refinement stopped short of the tolerance (``short``; ``mu_tail`` when only mu is
    short, read below the compositions' tail truncation)."""

    curve: SymmetricCurve | None
    label: str
    step: float | None
    gap: float
    short: str | None = None
    mu_tail: bool = False


_TWIN_LAW = _Law(
    order=_GAP_ORDER,
    share=_TWIN_SHARE,
    # Two more rounds' worth of what was spent so far (a finer twin costs more).
    predict=lambda elapsed, _cost, _ratio: 2.0 * elapsed,
    # The step was refined and the gap did not follow the d^1.8 law: it is not set by the discretisation, and a
    # finer step only costs.
    stalled=lambda gap, previous, ratio: ratio >= 2.0 and gap > _GAP_STALL * previous,
    stall_reason="a finer twin step did not shrink it: the gap is not the discretisation's",
    min_ratio=math.sqrt(2.0),
)
"""The twin of a subsampled Gaussian: both ends second order in the step (``_GAP_ORDER``)."""


class _SubsampledGaussianPath(_ProducerBase):
    """The subsampled-Gaussian path of the producer."""

    _FAST_ACCOUNTANT = (
        "gdpcore.pld (connect-the-dots, pessimistic; dp_accounting's construction, vectorised; optimistic twin: "
    )

    def _compose(self, phases: dict[tuple[float, float], int], d: float, *, planned_bytes: float = 0.0) -> _Composed:
        """The pessimistic curve at step ``d`` (extended-precision transforms, round-off allowance, tilted tails where
        they matter, within the budget left beside ``planned_bytes``) with its support length, tilt and
        diagnostics."""
        parts = self._phase_singles(phases, d)
        tilt_loss: float | None
        if len(parts) == 1:
            single, steps = parts[0]
            remove, curve, tilt_loss = self._compose_single(
                single, steps, fft_len=self._fft_len(single, steps), planned_bytes=planned_bytes
            )
        else:
            remove = pld.compose_phases(parts)
            curve, tilt_loss = curve_from_remove_pmf(remove), None
        diagnostics = _pmf_diagnostics(remove)
        if self.add_guard:
            add = pld.compose_phases(self._phase_singles(phases, d, direction="add"))
            curve = curve_from_loss_pmf(remove, add)
            diagnostics["add_direction_gap"] = curve.add_direction_gap
            diagnostics["add_excess_mass"] = max(0.0, add.p_mass - 1.0)
        return _Composed(curve, remove.probs.size, tilt_loss, diagnostics)

    def _estimate(self, phases: dict[tuple[float, float], int], d: float) -> tuple[SymmetricCurve, float]:
        """An estimate of the pessimistic curve at step ``d``, for the doubling comparisons that estimate the
        discretisation error only (nothing of it is reported): float64 transforms, no round-off allowance, no tilted
        tail, no diagnostics. Also returns its noise floor: the float64 round-off bound per atom times the number of
        atoms, above which every read is (a read below it is round-off, not discretisation: sigma 1, q 1e-4,
        T 1e6 read epsilon(1e-12) 2.6x apart between steps of 7e-7 and 1.4e-6)."""
        parts = self._phase_singles(phases, d)
        if len(parts) == 1:
            single, steps = parts[0]
            remove = pld.compose_loss_pmf(single, steps, fft_len=self._fft_len(single, steps), extended=False)
        else:
            remove = pld.compose_phases(parts, extended=False)
        noise = remove.max_roundoff * remove.probs.size
        remove = dataclasses.replace(remove, roundoff=0.0)
        return curve_from_remove_pmf(remove, exact_vertices=False), noise

    def _probe(self, curve: SymmetricCurve, noise: float = 0.0) -> np.ndarray:
        """The numbers whose estimated error the pessimistic refinement controls, those of :func:`certified_gap`:
        epsilon at every asked delta (1e-5 and 1e-9 when none is asked), the advantage (a read in the body: on sigma
        0.6, q 1e-3, T 100 it is 4% high at step 2e-3 while epsilon(1e-5) is within 3e-4) and mu - except where mu
        is read below FPR ``TAIL_MASS_TRUNCATION`` (the curve meets the diagonal there, mu > 15.9): the tail
        truncation sets it, not the step, and it jumps between steps (NaN: not compared). On an estimate
        (:meth:`_estimate`), reads within 100x its round-off ``noise`` are NaN too."""
        ds = self.deltas if self.deltas.size else np.array([1e-5, 1e-9])
        eps = np.atleast_1d(curve.epsilon_at(ds)).astype(float)
        eps = np.where(ds >= _NOISE_MARGIN * noise, eps, math.nan)
        mu = math.nan
        smallest = _smallest_query(np.zeros(0), self.alpha_min, curve)
        if curve.fixed_point >= pld.TAIL_MASS_TRUNCATION and smallest >= _NOISE_MARGIN * noise:
            mu = curve.mu(alpha_min=self.alpha_min)[0]
        return np.concatenate([eps, [curve.advantage, mu]])

    def _optimistic_sg(
        self,
        mechanism: Mechanism,
        phases: dict[tuple[float, float], int],
        d: float,
        smallest: float,
        max_points: float,
        tilt_target: float | None,
    ) -> tuple[SymmetricCurve, str, int]:
        support, mem = self.plan_subsampled_gaussian(
            phases, d, side="optimistic", max_points=max_points, smallest_query=smallest
        )
        parts = self._phase_singles(phases, d, side="optimistic")
        spare = self.budget.memory_bytes - mem
        curve, label = optimistic_curve(parts, mechanism, d, smallest, tilt_target=tilt_target, tilt_max_bytes=spare)
        return curve, label, support

    def _subsampled_gaussian(
        self, mechanism: Mechanism, phases: dict[tuple[float, float], int], fixed: float | None, optimistic: bool, t0
    ) -> Curves:
        target = ERROR_TARGET_RATIO * self.tolerance
        key = _phases_key(phases)
        total_steps = sum(phases.values())
        if fixed is not None:
            d, predicted, measure = fixed, None, False
        else:
            d, predicted, measure = self._pessimistic_start(phases, key, total_steps, target, optimistic)
        # A batch cell's first step (the a-priori rule's, or the error law an earlier cell of its group measured) is
        # composed once, without the doubling comparison, and the certified gap checks it; only when the gap is not
        # met is its own error measured (and the step refined if it was too coarse).
        side = self._refine_pessimistic(mechanism, phases, d, fixed, t0, target, measure=measure)
        if isinstance(side, Curves):
            return side  # over budget: RDP fallback
        err = side.error
        if predicted is not None:
            err = predicted
        elif fixed is None and err is not None and side.status == "ok":
            self._error_hints[key] = (err / side.step**2, total_steps)
        accountant = self._FAST_ACCOUNTANT
        twin: _Twin | None = None
        status = side.status
        if optimistic:
            built: dict[float, tuple[SymmetricCurve, str, int]] = {}  # this cell's twins by step (reused, not redone)
            twin = self._refine_twin(mechanism, phases, side, fixed is None, t0, built=built)
            if fixed is None and not measure and twin.gap > self.tolerance and not twin.mu_tail:
                # The first step may be too coarse for this cell (a twin that stalls points at the pessimistic side).
                measured = self._refine_pessimistic(
                    mechanism, phases, side.step, fixed, t0, target, measure=True, first=side
                )
                if not isinstance(measured, Curves):
                    d_before = side.step
                    side, err, status = measured, measured.error, measured.status
                    if err is not None and status == "ok":
                        self._error_hints[key] = (err / side.step**2, total_steps)
                    if side.step != d_before:
                        # The twin resumes from the finest step it reached; the twins built are read again, not redone.
                        twin = self._refine_twin(mechanism, phases, side, True, t0, built=built, start=twin.step)
            accountant += twin.label + ")"
            if fixed is None and status == "ok" and twin.gap > self.tolerance:
                status = f"tolerance_not_met: certified gap {twin.gap:.2e} > tolerance {self.tolerance:g}"
                if twin.short:
                    status += f" ({twin.short})"
        else:
            accountant += "not built)"
        return Curves(
            side.composed.curve,
            None if twin is None else twin.curve,
            None,
            Provenance(
                accountant=accountant,
                engine=PLD_ENGINE,
                status=status,
                discretization=side.step,
                discretization_lower=None if twin is None else twin.step,
                discretization_error=err,
                certified_gap=None if twin is None else twin.gap,
                tolerance=None if fixed is not None else self.tolerance,
                support_length=int(side.support),
                memory_estimate_bytes=None if side.memory is None else int(side.memory),
                diagnostics=dict(side.composed.diagnostics),
            ),
        )

    def _refine_pessimistic(
        self,
        mechanism: Mechanism,
        phases: dict[tuple[float, float], int],
        d: float,
        fixed: float | None,
        t0: float,
        target: float,
        *,
        measure: bool,
        first: _Pessimistic | None = None,
    ) -> _Pessimistic | Curves:
        """The pessimistic side (curve, step, estimated error, status, support, planned bytes), or the RDP fallback
        (:class:`Curves`) when even the coarsest step is refused. With ``measure`` the step is halved until the
        doubling comparison's estimated error is within ``target``; ``first`` is the side already composed at ``d``
        (its comparison then starts from it)."""
        budget = self.budget
        # The coarser comparison point (curve, probe, step) and, once a real composition, its record.
        coarse: tuple[SymmetricCurve, np.ndarray, float] | None = None
        coarse_composed: _Composed | None = None
        err: float | None = None
        mem: int | None = None
        status = "ok"
        while True:
            if first is not None:
                composed, support, mem, first = first.composed, first.support, first.memory, None
            else:
                try:
                    support, planned = self.plan_subsampled_gaussian(phases, d)
                except _Refused as why:
                    if coarse is None and fixed is None and d < LADDER_TOP:
                        d = min(2 * d, LADDER_TOP)  # the a-priori step does not fit: a coarser rung may
                        continue
                    if coarse is None:
                        return rdp_fallback(mechanism, f"over_budget: {why} > budget {budget.memory_bytes:.0f} bytes")
                    # The coarser curve is valid (pessimistic), just not shown to meet the estimated error target.
                    assert coarse_composed is not None  # a refusal after a composition: coarse is that composition
                    composed, d = coarse_composed, coarse[2]
                    support, mem = composed.curve.eps.size, None
                    status = f"discretization_limited: finer step refused, {why} > budget"
                    break
                mem = planned
                composed = self._compose(phases, d, planned_bytes=float(planned))
                support = composed.support
            pess = composed.curve
            if fixed is not None or not measure:
                break
            probe = self._probe(pess)
            if coarse is None:
                # Comparison at twice the step (about half the cost): the d^2 law makes coarse - fine ~ 3 err(fine).
                c2, noise = self._estimate(phases, min(2 * d, 0.1))
                coarse = (c2, self._probe(c2, noise), 2 * d)
            err = _relative_change(coarse[1], probe) / 3.0
            elapsed = time.perf_counter() - t0
            if err <= target or d / 2 < LADDER_FINEST or elapsed * 3 > budget.seconds:
                if err > target:
                    status = f"tolerance_not_met: estimated error {err:.2e} at step {d:g}"
                break
            coarse, coarse_composed = (pess, probe, d), composed
            d = d / 2
        return _Pessimistic(composed, d, err, status, support, mem)

    def _pessimistic_start(
        self, phases: dict[tuple[float, float], int], key, total_steps: int, target: float, optimistic: bool
    ) -> tuple[float, float | None, bool]:
        """(first pessimistic step, its error predicted by a measured law err ~ c d^2 or None, whether that step's
        error is measured by the doubling comparison before the twin is built).

        When an earlier cell of the batch with the same single steps measured the law (doubling comparison, after a
        missed gap), the coarsest rung that law keeps within ``target``. The law's c grows with T (about as sqrt(T)
        on DP-SGD grids, docs/engine-measurements.md), so it is scaled up by sqrt(T / T_then) for a longer
        composition; the grid runs each group by decreasing T. Otherwise a batch cell starts at ``_START_OVER_RULE``
        x the a-priori step (:func:`start_step`), unmeasured: the certified gap checks it, and only a missed gap
        measures its error (see ``_START_OVER_RULE``). A report (tolerance below the batch default) and a cell
        without a twin (no certified gap to check the step) start at the a-priori step and measure it."""
        hint = self._error_hints.get(key)
        if hint is None:
            d0 = min(start_step(s, q, target) for s, q in phases)
            if self.tolerance < DEFAULT_GRID_TOLERANCE or not optimistic:
                # A report (tolerance 0.1%): one cell, where a coarser first step saves little. It starts at the
                # a-priori rule and measures its own error (doubling comparison at the reported precision), which
                # keeps its upper ends as tight as before (seed 000 Table 4's sigma 9.4 row: 7.4245 against
                # dp_accounting's 7.42439 at step 1e-4).
                return d0, None, True
            return ladder_floor(min(_START_OVER_RULE * d0, _START_TOP)), None, False
        coef, steps_then = hint
        coef *= max(1.0, math.sqrt(total_steps / steps_then))
        top = _START_TOP if coef <= 0.0 else min(math.sqrt(target / coef), _START_TOP)
        d = ladder_floor(top)
        return d, coef * d**2, False

    def _refine_twin(
        self,
        mechanism,
        phases,
        side: _Pessimistic,
        refine: bool,
        t0,
        *,
        built: dict[float, tuple[SymmetricCurve, str, int]] | None = None,
        start: float | None = None,
    ) -> _Twin:
        """Optimistic twin and certified gap; with ``refine`` the twin starts where :meth:`_twin_start` says (or at
        ``start``) and is refined by the gap's d^1.8 law until the gap is within tolerance, at most
        ``_GAP_MAX_ROUNDS`` times, within the budget; rounds after the first also within a work cap of
        ``_GAP_WORK_FACTOR`` x the larger of the pessimistic and the first twin's support. ``built`` holds the twins
        this cell already composed, by step: a step found there is not composed again (the twin's profile is a proven
        lower bound whatever the pessimistic side is; that side only tells it where to tilt its tail and how far down
        the reads go, for accuracy)."""
        pess, d_p, support = side.composed.curve, side.step, side.support
        smallest = _smallest_query(self.deltas, self.alpha_min, pess)
        # The work cap scales with the accuracy asked (4x the pessimistic support at a 1% tolerance).
        cap = _GAP_WORK_FACTOR * max(1.0, DEFAULT_GRID_TOLERANCE / self.tolerance)
        # Tilted tails on the optimistic side too wherever the pessimistic side needed them, at the same loss.
        target = side.composed.tilt_loss
        key = _phases_key(phases)
        total_steps = sum(phases.values())
        if not refine:
            d = d_p  # a fixed step: the twin at that step
        else:
            d = self._twin_start(key, d_p, total_steps, support) if start is None else start
        max_points = math.inf  # the first round is bounded by the memory budget only
        mu_tail = False

        def attempt(d: float) -> tuple[tuple[SymmetricCurve, str], float]:
            nonlocal max_points
            if built is not None and d in built:
                opt, twin, twin_support = built[d]
            else:
                opt, twin, twin_support = self._optimistic_sg(mechanism, phases, d, smallest, max_points, target)
                if built is not None:
                    built[d] = (opt, twin, twin_support)
            if refine and math.isinf(max_points):
                max_points = max(cap * max(support, twin_support), 2**16)
            return (opt, twin), certified_gap(pess, opt, deltas=self.deltas, alpha_min=self.alpha_min)

        def only_mu_in_the_tail(value: tuple[SymmetricCurve, str], gap: float) -> str | None:
            nonlocal mu_tail
            if pess.fixed_point < pld.TAIL_MASS_TRUNCATION and (
                certified_gap(pess, value[0], deltas=self.deltas, alpha_min=self.alpha_min, include_mu=False)
                <= self.tolerance
            ):
                # Only mu is short, and it is read where the curve meets the diagonal, below FPR 1e-15 (mu > 15.9):
                # there both ends are set by the compositions' tail truncation (1e-15 of P-mass), not by the step.
                mu_tail = True
                return (
                    f"only mu is short: read where the curve meets the diagonal at FPR {pess.fixed_point:.1e}, below"
                    f" the compositions' tail truncation {pld.TAIL_MASS_TRUNCATION:g}, not refinable by the step"
                )
            return None

        run = self._refine_steps(
            attempt,
            d,
            rounds=_GAP_MAX_ROUNDS if refine else 1,
            law=_TWIN_LAW,
            t0=t0,
            stop=only_mu_in_the_tail,
        )
        if run.best is None:
            return _Twin(None, "not built (over budget)", None, math.inf, run.short, mu_tail)
        (opt, label), d_t, gap = run.best
        assert gap is not None
        if refine and gap <= self.tolerance and math.isfinite(gap):
            self._twin_hints[key] = max(gap, 1e-3 * self.tolerance) / d_t**_GAP_ORDER
        return _Twin(opt, label, d_t, gap, run.short, mu_tail)

    def _twin_start(self, key, d_p: float, total_steps: int, support: int = 0) -> float:
        """The twin's first step: where the gap law c d^1.8 measured on an earlier cell of the batch with the same
        single steps (c = gap / d^1.8 there, the pessimistic error included: on the safe side) reaches
        ``_TWIN_HINT_SHARE`` of the tolerance (on DP-SGD grids the twin's gap at one step is about the same across T,
        slightly larger at small T: docs/engine-measurements.md); without one, ``_TWIN_START`` x the pessimistic step
        (``_SMALL_TWIN`` x when the pessimistic ``support`` is shorter than ``_SMALL_SUPPORT``)."""
        coef = self._twin_hints.get(key)
        if coef is not None:
            start = (_TWIN_HINT_SHARE * self.tolerance / coef) ** (1.0 / _GAP_ORDER)
        else:
            start = (_TWIN_START if support >= _SMALL_SUPPORT else _SMALL_TWIN) * d_p
        return min(max(ladder_floor(start), LADDER_FINEST), LADDER_TOP)
