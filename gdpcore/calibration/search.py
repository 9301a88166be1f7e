"""The search: a bracketed root finder per discretisation level, the coarse-to-fine ladder that drives it, the
discretisation-bias estimate, and the exact (closed-form) solver of the plain Gaussian.

Root finding is done on y = log(mu-equivalent of the metric) - log(mu-equivalent of the target) against
u = log(parameter) (oriented so that u grows towards privacy: u = log sigma, -log q, -log T), where the curve is
nearly linear, by a bracketed, Illinois-safeguarded secant that places points a quarter tolerance on the feasible
side of the predicted root, so that the bracket usually closes in two points. Every risk is monotone in u
(post-processing, amplification by subsampling, composition; seed 001 Eq. 9), which is what justifies bracketing.

Metrics come from :mod:`gdpcore.calibration.evaluator` (pessimistic curves) or, for the plain Gaussian, from the
target's exact mu-GDP metric; no point (parameter, discretisation) is evaluated twice.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, Literal

from gdpcore import closed_form
from gdpcore.calibration import evaluator
from gdpcore.calibration.errors import CalibrationSearchError
from gdpcore.calibration.targets import Target
from gdpcore.engine import LADDER_FINEST, ladder_floor

__all__ = [
    "ADAPTIVE_FLOOR",
    "ADAPTIVE_MAX_GRID",
    "DISCRETIZATION_LADDER_START",
    "LADDER_FACTOR",
    "MAX_EVALS_PER_LEVEL",
    "LevelOutcome",
    "Parameter",
    "Point",
    "REPORT_DELTA",
    "Problem",
    "Solution",
    "ladder",
    "solve",
    "solve_level",
]

REPORT_DELTA = 1e-5
"""The delta at which every calibrated result also states its epsilon (seed 001 Sec. 4 / App. F quote eps at 1e-5)."""

DISCRETIZATION_LADDER_START = ladder_floor(4e-3)
"""Coarsest discretisation of the coarse-to-fine search: a rung of the engine's ladder (gdpcore.engine), 4e-3 (the
engine's rungs above it serve the twin and coarse-law probes; the search's accuracy checks start here)."""

LADDER_FACTOR = 4.0  # the search walks every fourth rung of the engine's ladder (LADDER_TOP * 2^(-k/2))
ADAPTIVE_FLOOR = LADDER_FINEST  # finest level the adaptive ladder may reach ...
ADAPTIVE_MAX_GRID = 2**20  # ... as long as the next level's profile grid (4x the current one) stays below this
MAX_EVALS_PER_LEVEL = 60

Parameter = Literal["noise_multiplier", "steps", "sampling_rate"]


@dataclasses.dataclass(kw_only=True)
class Point:
    u: float
    met: bool
    metric: float
    y: float  # log mu-equivalent minus log target mu-equivalent (> 0: too risky), for interpolation only
    epsilon: float = math.nan  # eps at REPORT_DELTA on the same curve (seed 001 Sec. 4 reports it next to a result)
    advantage: float = math.nan  # delta(0) of the same curve


class Problem:
    """One calibration: maps a search coordinate u to the parameter and evaluates, memoised.

    Convention: the feasible set is {u >= u*} (u grows towards privacy): u = log sigma, u = -log q, u = -log T.
    ``exact`` selects the closed form (plain Gaussian, mu = sqrt(T)/sigma) instead of the evaluator.
    """

    def __init__(
        self,
        *,
        target: Target,
        parameter: Parameter,
        fixed: dict[str, Any],
        u_min: float,
        u_max: float,
        tolerance: float,
        exact: bool,
        limits: tuple[float | int, float | int],
    ) -> None:
        self.target = target
        self.parameter = parameter
        self.fixed = fixed
        self.u_min = u_min
        self.u_max = u_max
        self.tolerance = tolerance
        self.exact = exact
        self.memo: dict[tuple[Any, float | None], Point] = {}
        self.counts: dict[float | None, int] = {}
        self.y_target = target.log_gdp_mu(target.value)
        self.optimistic: dict[float, float] = {}  # discretisation -> optimistic metric at u_max
        self.grid_sizes: dict[float, int] = {}  # discretisation -> largest profile grid evaluated
        self.limits = limits  # parameter values at (u_min, u_max), exactly as the user gave them

    # coordinates --------------------------------------------------------------------------------------------------
    def param(self, u: float) -> float | int:
        # The ends of the range map back to the user's limits exactly (no exp(log(x)) round-off).
        if u >= self.u_max:
            return self.limits[1]
        if u <= self.u_min:
            return self.limits[0]
        if self.parameter == "noise_multiplier":
            return float(math.exp(u))
        if self.parameter == "sampling_rate":
            return float(min(1.0, math.exp(-u)))
        return max(1, int(round(math.exp(-u))))

    def snap(self, u: float) -> float:
        u = min(max(u, self.u_min), self.u_max)
        if self.parameter == "steps":
            return -math.log(self.param(u))
        return u

    def closed(self, lo: float, hi: float) -> bool:
        """Is the bracket (lo infeasible, hi feasible) narrow enough?"""
        if self.parameter == "steps":
            t_lo, t_hi = self.param(lo), self.param(hi)
            return t_lo - t_hi <= max(1, int(self.tolerance * t_hi))
        return math.expm1(hi - lo) <= self.tolerance

    def mechanism_args(self, u: float) -> dict[str, Any]:
        args = dict(self.fixed)
        args[self.parameter] = self.param(u)
        return args

    # evaluation ---------------------------------------------------------------------------------------------------
    def evaluate(self, u: float, d: float | None) -> Point:
        """The target metric at u, on the pessimistic curve at discretisation ``d`` (closed form if None)."""
        u = self.snap(u)
        key = (self.param(u), d)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        args = self.mechanism_args(u)
        if d is None:
            mu = math.sqrt(args["steps"]) / args["noise_multiplier"]
            metric = self.target.metric_from_gdp(mu)
            eps = float(closed_form.get_epsilon_from_gdp(mu=mu, delta=REPORT_DELTA)) if mu > 0 else 0.0
            adv = closed_form.get_advantage_from_gdp(mu=mu) if mu > 0 else 0.0
        else:
            # Looked up on the module at call time, so that tests can observe every evaluation.
            curve = evaluator.pessimistic_curve(
                noise_multiplier=args["noise_multiplier"],
                sampling_rate=args["sampling_rate"],
                steps=args["steps"],
                discretization=d,
            )
            metric = self.target.metric_from_curve(curve)
            self.grid_sizes[d] = max(self.grid_sizes.get(d, 0), int(curve.eps.size))
            eps, adv = float(curve.epsilon_at(REPORT_DELTA)), float(curve.advantage)
        met = self.target.met(metric)
        y = self.target.log_gdp_mu(metric) - self.y_target
        point = Point(u=u, met=met, metric=float(metric), y=y, epsilon=eps, advantage=adv)
        self.memo[key] = point
        self.counts[d] = self.counts.get(d, 0) + 1
        return point

    def optimistic_metric(self, u: float, d: float) -> float:
        """The target metric at u on the optimistic twin (an estimate from below of the risk); never certifies."""
        args = self.mechanism_args(u)
        curve = evaluator.optimistic_curve(
            noise_multiplier=args["noise_multiplier"],
            sampling_rate=args["sampling_rate"],
            steps=args["steps"],
            discretization=d,
        )
        return self.target.metric_from_curve(curve)

    def clt_guess(self) -> float:
        """Starting u from the CLT mu = q sqrt(T (e^{1/sigma^2} - 1)) (Dong et al. 2022; never an answer)."""
        mu_t = self.target.gdp_mu(self.target.value)
        f = self.fixed
        if not math.isfinite(mu_t) or mu_t <= 0:
            return 0.5 * (self.u_min + self.u_max)
        try:
            if self.parameter == "noise_multiplier":
                q, t = f["sampling_rate"], f["steps"]
                if q == 1.0:
                    return math.log(math.sqrt(t) / mu_t)
                return math.log(1.0 / math.sqrt(math.log1p(mu_t**2 / (q * q * t))))
            growth = math.expm1(1.0 / f["noise_multiplier"] ** 2)
            if self.parameter == "steps":
                q = f["sampling_rate"]
                return -math.log(max(1.0, mu_t**2 / (q * q * growth)))
            return -math.log(min(1.0, mu_t / math.sqrt(f["steps"] * growth)))
        except (OverflowError, ValueError, ZeroDivisionError):
            return 0.5 * (self.u_min + self.u_max)


@dataclasses.dataclass(kw_only=True)
class LevelOutcome:
    """What one level found: a ``bracket`` (``lo`` infeasible, ``hi`` feasible), ``all_feasible`` (``hi`` at u_min
    meets the target, ``lo`` is None) or ``infeasible`` (``lo`` at u_max misses it, ``hi`` is None)."""

    kind: Literal["bracket", "all_feasible", "infeasible"]
    lo: Point | None
    hi: Point | None

    @property
    def feasible(self) -> Point:
        """The accepted point (``hi``); only an ``infeasible`` outcome has none."""
        if self.hi is None:
            raise ValueError(f"a {self.kind} outcome has no feasible point")
        return self.hi

    @property
    def missed(self) -> Point:
        """The rejected point (``lo``); only an ``all_feasible`` outcome has none."""
        if self.lo is None:
            raise ValueError(f"a {self.kind} outcome has no infeasible point")
        return self.lo


@dataclasses.dataclass(frozen=True, kw_only=True)
class Solution:
    """The final level's outcome, its discretisation (None: closed form) and the estimated relative
    discretisation bias of the returned parameter (None when it cannot be estimated)."""

    outcome: LevelOutcome
    discretization: float | None
    bias: float | None


def solve_level(problem: Problem, d: float | None, *, start: float, seeds: Sequence[float] = ()) -> LevelOutcome:
    """Bracket and narrow the root at one discretisation, starting near ``start``.

    Points in ``seeds`` are evaluated first (the previous level's bracket, lowest first).
    """
    tol_u = math.log1p(problem.tolerance) if problem.parameter != "steps" else None
    lo: Point | None = None
    hi: Point | None = None

    def absorb(p: Point) -> None:
        nonlocal lo, hi
        if p.met:
            if hi is None or p.u < hi.u:
                hi = p
        elif lo is None or p.u > lo.u:
            lo = p

    # Already-known points at this level (memo) tighten the bracket for free.
    for (_param, dd), p in problem.memo.items():
        if dd == d:
            absorb(p)

    def step_tol(at: float) -> float:
        if tol_u is not None:
            return tol_u
        t = problem.param(at)
        return max(1.0 / t, problem.tolerance) if t > 1 else 1.0

    n_eval = 0
    for s in seeds:
        s = problem.snap(s)
        if (lo is not None and s <= lo.u) or (hi is not None and s >= hi.u):
            continue
        absorb(problem.evaluate(s, d))
        n_eval += 1
        if lo is not None and hi is not None:
            break

    # 1. Bracket. Newton-like steps on y(u) with a slope estimate, growing until the sign flips.
    slope = -1.0  # dy/du for a Gaussian (mu = sqrt(T)/sigma): the CLT slope is steeper at small sigma
    u = problem.snap(start)
    growth = 1.0
    while lo is None or hi is None:
        if n_eval > MAX_EVALS_PER_LEVEL:
            raise CalibrationSearchError("calibration failed to bracket the target (risk not monotone?)")
        if lo is None and hi is None:
            p = problem.evaluate(u, d)
        else:
            need_lo = lo is None  # exactly one side is known: search away from it
            ref = hi if need_lo else lo
            assert ref is not None  # narrowing only: the branch above handles "both unknown"
            if need_lo and ref.u <= problem.u_min:
                return LevelOutcome(kind="all_feasible", lo=None, hi=ref)
            if not need_lo and ref.u >= problem.u_max:
                return LevelOutcome(kind="infeasible", lo=ref, hi=None)
            y = ref.y if math.isfinite(ref.y) else (1.0 if not ref.met else -1.0)
            newton = -y / slope
            size = max(abs(newton) * 1.3 * growth, 2 * step_tol(ref.u) * growth)
            target_u = ref.u + (-size if need_lo else size)
            p = problem.evaluate(target_u, d)
            if p.u == ref.u:  # snapped onto the limit already evaluated
                return (
                    LevelOutcome(kind="all_feasible", lo=None, hi=ref)
                    if ref.met
                    else LevelOutcome(kind="infeasible", lo=ref, hi=None)
                )
            if math.isfinite(p.y) and math.isfinite(ref.y) and p.u != ref.u:
                est = (p.y - ref.y) / (p.u - ref.u)
                if est < 0:
                    slope = est
            growth *= 2.0
        n_eval += 1
        absorb(p)

    # 2. Narrow: Illinois-safeguarded secant aiming a quarter tolerance on the feasible side of the predicted root.
    y_lo, y_hi = lo.y, hi.y
    last_side = None
    while not problem.closed(lo.u, hi.u):
        if n_eval > MAX_EVALS_PER_LEVEL:
            raise CalibrationSearchError("calibration did not converge (risk not monotone?)")
        w = hi.u - lo.u
        tol_here = step_tol(hi.u)
        if math.isfinite(y_lo) and math.isfinite(y_hi) and y_lo > 0 > y_hi - 1e-300 and y_lo != y_hi:
            root = lo.u + w * y_lo / (y_lo - y_hi)
        else:
            root = lo.u + 0.5 * w
        u = root + 0.25 * tol_here
        if u >= hi.u - 0.5 * tol_here:
            u = hi.u - 0.95 * tol_here
        if u <= lo.u + 0.5 * tol_here:
            u = lo.u + 0.95 * tol_here
        u = min(max(u, lo.u + 0.02 * w), hi.u - 0.02 * w)
        u_snapped = problem.snap(u)
        if problem.parameter == "steps":
            t_lo, t_hi = problem.param(lo.u), problem.param(hi.u)
            t = min(max(problem.param(u), t_hi + 1), t_lo - 1)
            u_snapped = -math.log(t)
        p = problem.evaluate(u_snapped, d)
        n_eval += 1
        if p.met:
            hi, y_hi = p, p.y
            if last_side == "hi":
                y_lo *= 0.5  # Illinois: the stale endpoint's value is halved
            last_side = "hi"
        else:
            lo, y_lo = p, p.y
            if last_side == "lo":
                y_hi *= 0.5
            last_side = "lo"
    return LevelOutcome(kind="bracket", lo=lo, hi=hi)


def ladder(discretization: float | None) -> list[float]:
    """Fixed discretisation: coarse levels 4^k x d (<= 4e-3) ending at d. Adaptive: 4e-3 / 4^k down to 1e-7."""
    if discretization is None:
        out, d = [], DISCRETIZATION_LADDER_START
        while d >= ADAPTIVE_FLOOR * 0.999:
            out.append(d)
            d /= LADDER_FACTOR
        return out
    out = [discretization]
    while out[-1] * LADDER_FACTOR <= DISCRETIZATION_LADDER_START * 1.0001:
        out.append(out[-1] * LADDER_FACTOR)
    return out[::-1]


def solve(problem: Problem, *, discretization: float | None) -> Solution:
    """Run the whole search: the closed form if ``problem.exact``, else the coarse-to-fine ladder (fixed levels
    ending at ``discretization``, or adaptive when it is None)."""
    if problem.exact:
        return Solution(outcome=_solve_exact(problem), discretization=None, bias=0.0)
    return _solve_ladder(problem, ladder(discretization), adaptive=discretization is None)


def _solve_ladder(problem: Problem, levels: list[float], *, adaptive: bool) -> Solution:
    start = problem.clt_guess()
    seeds: list[float] = []
    prev: LevelOutcome | None = None
    for i, d in enumerate(levels):
        outcome = solve_level(problem, d, start=start, seeds=seeds)
        is_last = i == len(levels) - 1 or (
            # Adaptive: stop refining before a level whose grid would exceed the memory budget.
            adaptive and problem.grid_sizes.get(d, 0) * LADDER_FACTOR > ADAPTIVE_MAX_GRID
        )
        if outcome.kind == "infeasible":
            # A miss at the most private end is inconclusive unless the optimistic twin (dp_accounting's
            # rounded-down PLD, an estimate from below of the risk) misses too; then refining will not help.
            opt = problem.optimistic_metric(problem.u_max, d)
            problem.optimistic[d] = opt
            if not problem.target.met(opt) or is_last:
                return Solution(outcome=outcome, discretization=d, bias=None)
        if outcome.kind == "all_feasible":
            # Certified at this (coarse) level already: a pessimistic bound meeting the target at the
            # search limit is a valid answer at any finer discretisation.
            return Solution(outcome=outcome, discretization=d, bias=0.0)
        if (adaptive and prev is not None and _agree(problem, prev, outcome)) or is_last:
            bias = None if prev is None else _bias_estimate(problem, prev, outcome, levels[i - 1])
            return Solution(outcome=outcome, discretization=d, bias=bias)
        prev = outcome
        if outcome.kind == "bracket":
            start = outcome.feasible.u
            seeds = [outcome.missed.u, outcome.feasible.u]
        else:  # infeasible at u_max at this level: re-check the limit first at the finer level
            start = problem.u_max
            seeds = [problem.u_max]
    raise AssertionError("unreachable: the last level always returns")  # pragma: no cover


def _agree(problem: Problem, a: LevelOutcome, b: LevelOutcome) -> bool:
    if a.kind != "bracket" or b.kind != "bracket":
        return False
    if problem.parameter == "steps":
        t_a, t_b = problem.param(a.feasible.u), problem.param(b.feasible.u)
        return abs(t_a - t_b) <= max(1, int(problem.tolerance * t_b))
    return _shift(problem, a, b) <= problem.tolerance


def _shift(problem: Problem, a: LevelOutcome, b: LevelOutcome) -> float:
    """Relative change of the accepted parameter between two levels (the discretisation-bias estimate)."""
    if a.hi is None or b.hi is None:
        return 0.0 if a.kind == b.kind else math.inf
    pa, pb = problem.param(a.hi.u), problem.param(b.hi.u)
    return abs(pa - pb) / max(abs(pb), 1e-300)


def _bias_estimate(problem: Problem, prev: LevelOutcome, final: LevelOutcome, d_prev: float) -> float | None:
    """Estimated relative discretisation bias of the returned parameter (an *estimate*, never used to certify).

    The metric of one parameter value evaluated at both of the last two levels gives the level-to-level shift of
    the root (metric change / local slope of y(u)); connect-the-dots error shrinks at least 4x per 4x finer step
    (measured: about 16x), so the bias left at the final level is at most a third of that shift.
    """
    if final.kind != "bracket":
        return None
    lo, hi = final.missed, final.feasible
    slope = (hi.y - lo.y) / (hi.u - lo.u) if hi.u != lo.u else math.nan
    for p in (hi, lo):
        old = problem.memo.get((problem.param(p.u), d_prev))
        if old is not None and math.isfinite(old.y) and math.isfinite(p.y) and math.isfinite(slope) and slope < 0:
            return math.expm1(abs(old.y - p.y) / abs(slope) / 3.0)
    shift = _shift(problem, prev, final)
    return shift / 3.0 if math.isfinite(shift) else None


def _solve_exact(problem: Problem) -> LevelOutcome:
    """Plain Gaussian composed T times: exactly (sqrt(T)/sigma)-GDP (seed 001 Cor. B.3/B.4 generalised)."""
    mu_t = problem.target.gdp_mu(problem.target.value)
    f = problem.fixed
    if problem.parameter == "noise_multiplier":
        u0 = math.log(math.sqrt(f["steps"]) / mu_t) if 0 < mu_t < math.inf else problem.u_max
    elif problem.parameter == "steps":
        u0 = -math.log(max(1.0, math.floor((mu_t * f["noise_multiplier"]) ** 2))) if mu_t > 0 else 0.0
    else:
        raise AssertionError("sampling_rate calibration has no closed form")
    u0 = problem.snap(u0)
    # Round-off can leave the closed-form point a hair on either side: walk geometrically (from 1e-15 relative for
    # sigma, from 1 for T) to a point on the other side, then bisect to 1e-12 relative (adjacent integers for T).
    p = problem.evaluate(u0, None)
    lo, hi = (None, p) if p.met else (p, None)
    for k in range(200):
        if lo is not None and hi is not None:
            break
        if hi is not None:  # only the feasible side is known: move away from privacy
            if hi.u <= problem.u_min:
                return LevelOutcome(kind="all_feasible", lo=None, hi=hi)
            p = problem.evaluate(_move(problem, hi.u, -1, k), None)
        elif lo is not None:  # only the infeasible side is known: move towards privacy
            if lo.u >= problem.u_max:
                return LevelOutcome(kind="infeasible", lo=lo, hi=None)
            p = problem.evaluate(_move(problem, lo.u, +1, k), None)
        if p.met:
            hi = p if hi is None or p.u < hi.u else hi
        else:
            lo = p if lo is None or p.u > lo.u else lo
    else:  # pragma: no cover - would need a broken closed form
        raise CalibrationSearchError("closed-form calibration failed to bracket")
    assert lo is not None and hi is not None  # narrowing only: the loop above breaks only with both sides known
    for _ in range(200):
        if problem.parameter == "steps":
            t_lo, t_hi = problem.param(lo.u), problem.param(hi.u)
            if t_lo - t_hi <= 1:
                break
            mid = -math.log((t_lo + t_hi) // 2)
        else:
            if hi.u - lo.u <= 1e-12:
                break
            mid = 0.5 * (lo.u + hi.u)
        p = problem.evaluate(mid, None)
        if p.met:
            hi = p
        else:
            lo = p
    return LevelOutcome(kind="bracket", lo=lo, hi=hi)


def _move(problem: Problem, u: float, direction: int, k: int) -> float:
    """A point 2^k small steps from u towards privacy (direction=+1) or away from it (-1)."""
    if problem.parameter == "steps":
        return -math.log(max(1, problem.param(u) - direction * 2**k))
    return problem.snap(u + direction * 1e-15 * 2.0**k)
