"""The RDP fallback (when even the coarsest PLD is over budget) and the one conversion of the kinds' RDP curves."""

from __future__ import annotations

import numpy as np

from gdpcore import kinds
from gdpcore.curve import (
    curve_from_profile,
)
from gdpcore.engine.plan import BudgetExceededError, Deadline, _Refused
from gdpcore.engine.results import Curves, Provenance
from gdpcore.mechanisms import Mechanism

_RDP_EPS_POINTS = 400
_RDP_FLOOR = 1e-12


def kind_rdp_curve(mechanism: Mechanism, *, deadline: Deadline | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(orders, RDP curve) of ``mechanism`` from its kinds' own RDP formulas (exact or upper bounds; every kind
    declares one) at dp_accounting's default orders, for dp_accounting's conversions ``compute_epsilon`` /
    ``compute_delta``. The one place the replace-one workaround lives: dp_accounting's ``RdpAccountant`` reads a
    replace-one ``GaussianDpEvent``'s noise relative to twice the norm bound its DpEvent documents
    (google/differential-privacy#378), so replace-one RDP epsilons (the engine's RDP fallback, and
    :mod:`gdpcore.claims`' reproduction) convert this curve instead of composing DpEvents.

    RDP adds over independent steps (Mironov 2017 Prop. 1), so each distinct single step
    (:func:`gdpcore.kinds.single_steps`: equal steps merged, their counts added) is evaluated once and weighted by
    its count; ``deadline`` (if given) is read before each, raising :class:`gdpcore.engine.plan._Refused`."""
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    orders = np.asarray(rdp.DEFAULT_RDP_ORDERS, dtype=float)
    total = np.zeros_like(orders)
    with np.errstate(over="ignore"):
        for leaf, count in kinds.single_steps(mechanism):
            if deadline is not None:
                deadline.check("on the RDP fallback")
            curve, _ = kinds.evaluate(leaf, "rdp", orders)
            total = total + _as_float(count) * np.asarray(curve, dtype=float)
    return orders, total


def _as_float(count: int) -> float:
    """A step count as a float (inf beyond the float range: the RDP bound is then infinite, still an upper bound)."""
    try:
        return float(count)
    except OverflowError:
        return float("inf")


def rdp_fallback(mechanism: Mechanism, reason: str, *, deadline: Deadline | None = None) -> Curves:
    """dp_accounting's RDP accountant: delta(eps) upper bounds on an eps grid up to the RDP epsilon at 1e-12;
    the envelope of their supporting lines is a valid (pessimistic) symmetric curve (seed 000 Thm A.9).

    Raises :class:`gdpcore.engine.plan.BudgetExceededError` ("budget_exceeded: ...", no number) when ``deadline``
    passes before every distinct single step's RDP curve is evaluated."""
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    # dp_accounting's RdpAccountant takes few of the kinds: every kind's own RDP curve, converted by dp_accounting.
    try:
        orders, curve_rdp = kind_rdp_curve(mechanism, deadline=deadline)
    except _Refused as why:
        raise BudgetExceededError(f"budget_exceeded: {reason}; {why}") from None
    # dp_accounting's conversions take log1p(-e^-r) at some order: an RDP value below ~1e-16 (a noise of 1e100
    # sigmas) rounds e^-r to 1 there. Raising the curve to _RDP_FLOOR only loosens the bound.
    curve_rdp = np.maximum(curve_rdp, _RDP_FLOOR)
    e_max = max(float(rdp.compute_epsilon(orders, curve_rdp, 1e-12)[0]), 1e-3)
    eps = np.linspace(0.0, e_max, _RDP_EPS_POINTS)
    delta = np.array([rdp.compute_delta(orders, curve_rdp, float(e))[0] for e in eps])
    curve = curve_from_profile(eps, delta)
    return Curves(
        curve,
        None,
        None,
        Provenance(
            accountant="dp_accounting.rdp conversion of the kinds' RDP curves (RDP fallback; upper bounds, looser than PLD)",
            engine="rdp_fallback",
            status=reason + "; numbers are the looser RDP bound (fallback)",
        ),
    )
