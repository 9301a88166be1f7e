"""Seed 001's conversions: Table 1 (App. C) targets on accuracy / precision / advantage-at-FPR as an FNR target
(defined in :mod:`gdpcore.calibration.targets`, which builds those targets, and importable from here), Eq. 30's standard-calibration epsilon for an advantage, and Prop. 3.6's warning - how much TPR at low FPR an
advantage-calibrated mechanism gives away (the generic bound, and the measured cost for an actual configuration).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from gdpcore import closed_form
from gdpcore._validation import check_probability
from gdpcore.calibration import evaluator
from gdpcore.calibration.api import Accountant, CalibrationResult, calibrate_noise

__all__ = [
    "AdvantageCalibrationCost",
    "advantage_calibration_cost",
    "advantage_calibration_tpr_gap_bound",
    "epsilon_for_advantage",
]


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
    adv = calibrate_noise(
        sampling_rate=sampling_rate,
        steps=steps,
        target_advantage=eta,
        tolerance=tolerance,
        discretization=discretization,
        accountant=accountant,
    )
    std = calibrate_noise(
        sampling_rate=sampling_rate,
        steps=steps,
        target_epsilon=eps_std,
        delta=dl,
        tolerance=tolerance,
        discretization=discretization,
        accountant=accountant,
    )
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
    curve = evaluator.pessimistic_curve(
        noise_multiplier=result.noise_multiplier,
        sampling_rate=result.sampling_rate,
        steps=result.steps,
        discretization=result.discretization,
    )
    return tuple(1.0 - float(curve.fnr(a)) for a in alphas)
