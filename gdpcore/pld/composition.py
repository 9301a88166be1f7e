"""Composition: a repeated single step by FFT power (tilted tails where they matter), phases by linear
convolution, and the view of the arrays as dp_accounting's ``PrivacyLossDistribution``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from gdpcore._validation import check_count
from gdpcore.pld.powers import TAIL_MASS_TRUNCATION, WRAP_TAIL, _linear_convolution, _power
from gdpcore.pld.tilt import refine_tail
from gdpcore.pmf import LossPMF


def compose_loss_pmf(
    single: LossPMF,
    steps: int,
    *,
    pessimistic: bool = True,
    fft_len: int | None = None,
    tilt: float = 0.0,
    wrap_tail: float = WRAP_TAIL,
    extended: bool = True,
) -> LossPMF:
    """T-fold composition of a single-step PMF as a :class:`LossPMF` (FFT power on a Chernoff window).

    Mass outside the window (at most ``TAIL_MASS_TRUNCATION``) may wrap around inside it or be lost; adding the
    whole budget to the +inf mass keeps every delta(eps) an upper bound, as in dp_accounting.

    Round-off: the inverse FFT returns every atom with an absolute error of about the same size; a rigorous a-priori
    bound on it (:func:`_power_roundoff`) is recorded as ``roundoff``, which the curve constructions move to the safe
    side (:meth:`gdpcore.pmf.LossPMF.with_roundoff_allowance`). ``extended`` (the default) takes the forward
    transform, and the power of the coefficients that survive it, in extended precision (:func:`_power`): the bound
    is then 10-100x smaller, at 3.7x the cost of the forward transform; ``extended=False`` suits estimates (the
    engine's doubled-step comparison). The buffer spans the mass down to ``WRAP_TAIL``, so wrap-around into the
    output window is at most 1e-30.

    ``tilt`` > 0 adds an exponentially tilted composition for the upper tail (:func:`_tilted_tail`): the same
    convolution power of ``p_i e^{tilt l_i - K}`` (K its log-MGF), untilted exactly afterwards, has its round-off
    relative to the tilted law's peak, i.e. full relative precision around the loss ``T K'(tilt)``. Each atom is
    taken from whichever composition has the smaller round-off bound there (the bound becomes per atom).
    """
    steps = check_count("steps", steps)
    p = single.probs
    inf_mass = -math.expm1(steps * math.log1p(-single.infinity_mass)) if single.infinity_mass < 1 else 1.0
    if steps == 1:
        return LossPMF(single.lower_index, single.step, p.copy(), float(inf_mass), pessimistic, single.roundoff)
    lo, out, noise = _power(single, steps, fft_len=fft_len, cache=True, wrap_tail=wrap_tail, extended=extended)
    roundoff = noise + single.max_roundoff * steps
    probs = np.clip(out, 0.0, None)
    composed = LossPMF(
        lower_index=single.lower_index * steps + lo,
        step=single.step,
        probs=probs,
        infinity_mass=float(min(1.0, inf_mass + TAIL_MASS_TRUNCATION)),
        pessimistic=pessimistic,
        roundoff=roundoff,
    )
    if tilt > 0.0:
        return refine_tail(composed, single, steps, tilt, wrap_tail=wrap_tail)
    return composed


def convolve_pmfs(pmfs: list[LossPMF], *, check: Callable[[], None] | None = None) -> LossPMF:
    """Linear convolution (no wrap-around) of independent phases' composed PMFs on one lattice.

    +inf masses combine as 1 - prod(1 - m_i); round-off bounds add (each atom's error is at most the sum of the
    inputs' per-atom errors, each weighted by a total mass <= 1, plus the new transform's noise level).
    ``check`` (if given) is called before each part: the engine's deadline (:class:`gdpcore.engine.plan.Deadline`) raises there.
    """
    if not pmfs:
        raise ValueError("pmfs must name at least one PMF")
    out = pmfs[0]
    for other in pmfs[1:]:
        if check is not None:
            check()
        if other.step != out.step:
            raise ValueError("all PMFs must share one discretization")
        raw, noise = _linear_convolution(out.probs, other.probs)
        out = LossPMF(
            lower_index=out.lower_index + other.lower_index,
            step=out.step,
            probs=np.clip(raw, 0.0, None),
            infinity_mass=float(1.0 - (1.0 - out.infinity_mass) * (1.0 - other.infinity_mass)),
            pessimistic=out.pessimistic and other.pessimistic,
            roundoff=out.max_roundoff + other.max_roundoff + noise,
        )
    return out


def compose_phases(
    parts: list[tuple[LossPMF, int]], *, extended: bool = True, check: Callable[[], None] | None = None
) -> LossPMF:
    """Pessimistic composition of a schedule of phases (single step, steps) on one lattice: each phase by FFT power
    (:func:`compose_loss_pmf`, its tail budget at +inf; ``extended`` as there), then the phases by linear
    convolution. ``check`` (if given) is called before each phase and each convolution (the engine's deadline)."""
    if not parts:
        raise ValueError("parts must name at least one phase")
    composed = []
    for single, steps in parts:
        if check is not None:
            check()
        composed.append(compose_loss_pmf(single, steps, extended=extended))
    return convolve_pmfs(composed, check=check)


def to_dp_accounting_pld(remove: LossPMF, add: LossPMF | None = None):
    """Wrap :class:`LossPMF` arrays as a dp_accounting ``PrivacyLossDistribution`` (DensePLDPmf per direction)."""
    from dp_accounting.pld import pld_pmf
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    def dense(p: LossPMF):
        return pld_pmf.DensePLDPmf(p.step, p.lower_index, np.asarray(p.probs), p.infinity_mass, p.pessimistic)

    return pld_lib.PrivacyLossDistribution(dense(remove), None if add is None else dense(add))
