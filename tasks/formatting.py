"""Human-readable numbers for terminal reports and privacy cards (no heavy imports: used by ``gdp analyze``)."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["format_number", "json_ready", "json_text"]


def format_number(x: Any, digits: int = 6) -> str:
    """``digits`` significant digits; "n/a" for None/NaN, "inf" for infinities."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{digits}g}"


def json_ready(x: Any) -> Any:
    """The one JSON convention of every ``gdp ... --json`` output (and ``gdp sql --format json``): strict JSON
    (RFC 8259, no bare ``NaN``/``Infinity``). A number that does not exist - NaN: not computed, e.g. the optimistic
    side of a report accounted without one (the output's ``status`` says why) - is ``null``; an infinite one (a
    mechanism that is not pure DP has eps0 = inf) is the string ``"inf"`` / ``"-inf"``. NumPy scalars and arrays
    become numbers and lists; any other object its ``str``."""
    if isinstance(x, bool) or x is None or isinstance(x, str | int):
        return x
    if isinstance(x, float):
        if math.isnan(x):
            return None
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x
    if isinstance(x, dict):
        return {str(k): json_ready(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [json_ready(v) for v in x]
    tolist = getattr(x, "tolist", None)  # numpy scalars and arrays
    if callable(tolist):
        return json_ready(tolist())
    return str(x)


def json_text(x: Any, *, indent: int | None = 2) -> str:
    """``x`` as strict JSON text under the convention of :func:`json_ready` (``allow_nan=False``: a value that slips
    past it fails loudly instead of printing invalid JSON)."""
    import json

    return json.dumps(json_ready(x), indent=indent, allow_nan=False)
