"""The FFT round-off bounds of gdpcore.pld.powers hold against an extended-precision computation of the same thing.

Reference: the same convolution power computed entirely in ``np.longdouble`` (pocketfft's extended-precision
transforms and an extended-precision power; 2^-64 unit round-off on x86-64, 2048x finer than float64), whose own
error is below 1e-3 of the bounds checked here. The bound must exceed the float64 result's distance to it at every
atom, for the float64 path and for the extended path, on single steps that are narrow (||p||_2 ~ 0.3) and spread
(||p||_2 ~ 0.004), at T from 10 to 3,000.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from pld_oracle import direct_power
from scipy import fft as sp_fft

from gdpcore import pld
from gdpcore.pld.powers import _fft_plan, _linear_convolution, _power

EXTENDED = np.finfo(np.longdouble).eps < np.finfo(float).eps


def _extended_reference(probs: np.ndarray, steps: int, n: int) -> np.ndarray:
    x = sp_fft.rfft(probs.astype(np.longdouble), n)
    y = np.ones_like(x)
    base = x.copy()
    k = steps
    while k:
        if k & 1:
            y = y * base
        base = base * base
        k >>= 1
    return sp_fft.irfft(y, n)


CELLS = [
    # sigma, q, step, T: narrow single steps (small q) and spread ones (q = 0.5, sigma 0.6)
    (0.8, 0.001, 1.25e-4, 3000),
    (1.0, 0.01, 1e-3, 300),
    (0.6, 0.5, 2e-3, 10),
    (0.6, 0.5, 2e-3, 200),
    (2.0, 0.1, 5e-4, 1000),
]


@pytest.mark.skipif(not EXTENDED, reason="np.longdouble is float64 on this platform: no extended-precision reference")
@pytest.mark.parametrize(("sigma", "q", "d", "T"), CELLS)
def test_power_roundoff_bound_holds_against_an_extended_precision_composition(sigma, q, d, T):
    single = pld.single_step_pld(noise_multiplier=sigma, sampling_rate=q, discretization=d)
    n = pld.fft_length(single, T)
    reference = _extended_reference(single.probs, T, n)
    lo, hi, _, _, _ = _fft_plan(single, T)
    ref = np.asarray(reference[np.arange(lo, hi + 1) % n], dtype=float)
    bounds = {}
    for extended in (False, True):
        start, out, bound = _power(single, T, fft_len=n, cache=False, extended=extended)
        assert start == lo
        err = float(np.max(np.abs(out - ref)))
        assert err <= bound, (extended, err, bound)
        bounds[extended] = (err, bound)
    # The extended path is tighter, never looser (its forward error is u |X_k| instead of c log2(n) u).
    assert bounds[True][1] <= bounds[False][1]


def _exact_circular_power(probs: np.ndarray, steps: int, n: int) -> tuple[list[int], int]:
    """The T-fold circular convolution (length ``n``, as the FFT computes it) in exact integer arithmetic: every
    float64 mass is an integer times 2^-1100, so the result is (integers, their common denominator 2^(1100 T))."""
    ints = []
    for p in probs.tolist():
        num, den = float(p).as_integer_ratio()
        ints.append(num * (2**1100 // den))
    acc = direct_power(np.array(ints, dtype=object), steps)
    circular = [0] * n
    for j, v in enumerate(acc.tolist()):
        circular[j % n] += v
    return circular, 2 ** (1100 * steps)


@pytest.mark.parametrize(
    ("sigma", "q", "d", "T"),
    [(1.0, 0.1, 5e-2, 7), pytest.param(0.8, 0.05, 5e-2, 12, marks=pytest.mark.slow)],  # 2 s and 18 s
)
def test_power_roundoff_bound_holds_against_the_exact_composition(sigma, q, d, T):
    """Both paths against the exact circular convolution power (integers): the extended one, whose inverse transform
    is extended too below ``EXTENDED_INVERSE_MAX`` points, has a bound ~1e-17 that an extended-precision reference
    could not check (its own error is of that size); its error is the final rounding of each atom, u of its value."""
    from fractions import Fraction

    from gdpcore.pld.powers import EXTENDED_INVERSE_MAX

    single = pld.single_step_pld(noise_multiplier=sigma, sampling_rate=q, discretization=d)
    n = pld.fft_length(single, T)
    assert n <= EXTENDED_INVERSE_MAX
    exact, den = _exact_circular_power(single.probs, T, n)
    bounds = {}
    for extended in (False, True):
        start, out, bound = _power(single, T, fft_len=n, cache=False, extended=extended)
        err = max(abs(Fraction(float(o)) - Fraction(exact[(start + i) % n], den)) for i, o in enumerate(out.tolist()))
        assert float(err) <= bound, (extended, float(err), bound)
        bounds[extended] = bound
    if EXTENDED:  # informative: the extended path's bound is within a few times the rounding of the largest atom
        assert bounds[True] <= 1e-16 < bounds[False]


@pytest.mark.skipif(not EXTENDED, reason="np.longdouble is float64 on this platform: no extended-precision reference")
def test_linear_convolution_bound_holds_against_an_extended_precision_convolution():
    a = pld.compose_loss_pmf(
        pld.single_step_pld(noise_multiplier=0.9, sampling_rate=0.05, discretization=1e-3), 500
    ).probs
    b = pld.compose_loss_pmf(
        pld.single_step_pld(noise_multiplier=2.0, sampling_rate=0.3, discretization=1e-3), 40
    ).probs
    out, bound = _linear_convolution(a, b)
    m = a.size + b.size - 1
    n = sp_fft.next_fast_len(m, real=True)
    ref = sp_fft.irfft(sp_fft.rfft(a.astype(np.longdouble), n) * sp_fft.rfft(b.astype(np.longdouble), n), n)[:m]
    err = float(np.max(np.abs(out - np.clip(np.asarray(ref, dtype=float), 0.0, None))))
    assert err <= bound
    assert bound < 1e-17  # informative: 1e-17 per atom on supports of ~1e4 atoms


@pytest.mark.slow  # 43 s at load 8 on the 2 shared cores
def test_bound_is_componentwise_not_rms():
    """The case an RMS-based estimate missed (tests/test_engine.py keeps the analyze cell): sigma 1.05, q 0.351,
    T 1897. The twin at step 3.125e-5 (9.8M-point FFT) read epsilon(1e-11) = 244.88835 above the pessimistic
    244.88759 when the per-atom allowance came from the RMS error per coefficient; the pessimistic delta at that
    epsilon converges to 9.9965e-12 from steps 1e-3 to 1.25e-4, so the lower end must stay at or below 244.88759."""
    import gdpcore as g
    from gdpcore.engine import Producer

    mech = g.SubsampledGaussian(noise_multiplier=1.050086509608957, sampling_rate=0.35109913867374065, steps=1897)
    producer = Producer(deltas=[1e-5, 1e-9, 1e-12], alpha_min=1e-10)
    upper = float(producer.curve_at(mech, 1e-3).epsilon_at(1e-11))
    assert upper == pytest.approx(244.88759, abs=5e-5)
    lower = float(producer.curve_at(mech, 3.125e-5, side="optimistic").epsilon_at(1e-11))
    assert lower <= upper
    assert math.isfinite(lower) and lower > 0.999 * upper  # still informative
