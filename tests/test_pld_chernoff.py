"""The Chernoff windows and log-MGFs of gdpcore.pld against independent truth.

References: the log-MGF of the single step's index summed in 50-digit arithmetic (mpmath), and the T-fold
convolution computed directly (repeated ``np.convolve`` in ``np.longdouble``, no FFT), whose tails give the mass the
window leaves out. Chernoff's inequality P(S_T >= a) <= E[e^{t S_1}]^T e^{-t a} holds for every t > 0 (and the
mirror image for t < 0), so the window must hold all but ``tail`` of the mass at every order, not only the ones
the engine tries; the tilted log-MGF and mean (pld.tilt) are checked against the same 50-digit sums.
"""

from __future__ import annotations

import functools
import math

import mpmath
import numpy as np
import pytest
from pld_oracle import direct_power

from gdpcore import pld
from gdpcore.pld.powers import _chernoff_orders, _chernoff_window, _log_mgf

SINGLES = [
    # sigma, q, step: narrow (small q), spread (q = 0.5) and a single step close to a Gaussian (q = 1 - 1e-9)
    (1.0, 0.01, 1e-2),
    (0.6, 0.5, 2e-2),
    (2.0, 0.1, 5e-3),
    (1.1, 1 - 1e-9, 2e-2),
]


def _single(sigma, q, d):
    return pld.single_step_pld(noise_multiplier=sigma, sampling_rate=q, discretization=d)


def _exact_log_mgf(probs: np.ndarray, t: float) -> mpmath.mpf:
    with mpmath.workdps(50):
        return mpmath.log(mpmath.fsum(mpmath.mpf(float(p)) * mpmath.exp(t * i) for i, p in enumerate(probs) if p > 0))


@functools.lru_cache(maxsize=16)
def _direct_power_of(sigma: float, q: float, d: float, steps: int) -> np.ndarray:
    """The T-fold convolution by direct convolutions in extended precision (binary exponentiation, no FFT)."""
    return direct_power(_single(sigma, q, d).probs.astype(np.longdouble), steps)


@pytest.mark.parametrize(("sigma", "q", "d"), SINGLES)
def test_log_mgf_is_never_below_the_exact_one(sigma, q, d):
    single = _single(sigma, q, d)
    orders = _chernoff_orders(single.probs.size, single.step)
    orders = np.concatenate([orders, np.array([1e-6, -1e-6, 0.5, -0.5, 3.0, -3.0])])
    mine = _log_mgf(single.probs, orders)
    for t, k in zip(orders.tolist(), mine.tolist(), strict=True):
        exact = _exact_log_mgf(single.probs, t)
        # an upper bound, and a tight one: the allowance is a few hundred ulps of the largest exponent
        assert k >= exact, (t, k, float(exact))
        scale = abs(t) * single.probs.size + abs(math.log(float(single.probs[single.probs > 0].min()))) + 1.0
        assert k - exact <= 1e-12 * scale, (t, k, float(exact))


@pytest.mark.parametrize(("sigma", "q", "d"), SINGLES)
@pytest.mark.parametrize("steps", [2, 7, 30])
@pytest.mark.parametrize("tail", [1e-3, 1e-8, 1e-13])
def test_window_holds_all_but_tail_of_the_exact_composition(sigma, q, d, steps, tail):
    single = _single(sigma, q, d)
    composed = _direct_power_of(sigma, q, d, steps)
    lo, hi = _chernoff_window(single, steps, tail)
    assert 0 <= lo <= hi <= composed.size - 1
    outside = float(composed[:lo].sum() + composed[hi + 1 :].sum())
    assert outside <= tail * (1 + 1e-9), (lo, hi, outside)
    # and not vacuous: from 7 steps on it is narrower than the full support of the composition
    if steps >= 7:
        assert hi - lo + 1 < composed.size


@pytest.mark.parametrize(
    ("sigma", "q", "d"),
    # small supports (every order in one pass) and large ones (each bound computed when the bisection asks for it)
    [*SINGLES, (0.5, 1e-4, 1e-4), (0.7, 1e-3, 2e-5), (3.0, 0.2, 1e-4), (1.0, 0.05, 1e-5)],
)
def test_window_is_the_best_over_every_candidate_order(sigma, q, d):
    """The window's bisection over the candidate orders (f(t) = (T K(t) + c) / |t| is unimodal in |t|) finds the
    order an exhaustive scan of every candidate's log-MGF bound finds, at every T and tail."""
    single = _single(sigma, q, d)
    orders = _chernoff_orders(single.probs.size, single.step)
    ks = _log_mgf(single.probs, orders)
    for steps in (2, 10, 300, 10_000, 100_000):
        for tail in (pld.TAIL_MASS_TRUNCATION, 1e-24, 1e-30):
            c = math.log(2.0 / tail)
            with np.errstate(over="ignore", invalid="ignore"):
                f = np.where(np.isfinite(ks), (steps * ks + c) / orders, np.nan)
            hi = (single.probs.size - 1) * steps
            up = np.nanmin(f[orders > 0])
            down = np.nanmax(f[orders < 0])
            expected = (max(0, math.floor(down)), min(hi, math.ceil(up)))
            assert _chernoff_window(single, steps, tail) == expected, (steps, tail)


@pytest.mark.parametrize(("sigma", "q", "d"), SINGLES[:2])
def test_chernoff_bound_holds_at_every_order_not_only_the_window_s(sigma, q, d):
    """Any order gives a valid tail bound: a = (T K(t) + log(2 / tail)) / t leaves at most tail / 2 beyond it,
    checked on a dense set of orders of both signs against the direct composition."""
    single = _single(sigma, q, d)
    steps, tail = 12, 1e-9
    composed = _direct_power_of(sigma, q, d, steps)
    orders = np.concatenate([np.geomspace(1e-3, 30.0, 25), -np.geomspace(1e-3, 30.0, 25)])
    ks = _log_mgf(single.probs, orders)
    for t, k in zip(orders.tolist(), ks.tolist(), strict=True):
        a = (steps * k + math.log(2.0 / tail)) / t
        if t > 0:  # P(S_T >= a): the indices from ceil(a) on
            cut = float(composed[min(max(math.ceil(a), 0), composed.size) :].sum())
        else:  # P(S_T <= a): the indices up to floor(a)
            cut = float(composed[: min(max(math.floor(a) + 1, 0), composed.size)].sum())
        assert cut <= tail / 2, (t, a, cut)


@pytest.mark.parametrize(("sigma", "q", "d"), SINGLES)
def test_tilted_log_mgf_and_mean_match_fifty_digit_sums(sigma, q, d):
    single = _single(sigma, q, d)
    losses = single.losses
    for theta in (0.0, 0.3, 1.0, 4.0):
        k, dk = pld.tilted_log_mgf(single, theta)
        with mpmath.workdps(50):
            pos = single.probs > 0
            xs = losses[pos].tolist()
            w = [mpmath.mpf(p) * mpmath.exp(theta * x) for p, x in zip(single.probs[pos].tolist(), xs, strict=True)]
            total = mpmath.fsum(w)
            exact_k = mpmath.log(total)
            exact_dk = mpmath.fsum(wi * xi for wi, xi in zip(w, xs, strict=True)) / total
        assert abs(k - exact_k) <= 1e-13 * (1 + abs(exact_k) + theta * float(np.abs(losses).max()))
        assert abs(dk - exact_dk) <= 1e-12 * (1 + float(np.abs(losses).max()))
