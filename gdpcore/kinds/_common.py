"""Small helpers the kind families share: random draws for the contract test, the non-pure epsilon, list parameters."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

NOT_PURE = math.inf
"""The pure-DP epsilon of a kind whose delta(eps) > 0 for every eps."""


def log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def relation(rng: np.random.Generator) -> str:
    return str(rng.choice(["add_remove", "replace_one"]))


def floats_text(values: Any) -> str:
    """A list of numbers as a :class:`~gdpcore.mechanisms.FloatList` parameter's text."""
    return ",".join(repr(float(x)) for x in values)


def dpa_discretisation(step: float, pessimistic: bool) -> dict[str, Any]:
    """The keywords every dp_accounting PLD constructor here takes alike: connect-the-dots on the pessimistic side,
    privacy buckets rounded down on the optimistic side, at discretisation ``step``."""
    return {"pessimistic_estimate": pessimistic, "value_discretization_interval": step, "use_connect_dots": pessimistic}
