"""Target algebra: what a calibration target is, how its metric is read off a curve or a mu-GDP, and its mu-GDP
equivalent (the coordinate in which the search is nearly linear).

A target is exactly one of: advantage eta* (seed 001 Eq. 13), attack TPR <= 1 - beta* at FPR alpha* (Eq. 18), FNR
f(alpha*) >= beta*, mu-GDP (seed 000 Eq. 21), (eps, delta) (Eq. 2) or Bayes security 1 - eta >= beta*. The metric of a
pessimistic curve is an upper bound on a risk (advantage, TPR, mu, eps) and a lower bound on a protection (FNR,
Bayes security); :meth:`Target.met` is the certificate, a plain float comparison.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
from scipy import special

from gdpcore import closed_form
from gdpcore._validation import check_positive, check_probability, check_real
from gdpcore.calibration.errors import CalibrationInfeasibleError
from gdpcore.curve import SymmetricCurve
from gdpcore.report import DEFAULT_ALPHA_MIN

__all__ = [
    "TARGET_LABELS",
    "Target",
    "TargetName",
    "fnr_target_from_accuracy",
    "fnr_target_from_advantage",
    "fnr_target_from_precision",
    "make_target",
    "strict_fnr_target",
]

TargetName = Literal["advantage", "tpr", "fnr", "mu", "epsilon", "bayes_security"]

TARGET_LABELS: dict[str, tuple[str, bool]] = {
    # name: (bound type of the achieved metric, True if the metric is a risk that must stay <= target)
    "advantage": ("upper", True),
    "tpr": ("upper", True),
    "fnr": ("lower", False),
    "mu": ("upper", True),
    "epsilon": ("upper", True),
    "bayes_security": ("lower", False),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Target:
    """One validated target (build it with :func:`make_target`). ``fpr`` is set exactly for "tpr"/"fnr",
    ``delta`` exactly for "epsilon"; ``alpha_min`` is the FPR floor of a "mu" target."""

    name: TargetName
    value: float
    fpr: float | None = None
    delta: float | None = None
    alpha_min: float = DEFAULT_ALPHA_MIN
    # An attack accuracy or precision (PPV) target at ``fpr`` (seed 001 Table 1, App. C), held as the FNR target
    # it converts to: ("accuracy" | "precision", the user's value). None for the other targets.
    requested: tuple[str, float] | None = None

    def requested_metric(self, fnr: float) -> float | None:
        """The accuracy / precision of the attack at ``fpr`` when f(fpr) = ``fnr`` (Table 1 rows 2-3), None for the
        other targets; a bound of the same kind as an FNR-derived TPR (upper when ``fnr`` is a lower bound)."""
        if self.requested is None:
            return None
        a, tpr = self.at_fpr, 1.0 - fnr
        if self.requested[0] == "accuracy":
            return 0.5 * ((1.0 - a) + tpr)
        return tpr / (tpr + a)

    @property
    def is_risk(self) -> bool:
        return TARGET_LABELS[self.name][1]

    @property
    def bound(self) -> str:
        return TARGET_LABELS[self.name][0]

    @property
    def at_fpr(self) -> float:
        """The FPR alpha* of a "tpr"/"fnr" target."""
        if self.fpr is None:
            raise AttributeError(f"a {self.name} target has no fpr")
        return self.fpr

    @property
    def at_delta(self) -> float:
        """The delta of an "epsilon" target."""
        if self.delta is None:
            raise AttributeError(f"a {self.name} target has no delta")
        return self.delta

    def describe(self) -> str:
        if self.requested is not None:
            kind, v = self.requested
            return f"attack {kind} <= {v!r} at fpr={self.fpr!r} (fnr >= {self.value!r}, seed 001 Table 1)"
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
            return 1.0 - float(curve.fnr(self.at_fpr))
        if self.name == "fnr":
            return float(curve.fnr(self.at_fpr))
        if self.name == "mu":
            return curve.mu(alpha_min=self.alpha_min)[0]
        return float(curve.epsilon_at(self.at_delta))

    def metric_from_gdp(self, mu: float) -> float:
        """Exact metric of mu-GDP (seed 001 Eqs. 22-23; seed 000 Eqs. 4, 30-31)."""
        if self.name == "advantage":
            return closed_form.get_advantage_from_gdp(mu=mu)
        if self.name == "bayes_security":
            return 1.0 - closed_form.get_advantage_from_gdp(mu=mu)
        if self.name == "tpr":
            return 1.0 - float(closed_form.get_beta_from_gdp(mu=mu, alpha=self.at_fpr))
        if self.name == "fnr":
            return float(closed_form.get_beta_from_gdp(mu=mu, alpha=self.at_fpr))
        if self.name == "mu":
            return mu
        return float(closed_form.get_epsilon_from_gdp(mu=mu, delta=self.at_delta))

    def gdp_mu(self, metric: float) -> float:
        """The mu of the Gaussian whose metric equals ``metric`` (inverse of :meth:`metric_from_gdp`).

        Used to linearise the search (and as the exact answer for the plain Gaussian, seed 001 Cor. B.3/B.4).
        Returns +inf for a metric no Gaussian reaches and 0 for a metric every Gaussian meets.
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
            return max(0.0, float(special.ndtri(tpr)) - float(special.ndtri(self.at_fpr)))
        if self.name == "mu":
            return max(0.0, metric)
        if not math.isfinite(metric):
            return math.inf
        delta = self.at_delta
        if closed_form.get_advantage_from_gdp(mu=1e-8) > delta and metric <= 0.0:
            return 1e-8
        return closed_form.get_mu_from_epsilon_delta(epsilon=max(0.0, metric), delta=delta)

    def log_gdp_mu(self, metric: float) -> float:
        mu = self.gdp_mu(metric)
        if mu == math.inf:
            return math.inf
        return math.log(max(mu, 1e-12))


def make_target(
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
    target_accuracy: Any = None,
    target_precision: Any = None,
) -> Target:
    """Validate the keyword arguments of the public calibrators into one :class:`Target`.

    Raises ValueError naming the field for malformed input, and :class:`CalibrationInfeasibleError` for a TPR/FNR
    target that no mechanism can meet (every mechanism allows TPR >= FPR).
    """
    given = {
        "target_advantage": target_advantage,
        "target_tpr": target_tpr,
        "target_fnr": target_fnr,
        "target_mu": target_mu,
        "target_epsilon": target_epsilon,
        "target_bayes_security": target_bayes_security,
        "target_accuracy": target_accuracy,
        "target_precision": target_precision,
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
    if fpr is not None and name not in ("target_tpr", "target_fnr", "target_accuracy", "target_precision"):
        raise ValueError(
            f"fpr={fpr!r} is only meaningful with target_tpr, target_fnr, target_accuracy or target_precision, got "
            f"{name}={value!r}"
        )
    if delta is not None and name != "target_epsilon":
        raise ValueError(f"delta={delta!r} is only meaningful with target_epsilon, got {name}={value!r}")
    if name == "target_advantage":
        return Target(name="advantage", value=check_probability("target_advantage", value, high_open=True))
    if name in ("target_accuracy", "target_precision"):
        return _converted_target(name, value, fpr)
    if name == "target_bayes_security":
        return Target(name="bayes_security", value=check_probability("target_bayes_security", value, high_open=True))
    if name in ("target_tpr", "target_fnr"):
        if fpr is None:
            raise ValueError(f"{name}={value!r} needs fpr= (the false-positive rate at which it applies)")
        a = check_probability("fpr", fpr, high_open=True)
        v = check_probability(name, value, high_open=True)
        tpr = v if name == "target_tpr" else 1.0 - v
        if tpr <= a:
            # f(alpha) <= 1 - alpha for every mechanism: the trivial test already reaches TPR = FPR.
            raise CalibrationInfeasibleError(
                f"{name}={value!r} at fpr={fpr!r} is infeasible: every mechanism allows TPR >= FPR "
                f"(need target_tpr > fpr, i.e. target_fnr + fpr < 1)"
            )
        return Target(name="tpr" if name == "target_tpr" else "fnr", value=v, fpr=a)
    if name == "target_mu":
        return Target(name="mu", value=check_positive("target_mu", value), alpha_min=alpha_min)
    eps = check_real("target_epsilon", value)
    if eps < 0:
        raise ValueError(f"target_epsilon must be >= 0, got {value!r}")
    if delta is None:
        raise ValueError(f"target_epsilon={value!r} needs delta=")
    return Target(name="epsilon", value=eps, delta=check_probability("delta", delta, high_open=True))


def _converted_target(name: str, value: Any, fpr: Any) -> Target:
    """Seed 001 Table 1 (App. C): an attack accuracy or precision target at FPR alpha* is the FNR target f(alpha*) >=
    beta* of :func:`fnr_target_from_accuracy` / :func:`fnr_target_from_precision`."""
    if fpr is None:
        raise ValueError(f"{name}={value!r} needs fpr= (the false-positive rate at which it applies)")
    kind = name.removeprefix("target_")
    if kind == "accuracy":
        fnr = fnr_target_from_accuracy(accuracy=value, fpr=fpr)
    else:
        fnr = fnr_target_from_precision(precision=value, fpr=fpr)
    a = check_probability("fpr", fpr, high_open=True)
    return Target(name="fnr", value=fnr, fpr=a, requested=(kind, float(value)))


def strict_fnr_target(
    *, name: str, value: float, fnr: float, fpr: float, risk: Callable[[float], float] | None = None
) -> float:
    """An FNR target ``fnr`` converted from a target ``name``=``value`` at ``fpr``, rounded *up* (the strict side).

    Rounding up by 4e-16, then ulp by ulp until ``risk(1 - fnr) <= value`` (at most 64 ulps), keeps float round-off
    in the conversion, and in 1 - FNR later, from turning a certified FNR into a missed accuracy / precision /
    advantage target. Raises :class:`CalibrationInfeasibleError` if FNR >= 1 - fpr (no attack can be held to it) and
    ValueError if FNR <= 0 (the constraint is vacuous).
    """
    fnr = fnr + 4e-16
    if risk is not None:
        for _ in range(64):
            if risk(1.0 - fnr) <= value:
                break
            fnr = float(np.nextafter(fnr, 2.0))
    if not (0.0 < fnr < 1.0 - fpr):
        infeasible = fnr >= 1.0 - fpr
        msg = f"{name}={value!r} at fpr={fpr!r} gives FNR target {fnr!r}, outside (0, 1 - fpr): " + (
            "no attack can be held to it (infeasible)" if infeasible else "the constraint is vacuous"
        )
        raise CalibrationInfeasibleError(msg) if infeasible else ValueError(msg)
    return fnr


def fnr_target_from_advantage(*, advantage: float, fpr: float) -> float:
    """beta* = 1 - alpha* - eta*: TPR - FPR <= eta* at FPR alpha* (seed 001 Table 1, row 1)."""
    eta = check_probability("advantage", advantage, high_open=True)
    a = check_probability("fpr", fpr, high_open=True)
    return strict_fnr_target(name="advantage", value=advantage, fnr=1.0 - a - eta, fpr=a, risk=lambda tpr: tpr - a)


def fnr_target_from_accuracy(*, accuracy: float, fpr: float) -> float:
    """beta* = 2 (1 - acc*) - alpha*: attack accuracy (1/2)((1 - alpha) + (1 - beta)) <= acc* at FPR alpha*.

    Seed 001 Table 1, row 2 (accuracy as in Rezaei & Liu 2021, balanced prior). Needs 1/2 < acc* < 1 - alpha*/2.
    """
    acc = check_probability("accuracy", accuracy, high_open=True)
    a = check_probability("fpr", fpr, high_open=True)
    return strict_fnr_target(
        name="accuracy", value=accuracy, fnr=2.0 * (1.0 - acc) - a, fpr=a, risk=lambda tpr: 0.5 * ((1.0 - a) + tpr)
    )


def fnr_target_from_precision(*, precision: float, fpr: float) -> float:
    """beta* = ((alpha* + 1) ppv* - 1) / (ppv* - 1): attack precision (1 - beta)/(1 - beta + alpha) <= ppv* at alpha*.

    Seed 001 Table 1, row 3 with Eq. (27) (balanced prior). Solving ppv = TPR/(TPR + alpha) for TPR gives
    TPR = ppv alpha / (1 - ppv). Needs ppv* > 1/2 (random guessing already reaches 1/2).
    """
    ppv = check_probability("precision", precision, high_open=True)
    a = check_probability("fpr", fpr, high_open=True)
    return strict_fnr_target(
        name="precision",
        value=precision,
        fnr=((a + 1.0) * ppv - 1.0) / (ppv - 1.0),
        fpr=a,
        risk=lambda tpr: tpr / (tpr + a),
    )
