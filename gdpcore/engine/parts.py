"""Every mechanism outside the subsampled-Gaussian path as independent single steps (exact constructions)."""

from __future__ import annotations

import dataclasses

from gdpcore import kinds, pld
from gdpcore.accounting import build_pld, loss_pmfs
from gdpcore.kinds import subsampled_gaussian_phases
from gdpcore.mechanisms import Mechanism
from gdpcore.pmf import LossPMF


def generic_parts(
    mechanism: Mechanism,
    step: float,
    *,
    side: str,
    cache: dict | None = None,
    sg_single=None,
    check=None,
) -> list[tuple[LossPMF, LossPMF | None, int]]:
    """``mechanism`` as independent single steps at ``step``: [(remove PMF, add PMF or None if symmetric, count)].

    The composition tree is flattened by the kind registry (:func:`gdpcore.kinds.single_steps`). Each single step
    is an exact construction, no composition: a Poisson-subsampled Gaussian step comes from :mod:`gdpcore.pld`
    (``sg_single(sigma, q, step, side=..., direction=..., horizon=...)``: the subsampled-Gaussian path's builders and
    cache, each step built for the composition's total count, :data:`gdpcore.pld.SINGLE_STEP_TAIL`), every
    other one from its kind's dp_accounting PLD (``pld`` hook, :func:`gdpcore.accounting.build_pld`), connect-the-dots
    if ``side`` is "pessimistic", privacy buckets rounded down otherwise. All share the lattice ``step``. Optimistic
    parts carry the remove direction only (a lower bound on the remove profile is one on the mechanism's) and, for
    their buckets' Q-mass bounds (``LossPMF.bucket_q_weights``: closed form for Poisson-subsampled Gaussian steps,
    the P-masses for dp_accounting's buckets, whose losses are rounded down). The engine composes the parts with gdpcore.pld's
    round-off-bounded FFT powers.
    ``check`` (if given) is called before each single step is built (the engine's deadline).
    Raises :class:`gdpcore.kinds.UnsupportedMechanismError` when a leaf has no construction for ``side``.
    """
    if side not in ("pessimistic", "optimistic"):
        raise ValueError(f"side must be 'pessimistic' or 'optimistic', got {side!r}")
    if sg_single is None:
        sg_single = pld.single_step
    pessimistic = side == "pessimistic"
    out: list[tuple[LossPMF, LossPMF | None, int]] = []
    leaves = list(kinds.single_steps(mechanism))
    # Subsampled-Gaussian steps are built for the whole composition's length (pld.SINGLE_STEP_TAIL), per decade.
    horizon = pld.horizon_bucket(sum(count for _, count in leaves))
    for leaf, count in leaves:
        key = (leaf.content_hash, float(step), side, horizon)
        pair = None if cache is None else cache.get(key)
        if pair is None:
            if check is not None:
                check()
            phases = subsampled_gaussian_phases(leaf)
            if phases is not None and len(phases) == 1 and next(iter(phases.values())) == 1:
                ((sigma, q),) = phases
                remove = sg_single(sigma, q, step, side=side, horizon=horizon)
                add = sg_single(sigma, q, step, side=side, direction="add", horizon=horizon) if pessimistic else None
            else:
                remove, add = loss_pmfs(
                    build_pld(leaf, discretization=step, pessimistic=pessimistic), pessimistic=pessimistic
                )
                if not pessimistic:
                    # Mass at +inf on dp_accounting's optimistic side is tail truncation (the discrete Gaussian
                    # puts its truncated tail there whatever the side): dropped, which only lowers delta. Its
                    # buckets' losses are rounded down (residual >= 0), so their P-masses bound their Q-masses.
                    remove = dataclasses.replace(remove, infinity_mass=0.0, bucket_q_weights=remove.probs)
                    add = None
            pair = (remove, add)
            if cache is not None:
                if len(cache) >= _MAX_GENERIC_SINGLES:
                    cache.clear()
                cache[key] = pair
        out.append((pair[0], pair[1], count))
    return out


_MAX_GENERIC_SINGLES = 64
