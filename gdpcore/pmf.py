"""The one privacy-loss PMF type of gdpcore: the P-law of L = log(P/Q) on a lattice, plus its +inf mass.

Every producer of PMFs (dp_accounting's PLDs read by :mod:`gdpcore.accounting`, the vectorised single steps and
FFT compositions of :mod:`gdpcore.pld`) returns a :class:`LossPMF`; every curve construction
(:mod:`gdpcore.curve`) reads one. A single step keeps its FFTs and log-MGFs in per-object caches, so one object
serves every number of compositions.

``roundoff`` is a rigorous bound on the floating-point error of each atom (FFT compositions: the componentwise
a-priori bound of :func:`gdpcore.pld.powers._power_roundoff`, with the forward transform in extended precision; see
:func:`gdpcore.pld.compose_loss_pmf`). Curve constructions add it to every atom on the pessimistic side and
subtract it on the optimistic side (a scalar, or one bound per atom where a tilted composition gave the tail
its own precision), so round-off can never turn an upper bound into an optimistic number or invert
a bracket; it matters only for delta or FPR near ``roundoff`` x the support length (about 1e-12 at T = 1e5).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from scipy import fft as sp_fft

__all__ = ["LossPMF", "rfft_extended"]


def rfft_extended(x: np.ndarray, n: int) -> np.ndarray:
    """rfft of ``x`` zero-padded to ``n``, computed in ``np.longdouble`` (64-bit significand on x86-64; float64 where
    the platform has nothing wider) and returned as ``np.clongdouble``: the forward transforms whose round-off bound
    must be tight (:func:`gdpcore.pld.powers._power_roundoff`)."""
    return sp_fft.rfft(np.asarray(x).astype(np.longdouble), n)


@dataclasses.dataclass(frozen=True, eq=False)
class LossPMF:
    """P-law of the privacy loss on the lattice ``(lower_index + i) * step``; ``infinity_mass`` is P(L = +inf).

    ``probs`` are >= 0 (round-off negatives are clipped and accounted for in ``roundoff``).
    """

    lower_index: int
    step: float
    probs: np.ndarray
    infinity_mass: float
    pessimistic: bool = True
    roundoff: float | np.ndarray = 0.0
    _cache: dict[Any, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)
    bucket_q_weights: np.ndarray | None = dataclasses.field(default=None, repr=False, compare=False)
    """An optimistic (privacy-bucket) single step's Q-mass weights: w_k >= P_k e^{-(l_k - k d)} per bucket k, so that
    Q_k <= e^{-k d} w_k (:func:`gdpcore.pld.threshold_test_masses` composes them). Part of the twin's proof, so
    it is set where the buckets are built (the Poisson-subsampled Gaussian's closed-form residual bounds; the
    P-masses themselves for buckets whose losses are rounded down) and None on every other PMF: the twin refuses a
    single step without it."""

    @property
    def max_roundoff(self) -> float:
        return float(np.max(self.roundoff)) if np.size(self.roundoff) else 0.0

    @property
    def losses(self) -> np.ndarray:
        return (self.lower_index + np.arange(self.probs.size)) * self.step

    @property
    def p_mass(self) -> float:
        """Sum of P over finite losses plus infinity mass (1 for a normalised PMF)."""
        return float(self.probs.sum() + self.infinity_mass)

    @property
    def q_mass(self) -> float:
        """Sum of p * e^-l: the Q-mass the PMF accounts for (1 for a consistent likelihood ratio).

        Below 1 where truncation of the lower tail dropped Q-mass, above 1 where discretisation added some. Atoms not
        above their round-off bound are left out: an FFT composition's noise floor (~1e-17) at a loss of -40 would
        otherwise weigh e^40 times its size and say nothing about the PMF.
        """
        pos = self.probs > self.roundoff
        return float(np.sum(np.exp(np.log(self.probs[pos]) - self.losses[pos])))

    # -- per-object caches (a single step serves every number of compositions) -------------------------------------
    # A PMF may serve several threads (a shared single step): every entry is a deterministic function of the PMF, so
    # two threads filling one entry at once only compute it twice; iterations run over a snapshot of the keys (taken
    # atomically under the GIL), and removals tolerate a key another thread already removed.
    def cached_fft_lengths(self) -> list[int]:
        """FFT lengths whose transform of this PMF is already cached."""
        return sorted({k[1] for k in tuple(self._cache) if isinstance(k, tuple) and k[0] == "rfft"})

    def rfft(self, n: int, *, extended: bool = False) -> np.ndarray:
        """rfft of the PMF zero-padded to ``n`` (cached). ``extended``: computed in ``np.longdouble`` (64-bit
        significand on x86-64) and returned as ``np.clongdouble``, so that each coefficient is within ``~log2(n)
        2^-64`` of the exact one instead of a float64 FFT's ``~5 log2(n) u`` (see
        :func:`gdpcore.pld.powers._power_roundoff`); about 3.7x the cost of the float64 transform."""
        key = ("rfft", n, extended)
        out = self._cache.get(key)
        if out is None:
            out = rfft_extended(self.probs, n) if extended else sp_fft.rfft(self.probs, n)
            self._cache[key] = out
        return out

    def cached(self, key: str, compute: Any = None) -> Any:
        """A derived quantity of this PMF, computed once by ``compute()`` (log-MGFs, bucket residuals); ``KeyError``
        when it was never stored and no ``compute`` is given."""
        if key not in self._cache:
            if compute is None:
                raise KeyError(f"this PMF carries no {key!r}")
            value = compute()
            return self._cache.setdefault(key, value)
        return self._cache[key]

    def has_cached(self, key: str) -> bool:
        """Whether :meth:`cached` holds ``key``."""
        return key in self._cache

    def release(self) -> None:
        """Drop the cached transforms (memory) but keep small derived quantities."""
        for key in [k for k in tuple(self._cache) if isinstance(k, tuple) and k[0] == "rfft"]:
            self._cache.pop(key, None)

    # -- round-off, on the safe side of each end ----------------------------------------------------------------------
    def with_roundoff_allowance(self) -> LossPMF:
        """The PMF moved to the safe side of its round-off: +``roundoff`` per atom if pessimistic (raises every
        delta(eps)), -``roundoff`` (clipped at 0) if optimistic (lowers it). Identity when ``roundoff`` is 0."""
        if self.probs.size == 0 or not np.any(np.asarray(self.roundoff) > 0.0):
            return self
        if self.pessimistic:
            probs = self.probs + self.roundoff
        else:
            probs = np.clip(self.probs - self.roundoff, 0.0, None)
        return dataclasses.replace(self, probs=probs, roundoff=0.0, _cache={})
