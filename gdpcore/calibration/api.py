"""Public calibration API: the noise, steps or sampling rate of DP-SGD that meets a target attack risk, certified.

A point is *accepted* only if the target metric on the **pessimistic** curve (:mod:`gdpcore.calibration.evaluator`)
meets the target by a plain float comparison; ``result.achieved`` is that metric and ``result.rejected`` the
neighbouring evaluated parameter that misses it. How the point is found is :mod:`gdpcore.calibration.search`; what a
target is, :mod:`gdpcore.calibration.targets`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

from gdpcore._validation import (
    check_choice,
    check_count,
    check_discretization,
    check_positive,
    check_probability,
    check_tolerance,
)
from gdpcore.calibration.errors import CalibrationInfeasibleError
from gdpcore.calibration.search import REPORT_DELTA, LevelOutcome, Problem, Solution, solve
from gdpcore.calibration.targets import Target, make_target
from gdpcore.mechanisms import SubsampledGaussian
from gdpcore.report import DEFAULT_ALPHA_MIN

__all__ = ["Accountant", "CalibrationResult", "calibrate_noise", "calibrate_sampling_rate", "calibrate_steps"]

Accountant = Literal["auto", "pld"]


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
    # Seed 001 reports a calibration with its (eps, delta) and advantage next to the target: eps at
    # ``epsilon_delta`` (1e-5) and the advantage delta(0) of the returned configuration, from the same curve as
    # ``achieved`` (labels in ``reported_bound_types``). ``requested`` is an accuracy / precision target
    # (kind, value) when one was given (calibrated as the FNR target it converts to, Table 1), with
    # ``requested_achieved`` its value at the returned configuration.
    epsilon: float = math.nan
    epsilon_delta: float = 1e-5
    advantage: float = math.nan
    requested: tuple[str, float] | None = None
    requested_achieved: float | None = None
    reported_bound_types: dict[str, str] = dataclasses.field(default_factory=dict, compare=False)

    @property
    def value(self) -> float | int:
        """The calibrated parameter."""
        value: float | int = getattr(self, self.parameter)
        return value

    @property
    def mechanism(self) -> SubsampledGaussian:
        return SubsampledGaussian(
            noise_multiplier=self.noise_multiplier, sampling_rate=self.sampling_rate, steps=self.steps
        )

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["evaluations_by_discretization"] = [list(x) for x in self.evaluations_by_discretization]
        return out


def _result(problem: Problem, solution: Solution) -> CalibrationResult:
    """The :class:`CalibrationResult` of a solved problem; :class:`CalibrationInfeasibleError` if it has none."""
    target = problem.target
    name = problem.parameter
    outcome, d, bias = solution.outcome, solution.discretization, solution.bias
    if outcome.kind == "infeasible":
        limit = problem.param(problem.u_max)
        pess = outcome.missed.metric
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
        raise CalibrationInfeasibleError(msg)
    hi = outcome.feasible
    args = problem.mechanism_args(hi.u)
    if not (hi.met and target.met(hi.metric)):  # pragma: no cover - the search only accepts met points
        raise AssertionError(f"accepted point does not meet the target: {hi}")
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
        accountant="closed_form.gaussian" if exact else "gdpcore.pld (connect-the-dots, pessimistic)",
        discretization=d,
        tolerance=problem.tolerance,
        evaluations=sum(problem.counts.values()),
        evaluations_by_discretization=by_d,
        discretization_bias_estimate=bias,
        at_limit=outcome.kind == "all_feasible",
        bound_types=labels,
        epsilon=hi.epsilon,
        epsilon_delta=REPORT_DELTA,
        advantage=hi.advantage,
        requested=target.requested,
        requested_achieved=target.requested_metric(hi.metric),
        reported_bound_types={
            "epsilon": "exact" if exact else "upper",
            "advantage": "exact" if exact else "upper",
            "requested_achieved": "exact" if exact else "upper",
        },
    )


# The target keywords every public calibrator takes (explicitly, in its signature) and hands to make_target.
_TARGET_KEYWORDS = (
    "target_advantage",
    "target_tpr",
    "target_fnr",
    "fpr",
    "target_mu",
    "target_epsilon",
    "delta",
    "target_bayes_security",
    "alpha_min",
    "target_accuracy",
    "target_precision",
)


def _target(arguments: dict[str, Any]) -> Target:
    """The validated :class:`Target` of a public calibrator, from its arguments (``locals()`` on entry)."""
    return make_target(**{key: arguments[key] for key in _TARGET_KEYWORDS})


def _check_common(tolerance: Any, discretization: Any, accountant: Any) -> tuple[float, float | None]:
    tol = check_tolerance(tolerance)
    if discretization is not None:
        discretization = check_discretization(discretization)
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
    target_accuracy: float | None = None,
    target_precision: float | None = None,
) -> CalibrationResult:
    """Smallest noise multiplier sigma in [noise_min, noise_max] whose DP-SGD(sigma, q, T) meets the target.

    Exactly one target: ``target_advantage`` (eta*, seed 001 Eq. 13), ``target_tpr`` with ``fpr`` (TPR <= 1 - beta*
    at FPR alpha*, Eq. 18; by Prop. 3.7 this bounds the TPR at every FPR <= alpha*), ``target_fnr`` with ``fpr``
    (f(alpha*) >= beta*), ``target_mu`` (pessimistic mu-GDP certified for FPR >= ``alpha_min``, seed 000 Eq. 21),
    ``target_epsilon`` with ``delta`` (Eq. 2), ``target_bayes_security`` (1 - eta >= beta*), or ``target_accuracy`` /
    ``target_precision`` with ``fpr`` (attack accuracy / PPV at FPR alpha*, balanced prior: seed 001 Table 1, App. C;
    calibrated as the FNR target they convert to, ``result.requested_achieved`` is the accuracy / PPV reached).
    Every result also states eps at delta = 1e-5 (``result.epsilon``) and the advantage (``result.advantage``).

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
    target = _target(locals())
    q = check_probability("sampling_rate", sampling_rate)
    t = check_count("steps", steps)
    tol, d = _check_common(tolerance, discretization, accountant)
    lo_n = check_positive("noise_min", noise_min)
    hi_n = check_positive("noise_max", noise_max)
    if lo_n >= hi_n:
        raise ValueError(f"noise_min must be < noise_max, got noise_min={noise_min!r}, noise_max={noise_max!r}")
    problem = Problem(
        target=target,
        parameter="noise_multiplier",
        fixed={"sampling_rate": q, "steps": t},
        u_min=math.log(lo_n),
        u_max=math.log(hi_n),
        limits=(lo_n, hi_n),
        tolerance=tol,
        exact=(q == 1.0 and accountant == "auto"),
    )
    return _result(problem, solve(problem, discretization=d))


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
    target_accuracy: float | None = None,
    target_precision: float | None = None,
) -> CalibrationResult:
    """Largest number of steps T in [1, steps_max] for which DP-SGD(sigma, q, T) meets the target.

    Same targets, certificate and search as :func:`calibrate_noise` (risk grows with T by composition). The
    bracket closes when the rejected T exceeds the returned one by at most max(1, tolerance * T) (exact for
    T < 1/tolerance). The single-step PLD is built once per discretisation and re-composed. If T = 1 already
    misses the target a ValueError is raised; if ``steps_max`` meets it, it is returned with ``at_limit=True``.
    """
    target = _target(locals())
    sigma = check_positive("noise_multiplier", noise_multiplier)
    q = check_probability("sampling_rate", sampling_rate)
    t_max = check_count("steps_max", steps_max)
    tol, d = _check_common(tolerance, discretization, accountant)
    problem = Problem(
        target=target,
        parameter="steps",
        fixed={"noise_multiplier": sigma, "sampling_rate": q},
        u_min=-math.log(t_max),
        u_max=0.0,
        limits=(t_max, 1),
        tolerance=tol,
        exact=(q == 1.0 and accountant == "auto"),
    )
    return _result(problem, solve(problem, discretization=d))


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
    target_accuracy: float | None = None,
    target_precision: float | None = None,
) -> CalibrationResult:
    """Largest Poisson sampling rate q in [sampling_rate_min, 1] for which DP-SGD(sigma, q, T) meets the target.

    Same targets, certificate and search as :func:`calibrate_noise` (risk grows with q: privacy amplification by
    subsampling). q = 1 is checked first, exactly when ``accountant="auto"`` (the plain Gaussian is
    (sqrt(T)/sigma)-GDP); if it meets the target it is returned with ``at_limit=True``.
    """
    target = _target(locals())
    sigma = check_positive("noise_multiplier", noise_multiplier)
    t = check_count("steps", steps)
    q_min = check_probability("sampling_rate_min", sampling_rate_min, high_open=True)
    tol, d = _check_common(tolerance, discretization, accountant)
    problem = Problem(
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
            exact_problem = Problem(
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
            return _result(
                exact_problem,
                Solution(outcome=LevelOutcome(kind="all_feasible", lo=None, hi=point), discretization=None, bias=0.0),
            )
    return _result(problem, solve(problem, discretization=d))
