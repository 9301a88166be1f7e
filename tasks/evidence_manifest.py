"""The manifest's optional ``evidence:`` block: canary scores of a membership-inference
audit of the trained model, checked against the declared mechanism.

::

    evidence:
      scores: evidence/model-v2.npz   # Parquet / CSV (columns score, is_member) or NPZ (member_scores,
                                      # non_member_scores); relative to the manifest's folder and inside it
      confidence: 0.95                # per-version confidence; the audit may raise it (family-wise control)
      synthetic: true                 # the scores are simulated, not measured on a trained model (labelled so)
      threat_model: "black-box loss-threshold attack on inserted canaries"
      description: "..."
      one_run: {canaries: 1000, guesses: 200, correct: 180}   # optional: a one-run audit (Steinke et al. 2023)

Kept apart from :mod:`tasks.registry` so that the manifest schema only gains one field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    StrictBool,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)

__all__ = ["DEFAULT_THREAT_MODEL", "EvidenceSpec", "OneRunSpec", "SCORE_SUFFIXES", "resolve_scores_path"]

SCORE_SUFFIXES = (".parquet", ".pq", ".csv", ".npz")
DEFAULT_THREAT_MODEL = "membership inference on canaries: the attacker sees one score per canary"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OneRunSpec(_Strict):
    """A one-run audit's outcome: ``canaries`` inserted with probability 1/2, ``guesses`` made, ``correct`` of them."""

    canaries: Annotated[StrictInt, Field(gt=0, le=10**9)]
    guesses: Annotated[StrictInt, Field(gt=0, le=10**9)]
    correct: Annotated[StrictInt, Field(ge=0, le=10**9)]

    @model_validator(mode="after")
    def _counts(self) -> OneRunSpec:
        if self.guesses > self.canaries:
            raise ValueError(f"guesses ({self.guesses}) exceed canaries ({self.canaries})")
        if self.correct > self.guesses:
            raise ValueError(f"correct ({self.correct}) exceeds guesses ({self.guesses})")
        return self


class EvidenceSpec(_Strict):
    scores: StrictStr
    confidence: Annotated[float, Strict(), Field(ge=0.5, lt=1, allow_inf_nan=False)] = 0.95
    synthetic: StrictBool = False
    threat_model: StrictStr = DEFAULT_THREAT_MODEL
    description: StrictStr = ""
    one_run: OneRunSpec | None = None

    @field_validator("scores")
    @classmethod
    def _suffix(cls, v: str) -> str:
        if Path(v).suffix.lower() not in SCORE_SUFFIXES:
            raise ValueError(f"{v!r} is not a {', '.join(SCORE_SUFFIXES)} file")
        return v


def resolve_scores_path(manifest: Any) -> Path:
    """The scores file of ``manifest.evidence``: relative to the manifest's folder and inside it (like ``opacus:
    {file:}``); raises ValueError naming the file otherwise."""
    ev = manifest.evidence
    base = (Path(manifest.manifest_path).parent if manifest.manifest_path else Path.cwd()).resolve()
    target = (base / ev.scores).resolve()
    if not target.is_relative_to(base):
        raise ValueError(f"scores {ev.scores!r} resolves outside the manifest's folder {base}")
    if not target.is_file():
        raise ValueError(f"scores {ev.scores!r}: no such file ({target})")
    return target
