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
* The evaluator is :mod:`gdpcore.pld` (vectorised connect-the-dots, the same construction as dp_accounting's).

When ``sampling_rate == 1`` (plain Gaussian, composed ``steps`` times) the mechanism is exactly
(sqrt(T)/sigma)-GDP and, with ``accountant="auto"``, the calibration is solved in closed form (seed 001 Cor. B.3 /
B.4) and every number is exact.

Modules (each of one concern; none reads another's privates):

* :mod:`~gdpcore.calibration.targets` - target algebra: validation, metric of a curve or of mu-GDP, mu-equivalent,
  seed 001 Table 1 (App. C) accuracy / precision / advantage-at-FPR targets as FNR targets;
* :mod:`~gdpcore.calibration.evaluator` - the only place an accountant is called (pessimistic / optimistic curve);
* :mod:`~gdpcore.calibration.search` - level solver, coarse-to-fine ladder, bias estimate, closed-form solver;
* :mod:`~gdpcore.calibration.api` - ``calibrate_noise`` / ``calibrate_steps`` / ``calibrate_sampling_rate``;
* :mod:`~gdpcore.calibration.conversions` - Eq. 30, Prop. 3.6 (and, re-exported, seed 001 Table 1 FNR targets);
* :mod:`~gdpcore.calibration.blackbox` - calibration through any external accountant's eps(delta) or delta(eps)
  callable (seed 001 Sec. 3.3, App. A);
* :mod:`~gdpcore.calibration.errors` - :class:`CalibrationInfeasibleError` (a ValueError) and
  :class:`CalibrationSearchError` (a RuntimeError).
"""

from __future__ import annotations

from gdpcore.calibration.api import CalibrationResult, calibrate_noise, calibrate_sampling_rate, calibrate_steps
from gdpcore.calibration.blackbox import BlackBoxCalibration, calibrate_with_accountant
from gdpcore.calibration.conversions import (
    AdvantageCalibrationCost,
    advantage_calibration_cost,
    advantage_calibration_tpr_gap_bound,
    epsilon_for_advantage,
)
from gdpcore.calibration.errors import CalibrationInfeasibleError, CalibrationSearchError
from gdpcore.calibration.search import DISCRETIZATION_LADDER_START
from gdpcore.calibration.targets import fnr_target_from_accuracy, fnr_target_from_advantage, fnr_target_from_precision

__all__ = [
    "DISCRETIZATION_LADDER_START",
    "BlackBoxCalibration",
    "calibrate_with_accountant",
    "AdvantageCalibrationCost",
    "CalibrationInfeasibleError",
    "CalibrationResult",
    "CalibrationSearchError",
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
