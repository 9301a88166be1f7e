"""The composite kinds: ``Composed`` and ``SelfComposed`` have no hooks of their own (the registry walks them
generically), only a ``draw`` for the contract test. Registered by :mod:`gdpcore.kinds`."""

from __future__ import annotations

import dataclasses

import numpy as np

from gdpcore.kinds.registry import KindSpec, draw, get, leaf_kinds
from gdpcore.mechanisms import Composed, Mechanism, SelfComposed, SubsampledGaussian

__all__ = ["COMPOSED", "SELF_COMPOSED"]

_SLOW_IN_COMPOSITIONS = (
    "mixture_of_gaussians",
    "sampled_without_replacement_gaussian",
    "truncated_subsampled_gaussian",
)


def _draw_parts(rng: np.random.Generator, n: int) -> list[Mechanism]:
    """``n`` random leaf mechanisms of random registered kinds sharing one neighbouring relation (cheap sizes)."""
    # Kinds whose dp_accounting construction takes seconds at the engine's first step are left out of compositions.
    # User-supplied curves (input_note set; composed in tests/test_curve_inputs.py) are left out too, so that these
    # draws stay the mechanisms' own (tests/test_contract.py pins known failures by instance).
    leaves = [k for k in leaf_kinds() if k not in _SLOW_IN_COMPOSITIONS and get(k).input_note is None]
    parts: list[Mechanism] = []
    while len(parts) < n:
        m = draw(str(rng.choice(leaves)), rng)
        if isinstance(m, SubsampledGaussian):
            m = dataclasses.replace(m, steps=min(m.steps, 200))
        if not parts or m.neighbouring_relation == parts[0].neighbouring_relation:
            parts.append(m)
    return parts


COMPOSED = KindSpec(
    cls=Composed,
    summary="sequential composition of mechanisms sharing one neighbouring relation",
    composite=True,
    draw=lambda rng: Composed(mechanisms=tuple(_draw_parts(rng, int(rng.integers(2, 4))))),
)
SELF_COMPOSED = KindSpec(
    cls=SelfComposed,
    summary="count sequential runs of the same mechanism",
    composite=True,
    draw=lambda rng: SelfComposed(mechanism=_draw_parts(rng, 1)[0], count=int(rng.integers(2, 6))),
)
