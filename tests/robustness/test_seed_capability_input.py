"""Hostile input to the seed-paper capabilities (gdpcore.divergence / gdpt / bayes_security / calibration.blackbox):
one clear ValueError naming the field, bounded, before any large allocation."""

from __future__ import annotations

import numpy as np
import pytest

import gdpcore as g
from gdpcore.bayes_security import get_bayes_security_from_dpsgd_array, get_max_gradient_distances
from gdpcore.calibration.blackbox import calibrate_with_accountant
from gdpcore.divergence import get_crossing_priors, get_weighted_delta_divergence, is_approximately_dominating
from gdpcore.gdpt import refine_noise, refine_profile, subsample_profile

G1, G2 = g.Gaussian(noise_multiplier=1.0), g.Gaussian(noise_multiplier=2.0)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: get_crossing_priors(G1, G2, n_grid=10**12), "n_grid"),
        (lambda: get_crossing_priors(G1, G2, n_grid="many"), "n_grid"),
        (lambda: is_approximately_dominating(G1, G2, "x" * 10_000), "D"),
        (lambda: is_approximately_dominating(G1, G2, float("nan")), "D"),
        (lambda: get_weighted_delta_divergence(G1, G2, beta=(1.0, float("inf"))), "beta"),
        (lambda: get_weighted_delta_divergence(G1, G2, density="uniform"), "density"),
        (
            lambda: get_bayes_security_from_dpsgd_array(sampling_rate=[0.1, "x"], noise_multiplier=1, steps=1),
            "sampling_rate",
        ),
        (lambda: get_max_gradient_distances([np.full((1, 2, 2), np.inf)], clipping_norm=1.0), "gradients"),
        (lambda: get_max_gradient_distances("grads", clipping_norm=1.0), "gradients"),
        (lambda: subsample_profile(lambda e: e, 1.5), "sampling_rate"),
        (lambda: refine_profile(lambda e: e, eps_max=-1.0), "eps_max"),
        (lambda: refine_noise(lambda e, d: 1.0, epsilon=0.2, delta=1.0), "delta"),
        (
            lambda: calibrate_with_accountant(parameter_min=0.1, parameter_max=10.0, delta_fn=42, target_advantage=0.1),
            "delta_fn",
        ),
        (
            lambda: calibrate_with_accountant(
                parameter_min=0.1, parameter_max=10.0, delta_fn=lambda s, e: 0.0, target_tpr=0.5, fpr=0.1, grid=[-1.0]
            ),
            "grid",
        ),
    ],
)
def test_bad_input_names_the_field(call, field):
    with pytest.raises(ValueError, match=field) as err:
        call()
    assert len(str(err.value)) < 600 and "\n" not in str(err.value)
