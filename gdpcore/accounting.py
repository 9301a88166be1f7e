"""Adapter from gdpcore mechanisms to Google ``dp_accounting`` privacy-loss distributions (PLDs).

dp_accounting builds each kind's PLD (connect-the-dots or privacy-buckets discretisation, tail truncation); this
module builds the PLD of one step of a mechanism description and exposes its PMFs as plain arrays. The engine
composes the single steps (:func:`gdpcore.kinds.single_steps`) with :mod:`gdpcore.pld`, whose FFT compositions
carry a round-off bound; dp_accounting's own ``compose`` / ``self_compose`` (no round-off bound) is what the tests
compare against at a finer step (``tests/pld_oracle.py``). The notes below are about dp_accounting's *composed* PMFs.

Why only the remove PMF is read (measured; docs/references.md M-1, asserted in tests/test_report.py and tests/test_pld.py):

* dp_accounting's composed *add*-direction PMF is not a consistent likelihood ratio at fine discretisation and large
  T: its total mass exceeds 1 (1.0000675 for sigma=0.7, q=0.1, T=2500 at 1e-4), so its delta(0) can exceed 1.
* The composed *remove* PMF's lower tail is truncated by P-mass, which can drop Q-mass (Sum p*e^-l = 0.355 in the
  same cell at 1e-4). Its *upper* part (losses >= 0) is untouched: truncated left mass is moved *up* onto the lowest
  kept loss and truncated right mass to +inf, both of which can only raise delta_R(eps) for eps >= 0.

* Even a single connect-the-dots Gaussian PMF has spurious Q-mass in its far lower tail (about 7e-5 at losses in
  [-10, -6] for sigma=1 at 1e-4, docs/references.md M-1), so nothing may be read from the lower tail.

The pessimistic trade-off curve (:mod:`gdpcore.curve`) is therefore built from delta_R(eps), eps >= 0, computed on
the remove PMF's losses above eps, and symmetrised by mirroring (seed 000 Thm A.10 / App. C; Dong et al. Def. F.1).
The add PMF is read the same way (upper part only) as a guard: its excess over delta_R beyond its own excess mass is
reported and, if positive, absorbed by a pointwise max.
"""

from __future__ import annotations

import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from gdpcore import kinds
from gdpcore._validation import check_discretization
from gdpcore.mechanisms import Mechanism
from gdpcore.pmf import LossPMF

__all__ = ["ACCOUNTANT_NAME", "DEFAULT_DISCRETIZATION", "LossPMF", "build_pld", "loss_pmf", "loss_pmfs"]

DEFAULT_DISCRETIZATION = 1e-4
ACCOUNTANT_NAME = "dp_accounting.pld"


def build_pld(
    mechanism: Mechanism, *, discretization: float = DEFAULT_DISCRETIZATION, pessimistic: bool = True
) -> pld_lib.PrivacyLossDistribution:
    """The dp_accounting PLD of one step ``mechanism`` (connect-the-dots if pessimistic, rounded-down buckets
    otherwise).

    Each kind's construction is declared in the kind registry (:func:`gdpcore.kinds.pld`); a composition or a
    multi-step leaf, or a kind without a construction, raises :class:`gdpcore.kinds.UnsupportedMechanismError`.
    """
    if not isinstance(mechanism, Mechanism):
        raise ValueError(f"mechanism must be a gdpcore mechanism, got {mechanism!r}")
    return kinds.pld(mechanism, step=check_discretization(discretization), pessimistic=pessimistic)


def loss_pmf(pld: pld_lib.PrivacyLossDistribution, *, pessimistic: bool, direction: str = "remove") -> LossPMF:
    """One direction's PMF of a dp_accounting PLD as arrays (``direction`` is "remove" or "add")."""
    pmf = pld._pmf_remove if direction == "remove" else pld._pmf_add  # noqa: SLF001 - no public accessor for a PLD's PMFs
    dense = pmf.to_dense_pmf()
    probs = np.clip(np.asarray(dense._probs, dtype=float), 0.0, None)  # noqa: SLF001 - DensePLDPmf has no public arrays
    return LossPMF(
        lower_index=int(dense._lower_loss),  # noqa: SLF001 - DensePLDPmf has no public arrays
        step=float(dense._discretization),  # noqa: SLF001 - DensePLDPmf has no public arrays
        probs=probs,
        infinity_mass=float(dense._infinity_mass),  # noqa: SLF001 - DensePLDPmf has no public arrays
        pessimistic=pessimistic,
    )


def loss_pmfs(pld: pld_lib.PrivacyLossDistribution, *, pessimistic: bool) -> tuple[LossPMF, LossPMF | None]:
    """(remove PMF, add PMF or None when the PLD is symmetric)."""
    remove = loss_pmf(pld, pessimistic=pessimistic, direction="remove")
    if pld._symmetric:  # noqa: SLF001 - PrivacyLossDistribution has no public symmetry flag
        return remove, None
    return remove, loss_pmf(pld, pessimistic=pessimistic, direction="add")
