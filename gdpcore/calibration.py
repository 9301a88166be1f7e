"""Attack-aware calibration: the noise, steps or sampling rate that meets a target attack risk, certified.

Seed 001 (Kulynych et al. 2024, "Attack-Aware Noise Calibration") calibrates DP-SGD directly to an operational
risk instead of to (eps, delta):

* advantage eta* (Eq. 13/14; Alg. 3: eta = delta(0)),
* attack TPR <= 1 - beta* at FPR alpha*, i.e. f(alpha*) >= beta* (Eq. 18, Prop. 3.7/3.8),
* and, through the same engine, mu-GDP (seed 000 Eq. 21), (eps, delta) (Eq. 2) and Bayes security (1 - eta).

Every risk is monotone in the calibrated parameter (more noise, fewer steps or a smaller sampling rate can only
shrink the trade-off curve's complement: post-processing / subsampling amplification / composition), which is what
justifies bracketing (seed 001 Eq. 9).

Certification. A point is *accepted* only if the risk computed by the **pessimistic** accountant (connect-the-dots
PLD, read as in :mod:`gdpcore.curve`) meets the target by a plain float comparison - never
"within tolerance" on the unsafe side. The returned parameter is such a point, and ``achieved`` is the metric at
it. Because any pessimistic evaluation, at *any* discretisation, is an upper bound on the risk, a coarse
evaluation that meets the target is already a certificate; finer discretisations only make the answer tighter.

Search (why it is fast):

* GDP / CLT start: the target is translated into a mu-GDP equivalent (e.g. mu = Phi^-1(TPR) + Phi^-1(1-alpha) for
  TPR@FPR, mu = 2 Phi^-1((1+eta)/2) for advantage; seed 001 Eqs. 24/26) and the CLT mu = q sqrt(T (e^{1/sigma^2}-1))
  (Dong et al. 2022) is inverted for a first guess. Never used as an answer.
* Root finding is done on y = log(mu-equivalent of the metric) against u = log(parameter), where the curve is
  nearly linear, by a bracketed, Illinois-safeguarded secant that places points a quarter tolerance on the
  feasible side of the predicted root so that the bracket usually closes in two points.
* Coarse-to-fine discretisation: a ladder 4e-3, 1e-3, 2.5e-4, ... (factor 4; connect-the-dots error is
  about quadratic in the step). Each level starts from the previous bracket; a level typically needs 2 points.
  With ``discretization=None`` (default) refinement stops when two consecutive levels agree within the tolerance;
  the remaining discretisation bias of the returned parameter is then *estimated* as a third of that shift.
* Memoisation: no (parameter, discretisation) point is evaluated twice; for ``calibrate_steps`` the single-step
  PLD (and its FFT) is built once per discretisation and only re-composed.
* The evaluator is :mod:`gdpcore.fast_pld` (vectorised connect-the-dots, the same construction as dp_accounting's).

When ``sampling_rate == 1`` (plain Gaussian, composed ``steps`` times) the mechanism is exactly
(sqrt(T)/sigma)-GDP and, with ``accountant="auto"``, the calibration is solved in closed form (seed 001 Cor. B.3 /
B.4) and every number is exact.

Also here: the seed's Table 1 conversions of accuracy / precision / advantage-at-FPR targets into an FNR target
(App. C), and Prop. 3.6's warning - how much TPR at low FPR an advantage-calibrated mechanism gives away.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from scipy import special

from gdpcore import closed_form, fast_pld
from gdpcore._validation import check_choice, check_count, check_positive, check_probability, check_real
from gdpcore.accounting import build_pld, loss_pmfs
from gdpcore.curve import SymmetricCurve, curve_from_loss_pmf
from gdpcore.mechanisms import SubsampledGaussian
from gdpcore.report import DEFAULT_ALPHA_MIN

__all__ = [
    "DISCRETIZATION_LADDER_START",
    "AdvantageCalibrationCost",
    "CalibrationResult",
    "advantage_calibration_cost",
    "advantage_calibration_tpr_gap_bound",
    "calibrate_noise",
    "calibrate_sampling_rate",
    "calibrate_steps",
    "epsilon_for_advantage",
    "fnr_target_from_accuracy",
    "fnr_target_from_advantage",
    "fnr_target_from_precision",
]

DISCRETIZATION_LADDER_START = 4e-3
"""Coarsest discretisation of the coarse-to-fine ladder (each level is 4x finer)."""

_LADDER_FACTOR = 4.0
_ADAPTIVE_FLOOR = 1e-7  # finest level the adaptive ladder may reach ...
_ADAPTIVE_MAX_GRID = 2**20  # ... as long as the next level's profile grid (4x the current one) stays below this
_MAX_EVALS_PER_LEVEL = 60

Accountant = Literal["auto", "pld"]

# ------------------------------------------------------------------------------------------------------------------
# Targets
# ------------------------------------------------------------------------------------------------------------------

_TARGET_LABELS = {
    # name: (bound type of the achieved metric, True if the metric is a risk that must stay <= target)
    "advantage": ("upper", True),
    "tpr": ("upper", True),
    "fnr": ("lower", False),
    "mu": ("upper", True),
    "epsilon": ("upper", True),
    "bayes_security": ("lower", False),
}


@dataclasses.dataclass(frozen=True)
class _Target:
    name: str
    value: float
    fpr: float | None = None
    delta: float | None = None
    alpha_min: float = DEFAULT_ALPHA_MIN

    @property
    def is_risk(self) -> bool:
        return _TARGET_LABELS[self.name][1]

    @property
    def bound(self) -> str:
        return _TARGET_LABELS[self.name][0]

    def describe(self) -> str:
        if self.name in ("tpr", "fnr"):
            return f"{self.name} {'<=' if self.is_risk else '>='} {self.value!r} at fpr={self.fpr!r}"
        if self.name == "epsilon":
            return f"epsilon <= {self.value!r} at delta={self.delta!r}"
        return f"{self.name} {'<=' if self.is_risk else '>='} {self.value!r}"

    def met(self, metric: float) -> bool:
        """The certificate: a plain comparison, no tolerance on the unsafe side."""
        return metric <= self.value if self.is_risk else metric >= self.value

    # metric read off a (pessimistic) curve ---------------------------------------------------------------------
    def metric_from_curve(self, curve: SymmetricCurve) -> float:
        if self.name == "advantage":
            return curve.advantage
        if self.name == "bayes_security":
            return 1.0 - curve.advantage
        if self.name == "tpr":
            return 1.0 - float(curve.fnr(self.fpr))
        if self.name == "fnr":
            return float(curve.fnr(self.fpr))
        if self.name == "mu":
            return curve.mu(alpha_min=self.alpha_min)[0]
        return float(curve.epsilon_at(self.delta))

    def metric_from_gdp(self, mu: float) -> float:
        """Exact metric of mu-GDP (seed 001 Eqs. 22-23; seed 000 Eqs. 4, 30-31)."""
        if self.name == "advantage":
            return closed_form.get_advantage_from_gdp(mu=mu)
        if self.name == "bayes_security":
            return 1.0 - closed_form.get_advantage_from_gdp(mu=mu)
        if self.name == "tpr":
            return 1.0 - float(closed_form.get_beta_from_gdp(mu=mu, alpha=self.fpr))
        if self.name == "fnr":
            return float(closed_form.get_beta_from_gdp(mu=mu, alpha=self.fpr))
        if self.name == "mu":
            return mu
        return float(closed_form.get_epsilon_from_gdp(mu=mu, delta=self.delta))

    def gdp_mu(self, metric: float) -> float:
        """The mu of the Gaussian whose metric equals ``metric`` (inverse of :meth:`metric_from_gdp`).

        Used to linearise the search (and as the exact answer for the plain Gaussian, Cor. B.3/B.4). Returns
        +inf for a metric no Gaussian reaches and 0 for a metric every Gaussian meets.
        """
        if self.name in ("advantage", "bayes_security"):
            adv = metric if self.name == "advantage" else 1.0 - metric
            if adv >= 1.0:
                return math.inf
            return max(0.0, 2.0 * float(special.ndtri((1.0 + adv) / 2.0)))
        if self.name in ("tpr", "fnr"):
            tpr = metric if self.name == "tpr" else 1.0 - metric
            if tpr >= 1.0:
                return math.inf
            if tpr <= 0.0:
                return 0.0
            # Phi^-1(tpr) + Phi^-1(1 - alpha); -ndtri(alpha) keeps tiny alpha exact.
            return max(0.0, float(special.ndtri(tpr)) - float(special.ndtri(self.fpr)))
        if self.name == "mu":
            return max(0.0, metric)
        if not math.isfinite(metric):
            return math.inf
        if closed_form.get_advantage_from_gdp(mu=1e-8) > self.delta and metric <= 0.0:
            return 1e-8
        return closed_form.get_mu_from_epsilon_delta(epsilon=max(0.0, metric), delta=self.delta)

    def log_gdp_mu(self, metric: float) -> float:
        mu = self.gdp_mu(metric)
        if mu == math.inf:
            return math.inf
        return math.log(max(mu, 1e-12))


def _make_target(
    *,
    target_advantage: Any,
    target_tpr: Any,
    target_fnr: Any,
    fpr: Any,
    target_mu: Any,
    target_epsilon: Any,
    delta: Any,
    target_bayes_security: Any,
    alpha_min: Any,
) -> _Target:
    given = {
        "target_advantage": target_advantage,
        "target_tpr": target_tpr,
        "target_fnr": target_fnr,
        "target_mu": target_mu,
        "target_epsilon": target_epsilon,
        "target_bayes_security": target_bayes_security,
    }
    set_ = [k for k, v in given.items() if v is not None]
    if len(set_) != 1:
        raise ValueError(
            f"exactly one target must be given (one of {', '.join(given)}), got "
            + (", ".join(f"{k}={given[k]!r}" for k in set_) if set_ else "none")
        )
    name = set_[0]
    value = given[name]
    alpha_min = check_probability("alpha_min", alpha_min, high_open=True)
    if fpr is not None and name not in ("target_tpr", "target_fnr"):
        raise ValueError(f"fpr={fpr!r} is only meaningful with target_tpr or target_fnr, got {name}={value!r}")
    if delta is not None and name != "target_epsilon":
        raise ValueError(f"delta={delta!r} is only meaningful with target_epsilon, got {name}={value!r}")
    if name == "target_advantage":
        return _Target("advantage", check_probability("target_advantage", value, high_open=True))
    if name == "target_bayes_security":
        return _Target("bayes_security", check_probability("target_bayes_security", value, high_open=True))
    if name in ("target_tpr", "target_fnr"):
        if fpr is None:
            raise ValueError(f"{name}={value!r} needs fpr= (the false-positive rate at which it applies)")
        a = check_probability("fpr", fpr, high_open=True)
        v = check_probability(name, value, high_open=True)
        tpr = v if name == "target_tpr" else 1.0 - v
        if tpr <= a:
            # f(alpha) <= 1 - alpha for every mechanism: the trivial test already reaches TPR = FPR.
            raise ValueError(
                f"{name}={value!r} at fpr={fpr!r} is infeasible: every mechanism allows TPR >= FPR "
                f"(need target_tpr > fpr, i.e. target_fnr + fpr < 1)"
            )
        return _Target("tpr" if name == "target_tpr" else "fnr", v, fpr=a)
    if name == "target_mu":
        return _Target("mu", check_positive("target_mu", value), alpha_min=alpha_min)
    eps = check_real("target_epsilon", value)
    if eps < 0:
        raise ValueError(f"target_epsilon must be >= 0, got {value!r}")
    if delta is None:
        raise ValueError(f"target_epsilon={value!r} needs delta=")
    return _Target("epsilon", eps, delta=check_probability("delta", delta, high_open=True))


# ------------------------------------------------------------------------------------------------------------------
# The evaluator (the only place the accountant is called)
# ------------------------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=16)
def _single_step(noise_multiplier: float, sampling_rate: float, discretization: float, direction: str):
    """One connect-the-dots (pessimistic) step; cached, with its FFTs, so calibrate_steps only re-composes."""
    return fast_pld.single_step_pld(
        noise_multiplier=noise_multiplier,
        sampling_rate=sampling_rate,
        discretization=discretization,
        direction=direction,
    )


def _pessimistic_curve(
    *, noise_multiplier: float, sampling_rate: float, steps: int, discretization: float
) -> SymmetricCurve:
    """Pessimistic symmetric trade-off curve of DP-SGD(sigma, q, T) at one discretisation: the only evaluator.

    The PMFs are :mod:`gdpcore.fast_pld`'s vectorised connect-the-dots construction (dp_accounting's
    ``from_gaussian_mechanism(..., use_connect_dots=True).self_compose(T)`` with exact divergences, cross-checked
    to round-off in tests/test_fast_pld.py, about 10x faster); the curve is read exactly as
    :func:`gdpcore.analyze` reads it (remove PMF above eps >= 0, add PMF as a guard).
    """
    key = (float(noise_multiplier), float(sampling_rate), float(discretization))
    remove = fast_pld.compose_loss_pmf(_single_step(*key, "remove"), steps)
    add = None if sampling_rate == 1.0 else fast_pld.compose_loss_pmf(_single_step(*key, "add"), steps)
    return curve_from_loss_pmf(remove, add)


def _optimistic_metric(target: _Target, *, noise_multiplier: float, sampling_rate: float, steps: int, d: float):
    """Metric on the optimistic twin (an estimate from below of the risk): only decides whether an infeasible
    outcome is worth refining, and is quoted in the error message. Never used to accept a point."""
    mech = SubsampledGaussian(noise_multiplier=noise_multiplier, sampling_rate=sampling_rate, steps=steps)
    remove, _ = loss_pmfs(build_pld(mech, discretization=d, pessimistic=False), pessimistic=False)
    return target.metric_from_curve(curve_from_loss_pmf(remove, None))


# ------------------------------------------------------------------------------------------------------------------
# Result
# ------------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CalibrationResult:
    """A certified calibration.

    ``parameter`` names the calibrated field ("noise_multiplier", "steps" or "sampling_rate"); the other two are
    the fixed inputs. ``achieved`` is the target metric at the returned parameter, computed by the pessimistic
    accountant at ``discretization`` (or exactly, ``accountant == "closed_form.gaussian"``); it always meets the
    target. ``rejected`` is the neighbouring parameter value that was evaluated (same accountant and
    discretisation) and does *not* meet the target, with its metric ``rejected_achieved``: the optimum under this
    accountant lies between ``rejected`` and the returned value (``None`` when the answer sits at a search limit).
    ``bound_types`` says what each number is.
    """

    parameter: str
    noise_multiplier: float
    sampling_rate: float
    steps: int
    target: str
    target_value: float
    fpr: float | None
    delta: float | None
    achieved: float
    rejected: float | int | None
    rejected_achieved: float | None
    accountant: str
    discretization: float | None
    tolerance: float
    evaluations: int
    evaluations_by_discretization: tuple[tuple[float | None, int], ...]
    discretization_bias_estimate: float | None
    at_limit: bool
    bound_types: dict[str, str] = dataclasses.field(compare=False)

    @property
    def value(self) -> float | int:
        """The calibrated parameter."""
        return getattr(self, self.parameter)

    @property
    def mechanism(self) -> SubsampledGaussian:
        return SubsampledGaussian(
            noise_multiplier=self.noise_multiplier, sampling_rate=self.sampling_rate, steps=self.steps
        )

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["evaluations_by_discretization"] = [list(x) for x in self.evaluations_by_discretization]
        return out


# ------------------------------------------------------------------------------------------------------------------
# The search engine
# ------------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class _Point:
    u: float
    met: bool
    metric: float
    y: float  # log mu-equivalent minus log target mu-equivalent (> 0: too risky), for interpolation only


class _Problem:
    """One calibration: maps a search coordinate u to the parameter and evaluates, memoised.

    Convention: the feasible set is {u >= u*} (u grows towards privacy): u = log sigma, u = -log q, u = -log T.
    """

    def __init__(
        self,
        *,
        target: _Target,
        parameter: str,
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
        self.memo: dict[tuple[Any, float | None], _Point] = {}
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
    def evaluate(self, u: float, d: float | None) -> _Point:
        u = self.snap(u)
        key = (self.param(u), d)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        args = self.mechanism_args(u)
        if d is None:
            mu = math.sqrt(args["steps"]) / args["noise_multiplier"]
            metric = self.target.metric_from_gdp(mu)
        else:
            curve = _pessimistic_curve(
                noise_multiplier=args["noise_multiplier"],
                sampling_rate=args["sampling_rate"],
                steps=args["steps"],
                discretization=d,
            )
            metric = self.target.metric_from_curve(curve)
            self.grid_sizes[d] = max(self.grid_sizes.get(d, 0), int(curve.eps.size))
        met = self.target.met(metric)
        y = self.target.log_gdp_mu(metric) - self.y_target
        point = _Point(u=u, met=met, metric=float(metric), y=y)
        self.memo[key] = point
        self.counts[d] = self.counts.get(d, 0) + 1
        return point

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


@dataclasses.dataclass
class _LevelOutcome:
    kind: str  # "bracket", "all_feasible" (u_min meets the target), "infeasible" (u_max does not)
    lo: _Point | None
    hi: _Point | None


def _solve_level(problem: _Problem, d: float | None, start: float, seeds: Sequence[float] = ()) -> _LevelOutcome:
    """Bracket and narrow the root at one discretisation, starting near ``start``.

    Points in ``seeds`` are evaluated first (the previous level's bracket, lowest first).
    """
    tol_u = math.log1p(problem.tolerance) if problem.parameter != "steps" else None
    lo: _Point | None = None
    hi: _Point | None = None

    def absorb(p: _Point) -> None:
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
        if n_eval > _MAX_EVALS_PER_LEVEL:
            raise RuntimeError("calibration failed to bracket the target (risk not monotone?)")
        if lo is None and hi is None:
            p = problem.evaluate(u, d)
        else:
            ref = hi if lo is None else lo
            if lo is None and ref.u <= problem.u_min:
                return _LevelOutcome("all_feasible", None, ref)
            if hi is None and ref.u >= problem.u_max:
                return _LevelOutcome("infeasible", ref, None)
            y = ref.y if math.isfinite(ref.y) else (1.0 if not ref.met else -1.0)
            newton = -y / slope
            size = max(abs(newton) * 1.3 * growth, 2 * step_tol(ref.u) * growth)
            target_u = ref.u + (size if hi is None else -size)
            p = problem.evaluate(target_u, d)
            if p.u == ref.u:  # snapped onto the limit already evaluated
                return _LevelOutcome("all_feasible", None, ref) if ref.met else _LevelOutcome("infeasible", ref, None)
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
        if n_eval > _MAX_EVALS_PER_LEVEL:
            raise RuntimeError("calibration did not converge (risk not monotone?)")
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
    return _LevelOutcome("bracket", lo, hi)


def _ladder(discretization: float | None) -> list[float]:
    """Fixed discretisation: coarse levels 4^k x d (<= 4e-3) ending at d. Adaptive: 4e-3 / 4^k down to 1e-7."""
    if discretization is None:
        out, d = [], DISCRETIZATION_LADDER_START
        while d >= _ADAPTIVE_FLOOR * 0.999:
            out.append(d)
            d /= _LADDER_FACTOR
        return out
    out = [discretization]
    while out[-1] * _LADDER_FACTOR <= DISCRETIZATION_LADDER_START * 1.0001:
        out.append(out[-1] * _LADDER_FACTOR)
    return out[::-1]


def _run(problem: _Problem, *, discretization: float | None) -> CalibrationResult:
    if problem.exact:
        outcome = _solve_exact(problem)
        levels: list[float | None] = [None]
        final_d = None
        bias = 0.0
        final = outcome
    else:
        levels = list(_ladder(discretization))
        adaptive = discretization is None
        start = problem.clt_guess()
        seeds: list[float] = []
        prev: _LevelOutcome | None = None
        final = None
        final_d = levels[-1]
        bias = None
        for i, d in enumerate(levels):
            outcome = _solve_level(problem, d, start, seeds)
            is_last = i == len(levels) - 1 or (
                # Adaptive: stop refining before a level whose grid would exceed the memory budget.
                adaptive and problem.grid_sizes.get(d, 0) * _LADDER_FACTOR > _ADAPTIVE_MAX_GRID
            )
            if outcome.kind == "infeasible":
                # A miss at the most private end is inconclusive unless the optimistic twin (dp_accounting's
                # rounded-down PLD, an estimate from below of the risk) misses too; then refining will not help.
                args = problem.mechanism_args(problem.u_max)
                opt = _optimistic_metric(
                    problem.target,
                    noise_multiplier=args["noise_multiplier"],
                    sampling_rate=args["sampling_rate"],
                    steps=args["steps"],
                    d=d,
                )
                problem.optimistic[d] = opt
                if not problem.target.met(opt) or is_last:
                    final, final_d = outcome, d
                    break
            if outcome.kind == "all_feasible":
                # Certified at this (coarse) level already: a pessimistic bound meeting the target at the
                # search limit is a valid answer at any finer discretisation.
                final, final_d = outcome, d
                bias = 0.0
                break
            if (adaptive and prev is not None and _agree(problem, prev, outcome)) or is_last:
                final, final_d = outcome, d
                bias = None if prev is None else _bias_estimate(problem, prev, outcome, levels[i - 1], d)
                break
            prev = outcome
            if outcome.kind == "bracket":
                start = outcome.hi.u
                seeds = [outcome.lo.u, outcome.hi.u]
            else:  # infeasible at u_max at this level: re-check the limit first at the finer level
                start = problem.u_max
                seeds = [problem.u_max]
        assert final is not None
    return _finish(problem, final, final_d, bias)


def _agree(problem: _Problem, a: _LevelOutcome, b: _LevelOutcome) -> bool:
    if a.kind != "bracket" or b.kind != "bracket":
        return False
    if problem.parameter == "steps":
        t_a, t_b = problem.param(a.hi.u), problem.param(b.hi.u)
        return abs(t_a - t_b) <= max(1, int(problem.tolerance * t_b))
    return _shift(problem, a, b) <= problem.tolerance


def _shift(problem: _Problem, a: _LevelOutcome, b: _LevelOutcome) -> float:
    """Relative change of the accepted parameter between two levels (the discretisation-bias estimate)."""
    if a.hi is None or b.hi is None:
        return 0.0 if a.kind == b.kind else math.inf
    pa, pb = problem.param(a.hi.u), problem.param(b.hi.u)
    return abs(pa - pb) / max(abs(pb), 1e-300)


def _bias_estimate(
    problem: _Problem, prev: _LevelOutcome, final: _LevelOutcome, d_prev: float, d_final: float
) -> float | None:
    """Estimated relative discretisation bias of the returned parameter (an *estimate*, never used to certify).

    The metric of one parameter value evaluated at both of the last two levels gives the level-to-level shift of
    the root (metric change / local slope of y(u)); connect-the-dots error shrinks at least 4x per 4x finer step
    (measured: about 16x), so the bias left at the final level is at most a third of that shift.
    """
    if final.kind != "bracket":
        return None
    lo, hi = final.lo, final.hi
    slope = (hi.y - lo.y) / (hi.u - lo.u) if hi.u != lo.u else math.nan
    for p in (hi, lo):
        old = problem.memo.get((problem.param(p.u), d_prev))
        if old is not None and math.isfinite(old.y) and math.isfinite(p.y) and math.isfinite(slope) and slope < 0:
            return math.expm1(abs(old.y - p.y) / abs(slope) / 3.0)
    shift = _shift(problem, prev, final)
    return shift / 3.0 if math.isfinite(shift) else None


def _solve_exact(problem: _Problem) -> _LevelOutcome:
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
        if lo is None:
            if hi.u <= problem.u_min:
                return _LevelOutcome("all_feasible", None, hi)
            p = problem.evaluate(_move(problem, hi.u, -1, k), None)
        else:
            if lo.u >= problem.u_max:
                return _LevelOutcome("infeasible", lo, None)
            p = problem.evaluate(_move(problem, lo.u, +1, k), None)
        if p.met:
            hi = p if hi is None or p.u < hi.u else hi
        else:
            lo = p if lo is None or p.u > lo.u else lo
    else:  # pragma: no cover - would need a broken closed form
        raise RuntimeError("closed-form calibration failed to bracket")
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
    return _LevelOutcome("bracket", lo, hi)


def _move(problem: _Problem, u: float, direction: int, k: int) -> float:
    """A point 2^k small steps from u towards privacy (direction=+1) or away from it (-1)."""
    if problem.parameter == "steps":
        return -math.log(max(1, problem.param(u) - direction * 2**k))
    return problem.snap(u + direction * 1e-15 * 2.0**k)


def _finish(problem: _Problem, outcome: _LevelOutcome, d: float | None, bias: float | None) -> CalibrationResult:
    target = problem.target
    name = problem.parameter
    if outcome.kind == "infeasible":
        limit = problem.param(problem.u_max)
        pess = outcome.lo.metric
        msg = (
            f"target {target.describe()} is infeasible for {name} in the allowed range: at {name}={limit!r} "
            f"(the most private end) {'the closed form' if d is None else 'the pessimistic accountant'} gives "
            f"{target.name}={pess!r}"
        )
        if d is None:
            msg += " (closed form, exact: certainly infeasible)"
        opt = problem.optimistic.get(d) if d is not None else None
        if opt is not None:
            if target.met(opt):
                msg += (
                    f"; the optimistic estimate ({opt!r}) does meet it, so the target may be reachable but cannot be"
                    f" certified at discretization={d!r} - use a finer discretization or widen the range"
                )
            else:
                msg += (
                    f"; the optimistic estimate ({opt!r}, dp_accounting's rounded-down PLD) misses it too: "
                    "infeasible up to the accountant's discretisation error"
                )
        raise ValueError(msg)
    hi = outcome.hi
    args = problem.mechanism_args(hi.u)
    assert hi.met and target.met(hi.metric)
    param_bound = {"noise_multiplier": "upper", "steps": "lower", "sampling_rate": "lower"}[name]
    exact = d is None
    labels = {
        "achieved": "exact" if exact else target.bound,
        name: "exact" if exact and outcome.kind == "bracket" else param_bound,
        "discretization_bias_estimate": "estimate",
    }
    by_d = tuple(sorted(problem.counts.items(), key=lambda kv: -(kv[0] or 0.0)))
    return CalibrationResult(
        parameter=name,
        noise_multiplier=float(args["noise_multiplier"]),
        sampling_rate=float(args["sampling_rate"]),
        steps=int(args["steps"]),
        target=target.name,
        target_value=target.value,
        fpr=target.fpr,
        delta=target.delta,
        achieved=hi.metric,
        rejected=None if outcome.lo is None else problem.param(outcome.lo.u),
        rejected_achieved=None if outcome.lo is None else outcome.lo.metric,
        accountant="closed_form.gaussian" if exact else "gdpcore.fast_pld (connect-the-dots, pessimistic)",
        discretization=d,
        tolerance=problem.tolerance,
        evaluations=sum(problem.counts.values()),
        evaluations_by_discretization=by_d,
        discretization_bias_estimate=bias,
        at_limit=outcome.kind == "all_feasible",
        bound_types=labels,
    )


# ------------------------------------------------------------------------------------------------------------------
# Public API
# ------------------------------------------------------------------------------------------------------------------


def _check_common(tolerance: Any, discretization: Any, accountant: Any) -> tuple[float, float | None]:
    tol = check_positive("tolerance", tolerance)
    if tol >= 0.5:
        raise ValueError(f"tolerance must be < 0.5 (relative), got {tolerance!r}")
    if discretization is not None:
        d = check_positive("discretization", discretization)
        if d > 0.1:
            raise ValueError(f"discretization must be in (0, 0.1], got {discretization!r}")
        discretization = d
    check_choice("accountant", accountant, ("auto", "pld"))
    return tol, discretization


def calibrate_noise(
    *,
    sampling_rate: float,
    steps: int,
    target_advantage: float | None = None,
    target_tpr: float | None = None,
    target_fnr: float | None = None,
    fpr: float | None = None,
    target_mu: float | None = None,
    target_epsilon: float | None = None,
    delta: float | None = None,
    target_bayes_security: float | None = None,
    tolerance: float = 1e-3,
    discretization: float | None = None,
    noise_min: float = 0.1,
    noise_max: float = 100.0,
    alpha_min: float = DEFAULT_ALPHA_MIN,
    accountant: Accountant = "auto",
) -> CalibrationResult:
    """Smallest noise multiplier sigma in [noise_min, noise_max] whose DP-SGD(sigma, q, T) meets the target.

    Exactly one target: ``target_advantage`` (eta*, seed 001 Eq. 13), ``target_tpr`` with ``fpr`` (TPR <= 1 - beta*
    at FPR alpha*, Eq. 18; by Prop. 3.7 this bounds the TPR at every FPR <= alpha*), ``target_fnr`` with ``fpr``
    (f(alpha*) >= beta*), ``target_mu`` (pessimistic mu-GDP certified for FPR >= ``alpha_min``, seed 000 Eq. 21),
    ``target_epsilon`` with ``delta`` (Eq. 2) or ``target_bayes_security`` (1 - eta >= beta*).

    Certified: ``result.achieved`` is the metric under the pessimistic accountant at ``result.noise_multiplier``
    and meets the target (plain comparison). ``result.rejected`` is a sigma below it, within ``tolerance``
    (relative), that does not - so the returned sigma is minimal under this accountant up to ``tolerance``.
    ``discretization=None`` refines adaptively (coarse to fine) until two levels agree within ``tolerance``;
    give a float to certify at exactly that discretisation. ``sampling_rate == 1`` with ``accountant="auto"`` uses
    the exact closed form (Cor. B.3/B.4).

    Raises ValueError for malformed input (naming the field) and when the target cannot be met with
    sigma <= noise_max (quoting the optimistic estimate there, to tell "infeasible" from "not certifiable"). If even ``noise_min`` meets the target,
    it is returned with ``at_limit=True``.
    """
    target = _make_target(
        target_advantage=target_advantage,
        target_tpr=target_tpr,
        target_fnr=target_fnr,
        fpr=fpr,
        target_mu=target_mu,
        target_epsilon=target_epsilon,
        delta=delta,
        target_bayes_security=target_bayes_security,
        alpha_min=alpha_min,
    )
    q = check_probability("sampling_rate", sampling_rate)
    t = check_count("steps", steps)
    tol, d = _check_common(tolerance, discretization, accountant)
    lo_n = check_positive("noise_min", noise_min)
    hi_n = check_positive("noise_max", noise_max)
    if lo_n >= hi_n:
        raise ValueError(f"noise_min must be < noise_max, got noise_min={noise_min!r}, noise_max={noise_max!r}")
    problem = _Problem(
        target=target,
        parameter="noise_multiplier",
        fixed={"sampling_rate": q, "steps": t},
        u_min=math.log(lo_n),
        u_max=math.log(hi_n),
        limits=(lo_n, hi_n),
        tolerance=tol,
        exact=(q == 1.0 and accountant == "auto"),
    )
    return _run(problem, discretization=d)


def calibrate_steps(
    *,
    noise_multiplier: float,
    sampling_rate: float,
    target_advantage: float | None = None,
    target_tpr: float | None = None,
    target_fnr: float | None = None,
    fpr: float | None = None,
    target_mu: float | None = None,
    target_epsilon: float | None = None,
    delta: float | None = None,
    target_bayes_security: float | None = None,
    tolerance: float = 1e-3,
    discretization: float | None = None,
    steps_max: int = 10**6,
    alpha_min: float = DEFAULT_ALPHA_MIN,
    accountant: Accountant = "auto",
) -> CalibrationResult:
    """Largest number of steps T in [1, steps_max] for which DP-SGD(sigma, q, T) meets the target.

    Same targets, certificate and search as :func:`calibrate_noise` (risk grows with T by composition). The
    bracket closes when the rejected T exceeds the returned one by at most max(1, tolerance * T) (exact for
    T < 1/tolerance). The single-step PLD is built once per discretisation and re-composed. If T = 1 already
    misses the target a ValueError is raised; if ``steps_max`` meets it, it is returned with ``at_limit=True``.
    """
    target = _make_target(
        target_advantage=target_advantage,
        target_tpr=target_tpr,
        target_fnr=target_fnr,
        fpr=fpr,
        target_mu=target_mu,
        target_epsilon=target_epsilon,
        delta=delta,
        target_bayes_security=target_bayes_security,
        alpha_min=alpha_min,
    )
    sigma = check_positive("noise_multiplier", noise_multiplier)
    q = check_probability("sampling_rate", sampling_rate)
    t_max = check_count("steps_max", steps_max)
    tol, d = _check_common(tolerance, discretization, accountant)
    problem = _Problem(
        target=target,
        parameter="steps",
        fixed={"noise_multiplier": sigma, "sampling_rate": q},
        u_min=-math.log(t_max),
        u_max=0.0,
        limits=(t_max, 1),
        tolerance=tol,
        exact=(q == 1.0 and accountant == "auto"),
    )
    return _run(problem, discretization=d)


def calibrate_sampling_rate(
    *,
    noise_multiplier: float,
    steps: int,
    target_advantage: float | None = None,
    target_tpr: float | None = None,
    target_fnr: float | None = None,
    fpr: float | None = None,
    target_mu: float | None = None,
    target_epsilon: float | None = None,
    delta: float | None = None,
    target_bayes_security: float | None = None,
    tolerance: float = 1e-3,
    discretization: float | None = None,
    sampling_rate_min: float = 1e-5,
    alpha_min: float = DEFAULT_ALPHA_MIN,
    accountant: Accountant = "auto",
) -> CalibrationResult:
    """Largest Poisson sampling rate q in [sampling_rate_min, 1] for which DP-SGD(sigma, q, T) meets the target.

    Same targets, certificate and search as :func:`calibrate_noise` (risk grows with q: privacy amplification by
    subsampling). q = 1 is checked first, exactly when ``accountant="auto"`` (the plain Gaussian is
    (sqrt(T)/sigma)-GDP); if it meets the target it is returned with ``at_limit=True``.
    """
    target = _make_target(
        target_advantage=target_advantage,
        target_tpr=target_tpr,
        target_fnr=target_fnr,
        fpr=fpr,
        target_mu=target_mu,
        target_epsilon=target_epsilon,
        delta=delta,
        target_bayes_security=target_bayes_security,
        alpha_min=alpha_min,
    )
    sigma = check_positive("noise_multiplier", noise_multiplier)
    t = check_count("steps", steps)
    q_min = check_probability("sampling_rate_min", sampling_rate_min, high_open=True)
    tol, d = _check_common(tolerance, discretization, accountant)
    problem = _Problem(
        target=target,
        parameter="sampling_rate",
        fixed={"noise_multiplier": sigma, "steps": t},
        u_min=0.0,
        u_max=-math.log(q_min),
        limits=(1.0, q_min),
        tolerance=tol,
        exact=False,
    )
    if accountant == "auto":
        # q = 1 is the plain Gaussian: decide it exactly (a pessimistic miss there would be inconclusive).
        mu = math.sqrt(t) / sigma
        metric = target.metric_from_gdp(mu)
        if target.met(metric):
            exact_problem = _Problem(
                target=target,
                parameter="sampling_rate",
                fixed=problem.fixed,
                u_min=0.0,
                u_max=problem.u_max,
                limits=problem.limits,
                tolerance=tol,
                exact=True,
            )
            point = exact_problem.evaluate(0.0, None)
            return _finish(exact_problem, _LevelOutcome("all_feasible", None, point), None, 0.0)
    return _run(problem, discretization=d)


# ------------------------------------------------------------------------------------------------------------------
# Table 1 conversions (seed 001 App. C) and Prop. 3.6
# ------------------------------------------------------------------------------------------------------------------


def _check_fnr_target(name: str, value: float, fnr: float, fpr: float, risk=None) -> float:
    # Round the FNR target *up* (the strict side) so that float round-off in the conversion, and in 1 - FNR later,
    # cannot turn a certified FNR into a missed accuracy / precision / advantage target.
    fnr = fnr + 4e-16
    if risk is not None:
        for _ in range(64):
            if risk(1.0 - fnr) <= value:
                break
            fnr = float(np.nextafter(fnr, 2.0))
    if not (0.0 < fnr < 1.0 - fpr):
        raise ValueError(
            f"{name}={value!r} at fpr={fpr!r} gives FNR target {fnr!r}, outside (0, 1 - fpr): "
            + ("no attack can be held to it (infeasible)" if fnr >= 1.0 - fpr else "the constraint is vacuous")
        )
    return fnr


def fnr_target_from_advantage(*, advantage: float, fpr: float) -> float:
    """beta* = 1 - alpha* - eta*: TPR - FPR <= eta* at FPR alpha* (seed 001 Table 1, row 1)."""
    eta = check_probability("advantage", advantage, high_open=True)
    a = check_probability("fpr", fpr, high_open=True)
    return _check_fnr_target("advantage", advantage, 1.0 - a - eta, a, lambda tpr: tpr - a)


def fnr_target_from_accuracy(*, accuracy: float, fpr: float) -> float:
    """beta* = 2 (1 - acc*) - alpha*: attack accuracy (1/2)((1 - alpha) + (1 - beta)) <= acc* at FPR alpha*.

    Seed 001 Table 1, row 2 (accuracy as in Rezaei & Liu 2021, balanced prior). Needs 1/2 < acc* < 1 - alpha*/2.
    """
    acc = check_probability("accuracy", accuracy, high_open=True)
    a = check_probability("fpr", fpr, high_open=True)
    return _check_fnr_target("accuracy", accuracy, 2.0 * (1.0 - acc) - a, a, lambda tpr: 0.5 * ((1.0 - a) + tpr))


def fnr_target_from_precision(*, precision: float, fpr: float) -> float:
    """beta* = ((alpha* + 1) ppv* - 1) / (ppv* - 1): attack precision (1 - beta)/(1 - beta + alpha) <= ppv* at alpha*.

    Seed 001 Table 1, row 3 with Eq. (27) (balanced prior). Solving ppv = TPR/(TPR + alpha) for TPR gives
    TPR = ppv alpha / (1 - ppv). Needs ppv* > 1/2 (random guessing already reaches 1/2).
    """
    ppv = check_probability("precision", precision, high_open=True)
    a = check_probability("fpr", fpr, high_open=True)
    return _check_fnr_target(
        "precision", precision, ((a + 1.0) * ppv - 1.0) / (ppv - 1.0), a, lambda tpr: tpr / (tpr + a)
    )


def epsilon_for_advantage(*, advantage: float, delta: float) -> float:
    """Standard-calibration eps* for a target advantage at delta* (seed 001 Eq. 30, from Kairouz et al. Eq. 8).

    eps* = log((1 + eta* - 2 delta*) / (1 - eta*)); for delta* >= eta*, eps* = 0 already suffices and 0 is
    returned.
    """
    eta = check_probability("advantage", advantage, high_open=True)
    dl = check_probability("delta", delta, high_open=True)
    return max(0.0, math.log((1.0 + eta - 2.0 * dl) / (1.0 - eta)))


def advantage_calibration_tpr_gap_bound(*, target_advantage: float, fpr: float, delta: float) -> float:
    """Worst-case extra attack TPR at FPR alpha of advantage calibration over standard calibration (Prop. 3.6).

    Delta_beta(alpha) = f_standard(alpha) - f_adv(alpha) >= eta* - delta* + 2 alpha (eta* - delta*)/(eta* - 1)
    = (eta* - delta*)(1 - 2 alpha/(1 - eta*))  (Eq. 15 / Eq. 32), attained by Kairouz et al.'s four-point
    mechanism. Valid for delta* < eta* < 1 and 0 < alpha < (1 - eta*)/2. E.g. eta* = 0.5, alpha = 0.1,
    delta* = 1e-5 gives 0.299994 (the paper's "30 p.p.").

    What it is: the exact gap of the generic mechanism whose curves are the (eps*, delta*) and (0, eta*) curves of
    Eq. 5, hence a *lower* bound on the worst case over mechanisms - not an upper bound for a given mechanism. A
    real mechanism can give away more: the Gaussian at eta* = 0.5 gives away 0.366 at alpha = 0.1, because its
    standard-calibrated curve lies far above the generic (eps*, delta*) curve. See
    :func:`advantage_calibration_cost` for the gap of an actual configuration.
    """
    eta = check_probability("target_advantage", target_advantage, high_open=True)
    a = check_probability("fpr", fpr, high_open=True)
    dl = check_probability("delta", delta, high_open=True)
    if not dl < eta:
        raise ValueError(
            f"delta must be < target_advantage, got delta={delta!r}, target_advantage={target_advantage!r}"
        )
    if not a < (1.0 - eta) / 2.0:
        raise ValueError(f"fpr must be < (1 - target_advantage)/2 = {(1.0 - eta) / 2.0!r}, got {fpr!r}")
    return (eta - dl) * (1.0 - 2.0 * a / (1.0 - eta))


@dataclasses.dataclass(frozen=True)
class AdvantageCalibrationCost:
    """Prop. 3.6 for one configuration: what an advantage-calibrated DP-SGD gives away at low FPR.

    ``advantage`` is calibrated directly (Eq. 13); ``standard`` is the standard calibration to the same advantage
    through (eps*, delta*) with eps* from Eq. 30. ``tpr_advantage`` / ``tpr_standard`` are the attack TPR at each
    of ``fprs`` under the pessimistic accountant (upper bounds); ``tpr_given_away`` is their difference (an
    estimate: a difference of two upper bounds). ``generic_gap`` is Eq. 15's gap of the generic (eps, delta)
    mechanism at each FPR (NaN where Eq. 15 does not apply) for comparison; it does not bound ``tpr_given_away``.
    """

    target_advantage: float
    delta: float
    epsilon_standard: float
    advantage: CalibrationResult
    standard: CalibrationResult
    fprs: tuple[float, ...]
    tpr_advantage: tuple[float, ...]
    tpr_standard: tuple[float, ...]
    tpr_given_away: tuple[float, ...]
    generic_gap: tuple[float, ...]
    bound_types: dict[str, str] = dataclasses.field(compare=False)

    @property
    def noise_ratio(self) -> float:
        """sigma_standard / sigma_advantage: how much less noise advantage calibration uses (estimate)."""
        return self.standard.noise_multiplier / self.advantage.noise_multiplier


def advantage_calibration_cost(
    *,
    sampling_rate: float,
    steps: int,
    target_advantage: float,
    delta: float = 1e-5,
    fprs: Sequence[float] = (1e-3, 1e-2, 1e-1),
    tolerance: float = 1e-3,
    discretization: float | None = None,
    accountant: Accountant = "auto",
) -> AdvantageCalibrationCost:
    """Calibrate to ``target_advantage`` both directly and by standard (eps*, delta) calibration; compare TPRs.

    Seed 001 Prop. 3.6 / Fig. 3b: advantage calibration needs far less noise but lets the attack TPR at low FPR
    rise; this quantifies the rise for the actual mechanism (the generic worst case is
    :func:`advantage_calibration_tpr_gap_bound`).
    """
    eta = check_probability("target_advantage", target_advantage, high_open=True)
    dl = check_probability("delta", delta, high_open=True)
    if not isinstance(fprs, Sequence) or isinstance(fprs, str) or not fprs:
        raise ValueError(f"fprs must be a non-empty sequence of probabilities, got {fprs!r}")
    alphas = tuple(check_probability("fprs", a, high_open=True) for a in fprs)
    eps_std = epsilon_for_advantage(advantage=eta, delta=dl)
    common = {
        "sampling_rate": sampling_rate,
        "steps": steps,
        "tolerance": tolerance,
        "discretization": discretization,
        "accountant": accountant,
    }
    adv = calibrate_noise(target_advantage=eta, **common)
    std = calibrate_noise(target_epsilon=eps_std, delta=dl, **common)
    tpr_adv = _tprs(adv, alphas)
    tpr_std = _tprs(std, alphas)
    gaps = []
    for a in alphas:
        if dl < eta and a < (1.0 - eta) / 2.0:
            gaps.append(advantage_calibration_tpr_gap_bound(target_advantage=eta, fpr=a, delta=dl))
        else:
            gaps.append(math.nan)
    exact = adv.discretization is None
    return AdvantageCalibrationCost(
        target_advantage=eta,
        delta=dl,
        epsilon_standard=eps_std,
        advantage=adv,
        standard=std,
        fprs=alphas,
        tpr_advantage=tpr_adv,
        tpr_standard=tpr_std,
        tpr_given_away=tuple(x - y for x, y in zip(tpr_adv, tpr_std, strict=True)),
        generic_gap=tuple(gaps),
        bound_types={
            "tpr_advantage": "exact" if exact else "upper",
            "tpr_standard": "exact" if exact else "upper",
            "tpr_given_away": "exact" if exact else "estimate",
            "generic_gap": "exact",
        },
    )


def _tprs(result: CalibrationResult, alphas: tuple[float, ...]) -> tuple[float, ...]:
    if result.discretization is None:
        mu = math.sqrt(result.steps) / result.noise_multiplier
        return tuple(1.0 - float(closed_form.get_beta_from_gdp(mu=mu, alpha=a)) for a in alphas)
    curve = _pessimistic_curve(
        noise_multiplier=result.noise_multiplier,
        sampling_rate=result.sampling_rate,
        steps=result.steps,
        discretization=result.discretization,
    )
    return tuple(1.0 - float(curve.fnr(a)) for a in alphas)
