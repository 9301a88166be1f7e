"""The one accounting engine: every pessimistic and optimistic trade-off curve gdpcore reports comes from here.

:func:`produce` turns a mechanism, the numbers a user asks for (epsilon at ``deltas``, mu certified down to
``alpha_min``, the advantage), an accuracy target and a budget into a pair of symmetric curves with their
provenance (:class:`Curves`): the pessimistic curve gives every reported number (an upper bound on the privacy
profile), the optimistic twin the other end of every bracket (a proven lower bound). :class:`Producer` does the
same for a batch and shares single-step PMFs and their transforms between mechanisms with equal (sigma, q).
``analyze``, ``analyze_grid``, the calibration evaluator, representations, divergences and claims all read curves
built here; nothing else in gdpcore builds a composed PMF.

Three policies, each defined once in this module:

* **The ladder** (:func:`ladder_floor`): every discretisation the engine chooses is ``LADDER_TOP * 2^(-k/2)``
  (6.4e-2 down to ``LADDER_FINEST`` = 1e-7; the generic path's first step ``GENERIC_START`` is the one exception), so
  cells with nearby parameters share single steps, and a refinement halves the step
  (or jumps several rungs at once when the measured error law says so). Calibration walks every fourth rung.
* **The twin** (:func:`optimistic_curve`): privacy buckets rounded down (dp_accounting's
  ``pessimistic_estimate=False`` construction) read as a post-processed mechanism, whose every test is a test on the
  mechanism: the twin is the curve through the error rates of all tests on the composed bucket index K
  (``fast_pld.threshold_test_masses``, ``curve.curve_from_threshold_tests``). Both laws of K are convolution powers:
  P of the bucket masses, Q of the bucket masses moved by e^{-k d} and bounded through each bucket's residual lower
  bound (closed form for Poisson-subsampled Gaussians, 0 for dp_accounting's buckets). Its error is second order in
  the step, like connect-the-dots: on sigma 0.8, q 1e-3, T 3000 its certified gap is 0.26% at step 1.25e-4 (the
  residual shift it replaces, a Chernoff bound on the sum of the residuals, left 0.48% on epsilon and 2.4% on the
  advantage), so it starts at ``_TWIN_START`` x the pessimistic step, or where its batch group's gap law says
  (:meth:`Producer._twin_start`). Its only slack is the FFT wrap-around,
  ``TWIN_TAIL_FACTOR`` x the smallest delta or FPR read (capped at 1e-10 of it) per phase (the optimistic buffer
  then spans no more than the output window: 1.4-1.9x shorter FFTs than at ``fast_pld.WRAP_TAIL`` = 1e-30).
* **The planner** (:func:`plan_subsampled_gaussian`, :func:`plan_generic`): the working memory of a computation
  (single steps, FFT buffers, curve arrays) is estimated in closed form or from the single steps' Chernoff windows
  *before* anything large is allocated; a step whose plan exceeds ``Budget.memory_bytes`` is refused, and a time
  budget stops refinement when the next step would not fit in ``Budget.seconds`` (its cost predicted from the last
  one). When even the coarsest step is refused, the result is dp_accounting's RDP bound (looser, valid, labelled
  ``rdp_fallback``).

Accuracy: with ``discretization=None`` (the default) the step is refined until the *certified* gap between the two
ends - the largest of the relative epsilon gaps at ``deltas``, the relative mu gap and the relative advantage gap -
is at most ``tolerance`` (default 0.1% for one report, 1% per cell of a batch). Both ends are proven bounds, so the
gap is a certified bracket width, not an estimate. Poisson-subsampled Gaussians (and schedules of them) use
:mod:`gdpcore.fast_pld`'s vectorised constructions. The pessimistic step comes from an error law err(d) ~ c d^2
(connect-the-dots is second order: coarse - fine ~ 3 x the error of fine), measured by a doubling comparison of the
numbers the gap reads (epsilon at ``deltas``, the advantage, mu) and kept within ``ERROR_TARGET_RATIO`` x tolerance:
the first cell of a batch group (one single step, or one set of phases) measures c cheaply on float64 compositions at
2x and 4x the a-priori step (:func:`start_step`), and every later cell borrows its group's law (scaled by sqrt(T /
T_then), the growth measured on DP-SGD grids), composes once, and lets the certified gap check it; a cell whose gap
is not met measures its own error and refines (:meth:`Producer._pessimistic_start`). The optimistic step is refined
separately until the gap is met, starting where the group's gap law c d^1.8 says (``_GAP_ORDER``), each jump sized by
it; refinement stops when a finer twin does not shrink the gap, or when only mu is short and is read below the
compositions' tail truncation. Every other mechanism (discrete Gaussian, Laplace, randomized
response, mixtures, compositions such as DP-SGD + a Laplace release) is split into independent single steps
(:func:`generic_parts`): each step's PMFs are built exactly by its kind's dp_accounting construction (Poisson-subsampled
Gaussian steps by fast_pld's), and the compositions are done here with fast_pld's FFT powers and linear convolutions,
whose a-priori round-off bounds the curves move to the safe side (dp_accounting's ``self_compose`` carries none: at
delta = 1e-12 its optimistic end of five discrete Gaussians read 26.11293 above the exact 26.11102). Both sides share
one step, refined by the twin's first-order law. A result that cannot meet the target within the budget carries
``status`` "tolerance_not_met: ..." with the achieved gap; both ends stay valid bounds.

Round-off: composed PMFs carry a rigorous per-atom a-priori round-off bound (``fast_pld._power_roundoff``:
componentwise, forward transforms and the surviving powers in extended precision; tests/test_roundoff.py checks it
against an extended-precision composition) moved to the safe side of each end (:mod:`gdpcore.pmf`), so brackets
never invert at tiny delta. Where that allowance
would matter for the smallest delta or FPR read, the upper tail is recomputed on the single step tilted by half the
tilt that centres it on the read region (``fast_pld.TILT_FRACTION``), on both sides.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gdpcore import fast_pld, kinds
from gdpcore.accounting import ACCOUNTANT_NAME, build_pld, loss_pmfs
from gdpcore.curve import (
    SymmetricCurve,
    curve_from_loss_pmf,
    curve_from_profile,
    curve_from_remove_pmf,
    curve_from_threshold_tests,
)
from gdpcore.kinds import subsampled_gaussian_phases
from gdpcore.mechanisms import Mechanism
from gdpcore.pmf import LossPMF

__all__ = [
    "DEFAULT_DELTAS",
    "DEFAULT_MEMORY_BUDGET",
    "DEFAULT_TIME_BUDGET",
    "DEFAULT_TOLERANCE",
    "DEFAULT_GRID_TOLERANCE",
    "ERROR_TARGET_RATIO",
    "LADDER_FINEST",
    "LADDER_TOP",
    "Budget",
    "Curves",
    "Producer",
    "Provenance",
    "certified_gap",
    "ladder_floor",
    "produce",
]

DEFAULT_TOLERANCE = 1e-3
"""Target certified gap of one report: relative width of the epsilon, mu and advantage brackets (see
:func:`certified_gap`). Batches default to ``DEFAULT_GRID_TOLERANCE``."""

DEFAULT_GRID_TOLERANCE = 1e-2
"""Target certified gap per cell of a batch (sweeps trade a 1% bracket for throughput)."""

DEFAULT_DELTAS = (1e-3, 1e-5, 1e-6, 1e-9)
"""The deltas whose epsilon brackets are controlled when the caller names none."""

DEFAULT_MEMORY_BUDGET = 4 * 2**30
"""Working memory one mechanism may use, bytes (the grid passes a smaller per-cell budget)."""

DEFAULT_TIME_BUDGET = 60.0
"""Seconds one mechanism may spend refining (a computation already started is not interrupted)."""

ERROR_TARGET_RATIO = 0.2
"""The pessimistic side's step keeps its estimated relative discretisation error (the measured law c d^2) within this
fraction of the tolerance; the twin takes up the rest of the gap."""

LADDER_TOP = 6.4e-2
LADDER_FINEST = 1e-7
GENERIC_START = 1e-4
"""First step of every mechanism outside the subsampled-Gaussian path (dp_accounting's default discretisation). The
one step that is not a ladder rung (the nearest rungs are 1.25e-4 and 8.8e-5): moving it to one would move every
number of those mechanisms, so it stays; each refinement from it lands on a rung (:func:`ladder_floor`), and those
steps share single steps like every other."""

TWIN_TAIL_FACTOR = 1e-4
_CURVE_BYTES_PER_POINT = 160  # profile, suffix sums, vertices, breakpoints, monotone copies (float64; measured)
_SINGLE_BYTES_PER_POINT = 48  # a single step's grid, divergences, probabilities and scratch
_GAP_MAX_ROUNDS = 3
_GAP_ORDER = 1.8
"""The twin's certified gap shrinks like d^1.8 per refinement: both ends are second order in the step (the twin is
the hull of threshold tests on the bucketed composition, fast_pld.threshold_test_masses). Measured per halving on
sigma 0.8, q 1e-3, T 3000 (d 1e-3 to 1.25e-4): 3.6x, 3.5x, 2.9x."""
_TWIN_START = 4.0
"""The twin's first step is this many times the pessimistic step, unless its batch group measured a gap law (see
:meth:`Producer._twin_start`): its error is second order and 10-20x smaller than the residual shift's was at the
same step, so it rarely needs the pessimistic step's resolution (sigma 0.8, q 1e-3, T 3000: gap 0.27% at 4x the
pessimistic step 1.25e-4)."""
_GAP_STALL = 0.5
"""A twin refinement (the step at least halved, so the gap should shrink 3.5x by ``_GAP_ORDER``) that leaves more than
this fraction of the previous gap ends the refinement: the gap is not the step's."""
_TWIN_HINT_SHARE = 0.6
"""A hinted twin start aims its gap law at this share of the tolerance (the ladder rounds the step down)."""
_GAP_WORK_FACTOR = 4  # the optimistic FFT may be at most this many times the pessimistic support (or 2^16 points)
_GENERIC_MAX_ROUNDS = 6
_RDP_EPS_POINTS = 400
PLD_ENGINE = "fast_pld"
"""``Provenance.engine`` of every curve gdpcore's PLD composition (:mod:`gdpcore.fast_pld`) produced."""

_GAP_FLOOR = 1e-3
"""Epsilons, mus and advantages below this are compared absolutely by :func:`relative_gap` (relative gaps there are
meaningless and harmless)."""


# -- the ladder -----------------------------------------------------------------------------------------------------


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


_LAW_PROBE = 2.0
"""The first cell of a batch group measures its error law at this many times the a-priori step (and twice that)."""

_NOISE_MARGIN = 100.0
"""An estimate's read is compared only when it is this many times its round-off noise floor (:meth:`_estimate`)."""

_START_TOP = 3.2e-2
"""The coarsest first step of the pessimistic side."""


def _phases_key(phases: dict[tuple[float, float], int]) -> object:
    """Hint key of a cell: its (sigma, q), or the set of a schedule's phases."""
    return frozenset(phases.items()) if len(phases) > 1 else next(iter(phases))


# -- budgets, provenance, results -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Budget:
    """What one mechanism may use: working memory (checked before allocating) and refinement time."""

    memory_bytes: float = DEFAULT_MEMORY_BUDGET
    seconds: float = DEFAULT_TIME_BUDGET


@dataclasses.dataclass(frozen=True, kw_only=True)
class Provenance:
    """Where a pair of curves comes from and how accurate it is.

    ``status`` is "ok" (gap within tolerance, or a fixed step), "tolerance_not_met: ..." (valid bounds, wider than
    asked), "discretization_limited: ..." (a finer pessimistic step was refused by the budget), or
    "over_budget: ..." (RDP fallback: upper bounds only). ``certified_gap`` is the achieved gap
    (:func:`certified_gap`), ``discretization_error`` the estimated relative error of the pessimistic numbers the gap
    reads (doubling comparison, or the batch group's measured law; subsampled Gaussians with a chosen step only).
    """

    accountant: str
    engine: str
    """Which code composed the curves (the lake's ``engine`` column): "closed_form" (exact mu, nothing composed),
    ``PLD_ENGINE`` ("fast_pld": gdpcore's round-off-bounded PLD composition, :mod:`gdpcore.fast_pld`, on the
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


# -- the certified gap ----------------------------------------------------------------------------------------------


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


# -- the twin -------------------------------------------------------------------------------------------------------


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
    ``fast_pld.WRAP_TAIL``."""
    return max(twin_tail(smallest_query), fast_pld.WRAP_TAIL)


def optimistic_curve(
    phases: list[tuple[LossPMF, int]] | None,
    mechanism: Mechanism,
    step: float,
    smallest_query: float,
    *,
    tilt_target: float | None = None,
    tilt_max_bytes: float = math.inf,
) -> tuple[SymmetricCurve, str]:
    """The optimistic twin at ``step`` and its label: a curve whose profile is a proven lower bound.

    ``phases`` are optimistic single steps with their step counts: ``fast_pld.optimistic_single_step_pld`` for a
    schedule of Poisson-subsampled Gaussians, :func:`generic_parts` (dp_accounting's privacy buckets per single step)
    for every other mechanism (None: built here). The curve is the hull of the threshold tests {K > k0} on the
    composed bucket index K (``fast_pld.threshold_test_masses``, ``curve.curve_from_threshold_tests``): bucketing is
    post-processing, and both laws of K are convolution powers (P of the bucket masses, Q of the bucket masses moved
    by e^{-k d}, bounded through each bucket's residual lower bound; 0 for dp_accounting's buckets).
    """
    if phases is None:
        # Every other mechanism: its optimistic single steps (generic_parts), composed below like a schedule.
        phases = [(single, steps) for single, _, steps in generic_parts(mechanism, step, side="optimistic")]
    # FFT wrap-around slack: 1e-4 of the smallest query (the buffer then needs no more than the output window;
    # fast_pld.WRAP_TAIL), but never below WRAP_TAIL: reads below ~1e-30 (mu read at FPR 1.6e-37 in
    # tests/test_properties.py::test_mu_when_the_curve_hugs_the_axes) would otherwise ask for longer buffers.
    wrap = _wrap_tail(smallest_query)
    composed, slack = fast_pld.optimistic_composition(
        phases, tilt_target=tilt_target, tilt_max_bytes=tilt_max_bytes, wrap_tail=wrap
    )
    _, p_low, q_high = fast_pld.threshold_test_masses(composed, phases)
    curve = curve_from_threshold_tests(p_low, q_high, p_slack=slack)
    return curve, "privacy buckets + threshold tests on the composed bucket index"


# -- every other mechanism: single steps -----------------------------------------------------------------------------


def generic_parts(
    mechanism: Mechanism,
    step: float,
    *,
    side: str,
    cache: dict | None = None,
    sg_single=None,
) -> list[tuple[LossPMF, LossPMF | None, int]]:
    """``mechanism`` as independent single steps at ``step``: [(remove PMF, add PMF or None if symmetric, count)].

    The composition tree is flattened by the kind registry (:func:`gdpcore.kinds.single_steps`). Each single step
    is an exact construction, no composition: a Poisson-subsampled Gaussian step comes from :mod:`gdpcore.fast_pld`
    (``sg_single(sigma, q, step, side=..., direction=...)``: the subsampled-Gaussian path's builders and cache), every
    other one from its kind's dp_accounting PLD (``pld`` hook, :func:`gdpcore.accounting.build_pld`), connect-the-dots
    if ``side`` is "pessimistic", privacy buckets rounded down otherwise. All share the lattice ``step``. Optimistic
    parts carry the remove direction only (a lower bound on the remove profile is one on the mechanism's) and, for
    their buckets' Q-mass bounds (``LossPMF.bucket_q_weights``: closed form for Poisson-subsampled Gaussian steps,
    the P-masses for dp_accounting's buckets, whose losses are rounded down). The engine composes the parts with fast_pld's
    round-off-bounded FFT powers.
    Raises :class:`gdpcore.kinds.UnsupportedMechanismError` when a leaf has no construction for ``side``.
    """
    if side not in ("pessimistic", "optimistic"):
        raise ValueError(f"side must be 'pessimistic' or 'optimistic', got {side!r}")
    if sg_single is None:
        sg_single = fast_pld.single_step
    pessimistic = side == "pessimistic"
    out: list[tuple[LossPMF, LossPMF | None, int]] = []
    for leaf, count in kinds.single_steps(mechanism):
        key = (leaf.content_hash, float(step), side)
        pair = None if cache is None else cache.get(key)
        if pair is None:
            phases = subsampled_gaussian_phases(leaf)
            if phases is not None and len(phases) == 1 and next(iter(phases.values())) == 1:
                ((sigma, q),) = phases
                remove = sg_single(sigma, q, step, side=side)
                add = sg_single(sigma, q, step, side=side, direction="add") if pessimistic else None
            else:
                remove, add = loss_pmfs(
                    build_pld(leaf, discretization=step, pessimistic=pessimistic), pessimistic=pessimistic
                )
                if not pessimistic:
                    # Mass at +inf on dp_accounting's optimistic side is tail truncation (the discrete Gaussian
                    # puts its truncated tail there whatever the side): dropped, which only lowers delta. Its
                    # buckets' losses are rounded down (residual >= 0), so their P-masses bound their Q-masses.
                    remove = dataclasses.replace(remove, infinity_mass=0.0, bucket_q_weights=remove.probs)
                    add = None
            pair = (remove, add)
            if cache is not None:
                if len(cache) >= _MAX_GENERIC_SINGLES:
                    cache.clear()
                cache[key] = pair
        out.append((pair[0], pair[1], count))
    return out


_MAX_GENERIC_SINGLES = 64


# -- mechanism structure --------------------------------------------------------------------------------------------


_MAX_FAST_PHASES = 64  # schedules with more distinct (sigma, q) phases go through dp_accounting


# -- the producer ---------------------------------------------------------------------------------------------------


class _Refused(Exception):
    """A plan exceeded the budget (message: what and how much)."""


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


@dataclasses.dataclass(frozen=True)
class _Law:
    """How a refinement walks the ladder (:meth:`Producer._refine_steps`): the gap shrinks like d^``order``, so the
    next step aims at ``share`` x the tolerance; ``predict(elapsed, last round's seconds, step ratio)`` is the time the
    next round is expected to take; ``stalled(gap, previous gap)`` says the step no longer sets the gap."""

    order: float
    share: float
    predict: Callable[[float, float, float], float]
    stalled: Callable[[float, float], bool]
    stall_reason: str


_TWIN_LAW = _Law(
    order=_GAP_ORDER,
    share=1.0,
    # Two more rounds' worth of what was spent so far (a finer twin costs more).
    predict=lambda elapsed, _cost, _ratio: 2.0 * elapsed,
    # The step was at least halved and the gap did not follow the d^1.8 law: it is not set by the discretisation,
    # and a finer step only costs.
    stalled=lambda gap, previous: gap > _GAP_STALL * previous,
    stall_reason="a finer twin step did not shrink it: the gap is not the discretisation's",
)
"""The twin of a subsampled Gaussian: both ends second order in the step (``_GAP_ORDER``)."""

_GENERIC_LAW = _Law(
    order=1.0,
    share=0.8,
    # Single steps and compositions grow as 1 / step.
    predict=lambda _elapsed, cost, ratio: 1.25 * cost * ratio,
    # A finer step widened the bracket: round-off allowances (per atom, more atoms) dominate where the report reads
    # (delta near 1e-12 on multi-part compositions); the coarser round is kept.
    stalled=lambda gap, previous: gap >= previous,
    stall_reason="a finer step widened the bracket: round-off allowances dominate",
)
"""Every other mechanism: the twin's privacy buckets are first order in the step (the pessimistic side second)."""


@dataclasses.dataclass(frozen=True)
class _Refinement:
    """What :meth:`Producer._refine_steps` kept: the best round (value, step, gap) or None, why it stopped short (or
    None), and the refusal that ended it (or None)."""

    best: tuple[Any, float, float | None] | None
    short: str | None
    refused: _Refused | None


class Producer:
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
        self._single: dict[tuple[float, float, float, str, bool], LossPMF] = {}
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

    # -- public -----------------------------------------------------------------------------------------------------
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
            parts = [(self._single_step(s, q, step, side="optimistic"), steps) for (s, q), steps in phases.items()]
            return optimistic_curve(parts, mechanism, step, smallest)[0]
        singles = [(r, steps) for r, _, steps in self._generic_parts(mechanism, step, "optimistic")]
        return optimistic_curve(singles, mechanism, step, smallest)[0]

    # -- single steps -----------------------------------------------------------------------------------------------
    _MAX_CACHED_SINGLES = 64

    def _single_step(self, sigma: float, q: float, d: float, *, side: str = "pessimistic", direction: str = "remove"):
        key = (sigma, q, d, direction, side == "pessimistic")
        with self._lock:
            s = self._single.get(key)
        if s is not None:
            return s
        # Built outside the lock (other threads' steps need not wait); a step two threads built at once is kept once.
        built = fast_pld.single_step(sigma, q, d, side=side, direction=direction)
        with self._lock:
            s = self._single.get(key)
            if s is None:
                if len(self._single) >= self._MAX_CACHED_SINGLES:
                    self._single.clear()
                s = self._single[key] = built
        return s

    # -- the planner (subsampled Gaussians) -------------------------------------------------------------------------
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
        length_fn = fast_pld.single_step_length if side == "pessimistic" else fast_pld.optimistic_single_step_length
        single_bytes = 0
        for sigma, q in phases:
            n1 = length_fn(noise_multiplier=sigma, sampling_rate=q, discretization=d)
            single_bytes += _SINGLE_BYTES_PER_POINT * n1
            if n1 > max_points:
                raise _Refused(f"{side} single-step support {n1} points at discretization {d:g} > work cap")
            if single_bytes > self.budget.memory_bytes:
                raise _Refused(f"{side} single-step support {n1} points at discretization {d:g}")
        fft_total, support = 0, 0
        for (sigma, q), steps in phases.items():
            single = self._single_step(sigma, q, d, side=side)
            n = fast_pld.fft_length(single, steps, wrap_tail=_wrap_tail(smallest_query))
            fft_total = max(fft_total, fast_pld.fft_bytes(n))
            support += n
        if support > max_points:
            raise _Refused(f"{side} composed support {support} points at discretization {d:g} > work cap")
        guard = 2 if (self.add_guard and side == "pessimistic") else 1
        mem = self._within_budget(single_bytes, fft_total, guard, support, len(phases), d, what=f"{side} ")
        return support, mem

    # -- subsampled Gaussians (fast_pld) ----------------------------------------------------------------------------
    _FAST_ACCOUNTANT = (
        "gdpcore.fast_pld (connect-the-dots, pessimistic; dp_accounting's construction, vectorised; optimistic twin: "
    )

    def _compose(self, phases: dict[tuple[float, float], int], d: float, *, planned_bytes: float = 0.0) -> _Composed:
        """The pessimistic curve at step ``d`` (extended-precision transforms, round-off allowance, tilted tails where
        they matter, within the budget left beside ``planned_bytes``) with its support length, tilt and
        diagnostics."""
        parts = [(self._single_step(s, q, d), steps) for (s, q), steps in phases.items()]
        tilt_loss: float | None
        if len(parts) == 1:
            single, steps = parts[0]
            remove, curve, tilt_loss = self._compose_single(
                single, steps, fft_len=self._fft_len(single, steps), planned_bytes=planned_bytes
            )
        else:
            remove = fast_pld.compose_phases(parts)
            curve, tilt_loss = curve_from_remove_pmf(remove), None
        diagnostics = _pmf_diagnostics(remove)
        if self.add_guard:
            adds = [(self._single_step(s, q, d, direction="add"), steps) for (s, q), steps in phases.items()]
            add = fast_pld.compose_phases(adds)
            curve = curve_from_loss_pmf(remove, add)
            diagnostics["add_direction_gap"] = curve.add_direction_gap
            diagnostics["add_excess_mass"] = max(0.0, add.p_mass - 1.0)
        return _Composed(curve, remove.probs.size, tilt_loss, diagnostics)

    @staticmethod
    def _fft_len(single: LossPMF, steps: int) -> int | None:
        """A transform length already cached for a larger T of this single step, when it is close to what ``steps``
        needs (reused instead of a new forward transform)."""
        n = fast_pld.fft_length(single, steps)
        reusable = [m for m in single.cached_fft_lengths() if n <= m <= 1.25 * n]
        return reusable[0] if reusable else None

    def _estimate(self, phases: dict[tuple[float, float], int], d: float) -> tuple[SymmetricCurve, float]:
        """An estimate of the pessimistic curve at step ``d``, for the doubling comparisons that estimate the
        discretisation error only (nothing of it is reported): float64 transforms, no round-off allowance, no tilted
        tail, no diagnostics. Also returns its noise floor: the float64 round-off bound per atom times the number of
        atoms, above which every read is (a read below it is round-off, not discretisation: sigma 1, q 1e-4,
        T 1e6 read epsilon(1e-12) 2.6x apart between steps of 7e-7 and 1.4e-6)."""
        parts = [(self._single_step(s, q, d), steps) for (s, q), steps in phases.items()]
        if len(parts) == 1:
            single, steps = parts[0]
            remove = fast_pld.compose_loss_pmf(single, steps, fft_len=self._fft_len(single, steps), extended=False)
        else:
            remove = fast_pld.compose_phases(parts, extended=False)
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
        if curve.fixed_point >= fast_pld.TAIL_MASS_TRUNCATION and smallest >= _NOISE_MARGIN * noise:
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
        parts = [(self._single_step(s, q, d, side="optimistic"), steps) for (s, q), steps in phases.items()]
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
            d, predicted = fixed, None
        else:
            d, predicted = self._pessimistic_start(phases, key, total_steps, target)
        # A later cell of a group borrows the error law its group measured: its step is composed once, without the
        # doubling comparison, and the certified gap checks it; only when the gap is not met is its own error
        # measured (and the step refined if the law was wrong).
        side = self._refine_pessimistic(mechanism, phases, d, fixed, t0, target, measure=predicted is None)
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
            twin = self._refine_twin(mechanism, phases, side, fixed is None, t0)
            if predicted is not None and twin.gap > self.tolerance and not twin.mu_tail:
                # The borrowed law may be wrong for this cell (a twin that stalls points at the pessimistic side).
                measured = self._refine_pessimistic(
                    mechanism, phases, side.step, fixed, t0, target, measure=True, first=side
                )
                if not isinstance(measured, Curves):
                    d_before = side.step
                    side, err, status = measured, measured.error, measured.status
                    if err is not None and status == "ok":
                        self._error_hints[key] = (err / side.step**2, total_steps)
                    if side.step != d_before:
                        twin = self._refine_twin(mechanism, phases, side, True, t0)
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
                        return self._rdp_fallback(
                            mechanism, f"over_budget: {why} > budget {budget.memory_bytes:.0f} bytes"
                        )
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
        self, phases: dict[tuple[float, float], int], key, total_steps: int, target: float
    ) -> tuple[float, float | None]:
        """(first pessimistic step, its error predicted by a measured law err ~ c d^2, or None: not predicted).

        When an earlier cell of the batch with the same single steps measured the law (doubling comparison), the
        coarsest rung that law keeps within ``target``. The law's c grows with T (about as sqrt(T) on DP-SGD grids:
        sigma 0.6, q 1e-3 measured 0.0204, 0.0084, 0.0037, 0.00085 (d / s1)^2 at T 1e4, 3e3, 1e3, 100), so it is
        scaled up by sqrt(T / T_then) for a longer composition; the grid runs each group by decreasing T.
        Otherwise the law is measured here, cheaply: a doubling comparison of float64 compositions at
        ``_LAW_PROBE`` x and 2 x ``_LAW_PROBE`` x the a-priori step (:func:`start_step`), whose composed supports
        are 1/4 and 1/8 of the a-priori one's."""
        hint = self._error_hints.get(key)
        if hint is None:
            d0 = min(start_step(s, q, target) for s, q in phases)
            if self.tolerance < DEFAULT_GRID_TOLERANCE:
                # A report (tolerance 0.1%): one cell, where a coarser first step saves little. It starts at the
                # a-priori rule and measures its own error (doubling comparison at the reported precision), which
                # keeps its upper ends as tight as before (seed 000 Table 4's sigma 9.4 row: 7.4245 against
                # dp_accounting's 7.42439 at step 1e-4).
                return d0, None
            law = self._measure_law(phases, min(_LAW_PROBE * d0, LADDER_TOP / 2))
            if law is None:
                return d0, None
            hint = (law, total_steps)
            self._error_hints[key] = hint
        coef, steps_then = hint
        coef *= max(1.0, math.sqrt(total_steps / steps_then))
        top = _START_TOP if coef <= 0.0 else min(math.sqrt(target / coef), _START_TOP)
        d = ladder_floor(top)
        return d, coef * d**2

    def _measure_law(self, phases: dict[tuple[float, float], int], d: float) -> float | None:
        """c of the pessimistic error law err(d) ~ c d^2 from a doubling comparison at ``d`` (estimates only: float64
        transforms, nothing reported), or None when the plan at ``d`` is refused."""
        try:
            self.plan_subsampled_gaussian(phases, d)
        except _Refused:
            return None
        fine, noise_fine = self._estimate(phases, d)
        coarse, noise_coarse = self._estimate(phases, 2 * d)
        return _relative_change(self._probe(coarse, noise_coarse), self._probe(fine, noise_fine)) / 3.0 / d**2

    def _refine_twin(self, mechanism, phases, side: _Pessimistic, refine: bool, t0) -> _Twin:
        """Optimistic twin and certified gap; with ``refine`` the twin starts where :meth:`_twin_start` says and is
        refined by the gap's d^1.8 law until the gap is within tolerance, at most ``_GAP_MAX_ROUNDS`` times, within
        the budget; rounds after the first also within a work cap of ``_GAP_WORK_FACTOR`` x the larger of the
        pessimistic and the first twin's support."""
        pess, d_p, support = side.composed.curve, side.step, side.support
        smallest = _smallest_query(self.deltas, self.alpha_min, pess)
        # The work cap scales with the accuracy asked (4x the pessimistic support at a 1% tolerance).
        cap = _GAP_WORK_FACTOR * max(1.0, DEFAULT_GRID_TOLERANCE / self.tolerance)
        # Tilted tails on the optimistic side too wherever the pessimistic side needed them, at the same loss.
        target = side.composed.tilt_loss
        key = _phases_key(phases)
        total_steps = sum(phases.values())
        d = self._twin_start(key, d_p, total_steps) if refine else d_p  # a fixed step: the twin at that step
        max_points = math.inf  # the first round is bounded by the memory budget only
        mu_tail = False

        def attempt(d: float) -> tuple[tuple[SymmetricCurve, str], float]:
            nonlocal max_points
            opt, twin, twin_support = self._optimistic_sg(mechanism, phases, d, smallest, max_points, target)
            if refine and math.isinf(max_points):
                max_points = max(cap * max(support, twin_support), 2**16)
            return (opt, twin), certified_gap(pess, opt, deltas=self.deltas, alpha_min=self.alpha_min)

        def only_mu_in_the_tail(value: tuple[SymmetricCurve, str], gap: float) -> str | None:
            nonlocal mu_tail
            if pess.fixed_point < fast_pld.TAIL_MASS_TRUNCATION and (
                certified_gap(pess, value[0], deltas=self.deltas, alpha_min=self.alpha_min, include_mu=False)
                <= self.tolerance
            ):
                # Only mu is short, and it is read where the curve meets the diagonal, below FPR 1e-15 (mu > 15.9):
                # there both ends are set by the compositions' tail truncation (1e-15 of P-mass), not by the step.
                mu_tail = True
                return (
                    f"only mu is short: read where the curve meets the diagonal at FPR {pess.fixed_point:.1e}, below"
                    f" the compositions' tail truncation {fast_pld.TAIL_MASS_TRUNCATION:g}, not refinable by the step"
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
        ``law.share`` of the tolerance, at least one halving below the last."""
        best: tuple[Any, float, float | None] | None = None
        previous_gap: float | None = None
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
            d_new = max(min(d_new, ladder_floor(d / 2)), LADDER_FINEST)
            if now - t0 + law.predict(now - t0, now - tic, d / d_new) > self.budget.seconds:
                break
            reason = stop(value, gap)
            if reason is not None:
                return _Refinement(best, reason, None)
            if previous_gap is not None and law.stalled(gap, previous_gap):
                return _Refinement(best, law.stall_reason, None)
            previous_gap = gap
            d = d_new
        return _Refinement(best, None, None)

    def _twin_start(self, key, d_p: float, total_steps: int) -> float:
        """The twin's first step: where the gap law c d^1.8 measured on an earlier cell of the batch with the same
        single steps (c = gap / d^1.8 there, the pessimistic error included: on the safe side) reaches
        ``_TWIN_HINT_SHARE`` of the tolerance (on DP-SGD grids the twin's gap at one step is about the same across T,
        slightly larger at small T: sigma 0.6, q 1e-3, d 1e-3 gave 2.9e-3 at T 1e4, 4.0e-3 at T 100); without one,
        ``_TWIN_START`` x the pessimistic step."""
        coef = self._twin_hints.get(key)
        if coef is not None:
            start = (_TWIN_HINT_SHARE * self.tolerance / coef) ** (1.0 / _GAP_ORDER)
        else:
            start = _TWIN_START * d_p
        return min(max(ladder_floor(start), LADDER_FINEST), LADDER_TOP)

    # -- every other mechanism: dp_accounting single steps, composed by fast_pld -----------------------------------
    def _generic_parts(self, mechanism: Mechanism, d: float, side: str) -> list[tuple[LossPMF, LossPMF | None, int]]:
        """:func:`generic_parts` with this producer's caches (Poisson-subsampled Gaussian steps share the SG path's)."""
        return generic_parts(mechanism, d, side=side, cache=self._generic_singles, sg_single=self._single_step)

    def plan_generic(
        self,
        parts: list[tuple[LossPMF, LossPMF | None, int]],
        d: float,
        *,
        smallest_query: float = 1e-10,
    ) -> tuple[int, int]:
        """(composed support, working bytes) of the generic composition of ``parts`` at step ``d``, before any
        composition is allocated: the single steps held, the largest FFT buffer (each part's FFT power on its
        Chernoff window, :func:`gdpcore.fast_pld.fft_length`; the linear convolution of the parts, at most their
        summed windows long), doubled for the add direction of an asymmetric mechanism, and the curve arrays over
        the composed support. Raises :class:`_Refused` when it exceeds the memory budget."""
        wrap = _wrap_tail(smallest_query)
        single_bytes = sum(
            _SINGLE_BYTES_PER_POINT * (r.probs.size + (0 if a is None else a.probs.size)) for r, a, _ in parts
        )
        lengths = [fast_pld.fft_length(r, steps, wrap_tail=wrap) for r, _, steps in parts]
        support = int(sum(lengths))
        fft_total = max(fast_pld.fft_bytes(n) for n in lengths)
        if len(parts) > 1:
            fft_total = max(fft_total, fast_pld.fft_bytes(support))
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
            raise _Refused(f"{what}composed support {support} points at discretization {d:g} (~{mem / 2**20:.0f} MiB)")
        return mem

    def _compose_direction(
        self, parts: list[tuple[LossPMF, int]], *, planned_bytes: float = 0.0
    ) -> tuple[LossPMF, float | None]:
        """One direction's pessimistic composition and, when its tail was tilted, the loss the tilt centres on.

        Each part by FFT power (:func:`gdpcore.fast_pld.compose_loss_pmf`, a-priori round-off bound, truncated tails
        at +inf), the parts by linear convolution (:func:`gdpcore.fast_pld.compose_phases`). A single repeated step
        whose round-off allowance could matter where the report reads gets its tail recomputed tilted towards that
        region (:meth:`_compose_single`, shared with the subsampled-Gaussian path)."""
        if len(parts) > 1:
            return fast_pld.compose_phases(parts), None
        single, steps = parts[0]
        pmf, _, tilt_loss = self._compose_single(single, steps, planned_bytes=planned_bytes)
        return pmf, tilt_loss

    def _compose_single(
        self, single: LossPMF, steps: int, *, fft_len: int | None = None, planned_bytes: float = 0.0
    ) -> tuple[LossPMF, SymmetricCurve, float | None]:
        """One repeated step composed (extended-precision transforms), its remove curve, and the loss its tail was
        tilted towards (None if not). Where the round-off allowance could move a number the report reads by more
        than ``_ROUNDOFF_SHARE`` of it (:func:`_roundoff_matters`), the tail is recomputed on the step tilted by
        ``fast_pld.TILT_FRACTION`` of the tilt that centres it on the smallest delta or FPR read."""
        pmf = fast_pld.compose_loss_pmf(single, steps, fft_len=fft_len)
        curve = curve_from_remove_pmf(pmf)
        smallest = _smallest_query(self.deltas, self.alpha_min, curve)
        if steps == 1 or not _roundoff_matters(curve, pmf, smallest):
            return pmf, curve, None
        theta = fast_pld.TILT_FRACTION * fast_pld.tilt_for_tail(single, steps, smallest)
        spare = self.budget.memory_bytes - planned_bytes
        pmf = fast_pld.refine_tail(pmf, single, steps, theta, max_bytes=spare)
        return pmf, curve_from_remove_pmf(pmf), steps * fast_pld.tilted_log_mgf(single, theta)[1]

    def _compose_generic(
        self, parts: list[tuple[LossPMF, LossPMF | None, int]], *, planned_bytes: float = 0.0
    ) -> tuple[SymmetricCurve, LossPMF, LossPMF | None, float | None]:
        """The pessimistic curve of ``parts``: remove direction, and the add direction (a symmetric part's add PMF is
        its remove PMF) when any part is asymmetric, the profile being their pointwise max
        (:func:`gdpcore.curve.curve_from_loss_pmf`); each PMF's round-off allowance is added to every atom there.
        Also returns the loss the remove direction's tail was tilted towards (None if not)."""
        remove, tilt_loss = self._compose_direction([(r, steps) for r, _, steps in parts], planned_bytes=planned_bytes)
        add = None
        if any(a is not None for _, a, _ in parts):
            add, _ = self._compose_direction(
                [(r if a is None else a, steps) for r, a, steps in parts], planned_bytes=planned_bytes
            )
        return curve_from_loss_pmf(remove, add), remove, add, tilt_loss

    def _generic(self, mechanism: Mechanism, fixed: float | None, optimistic: bool, t0) -> Curves:
        """Both sides at one step per round (:meth:`_refine_steps` with the first-order ``_GENERIC_LAW``), from
        ``GENERIC_START``; the RDP fallback when even the first round's plan is refused."""
        prev: tuple[float, float] | None = None  # (step, single-step bytes) of the last round

        def attempt(d: float) -> tuple[tuple[Curves, LossPMF, float | None, float], float | None]:
            nonlocal prev
            if prev is not None and prev[1] * prev[0] / d > self.budget.memory_bytes:
                # Single steps grow as 1 / step: refuse before dp_accounting builds them.
                raise _Refused(f"single steps of ~{prev[1] * prev[0] / d:.3g} bytes at discretization {d:g}")
            parts = self._generic_parts(mechanism, d, "pessimistic")
            smallest = _smallest_query(self.deltas, self.alpha_min, None)
            _, mem = self.plan_generic(parts, d, smallest_query=smallest)
            prev = (d, float(sum(_SINGLE_BYTES_PER_POINT * r.probs.size for r, _, _ in parts)))
            pess, remove, add, tilt_loss = self._compose_generic(parts, planned_bytes=float(mem))
            diagnostics = _pmf_diagnostics(remove)
            diagnostics["add_direction_gap"] = pess.add_direction_gap
            diagnostics["add_excess_mass"] = 0.0 if add is None else max(0.0, add.p_mass - 1.0)
            opt, twin, gap = None, "not built", None
            upper_only: str | None = None
            if optimistic:
                smallest = _smallest_query(self.deltas, self.alpha_min, pess)
                try:
                    opt_parts = self._generic_parts(mechanism, d, "optimistic")
                    # The optimistic FFTs span the mass down to the wrap-around slack: planned on their own.
                    _, opt_mem = self.plan_generic(opt_parts, d, smallest_query=smallest)
                    singles = [(r, steps) for r, _, steps in opt_parts]
                    opt, twin = optimistic_curve(
                        singles,
                        mechanism,
                        d,
                        smallest,
                        tilt_target=tilt_loss,
                        tilt_max_bytes=self.budget.memory_bytes - opt_mem,
                    )
                    gap = certified_gap(pess, opt, deltas=self.deltas, alpha_min=self.alpha_min)
                except kinds.UnsupportedMechanismError as why:  # a kind with upper bounds only (zCDP, truncated)
                    twin, upper_only = "not available", f"upper_bound_only: {why}"
                except _Refused:
                    twin, gap = "not built (over budget)", math.inf
            curves = Curves(
                pess,
                opt,
                None,
                Provenance(
                    accountant=(
                        f"{ACCOUNTANT_NAME} single steps composed by gdpcore.fast_pld (connect-the-dots, pessimistic;"
                        f" optimistic twin: {twin})"
                    ),
                    engine=PLD_ENGINE,  # dp_accounting built the single steps; fast_pld composed them
                    discretization=d,
                    discretization_lower=d if optimistic else None,
                    status=upper_only or "ok",
                    certified_gap=gap,
                    tolerance=None if fixed is not None else self.tolerance,
                    support_length=int(remove.probs.size),
                    memory_estimate_bytes=mem,
                    diagnostics=diagnostics,
                ),
            )
            return (curves, remove, tilt_loss, smallest), gap

        def roundoff_dominates(value: tuple[Curves, LossPMF, float | None, float], gap: float) -> str | None:
            _, remove, tilt_loss, smallest = value
            if tilt_loss is None and remove.max_roundoff * remove.probs.size > 1e-2 * smallest:
                # The round-off allowance (per atom, untilted: a multi-part composition) is comparable with the
                # smallest delta or FPR read; a finer step only adds atoms to it, so refinement cannot close the gap.
                return "the round-off allowance is comparable with the smallest delta or FPR read"
            return None

        run = self._refine_steps(
            attempt,
            fixed if fixed is not None else GENERIC_START,
            rounds=1 if fixed is not None else _GENERIC_MAX_ROUNDS,
            law=_GENERIC_LAW,
            t0=t0,
            stop=roundoff_dominates,
        )
        if run.best is None:
            return self._rdp_fallback(
                mechanism, f"over_budget: {run.refused} > budget {self.budget.memory_bytes:.0f} bytes"
            )
        best: Curves = run.best[0][0]
        prov = best.provenance
        if fixed is None and optimistic and prov.certified_gap is not None and prov.certified_gap > self.tolerance:
            prov = dataclasses.replace(
                prov,
                status=f"tolerance_not_met: certified gap {prov.certified_gap:.2e} > tolerance {self.tolerance:g}",
            )
            best = dataclasses.replace(best, provenance=prov)
        return best

    # -- the RDP fallback --------------------------------------------------------------------------------------------
    def _rdp_fallback(self, mechanism: Mechanism, reason: str) -> Curves:
        """dp_accounting's RDP accountant: delta(eps) upper bounds on an eps grid up to the RDP epsilon at 1e-12;
        the envelope of their supporting lines is a valid (pessimistic) symmetric curve (seed 000 Thm A.9)."""
        from dp_accounting.rdp import rdp_privacy_accountant as rdp

        # dp_accounting's RdpAccountant takes few of the kinds: every kind's own RDP curve, converted by dp_accounting.
        orders, curve_rdp = kind_rdp_curve(mechanism)
        e_max = max(float(rdp.compute_epsilon(orders, curve_rdp, 1e-12)[0]), 1e-3)
        eps = np.linspace(0.0, e_max, _RDP_EPS_POINTS)
        delta = np.array([rdp.compute_delta(orders, curve_rdp, float(e))[0] for e in eps])
        curve = curve_from_profile(eps, delta)
        return Curves(
            curve,
            None,
            None,
            Provenance(
                accountant="dp_accounting.rdp conversion of the kinds' RDP curves (RDP fallback; upper bounds, looser than PLD)",
                engine="rdp_fallback",
                status=reason + "; numbers are the looser RDP bound (fallback)",
            ),
        )


def kind_rdp_curve(mechanism: Mechanism) -> tuple[np.ndarray, np.ndarray]:
    """(orders, RDP curve) of ``mechanism`` from its kinds' own RDP formulas (exact or upper bounds; every kind
    declares one) at dp_accounting's default orders, for dp_accounting's conversions ``compute_epsilon`` /
    ``compute_delta``. The one place the replace-one workaround lives: dp_accounting's ``RdpAccountant`` reads a
    replace-one ``GaussianDpEvent``'s noise relative to twice the norm bound its DpEvent documents
    (google/differential-privacy#378), so replace-one RDP epsilons (the engine's RDP fallback, and
    :mod:`gdpcore.claims`' reproduction) convert this curve instead of composing DpEvents."""
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    orders = np.asarray(rdp.DEFAULT_RDP_ORDERS, dtype=float)
    curve, _ = kinds.evaluate(mechanism, "rdp", orders)
    return orders, np.asarray(curve, dtype=float)


_ROUNDOFF_SHARE = 1e-3
"""A composition's tail is recomputed tilted (:func:`gdpcore.fast_pld.refine_tail`) when its round-off allowance could
move a value the report reads by more than this share of it."""


def _roundoff_matters(curve: SymmetricCurve, pmf: LossPMF, smallest: float) -> bool:
    """Whether the allowance (``pmf.max_roundoff`` added to every atom) could move a number read from ``curve`` by more
    than ``_ROUNDOFF_SHARE`` of it. The reads are delta(eps) >= ``smallest`` (epsilon at the asked deltas) and the
    vertices' tails there (mu, FNR); each moves by at most the allowance times the number of atoms above its eps."""
    b = pmf.max_roundoff
    if b <= 0.0:
        return False
    top = pmf.lower_index + pmf.probs.size - 1
    above = np.maximum(top - np.round(curve.eps / pmf.step), 0.0) + 1.0  # atoms with loss above each line's eps
    read = curve.delta >= smallest
    if not read.any():
        return True
    if np.any(b * above[read] > _ROUNDOFF_SHARE * curve.delta[read]):
        return True
    # Vertex i (i >= 1) sits on line K - i + 1 and above line K - i: its tail counts the atoms above eps_{K-i}.
    K = curve.eps.size - 1
    v_above = above[K - np.arange(1, K + 1)]
    v_tail = curve.tail[1:]
    v_read = v_tail >= smallest
    return bool(np.any(b * v_above[v_read] > _ROUNDOFF_SHARE * v_tail[v_read]))


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


def _relative_change(coarse: np.ndarray, fine: np.ndarray) -> float:
    """Largest relative change between two probes (:meth:`Producer._probe`) by :func:`relative_gap`, relative to the
    finer one; NaN reads (not compared) are skipped."""
    rel = np.abs(relative_gap(fine, coarse))
    return float(np.nanmax(rel)) if rel.size else 0.0


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
