"""Tilted tails: the upper tail of a composition recomputed on the exponentially tilted single step, where the
round-off allowance would matter for the smallest delta or FPR read.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from gdpcore.pld.powers import TAIL_MASS_TRUNCATION, WRAP_TAIL, _fft_plan, _power, fft_bytes
from gdpcore.pmf import LossPMF

SPLICED_BYTES_PER_POINT = 176
"""Working bytes per atom of a spliced composition: values and per-atom bounds (16) plus the curve read from it
(``gdpcore.engine``'s 160 per point)."""


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
    """(K(theta), K'(theta)) of one step's loss under P: log E[e^{theta L}] and the tilted mean E_theta[L].

    Kept in the PMF's cache per theta: the bisections of :func:`tilt_for_tail` and :func:`tilt_for_loss` on one
    single step start from the same dyadic thetas (1, 2, 4, ... and their midpoints)."""
    theta = float(theta)
    return single.cached(f"tilted_log_mgf {theta!r}", lambda: _tilted_log_mgf(single, theta))


def _log_support(single: LossPMF) -> tuple[np.ndarray, np.ndarray]:
    """(log P, loss) on the atoms with P > 0, kept in the PMF's cache."""

    def support() -> tuple[np.ndarray, np.ndarray]:
        pos = single.probs > 0
        return np.log(single.probs[pos]), single.losses[pos]

    out: tuple[np.ndarray, np.ndarray] = single.cached("log_probs_and_losses", support)
    return out


def _tilted_log_mgf(single: LossPMF, theta: float) -> tuple[float, float]:
    logp, losses = _log_support(single)
    x = losses * theta  # in place from here on: one working array (the same operations, the same values)
    x += logp
    m = float(x.max())
    x -= m
    np.exp(x, out=x)
    total = float(x.sum())
    x *= losses
    return m + math.log(total), float(x.sum()) / total


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
    logp, losses = _log_support(single)
    pos = single.probs > 0
    tilted_probs = np.zeros_like(single.probs)
    tilted_probs[pos] = np.exp(logp + theta * losses - k)
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
    # fall below _SPLICE_CUT are cut (their mass moves to +inf on the pessimistic side, is dropped on the optimistic
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


_SPLICE_CUT = 1e-5 * TAIL_MASS_TRUNCATION
"""Mass and bounds a spliced composition may cut from the top of its tilted tail (:func:`_splice`): moved to +inf on
the pessimistic side, where the base composition already holds ``TAIL_MASS_TRUNCATION`` (so +inf grows by at most
1e-5 of what it holds), dropped on the optimistic side (its profile lowered by at most 1e-20). The base's window is
always kept whole.

Why not further out: the tilted law of a subsampled Gaussian is a sum of rare large jumps, and at 1e-60 the spliced
support was 1.2-2.2x the base window (sigma 0.5, q 1e-4, T 1e5: 290,282 atoms against the base's 200,449; sigma 0.83,
q 1.8e-4, T 7600: 109,615 against 59,481). Those are masses below the base's own truncation, which no read resolves
(the pessimistic side's +inf mass is larger), and every curve built from the composition (its vertices, the twin's
threshold tests) walked them. Rows moved by at most 2e-8 relative on the mixed and reference grids of
benchmarks/bench_grid.py (the float-error allowances of fewer atoms)."""
