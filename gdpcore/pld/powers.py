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


_LOG_MGF_BLOCK = 1 << 15
"""Elements per block of :func:`_log_mgf`'s (orders x support) array (256 KiB, cache-resident): every order in one
pass of numpy calls on small supports, one order at a time on large ones. A loop over the 30 orders cost ~5 us of
interpreter overhead per order at n ~ 1e3 (12% of the CPU time of small grid cells, sigma 0.5-3, T 10-3000, n <
1e4; 9% with the single pass)."""


_EXP_SAFE = 600.0
"""Largest |t| i_max + |max log p| for which log E[e^{t i}] is summed without a max shift: every exponent
log p_i + t i is then at most 600 (no overflow) and the largest term at least e^-600 (no underflow of the sum)."""


_EXP_FLOOR = 700.0
"""Exponents are raised to at least -700 before ``np.exp``: each term only grows (the sum stays an upper bound, by
at most n e^-100 of its largest term), and no result falls in the subnormal range, where ``np.exp`` was 4.5x slower
(a Chernoff order of -0.01 over 73845 atoms: 0.98 ms against 0.23 ms at -0.001)."""


class _LogMGF:
    """The index law of one PMF prepared for log-MGF bounds (:meth:`at`): the logs of its positive masses and their
    indices, computed once."""

    def __init__(self, probs: np.ndarray) -> None:
        pos = probs > 0
        self.logp = np.log(probs[pos])
        self.ip = np.flatnonzero(pos).astype(float)
        self.i_max = self.ip[-1] if self.ip.size else 0.0
        self.logp_abs_max = abs(float(self.logp.max())) if self.logp.size else 0.0
        self.logp_neg_min = float(-self.logp.min()) if self.logp.size else 0.0

    def at(self, orders: np.ndarray) -> np.ndarray:
        """Upper bounds on log E[e^{t i}] of the index at each order t (see :func:`_log_mgf`)."""
        logp, ip, i_max = self.logp, self.ip, self.i_max
        out = np.empty(orders.size)
        direct = np.abs(orders) * i_max + self.logp_abs_max <= _EXP_SAFE
        rows = max(1, _LOG_MGF_BLOCK // max(ip.size, 1))
        for sel, shift in ((np.flatnonzero(direct), False), (np.flatnonzero(~direct), True)):
            for a in range(0, sel.size, rows):
                idx = sel[a : a + rows]
                x = np.multiply.outer(orders[idx], ip)
                x += logp
                if shift:
                    m = x.max(axis=1)
                    x -= m[:, None]
                    np.maximum(x, -_EXP_FLOOR, out=x)  # only raises terms: still an upper bound
                    np.exp(x, out=x)
                    out[idx] = m + np.log(x.sum(axis=1))
                else:
                    np.maximum(x, -_EXP_FLOOR, out=x)
                    np.exp(x, out=x)
                    out[idx] = np.log(x.sum(axis=1))
        spread = np.abs(orders) * i_max + self.logp_neg_min
        out += 8.0 * _U * (1.0 + spread + np.abs(out)) + 2.0 * _U * math.log2(max(ip.size, 2))
        return out


def _log_mgf(probs: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """Upper bounds on log E[e^{t i}] of the index under ``probs`` at each order t.

    Orders with |t| i_max + |max log p| <= ``_EXP_SAFE`` are summed directly, the others max-shifted (no overflow).
    Each value is the computed log-sum-exp plus an allowance for its own floating-point error, so it is never below
    the exact log-MGF: with X = |t| i_max + |min log p| bounding every exponent, each computed exponent is within
    ~2 u X, its exp within ~u relative, the pairwise sum within log2(n) u relative and the final log and addition
    within u |K|; ``8 u (1 + X + |K|) + 2 u log2(n)`` covers that with a factor 2 to spare (tests/test_pld_chernoff.py
    checks it against 50-digit sums; without the allowance the computed value fell below the exact one there)."""
    return _LogMGF(probs).at(orders)


_LAZY_ORDERS_FROM = 1 << 15
"""Single steps with more atoms than this compute their Chernoff orders' log-MGF bounds one at a time, when the
window's bisection asks for them (:class:`_ChernoffOrders`); smaller ones compute all 30 in one vectorised
:func:`_log_mgf` call. Below it a per-order call's fixed cost (~30 us) outweighs its exponentials: with the lazy
bounds from 1e3 atoms on, a 2000-cell sample of the CLI benchmark's sweep (benchmarks/bench_cli.py) took 21.5 s
against 17.4 s with this threshold (19.8 s never lazy), and the mixed grid 3.65 s against 3.37 s (3.78 s never lazy;
two runs each, CPU seconds, one process)."""


class _ChernoffOrders:
    """The log-MGF bounds of one single step at the window's candidate orders (:func:`_chernoff_orders`), each side's
    orders sorted by |t| and each bound computed when a window first asks for it (:meth:`best`).

    Why not every order at once: on supports above ``_LOG_MGF_BLOCK`` / 30 atoms each order is its own pass of
    exponentials over the support, and the 30 passes cost 12-15% of a grid cell's CPU time (the mixed grid's largest
    cells, n 6e4-3e5 atoms). The window needs only each side's best order, and f(t) = (T K(t) + c) / |t| is
    unimodal in |t| (its derivative's numerator T (t K'(t) - K(t)) - c grows with |t|, K being convex), so a
    bisection on the sign of f(i + 1) - f(i) finds the same best candidate from about 8 of a side's 15 bounds, and
    the second window of a step (another tail, another T) mostly reads bounds already computed. Supports up to
    ``_LAZY_ORDERS_FROM`` atoms keep the single vectorised pass over every order and one vectorised min."""

    def __init__(self, probs: np.ndarray, step: float) -> None:
        n = probs.size
        self.orders = np.sort(np.concatenate([_ORDERS_PER_SUPPORT / n, _ORDERS_PER_STEP * step]))
        self._law: _LogMGF | None = None
        self._probs = probs
        m = self.orders.size
        self._every = n <= _LAZY_ORDERS_FROM
        if self._every:
            k = _log_mgf(probs, np.concatenate([self.orders, -self.orders]))
            # A non-finite bound (overflow at a large order) gives no window: +inf, never chosen.
            k = np.where(np.isfinite(k), k, np.inf)
            self._k = {1: k[:m], -1: k[m:]}
        else:
            self._k = {1: np.full(m, np.nan), -1: np.full(m, np.nan)}

    def _bound(self, sign: int, i: int) -> float:
        k = self._k[sign]
        if math.isnan(k[i]):
            if self._law is None:
                self._law = _LogMGF(self._probs)
            value = float(self._law.at(np.array([sign * self.orders[i]]))[0])
            # A non-finite bound (overflow at a large order) gives no window: +inf, never chosen.
            k[i] = value if math.isfinite(value) else math.inf
        return float(k[i])

    def best(self, sign: int, steps: int, c: float) -> float:
        """min over this side's orders t (sign +1: t > 0; -1: t < 0) of (T K(t) + c) / |t|: the upper end of the
        window (sign +1), or minus its lower end (sign -1); +inf when no order gives a finite one."""

        if self._every:
            # Every bound is at hand: one vectorised min (a Python bisection costs more on these small supports).
            k = self._k[sign]
            with np.errstate(over="ignore", invalid="ignore"):
                return float(np.min(np.where(np.isfinite(k), (steps * k + c) / self.orders, math.inf)))

        def f(i: int) -> float:
            k = self._bound(sign, i)
            return (steps * k + c) / self.orders[i] if math.isfinite(k) else math.inf

        lo, hi = 0, self.orders.size - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if f(mid) <= f(mid + 1):
                hi = mid
            else:
                lo = mid + 1
        return f(lo)


def _chernoff_log_mgf(single: LossPMF) -> _ChernoffOrders:
    """The single step's :class:`_ChernoffOrders` (see :func:`_chernoff_window`): a deterministic function of the
    PMF, kept in its cache."""
    out: _ChernoffOrders = single.cached("chernoff_log_mgf", lambda: _ChernoffOrders(single.probs, single.step))
    return out


def _chernoff_window(single: LossPMF, steps: int, tail: float) -> tuple[int, int]:
    """Index range (in units of the single-step array) holding all but ``tail`` of the T-fold convolution.

    Chernoff: for the T-fold sum S_T of indices, P(S_T >= a) <= E[e^{t S_1}]^T e^{-t a} for *every* t > 0, and
    P(S_T <= b) <= E[e^{t S_1}]^T e^{-t b} for every t < 0. With a = (T K(t) + log(2 / tail)) / t each tail holds at
    most tail / 2, whatever t is: a worse order only widens the window, it can never cut mass beyond ``tail``, and
    K(t) is taken from above (:func:`_log_mgf` adds its own round-off allowance). The window is the best over a fixed
    set of orders: dp_accounting's (|t| <= 20 / n, ``common.compute_self_convolve_bounds``) subsampled (|t| n in {1,
    2, 4, 8, 14, 20}) plus orders fixed in *loss* units (|t| / step in 2^-3 .. 2^8): those stay sharp when the
    single-step support n is much wider than the composed spread, which shrinks the FFT about 2x on DP-SGD grids.
    The single-step log-MGFs do not depend on T or the tail: each side's best order is found by bisection, each bound
    computed once per PMF when first needed (in one vectorised pass on small supports) and cached
    (:class:`_ChernoffOrders`)."""
    n = single.probs.size
    hi = (n - 1) * steps
    lo = 0
    if steps == 1 or n == 1:
        return lo, hi
    orders = _chernoff_log_mgf(single)
    c = math.log(2.0 / tail)
    up = orders.best(1, steps, c)
    if math.isfinite(up):
        hi = min(hi, math.ceil(up))
    down = -orders.best(-1, steps, c)
    if math.isfinite(down):
        lo = max(lo, math.floor(down))
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
    composition, correlated over the whole support, and was measured 100x larger than what a guard band shows.
    Up to ``EXTENDED_INVERSE_MAX`` points the inverse transform is extended too, on the unrounded extended powers, and
    each atom is rounded once (``u`` of its value): the float64 inverse's ``c log2(n) u`` is then gone from the bound."""
    lo, hi, _, _, n = _fft_plan(single, steps, None if single.pessimistic else wrap_tail)
    if fft_len is not None and fft_len >= n:
        n = fft_len
    inverse_ext = False
    if not extended:
        transform = single.rfft(n) if cache else sp_fft.rfft(single.probs, n)
        conv = sp_fft.irfft(_int_power(transform, steps), n)
        bound = _power_roundoff(single.probs, transform, steps, n)[0]
    else:
        ext = single.rfft(n, extended=True) if cache else rfft_extended(single.probs, n)
        transform = ext.astype(np.complex128)
        powered = _int_power(transform, steps)
        # Where |X_k|^(T-1) is not negligible the power is taken in extended precision and rounded once.
        l1 = float(np.sum(np.abs(single.probs)))
        unit_mag = _unit_moduli(transform, l1)
        keep = _kept(unit_mag, steps)

        # The extended inverse where the float64 one's error is most of the bound (short compositions): both
        # bounds from one pass over the spectrum.
        inverses = (False, True) if n <= EXTENDED_INVERSE_MAX else (False,)
        bound, *ext_bound = _power_roundoff(
            single.probs, transform, steps, n, extended_power=keep, unit_mag=unit_mag, l1=l1, inverses=inverses
        )
        if ext_bound and bound >= _EXTENDED_INVERSE_GAIN * ext_bound[0]:
            inverse_ext, bound = True, ext_bound[0]
        if inverse_ext:
            # The inverse in extended precision too, the kept coefficients' powers unrounded: rounded once, at the end.
            spectrum = powered.astype(np.clongdouble)
            if keep.any():
                spectrum[keep] = _int_power(ext[keep], steps)
            conv = sp_fft.irfft(spectrum, n).astype(np.float64)
        else:
            if keep.any():
                powered[keep] = _int_power(ext[keep], steps).astype(np.complex128)
            conv = sp_fft.irfft(powered, n)
    if 0 <= lo and hi < n:
        out = conv[lo : hi + 1].copy()  # no wrap-around: the window as a slice (the same values, no index array)
    else:
        out = conv[np.arange(lo, hi + 1) % n]
    if extended and inverse_ext and out.size:
        # Each atom rounded once from extended precision to float64: within u of its own value.
        bound += _U * float(np.max(np.abs(out))) * (1.0 + 2.0 * _U)
    return lo, out, bound


EXTENDED_INVERSE_MAX = 1 << 15
"""Compositions up to this FFT length take their inverse transform in extended precision too (:func:`_power`).

Why: below T ~ 1e3 the float64 inverse's own error, ``c log2(n) u`` of the spectrum's l1 norm per atom, is 85-95% of
the a-priori bound (sigma 0.8-3, q 1e-3 to 0.05, T 10-200 at their engine steps; the extended forward transform's
error, carried T times by the power, dominates from T ~ 1e4 on). That bound, times the atoms above a line, decides
whether the composition's tail is recomputed tilted (``gdpcore.engine.base``): at about 1e-13 it was, on almost every
cell of those grids, at the cost of a second composition, its Chernoff windows and a second curve. With the inverse
in extended precision (3.5-4.5x a float64 inverse, a few hundredths of a millisecond at these lengths) the bound is
10-40x smaller and the tilts are not needed. Where it is not smaller (``_EXTENDED_INVERSE_GAIN``), and on longer
transforms, the inverse stays float64: there the extra cost is milliseconds and the bound is the forward
transform's."""


_EXTENDED_INVERSE_GAIN = 4.0
"""A composition up to ``EXTENDED_INVERSE_MAX`` points takes its inverse in extended precision only where that makes
its bound (before the final rounding) at least this many times smaller: where the float64 inverse's error is most of
it (T below ~1e3). From T ~ 1e4 on the forward transform's error, carried T times by the power, sets the bound, and an
extended inverse would only cost. Measured in one process, two runs each alternating, CPU seconds (a 2000-cell sample
of benchmarks/bench_cli.py's sweep; the reference grid of benchmarks/bench_grid.py twice): float64 inverse always
18.4 s / 3.18 s; extended always (up to 2^15 points) 15.2 s / 3.01 s; at a gain of 2 14.0 s / 3.17 s; of 4 14.4 s /
2.86 s."""


def _kept(unit_mag: np.ndarray, steps: int) -> np.ndarray:
    """Coefficients whose (|X_k| / ||x||_1 + slack)^(T-1) may exceed e^-60 (the others contribute at most
    n e^-60 T ||x||_1^T, see :func:`_power_roundoff`); ``unit_mag`` is |X_k| / ||x||_1 (:func:`_unit_moduli`)."""
    return unit_mag + 1e-12 > math.exp(-60.0 / max(steps - 1, 1))


def _unit_moduli(transform: np.ndarray, l1: float) -> np.ndarray:
    """|X_k| / ||x||_1 (|X_k| where the input is all zeros): the moduli the round-off bound and the extended-power
    mask both read, computed once."""
    mag = np.abs(transform)
    if l1 > 0.0 and l1 != 1.0:
        mag /= l1
    return mag


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
    unit_mag: np.ndarray | None = None,
    l1: float | None = None,
    inverses: tuple[bool, ...] = (False,),
) -> tuple[float, ...]:
    """Per-atom bounds on the round-off of ``irfft(rfft(probs, n) ** steps)`` (see :func:`_power`), one per entry of
    ``inverses``: the inverse transform in float64 (False) or in extended precision (True). Everything but the last
    two terms is shared, so both bounds cost one pass over the spectrum.

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
    unit mass) was 1.7e-22 per atom there, above the composed masses the tail reads, and made the twin 3.5% low.

    Cost: ``l1`` (= ||p||_1) and ``unit_mag`` (= |transform| / ||p||_1, :func:`_unit_moduli`) may be passed when
    the caller has them; the
    coefficients that cannot pass the e^-60 cut-off (|X_k| / ||p||_1 below it less the largest 2 e_k) are dropped
    before anything else is computed, so a long composition, whose kept band is a few % of the spectrum, does its
    per-coefficient work on that band only."""
    if l1 is None:
        l1 = float(np.sum(np.abs(probs)))
    mag = _unit_moduli(transform, l1) if unit_mag is None else unit_mag
    scale = 1.0
    if l1 > 0.0:
        with np.errstate(under="ignore"):
            scale = math.exp(max(steps, 1) * math.log(l1)) if steps * math.log(l1) < 700.0 else math.inf
    t = max(steps, 1)
    log_t = math.log2(max(t, 2))
    exp_err = 2.0 * math.sqrt(5.0) * log_t * _U
    threshold = math.exp(-60.0 / max(t - 1, 1))
    e_ext = _FFT_ERROR_PER_LEVEL * math.log2(max(n, 2)) * _U_EXT
    # The largest forward error of any coefficient (|X_k| <= ||p||_1 = 1 up to rounding): a coefficient with
    # mag + 2 e_max <= threshold is dropped whatever its own e_k.
    e_max = _fft_error(n) if extended_power is None else _U * 1.01 * (1.0 + 2.0 * _U) + e_ext
    cand = np.flatnonzero(mag > threshold - 2.0 * e_max)
    m = mag[cand]
    e_fwd: np.ndarray | float
    ext = None if extended_power is None else extended_power[cand]
    if ext is None or ext.all():
        # One value for every coefficient: kept as a scalar (the same products as a constant array, no gathers).
        # Every candidate powered in extended precision: the mask's slack, 1e-12, exceeds 2 e_max.
        e_fwd = _fft_error(n) if ext is None else e_ext
    else:
        e_fwd = np.where(ext, e_ext, _U * m * (1.0 + 2.0 * _U) + e_ext)
    # min(|X| + 2 e, 1 + 2 e), as min(|X|, 1) + 2 e: the same floating-point values (addition is monotonic)
    up = np.minimum(m, 1.0)
    up += 2.0 * e_fwd
    keep = up > threshold
    if not keep.all():
        up = up[keep]
        e_fwd = e_fwd[keep] if isinstance(e_fwd, np.ndarray) else e_fwd
        ext = ext[keep] if ext is not None else None
    with np.errstate(under="ignore", over="ignore", divide="ignore"):
        powered_m1 = np.exp((t - 1) * np.log(up))
    rest = (mag.size - up.size) * math.exp(-60.0) * (t + 1) * (1.0 + 2.0 * _U)
    powered = powered_m1 * up
    sum_powered = float(np.sum(powered))
    # The propagated error is T sum (|X| + 2 e)^(T-1) e_k plus each coefficient's power error times |Y_k|: split by
    # how the coefficient was powered (extended and rounded once, or float64), so one pass serves every inverse.
    if isinstance(e_fwd, np.ndarray):
        fwd = t * float(np.sum(powered_m1 * e_fwd))
    else:
        fwd = t * e_fwd * float(np.sum(powered_m1))
    if ext is None:
        ext_sum, float_sum = 0.0, sum_powered
    elif ext.all():
        ext_sum, float_sum = sum_powered, 0.0
    else:
        ext_sum, float_sum = float(np.sum(powered[ext])), float(np.sum(powered[~ext]))
    total_pow = 2.0 * (sum_powered + rest)
    out = []
    for extended_inverse in inverses:
        # An extended power is rounded to float64 (u |Y|) unless the inverse is extended too, which takes it
        # unrounded; the output is then rounded once, which the caller adds (u of each atom).
        ext_power_err = (0.0 if extended_inverse else _U) + 2.0 * math.sqrt(5.0) * log_t * _U_EXT
        inverse_err = (e_ext + _U_EXT) if extended_inverse else (_fft_error(n) + _U)
        prop = fwd + ext_power_err * ext_sum + exp_err * float_sum
        # The bound's own evaluation (sums of positive terms, a few roundings each: relative error below
        # (log2(n) + 20) u) is covered by the factor 1 + 1e-12.
        out.append((2.0 * (prop + rest) + inverse_err * total_pow) / n * scale * (1.0 + 1e-12))
    return tuple(out)


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
