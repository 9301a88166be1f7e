"""dp_accounting's own composition of a mechanism's PLD: the oracle tests compare gdpcore's engine against.

gdpcore builds one step's PLD per kind (:func:`gdpcore.kinds.pld`) and composes the steps itself with a round-off bound
(:mod:`gdpcore.pld`). This walks the mechanism tree the way dp_accounting's ``PLDAccountant`` walks a DpEvent:
``self_compose`` for repeated steps (a kind's ``steps_param``, a ``SelfComposed`` count) and ``compose`` across the
parts of a ``Composed``, with no round-off bound of its own.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from gdpcore import kinds
from gdpcore.mechanisms import Composed, Mechanism, SelfComposed


def _repeat(pld: pld_lib.PrivacyLossDistribution, n: int) -> pld_lib.PrivacyLossDistribution:
    return pld.self_compose(n) if n > 1 else pld


def dp_accounting_pld(mechanism: Mechanism, *, step: float, pessimistic: bool) -> pld_lib.PrivacyLossDistribution:
    """The PLD of ``mechanism`` composed by dp_accounting (``step`` its discretisation)."""
    if isinstance(mechanism, SelfComposed):
        return _repeat(dp_accounting_pld(mechanism.mechanism, step=step, pessimistic=pessimistic), mechanism.count)
    if isinstance(mechanism, Composed):
        parts = [dp_accounting_pld(m, step=step, pessimistic=pessimistic) for m in mechanism.mechanisms]
        return functools.reduce(lambda a, b: a.compose(b), parts)
    name = kinds.get(mechanism).steps_param
    if name is None:
        return kinds.pld(mechanism, step=step, pessimistic=pessimistic)
    one = dataclasses.replace(mechanism, **{name: 1})
    return _repeat(kinds.pld(one, step=step, pessimistic=pessimistic), int(getattr(mechanism, name)))


def poisson_gaussian_pld(
    sigma: float, q: float, steps: int, step: float, *, pessimistic: bool = True
) -> pld_lib.PrivacyLossDistribution:
    """dp_accounting's PLD of ``steps`` Poisson-subsampled Gaussian steps, straight from its own constructor
    (``from_gaussian_mechanism``, connect-the-dots on the pessimistic side, privacy buckets rounded down on the
    optimistic one), independent of gdpcore's kind layer."""
    single = pld_lib.from_gaussian_mechanism(
        sigma,
        sampling_prob=q,
        value_discretization_interval=step,
        pessimistic_estimate=pessimistic,
        use_connect_dots=pessimistic,
    )
    return single.self_compose(steps)


def direct_power(base: np.ndarray, steps: int) -> np.ndarray:
    """The ``steps``-fold linear convolution power of ``base`` by direct convolutions (binary exponentiation, no FFT),
    in ``base``'s own arithmetic: ``np.longdouble`` (tests/test_pld_chernoff.py) or exact Python integers
    (tests/test_roundoff.py)."""
    out = None
    while steps:
        if steps & 1:
            out = base if out is None else np.convolve(out, base)
        steps >>= 1
        if steps:
            base = np.convolve(base, base)
    assert out is not None
    return out
