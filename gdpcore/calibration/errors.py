"""Named errors of attack-aware calibration, for callers that must tell the outcomes apart.

Both keep the built-in base class that was raised before they existed (``ValueError`` / ``RuntimeError``), so code
that catches those still works; new code catches the named type instead of matching message text.
"""

from __future__ import annotations

__all__ = ["CalibrationInfeasibleError", "CalibrationSearchError"]


class CalibrationInfeasibleError(ValueError):
    """The target cannot be met: by no mechanism at all (e.g. TPR <= FPR), by none in the allowed parameter range,
    or (Table 1 conversions) the converted FNR target is unattainable. The message says which and quotes the numbers.

    Malformed input (a value outside its domain, a missing or conflicting keyword) stays a plain ``ValueError``.
    """


class CalibrationSearchError(RuntimeError):
    """The bracketing search did not converge within its evaluation budget (the risk was not monotone in the
    parameter, which the theory excludes: a bug or a broken accountant, never a property of the target)."""
