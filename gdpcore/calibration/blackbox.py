"""Calibration through any external accountant (seed 001 Sec. 3.3 and App. A): the accountant is a callable, either
epsilon(omega, delta) (e.g. an RDP accountant's conversion, a PRV accountant's upper end) or delta(omega, epsilon),
for the parameter omega being calibrated (noise multiplier, steps, sampling rate, or anything the accountant reads).

* Advantage / Bayes security (Eq. 19): omega meets eta* iff delta_omega(0) <= eta*, or eps_omega(eta*) <= 0.
* TPR / FNR / attack accuracy / precision at FPR alpha* (Eq. 20, Table 1): the accountant's (eps_i, delta_i) pairs -
  on a delta grid for eps(delta), on an eps grid for delta(eps) - each imply f >= f_{eps_i, delta_i} (Dong et al.
  2022 Prop. 2.5), so f_omega(alpha*) >= sup_i max{0, 1 - delta_i - e^{eps_i} alpha*, e^{-eps_i}(1 - delta_i -
  alpha*)}: a *lower* bound on the FNR whenever the accountant's numbers are upper bounds.
* (eps, delta) targets: read directly (eps(delta*) <= eps*, or delta(eps*) <= delta*).

The risk must be monotone in omega (``more_private="increasing"``: more omega, more privacy, as for noise;
"decreasing" for steps or sampling rates); the search is a bisection in log omega to relative ``tolerance`` (integer
omega: to a gap of 1), u ceil(log2 v) accountant calls as Eq. 21 counts. The answer is certified *relative to the
accountant*: it is exactly as trustworthy as the callable's numbers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from gdpcore._validation import bounded_repr, check_choice, check_positive, check_tolerance
from gdpcore.calibration.errors import CalibrationInfeasibleError
from gdpcore.calibration.search import REPORT_DELTA
from gdpcore.calibration.targets import Target, make_target

__all__ = ["DEFAULT_DELTA_GRID", "DEFAULT_EPSILON_GRID", "BlackBoxCalibration", "calibrate_with_accountant"]

DEFAULT_DELTA_GRID: tuple[float, ...] = tuple(float(x) for x in np.geomspace(1e-12, 0.5, 61))
"""The delta grid of Eq. 20 for an eps(delta) accountant (u = 61 calls per evaluation)."""
DEFAULT_EPSILON_GRID: tuple[float, ...] = tuple(float(x) for x in np.linspace(0.0, 20.0, 201))
"""The eps grid of Eq. 20 for a delta(eps) accountant (the Prop. D.1 form, eps in [0, 20])."""


@dataclasses.dataclass(frozen=True)
class BlackBoxCalibration:
    """A calibration through an external accountant. ``value`` meets the target by the accountant's numbers
    (``achieved``: the target metric there, a bound of the kind ``bound_types`` says); ``rejected`` is the evaluated
    value on the other side of the bracket that does not (None at a search limit, ``at_limit``). ``epsilon`` is eps at
    ``epsilon_delta`` (1e-5) and ``advantage`` an upper bound on delta(0), both at ``value`` and from the same
    accountant (nan when it cannot say: eps from a delta(eps) accountant is bisected on its eps grid)."""

    value: float
    rejected: float | None
    target: str
    achieved: float
    epsilon: float
    epsilon_delta: float
    advantage: float
    at_limit: bool
    evaluations: int
    accountant_calls: int
    bound_types: dict[str, str]
    requested: tuple[str, float] | None = None  # an accuracy / precision target (kind, value), Table 1
    requested_achieved: float | None = None
    source: str = "seed 001 Sec. 3.3 / App. A (Eqs. 19-21) through an external accountant"


class _Accountant:
    """The user's callable, counted, with its outputs checked (a clear error naming the call on bad output)."""

    def __init__(self, epsilon_fn: Any, delta_fn: Any) -> None:
        if (epsilon_fn is None) == (delta_fn is None):
            raise ValueError(
                "exactly one of epsilon_fn=(omega, delta) -> eps or delta_fn=(omega, eps) -> delta is needed"
            )
        for name, fn in (("epsilon_fn", epsilon_fn), ("delta_fn", delta_fn)):
            if fn is not None and not callable(fn):
                raise ValueError(f"{name} must be a callable, got {bounded_repr(fn)}")
        self.epsilon_fn: Callable[[float, float], float] | None = epsilon_fn
        self.delta_fn: Callable[[float, float], float] | None = delta_fn
        self.calls = 0

    def epsilon(self, omega: float, delta: float) -> float:
        assert self.epsilon_fn is not None
        self.calls += 1
        out = float(self.epsilon_fn(omega, delta))
        if math.isnan(out) or out < 0:
            raise ValueError(f"epsilon_fn({omega!r}, {delta!r}) must be a number >= 0 or inf, got {out!r}")
        return out

    def delta(self, omega: float, epsilon: float) -> float:
        assert self.delta_fn is not None
        self.calls += 1
        out = float(self.delta_fn(omega, epsilon))
        if math.isnan(out) or not 0.0 <= out <= 1.0:
            raise ValueError(f"delta_fn({omega!r}, {epsilon!r}) must be in [0, 1], got {out!r}")
        return out

    def pairs(self, omega: float, grid: Sequence[float]) -> list[tuple[float, float]]:
        """(eps_i, delta_i) pairs the mechanism at omega satisfies (Eq. 20's family)."""
        if self.epsilon_fn is not None:
            return [(self.epsilon(omega, d), d) for d in grid]
        return [(e, self.delta(omega, e)) for e in grid]


def _fnr_lower(pairs: list[tuple[float, float]], alpha: float) -> float:
    """Eq. 20: sup_i max{0, 1 - delta_i - e^eps_i alpha, e^-eps_i (1 - delta_i - alpha)}."""
    best = 0.0
    for e, d in pairs:
        if math.isinf(e):
            continue
        best = max(best, 1.0 - d - math.exp(e) * alpha, math.exp(-e) * (1.0 - d - alpha))
    return min(1.0 - alpha, best)


def _advantage_upper(pairs: list[tuple[float, float]]) -> float:
    """min_i (e^eps_i - 1 + 2 delta_i)/(e^eps_i + 1): each (eps_i, delta_i) alone bounds the advantage (Kairouz et
    al. 2015; seed 004 Eq. 5), so their minimum does."""
    vals = [1.0 if math.isinf(e) else (math.expm1(e) + 2.0 * d) / (math.exp(e) + 1.0) for e, d in pairs]
    return float(min([1.0, *vals]))


class _Evaluator:
    def __init__(self, acc: _Accountant, target: Target, grid: Sequence[float]) -> None:
        self.acc, self.target, self.grid = acc, target, grid
        self.memo: dict[float, tuple[bool, float]] = {}

    def __call__(self, omega: float) -> tuple[bool, float]:
        hit = self.memo.get(omega)
        if hit is None:
            hit = self._evaluate(omega)
            self.memo[omega] = hit
        return hit

    def _evaluate(self, omega: float) -> tuple[bool, float]:
        t, acc = self.target, self.acc
        if t.name in ("advantage", "bayes_security"):
            eta = t.value if t.name == "advantage" else 1.0 - t.value
            if acc.delta_fn is not None:
                adv = acc.delta(omega, 0.0)  # Eq. 19: delta_omega(0) <= eta*
            else:
                adv = eta if acc.epsilon(omega, eta) <= 0.0 else 1.0  # Eq. 19: eps_omega(eta*) = 0
            metric = adv if t.name == "advantage" else 1.0 - adv
            return t.met(metric), metric
        if t.name in ("tpr", "fnr"):
            fnr = _fnr_lower(acc.pairs(omega, self.grid), t.at_fpr)
            metric = fnr if t.name == "fnr" else 1.0 - fnr
            return t.met(metric), metric
        if t.name == "epsilon":
            if acc.epsilon_fn is not None:
                eps = acc.epsilon(omega, t.at_delta)
                return t.met(eps), eps
            ok = acc.delta(omega, t.value) <= t.at_delta
            return ok, (t.value if ok else math.inf)
        raise ValueError(f"a {t.name} target cannot be calibrated through an external (eps, delta) accountant")


def _report(acc: _Accountant, omega: float, grid: Sequence[float]) -> tuple[float, float]:
    """eps at REPORT_DELTA and an advantage upper bound at omega, from the accountant."""
    if acc.epsilon_fn is not None:
        eps = acc.epsilon(omega, REPORT_DELTA)
        adv = _advantage_upper([(eps, REPORT_DELTA), *acc.pairs(omega, grid)])
        return eps, adv
    adv = acc.delta(omega, 0.0)
    lo, hi = 0.0, max(grid)
    if acc.delta(omega, hi) > REPORT_DELTA:
        return math.inf, adv
    if acc.delta(omega, lo) <= REPORT_DELTA:
        return 0.0, adv
    for _ in range(40):  # delta(eps) is non-increasing: bisect for the smallest eps with delta <= 1e-5
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if acc.delta(omega, mid) > REPORT_DELTA else (lo, mid)
    return hi, adv


def _param(u: float, integer: bool) -> float:
    return float(max(1, round(math.exp(u)))) if integer else float(math.exp(u))


def calibrate_with_accountant(
    *,
    parameter_min: float,
    parameter_max: float,
    epsilon_fn: Callable[[float, float], float] | None = None,
    delta_fn: Callable[[float, float], float] | None = None,
    more_private: Literal["increasing", "decreasing"] = "increasing",
    integer: bool = False,
    target_advantage: float | None = None,
    target_tpr: float | None = None,
    target_fnr: float | None = None,
    fpr: float | None = None,
    target_epsilon: float | None = None,
    delta: float | None = None,
    target_bayes_security: float | None = None,
    target_accuracy: float | None = None,
    target_precision: float | None = None,
    grid: Sequence[float] | None = None,
    tolerance: float = 1e-3,
) -> BlackBoxCalibration:
    """Calibrate a parameter omega in [``parameter_min``, ``parameter_max``] to an attack-risk target through an
    external accountant (seed 001 Sec. 3.3, App. A): ``epsilon_fn(omega, delta)`` or ``delta_fn(omega, epsilon)``.

    Targets as for :func:`gdpcore.calibrate_noise` (one of advantage, TPR / FNR / accuracy / precision at ``fpr``,
    (eps, delta), Bayes security; mu-GDP is not expressible through (eps, delta) alone). ``more_private`` says which
    way omega makes the mechanism more private; ``integer`` rounds omega (steps). ``grid`` is Eq. 20's delta grid
    (eps(delta) accountants) or eps grid (delta(eps) accountants). Returns the least-private omega that meets the
    target within ``tolerance`` by the accountant's numbers; raises
    :class:`~gdpcore.calibration.CalibrationInfeasibleError` if even the most private end misses it.
    """
    acc = _Accountant(epsilon_fn, delta_fn)
    target = make_target(
        target_advantage=target_advantage,
        target_tpr=target_tpr,
        target_fnr=target_fnr,
        fpr=fpr,
        target_mu=None,
        target_epsilon=target_epsilon,
        delta=delta,
        target_bayes_security=target_bayes_security,
        alpha_min=1e-10,
        target_accuracy=target_accuracy,
        target_precision=target_precision,
    )
    lo_p = check_positive("parameter_min", parameter_min)
    hi_p = check_positive("parameter_max", parameter_max)
    if not lo_p < hi_p:
        raise ValueError(f"parameter_min must be < parameter_max, got {parameter_min!r} and {parameter_max!r}")
    check_choice("more_private", more_private, ("increasing", "decreasing"))
    tol = check_tolerance(tolerance)
    g = tuple(DEFAULT_DELTA_GRID if epsilon_fn is not None else DEFAULT_EPSILON_GRID) if grid is None else tuple(grid)
    if not g or any(not (isinstance(x, int | float) and math.isfinite(x)) for x in g):
        raise ValueError(f"grid must be a non-empty sequence of finite numbers, got {bounded_repr(grid)}")
    if epsilon_fn is not None and any(not 0.0 < x < 1.0 for x in g):
        raise ValueError(f"grid must hold deltas in (0, 1) for an epsilon_fn accountant, got {bounded_repr(grid)}")
    if delta_fn is not None and any(x < 0.0 for x in g):
        raise ValueError(f"grid must hold epsilons >= 0 for a delta_fn accountant, got {bounded_repr(grid)}")
    evaluate = _Evaluator(acc, target, g)
    # u: log omega oriented so that larger u is more private.
    sign = 1.0 if more_private == "increasing" else -1.0
    u_priv, u_risk = (math.log(hi_p), math.log(lo_p)) if sign > 0 else (math.log(lo_p), math.log(hi_p))
    ok, metric = evaluate(_param(u_priv, integer))
    if not ok:
        raise CalibrationInfeasibleError(
            f"target {target.describe()} is infeasible in [{parameter_min!r}, {parameter_max!r}]: at the most private "
            f"end the accountant gives {target.name}={metric!r}"
        )
    good, bad, rejected, at_limit = u_priv, u_risk, None, False
    ok_risk, metric_risk = evaluate(_param(u_risk, integer))
    if ok_risk:
        good, at_limit, metric = u_risk, True, metric_risk
    else:
        rejected = _param(u_risk, integer)
        while True:
            pg, pb = _param(good, integer), _param(bad, integer)
            if (integer and abs(pg - pb) <= 1) or (not integer and math.expm1(abs(good - bad)) <= tol):
                break
            mid = 0.5 * (good + bad)
            ok_m, metric_m = evaluate(_param(mid, integer))
            if ok_m:
                good, metric = mid, metric_m
            else:
                bad, rejected = mid, _param(mid, integer)
    value = _param(good, integer)
    _, metric = evaluate(value)
    eps, adv = _report(acc, value, g)
    kind = {"advantage": "upper", "tpr": "upper", "fnr": "lower", "epsilon": "upper", "bayes_security": "lower"}
    return BlackBoxCalibration(
        value=value,
        rejected=rejected,
        target=target.describe(),
        achieved=float(metric),
        epsilon=float(eps),
        epsilon_delta=REPORT_DELTA,
        advantage=float(adv),
        at_limit=at_limit,
        evaluations=len(evaluate.memo),
        accountant_calls=acc.calls,
        bound_types={
            "achieved": kind[target.name],
            "epsilon": "upper",
            "advantage": "upper",
            "value": "upper" if sign > 0 else "lower",  # relative to the accountant: as sound as its numbers
            "requested_achieved": "upper",
        },
        requested=target.requested,
        requested_achieved=None if target.requested is None else target.requested_metric(float(metric)),
    )
