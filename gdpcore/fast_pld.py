"""Vectorised connect-the-dots PLD of the Poisson-subsampled Gaussian, and its T-fold composition.

Why hand-written (measured on the shared 2-core machine, sigma=1, q=0.01, discretisation 1e-4, 56,541 points):

* dp_accounting builds the single-step connect-the-dots PMF by calling ``inverse_privacy_loss`` once per grid point
  in a Python list comprehension: 0.28-0.54 s per (sigma, q) here (0.21 s quiet, docs/references.md P-5), the
  dominant cost of a per-point loop. The same grid, truncation bounds and connect-the-dots formula (Doroshenko et
  al. 2022, Alg. 1) evaluated in a few numpy calls take 3-6 ms (about 90x).
* ``self_compose(1000)`` takes 0.11-0.26 s in dp_accounting (complex FFT of the real PMF on a loose Chernoff
  window, then a complex ``**``); :func:`compose_loss_pmf` takes about 6-20 ms: an rfft, a window about half as long
  (finer Chernoff orders), binary exponentiation instead of a complex log/exp per bin, and log-MGFs cached per PMF.
* End to end, benchmarks/bench_grid.py (reference grid, full report per cell with certified brackets on every
  number) runs 23x the points per second of the per-point dp_accounting loop measured in the same run in one
  process, 50x on two workers; see benchmarks/RESULTS.md.

dp_accounting's public types are kept where they cost nothing: :func:`to_dp_accounting_pld` wraps the arrays as a
``PrivacyLossDistribution`` of ``DensePLDPmf`` objects (its queries agree with ours; tests check it).

What differs from dp_accounting, and why it stays pessimistic:

* The hockey-stick divergences at the grid points come from closed forms instead of dp_accounting's
  ``mu_upper_cdf(x) - exp(eps + log cdf(x))`` difference of two nearly equal numbers:

  - remove (P = (1-q) N(0, s^2) + q N(-1, s^2), Q = N(0, s^2)), for e^eps > 1 - q:
    ``delta_R(eps) = q * delta_G(l0)`` with ``e^l0 = (e^eps - 1 + q) / q``;  ``1 - e^eps`` below;
  - add (P = N(0, s^2), Q = (1-q) N(0, s^2) + q N(1, s^2)), for e^eps < 1 / (1 - q):
    ``delta_A(eps) = c * delta_G(eps + log q - log c)`` with ``c = 1 - (1-q) e^eps``; 0 above;

  where delta_G is the profile of the Gaussian mechanism with mu = 1/s (exact, evaluated in log space by
  :func:`gdpcore.closed_form.get_log_delta_from_gdp`). Both follow by factoring the common N(0, s^2) component out of
  sup_S P(S) - e^eps Q(S). Connect-the-dots is pessimistic for *exact* divergences at the grid points (the chord of
  the convex function e^eps -> delta lies above it), so nothing is lost against dp_accounting.
* Composition is an rfft power on a window sized by a Chernoff bound (``tail_mass_truncation = 1e-15``, added to the
  infinity mass, as in dp_accounting); one transform of a single-step PMF is reused for every number of steps that
  fits the same FFT length.

Cross-checked against dp_accounting (tests/test_fast_pld.py): single-step PMFs agree with
``from_gaussian_mechanism(..., use_connect_dots=True)`` to round-off, composed epsilons to 1e-6 relative.

Optimistic twin (lower ends of brackets only; :func:`optimistic_single_step_pld`, :func:`optimistic_composition`,
:func:`threshold_test_masses`):

* privacy buckets rounded down, exactly dp_accounting's ``pessimistic_estimate=False, use_connect_dots=False``
  remove PMF (bucket masses as closed-form CDF/survival differences; tests: round-off agreement, composed epsilon to
  1e-6). Read as a PLD, its delta(eps) is a lower bound, but a loose one: every step's loss is rounded down by about
  d / 2, so after T steps epsilon is low by about T d / 2 (10-90% relative at T = 1e4 on the reference grid at the
  steps connect-the-dots needs) - a first-order error, against second order for connect-the-dots.
* read as a mechanism instead, the buckets lose only second-order information: bucketing the output by loss bucket
  is post-processing, so every test on the composed bucket index K is a test on the mechanism's output
  (data processing), and both laws of K are convolution powers - P of the bucket masses P_k, Q of the bucket masses
  Q_k = P_k e^{-l_k} <= e^{-k d} w_k, with w_k = P_k e^{-r_k} and r_k a closed-form lower bound on the bucket's loss
  residual l_k - k d. The twin is the curve through all such tests (:func:`threshold_test_masses` has the
  proof; :func:`gdpcore.curve.curve_from_threshold_tests`). It replaced a residual shift (delta(eps) >=
  delta_buckets(eps - c) - tail with a Chernoff bound c on the residuals' sum), whose deviation term left gaps
  10-20x larger at the same step (docs/references.md A-1; 2.4% on the advantage of sigma 0.8, q 1e-3, T 3000 at
  step 1.25e-4, against 0.02% now).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy import fft as sp_fft
from scipy import special

from gdpcore._validation import check_count, check_discretization, check_positive, check_probability
from gdpcore.closed_form import get_log_delta_from_gdp
from gdpcore.pmf import LossPMF, rfft_extended

__all__ = [
    "LOG_MASS_TRUNCATION_BOUND",
    "TAIL_MASS_TRUNCATION",
    "TILT_FRACTION",
    "threshold_test_masses",
    "compose_loss_pmf",
    "fft_bytes",
    "fft_length",
    "optimistic_composition",
    "optimistic_loss_pmf",
    "optimistic_single_step_length",
    "optimistic_single_step_pld",
    "single_step_length",
    "single_step_pld",
    "subsampled_gaussian_loss_pmf",
    "to_dp_accounting_pld",
]

LOG_MASS_TRUNCATION_BOUND = -50.0
"""log of the noise mass cut from each tail of the single step (dp_accounting's default)."""

TAIL_MASS_TRUNCATION = 1e-15
"""Mass the composition may cut from its two tails together (dp_accounting's default); added to +inf."""

_BYTES_PER_FFT_POINT = 104  # float64 input + complex128 spectrum and its power + float64 output and roll (64), plus
# the extended transform's longdouble input (16) and clongdouble half spectrum (16) and its rounded copy (8)


def _log_delta_gauss(sigma: float, eps: np.ndarray) -> np.ndarray:
    return get_log_delta_from_gdp(mu=1.0 / sigma, epsilon=eps)


def _grid_bounds(sigma: float, q: float, step: float, direction: str) -> tuple[int, int]:
    """dp_accounting's connect-the-dots epsilon range: losses at the noise truncation points, rounded outwards."""
    x_low = float(special.ndtri(0.5 * math.exp(LOG_MASS_TRUNCATION_BOUND))) * sigma
    x_high = -x_low
    log1mq = math.log1p(-q) if q < 1 else -math.inf
    log_q = math.log(q)
    if direction == "remove":
        x_low -= 1.0

        def loss(x: float) -> float:  # log((1-q) + q e^{l0(x)}), l0(x) = (-1/2 - x) / sigma^2
            return float(np.logaddexp(log1mq, log_q + (-0.5 - x) / sigma**2))

    else:
        x_high += 1.0

        def loss(x: float) -> float:  # -log((1-q) + q e^{(x - 1/2) / sigma^2})
            return -float(np.logaddexp(log1mq, log_q + (x - 0.5) / sigma**2))

    return math.floor(loss(x_high) / step), math.ceil(loss(x_low) / step)


def _deltas(sigma: float, q: float, eps: np.ndarray, direction: str) -> np.ndarray:
    """Exact hockey-stick divergence of one subsampled-Gaussian step at each eps (see the module docstring)."""
    out = np.zeros_like(eps)
    if direction == "remove":
        # e^l0 = (e^eps - 1 + q) / q, defined where e^eps > 1 - q.
        base = np.expm1(eps) + q
        inside = base > 0
        with np.errstate(divide="ignore"):
            l0 = np.log(base[inside]) - math.log(q)
        out[inside] = q * np.exp(_log_delta_gauss(sigma, l0))
        out[~inside] = -np.expm1(eps[~inside])
    else:
        # c = 1 - (1-q) e^eps, defined (positive) where e^eps < 1/(1-q); the divergence is 0 above.
        log1mq = math.log1p(-q) if q < 1 else -math.inf
        c = -np.expm1(log1mq + eps)
        inside = c > 0
        e_prime = eps[inside] + math.log(q) - np.log(c[inside])
        out[inside] = c[inside] * np.exp(_log_delta_gauss(sigma, e_prime))
    return np.clip(out, 0.0, 1.0)


def _connect_the_dots(deltas: np.ndarray, step: float) -> tuple[np.ndarray, float]:
    """Doroshenko et al. 2022 Alg. 1 on a fixed-gap grid (dp_accounting's fixed-gap formula, vectorised)."""
    deltas = np.minimum.accumulate(deltas)
    if deltas.size == 1:
        return np.array([1.0 - deltas[0]]), float(deltas[0])
    diffs = np.diff(deltas)
    em1 = math.expm1(step)
    probs = np.empty_like(deltas)
    probs[0] = 1.0 - deltas[0] + diffs[0] / em1
    probs[1:-1] = (diffs[1:] - diffs[:-1] * math.exp(step)) / em1
    probs[-1] = diffs[-1] / math.expm1(-step)
    return np.maximum(probs, 0.0), float(deltas[-1])


def single_step_pld(*, noise_multiplier: float, sampling_rate: float, discretization: float, direction: str = "remove"):
    """Pessimistic (connect-the-dots) single-step PMF of the Poisson-subsampled Gaussian, one direction.

    The grid, noise truncation and formula are dp_accounting's ``from_gaussian_mechanism(sigma, sampling_prob=q,
    use_connect_dots=True)``; only the divergences are computed in closed form and all of it is vectorised.
    """
    sigma = check_positive("noise_multiplier", noise_multiplier)
    q = check_probability("sampling_rate", sampling_rate)
    step = check_discretization(discretization)
    if direction not in ("remove", "add"):
        raise ValueError(f"direction must be 'remove' or 'add', got {direction!r}")
    lo, hi = _grid_bounds(sigma, q, step, direction)
    eps = np.arange(lo, hi + 1) * step
    probs, inf_mass = _connect_the_dots(_deltas(sigma, q, eps, direction), step)
    return LossPMF(lower_index=lo, step=step, probs=_restore_mass(probs, inf_mass), infinity_mass=inf_mass)


def _restore_mass(probs: np.ndarray, inf_mass: float) -> np.ndarray:
    """Connect-the-dots masses scaled up to their exact total 1 - inf_mass when rounding left them short.

    The formula's second differences of delta telescope to 1 - delta(top) in exact arithmetic; in float64 their sum
    comes out up to ~2e-14 short (n u, with n ~ 1e4-1e5 atoms). A T-fold composition multiplies that deficit by T
    (2.9e-10 at T = 60,614), and a pessimistic curve then misses that much mass: its delta(0) fell below a proven
    lower bound (the twin, :func:`threshold_test_masses`) by 2.3e-10 on sigma 0.8909, q 0.02901. The rounding
    errors sit where the atoms are large (the bulk), so the deficit is restored in proportion; a total above the
    exact one (rounding the other way) only raises delta and is kept."""
    total = math.fsum(probs)
    target = 1.0 - inf_mass
    if 0.0 < total < target:
        return probs * (target / total)
    return probs


_ORDERS_PER_SUPPORT = np.array([1.0, 2.0, 4.0, 8.0, 14.0, 20.0])
_ORDERS_PER_STEP = np.geomspace(2.0**-3, 2.0**8, 9)


def _chernoff_orders(n: int, step: float) -> np.ndarray:
    pos_orders = np.concatenate([_ORDERS_PER_SUPPORT / n, _ORDERS_PER_STEP * step])
    return np.concatenate([pos_orders, -pos_orders])


def _log_mgf(probs: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """log E[e^{t i}] of the index under ``probs`` at each order t (max-shifted, no overflow)."""
    pos = probs > 0
    logp = np.log(probs[pos])
    ip = np.flatnonzero(pos).astype(float)
    out = np.empty(orders.size)
    for k, t in enumerate(orders):
        x = ip * t
        x += logp
        m = x.max()
        np.subtract(x, m, out=x)
        np.exp(x, out=x)
        out[k] = m + math.log(x.sum())
    return out


def _chernoff_window(single: LossPMF, steps: int, tail: float) -> tuple[int, int]:
    """Index range (in units of the single-step array) holding all but ``tail`` of the T-fold convolution.

    Chernoff: P(S_T >= a) <= E[e^{t S_1}]^T e^{-t a} for every t > 0 (and t < 0 for the lower tail), so any set of
    orders gives a valid window. dp_accounting's orders (|t| <= 20 / n, ``common.compute_self_convolve_bounds``) are
    subsampled (|t| n in {1, 2, 4, 8, 14, 20}) and orders fixed in *loss* units (|t| / step in 2^-3 .. 2^8) added:
    those stay sharp when the single-step support n is much wider than the composed spread, which shrinks the FFT
    about 2x on DP-SGD grids. The single-step log-MGFs do not depend on T: computed once per PMF and cached.
    """
    probs = single.probs
    n = probs.size
    hi = (n - 1) * steps
    lo = 0
    if steps == 1 or n == 1:
        return lo, hi
    orders = _chernoff_orders(n, single.step)
    log_mgf = single.cached("chernoff_log_mgf", lambda: _log_mgf(probs, orders))
    with np.errstate(over="ignore", invalid="ignore"):
        bounds = (steps * log_mgf + math.log(2.0 / tail)) / orders
    ok = np.isfinite(bounds)
    up = bounds[(orders > 0) & ok]
    down = bounds[(orders < 0) & ok]
    if up.size:
        hi = min(hi, math.ceil(up.min()))
    if down.size:
        lo = max(lo, math.floor(down.max()))
    return lo, hi


def _int_power(x: np.ndarray, k: int) -> np.ndarray:
    """x**k for a complex array by binary exponentiation: about log2(k) complex products per element instead of a
    complex log and exp (numpy's general complex power), 3-5x faster at k = 1e3..1e4; round-off grows ~log2(k) ulps."""
    result = None
    base = x.copy()
    while True:
        if k & 1:
            result = base.copy() if result is None else np.multiply(result, base, out=result)
        k >>= 1
        if not k:
            assert result is not None  # k >= 1 sets it on the first set bit
            return result
        np.multiply(base, base, out=base)


def single_step_length(*, noise_multiplier: float, sampling_rate: float, discretization: float) -> int:
    """Number of grid points of the single-step remove PMF, in closed form (before anything is allocated)."""
    sigma = check_positive("noise_multiplier", noise_multiplier)
    q = check_probability("sampling_rate", sampling_rate)
    lo, hi = _grid_bounds(sigma, q, check_discretization(discretization), "remove")
    return hi - lo + 1


SPLICED_BYTES_PER_POINT = 176
"""Working bytes per atom of a spliced composition: values and per-atom bounds (16) plus the curve read from it
(``gdpcore.engine``'s 160 per point)."""

WRAP_TAIL = 1e-30
"""Default mass allowed outside an optimistic FFT buffer's true-mass span: the buffer holds the Chernoff window at
this tail plus a guard band, so at most this much mass can wrap around into the output window (which holds all but
``TAIL_MASS_TRUNCATION``). Callers that know the smallest delta or FPR they read pass a larger ``wrap_tail`` (the
engine passes 1e-4 of it, ``gdpcore.engine.twin_tail``): the buffer then shrinks to the output window's size (it
was 1.4-1.9x larger at 1e-30 on DP-SGD grids) and the same slack is subtracted from the lower profile."""

_GUARD_MIN = 64


def _fft_plan(single: LossPMF, steps: int, wrap_tail: float | None = None) -> tuple[int, int, int, int, int]:
    """(lo, hi) output window at ``TAIL_MASS_TRUNCATION``, (lo30, hi30) true-mass span at ``WRAP_TAIL``, FFT length.

    The buffer covers the span (plus a small margin), so at most ``WRAP_TAIL`` of mass wraps around into the output
    window."""
    lo, hi = _chernoff_window(single, steps, TAIL_MASS_TRUNCATION)
    if wrap_tail is None:
        # Pessimistic side: mass wrapping around into the window only raises delta (it is also counted at +inf).
        return lo, hi, lo, hi, sp_fft.next_fast_len(max(hi - lo + 1, single.probs.size), real=True)
    lo30, hi30 = _chernoff_window(single, steps, wrap_tail)
    lo30, hi30 = min(lo30, lo), max(hi30, hi)
    span = hi30 - lo30 + 1
    n = sp_fft.next_fast_len(max(span + _GUARD_MIN, single.probs.size), real=True)
    return lo, hi, lo30, hi30, n


def fft_length(single: LossPMF, steps: int, *, wrap_tail: float = WRAP_TAIL) -> int:
    """The FFT length :func:`compose_loss_pmf` uses for ``steps`` (Chernoff windows; computed before any FFT):
    optimistic single steps span the mass down to ``wrap_tail`` (wrap-around would raise a lower bound)."""
    if steps == 1:
        return single.probs.size
    return _fft_plan(single, steps, None if single.pessimistic else wrap_tail)[4]


def _power(
    single: LossPMF,
    steps: int,
    *,
    fft_len: int | None,
    cache: bool,
    wrap_tail: float = WRAP_TAIL,
    extended: bool = False,
) -> tuple[int, np.ndarray, float]:
    """(first index of the output window, its values, per-atom round-off bound) of the T-fold convolution power.

    The bound (:func:`_power_roundoff`) is rigorous and componentwise. Its size is set by the forward transform:
    a float64 FFT errs by up to ``c log2(n) u ||p||_1`` on *every* coefficient, and the few coefficients with
    |X_k| ~ 1 that survive the T-th power carry that error coherently into every atom. An earlier bound that took
    the RMS error per coefficient (``log2(n) u ||p||_2``) instead was exceeded 1.6x per atom, coherently over 1e5
    atoms, on sigma=1.05, q=0.351, T=1897 at step 3.125e-5 (9.8M-point FFTs): the lower end of epsilon(1e-11) came
    out above the upper end (tests/test_engine.py keeps that cell). With ``extended`` the forward transform is
    computed in ``np.longdouble`` and rounded once (error ``u |X_k|`` instead of ``c log2(n) u``), and the
    coefficients with non-negligible ``|X_k|^(T-1)`` - 1% of them on the reference grid, a low-frequency band - are
    powered in extended precision too and rounded once (error ``u |Y_k|`` instead of ``T u |Y_k|``): the bound then
    no longer grows with T or with the single step's spread, and is below the RMS one at T >= 1e3. A noise level
    read off empty buffer positions is *not* a bound: the error is the white transform error smoothed by the
    composition, correlated over the whole support, and was measured 100x larger than what a guard band shows."""
    lo, hi, _, _, n = _fft_plan(single, steps, None if single.pessimistic else wrap_tail)
    if fft_len is not None and fft_len >= n:
        n = fft_len
    if not extended:
        transform = single.rfft(n) if cache else sp_fft.rfft(single.probs, n)
        conv = sp_fft.irfft(_int_power(transform, steps), n)
        bound = _power_roundoff(single.probs, transform, steps, n)
    else:
        ext = single.rfft(n, extended=True) if cache else rfft_extended(single.probs, n)
        transform = ext.astype(np.complex128)
        powered = _int_power(transform, steps)
        # Where |X_k|^(T-1) is not negligible the power is taken in extended precision and rounded once.
        keep = _kept(np.abs(transform), steps, float(np.sum(np.abs(single.probs))))
        if keep.any():
            powered[keep] = _int_power(ext[keep], steps).astype(np.complex128)
        conv = sp_fft.irfft(powered, n)
        bound = _power_roundoff(single.probs, transform, steps, n, extended_power=keep)
    out = conv[np.arange(lo, hi + 1) % n]
    return lo, out, bound


def _kept(mag: np.ndarray, steps: int, l1: float = 1.0) -> np.ndarray:
    """Coefficients whose (|X_k| / ||x||_1 + slack)^(T-1) may exceed e^-60 (the others contribute at most
    n e^-60 T ||x||_1^T, see :func:`_power_roundoff`)."""
    return mag / max(l1, 1e-300) + 1e-12 > math.exp(-60.0 / max(steps - 1, 1))


_U = float(np.finfo(float).eps) / 2.0
_U_EXT = float(np.finfo(np.longdouble).eps) / 2.0  # 2^-64 on x86-64; = _U where longdouble is float64


# Sums of elementwise products are written np.sum(x * y), not x @ y: OpenBLAS's threaded dot keeps a second thread
# spinning after every call (measured: 45% of the grid benchmark's CPU time on 2 cores, stolen from the other worker).


_FFT_ERROR_PER_LEVEL = 5.5
"""Componentwise error of a floating-point FFT, in units of u per log2(n) level, relative to the l1 norm of its
input (Cooley-Tukey error analysis, e.g. Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., Sec.
24.1): a butterfly a + w b errs by at most u |a + w b| + (sqrt(5) u + mu) |b| with mu the twiddle error (~u), and
the partial transforms that feed one output at a level have moduli summing to at most the input's l1 norm; later
levels only add them with unit-modulus weights. So every output coefficient errs by at most
(2 + sqrt(5) + mu / u) u log2(n) ||x||_1 < 5.5 u log2(n) ||x||_1 (radix-p levels count as log2(p) levels and err
less per level)."""


def _fft_error(n: int) -> float:
    """Componentwise error of one length-``n`` FFT per unit of the input's l1 norm."""
    return _FFT_ERROR_PER_LEVEL * math.log2(max(n, 2)) * _U


def _power_roundoff(
    probs: np.ndarray,
    transform: np.ndarray,
    steps: int,
    n: int,
    *,
    extended_power: np.ndarray | None = None,
    unit: bool = False,
) -> float:
    """Per-atom bound on the round-off of ``irfft(rfft(probs, n) ** steps)`` (see :func:`_power`).

    Rigorous and componentwise. A float64 forward transform errs per coefficient by at most
    ``e = c log2(n) u ||p||_1`` (:data:`_FFT_ERROR_PER_LEVEL`), and the T-th power by binary exponentiation turns that
    into ``T (|X_k| + 2 e)^(T-1) e`` plus its own ``2 sqrt(5) log2(T) u |X_k|^T`` (at most 2 log2 T complex products,
    each within sqrt(5) u). With ``extended_power`` (a mask), the transform was computed in extended precision
    (u_ext = 2^-64 on x86-64; = u where ``np.longdouble`` is float64, and the bound stays valid) and the masked
    coefficients were powered there too and rounded once: their error is ``u |Y_k|`` plus the extended computation's
    (the same formula with u_ext); the others were powered in float64 from the rounded transform (forward error
    ``u |X_k| + e_ext``). The inverse transform passes an input error through with weight 1 / n per coefficient and
    adds ``c log2(n) u (1/n) sum_k |Y_k|`` (plus u for the 1/n scaling). Sums run over the full spectrum (twice the
    half spectrum: on the safe side); coefficients whose (|X_k| + 2 e_k)^(T-1) is below e^-60 are bounded together
    by n e^-60 (T + 1).

    The bound is homogeneous: for a sub-probability input (the bucket Q-weights of the twin, whose T-th power has
    total mass (sum w)^T, 4e-17 on sigma 0.6, q 0.04, T 1e4 at step 8e-3) it is computed on ``probs / ||p||_1``
    and scaled by ``||p||_1^T``. Taken as it stands, the e^-60 cut-off of the dropped coefficients (absolute, for a
    unit mass) was 1.7e-22 per atom there, above the composed masses the tail reads, and made the twin 3.5% low."""
    l1 = float(np.sum(np.abs(probs)))
    if not unit and l1 > 0.0:
        with np.errstate(under="ignore"):
            scale = math.exp(max(steps, 1) * math.log(l1)) if steps * math.log(l1) < 700.0 else math.inf
        inner = _power_roundoff(probs / l1, transform / l1, steps, n, extended_power=extended_power, unit=True)
        return inner * scale
    l1 = 1.0
    mag = np.sqrt(transform.real**2 + transform.imag**2)
    t = max(steps, 1)
    log_t = math.log2(max(t, 2))
    exp_err = 2.0 * math.sqrt(5.0) * log_t * _U
    if extended_power is None:
        e_fwd = np.full(mag.shape, _fft_error(n) * l1)
        exp_errs = np.full(mag.shape, exp_err)
    else:
        e_ext = _FFT_ERROR_PER_LEVEL * math.log2(max(n, 2)) * _U_EXT * l1
        e_fwd = np.where(extended_power, e_ext, _U * mag * (1.0 + 2.0 * _U) + e_ext)
        # Extended power, rounded once: u |Y| plus the extended products' error.
        exp_errs = np.where(extended_power, _U + 2.0 * math.sqrt(5.0) * log_t * _U_EXT, exp_err)
    up = np.minimum(mag + 2.0 * e_fwd, 1.0 + 2.0 * e_fwd)
    keep = up > math.exp(-60.0 / max(t - 1, 1))
    with np.errstate(under="ignore", over="ignore", divide="ignore"):
        powered_m1 = np.exp((t - 1) * np.log(up[keep]))
    rest = (mag.size - int(np.count_nonzero(keep))) * math.exp(-60.0) * (t + 1) * (1.0 + 2.0 * _U)
    prop = float(np.sum(powered_m1 * (t * e_fwd[keep] + exp_errs[keep] * up[keep])))
    total_pow = 2.0 * (float(np.sum(powered_m1 * up[keep])) + rest)
    return (2.0 * (prop + rest) + (_fft_error(n) + _U) * total_pow) / n


def fft_bytes(length: int) -> int:
    """Peak working memory of one composition of FFT length ``length`` (input, spectrum, power, output)."""
    return _BYTES_PER_FFT_POINT * int(length)


def compose_loss_pmf(
    single: LossPMF,
    steps: int,
    *,
    pessimistic: bool = True,
    fft_len: int | None = None,
    tilt: float = 0.0,
    wrap_tail: float = WRAP_TAIL,
    extended: bool = True,
) -> LossPMF:
    """T-fold composition of a single-step PMF as a :class:`LossPMF` (FFT power on a Chernoff window).

    Mass outside the window (at most ``TAIL_MASS_TRUNCATION``) may wrap around inside it or be lost; adding the
    whole budget to the +inf mass keeps every delta(eps) an upper bound, as in dp_accounting.

    Round-off: the inverse FFT returns every atom with an absolute error of about the same size; a rigorous a-priori
    bound on it (:func:`_power_roundoff`) is recorded as ``roundoff``, which the curve constructions move to the safe
    side (:meth:`gdpcore.pmf.LossPMF.with_roundoff_allowance`). ``extended`` (the default) takes the forward
    transform, and the power of the coefficients that survive it, in extended precision (:func:`_power`): the bound
    is then 10-100x smaller, at 3.7x the cost of the forward transform; ``extended=False`` suits estimates (the
    engine's doubled-step comparison). The buffer spans the mass down to ``WRAP_TAIL``, so wrap-around into the
    output window is at most 1e-30.

    ``tilt`` > 0 adds an exponentially tilted composition for the upper tail (:func:`_tilted_tail`): the same
    convolution power of ``p_i e^{tilt l_i - K}`` (K its log-MGF), untilted exactly afterwards, has its round-off
    relative to the tilted law's peak, i.e. full relative precision around the loss ``T K'(tilt)``. Each atom is
    taken from whichever composition has the smaller round-off bound there (the bound becomes per atom).
    """
    steps = check_count("steps", steps)
    p = single.probs
    inf_mass = -math.expm1(steps * math.log1p(-single.infinity_mass)) if single.infinity_mass < 1 else 1.0
    if steps == 1:
        return LossPMF(single.lower_index, single.step, p.copy(), float(inf_mass), pessimistic, single.roundoff)
    lo, out, noise = _power(single, steps, fft_len=fft_len, cache=True, wrap_tail=wrap_tail, extended=extended)
    roundoff = noise + single.max_roundoff * steps
    probs = np.clip(out, 0.0, None)
    composed = LossPMF(
        lower_index=single.lower_index * steps + lo,
        step=single.step,
        probs=probs,
        infinity_mass=float(min(1.0, inf_mass + TAIL_MASS_TRUNCATION)),
        pessimistic=pessimistic,
        roundoff=roundoff,
    )
    if tilt > 0.0:
        return refine_tail(composed, single, steps, tilt, wrap_tail=wrap_tail)
    return composed


def refine_tail(
    composed: LossPMF,
    single: LossPMF,
    steps: int,
    theta: float,
    *,
    max_bytes: float = math.inf,
    wrap_tail: float = WRAP_TAIL,
) -> LossPMF:
    """``composed`` (= ``compose_loss_pmf(single, steps)``) with its upper tail recomputed on the single step tilted
    by ``theta`` (see :func:`compose_loss_pmf`); identity for theta <= 0, a single step with round-off, or when the
    tilted composition's plan (FFT buffers plus the spliced arrays) exceeds ``max_bytes`` (checked before
    allocating: the round-off allowance then stays, valid and looser)."""
    if theta <= 0.0 or steps == 1 or single.max_roundoff > 0.0:
        return composed
    tilted = _tilted_single(single, theta)
    n = _fft_plan(tilted, steps, None if single.pessimistic else wrap_tail)[4]
    # FFT buffers, then the spliced window (at most both windows), its per-atom bounds and the curve read from it.
    if fft_bytes(n) + SPLICED_BYTES_PER_POINT * (n + composed.probs.size) > max_bytes:
        return composed
    return _splice(composed, _tilted_tail(single, steps, theta, tilted, wrap_tail=wrap_tail))


def tilted_log_mgf(single: LossPMF, theta: float) -> tuple[float, float]:
    """(K(theta), K'(theta)) of one step's loss under P: log E[e^{theta L}] and the tilted mean E_theta[L]."""

    def support() -> tuple[np.ndarray, np.ndarray]:
        pos = single.probs > 0
        return np.log(single.probs[pos]), single.losses[pos]

    logp, losses = single.cached("log_probs_and_losses", support)
    x = logp + theta * losses
    m = float(x.max())
    w = np.exp(x - m)
    total = float(w.sum())
    return m + math.log(total), float(np.sum(w * losses)) / total


_TILT_BISECTIONS = 6  # theta to 2^-6 of its bracket (~1.6%): any theta is exact, it only has to be near the target


def tilt_for_tail(single: LossPMF, steps: int, tail: float) -> float:
    """The tilt theta >= 0 at which the T-fold sum's large-deviation rate T (theta K'(theta) - K(theta)) equals
    log(1 / tail): the tilted mean T K'(theta) is then where the law's upper tail holds about ``tail`` of the mass,
    the region a query at delta (or FPR) ``tail`` reads. Bisection (the rate increases with theta); any theta gives
    exact values, this one gives them full relative precision where they are read."""
    goal = math.log(1.0 / tail)

    def rate(theta: float) -> float:
        k, dk = tilted_log_mgf(single, theta)
        return steps * (theta * dk - k)

    lo, hi = 0.0, 1.0
    while rate(hi) < goal and hi < 1e6:
        lo, hi = hi, hi * 2.0
    for _ in range(_TILT_BISECTIONS):
        mid = 0.5 * (lo + hi)
        if rate(mid) < goal:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


TILT_FRACTION = 0.5
"""Fraction of :func:`tilt_for_tail`'s theta the engine tilts by. Any tilt gives exact values with valid per-atom
bounds (the splice keeps, per atom, whichever composition has the smaller one), so the fraction trades tightness
against FFT length only. The full tilt centres the tilted law on the read region and gives full relative precision
there, far more than the reads need (the base composition's bound is only ~1e3 too large there); but the tilted law
of a subsampled Gaussian is a sum of rare large jumps, and at the full tilt its Chernoff window is 7-12x the base's
(sigma 0.6-1.0, q = 1e-3: 655,360 FFT points against 54,000). At half the tilt the window is 1.0-1.7x the base's
and epsilon(1e-9) and mu at FPR 1e-10 move by under 1e-7 relative (five DP-SGD cells, sigma 0.6-1.5, q 1e-3 to
0.1, T 100 to 1e4, measured beside the full tilt)."""


def tilt_for_loss(single: LossPMF, steps: int, target: float) -> float:
    """The tilt theta >= 0 whose tilted T-fold mean T K'(theta) is ``target`` (0 when the untilted mean is already
    beyond it); found by bisection (K' increases with theta)."""
    if not math.isfinite(target) or steps * tilted_log_mgf(single, 0.0)[1] >= target:
        return 0.0
    top = float(single.losses[single.probs > 0].max())
    if steps * top <= target:
        return 0.0
    lo, hi = 0.0, 1.0
    while steps * tilted_log_mgf(single, hi)[1] < target and hi < 1e6:
        lo, hi = hi, hi * 2.0
    for _ in range(_TILT_BISECTIONS):
        mid = 0.5 * (lo + hi)
        if steps * tilted_log_mgf(single, mid)[1] < target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _tilted_single(single: LossPMF, theta: float) -> LossPMF:
    """The single step's P-law tilted by e^{theta L} and renormalised (its log-MGF K(theta) cached)."""
    k, _ = tilted_log_mgf(single, theta)
    pos = single.probs > 0
    tilted_probs = np.zeros_like(single.probs)
    tilted_probs[pos] = np.exp(np.log(single.probs[pos]) + theta * single.losses[pos] - k)
    tilted = LossPMF(single.lower_index, single.step, tilted_probs, 0.0, single.pessimistic)
    tilted.cached("tilt_log_mgf", lambda: k)
    return tilted


def _tilted_tail(
    single: LossPMF, steps: int, theta: float, tilted: LossPMF | None = None, *, wrap_tail: float = WRAP_TAIL
) -> tuple[int, np.ndarray, np.ndarray]:
    """(first global lattice index, untilted values, their per-atom round-off bounds) of the T-fold composition
    computed on the tilted single step; both are exact rescalings of the tilted composition."""
    if tilted is None:
        tilted = _tilted_single(single, theta)
    k = tilted.cached("tilt_log_mgf")
    lo, out, noise = _power(tilted, steps, fft_len=None, cache=False, wrap_tail=wrap_tail)
    out_len = out.size
    # Per atom: the transform's noise plus the tilted mass that may wrap around into the window (the pessimistic
    # side's wrap-around only adds mass, which is safe there).
    rho = noise + (wrap_tail if not single.pessimistic else 0.0)
    first = single.lower_index * steps + lo
    # untilt: r_J = r~_J exp(T K - theta J d), in log space (no overflow)
    log_scale = steps * k - theta * single.step * (first + np.arange(out_len))
    with np.errstate(over="ignore"):
        scale = np.exp(np.minimum(log_scale, 700.0))
        values = np.clip(out, 0.0, None) * scale
        errors = rho * scale
    errors = np.where(log_scale > 700.0, np.inf, errors)
    return first, values, errors


def _splice(base: LossPMF, tail: tuple[int, np.ndarray, np.ndarray]) -> LossPMF:
    """Per atom, the composition with the smaller round-off bound (``base``: untilted, one scalar bound)."""
    first, values, errors = tail
    lo = min(base.lower_index, first)
    hi = max(base.lower_index + base.probs.size, first + values.size)
    probs = np.zeros(hi - lo)
    bound = np.full(hi - lo, np.inf)
    i0 = base.lower_index - lo
    probs[i0 : i0 + base.probs.size] = base.probs
    bound[i0 : i0 + base.probs.size] = float(base.roundoff)
    j0 = first - lo
    better = errors < bound[j0 : j0 + values.size]
    seg = slice(j0, j0 + values.size)
    probs[seg] = np.where(better, values, probs[seg])
    bound[seg] = np.where(better, errors, bound[seg])
    # Outside both windows (only between them, if ever): no mass and the base's bound.
    bound = np.where(np.isinf(bound), float(base.roundoff), bound)
    # The tilted window reaches far past the base's: atoms beyond the point where the remaining mass and bounds
    # fall below 1e-60 are cut (their mass moves to +inf on the pessimistic side, is dropped on the optimistic
    # side: each keeps its direction), so the curve is not read over a long empty tail.
    suffix = np.cumsum((probs + bound)[::-1])[::-1]
    keep = int(np.searchsorted(-suffix, -_SPLICE_CUT, side="right"))
    keep = max(keep, base.lower_index + base.probs.size - lo)
    extra = float(probs[keep:].sum() + bound[keep:].sum()) if base.pessimistic else 0.0
    return dataclasses.replace(
        base,
        lower_index=lo,
        probs=probs[:keep],
        roundoff=bound[:keep],
        infinity_mass=float(min(1.0, base.infinity_mass + extra)),
        _cache={},
    )


_SPLICE_CUT = 1e-60


def _linear_convolution(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, float]:
    """a * b by FFT: (the convolution clipped at 0, a per-atom round-off bound as in :func:`_power_roundoff`)."""
    m = a.size + b.size - 1
    n = sp_fft.next_fast_len(m, real=True)
    # Forward transforms in extended precision, rounded once (as LossPMF.rfft(extended=True)): each coefficient is
    # then within u |X_k| + c log2(n) u_ext ||x||_1 of the exact one, instead of a float64 FFT's c log2(n) u ||x||_1
    # absolute, which on spread PMFs (||x||_2 << ||x||_1) made the bound 5-800x larger (see _power_roundoff).
    fa = rfft_extended(a, n).astype(np.complex128)
    fb = rfft_extended(b, n).astype(np.complex128)
    conv = sp_fft.irfft(fa * fb, n)
    # Componentwise (see _power_roundoff): the product errs by e_a |fb| + e_b |fa| + e_a e_b plus sqrt(5) u |fa fb|,
    # and the inverse adds c log2(n) u of the spectrum's l1 norm; everything over the full spectrum (twice the half
    # one) and divided by n.
    mag_a = np.abs(fa)
    mag_b = np.abs(fb)
    ext = _FFT_ERROR_PER_LEVEL * math.log2(max(n, 2)) * _U_EXT
    e_a = _U * mag_a * (1.0 + 2.0 * _U) + ext * float(np.sum(np.abs(a)))
    e_b = _U * mag_b * (1.0 + 2.0 * _U) + ext * float(np.sum(np.abs(b)))
    prop = float(np.sum(e_a * mag_b + e_b * mag_a + e_a * e_b))
    prod = float(np.sum(mag_a * mag_b))
    bound = 2.0 * (prop + (math.sqrt(5.0) * _U + _fft_error(n) + _U) * (prod + prop)) / n
    return np.clip(conv[:m], 0.0, None), bound


def subsampled_gaussian_loss_pmf(
    *,
    noise_multiplier: float,
    sampling_rate: float,
    steps: int,
    discretization: float,
    pessimistic: bool = True,
    include_add: bool = True,
) -> tuple[LossPMF, LossPMF | None]:
    """(remove PMF, add PMF or None) of ``steps`` compositions of the Poisson-subsampled Gaussian.

    Drop-in for ``loss_pmfs(build_pld(SubsampledGaussian(...), discretization=d), pessimistic=True)``: the same
    connect-the-dots construction, built vectorised (see the module docstring). The add PMF is None when
    ``sampling_rate == 1`` (symmetric) or ``include_add`` is False. Only the pessimistic construction exists:
    ``pessimistic=False`` raises.
    """
    if pessimistic is not True:
        raise ValueError(f"pessimistic must be True (only connect-the-dots is implemented), got {pessimistic!r}")
    steps = check_count("steps", steps)
    kw = {"noise_multiplier": noise_multiplier, "sampling_rate": sampling_rate, "discretization": discretization}
    remove = compose_loss_pmf(single_step_pld(**kw, direction="remove"), steps)
    if not include_add or float(sampling_rate) == 1.0:
        return remove, None
    add = compose_loss_pmf(single_step_pld(**kw, direction="add"), steps)
    return remove, add


def to_dp_accounting_pld(remove: LossPMF, add: LossPMF | None = None):
    """Wrap :class:`LossPMF` arrays as a dp_accounting ``PrivacyLossDistribution`` (DensePLDPmf per direction)."""
    from dp_accounting.pld import pld_pmf
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    def dense(p: LossPMF):
        return pld_pmf.DensePLDPmf(p.step, p.lower_index, np.asarray(p.probs), p.infinity_mass, p.pessimistic)

    return pld_lib.PrivacyLossDistribution(dense(remove), None if add is None else dense(add))


# -- optimistic twin: privacy buckets rounded down (a lower bound, for the ``*_lower`` columns only) ---------------


def _optimistic_bounds(sigma: float, q: float, step: float) -> tuple[int, int]:
    """(lowest, highest) bucket index of the optimistic remove PMF: losses at the truncation points, rounded down."""
    z = float(special.ndtri(0.5 * math.exp(LOG_MASS_TRUNCATION_BOUND)))
    log1mq = math.log1p(-q)
    log_q = math.log(q)

    def loss(x: float) -> float:
        return float(np.logaddexp(log1mq, log_q + (x - 0.5) / sigma**2))

    return math.floor(loss(z * sigma) / step), math.floor(loss(-z * sigma + 1.0) / step)


def optimistic_single_step_length(*, noise_multiplier: float, sampling_rate: float, discretization: float) -> int:
    """Number of buckets of :func:`optimistic_single_step_pld`, in closed form (before anything is allocated)."""
    sigma = check_positive("noise_multiplier", noise_multiplier)
    q = check_probability("sampling_rate", sampling_rate)
    lo, hi = _optimistic_bounds(sigma, q, check_discretization(discretization))
    return hi - lo + 1


def _optimistic_remove_probs(
    sigma: float, q: float, step: float
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(lowest index, P-mass per loss bucket) of dp_accounting's optimistic privacy-buckets remove PMF.

    Mirror image of dp_accounting's convention: P = (1-q) N(0, s^2) + q N(1, s^2), Q = N(0, s^2), loss
    L(x) = log(1 - q + q e^{(2x - 1) / (2 s^2)}), increasing in x with inverse
    L^{-1}(l) = s^2 log((e^l - 1 + q) / q) + 1/2 (for e^l > 1 - q). The P-mass of x in [L^{-1}(k d), L^{-1}((k+1) d))
    is a difference of the mixture's closed-form CDF (or survival function in the upper half, for relative
    precision) and all of it goes to the lower end k d. Truncation as dp_accounting's optimistic
    ``privacy_loss_tail``: the mass beyond the upper truncation point (largest losses) goes to the top bucket; the
    mass below the lower one (smallest losses) is discarded.
    """
    z = float(special.ndtri(0.5 * math.exp(LOG_MASS_TRUNCATION_BOUND)))
    x_low = z * sigma  # below: discarded (losses near log(1-q))
    x_high = -z * sigma + 1.0  # above: rounded down into the top bucket
    log_q = math.log(q)
    k_low, k_top = _optimistic_bounds(sigma, q, step)
    ks = np.arange(k_low + 1, k_top + 1)  # interior bucket boundaries k d, k_low < k <= k_top
    with np.errstate(divide="ignore"):
        # e^{kd} - 1 + q > 0 for k > k_low, since k d > L(x_low) > log(1 - q).
        xb = sigma**2 * (np.log(np.expm1(ks * step) + q) - log_q) + 0.5
    xb = np.clip(xb, x_low, x_high)
    edges = np.concatenate([[x_low], xb, [math.inf]])  # bucket k_low + i is [edges[i], edges[i + 1])
    upper = edges > 0.5
    cdf = np.where(upper, 0.0, (1.0 - q) * special.ndtr(edges / sigma) + q * special.ndtr((edges - 1.0) / sigma))
    sf = np.where(upper, (1.0 - q) * special.ndtr(-edges / sigma) + q * special.ndtr((1.0 - edges) / sigma), 0.0)
    # mass = F(b) - F(a) in the lower half, S(a) - S(b) in the upper half; F(0.5) + S(0.5) = 1 joins them.
    f_mid = (1.0 - q) * special.ndtr(0.5 / sigma) + q * special.ndtr(-0.5 / sigma)
    a_up, b_up = upper[:-1], upper[1:]
    probs = np.where(
        b_up & a_up,
        sf[:-1] - sf[1:],
        np.where(~b_up, cdf[1:] - cdf[:-1], (f_mid - cdf[:-1]) + ((1.0 - f_mid) - sf[1:])),
    )
    # Q = N(0, s^2) mass of the same x-intervals, the same way.
    q_cdf = np.where(upper, 0.0, special.ndtr(edges / sigma))
    q_sf = np.where(upper, special.ndtr(-edges / sigma), 0.0)
    g_mid = float(special.ndtr(0.5 / sigma))
    q_probs = np.where(
        b_up & a_up,
        q_sf[:-1] - q_sf[1:],
        np.where(~b_up, q_cdf[1:] - q_cdf[:-1], (g_mid - q_cdf[:-1]) + ((1.0 - g_mid) - q_sf[1:])),
    )
    p_mag = np.where(upper, sf, cdf)
    q_mag = np.where(upper, q_sf, q_cdf)
    straddle = ~a_up & b_up
    p_mag_k = np.where(straddle, 1.0, p_mag[:-1] + p_mag[1:])
    q_mag_k = np.where(straddle, 1.0, q_mag[:-1] + q_mag[1:])
    return k_low, np.maximum(probs, 0.0), np.maximum(q_probs, 0.0), p_mag_k, q_mag_k


def _residual_lower_bounds(k_low, probs, q_probs, p_mag, q_mag, step) -> np.ndarray:
    """Per bucket, a lower bound in [0, d] on its loss residual r_k = l_k - k d.

    Bucketing the output by loss bucket is post-processing, so the pair (P_k, Q_k) is dominated by the mechanism
    (data processing); its loss l_k = log(P_k / Q_k) lies in [k d, (k+1) d) (top bucket: >= k d) and privacy
    buckets round it down to k d. Lower bounds only: r_k is lowered by the propagated round-off of P_k and Q_k
    (each CDF value's error taken as 1e-15 of its magnitude ``*_mag``), set to 0 where that is not small, and
    clipped to [0, d]. They bound each bucket's Q-mass from above: Q_k = P_k e^{-k d - r_k} with P_k raised by its
    own round-off (``LossPMF.bucket_q_weights``, :func:`threshold_test_masses`)."""
    ks = k_low + np.arange(probs.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = 1e-15 * (p_mag / probs + q_mag / q_probs)
        r = np.log(probs) - np.log(q_probs) - ks * step - 2.0 * rel - 1e-12 * (1.0 + np.abs(ks * step))
    r = np.where((probs > 0) & (q_probs > 0) & (rel < 1e-3) & np.isfinite(r), r, 0.0)
    return np.clip(r, 0.0, step)


def _mean_residual(single: LossPMF) -> float:
    """P-mean of the buckets' residual lower bounds (0 for a PMF that carries none)."""
    return float(single.cached("bucket_residual_mean")) if single.has_cached("bucket_residual_mean") else 0.0


def optimistic_single_step_pld(*, noise_multiplier: float, sampling_rate: float, discretization: float):
    """Optimistic (privacy buckets, rounded down) single-step remove PMF of the Poisson-subsampled Gaussian.

    dp_accounting's ``from_gaussian_mechanism(..., pessimistic_estimate=False, use_connect_dots=False)`` remove PMF,
    vectorised. Every loss is rounded *down* and the smallest-loss tail dropped, so delta(eps) of this PMF - and of
    its compositions - is a lower bound on the mechanism's: use it for the lower ends of brackets only. Its error is
    first order (about T * d / 2 in epsilon after T steps), against second order for connect-the-dots.
    """
    sigma = check_positive("noise_multiplier", noise_multiplier)
    q = check_probability("sampling_rate", sampling_rate)
    step = check_discretization(discretization)
    if not q < 1:
        raise ValueError(f"sampling_rate must be < 1 for the optimistic builder, got {sampling_rate!r}")
    lo, probs, q_probs, p_mag, q_mag = _optimistic_remove_probs(sigma, q, step)
    r = _residual_lower_bounds(lo, probs, q_probs, p_mag, q_mag, step)
    single = LossPMF(
        lower_index=lo,
        step=step,
        probs=probs,
        infinity_mass=0.0,
        pessimistic=False,
        bucket_q_weights=(probs + 1e-15 * p_mag) * np.exp(-r),
    )
    single.cached("bucket_residual_mean", lambda: float(np.sum(probs * r)) / max(float(probs.sum()), 1e-300))
    return single


def single_step(
    noise_multiplier: float,
    sampling_rate: float,
    discretization: float,
    *,
    side: str = "pessimistic",
    direction: str = "remove",
) -> LossPMF:
    """The one single-step builder of the Poisson-subsampled Gaussian: :func:`single_step_pld` in ``direction``
    (connect-the-dots) if ``side`` is "pessimistic", else :func:`optimistic_single_step_pld` (privacy buckets, remove
    direction: a lower bound on the remove profile is one on the mechanism's, so ``direction`` is not read)."""
    kw = {"noise_multiplier": noise_multiplier, "sampling_rate": sampling_rate, "discretization": discretization}
    if side == "pessimistic":
        return single_step_pld(**kw, direction=direction)
    return optimistic_single_step_pld(**kw)


def optimistic_loss_pmf(
    single: LossPMF,
    steps: int,
    *,
    fft_len: int | None = None,
    tilt_target: float | None = None,
    tilt_max_bytes: float = math.inf,
    wrap_tail: float = WRAP_TAIL,
) -> LossPMF:
    """T-fold composition of an optimistic single-step PMF (``pessimistic=False``, no mass added at +inf).

    The output window holds all but ``TAIL_MASS_TRUNCATION`` of the mass; what lies outside it is dropped (which
    only lowers delta) and at most ``wrap_tail`` may wrap around into it, so delta(eps) of the result exceeds the
    exact composition of the optimistic single step by at most ``wrap_tail`` (callers lower their profile by it).
    """
    out = compose_loss_pmf(single, steps, pessimistic=False, fft_len=fft_len, wrap_tail=wrap_tail)
    if tilt_target is not None:
        # Privacy buckets sit about T d / 2 below the losses they stand for (the Q-mass bounds put them back), so
        # the loss the reads need is lower here by the residuals' mean sum. Aiming at the unlowered target tilted
        # 1.9x harder (sigma 0.8, q 1e-3, T 1e4: theta 7.0 against 3.7) for a 4x longer tilted FFT.
        theta = tilt_for_loss(single, steps, tilt_target - steps * _mean_residual(single))
        out = refine_tail(out, single, steps, theta, max_bytes=tilt_max_bytes, wrap_tail=wrap_tail)
    return dataclasses.replace(out, infinity_mass=0.0)


def convolve_pmfs(pmfs: list[LossPMF]) -> LossPMF:
    """Linear convolution (no wrap-around) of independent phases' composed PMFs on one lattice.

    +inf masses combine as 1 - prod(1 - m_i); round-off bounds add (each atom's error is at most the sum of the
    inputs' per-atom errors, each weighted by a total mass <= 1, plus the new transform's noise level).
    """
    if not pmfs:
        raise ValueError("pmfs must name at least one PMF")
    out = pmfs[0]
    for other in pmfs[1:]:
        if other.step != out.step:
            raise ValueError("all PMFs must share one discretization")
        raw, noise = _linear_convolution(out.probs, other.probs)
        out = LossPMF(
            lower_index=out.lower_index + other.lower_index,
            step=out.step,
            probs=np.clip(raw, 0.0, None),
            infinity_mass=float(1.0 - (1.0 - out.infinity_mass) * (1.0 - other.infinity_mass)),
            pessimistic=out.pessimistic and other.pessimistic,
            roundoff=out.max_roundoff + other.max_roundoff + noise,
        )
    return out


def compose_phases(parts: list[tuple[LossPMF, int]], *, extended: bool = True) -> LossPMF:
    """Pessimistic composition of a schedule of phases (single step, steps) on one lattice: each phase by FFT power
    (:func:`compose_loss_pmf`, its tail budget at +inf; ``extended`` as there), then the phases by linear
    convolution."""
    if not parts:
        raise ValueError("parts must name at least one phase")
    return convolve_pmfs([compose_loss_pmf(single, steps, extended=extended) for single, steps in parts])


def optimistic_composition(
    parts: list[tuple[LossPMF, int]],
    *,
    tilt_target: float | None = None,
    tilt_max_bytes: float = math.inf,
    wrap_tail: float = WRAP_TAIL,
) -> tuple[LossPMF, float]:
    """(composed optimistic PMF of a schedule, its wrap-around slack): the P-law of the composed bucket index.

    Each phase is composed by FFT power (:func:`optimistic_loss_pmf`; at most ``wrap_tail`` of mass wraps around
    per phase), the phases are convolved linearly (no wrap-around): delta(eps) of the result exceeds the exact
    composition of the optimistic single steps by at most the slack ``len(parts) * wrap_tail``.
    """
    if not parts:
        raise ValueError("parts must name at least one phase")
    step = parts[0][0].step
    if any(single.step != step for single, _ in parts):
        raise ValueError("all phases must share one discretization")
    target = tilt_target if len(parts) == 1 else None  # tilted tails for single-phase compositions only
    pmf = convolve_pmfs(
        [
            optimistic_loss_pmf(single, steps, tilt_target=target, tilt_max_bytes=tilt_max_bytes, wrap_tail=wrap_tail)
            for single, steps in parts
        ]
    )
    return pmf, len(parts) * wrap_tail


def threshold_test_masses(pmf: LossPMF, parts: list[tuple[LossPMF, int]]) -> tuple[int, np.ndarray, np.ndarray]:
    """(first index, per composed bucket index k >= first: a lower bound on P(K = k), an upper bound on Q(K = k)).

    ``pmf`` is :func:`optimistic_composition` of ``parts`` (the P-law of the composed bucket index K, with its
    round-off bounds; values are lowered by them here, the wrap-around slack is the caller's).

    Why these give a lower bound on the mechanism's risk: bucketing each step's output by its loss bucket is
    post-processing, so every test on the sequence of buckets is a test on the mechanism's output, and the
    mechanism's trade-off curve lies below every (alpha, beta) such a test achieves (e.g. delta(0) = sup_S (P(S) -
    Q(S)) >= P(K in S) - Q(K in S) for any set S of values of K). Both laws of K are convolution powers of the
    bucket masses: P_k (privacy buckets) and Q_k = P_k e^{-l_k} <= P_k e^{-k d - r_k} = e^{-k d} w_k, with r_k >= 0 a
    lower bound on the bucket's residual (``LossPMF.bucket_q_weights``, :func:`_residual_lower_bounds`; r_k = 0,
    w = P, for dp_accounting's buckets, whose losses are rounded down). Since e^{-K d}
    factors over the steps, Q(K = k) <= e^{-k d} W_T(k) with W_T the convolution power of w (each phase's,
    convolved), composed like a pessimistic PMF (its round-off bound added per atom; wrapped mass only raises it;
    mass cut from its window is in no test). Indices below W_T's window are left out (their Q-mass is not held): no
    test rejects them. The curve through all these tests is :func:`gdpcore.curve.curve_from_threshold_tests`.
    Unlike the residual shift it replaced (module docstring), nothing is spent on a Chernoff tail of the residual
    sum: the best test only misclassifies paths whose loss is within the residual spread of the threshold, so the
    error is second order in the step (sigma 0.8, q 1e-3, T 3000: the advantage 0.96% below dp_accounting's value at
    d = 1e-3 and 0.02% at d = 1.25e-4, against 15.6% and 2.4% for the residual shift).
    """
    if pmf.pessimistic:
        raise ValueError("pmf must be an optimistic composition (pessimistic=False)")
    step = pmf.step
    ws = []
    # W_T is composed from the normalised weights w / sum(w) and rescaled in log space by T log(sum w): its total
    # mass (sum w)^T is e^-38 on sigma 0.6, q 0.04, T 1e4 at step 8e-3 and underflows once T d passes ~1400.
    log_scale = 0.0
    for single, steps in parts:
        w = single.bucket_q_weights
        if w is None:
            raise ValueError("every optimistic single step must carry its bucket_q_weights (LossPMF field)")
        w_total = float(np.sum(w))
        if w_total > 0.0:
            w = w / w_total
            log_scale += steps * math.log(w_total)
        w_single = LossPMF(single.lower_index, step, w, 0.0, True)
        # W_T's window from the P-masses' Chernoff orders (w ~ p e^{-r}): any window keeps it an upper bound (mass
        # outside it is wrapped in, which raises W_T, or cut, and then in no test), so the log-MGFs are not redone.
        if single.has_cached("chernoff_log_mgf"):
            w_single.cached("chernoff_log_mgf", lambda single=single: single.cached("chernoff_log_mgf"))
        ws.append(compose_loss_pmf(w_single, steps))
    wpmf = convolve_pmfs(ws)
    p = pmf.with_roundoff_allowance()
    lo = wpmf.lower_index
    hi = max(p.lower_index + p.probs.size, wpmf.lower_index + wpmf.probs.size)
    p_low = np.zeros(hi - lo)
    a = max(p.lower_index, lo)
    if a < p.lower_index + p.probs.size:
        p_low[a - lo : p.lower_index + p.probs.size - lo] = p.probs[a - p.lower_index :]
    # Above W_T's window its mass is at most what the window cut (its +inf mass), per atom as in total. The window
    # comes from the P-masses' Chernoff orders and w <= p pointwise, so the cut mass of the unnormalised W_T is at
    # most the P-window's TAIL_MASS_TRUNCATION: that bound is absolute (not rescaled).
    ks = np.arange(lo, hi)
    log_w = np.full(hi - lo, math.log(wpmf.infinity_mass) if wpmf.infinity_mass > 0 else -math.inf)
    with np.errstate(divide="ignore"):
        log_w[: wpmf.probs.size] = np.log(wpmf.probs + wpmf.roundoff) + log_scale
    with np.errstate(over="ignore", under="ignore"):
        # exp(log(.)) round trips err by ~|log| u relative (< 1e-12 here): moved up by that.
        q_high = np.exp(log_w - ks * step) * (1.0 + 1e-12)
    # e^{-k d} W_T(k) below the float range is still > 0: the smallest positive float bounds it.
    q_high = np.clip(q_high, np.nextafter(0.0, 1.0), 1.0)
    return lo, p_low, q_high
