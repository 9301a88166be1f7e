"""Seed 001 capabilities of the calibrators: accuracy and precision (PPV) targets (Table 1, App. C), eps at 1e-5 and the
advantage reported with every result, and calibration through an external accountant's eps(delta) or delta(eps)
(Sec. 3.3, App. A, Eqs. 19-20). Independent truth: the Gaussian closed forms of docs/references.md S001-1 solved
with scipy, dp_accounting's PLD and RDP accountants."""

from __future__ import annotations

import functools
import math

import dp_accounting
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy import stats

import gdpcore as g
from gdpcore import closed_form as cf
from gdpcore.calibration import CalibrationInfeasibleError
from gdpcore.calibration.blackbox import calibrate_with_accountant

Q, T = 0.01, 1000


def _gaussian_sigma_for_fnr(alpha: float, beta: float) -> float:
    # seed 001 Eq. 26: sigma = 1 / (Phi^-1(1 - alpha) - Phi^-1(beta))
    return 1.0 / (stats.norm.ppf(1 - alpha) - stats.norm.ppf(beta))


def test_accuracy_and_precision_targets_gaussian_closed_form():
    # Table 1 row 2: accuracy 0.6 at FPR 0.1 -> beta* = 2 (1 - 0.6) - 0.1 = 0.7; row 3: PPV 0.8 at 0.1 ->
    # TPR = 0.8 * 0.1 / 0.2 = 0.4, beta* = 0.6 (balanced prior).
    acc = g.calibrate_noise(sampling_rate=1.0, steps=1, target_accuracy=0.6, fpr=0.1)
    assert acc.noise_multiplier == pytest.approx(_gaussian_sigma_for_fnr(0.1, 0.7), rel=1e-9)
    assert acc.target == "fnr" and acc.target_value == pytest.approx(0.7, abs=1e-12)
    assert acc.requested == ("accuracy", 0.6) and acc.requested_achieved == pytest.approx(0.6, abs=1e-9)
    assert acc.requested_achieved <= 0.6 and acc.reported_bound_types["requested_achieved"] == "exact"
    ppv = g.calibrate_noise(sampling_rate=1.0, steps=1, target_precision=0.8, fpr=0.1)
    assert ppv.noise_multiplier == pytest.approx(_gaussian_sigma_for_fnr(0.1, 0.6), rel=1e-9)
    assert ppv.requested_achieved == pytest.approx(0.8, abs=1e-9)
    # The other calibrators take them too (steps: the largest T; mu = sqrt(T)/sigma).
    st = g.calibrate_steps(noise_multiplier=4.0, sampling_rate=1.0, target_accuracy=0.6, fpr=0.1)
    mu_max = stats.norm.ppf(0.9) - stats.norm.ppf(0.7)
    assert st.steps == math.floor((4.0 * mu_max) ** 2)


def test_accuracy_target_dpsgd_certified_by_dp_accounting():
    r = g.calibrate_noise(sampling_rate=Q, steps=T, target_accuracy=0.55, fpr=0.05)
    # dp_accounting's PLD at the returned sigma: TPR at FPR 0.05 -> accuracy (1/2)((1 - a) + TPR) <= 0.55.
    rep = g.analyze(r.mechanism, discretization=r.discretization, optimistic=False)
    accuracy = 0.5 * ((1 - 0.05) + float(rep.tpr(0.05)))
    assert accuracy <= 0.55 and r.requested_achieved == pytest.approx(accuracy, abs=1e-9)
    assert r.reported_bound_types["requested_achieved"] == "upper"
    with pytest.raises(ValueError, match="needs fpr"):
        g.calibrate_noise(sampling_rate=Q, steps=T, target_precision=0.8)
    with pytest.raises(CalibrationInfeasibleError, match="infeasible"):
        g.calibrate_noise(sampling_rate=Q, steps=T, target_accuracy=0.5, fpr=0.1)  # below random guessing's 0.5


def test_every_result_reports_epsilon_at_1e5_and_advantage():
    # Closed form (q = 1): advantage 0.1 -> sigma 3.978948 (S001-1); its eps(1e-5) by dp_accounting's Gaussian PLD.
    r = g.calibrate_noise(sampling_rate=1.0, steps=1, target_advantage=0.1)
    assert r.noise_multiplier == pytest.approx(3.978948, abs=5e-7) and r.epsilon_delta == 1e-5
    assert r.advantage == pytest.approx(0.1, abs=1e-12) and r.reported_bound_types["epsilon"] == "exact"
    ref = pld_lib.from_gaussian_mechanism(r.noise_multiplier, value_discretization_interval=1e-5)
    assert r.epsilon == pytest.approx(ref.get_epsilon_for_delta(1e-5), abs=1e-3)
    # DP-SGD: the same curve as `achieved`; dp_accounting's PLD (step = the result's discretisation) agrees.
    d = g.calibrate_noise(sampling_rate=Q, steps=T, target_tpr=0.1, fpr=0.01)
    assert d.reported_bound_types == {"epsilon": "upper", "advantage": "upper", "requested_achieved": "upper"}
    pld = pld_lib.from_gaussian_mechanism(
        d.noise_multiplier, sampling_prob=Q, value_discretization_interval=d.discretization
    ).self_compose(T)
    assert d.epsilon == pytest.approx(pld.get_epsilon_for_delta(1e-5), rel=2e-3)
    assert d.advantage == pytest.approx(pld.get_delta_for_epsilon(0.0), rel=2e-3)
    assert d.to_dict()["epsilon"] == d.epsilon


# -- external accountants (Sec. 3.3, App. A) --------------------------------------------------------------------------
def _delta_gauss(sigma: float, eps: float) -> float:
    return cf.get_delta_from_gdp(mu=1.0 / sigma, epsilon=eps)


def _eps_gauss(sigma: float, delta: float) -> float:
    return cf.get_epsilon_from_gdp(mu=1.0 / sigma, delta=delta)


def test_blackbox_gaussian_matches_closed_forms():
    # Eq. 19 with delta(0): advantage 0.1 -> sigma 3.978948 (S001-1), from above within the tolerance.
    a = calibrate_with_accountant(parameter_min=0.1, parameter_max=100.0, delta_fn=_delta_gauss, target_advantage=0.1)
    assert 3.978948 <= a.value <= 3.978948 * (1 + 1e-3) and a.achieved <= 0.1 and a.rejected < a.value
    assert a.advantage == pytest.approx(_delta_gauss(a.value, 0.0)) and a.epsilon == pytest.approx(
        _eps_gauss(a.value, 1e-5), abs=1e-7
    )
    # Eq. 19 with eps(eta*) = 0 (an eps(delta) accountant).
    b = calibrate_with_accountant(parameter_min=0.1, parameter_max=100.0, epsilon_fn=_eps_gauss, target_advantage=0.1)
    assert 3.978948 <= b.value <= 3.978948 * (1 + 1e-3)
    # Eq. 20 on an eps grid (delta(eps)) and on a delta grid (eps(delta)): TPR <= 0.5 at FPR 0.1 -> 0.780304 (S001-1);
    # the grid's lower bound on f can only ask for more noise.
    for kw, slack in (({"delta_fn": _delta_gauss}, 2e-3), ({"epsilon_fn": _eps_gauss}, 3e-2)):
        r = calibrate_with_accountant(parameter_min=0.1, parameter_max=100.0, target_tpr=0.5, fpr=0.1, **kw)
        assert 0.780304 <= r.value <= 0.780304 * (1 + slack) and r.achieved <= 0.5
    acc = calibrate_with_accountant(
        parameter_min=0.1, parameter_max=100.0, delta_fn=_delta_gauss, target_accuracy=0.6, fpr=0.1
    )
    assert _gaussian_sigma_for_fnr(0.1, 0.7) <= acc.value <= _gaussian_sigma_for_fnr(0.1, 0.7) * 1.002
    assert acc.requested_achieved <= 0.6
    # (eps, delta) target: eps(1e-5) <= 1 -> the analytic Gaussian calibration (Balle & Wang 2018).
    e = calibrate_with_accountant(
        parameter_min=0.1, parameter_max=100.0, epsilon_fn=_eps_gauss, target_epsilon=1.0, delta=1e-5
    )
    sigma_exact = 1.0 / cf.get_mu_from_epsilon_delta(epsilon=1.0, delta=1e-5)
    assert sigma_exact <= e.value <= sigma_exact * (1 + 1e-3)


def test_blackbox_rdp_accountant_steps_and_noise():
    # App. A: an RDP accountant (dp_accounting's RdpAccountant) for DP-SGD. Its eps(delta) are upper bounds, so the
    # Eq. 20 FNR bound is sound and the calibrated sigma can only exceed the PLD calibration's.
    @functools.cache
    def rdp(sigma: float, steps: int) -> dp_accounting.rdp.RdpAccountant:
        acc = dp_accounting.rdp.RdpAccountant()
        acc.compose(dp_accounting.PoissonSampledDpEvent(Q, dp_accounting.GaussianDpEvent(sigma)), int(steps))
        return acc

    def eps_rdp(sigma: float, delta: float, steps: int = T) -> float:
        return rdp(float(sigma), int(steps)).get_epsilon(delta)

    grid = [10.0**-k for k in range(1, 13)]
    r = calibrate_with_accountant(
        parameter_min=0.3, parameter_max=30.0, epsilon_fn=eps_rdp, target_tpr=0.1, fpr=0.01, grid=grid
    )
    pld = g.calibrate_noise(sampling_rate=Q, steps=T, target_tpr=0.1, fpr=0.01)
    assert r.value >= pld.noise_multiplier * (1 - 1e-3)
    assert r.value <= pld.noise_multiplier * 1.25  # RDP is loose, not wildly so
    assert r.epsilon == pytest.approx(eps_rdp(r.value, 1e-5)) and r.bound_types["value"] == "upper"
    # Steps (more steps, less private: "decreasing", integer).
    s = calibrate_with_accountant(
        parameter_min=1,
        parameter_max=100_000,
        epsilon_fn=lambda t, d: eps_rdp(1.0, d, steps=int(t)),
        target_epsilon=2.0,
        delta=1e-5,
        more_private="decreasing",
        integer=True,
    )
    assert eps_rdp(1.0, 1e-5, int(s.value)) <= 2.0 < eps_rdp(1.0, 1e-5, int(s.rejected))
    assert s.rejected - s.value <= 1 and s.bound_types["value"] == "lower"


def test_blackbox_bad_input():
    with pytest.raises(ValueError, match="exactly one of epsilon_fn"):
        calibrate_with_accountant(parameter_min=0.1, parameter_max=1.0, target_advantage=0.1)
    with pytest.raises(ValueError, match="delta_fn"):
        calibrate_with_accountant(
            parameter_min=0.1, parameter_max=10.0, delta_fn=lambda s, e: 2.0, target_advantage=0.1
        )
    with pytest.raises(CalibrationInfeasibleError, match="infeasible"):
        calibrate_with_accountant(parameter_min=0.1, parameter_max=0.5, delta_fn=_delta_gauss, target_advantage=0.01)
    with pytest.raises(ValueError, match="parameter_min"):
        calibrate_with_accountant(parameter_min=2.0, parameter_max=1.0, delta_fn=_delta_gauss, target_advantage=0.1)
