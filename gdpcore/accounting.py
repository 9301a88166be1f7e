"""Adapter from gdpcore mechanisms to Google ``dp_accounting`` privacy-loss distributions (PLDs).

dp_accounting does the heavy lifting (connect-the-dots discretisation, FFT composition, tail truncation); this
module only builds the PLD for a mechanism description and exposes its *remove*-direction PMF as plain arrays.

Why only the remove PMF is read (measured, see tests/test_accounting_traps.py):

* dp_accounting's composed *add*-direction PMF is not a consistent likelihood ratio at fine discretisation and large
  T: its total mass exceeds 1 (1.0000675 for sigma=0.7, q=0.1, T=2500 at 1e-4), so its delta(0) can exceed 1.
* The composed *remove* PMF's lower tail is truncated by P-mass, which can drop Q-mass (Sum p*e^-l = 0.355 in the
  same cell at 1e-4). Its *upper* part (losses >= 0) is untouched: truncated left mass is moved *up* onto the lowest
  kept loss and truncated right mass to +inf, both of which can only raise delta_R(eps) for eps >= 0.

* Even a single connect-the-dots Gaussian PMF has spurious Q-mass in its far lower tail (about 9e-5 at losses in
  [-10, -6] for sigma=1 at 1e-4), so nothing may be read from the lower tail.

The pessimistic trade-off curve (:mod:`gdpcore.curve`) is therefore built from delta_R(eps), eps >= 0, computed on
the remove PMF's losses above eps, and symmetrised by mirroring (seed 000 Thm A.10 / App. C; Dong et al. Def. F.1).
The add PMF is read the same way (upper part only) as a guard: its excess over delta_R beyond its own excess mass is
reported and, if positive, absorbed by a pointwise max.
"""

from __future__ import annotations

import math

import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from gdpcore.mechanisms import (
    Composed,
    DiscreteGaussian,
    Gaussian,
    Laplace,
    Mechanism,
    RandomizedResponse,
    SelfComposed,
    SubsampledGaussian,
)
from gdpcore.pmf import LossPMF

__all__ = ["ACCOUNTANT_NAME", "DEFAULT_DISCRETIZATION", "LossPMF", "build_pld", "loss_pmf", "loss_pmfs"]

DEFAULT_DISCRETIZATION = 1e-4
ACCOUNTANT_NAME = "dp_accounting.pld"


def _single_pld(mechanism: Mechanism, *, step: float, pessimistic: bool) -> pld_lib.PrivacyLossDistribution:
    # Connect-the-dots is pessimistic only; the optimistic twin uses privacy buckets rounded down.
    ctd = pessimistic
    if isinstance(mechanism, Gaussian):
        # The trade-off curve of a Gaussian depends on the relation only through the stated sensitivity.
        return pld_lib.from_gaussian_mechanism(
            mechanism.noise_multiplier * mechanism.sensitivity,
            sensitivity=mechanism.sensitivity,
            pessimistic_estimate=pessimistic,
            value_discretization_interval=step,
            use_connect_dots=ctd,
        )
    if isinstance(mechanism, SubsampledGaussian):
        single = pld_lib.from_gaussian_mechanism(
            mechanism.noise_multiplier * mechanism.sensitivity,
            sensitivity=mechanism.sensitivity,
            pessimistic_estimate=pessimistic,
            value_discretization_interval=step,
            sampling_prob=mechanism.sampling_rate,
            use_connect_dots=ctd,
        )
        return single.self_compose(mechanism.steps) if mechanism.steps > 1 else single
    if isinstance(mechanism, Laplace):
        return pld_lib.from_laplace_mechanism(
            mechanism.scale,
            sensitivity=mechanism.sensitivity,
            pessimistic_estimate=pessimistic,
            value_discretization_interval=step,
            use_connect_dots=ctd,
        )
    if isinstance(mechanism, RandomizedResponse):
        # Binary RR reporting the truth w.p. e^eps/(1+e^eps) is dp_accounting's RR with noise parameter 2/(1+e^eps).
        return pld_lib.from_randomized_response(
            noise_parameter=2.0 / (1.0 + math.exp(mechanism.epsilon)),
            num_buckets=2,
            pessimistic_estimate=pessimistic,
            value_discretization_interval=step,
        )
    if isinstance(mechanism, DiscreteGaussian):
        return pld_lib.from_discrete_gaussian_mechanism(
            mechanism.sigma,
            sensitivity=mechanism.sensitivity,
            pessimistic_estimate=pessimistic,
            value_discretization_interval=step,
            use_connect_dots=ctd,
        )
    if isinstance(mechanism, SelfComposed):
        inner = _single_pld(mechanism.mechanism, step=step, pessimistic=pessimistic)
        return inner.self_compose(mechanism.count) if mechanism.count > 1 else inner
    if isinstance(mechanism, Composed):
        plds = [_single_pld(m, step=step, pessimistic=pessimistic) for m in mechanism.mechanisms]
        out = plds[0]
        for other in plds[1:]:
            out = out.compose(other)
        return out
    raise ValueError(f"mechanism has unsupported kind {type(mechanism).__name__!r}")


def build_pld(
    mechanism: Mechanism, *, discretization: float = DEFAULT_DISCRETIZATION, pessimistic: bool = True
) -> pld_lib.PrivacyLossDistribution:
    """The dp_accounting PLD of ``mechanism`` (connect-the-dots if pessimistic, rounded-down buckets otherwise)."""
    if not (isinstance(discretization, float | int) and 0 < discretization <= 0.1 and math.isfinite(discretization)):
        raise ValueError(f"discretization must be in (0, 0.1], got {discretization!r}")
    return _single_pld(mechanism, step=float(discretization), pessimistic=pessimistic)


def loss_pmf(pld: pld_lib.PrivacyLossDistribution, *, pessimistic: bool, direction: str = "remove") -> LossPMF:
    """One direction's PMF of a dp_accounting PLD as arrays (``direction`` is "remove" or "add")."""
    pmf = pld._pmf_remove if direction == "remove" else pld._pmf_add  # noqa: SLF001 - no public PMF arrays
    dense = pmf.to_dense_pmf()
    probs = np.clip(np.asarray(dense._probs, dtype=float), 0.0, None)  # noqa: SLF001
    return LossPMF(
        lower_index=int(dense._lower_loss),  # noqa: SLF001
        step=float(dense._discretization),  # noqa: SLF001
        probs=probs,
        infinity_mass=float(dense._infinity_mass),  # noqa: SLF001
        pessimistic=pessimistic,
    )


def loss_pmfs(pld: pld_lib.PrivacyLossDistribution, *, pessimistic: bool) -> tuple[LossPMF, LossPMF | None]:
    """(remove PMF, add PMF or None when the PLD is symmetric)."""
    remove = loss_pmf(pld, pessimistic=pessimistic, direction="remove")
    if pld._symmetric:  # noqa: SLF001
        return remove, None
    return remove, loss_pmf(pld, pessimistic=pessimistic, direction="add")
