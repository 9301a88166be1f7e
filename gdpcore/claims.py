"""Check a published privacy claim: reproduce it with the accountant its authors named, then hold it against ours.

A model card usually states one number, "(eps, delta) = (8, 1e-5) with the RDP accountant". An auditor asks two
different questions, and this module answers them separately:

1. **Is the claim reproducible?** Recompute eps at the claimed delta with the *named* accountant, the way its authors'
   tool does. The published eps of De et al. (seed 000 Table 4) come from an RDP accountant; dp_accounting's
   ``RdpAccountant`` (default order grid 1.1..1024, the Balle et al. 2020 RDP-to-DP conversion) reproduces all six
   within 0.03 (tests/test_claims.py). A claim the named accountant cannot reproduce is a red flag: wrong
   hyper-parameters in the card, or an accountant bug.
2. **Is the claim certified?** Compare it with the tight pessimistic epsilon of :func:`gdpcore.analyze` (PLD
   upper bound). RDP claims are valid but loose (7.998 claimed-and-reproduced vs 7.424 tight for the eps=8 run);
   a claim made with the CLT ("GDP") accountant of Bu et al./Opacus is an *estimate*, not a bound, and can understate
   the privacy loss — exactly what the audit must catch.

Reproduction accountants (the ``accountant`` string of a claim is matched case-insensitively):

============  ==========================================================================  ==========
family        how eps is recomputed                                                       label
============  ==========================================================================  ==========
``rdp``       dp_accounting ``RdpAccountant`` (default orders), DpEvents built from the   upper
              mechanism. Names: RDP, Renyi, moments (accountant)
``pld``       gdpcore's pessimistic PLD (dp_accounting connect-the-dots), i.e. the tight   upper
              epsilon. Names: PLD, PRV, privacy loss distribution
``clt``       central-limit mu of Bu et al. 2020 / Opacus ``GaussianAccountant``           estimate
              (mu = q sqrt(T (e^{1/sigma^2} - 1)) per phase, mu^2 adds), eps from the GDP
              profile (seed 000 Eq. 5). Names: GDP, CLT
============  ==========================================================================  ==========

Why dp_accounting for RDP rather than :func:`gdpcore.representations.get_rdp_from_mechanism`: reproduction has to
follow the tool the claim was made with, order grid and conversion included; the quadrature RDP is used in the tests
as the independent cross-check (equal at integer orders).
"""

from __future__ import annotations

import dataclasses

from dp_accounting.rdp import rdp_privacy_accountant

from gdpcore._validation import check_positive, check_probability
from gdpcore.closed_form import get_epsilon_from_gdp
from gdpcore.engine import kind_rdp_curve
from gdpcore.kinds import UnsupportedMechanismError, clt_mu, to_dp_event
from gdpcore.mechanisms import Mechanism

__all__ = [
    "CLAIM_STATUSES",
    "REPRODUCTION_FAMILIES",
    "ClaimCheck",
    "EpsilonReproduction",
    "check_claim",
    "get_epsilon_from_named_accountant",
    "reproduction_family",
]

REPRODUCTION_FAMILIES: tuple[str, ...] = ("rdp", "pld", "clt")

_FAMILY_NAMES: dict[str, str] = {
    "rdp": "rdp",
    "renyi": "rdp",
    "renyi dp": "rdp",
    "moments": "rdp",
    "moments accountant": "rdp",
    "pld": "pld",
    "prv": "pld",
    "privacy loss distribution": "pld",
    "connect-the-dots": "pld",
    "gdp": "clt",
    "clt": "clt",
    "gdp-clt": "clt",
    "gaussian": "clt",
}

#: Reproduction statuses, in the order an auditor reads them.
CLAIM_STATUSES: tuple[str, ...] = (
    "reproduced",  # |eps_named - eps_claimed| <= rtol * eps_claimed
    "claim looser than its accountant",  # eps_named < eps_claimed: conservative rounding or a looser tool
    "not reproduced",  # eps_named > eps_claimed: the named accountant gives a larger eps
    "accountant not reproducible",  # unknown accountant name, or a mechanism the named accountant cannot handle
)


def reproduction_family(accountant: str) -> str | None:
    """The reproduction family (``"rdp"``, ``"pld"``, ``"clt"``) of an accountant name, or None if unknown."""
    if not isinstance(accountant, str):
        raise ValueError(f"accountant must be a string, got {accountant!r}")
    return _FAMILY_NAMES.get(" ".join(accountant.strip().lower().replace("_", " ").split()))


@dataclasses.dataclass(frozen=True, kw_only=True)
class EpsilonReproduction:
    """eps at ``delta`` recomputed with a named accountant; ``epsilon`` is None when it cannot be (see ``detail``)."""

    family: str | None
    delta: float
    epsilon: float | None
    bound: str | None  # "upper" or "estimate"
    detail: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClaimCheck:
    """A published (eps, delta, accountant) claim reproduced and compared with the tight pessimistic epsilon."""

    claimed_epsilon: float
    claimed_delta: float
    claimed_accountant: str
    reproduction: EpsilonReproduction
    status: str  # one of CLAIM_STATUSES
    tight_epsilon: float  # gdpcore's pessimistic PLD epsilon at claimed_delta (an upper bound)
    #: True when the tight *upper bound* is <= the claimed eps (no tolerance: a certificate is never rounded in the
    #: claim's favour). False means the claim is not certified, not that it is false: the true eps may lie between.
    certified: bool
    rtol: float

    @property
    def reproduced_epsilon(self) -> float | None:
        return self.reproduction.epsilon

    def summary(self) -> str:
        c, r = self.claimed_epsilon, self.reproduction
        head = f"claimed eps={c:g} at delta={self.claimed_delta:g} ({self.claimed_accountant})"
        if r.epsilon is None:
            repro = f"not reproducible: {r.detail}"
        else:
            repro = f"{self.status}: {r.family} gives {r.epsilon:.4g} ({r.bound})"
        verdict = "certifies the claim" if self.certified else "does NOT certify the claim"
        return f"{head}; {repro}; gdpcore's pessimistic eps {self.tight_epsilon:.4g} {verdict}"


# -- RDP via dp_accounting ------------------------------------------------------------------------------------------
# The mechanism -> DpEvent construction is declared per kind in the registry (gdpcore.kinds.to_dp_event).
def _rdp_epsilon(mechanism: Mechanism, delta: float) -> tuple[float, str]:
    relation = (
        rdp_privacy_accountant.NeighborRel.REPLACE_ONE
        if mechanism.neighbouring_relation == "replace_one"
        else rdp_privacy_accountant.NeighborRel.ADD_OR_REMOVE_ONE
    )
    try:
        event = to_dp_event(mechanism)
    except UnsupportedMechanismError as exc:
        raise UnsupportedMechanismError(f"dp_accounting's RDP accountant cannot take this mechanism: {exc}") from None
    accountant = rdp_privacy_accountant.RdpAccountant(neighboring_relation=relation)
    if not accountant.supports(event):
        raise UnsupportedMechanismError(
            f"dp_accounting's RDP accountant does not support {type(mechanism).__name__} under "
            f"{mechanism.neighbouring_relation}"
        )
    if mechanism.neighbouring_relation == "replace_one":
        # dp_accounting's RDP math applied to gdpcore's RDP curve (the replace-one workaround, kind_rdp_curve).
        orders, curve = kind_rdp_curve(mechanism)
        eps, order = rdp_privacy_accountant.compute_epsilon(orders, curve, delta)
        detail = (
            f"dp_accounting's RDP conversion (compute_epsilon, {orders.size} default orders, optimal order {order:g}) "
            "of gdpcore's replace-one RDP curve"
        )
        return float(eps), detail
    accountant.compose(event)
    eps, order = accountant.get_epsilon_and_optimal_order(delta)
    orders = rdp_privacy_accountant.DEFAULT_RDP_ORDERS
    detail = (
        f"dp_accounting RdpAccountant, {len(orders)} default orders in [{min(orders):g}, {max(orders):g}], "
        f"optimal order {order:g}"
    )
    return float(eps), detail


# -- CLT (Bu et al. 2020; Opacus GaussianAccountant): gdpcore.kinds.clt_mu, declared per kind in the registry -----


def get_epsilon_from_named_accountant(
    mechanism: Mechanism, *, delta: float, accountant: str, tight_epsilon: float | None = None
) -> EpsilonReproduction:
    """eps at ``delta`` as the accountant called ``accountant`` computes it for ``mechanism``.

    ``tight_epsilon`` (the pessimistic PLD eps at ``delta``, if already computed) saves re-running the PLD for the
    ``pld`` family.
    """
    if not isinstance(mechanism, Mechanism):
        raise ValueError(f"mechanism must be a gdpcore Mechanism, got {type(mechanism).__name__}")
    delta = check_probability("delta", delta, high_open=True)
    family = reproduction_family(accountant)
    if family is None:
        known = ", ".join(sorted(_FAMILY_NAMES))
        return EpsilonReproduction(
            family=None,
            delta=delta,
            epsilon=None,
            bound=None,
            detail=f"unknown accountant {accountant!r} (known names: {known})",
        )
    try:
        if family == "rdp":
            eps, detail = _rdp_epsilon(mechanism, delta)
            return EpsilonReproduction(family=family, delta=delta, epsilon=eps, bound="upper", detail=detail)
        if family == "clt":
            mu = clt_mu(mechanism)
            eps = float(get_epsilon_from_gdp(mu=mu, delta=delta))
            return EpsilonReproduction(
                family=family,
                delta=delta,
                epsilon=eps,
                bound="estimate",
                detail=f"central-limit mu = {mu:.6g} (Bu et al. 2020; an approximation, not a bound)",
            )
    except UnsupportedMechanismError as exc:
        return EpsilonReproduction(family=family, delta=delta, epsilon=None, bound=None, detail=str(exc))
    if tight_epsilon is None:
        from gdpcore.report import analyze  # local: report imports the accounting stack

        tight_epsilon = float(analyze(mechanism).epsilon(delta))
    return EpsilonReproduction(
        family=family,
        delta=delta,
        epsilon=float(tight_epsilon),
        bound="upper",
        detail="gdpcore pessimistic PLD (dp_accounting connect-the-dots)",
    )


def check_claim(
    mechanism: Mechanism,
    *,
    epsilon: float,
    delta: float,
    accountant: str,
    tight_epsilon: float | None = None,
    rtol: float = 0.01,
) -> ClaimCheck:
    """Reproduce the claim "(``epsilon``, ``delta``) with ``accountant``" and compare it with the tight epsilon.

    ``rtol`` absorbs the rounding of published values (De et al. print eps = 6 for RDP's 6.023). ``tight_epsilon``
    is gdpcore's pessimistic eps at ``delta``; computed with :func:`gdpcore.analyze` when not given.
    """
    epsilon = check_positive("epsilon", epsilon)
    delta = check_probability("delta", delta, high_open=True)
    rtol = float(rtol)
    if not (0 <= rtol < 1):
        raise ValueError(f"rtol must be in [0, 1), got {rtol!r}")
    reproduction_family(accountant)  # a non-string accountant fails here, before any accounting
    if tight_epsilon is None:
        from gdpcore.report import analyze

        tight_epsilon = float(analyze(mechanism).epsilon(delta))
    tight_epsilon = float(tight_epsilon)
    if not tight_epsilon >= 0:  # also NaN
        raise ValueError(f"tight_epsilon must be >= 0, got {tight_epsilon!r}")
    rep = get_epsilon_from_named_accountant(mechanism, delta=delta, accountant=accountant, tight_epsilon=tight_epsilon)
    slack = rtol * epsilon
    if rep.epsilon is None:
        status = "accountant not reproducible"
    elif rep.epsilon > epsilon + slack:
        status = "not reproduced"
    elif rep.epsilon < epsilon - slack:
        status = "claim looser than its accountant"
    else:
        status = "reproduced"
    return ClaimCheck(
        claimed_epsilon=epsilon,
        claimed_delta=delta,
        claimed_accountant=accountant,
        reproduction=rep,
        status=status,
        tight_epsilon=tight_epsilon,
        certified=bool(tight_epsilon <= epsilon),
        rtol=rtol,
    )
