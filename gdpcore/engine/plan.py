"""The planner: budgets, and the working memory of a computation estimated before anything large is allocated."""

from __future__ import annotations

import dataclasses
import math
import time

from gdpcore import kinds, pld
from gdpcore.engine.twin import _wrap_tail
from gdpcore.mechanisms import Mechanism
from gdpcore.pmf import LossPMF

DEFAULT_MEMORY_BUDGET = 4 * 2**30
"""Working memory one mechanism may use, bytes (the grid passes a smaller per-cell budget)."""


DEFAULT_TIME_BUDGET = 60.0
"""Seconds one mechanism may spend refining (a computation already started is not interrupted)."""


_CURVE_BYTES_PER_POINT = 160  # profile, suffix sums, vertices, breakpoints, monotone copies (float64; measured)


_SINGLE_BYTES_PER_POINT = 48  # a single step's grid, divergences, probabilities and scratch


_CONSTRUCTION_POINTS_PER_SECOND = 5e5
"""Lattice points a dp_accounting single-step construction produces per CPU second, at the slow end (measured: 6e5
for a zCDP profile and 1e6 for a Laplace, 1.2e7 for a discrete Gaussian or randomized response): the planner's
time estimate of a single step (:meth:`_Planner.plan_single_steps`)."""


PLD_TIME_SHARE = 0.8
"""Share of ``Budget.seconds`` the PLD rounds may use before the deadline refuses the next piece of work; the rest is
left to the RDP fallback (:func:`gdpcore.engine.rdp.rdp_fallback`), which reads the whole budget."""


class BudgetExceededError(ValueError):
    """Not even the RDP fallback fits the budget: no number is reported (message "budget_exceeded: ...")."""


@dataclasses.dataclass(frozen=True)
class Deadline:
    """The time (``time.perf_counter``) after which no further piece of work starts: :meth:`check` raises
    :class:`_Refused` past it.

    Why a deadline read between pieces, and sizes predicted before each piece, rather than an interrupt: a
    dp_accounting construction or a numpy transform runs in C and cannot be stopped from Python (no signal handler
    runs inside it, and a thread cannot be killed), so the only sound budget is one where every piece is bounded
    *before* it starts (:meth:`_Planner.plan_single_steps` sizes each single step in closed form,
    :func:`gdpcore.kinds.pld_points`, in bytes and in seconds) and the clock is read between pieces (each single
    step, each convolution of parts, each phase of the twin, each leaf of the RDP fallback). The overrun is then at
    most one bounded piece, and the work never starts when the prediction says it cannot finish."""

    at: float
    seconds: float

    @classmethod
    def after(cls, t0: float, seconds: float) -> Deadline:
        return cls(at=t0 + seconds, seconds=seconds)

    def remaining(self) -> float:
        return self.at - time.perf_counter()

    def check(self, what: str = "") -> None:
        if time.perf_counter() > self.at:
            raise _Refused(f"time budget of {self.seconds:g} s spent{' ' + what if what else ''}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Budget:
    """What one mechanism may use: working memory (checked before allocating) and refinement time."""

    memory_bytes: float = DEFAULT_MEMORY_BUDGET
    seconds: float = DEFAULT_TIME_BUDGET


class _Refused(Exception):
    """A plan exceeded the budget (message: what and how much)."""


class _Planner:
    """The two planners (a mixin of the producer, whose budget, guard and single-step cache they read)."""

    budget: Budget
    add_guard: bool

    def _phase_singles(
        self, phases: dict[tuple[float, float], int], d: float, *, side: str = "pessimistic", direction: str = "remove"
    ) -> list[tuple[LossPMF, int]]:
        raise NotImplementedError  # the producer's cached builders (gdpcore.engine.base._ProducerBase._phase_singles)

    def plan_single_steps(self, mechanism: Mechanism, d: float, deadline: Deadline | None = None) -> float:
        """Bytes of the single steps of ``mechanism`` at step ``d``, predicted before dp_accounting builds any
        (:func:`gdpcore.kinds.pld_points`; a Poisson-subsampled Gaussian step's length in closed form). Raises
        :class:`_Refused` when they exceed the memory budget, or when building them at
        ``_CONSTRUCTION_POINTS_PER_SECOND`` would outlast ``deadline``."""
        points = 0.0
        leaves = list(kinds.single_steps(mechanism))
        horizon = sum(count for _, count in leaves)  # as generic_parts builds them (pld.SINGLE_STEP_TAIL)
        for leaf, _ in leaves:
            phases = kinds.subsampled_gaussian_phases(leaf)
            if phases is not None and len(phases) == 1 and next(iter(phases.values())) == 1:
                ((sigma, q),) = phases
                n = pld.single_step_length(noise_multiplier=sigma, sampling_rate=q, discretization=d, horizon=horizon)
                points += 2.0 * n  # both directions
            else:
                points += kinds.pld_points(leaf, step=d)
            need = _SINGLE_BYTES_PER_POINT * points
            if need > self.budget.memory_bytes:
                raise _Refused(f"single steps of ~{need:.3g} bytes at discretization {d:g}")
        if deadline is not None and points / _CONSTRUCTION_POINTS_PER_SECOND > deadline.remaining():
            raise _Refused(
                f"single steps of ~{points:.3g} points at discretization {d:g} (~"
                f"{points / _CONSTRUCTION_POINTS_PER_SECOND:.3g} s) would outlast the {max(deadline.remaining(), 0):.3g}"
                " s left of the time budget"
            )
        return _SINGLE_BYTES_PER_POINT * points

    def plan_subsampled_gaussian(
        self,
        phases: dict[tuple[float, float], int],
        d: float,
        *,
        side: str = "pessimistic",
        max_points: float = math.inf,
        smallest_query: float = 1e-10,
    ) -> tuple[int, int]:
        """(composed support, working bytes) of one side at step ``d``, estimated before any composition is
        allocated (single-step lengths in closed form; FFT lengths from the single steps' Chernoff windows).
        Raises :class:`_Refused` when the plan exceeds the memory budget or ``max_points``."""
        length_fn = pld.single_step_length if side == "pessimistic" else pld.optimistic_single_step_length
        single_bytes = 0
        horizon = sum(phases.values())
        for sigma, q in phases:
            n1 = length_fn(noise_multiplier=sigma, sampling_rate=q, discretization=d, horizon=horizon)
            single_bytes += _SINGLE_BYTES_PER_POINT * n1
            if n1 > max_points:
                raise _Refused(f"{side} single-step support {n1:.3g} points at discretization {d:g} > work cap")
            if single_bytes > self.budget.memory_bytes:
                raise _Refused(f"{side} single-step support {n1:.3g} points at discretization {d:g}")
        fft_total, support = 0, 0
        for single, steps in self._phase_singles(phases, d, side=side):
            n = pld.fft_length(single, steps, wrap_tail=_wrap_tail(smallest_query))
            fft_total = max(fft_total, pld.fft_bytes(n))
            support += n
        if support > max_points:
            raise _Refused(f"{side} composed support {support:.3g} points at discretization {d:g} > work cap")
        guard = 2 if (self.add_guard and side == "pessimistic") else 1
        mem = self._within_budget(single_bytes, fft_total, guard, support, len(phases), d, what=f"{side} ")
        return support, mem

    def plan_generic(
        self,
        parts: list[tuple[LossPMF, LossPMF | None, int]],
        d: float,
        *,
        smallest_query: float = 1e-10,
    ) -> tuple[int, int]:
        """(composed support, working bytes) of the generic composition of ``parts`` at step ``d``, before any
        composition is allocated: the single steps held, the largest FFT buffer (each part's FFT power on its
        Chernoff window, :func:`gdpcore.pld.fft_length`; the linear convolution of the parts, at most their
        summed windows long), doubled for the add direction of an asymmetric mechanism, and the curve arrays over
        the composed support. Raises :class:`_Refused` when it exceeds the memory budget."""
        wrap = _wrap_tail(smallest_query)
        single_bytes = sum(
            _SINGLE_BYTES_PER_POINT * (r.probs.size + (0 if a is None else a.probs.size)) for r, a, _ in parts
        )
        lengths = [pld.fft_length(r, steps, wrap_tail=wrap) for r, _, steps in parts]
        support = int(sum(lengths))
        fft_total = max(pld.fft_bytes(n) for n in lengths)
        if len(parts) > 1:
            fft_total = max(fft_total, pld.fft_bytes(support))
        guard = 2 if any(a is not None for _, a, _ in parts) else 1
        return support, self._within_budget(single_bytes, fft_total, guard, support, len(parts), d)

    def _within_budget(
        self, single_bytes: int, fft_bytes: int, guard: int, support: int, parts: int, d: float, *, what: str = ""
    ) -> int:
        """The one working-memory formula of both planners: the single steps held, the largest FFT buffer (``guard``
        times: twice when a second direction is composed), and the curve arrays over the composed ``support`` (plus
        the linear convolution's output when several ``parts`` are convolved). Raises :class:`_Refused` when it
        exceeds the memory budget."""
        mem = int(single_bytes + fft_bytes * guard + (_CURVE_BYTES_PER_POINT + 16 * (parts > 1)) * support)
        if mem > self.budget.memory_bytes:
            raise _Refused(
                f"{what}composed support {support:.3g} points at discretization {d:g} (~{mem / 2**20:.0f} MiB)"
            )
        return mem
