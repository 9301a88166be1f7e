"""Human-readable numbers for terminal reports and privacy cards (no heavy imports: used by ``gdp analyze``)."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["format_number"]


def format_number(x: Any, digits: int = 6) -> str:
    """``digits`` significant digits; "n/a" for None/NaN, "inf" for infinities."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{digits}g}"
