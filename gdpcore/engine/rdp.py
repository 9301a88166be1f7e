"""The RDP fallback (when even the coarsest PLD is over budget) and the one conversion of the kinds' RDP curves."""

from __future__ import annotations

import math

import numpy as np

from gdpcore import kinds
from gdpcore.curve import (
    curve_from_profile,
)
from gdpcore.engine.plan import BudgetExceededError, Deadline, _Refused
from gdpcore.engine.results import Curves, Provenance
from gdpcore.mechanisms import Mechanism, SubsampledGaussian

_RDP_EPS_POINTS = 400
_RDP_FLOOR = 1e-12


def kind_rdp_curve(
    mechanism: Mechanism, *, deadline: Deadline | None = None, coarsen: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(orders, RDP curve) of ``mechanism`` from its kinds' own RDP formulas (exact or upper bounds; every kind
    declares one) at dp_accounting's default orders, for dp_accounting's conversions ``compute_epsilon`` /
    ``compute_delta``. The one place the replace-one workaround lives: dp_accounting's ``RdpAccountant`` reads a
    replace-one ``GaussianDpEvent``'s noise relative to twice the norm bound its DpEvent documents
    (google/differential-privacy#378), so replace-one RDP epsilons (the engine's RDP fallback, and
    :mod:`gdpcore.claims`' reproduction) convert this curve instead of composing DpEvents.

    RDP adds over independent steps (Mironov 2017 Prop. 1), so each distinct single step
    (:func:`gdpcore.kinds.single_steps`: equal steps merged, their counts added) is evaluated once and weighted by
    its count; ``deadline`` (if given) is read before each, raising :class:`gdpcore.engine.plan._Refused`.
    ``coarsen`` (the fallback's long schedules): :func:`_coarsened` merges nearby Poisson-subsampled Gaussian steps
    into the riskier of their grid's neighbours (looser, still an upper bound)."""
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    orders = np.asarray(rdp.DEFAULT_RDP_ORDERS, dtype=float)
    return orders, rdp_at_orders(mechanism, orders, deadline=deadline, coarsen=coarsen)[0]


def rdp_at_orders(
    mechanism: Mechanism, orders: np.ndarray, *, deadline: Deadline | None = None, coarsen: bool = False
) -> tuple[np.ndarray, str]:
    """(RDP curve at ``orders``, ``"exact"`` or ``"upper"``), each distinct single step evaluated once (see
    :func:`kind_rdp_curve`); ``"upper"`` when a step's RDP is only a bound or ``coarsen`` rounded steps."""
    total = np.zeros_like(orders, dtype=float)
    exact = True
    with np.errstate(over="ignore"):
        steps = kinds.single_steps(mechanism)
        used = _coarsened(steps) if coarsen else steps
        exact = used is steps
        for leaf, count in used:
            if deadline is not None:
                deadline.check("on the RDP fallback")
            curve, label = kinds.evaluate(leaf, "rdp", orders)
            exact = exact and label == "exact"
            total = total + _as_float(count) * np.asarray(curve, dtype=float)
    return total, "exact" if exact else "upper"


_MAX_EXACT_RDP_STEPS = 64
"""Distinct single steps whose RDP curves the fallback evaluates as they are (about 40 ms each for a
Poisson-subsampled Gaussian, :func:`gdpcore.kinds.formulas.rdp_subsampled_gaussian`); longer schedules are
coarsened (:func:`_coarsened`)."""
_RDP_GRID = 2.0 ** (1.0 / 64.0)
"""Ratio of the geometric grid the fallback rounds noise multipliers down and sampling rates up to (1.1% apart)."""


def _coarsened(steps: list[tuple[Mechanism, int]]) -> list[tuple[Mechanism, int]]:
    """``steps`` with every Poisson-subsampled Gaussian step's noise multiplier rounded down and sampling rate rounded
    up to the ``_RDP_GRID`` grid, equal results merged (their counts added), when there are more than
    ``_MAX_EXACT_RDP_STEPS`` distinct steps (a 10,000-phase Opacus history: ~64 per octave of sigma remain).

    Valid, never optimistic: the RDP of a Poisson-subsampled Gaussian is non-increasing in the noise (adding
    independent noise is post-processing) and non-decreasing in the sampling rate (the rate-q' mixture, q' < q, is
    the rate-q one mixed with the unsampled law, and e^{(t-1) D_t} is jointly convex, Mironov 2017), so every
    rounded step's RDP bounds the original's at every order."""
    if len(steps) <= _MAX_EXACT_RDP_STEPS:
        return steps
    counts: dict[object, int] = {}
    kept: dict[object, Mechanism] = {}
    for leaf, count in steps:
        phases = kinds.subsampled_gaussian_phases(leaf)
        if phases is None or len(phases) != 1:
            key: object = leaf.content_hash
        else:
            ((sigma, q), n) = next(iter(phases.items()))
            count *= n
            sigma = _RDP_GRID ** math.floor(math.log(sigma, _RDP_GRID))
            q = min(1.0, _RDP_GRID ** math.ceil(math.log(q, _RDP_GRID)))
            key = (sigma, q)
            leaf = SubsampledGaussian(noise_multiplier=sigma, sampling_rate=q, steps=1)
        kept.setdefault(key, leaf)
        counts[key] = counts.get(key, 0) + count
    return [(kept[k], counts[k]) for k in kept]


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
        orders, curve_rdp = kind_rdp_curve(mechanism, deadline=deadline, coarsen=True)
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
