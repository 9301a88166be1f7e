"""Input checks shared by the public API: every rejection names the field and the offending value."""

from __future__ import annotations

import math
import numbers
import reprlib
from typing import Any, TypeVar

import numpy as np

_T = TypeVar("_T")

__all__ = [
    "MAX_REPR_CHARS",
    "Choice",
    "Constraint",
    "Count",
    "Positive",
    "Probability",
    "bounded_repr",
    "check_alpha_min",
    "check_choice",
    "check_count",
    "check_discretization",
    "check_open_unit_array",
    "check_positive",
    "check_probability",
    "check_real",
    "check_tolerance",
]

# The coarsest discretisation (step of the privacy-loss lattice) any entry point accepts: coarser steps make the
# pessimistic curve too loose to be useful, and the engine's ladder starts below it.
MAX_DISCRETIZATION = 0.1


MAX_REPR_CHARS = 200
"""How much of an offending value an error message shows (:func:`bounded_repr`)."""

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, 60, 60, 60


def bounded_repr(value: Any, limit: int = MAX_REPR_CHARS) -> str:
    """``repr(value)`` for an error message, cut to about ``limit`` characters: ``'xxxx… (30,000,000 chars)``.

    User input can be huge (a 30 MB string, a 10**100000 integer, a long list): an error names it without echoing it
    whole. Never raises (an int too long for ``repr`` or a failing ``__repr__`` is described instead)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * limit:
        return f"<int of about {int(value.bit_length() * 0.30103):,} digits>"
    if isinstance(value, str | bytes | bytearray) and len(value) > limit:
        text = repr(value[:limit])[:limit]  # repr of the head only: never builds the whole repr
        return f"{text}… ({len(value):,} {'chars' if isinstance(value, str) else 'bytes'})"
    try:
        # containers through reprlib: a few items per level, a few levels (shared or self references never expand)
        text = _REPR.repr(value) if isinstance(value, list | tuple | dict | set | frozenset) else repr(value)
    except Exception:
        return f"<{type(value).__name__}>"
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} chars)"


def _is_real_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_real(name: str, value: Any) -> float:
    """A finite real number (bools, strings and NaN/inf are rejected)."""
    if not _is_real_number(value):
        raise ValueError(f"{name} must be a real number, got {bounded_repr(value)}")
    try:
        out = float(value)
    except OverflowError:  # an int beyond the float range (10**1000)
        raise ValueError(f"{name} must be finite, got {bounded_repr(value)}") from None
    if not math.isfinite(out):
        raise ValueError(f"{name} must be finite, got {bounded_repr(value)}")
    return out


def check_positive(name: str, value: Any) -> float:
    """A finite real number > 0."""
    out = check_real(name, value)
    if out <= 0:
        raise ValueError(f"{name} must be > 0, got {bounded_repr(value)}")
    return out


def check_probability(name: str, value: Any, *, low_open: bool = True, high_open: bool = False) -> float:
    """A real number in (0, 1] by default; `low_open`/`high_open` choose which ends are excluded."""
    out = check_real(name, value)
    lo_ok = out > 0 if low_open else out >= 0
    hi_ok = out < 1 if high_open else out <= 1
    if not (lo_ok and hi_ok):
        interval = ("(" if low_open else "[") + "0, 1" + (")" if high_open else "]")
        raise ValueError(f"{name} must be in {interval}, got {bounded_repr(value)}")
    return out


def check_count(name: str, value: Any, *, minimum: int = 1) -> int:
    """An integer >= minimum. Integral floats (2000.0) are accepted; 2000.5, True and '3' are not."""
    if isinstance(value, bool) or not _is_real_number(value):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {bounded_repr(value)}")
    if isinstance(value, numbers.Integral):
        out = int(value)
    else:
        try:
            f = float(value)
        except OverflowError:
            f = math.inf
        if not math.isfinite(f) or f != math.floor(f):
            raise ValueError(f"{name} must be an integer >= {minimum}, got {bounded_repr(value)}")
        out = int(f)
    if out < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {bounded_repr(value)}")
    return out


def check_discretization(value: Any) -> float:
    """A privacy-loss lattice step in (0, ``MAX_DISCRETIZATION``]: the one rule every entry point applies."""
    out = check_positive("discretization", value)
    if out > MAX_DISCRETIZATION:
        raise ValueError(f"discretization must be in (0, {MAX_DISCRETIZATION}], got {bounded_repr(value)}")
    return out


def check_alpha_min(value: Any) -> float:
    """The smallest FPR a report certifies: in (0, 0.5) (the symmetric curve's fixed point lies at or below 0.5)."""
    out = check_probability("alpha_min", value, high_open=True)
    if out >= 0.5:
        raise ValueError(f"alpha_min must be < 0.5, got {bounded_repr(value)}")
    return out


def check_tolerance(value: Any) -> float:
    """A relative bracket width in (0, 0.5): wider than half the value is no longer a bracket anyone can use."""
    out = check_positive("tolerance", value)
    if out >= 0.5:
        raise ValueError(f"tolerance must be < 0.5 (relative), got {bounded_repr(value)}")
    return out


def check_choice(name: str, value: Any, choices: tuple[_T, ...]) -> _T:
    """One of ``choices`` (compared with ==); the error lists them."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {bounded_repr(value)}")
    return value


def check_open_unit_array(name: str, value: Any, *, allow_zero: bool = False, allow_one: bool = False) -> np.ndarray:
    """An array (or scalar) of probabilities in (0, 1); ends admitted on request. NaN is always rejected."""
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number or an array of numbers, got {bounded_repr(value)}") from None
    if arr.size and np.isnan(arr).any():
        raise ValueError(f"{name} must not contain NaN, got {bounded_repr(value)}")
    lo_bad = arr < 0 if allow_zero else arr <= 0
    hi_bad = arr > 1 if allow_one else arr >= 1
    bad = lo_bad | hi_bad
    if bad.any():
        first = arr[bad].flat[0]
        interval = ("[" if allow_zero else "(") + "0, 1" + ("]" if allow_one else ")")
        raise ValueError(f"{name} must be in {interval}, got {bounded_repr(first)}")
    return arr


# -- declarative constraints: what a mechanism parameter accepts, stated once ------------------------------------------
class Constraint:
    """What a parameter accepts: :meth:`check` validates (raising ``ValueError`` naming the field and the value) and
    returns the normalised value; :meth:`describe` states the rule in words (for CLI help and spec errors)."""

    type: type = float

    def check(self, name: str, value: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError


class Positive(Constraint):
    """A finite real number > 0."""

    type = float

    def check(self, name: str, value: Any) -> float:
        return check_positive(name, value)

    def describe(self) -> str:
        return "real > 0"


class Probability(Constraint):
    """A real number in (0, 1]."""

    type = float

    def check(self, name: str, value: Any) -> float:
        return check_probability(name, value)

    def describe(self) -> str:
        return "real in (0, 1]"


class Count(Constraint):
    """An integer >= ``minimum`` (integral floats accepted)."""

    type = int

    def __init__(self, minimum: int = 1) -> None:
        self.minimum = minimum

    def check(self, name: str, value: Any) -> int:
        return check_count(name, value, minimum=self.minimum)

    def describe(self) -> str:
        return f"integer >= {self.minimum}"


class Choice(Constraint):
    """One of a fixed tuple of strings."""

    type = str

    def __init__(self, choices: tuple[str, ...]) -> None:
        self.choices = tuple(choices)

    def check(self, name: str, value: Any) -> str:
        return check_choice(name, value, self.choices)

    def describe(self) -> str:
        return "one of " + ", ".join(self.choices)
