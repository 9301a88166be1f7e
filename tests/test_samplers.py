"""The batch-sampler kinds (gdpcore.kinds.samplers) against independent truth.

* cyclic_gaussian: the closed-form composition of ``epochs`` Gaussian mechanisms, delta(eps) of mu-GDP with
  mu = sqrt(epochs)/sigma (Dong, Roth, Su 2022, Cor. 2.13), inverted here with scipy's brentq.
* shuffled_gaussian / balls_in_bins_gaussian lower ends: never below Chua et al. 2024's own cube-set bound
  delta >= max_C [P(max_t x_t > C) - e^eps Q(max_t x_t > C)] (their shuffle lower bound; computed here from the normal CDF on a
  grid of C, one epoch), and never above the pair's true delta(eps) = E_P[(1 - e^(eps - L))_+] estimated by Monte
  Carlo over several epochs with an empirical-Bernstein upper confidence bound (Maurer and Pontil 2009, Thm 4) at
  error probability 1e-9: the lower bound is a post-processing of that pair, so it may not exceed it.
* lower <= upper everywhere, and in the regime where Chua et al. 2024 show the gap (small sigma, many steps per epoch) the
  proven shuffle lower bound exceeds the Poisson accountant's upper bound at sampling rate 1/steps_per_epoch.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize, stats

import gdpcore as g
from gdpcore.kinds import samplers

DELTAS = (1e-3, 1e-5, 1e-8)


def _gdp_delta(mu: float, eps: float) -> float:
    return float(stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2))


def _gdp_epsilon(mu: float, delta: float) -> float:
    return float(optimize.brentq(lambda e: _gdp_delta(mu, e) - delta, 0.0, 200.0, xtol=1e-13, rtol=1e-14))


def _cube_delta(sigma: float, steps: int, eps: float, means: tuple[float, float]) -> float:
    """Chua et al. 2024's cube-set bound for one epoch, maximised over a fine grid of caps C."""
    caps = np.linspace(-8 * sigma, means[0] + 12 * sigma, 400_001)

    def out_of_cube(mean: float) -> np.ndarray:
        return -np.expm1(stats.norm.logcdf((caps - mean) / sigma) + (steps - 1) * stats.norm.logcdf(caps / sigma))

    return float(np.max(out_of_cube(means[0]) - math.exp(eps) * out_of_cube(means[1])))


def _pair_delta_ucb(sigma, steps, epochs, means, eps, n, seed) -> tuple[float, float]:
    """(mean, upper confidence bound) of the pair's delta(eps) = E_P[(1 - e^(eps - L))_+] over ``epochs``
    independent epochs, P = (1/T) sum_t N(a e_t, sigma^2 I), Q = (1/T) sum_t N(b e_t, sigma^2 I)."""
    a, b = means
    rng = np.random.default_rng(seed)
    loss = np.zeros(n)
    for _ in range(epochs):
        x = sigma * rng.standard_normal((n, steps))
        x[np.arange(n), rng.integers(0, steps, n)] += a
        loss += _logsumexp((a * x - a * a / 2) / sigma**2) - _logsumexp((b * x - b * b / 2) / sigma**2)
    values = -np.expm1(np.minimum(eps - loss, 0.0))  # (1 - e^(eps - L))_+ in [0, 1]
    mean, var = float(values.mean()), float(values.var(ddof=1))
    log_term = math.log(2 / 1e-9)
    return mean, mean + math.sqrt(2 * var * log_term / n) + 7 * log_term / (3 * (n - 1))


def _logsumexp(z: np.ndarray) -> np.ndarray:
    top = z.max(axis=1)
    return top + np.log(np.exp(z - top[:, None]).sum(axis=1))


# -- cyclic: exact ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("sigma", "steps", "epochs", "sensitivity"), [(1.0, 100, 3, 1.0), (0.7, 1, 1, 2.0), (2.5, 4000, 40, 1.0)]
)
def test_cyclic_is_the_closed_form_composition(sigma, steps, epochs, sensitivity):
    m = g.CyclicGaussian(noise_multiplier=sigma, steps_per_epoch=steps, epochs=epochs, sensitivity=sensitivity)
    r = g.analyze(m)
    mu = math.sqrt(epochs) / sigma
    assert r.exact and r.bound_types["epsilon"] == "exact"
    assert r.mu == pytest.approx(mu, rel=1e-14)
    for d in DELTAS:
        assert float(r.epsilon(d)) == pytest.approx(_gdp_epsilon(mu, d), rel=1e-9)
        assert float(r.epsilon(d, side="optimistic")) == float(r.epsilon(d))
    # The PLD accountant's bracket contains the closed form too.
    pld = g.analyze(m, accountant="pld")
    for d in DELTAS:
        truth = _gdp_epsilon(mu, d)
        assert float(pld.epsilon(d, side="optimistic")) - 1e-9 <= truth <= float(pld.epsilon(d)) + 1e-9


# -- shuffled / balls-in-bins: the bracket -----------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [g.ShuffledGaussian, g.BallsInBinsGaussian])
@pytest.mark.parametrize(("sigma", "steps"), [(0.5, 1000), (0.8, 100), (1.0, 10)])
def test_one_epoch_lower_end_reaches_the_cube_set_bound(cls, sigma, steps):
    m = cls(noise_multiplier=sigma, steps_per_epoch=steps, epochs=1)
    r = g.analyze(m)
    means = samplers._PAIRS[m.kind]
    for eps in (0.5, 1.0, 3.0, 6.0):
        lower, upper = float(r.delta(eps, side="optimistic")), float(r.delta(eps))
        cube = _cube_delta(sigma, steps, eps, means)
        # The slices refine the cube sets; the only losses are the rounding down of slice losses to the lattice and
        # the twin's wrap-around slack far below the deltas it reads (gdpcore.engine.twin_tail).
        assert lower >= cube * (1 - 1e-3) - 1e-13, (eps, lower, cube)
        assert lower <= upper + 1e-12
        # The upper end is the cyclic (deterministic) guarantee, mu = 1/sigma; balls-in-bins takes the smaller of it
        # and the random-allocation bound (tests/test_random_allocation.py).
        if cls is g.ShuffledGaussian:
            assert upper == pytest.approx(_gdp_delta(1 / sigma, eps), rel=1e-3, abs=1e-12)
        else:
            assert upper <= _gdp_delta(1 / sigma, eps) * (1 + 1e-3) + 1e-12


@pytest.mark.parametrize(
    ("cls", "sigma", "steps", "epochs"),
    [(g.ShuffledGaussian, 0.8, 10, 3), (g.ShuffledGaussian, 1.2, 5, 2), (g.BallsInBinsGaussian, 0.6, 8, 2)],
)
def test_lower_end_never_exceeds_the_pair_it_post_processes(cls, sigma, steps, epochs):
    m = cls(noise_multiplier=sigma, steps_per_epoch=steps, epochs=epochs)
    r = g.analyze(m)
    means = samplers._PAIRS[m.kind]
    for j, eps in enumerate((0.25, 1.0, 2.0)):
        lower = float(r.delta(eps, side="optimistic"))
        mean, ucb = _pair_delta_ucb(sigma, steps, epochs, means, eps, n=200_000, seed=j)
        assert lower <= ucb, (eps, lower, mean, ucb)
        assert lower >= 0.9 * mean  # and it is not vacuous: the largest coordinate carries most of the pair


def test_lower_bound_exceeds_the_poisson_estimate_where_chua_et_al_show_it():
    # Chua et al. 2024: for small sigma and many steps per epoch the shuffled mechanism is provably far less
    # private than the Poisson figure usually reported for it.
    sigma, steps = 0.6, 10_000
    shuffled = g.analyze(g.ShuffledGaussian(noise_multiplier=sigma, steps_per_epoch=steps, epochs=1))
    poisson = g.analyze(g.SubsampledGaussian(noise_multiplier=sigma, sampling_rate=1 / steps, steps=steps))
    lower = float(shuffled.epsilon(1e-5, side="optimistic"))
    assert lower > 10 * float(poisson.epsilon(1e-5))  # 7.86 against 0.27
    assert lower <= float(shuffled.epsilon(1e-5))


def test_sensitivity_cancels_and_labels():
    a = g.analyze(g.ShuffledGaussian(noise_multiplier=0.9, steps_per_epoch=50, epochs=2))
    b = g.analyze(g.ShuffledGaussian(noise_multiplier=0.9, steps_per_epoch=50, epochs=2, sensitivity=3.0))
    for side in ("pessimistic", "optimistic"):
        assert float(a.epsilon(1e-5, side=side)) == pytest.approx(float(b.epsilon(1e-5, side=side)), rel=1e-12)
    assert a.bound_types["epsilon"] == "upper" and not a.exact
    assert samplers.LOWER_LABEL["shuffled_gaussian"] == "lower (proven, Chua et al. 2024)"


@pytest.mark.parametrize("cls", [g.ShuffledGaussian, g.BallsInBinsGaussian])
def test_a_bracket_of_two_mechanisms_is_said_so_not_refined(cls):
    # The two ends bound different mechanisms (a dominating one above, a dominated pair below): the gap is that
    # bracket's width, which no finer step closes. One round at the generic path's first step; the status and the
    # accountant say which bound each end is; the upper end is still at most the cyclic closed form sqrt(E)/sigma.
    from gdpcore.engine.ladder import GENERIC_START

    m = cls(noise_multiplier=0.8, steps_per_epoch=1000, epochs=1)
    r = g.analyze(m)
    assert r.status.startswith("bracket_of_bounds: certified gap") and "not a discretisation error" in r.status
    assert r.discretization == GENERIC_START
    assert "upper end (proven: " in r.accountant and "lower end: the proven slice construction" in r.accountant
    assert (
        float(r.epsilon(1e-5, side="optimistic")) < float(r.epsilon(1e-5)) <= _gdp_epsilon(1 / 0.8, 1e-5) * (1 + 1e-3)
    )


def test_one_step_per_epoch_is_the_gaussian_at_both_ends():
    # T = 1: every sampler puts the example in the one step; the slice bound is then the Gaussian pair itself.
    r = g.analyze(g.ShuffledGaussian(noise_multiplier=1.0, steps_per_epoch=1, epochs=4))
    truth = _gdp_epsilon(2.0, 1e-5)
    assert float(r.epsilon(1e-5, side="optimistic")) == pytest.approx(truth, rel=2e-3)
    assert float(r.epsilon(1e-5)) == pytest.approx(truth, rel=2e-3)


def test_slices_partition_the_line():
    for means in samplers._PAIRS.values():
        log_p, log_q = samplers.max_slice_masses(0.7, 300, means, 1e-3)
        assert math.fsum(np.exp(log_p)) == pytest.approx(1.0, abs=1e-12)
        assert math.fsum(np.exp(log_q)) == pytest.approx(1.0, abs=1e-12)


def test_bad_parameters_name_the_field():
    with pytest.raises(ValueError, match="steps_per_epoch"):
        g.ShuffledGaussian(noise_multiplier=1.0, steps_per_epoch=0, epochs=1)
    with pytest.raises(ValueError, match="noise_multiplier"):
        g.BallsInBinsGaussian(noise_multiplier=-1.0, steps_per_epoch=3, epochs=1)
    with pytest.raises(ValueError, match="neighbouring"):
        g.CyclicGaussian(noise_multiplier=1.0, steps_per_epoch=3, epochs=1, neighbouring="replace_one")


def test_shuffled_counterpart_of_an_opacus_shuffled_run():
    # Opacus poisson_sampling=False: sample_rate = 1 / len(data_loader); 2.5 epochs of 40 batches.
    m = g.SubsampledGaussian(noise_multiplier=1.1, sampling_rate=1 / 40, steps=100, sensitivity=2.0)
    c = samplers.shuffled_counterpart(m)
    assert c == g.ShuffledGaussian(noise_multiplier=1.1, steps_per_epoch=40, epochs=2, sensitivity=2.0)
    assert samplers.shuffled_counterpart(g.SubsampledGaussian(noise_multiplier=1.0, sampling_rate=0.3, steps=9)) is None
    assert samplers.shuffled_counterpart(g.SubsampledGaussian(noise_multiplier=1.0, sampling_rate=0.1, steps=9)) is None
    assert samplers.shuffled_counterpart(g.Gaussian(noise_multiplier=1.0)) is None


def test_shuffled_counterpart_of_phases_composes_the_phase_lower_bounds():
    a = g.SubsampledGaussian(noise_multiplier=1.0, sampling_rate=1 / 20, steps=40)
    b = g.SubsampledGaussian(noise_multiplier=0.8, sampling_rate=1 / 10, steps=10)
    c = samplers.shuffled_counterpart(g.Composed(mechanisms=(a, g.SelfComposed(mechanism=b, count=2))))
    ca = g.ShuffledGaussian(noise_multiplier=1.0, steps_per_epoch=20, epochs=2)
    cb = g.ShuffledGaussian(noise_multiplier=0.8, steps_per_epoch=10, epochs=1)
    assert c == g.Composed(mechanisms=(ca, g.SelfComposed(mechanism=cb, count=2)))
    # The composed lower end sits between each phase's lower end and the composed upper end.
    r = g.analyze(c)
    lower = float(r.epsilon(1e-5, side="optimistic"))
    assert lower >= float(g.analyze(ca).epsilon(1e-5, side="optimistic"))
    assert lower <= float(r.epsilon(1e-5)) == pytest.approx(_gdp_epsilon(math.sqrt(2 / 1.0 + 2 / 0.64), 1e-5), rel=1e-3)
    assert samplers.shuffled_counterpart(g.Composed(mechanisms=(a, g.Gaussian(noise_multiplier=1.0)))) is None
