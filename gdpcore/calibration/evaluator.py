"""The calibration evaluator: the only place calibration asks for a curve, from the one accounting engine.

Two functions, both mapping DP-SGD(sigma, q, T) at one discretisation to a symmetric trade-off curve through
:meth:`gdpcore.engine.Producer.curve_at` (the engine's constructions, round-off policy and twin, at a step the
search chooses on the engine's ladder):

* :func:`pessimistic_curve` - connect-the-dots PMF, remove direction guarded by the add direction (an upper bound on
  every risk at any discretisation). The only curve a calibration certifies on.
* :func:`optimistic_curve` - the engine's optimistic twin (privacy buckets rounded down, read through the threshold
  tests on the composed bucket index: :func:`gdpcore.engine.optimistic_curve`): a proven lower bound on every risk.
  Only decides whether an infeasible outcome is worth refining and is quoted in the error message.

Single steps (and their FFTs) stay cached in one producer across calls, so ``calibrate_steps`` only re-composes.
Calibrations may run on several threads at once (the pipeline's thread runner): :meth:`Producer.curve_at` keeps no
per-call state on the producer and reads none of its hints, and its caches are safe for concurrent use (see
:class:`gdpcore.engine.Producer`), so a curve does not depend on what other threads evaluate
(tests/test_calibration.py::test_concurrent_calibrations_match_sequential_ones).
"""

from __future__ import annotations

from gdpcore.curve import SymmetricCurve
from gdpcore.engine import Producer
from gdpcore.mechanisms import SubsampledGaussian
from gdpcore.report import DEFAULT_ALPHA_MIN

__all__ = ["clear_cache", "optimistic_curve", "pessimistic_curve"]

# alpha_min sets where round-off must stay negligible (the smallest FPR a calibration target reads is >= it).
# Shared by every thread: curve_at is safe for concurrent use (module docstring).
_PRODUCER = Producer(deltas=(), alpha_min=DEFAULT_ALPHA_MIN, add_guard=True)


def clear_cache() -> None:
    """Forget the cached single steps (benchmarks time cold calls)."""
    _PRODUCER.release()


def _mechanism(noise_multiplier: float, sampling_rate: float, steps: int) -> SubsampledGaussian:
    return SubsampledGaussian(noise_multiplier=noise_multiplier, sampling_rate=sampling_rate, steps=steps)


def pessimistic_curve(
    *, noise_multiplier: float, sampling_rate: float, steps: int, discretization: float
) -> SymmetricCurve:
    """Pessimistic symmetric trade-off curve of DP-SGD(sigma, q, T) at one discretisation: the only evaluator."""
    mech = _mechanism(float(noise_multiplier), float(sampling_rate), int(steps))
    return _PRODUCER.curve_at(mech, float(discretization), side="pessimistic")


def optimistic_curve(
    *, noise_multiplier: float, sampling_rate: float, steps: int, discretization: float
) -> SymmetricCurve:
    """Optimistic twin of :func:`pessimistic_curve`: a lower bound on every risk. Never used to accept a point."""
    mech = _mechanism(float(noise_multiplier), float(sampling_rate), int(steps))
    return _PRODUCER.curve_at(mech, float(discretization), side="optimistic")
