"""Seed 000 (Gomez et al., "(eps, delta) Considered Harmful") reporting guidance that sits next to a report's numbers.

* Rule of thumb (Sec. 4, after Fig. 4): "Any DP-SGD algorithm run with noise parameter sigma >= 2 and number of
  iterations T >= 400 will satisfy a mu-GDP guarantee with regret less than 0.01." :func:`regime_warning` says when a
  DP-SGD-type mechanism is *outside* that regime (sigma < 2 or T < 400), where a regret >= 0.01 is to be expected.
  The rule is guidance, not a certificate: inside the regime the computed regret is what counts (it exceeds 0.01 at
  sigma = 2, T = 400 for some q, docs/references.md S000), so the warning is always shown next to a computed regret,
  never instead of it.
* The curve's fixed point alpha* (f(alpha*) = alpha*; seed 000 Sec. 3, the largest regret any representation can
  have is alpha*, and seed 002 Lemma 5: R_min(1/2) = alpha*): :func:`fixed_point`. For a symmetric curve
  alpha* = (1 - advantage)/2; for mu-GDP it is Phi(-mu/2).
* R_min(pi), the minimum Bayes risk at prior pi (seed 000 Sec. 3 regret definition; seed 002 Eq. 2), is
  :func:`gdpcore.divergence.get_bayes_risk`.

Pure functions of a mechanism description or a report (duck-typed: no import of :mod:`gdpcore.report`, which calls
this module).
"""

from __future__ import annotations

import math
from typing import Any

from scipy import special

from gdpcore._validation import check_count, check_positive

__all__ = [
    "RULE_OF_THUMB_MIN_NOISE",
    "RULE_OF_THUMB_MIN_STEPS",
    "dpsgd_regime_warning",
    "fixed_point",
    "regime_warning",
]

RULE_OF_THUMB_MIN_NOISE = 2.0
"""Seed 000 Sec. 4 rule of thumb: sigma >= 2 ..."""
RULE_OF_THUMB_MIN_STEPS = 400
"""... and T >= 400 iterations give a mu-GDP regret < 0.01."""


def dpsgd_regime_warning(*, noise_multiplier: float, steps: int) -> str | None:
    """The seed 000 rule-of-thumb warning for DP-SGD with noise multiplier sigma and T steps: a sentence when
    sigma < 2 or T < 400 (outside the regime where the paper expects regret < 0.01), None inside it."""
    sigma = check_positive("noise_multiplier", noise_multiplier)
    t = check_count("steps", steps)
    reasons = []
    if sigma < RULE_OF_THUMB_MIN_NOISE:
        reasons.append(f"sigma = {sigma:g} < 2")
    if t < RULE_OF_THUMB_MIN_STEPS:
        reasons.append(f"T = {t} < 400")
    if not reasons:
        return None
    return (
        f"outside seed 000's rule of thumb (sigma >= 2 and T >= 400 give GDP regret < 0.01): {' and '.join(reasons)};"
        " mu-GDP may not describe this run completely - read the computed regret"
    )


def regime_warning(mechanism: Any) -> str | None:
    """:func:`dpsgd_regime_warning` for a mechanism description that is a DP-SGD run: one with ``noise_multiplier``,
    ``sampling_rate`` and ``steps`` fields (the subsampled Gaussian kinds: Poisson, fixed-size or truncated batches);
    None for every other description (the rule of thumb is stated for DP-SGD only)."""
    sigma = getattr(mechanism, "noise_multiplier", None)
    steps = getattr(mechanism, "steps", None)
    if sigma is None or steps is None or getattr(mechanism, "sampling_rate", None) is None:
        return None
    return dpsgd_regime_warning(noise_multiplier=sigma, steps=steps)


def fixed_point(report: Any) -> tuple[float, str]:
    """alpha* with f(alpha*) = alpha* and its label: Phi(-mu/2) ("exact") for a closed-form GDP report; the fixed
    point of the pessimistic curve otherwise ("lower": that curve lies below the true one, so it meets the diagonal
    no later). At alpha* the attack has FPR = FNR = alpha* (TPR = 1 - alpha*)."""
    if report.exact:
        return float(special.ndtr(-float(report.mu) / 2.0)), "exact"
    value = float(report.curve("pessimistic").fixed_point)
    if not math.isfinite(value):  # pragma: no cover - a curve always meets the diagonal
        raise ValueError(f"the curve has no fixed point, got {value!r}")
    return value, "lower"
