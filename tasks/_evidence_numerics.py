"""PROVISIONAL stand-in for gdpcore's evidence numerics (branch h5), used only while ``gdpcore.evidence_from_scores``
/ ``gdpcore.check_evidence`` do not exist in the imported gdpcore. :mod:`tasks.evidence` prefers gdpcore's functions;
delete this module once h5 is merged.

Method ("threshold-cp"): thresholds at fixed order statistics of the non-member scores (the (k+1)-th largest for k in a
geometric ladder fixed by n_non_members alone), so each threshold's true FPR is Beta(k+1, n0-k) distributed and the
Clopper-Pearson upper bound on it is exact for continuous scores; member counts above the threshold get a
Clopper-Pearson lower bound. The 2K one-sided bounds hold simultaneously at ``confidence`` (Bonferroni). A mu-GDP
mechanism has TPR <= Phi(Phi^-1(FPR) + mu) for every test, so mu >= Phi^-1(TPR_lo) - Phi^-1(FPR_hi) at every point.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

METHOD = "threshold-cp"


def _ladder(n0: int) -> np.ndarray:
    """False-positive counts k (thresholds at the (k+1)-th largest non-member score), fixed by n0 alone."""
    top = max(0, n0 // 2 - 1)
    ks = {0, *np.unique(np.round(np.geomspace(1, max(top, 1), 24)).astype(int)).tolist()}
    return np.array(sorted(k for k in ks if k <= top), dtype=np.int64)


def _cp_upper(k: np.ndarray, n: int, a: float) -> np.ndarray:
    from scipy.stats import beta

    out = np.ones(k.shape, dtype=float)
    m = k < n
    out[m] = beta.ppf(1 - a, k[m] + 1, n - k[m])
    return out


def _cp_lower(k: np.ndarray, n: int, a: float) -> np.ndarray:
    from scipy.stats import beta

    out = np.zeros(k.shape, dtype=float)
    m = k > 0
    out[m] = beta.ppf(a, k[m], n - k[m] + 1)
    return out


def _mu_points(tpr_lo: np.ndarray, fpr_hi: np.ndarray) -> np.ndarray:
    from scipy.stats import norm

    with np.errstate(divide="ignore", invalid="ignore"):
        mu = norm.ppf(tpr_lo) - norm.ppf(fpr_hi)
    mu[(tpr_lo <= 0) | (fpr_hi >= 1) | ~np.isfinite(mu)] = 0.0
    return np.maximum(mu, 0.0)


@dataclasses.dataclass(frozen=True)
class Evidence:
    method: str
    confidence: float
    n_members: int
    n_non_members: int
    fpr: tuple[float, ...]  # empirical points
    tpr: tuple[float, ...]
    fpr_lo: tuple[float, ...]  # confidence boxes (simultaneous at `confidence`)
    fpr_hi: tuple[float, ...]
    tpr_lo: tuple[float, ...]
    tpr_hi: tuple[float, ...]
    mu_lower: float
    strongest_fpr: float | None
    detectable_mu: float  # smallest true mu (Gaussian scores) whose expected mu_lower exceeds 0 at this size

    def epsilon_lower(self, delta: float) -> float:
        best = 0.0
        for f, t in zip(self.fpr_hi, self.tpr_lo, strict=True):
            if f > 0 and t - delta > 0:
                best = max(best, math.log((t - delta) / f))
            if t < 1 and 1 - delta - f > 0:
                best = max(best, math.log((1 - delta - f) / (1 - t)))
        return best

    def detectable(self, target_mu: float) -> float:
        return detectable_mu(self.n_members, self.n_non_members, self.confidence, target_mu)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _box(n1: int, n0: int, k: np.ndarray, tp: np.ndarray, confidence: float) -> tuple[np.ndarray, ...]:
    a = (1 - confidence) / (2 * max(len(k), 1))
    fpr_hi = _cp_upper(k, n0, a)
    fpr_lo = _cp_lower(k, n0, a)
    tpr_lo = _cp_lower(tp, n1, a)
    tpr_hi = _cp_upper(tp, n1, a)
    return fpr_lo, fpr_hi, tpr_lo, tpr_hi


def detectable_mu(n1: int, n0: int, confidence: float, target_mu: float = 0.0) -> float:
    """Smallest true mu (scores N(mu, 1) vs N(0, 1)) whose expected counts give mu_lower > target_mu."""
    from scipy.stats import norm

    k = _ladder(n0)
    fpr = (k + 1) / (n0 + 1)

    def ml(mu: float) -> float:
        tp = np.round(n1 * norm.sf(norm.isf(fpr) - mu)).astype(np.int64)
        _, fhi, tlo, _ = _box(n1, n0, k, tp, confidence)
        return float(_mu_points(tlo, fhi).max(initial=0.0))

    lo, hi = max(target_mu, 0.0), max(target_mu, 0.0) + 1.0
    while ml(hi) <= target_mu:
        hi *= 2
        if hi > 100:
            return math.inf
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if ml(mid) <= target_mu else (lo, mid)
    return hi


def evidence_from_scores(member_scores: Any, non_member_scores: Any, *, confidence: float = 0.95) -> Evidence:
    mem = np.asarray(member_scores, dtype=float)
    non = np.asarray(non_member_scores, dtype=float)
    n1, n0 = len(mem), len(non)
    if n1 == 0 or n0 == 0:
        raise ValueError("need at least one member and one non-member score")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    k = _ladder(n0)
    desc = np.sort(non)[::-1]
    thr = desc[k]  # (k+1)-th largest
    mem_sorted = np.sort(mem)
    tp = (n1 - np.searchsorted(mem_sorted, thr, side="right")).astype(np.int64)
    fp = (n0 - np.searchsorted(np.sort(non), thr, side="right")).astype(np.int64)  # == k without ties
    fpr_lo, fpr_hi, tpr_lo, tpr_hi = _box(n1, n0, fp, tp, confidence)
    mus = _mu_points(tpr_lo, fpr_hi)
    best = int(np.argmax(mus)) if len(mus) else 0
    mu_lower = float(mus[best]) if len(mus) else 0.0
    return Evidence(
        method=METHOD,
        confidence=float(confidence),
        n_members=n1,
        n_non_members=n0,
        fpr=tuple((fp / n0).tolist()),
        tpr=tuple((tp / n1).tolist()),
        fpr_lo=tuple(fpr_lo.tolist()),
        fpr_hi=tuple(fpr_hi.tolist()),
        tpr_lo=tuple(tpr_lo.tolist()),
        tpr_hi=tuple(tpr_hi.tolist()),
        mu_lower=mu_lower,
        strongest_fpr=float(fp[best] / n0) if mu_lower > 0 else None,
        detectable_mu=detectable_mu(n1, n0, confidence, 0.0),
    )


@dataclasses.dataclass(frozen=True)
class EvidenceCheck:
    verdict: str  # "consistent" | "violates_claim"
    tightness: float | None  # mu_lower / certified mu
    strongest_fpr: float | None  # FPR of the point furthest above the certified curve (or the strongest point)
    certified_mu: float
    detectable_mu: float  # smallest true mu this audit's size can flag against the certified curve


def check_evidence(report: Any, evidence: Evidence) -> EvidenceCheck:
    fhi = np.asarray(evidence.fpr_hi)
    tlo = np.asarray(evidence.tpr_lo)
    cert = np.asarray([float(report.tpr(min(max(f, 0.0), 1.0))) for f in fhi]) if len(fhi) else np.zeros(0)
    margin = tlo - cert
    violates = bool(len(margin) and margin.max() > 1e-12)
    mu = float(report.mu)
    if violates:
        strongest = float(evidence.fpr[int(np.argmax(margin))])
    else:
        strongest = evidence.strongest_fpr
    return EvidenceCheck(
        verdict="violates_claim" if violates else "consistent",
        tightness=(evidence.mu_lower / mu) if mu > 0 else None,
        strongest_fpr=strongest,
        certified_mu=mu,
        detectable_mu=evidence.detectable(mu),
    )


def one_run_epsilon_lower(
    *, canaries: int, guesses: int, correct: int, delta: float, confidence: float = 0.95
) -> float:
    raise NotImplementedError("one-run audits need gdpcore.one_run_epsilon_lower (branch h5)")
