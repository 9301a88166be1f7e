"""Input checks shared by the public API: every rejection names the field and the offending value."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

__all__ = [
    "check_choice",
    "check_count",
    "check_open_unit_array",
    "check_positive",
    "check_probability",
    "check_real",
]


def _is_real_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_real(name: str, value: Any) -> float:
    """A finite real number (bools, strings and NaN/inf are rejected)."""
    if not _is_real_number(value):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    out = float(value)
    if not math.isfinite(out):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return out


def check_positive(name: str, value: Any) -> float:
    """A finite real number > 0."""
    out = check_real(name, value)
    if out <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return out


def check_probability(name: str, value: Any, *, low_open: bool = True, high_open: bool = False) -> float:
    """A real number in (0, 1] by default; `low_open`/`high_open` choose which ends are excluded."""
    out = check_real(name, value)
    lo_ok = out > 0 if low_open else out >= 0
    hi_ok = out < 1 if high_open else out <= 1
    if not (lo_ok and hi_ok):
        interval = ("(" if low_open else "[") + "0, 1" + (")" if high_open else "]")
        raise ValueError(f"{name} must be in {interval}, got {value!r}")
    return out


def check_count(name: str, value: Any, *, minimum: int = 1) -> int:
    """An integer >= minimum. Integral floats (2000.0) are accepted; 2000.5, True and '3' are not."""
    if isinstance(value, bool) or not _is_real_number(value):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if isinstance(value, numbers.Integral):
        out = int(value)
    else:
        f = float(value)
        if not math.isfinite(f) or f != math.floor(f):
            raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
        out = int(f)
    if out < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return out


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def check_open_unit_array(name: str, value: Any, *, allow_zero: bool = False, allow_one: bool = False) -> np.ndarray:
    """An array (or scalar) of probabilities in (0, 1); ends admitted on request. NaN is always rejected."""
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number or an array of numbers, got {value!r}") from None
    if arr.size and np.isnan(arr).any():
        raise ValueError(f"{name} must not contain NaN, got {value!r}")
    lo_bad = arr < 0 if allow_zero else arr <= 0
    hi_bad = arr > 1 if allow_one else arr >= 1
    bad = lo_bad | hi_bad
    if bad.any():
        first = arr[bad].flat[0]
        interval = ("[" if allow_zero else "(") + "0, 1" + ("]" if allow_one else ")")
        raise ValueError(f"{name} must be in {interval}, got {first!r}")
    return arr
