"""Live cross-check of attack-aware calibration against riskcal (the seed-001 authors' library).

riskcal's answers are re-checked with gdpcore's pessimistic accountant: ours must meet the target, riskcal's sigma
must agree within 1 %. (docs/references.md P-3: riskcal's TPR@FPR answers miss their targets slightly because its
trade-off curve can be optimistic, P-2; ours never miss.)
"""

import pytest
from riskcal.calibration.dpsgd import find_noise_multiplier_for_advantage, find_noise_multiplier_for_err_rates

import gdpcore as g

pytestmark = pytest.mark.slow


def test_advantage_target_matches_riskcal():
    ours = g.calibrate_noise(sampling_rate=0.01, steps=1000, target_advantage=0.1)
    theirs = find_noise_multiplier_for_advantage(advantage=0.1, sample_rate=0.01, num_steps=1000)
    assert ours.noise_multiplier == pytest.approx(theirs, rel=1e-2)
    mech = g.SubsampledGaussian(noise_multiplier=ours.noise_multiplier, sampling_rate=0.01, steps=1000)
    assert g.analyze(mech, optimistic=False).advantage <= 0.1


@pytest.mark.timeout(600)  # 216 s at load 12 on 2 cores (riskcal's search per target)
def test_tpr_target_matches_riskcal_and_never_misses():
    q, steps, fpr, tpr = 0.01, 300, 0.01, 0.10
    ours = g.calibrate_noise(sampling_rate=q, steps=steps, target_tpr=tpr, fpr=fpr)
    theirs = find_noise_multiplier_for_err_rates(alpha=fpr, beta=1 - tpr, sample_rate=q, num_steps=steps, noise_min=0.5)
    assert ours.noise_multiplier == pytest.approx(theirs, rel=1e-2)
    mech = g.SubsampledGaussian(noise_multiplier=ours.noise_multiplier, sampling_rate=q, steps=steps)
    assert g.analyze(mech, optimistic=False).tpr(fpr) <= tpr
