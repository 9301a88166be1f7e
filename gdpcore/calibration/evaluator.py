"""The calibration evaluator: the only place calibration calls an accountant.

Two functions, both mapping DP-SGD(sigma, q, T) at one discretisation to a symmetric trade-off curve:

* :func:`pessimistic_curve` - connect-the-dots PLD (an upper bound on every risk at any discretisation). The only
  curve a calibration certifies on.
* :func:`optimistic_curve` - dp_accounting's rounded-down PLD, remove direction (an estimate from below of the
  risk). Only decides whether an infeasible outcome is worth refining and is quoted in the error message.

Everything else in :mod:`gdpcore.calibration` reads metrics off these curves, so re-pointing calibration at another
curve producer means changing this module only.
"""

from __future__ import annotations

import functools

from gdpcore import fast_pld
from gdpcore.accounting import build_pld, loss_pmfs
from gdpcore.curve import SymmetricCurve, curve_from_loss_pmf
from gdpcore.mechanisms import SubsampledGaussian
from gdpcore.pmf import LossPMF

__all__ = ["clear_cache", "optimistic_curve", "pessimistic_curve"]


@functools.lru_cache(maxsize=16)
def _single_step(noise_multiplier: float, sampling_rate: float, discretization: float, direction: str) -> LossPMF:
    """One connect-the-dots (pessimistic) step; cached, with its FFTs, so calibrate_steps only re-composes."""
    return fast_pld.single_step_pld(
        noise_multiplier=noise_multiplier,
        sampling_rate=sampling_rate,
        discretization=discretization,
        direction=direction,
    )


def clear_cache() -> None:
    """Forget the cached single-step PLDs (benchmarks time cold calls)."""
    _single_step.cache_clear()


def pessimistic_curve(
    *, noise_multiplier: float, sampling_rate: float, steps: int, discretization: float
) -> SymmetricCurve:
    """Pessimistic symmetric trade-off curve of DP-SGD(sigma, q, T) at one discretisation: the only evaluator.

    The PMFs are :mod:`gdpcore.fast_pld`'s vectorised connect-the-dots construction (dp_accounting's
    ``from_gaussian_mechanism(..., use_connect_dots=True).self_compose(T)`` with exact divergences, cross-checked
    to round-off in tests/test_fast_pld.py, about 10x faster); the curve is read exactly as
    :func:`gdpcore.analyze` reads it (remove PMF above eps >= 0, add PMF as a guard).
    """
    key = (float(noise_multiplier), float(sampling_rate), float(discretization))
    remove = fast_pld.compose_loss_pmf(_single_step(*key, "remove"), steps)
    add = None if sampling_rate == 1.0 else fast_pld.compose_loss_pmf(_single_step(*key, "add"), steps)
    return curve_from_loss_pmf(remove, add)


def optimistic_curve(
    *, noise_multiplier: float, sampling_rate: float, steps: int, discretization: float
) -> SymmetricCurve:
    """Optimistic twin of :func:`pessimistic_curve` (dp_accounting's rounded-down PLD, remove direction): an
    estimate from below of every risk. Never used to accept a calibration point."""
    mech = SubsampledGaussian(noise_multiplier=noise_multiplier, sampling_rate=sampling_rate, steps=steps)
    remove, _ = loss_pmfs(build_pld(mech, discretization=discretization, pessimistic=False), pessimistic=False)
    return curve_from_loss_pmf(remove, None)
