"""FFT powers of a loss PMF on a Chernoff window, with a rigorous a-priori round-off bound per atom, and the
linear convolution of PMFs.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import fft as sp_fft

from gdpcore.pmf import LossPMF, rfft_extended

TAIL_MASS_TRUNCATION = 1e-15
"""Mass the composition may cut from its two tails together (dp_accounting's default); added to +inf."""


_BYTES_PER_FFT_POINT = 104  # float64 input + complex128 spectrum and its power + float64 output and roll (64), plus


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


WRAP_TAIL = 1e-30
"""Default mass allowed outside an optimistic FFT buffer's true-mass span: the buffer holds the Chernoff window at
this tail plus a guard band, so at most this much mass can wrap around into the output window (which holds all but
``TAIL_MASS_TRUNCATION``). Callers that know the smallest delta or FPR they read pass a larger ``wrap_tail`` (the
engine passes 1e-4 of it, ``gdpcore.engine.twin_tail``): the buffer then shrinks to the output window's size (it
was 1.4-1.9x larger at 1e-30 on DP-SGD grids) and the same slack is subtracted from the lower profile."""


_GUARD_MIN = 64


_MAX_FAST_LEN = 2**40
"""Beyond this length no budget holds the buffer: the planner is given the length as is (scipy's ``next_fast_len``
cannot take lengths past the C ``ssize_t``, e.g. a Laplace composed 1e18 times)."""


def _fast_len(n: int) -> int:
    return sp_fft.next_fast_len(n, real=True) if n <= _MAX_FAST_LEN else n


def _fft_plan(single: LossPMF, steps: int, wrap_tail: float | None = None) -> tuple[int, int, int, int, int]:
    """(lo, hi) output window at ``TAIL_MASS_TRUNCATION``, (lo30, hi30) true-mass span at ``WRAP_TAIL``, FFT length.

    The buffer covers the span (plus a small margin), so at most ``WRAP_TAIL`` of mass wraps around into the output
    window. A deterministic function of the PMF: kept in its cache (the planner and the composition read it)."""
    return single.cached(f"fft_plan {steps} {wrap_tail!r}", lambda: _fft_plan_of(single, steps, wrap_tail))


def _fft_plan_of(single: LossPMF, steps: int, wrap_tail: float | None) -> tuple[int, int, int, int, int]:
    lo, hi = _chernoff_window(single, steps, TAIL_MASS_TRUNCATION)
    if wrap_tail is None:
        # Pessimistic side: mass wrapping around into the window only raises delta (it is also counted at +inf).
        return lo, hi, lo, hi, _fast_len(max(hi - lo + 1, single.probs.size))
    lo30, hi30 = _chernoff_window(single, steps, wrap_tail)
    lo30, hi30 = min(lo30, lo), max(hi30, hi)
    span = hi30 - lo30 + 1
    n = _fast_len(max(span + _GUARD_MIN, single.probs.size))
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
    if 0 <= lo and hi < n:
        out = conv[lo : hi + 1].copy()  # no wrap-around: the window as a slice (the same values, no index array)
    else:
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
    l1 = 1.0 if unit else float(np.sum(np.abs(probs)))
    if not unit and l1 > 0.0:
        with np.errstate(under="ignore"):
            scale = math.exp(max(steps, 1) * math.log(l1)) if steps * math.log(l1) < 700.0 else math.inf
        # With ``unit`` only the transform is read (probs / l1 would be a wasted copy).
        inner = _power_roundoff(probs, transform / l1, steps, n, extended_power=extended_power, unit=True)
        return inner * scale
    l1 = 1.0
    mag = transform.real**2
    mag += transform.imag**2
    np.sqrt(mag, out=mag)
    t = max(steps, 1)
    log_t = math.log2(max(t, 2))
    exp_err = 2.0 * math.sqrt(5.0) * log_t * _U
    e_fwd: np.ndarray | float
    exp_errs: np.ndarray | float
    if extended_power is None:
        # One value for every coefficient: kept as a scalar (the same products as a constant array, no gathers).
        e_fwd = _fft_error(n) * l1
        exp_errs = exp_err
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
    e_kept = e_fwd[keep] if isinstance(e_fwd, np.ndarray) else e_fwd
    x_kept = exp_errs[keep] if isinstance(exp_errs, np.ndarray) else exp_errs
    prop = float(np.sum(powered_m1 * (t * e_kept + x_kept * up[keep])))
    total_pow = 2.0 * (float(np.sum(powered_m1 * up[keep])) + rest)
    return (2.0 * (prop + rest) + (_fft_error(n) + _U) * total_pow) / n


def fft_bytes(length: int) -> int:
    """Peak working memory of one composition of FFT length ``length`` (input, spectrum, power, output)."""
    return _BYTES_PER_FFT_POINT * int(length)


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
