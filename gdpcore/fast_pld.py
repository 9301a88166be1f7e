"""Vectorised connect-the-dots PLD of the Poisson-subsampled Gaussian, and its T-fold composition.

Why hand-written (measured on the shared 2-core machine, sigma=1, q=0.01, discretisation 1e-4, 56,541 points):

* dp_accounting builds the single-step connect-the-dots PMF by calling ``inverse_privacy_loss`` once per grid point
  in a Python list comprehension: 0.28-0.54 s per (sigma, q) here (0.21 s quiet, peer_benchmarks.md Sec. 5), the
  dominant cost of a per-point loop. The same grid, truncation bounds and connect-the-dots formula (Doroshenko et
  al. 2022, Alg. 1) evaluated in a few numpy calls take 3-6 ms (about 90x).
* ``self_compose(1000)`` takes 0.11-0.26 s in dp_accounting (complex FFT of the real PMF on a loose Chernoff
  window, then a complex ``**``); :func:`compose_loss_pmf` takes about 6-20 ms: an rfft, a window about half as long
  (finer Chernoff orders), binary exponentiation instead of a complex log/exp per bin, and log-MGFs cached per PMF.
* End to end, benchmarks/bench_grid.py (reference grid, full report per cell) runs 36-61x the points per second of
  the per-point dp_accounting loop measured in the same run; see benchmarks/RESULTS.md.

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
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy import fft as sp_fft
from scipy import special

from gdpcore._validation import check_count, check_positive, check_probability
from gdpcore.accounting import LossPMF
from gdpcore.closed_form import get_log_delta_from_gdp

__all__ = [
    "LOG_MASS_TRUNCATION_BOUND",
    "TAIL_MASS_TRUNCATION",
    "SingleStepPLD",
    "compose_loss_pmf",
    "fft_bytes",
    "fft_length",
    "single_step_length",
    "single_step_pld",
    "subsampled_gaussian_loss_pmf",
    "to_dp_accounting_pld",
]

LOG_MASS_TRUNCATION_BOUND = -50.0
"""log of the noise mass cut from each tail of the single step (dp_accounting's default)."""

TAIL_MASS_TRUNCATION = 1e-15
"""Mass the composition may cut from its two tails together (dp_accounting's default); added to +inf."""

_BYTES_PER_FFT_POINT = 64  # float64 input + complex128 spectrum and its power + float64 output and roll


@dataclasses.dataclass(frozen=True, eq=False)
class SingleStepPLD:
    """One direction's single-step connect-the-dots PMF on ``(lower_index + i) * step`` plus its +inf mass."""

    lower_index: int
    step: float
    probs: np.ndarray
    infinity_mass: float
    _transforms: dict = dataclasses.field(default_factory=dict, repr=False)
    _log_mgf: dict = dataclasses.field(default_factory=dict, repr=False)

    def cached_fft_lengths(self) -> list[int]:
        """FFT lengths whose transform of this PMF is already cached."""
        return sorted(self._transforms)

    def rfft(self, n: int) -> np.ndarray:
        """rfft of the PMF zero-padded to ``n`` (cached: one transform serves every T with this FFT length)."""
        out = self._transforms.get(n)
        if out is None:
            out = sp_fft.rfft(self.probs, n)
            self._transforms[n] = out
        return out


def _check_discretization(discretization) -> float:
    d = check_positive("discretization", discretization)
    if d > 0.1:
        raise ValueError(f"discretization must be in (0, 0.1], got {discretization!r}")
    return d


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
    step = _check_discretization(discretization)
    if direction not in ("remove", "add"):
        raise ValueError(f"direction must be 'remove' or 'add', got {direction!r}")
    lo, hi = _grid_bounds(sigma, q, step, direction)
    eps = np.arange(lo, hi + 1) * step
    probs, inf_mass = _connect_the_dots(_deltas(sigma, q, eps, direction), step)
    return SingleStepPLD(lower_index=lo, step=step, probs=probs, infinity_mass=inf_mass)


def _chernoff_orders(n: int, step: float) -> np.ndarray:
    base = np.array([1.0, 2.0, 4.0, 8.0, 14.0, 20.0]) / n
    loss_units = np.geomspace(2.0**-3, 2.0**8, 9) * step
    pos_orders = np.concatenate([base, loss_units])
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


def _chernoff_window(single: SingleStepPLD, steps: int, tail: float) -> tuple[int, int]:
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
    log_mgf = single._log_mgf.get("mgf")  # noqa: SLF001 - the PMF's own cache
    if log_mgf is None:
        log_mgf = _log_mgf(probs, orders)
        single._log_mgf["mgf"] = log_mgf  # noqa: SLF001
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
            return result
        np.multiply(base, base, out=base)


def single_step_length(*, noise_multiplier: float, sampling_rate: float, discretization: float) -> int:
    """Number of grid points of the single-step remove PMF, in closed form (before anything is allocated)."""
    sigma = check_positive("noise_multiplier", noise_multiplier)
    q = check_probability("sampling_rate", sampling_rate)
    lo, hi = _grid_bounds(sigma, q, _check_discretization(discretization), "remove")
    return hi - lo + 1


def fft_length(single: SingleStepPLD, steps: int) -> int:
    """The FFT length :func:`compose_loss_pmf` uses for ``steps`` (Chernoff window; computed before any FFT)."""
    if steps == 1:
        return single.probs.size
    lo, hi = _chernoff_window(single, steps, TAIL_MASS_TRUNCATION)
    return sp_fft.next_fast_len(max(hi - lo + 1, single.probs.size), real=True)


def fft_bytes(length: int) -> int:
    """Peak working memory of one composition of FFT length ``length`` (input, spectrum, power, output)."""
    return _BYTES_PER_FFT_POINT * int(length)


def compose_loss_pmf(single: SingleStepPLD, steps: int, *, pessimistic: bool = True, fft_len: int | None = None):
    """T-fold composition of a single-step PMF as a :class:`LossPMF` (FFT power on a Chernoff window).

    Mass outside the window (at most ``TAIL_MASS_TRUNCATION``) may wrap around inside it or be lost; adding the
    whole budget to the +inf mass keeps every delta(eps) an upper bound, as in dp_accounting.
    """
    steps = check_count("steps", steps)
    p = single.probs
    inf_mass = -math.expm1(steps * math.log1p(-single.infinity_mass)) if single.infinity_mass < 1 else 1.0
    if steps == 1:
        return LossPMF(single.lower_index, single.step, p.copy(), float(inf_mass), pessimistic)
    lo, hi = _chernoff_window(single, steps, TAIL_MASS_TRUNCATION)
    out_len = hi - lo + 1
    n = sp_fft.next_fast_len(max(out_len, p.size), real=True)
    if fft_len is not None and fft_len >= n:
        n = fft_len
    spec = _int_power(single.rfft(n), steps)
    conv = sp_fft.irfft(spec, n)
    out = np.roll(conv, -(lo % n))[:out_len] if lo % n else conv[:out_len]
    probs = np.clip(out, 0.0, None)
    return LossPMF(
        lower_index=single.lower_index * steps + lo,
        step=single.step,
        probs=probs,
        infinity_mass=float(min(1.0, inf_mass + TAIL_MASS_TRUNCATION)),
        pessimistic=pessimistic,
    )


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
