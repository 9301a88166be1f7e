"""Audit evidence: attack results on canaries turned into *proven lower bounds*, held against certified upper bounds.

Pure numerics (no file I/O). Three sources of evidence and one verdict:

* :func:`evidence_from_scores` - attack scores on canaries that were trained on (members) and not (non-members),
  higher = more likely member, one canary per independent training run. Output: the empirical trade-off region
  (per threshold a Clopper-Pearson *upper* bound on the FPR and *lower* bound on the TPR, simultaneously valid at
  the stated confidence), the mu-GDP lower bound, epsilon lower bounds at any delta, and the power of an audit of
  this size (:meth:`ScoreEvidence.detectable_mu`).
* :func:`one_run_epsilon_lower` - many canaries in *one* training run (Steinke, Nasr & Jagielski 2023, "Privacy
  Auditing with One (1) Training Run": their main theorem for delta = 0 and its approximate-DP extension, as
  computed by the paper's own p-value procedure): an epsilon lower bound at delta from (canaries m, guesses r, correct v).
* :func:`one_run_mu_lower`, :func:`one_run_fdp_epsilon_lower`, :func:`check_one_run` - the f-DP one-run analysis
  (Mahloujifar, Melis & Chaudhuri 2024, "Auditing f-Differential Privacy in One Run", Algorithm 3, the tail bound
  with abstentions) evaluated on any trade-off curve: the Gaussian family (mu lower bound), the (eps, delta)-DP curve
  itself (eps lower bound valid for every (eps, delta)-DP algorithm), or a declared mechanism's certified curve.
* :func:`check_evidence` - the verdict against a declared mechanism's certified (pessimistic) curve, given as a
  Mechanism, a PrivacyReport, a pessimistic :class:`gdpcore.curve.SymmetricCurve` or samples of one
  (:func:`pessimistic_curve_samples`, e.g. an audit row's stored ``curve_fpr`` / ``curve_fnr``):
  ``violates_claim`` iff some empirical point lies strictly above the certified ROC.
* :func:`audit_registry` / :func:`registry_confidence` - N versions audited with a family-wise error rate <= alpha
  (Bonferroni: each version at confidence 1 - alpha / N).

Coverage method of :func:`evidence_from_scores` (order-statistic thresholds, exact Beta / Clopper-Pearson, Bonferroni
over 2K intervals). Proof sketch:

1. Thresholds are order statistics of the non-member scores at a set of K ranks fixed by ``n_non_members`` alone
   (:func:`threshold_ranks`: geometric in the number ``k`` of non-members above the threshold, 1, 2, 4, ... up to
   n/2, mirrored towards n), never by the data. The test at threshold t says "member" iff score > t (strict).
2. FPR. Let F be the non-member CDF and t = X_(r) the r-th smallest of the n non-member scores (k = n - r). For any
   F (ties and atoms included) F(X) stochastically dominates U(0, 1) and F is non-decreasing, so
   F(X_(r)) >=_st U_(r) ~ Beta(r, n - r + 1), hence FPR(t) = 1 - F(t) <=_st Beta(k + 1, n - k). Its (1 - a)
   quantile is therefore an upper confidence bound on FPR(t) at level a; it equals the one-sided Clopper-Pearson
   upper bound for k successes in n trials. Ties make it conservative, never invalid.
3. TPR. Member scores are independent of the non-member scores (separate runs), so given t the number of members
   with score > t is Binomial(n_members, TPR(t)); the Clopper-Pearson lower bound at level a is valid conditionally,
   hence unconditionally.
4. Bonferroni: a = (1 - confidence) / (2K) for each of the 2K intervals, so with probability >= confidence every
   true point (FPR(t_j), TPR(t_j)) has FPR <= FPR_hi_j and TPR >= TPR_lo_j. Every true point lies on or below the
   mechanism's ROC (post-processing), and every DP statement is monotone in (FPR, TPR), so each bound below holds
   simultaneously at the stated confidence:

   - mu-GDP implies TPR <= Phi(Phi^-1(FPR) + mu), so mu >= Phi^-1(TPR_lo) - Phi^-1(FPR_hi) at every threshold;
     ``mu_lower`` is the max over thresholds (and >= 0).
   - (eps, delta)-DP implies TPR <= e^eps FPR + delta and 1 - FPR <= e^eps (1 - TPR) + delta, so
     eps >= max(log((TPR_lo - delta) / FPR_hi), log((1 - delta - FPR_hi) / (1 - TPR_lo))); max over thresholds,
     >= 0.

Why this and not all n thresholds with a Bonferroni split over n (jax_privacy's ``Bonferroni()`` strategy) or a
held-out split: the data-independent ranks cost log(2K) ~ log(4 log2 n) in the quantile instead of log n, and keep
every score (a split spends half of them on choosing one threshold). K grows with the sample size (two thresholds per
doubling of n) but not with the data. The mirror side of the curve (thresholds at member order statistics) is not
added: the ranks already reach FPR near 1 where the FNR is small, and for the symmetric curves of add/remove
accounting it carries the same information at twice the Bonferroni cost.

Threat models are attached to every result (``threat_model``): see :data:`THREAT_MODEL_INDEPENDENT` and
:data:`THREAT_MODEL_ONE_RUN`.

Size: over 600 lines; one module because every source of evidence uses the argument checks at its top and both
verdicts (:func:`check_evidence`, :func:`check_one_run`) read the declared mechanism's curve through the same private
helpers, which a split would only move into a shared module.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy import optimize, special

__all__ = [
    "THREAT_MODEL_INDEPENDENT",
    "THREAT_MODEL_ONE_RUN",
    "EvidenceCheck",
    "OneRunEvidence",
    "RegistryAudit",
    "ScoreEvidence",
    "METHOD_ID_FDP_ONE_RUN",
    "METHOD_ID_ONE_RUN",
    "METHOD_ID_SCORES",
    "PessimisticCurveSamples",
    "audit_registry",
    "check_evidence",
    "pessimistic_curve_samples",
    "detectable_mu",
    "evidence_from_scores",
    "one_run_epsilon_lower",
    "one_run_evidence",
    "one_run_fdp_epsilon_lower",
    "one_run_mu_lower",
    "OneRunCheck",
    "check_one_run",
    "registry_confidence",
    "threshold_ranks",
]

THREAT_MODEL_INDEPENDENT = (
    "Each score comes from its own training run with one canary, included (member) or not (non-member), and the runs "
    "are independent; the attack (scoring function) was fixed before the scores were seen. Under this model the "
    "member scores are i.i.d. and independent of the i.i.d. non-member scores, which makes the Clopper-Pearson "
    "intervals valid. Many canaries scored from ONE training run are not independent trials: use the one-run "
    "analysis (one_run_epsilon_lower) for them."
)
THREAT_MODEL_ONE_RUN = (
    "One training run with m canaries, each included independently with probability 1/2 by a fair coin the attacker "
    "does not see; the attacker makes r guesses (membership or non-membership) after seeing the output and v of them "
    "are correct. Valid for any (eps, delta)-DP training algorithm under add/remove of one canary (Steinke, Nasr & "
    "Jagielski 2023, main theorem and its approximate-DP extension); it bounds (eps, delta), not the full trade-off curve."
)
CONSISTENT_TEXT = (
    "consistent: no empirical point lies above the certified (pessimistic) ROC of the declared mechanism at this "
    "confidence. This is no evidence of a violation; it is not a proof of privacy (a weak attack or a small audit "
    "finds nothing)."
)
VIOLATION_TEXT = (
    "violates_claim: at the stated confidence some empirical point (FPR upper bound, TPR lower bound) lies strictly "
    "above the certified (pessimistic) ROC of the declared mechanism: the mechanism as run is less private than "
    "declared (or the threat model of the evidence does not hold)."
)
_METHOD_SCORES = "order-statistic thresholds; exact Beta (Clopper-Pearson) intervals; Bonferroni over 2K intervals"
_METHOD_ONE_RUN = "one-run audit (Steinke, Nasr & Jagielski 2023, with delta)"
_METHOD_FDP_ONE_RUN = "one-run f-DP audit (Mahloujifar, Melis & Chaudhuri 2024) on the certified pessimistic curve"
METHOD_ID_SCORES = "cp-orderstat-bonferroni"
"""Short id of :func:`evidence_from_scores`' method (for tags and tables; ``method`` is the long text)."""
METHOD_ID_ONE_RUN = "one-run-steinke2023"
"""Short id of :func:`one_run_epsilon_lower` / :func:`one_run_evidence`."""
METHOD_ID_FDP_ONE_RUN = "fdp-one-run-mahloujifar2024"
"""Short id of :func:`check_one_run` (and :func:`one_run_mu_lower`, :func:`one_run_fdp_epsilon_lower`)."""
BASES = ("certified", "estimate")
ESTIMATE_TEXT = (
    " The curve compared with is only an ESTIMATE of the mechanism's (not a certified upper bound on its ROC): the "
    "verdict compares the attack with an estimate, not with a proven bound."
)
_MU_MAX = 40.0
_ROUNDOFF_FNR = 1e-12


# -- validation --------------------------------------------------------------------------------------------------------
def _scores(name: str, values: Any) -> np.ndarray:
    if isinstance(values, (str, bytes)):
        raise ValueError(f"{name} must be a sequence of finite numbers, got {values!r}")
    try:
        arr = np.asarray(values)
    except Exception as exc:  # ragged nested sequences and the like
        raise ValueError(f"{name} must be a sequence of finite numbers, got {values!r}") from exc
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise ValueError(f"{name} must be a sequence of finite numbers, got dtype {arr.dtype} ({_short(values)})")
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    arr = arr.astype(np.float64)
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty, got {_short(values)}")
    bad = ~np.isfinite(arr)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} must be finite, got {arr[i]!r} at index {i}")
    return arr


def _short(values: Any) -> str:
    text = repr(values)
    return text if len(text) <= 80 else text[:77] + "..."


def _confidence(value: Any) -> float:
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise ValueError(f"confidence must be a real number in (0, 1), got {value!r}")
    out = float(value)
    if not (0.0 < out < 1.0):
        raise ValueError(f"confidence must be in (0, 1), got {value!r}")
    return out


def _delta(value: Any, *, allow_zero: bool = True) -> float:
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise ValueError(f"delta must be a real number in [0, 1), got {value!r}")
    out = float(value)
    low_ok = out >= 0.0 if allow_zero else out > 0.0
    if not (low_ok and out < 1.0):
        raise ValueError(f"delta must be in {'[' if allow_zero else '('}0, 1), got {value!r}")
    return out


def _count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ValueError(f"{name} must be an integer, got {value!r}")
    out = int(value)
    if out < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return out


def _finite_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


# -- thresholds and intervals ------------------------------------------------------------------------------------------
def threshold_ranks(n_non_members: int) -> np.ndarray:
    """The data-independent numbers k of non-members strictly above each threshold (sorted, distinct, in [0, n-1]).

    k = 1, 2, 4, ... while k <= n / 2, then n - 1 - k for the same k (thresholds towards FPR 1, where the FNR is
    small), plus k = 0 (the largest non-member score). K is about 2 log2(n): it grows with the sample size only.
    """
    n = _count("n_non_members", n_non_members, 1)
    ks = [0]
    k = 1
    while k <= n / 2:
        ks.append(k)
        k *= 2
    low = np.array(ks, dtype=np.int64)
    out = np.unique(np.concatenate([low, n - 1 - low]))
    return out[(out >= 0) & (out <= n - 1)]


def _fpr_upper(k: np.ndarray, n: int, a: float) -> np.ndarray:
    """Upper (1 - a) bound on 1 - F(X_(n-k)): the (1 - a) quantile of Beta(k + 1, n - k)."""
    return special.betaincinv(k + 1.0, n - k, 1.0 - a)


def _tpr_lower(tp: np.ndarray, n: int, a: float) -> np.ndarray:
    """One-sided Clopper-Pearson lower bound at level a for tp successes of n (0 where tp = 0); tp may be real."""
    tp = np.asarray(tp, dtype=float)
    out = np.zeros_like(tp)
    pos = tp > 0
    out[pos] = special.betaincinv(tp[pos], n - tp[pos] + 1.0, a)
    return out


def _mu_points(fpr_hi: np.ndarray, tpr_lo: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        mu = special.ndtri(tpr_lo) - special.ndtri(fpr_hi)
    return np.where(np.isnan(mu), -np.inf, mu)


def _epsilon_points(fpr_hi: np.ndarray, tpr_lo: np.ndarray, delta: float) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        upper = np.where(tpr_lo > delta, np.log(np.maximum(tpr_lo - delta, 0.0)) - np.log(fpr_hi), -np.inf)
        tnr_lo = 1.0 - delta - fpr_hi
        lower = np.where(tnr_lo > 0, np.log(np.maximum(tnr_lo, 0.0)) - np.log1p(-tpr_lo), -np.inf)
    out = np.maximum(upper, lower)
    return np.where(np.isnan(out), -np.inf, out)


# -- evidence from scores ----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, eq=False)
class ScoreEvidence:
    """Lower bounds from attack scores (:func:`evidence_from_scores`); every bound is a *lower* bound on the privacy
    loss of the audited mechanism, simultaneously valid at ``confidence`` under ``threat_model``.

    ``thresholds[j]``, ``fpr_upper[j]``, ``tpr_lower[j]``: the empirical trade-off region (test "score >
    thresholds[j]"); ``fpr_upper`` are upper and ``tpr_lower`` lower confidence bounds.
    """

    mu_lower: float
    confidence: float
    method: str
    n_members: int
    n_non_members: int
    thresholds: np.ndarray = dataclasses.field(repr=False)
    fpr_upper: np.ndarray = dataclasses.field(repr=False)
    tpr_lower: np.ndarray = dataclasses.field(repr=False)
    alpha_per_interval: float
    threat_model: str = dataclasses.field(default=THREAT_MODEL_INDEPENDENT, repr=False)
    bound: str = "lower"
    method_id: str = METHOD_ID_SCORES

    @property
    def mu_lower_fpr(self) -> float | None:
        """The FPR upper bound at the threshold giving ``mu_lower`` (None when mu_lower = 0 from no threshold)."""
        mu = _mu_points(self.fpr_upper, self.tpr_lower)
        j = int(np.argmax(mu))
        return float(self.fpr_upper[j]) if mu[j] > 0 else None

    def epsilon_lower(self, delta: float) -> float:
        """Largest eps such that, at ``confidence``, the mechanism is not (eps', delta)-DP for any eps' < eps; >= 0."""
        d = _delta(delta)
        eps = _epsilon_points(self.fpr_upper, self.tpr_lower, d)
        return max(0.0, float(np.max(eps))) if eps.size else 0.0

    def detectable_mu(self, claim: float = 0.0) -> float:
        """Power of an audit of this size: the smallest true mu whose *median* mu_lower (Gaussian scores N(mu, 1) vs
        N(0, 1), expected counts) exceeds ``claim`` (:func:`detectable_mu`)."""
        return detectable_mu(
            n_members=self.n_members, n_non_members=self.n_non_members, confidence=self.confidence, claim=claim
        )

    def to_dict(self, *, deltas: Sequence[float] = (1e-5,)) -> dict[str, Any]:
        """JSON-ready (no NaN or inf: None instead)."""
        return {
            "bound": self.bound,
            "method": self.method,
            "method_id": self.method_id,
            "confidence": self.confidence,
            "n_members": self.n_members,
            "n_non_members": self.n_non_members,
            "alpha_per_interval": self.alpha_per_interval,
            "mu": {"value": self.mu_lower, "bound": "lower", "at_fpr": self.mu_lower_fpr},
            "epsilon": [{"delta": float(d), "value": self.epsilon_lower(d), "bound": "lower"} for d in deltas],
            "tradeoff_region": [
                {"threshold": float(t), "fpr": float(f), "fpr_bound": "upper", "tpr": float(p), "tpr_bound": "lower"}
                for t, f, p in zip(self.thresholds, self.fpr_upper, self.tpr_lower, strict=True)
            ],
            "threat_model": self.threat_model,
        }


def evidence_from_scores(member_scores: Any, non_member_scores: Any, *, confidence: float = 0.95) -> ScoreEvidence:
    """Lower bounds (mu-GDP, eps at any delta, the empirical trade-off region) from membership scores of canaries.

    Args:
        member_scores: scores of canaries that were trained on; higher = more likely member.
        non_member_scores: scores of canaries that were not.
        confidence: simultaneous coverage of every reported bound (default 0.95).

    The coverage method and its proof are in the module docstring; the threat model is in the result.
    """
    conf = _confidence(confidence)
    members = _scores("member_scores", member_scores)
    non = _scores("non_member_scores", non_member_scores)
    n1, n0 = members.size, non.size
    ks = threshold_ranks(n0)
    a = (1.0 - conf) / (2 * ks.size)
    order = n0 - 1 - ks  # 0-based index of the threshold in ascending order
    thresholds = np.partition(non, order)[order] if n0 > 1 else non.copy()
    members_sorted = np.sort(members)
    tp = n1 - np.searchsorted(members_sorted, thresholds, side="right")  # members strictly above
    fpr_hi = _fpr_upper(ks.astype(float), n0, a)
    tpr_lo = _tpr_lower(tp.astype(float), n1, a)
    mu = _mu_points(fpr_hi, tpr_lo)
    mu_lower = max(0.0, float(np.max(mu)))
    return ScoreEvidence(
        mu_lower=mu_lower,
        confidence=conf,
        method=_METHOD_SCORES,
        n_members=n1,
        n_non_members=n0,
        thresholds=thresholds,
        fpr_upper=fpr_hi,
        tpr_lower=tpr_lo,
        alpha_per_interval=a,
    )


def _expected_mu_lower(mu: float, n1: int, n0: int, conf: float) -> float:
    ks = threshold_ranks(n0).astype(float)
    a = (1.0 - conf) / (2 * ks.size)
    fpr_med = special.betaincinv(ks + 1.0, n0 - ks, 0.5)  # median true FPR at the order-statistic threshold
    tp = n1 * special.ndtr(mu + special.ndtri(fpr_med))
    return float(np.max(_mu_points(_fpr_upper(ks, n0, a), _tpr_lower(tp, n1, a))))


def detectable_mu(*, n_members: int, n_non_members: int, confidence: float = 0.95, claim: float = 0.0) -> float:
    """The smallest true mu that an audit of these sizes flags (median mu_lower > ``claim``), deterministically.

    Model: Gaussian scores N(mu, 1) (members) vs N(0, 1) (non-members), the optimal attack for a mu-GDP mechanism.
    The median of each order-statistic FPR and the expected member counts are plugged into the bounds of
    :func:`evidence_from_scores`; the result is the mu at which that plug-in mu_lower equals ``claim``. "An audit of
    this size can only flag a model whose true mu exceeds this."
    """
    n1 = _count("n_members", n_members, 1)
    n0 = _count("n_non_members", n_non_members, 1)
    conf = _confidence(confidence)
    c = float(claim)
    if not math.isfinite(c) or c < 0:
        raise ValueError(f"claim must be a finite number >= 0, got {claim!r}")

    def gap(mu: float) -> float:
        return _expected_mu_lower(mu, n1, n0, conf) - c

    if gap(_MU_MAX) <= 0:
        return math.inf
    if gap(c) > 0:
        return c
    return float(optimize.brentq(gap, c, _MU_MAX, xtol=1e-6))


# -- one-run audit -----------------------------------------------------------------------------------------------------
def _one_run_p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """Steinke, Nasr & Jagielski 2023: if the training algorithm is (eps, delta)-DP, P[W >= v] is at most
    f(v) + 2 m delta max_{1<=i<=v} (f(v - i) - f(v)) / i, with f(u) = P[Binomial(r, e^eps / (1 + e^eps)) >= u]
    (their main theorem for delta = 0; the delta term is their approximate-DP extension). For i beyond the binomial's lower
    tail the maximand is bounded by (1 - f(v)) / i0 (f <= 1), which can only raise the p-value (conservative)."""
    p = special.expit(eps)
    f_v = float(special.bdtrc(v - 1, r, p)) if v > 0 else 1.0
    if delta == 0.0 or v == 0:
        return min(1.0, f_v)
    sd = math.sqrt(r * p * (1 - p))
    u_low = max(0, math.floor(r * p - 40.0 * sd - 40.0))  # f(u) = 1 - (< 1e-300) below u_low
    i0 = max(1, v - u_low)
    i = np.arange(1, min(v, i0) + 1)
    u = v - i - 1  # f(v - i) = P[X > v - i - 1]; 1 where v - i - 1 < 0
    f_u = np.where(u >= 0, special.bdtrc(np.maximum(u, 0), r, p), 1.0)
    term = float(np.max((f_u - f_v) / i))
    if i0 < v:
        term = max(term, (1.0 - f_v) / (i0 + 1))
    return min(1.0, f_v + 2.0 * m * delta * term)


def one_run_epsilon_lower(
    *, canaries: int, guesses: int, correct: int, delta: float, confidence: float = 0.95
) -> float:
    """Epsilon lower bound at ``delta`` from a one-run audit: m ``canaries`` (each included w.p. 1/2), r ``guesses``,
    v ``correct`` (Steinke, Nasr & Jagielski 2023). At ``confidence`` the training algorithm is not
    (eps, delta)-DP for any eps below the returned value (0 when nothing is shown).

    Valid although eps is searched: the rejection sets {W >= v} at each eps are upper sets in W, so the union over
    eps >= eps_true is one such set whose probability the theorem bounds at some eps >= eps_true.
    """
    m, r, v = _one_run_counts(canaries, guesses, correct)
    d = _delta(delta)
    conf = _confidence(confidence)
    beta = 1.0 - conf
    if v == 0:
        return 0.0
    # delta = 0 in closed form: f(v) = I_p(v, r - v + 1) <= beta  <=>  p <= betaincinv(v, r - v + 1, beta).
    p0 = float(special.betaincinv(v, r - v + 1.0, beta))
    eps0 = float(special.logit(p0)) if p0 < 1 else math.inf
    if eps0 <= 0:
        return 0.0
    if d == 0.0:
        return eps0
    if _one_run_p_value(m, r, v, 0.0, d) > beta:
        return 0.0
    lo, hi = 0.0, eps0  # the delta term only raises the p-value, so eps_lower(delta) <= eps_lower(0)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if _one_run_p_value(m, r, v, mid, d) <= beta:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-9:
            break
    return lo


@dataclasses.dataclass(frozen=True, eq=False)
class OneRunEvidence:
    """A one-run audit's epsilon lower bound with its inputs (:func:`one_run_evidence`)."""

    epsilon_lower: float
    delta: float
    canaries: int
    guesses: int
    correct: int
    confidence: float
    method: str = _METHOD_ONE_RUN
    threat_model: str = dataclasses.field(default=THREAT_MODEL_ONE_RUN, repr=False)
    bound: str = "lower"
    method_id: str = METHOD_ID_ONE_RUN

    def to_dict(self) -> dict[str, Any]:
        return {
            "bound": self.bound,
            "method": self.method,
            "method_id": self.method_id,
            "confidence": self.confidence,
            "canaries": self.canaries,
            "guesses": self.guesses,
            "correct": self.correct,
            "epsilon": {"delta": self.delta, "value": _finite_or_none(self.epsilon_lower), "bound": "lower"},
            "threat_model": self.threat_model,
        }


def one_run_evidence(
    *, canaries: int, guesses: int, correct: int, delta: float, confidence: float = 0.95
) -> OneRunEvidence:
    """:func:`one_run_epsilon_lower` as a labelled, JSON-ready result."""
    eps = one_run_epsilon_lower(canaries=canaries, guesses=guesses, correct=correct, delta=delta, confidence=confidence)
    return OneRunEvidence(
        epsilon_lower=eps,
        delta=float(delta),
        canaries=int(canaries),
        guesses=int(guesses),
        correct=int(correct),
        confidence=float(confidence),
    )


# -- one-run audit of an f-DP curve (Mahloujifar, Melis & Chaudhuri 2024) ----------------------------------------------
def _fdp_rejects(roc_inverse: Any, m: int, r: int, v: int, beta: float) -> bool:
    """Mahloujifar, Melis & Chaudhuri 2024, "Auditing f-Differential Privacy in One Run", the tail bound with
    abstentions (their Algorithm 3): start from the masses a = beta v / m (correct) and b = beta (r - v) / m (wrong)
    and walk i = v - 1, ..., 0, raising b to at least the least FPR compatible with TPR a under the claimed curve
    (``roc_inverse``) and moving a by i / (r - i) of the increase; the claim is rejected at level beta iff the final
    a + b exceeds r / m. ``roc_inverse(x)`` is the inverse ROC, the smallest FPR at which the curve allows TPR x
    (for a symmetric trade-off curve f, f(1 - x))."""
    if v == 0 or r == 0:
        return False
    a = beta * v / m
    b = beta * (r - v) / m
    for i in range(v - 1, -1, -1):
        b_new = max(b, float(roc_inverse(min(a, 1.0))))
        if b_new == b:  # neither a nor b can move again
            break
        a = min(1.0, a + i / (r - i) * (b_new - b)) if r > i else a
        b = b_new
    return a + b > r / m


def _one_run_counts(canaries: Any, guesses: Any, correct: Any) -> tuple[int, int, int]:
    m = _count("canaries", canaries, 1)
    r = _count("guesses", guesses, 0)
    v = _count("correct", correct, 0)
    if r > m:
        raise ValueError(f"guesses must be <= canaries ({m}), got {guesses!r}")
    if v > r:
        raise ValueError(f"correct must be <= guesses ({r}), got {correct!r}")
    return m, r, v


def _largest_rejected(
    roc_inverse_at: Callable[[float], Any], m: int, r: int, v: int, beta: float, *, limit: float
) -> float:
    """The largest parameter x >= 0 whose curve ``roc_inverse_at(x)`` the one-run counts reject at level ``beta``
    (0 if none; rejection is monotone in x): doubling from 1 (stopping once past ``limit``), then bisection to 1e-7."""
    if not _fdp_rejects(roc_inverse_at(0.0), m, r, v, beta):
        return 0.0
    lo, hi = 0.0, 1.0
    while _fdp_rejects(roc_inverse_at(hi), m, r, v, beta):
        lo, hi = hi, 2 * hi
        if hi > limit:
            return lo
    while hi - lo > 1e-7:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _fdp_rejects(roc_inverse_at(mid), m, r, v, beta) else (lo, mid)
    return lo


def _gaussian_roc_inverse(mu: float) -> Any:
    return lambda x: float(special.ndtr(special.ndtri(x) - mu)) if x > 0 else 0.0


def one_run_mu_lower(*, canaries: int, guesses: int, correct: int, confidence: float = 0.95) -> float:
    """mu-GDP lower bound from a one-run audit (f-DP analysis of Mahloujifar et al. 2024 with f = G_mu): the largest
    mu whose Gaussian trade-off curve the counts reject at ``confidence`` (0 if none). Rejection is monotone in mu
    (a larger mu allows every TPR at a smaller FPR), so the sup is found by bisection; the union-over-mu argument
    of :func:`one_run_epsilon_lower` applies."""
    m, r, v = _one_run_counts(canaries, guesses, correct)
    beta = 1.0 - _confidence(confidence)
    return _largest_rejected(_gaussian_roc_inverse, m, r, v, beta, limit=_MU_MAX)


def one_run_fdp_epsilon_lower(
    *, canaries: int, guesses: int, correct: int, delta: float, confidence: float = 0.95
) -> float:
    """Epsilon lower bound at ``delta`` from a one-run audit via the f-DP analysis (Mahloujifar et al. 2024) of the
    (eps, delta)-DP trade-off curve itself, f(a) = max(0, 1 - delta - e^eps a, e^-eps (1 - delta - a)): valid for
    every (eps, delta)-DP algorithm (jax_privacy's ``epsilon_one_run_fdp`` tests the Gaussian mechanism's curve at
    (eps, delta) instead, a narrower family)."""
    m, r, v = _one_run_counts(canaries, guesses, correct)
    d = _delta(delta)
    beta = 1.0 - _confidence(confidence)

    def inverse(eps: float) -> Any:
        e = math.exp(eps)
        return lambda x: max(0.0, (x - d) / e, 1.0 - d - e * (1.0 - x))

    return _largest_rejected(inverse, m, r, v, beta, limit=4 * _MU_MAX)


@dataclasses.dataclass(frozen=True, eq=False)
class OneRunCheck:
    """A one-run audit held against a declared mechanism's certified curve (:func:`check_one_run`)."""

    verdict: str
    canaries: int
    guesses: int
    correct: int
    confidence: float
    mu_lower: float
    certified_mu: float
    method: str
    explanation: str
    threat_model: str = dataclasses.field(default=THREAT_MODEL_ONE_RUN, repr=False)
    method_id: str = METHOD_ID_FDP_ONE_RUN
    basis: str = "certified"

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "basis": self.basis,
            "canaries": self.canaries,
            "guesses": self.guesses,
            "correct": self.correct,
            "confidence": self.confidence,
            "mu_lower": {"value": self.mu_lower, "bound": "lower"},
            "certified_mu": {"value": _finite_or_none(self.certified_mu), "bound": "upper"},
            "method": self.method,
            "method_id": self.method_id,
            "explanation": self.explanation,
            "threat_model": self.threat_model,
        }


def check_one_run(
    certified: Any,
    *,
    canaries: int,
    guesses: int,
    correct: int,
    confidence: float = 0.95,
    certified_mu: float | None = None,
    basis: str = "certified",
) -> OneRunCheck:
    """Verdict of a one-run audit against the declared mechanism's certified (pessimistic) trade-off curve, with the
    f-DP one-run analysis of Mahloujifar, Melis & Chaudhuri 2024 evaluated on that curve (not only the Gaussian
    family). ``violates_claim`` iff the counts reject the certified curve at ``confidence``; if the mechanism
    satisfies its certified curve this happens with probability <= 1 - confidence.

    ``certified``, ``certified_mu`` and ``basis`` as for :func:`check_evidence`."""
    m, r, v = _one_run_counts(canaries, guesses, correct)
    conf = _confidence(confidence)
    fnr_lower, mu_cert = _certified_curve(certified, certified_mu)
    b = _basis(basis)

    def inverse(x: float) -> float:
        return float(fnr_lower(np.array([min(max(1.0 - x, 0.0), 1.0)]))[0])

    violates = _fdp_rejects(inverse, m, r, v, 1.0 - conf)
    return OneRunCheck(
        verdict="violates_claim" if violates else "consistent",
        canaries=m,
        guesses=r,
        correct=v,
        confidence=conf,
        mu_lower=one_run_mu_lower(canaries=m, guesses=r, correct=v, confidence=conf),
        certified_mu=mu_cert,
        method=_METHOD_FDP_ONE_RUN,
        explanation=(VIOLATION_TEXT if violates else CONSISTENT_TEXT) + (ESTIMATE_TEXT if b == "estimate" else ""),
        basis=b,
    )


# -- certified curves: what a verdict is held against ------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, eq=False)
class PessimisticCurveSamples:
    """Samples ``(fpr[i], fnr[i])`` of a certified *pessimistic* trade-off curve f_p (f_p <= the mechanism's true
    trade-off curve f everywhere, i.e. 1 - f_p >= its ROC), with its certified ``mu`` - e.g. the ``curve_fpr`` /
    ``curve_fnr`` an audit row stores (``PrivacyReport.fnr`` of the pessimistic curve at fixed FPRs).

    Between samples the curve is *not* interpolated linearly: f_p is convex, so its chord lies on or *above* it; a
    chord would overstate the FNR, understate the certified TPR and could declare false violations. Instead
    :meth:`fnr_lower` is a lower bound on f_p at every FPR that uses only the samples and convexity (three-chord
    lemma): on [a_i, a_i+1], f_p(x) >= the secant through samples i-1, i extended to the right, and >= the secant
    through samples i+1, i+2 extended to the left (which is >= f_p(a_i+1), monotonicity); beyond the last sample,
    >= max(0, the last secant extended). So 1 - fnr_lower is an upper bound on the ROC - looser than the curve itself
    (less power near a vertex, never a false alarm). Exact at the samples; elsewhere lowered by 1e-12 for the
    round-off of the extrapolated secants.
    """

    fpr: np.ndarray
    fnr: np.ndarray
    mu: float

    def fnr_lower(self, fpr: Any) -> np.ndarray:
        """A lower bound on the pessimistic curve's FNR at each FPR (see the class docstring)."""
        a, f = self.fpr, self.fnr
        x = np.atleast_1d(np.asarray(fpr, dtype=float))
        n = a.size
        slope = np.diff(f) / np.diff(a)  # slope[i]: secant through samples i, i + 1
        i = np.searchsorted(a, x, side="right") - 1  # x in [a_i, a_i+1); -1 below the first sample
        out = np.zeros_like(x)
        with np.errstate(invalid="ignore"):
            # secant i-1, i extended to the right of a_i
            ok = (i >= 1) & (i <= n - 1)
            ii = np.clip(i, 1, n - 1)
            out = np.where(ok, np.maximum(out, f[ii] + slope[ii - 1] * (x - a[ii])), out)
            # secant i+1, i+2 extended to the left of a_i+1
            ok = i + 2 <= n - 1
            jj = np.clip(i + 1, 0, n - 2)
            out = np.where(ok, np.maximum(out, f[jj] + slope[jj] * (x - a[jj])), out)
            # monotonicity: f_p(x) >= f_p(a_i+1)
            ok = i + 1 <= n - 1
            out = np.where(ok, np.maximum(out, f[np.clip(i + 1, 0, n - 1)]), out)
        out = out - _ROUNDOFF_FNR  # the extrapolated secants' round-off (~1e-16), allowed for in the safe direction
        out = np.where(x == a[np.clip(i, 0, n - 1)], f[np.clip(i, 0, n - 1)], out)  # exact at the samples
        return np.clip(out, 0.0, 1.0)


def pessimistic_curve_samples(fpr: Any, fnr: Any, *, mu: float) -> PessimisticCurveSamples:
    """:class:`PessimisticCurveSamples` from FPRs (strictly increasing, in [0, 1], at least 2) and the pessimistic
    curve's FNR at them (in [0, 1], non-increasing, convex: each sample on or below its neighbours' chord, up to
    1e-9 of round-off).

    The caller vouches that the samples are read off a *pessimistic* (lower-bound) curve: an optimistic curve is also
    convex and cannot be told apart, and a verdict against it would be invalid (false alarms)."""
    a = np.asarray(fpr, dtype=float).ravel()
    f = np.asarray(fnr, dtype=float).ravel()
    if a.size < 2 or a.size != f.size:
        raise ValueError(f"need at least 2 (fpr, fnr) samples of equal length, got {a.size} and {f.size}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(f))):
        raise ValueError("curve samples must be finite")
    if a[0] < 0 or a[-1] > 1 or np.any(np.diff(a) <= 0):
        raise ValueError("curve fpr must be strictly increasing in [0, 1]")
    if np.any(f < 0) or np.any(f > 1) or np.any(np.diff(f) > 1e-12):
        raise ValueError("curve fnr must be non-increasing in [0, 1]")
    # Convexity: every inner sample on or below the chord of its neighbours, up to round-off of the stored values
    # (an absolute 1e-9 in FNR: slopes of samples 1e-10 apart carry round-off of ~1e-6, so slopes are not compared).
    w = (a[1:-1] - a[:-2]) / (a[2:] - a[:-2])
    if np.any(f[1:-1] > (1 - w) * f[:-2] + w * f[2:] + 1e-9):
        raise ValueError("curve samples are not convex: not read off a trade-off curve")
    m = float(mu)
    if math.isnan(m) or m < 0:
        raise ValueError(f"mu must be >= 0 (inf allowed), got {mu!r}")
    return PessimisticCurveSamples(fpr=a, fnr=f, mu=m)


def _basis(basis: str) -> str:
    if basis not in BASES:
        raise ValueError(f"basis must be one of {BASES}, got {basis!r}")
    return basis


def _certified_curve(certified: Any, certified_mu: float | None) -> tuple[Any, float]:
    """(FNR lower bound of the certified pessimistic curve as a function of FPR arrays, certified mu)."""
    from gdpcore.curve import SymmetricCurve
    from gdpcore.mechanisms import Mechanism
    from gdpcore.report import DEFAULT_ALPHA_MIN, PrivacyReport, analyze

    if isinstance(certified, Mechanism):
        certified = analyze(certified)
    if isinstance(certified, PrivacyReport):
        report = certified
        mu = float(report.mu) if certified_mu is None else float(certified_mu)
        return (lambda a: np.asarray(report.fnr(a), dtype=float)), mu  # side="pessimistic" by default
    if isinstance(certified, SymmetricCurve):
        # Every SymmetricCurve gdpcore builds for a report's default side is its pessimistic one; the caller vouches
        # for curves built directly (an optimistic twin would give false alarms).
        curve = certified
        mu = curve.mu(alpha_min=DEFAULT_ALPHA_MIN)[0] if certified_mu is None else float(certified_mu)
        return (lambda a: np.asarray(curve.fnr(a), dtype=float)), float(mu)
    if isinstance(certified, PessimisticCurveSamples):
        return certified.fnr_lower, certified.mu if certified_mu is None else float(certified_mu)
    raise ValueError(
        "certified must be a gdpcore Mechanism, PrivacyReport, pessimistic SymmetricCurve or PessimisticCurveSamples, "
        f"got {certified!r}"
    )


# -- verdicts ----------------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, eq=False)
class EvidenceCheck:
    """Evidence held against a declared mechanism's certified curve (:func:`check_evidence`)."""

    verdict: str
    tightness: float | None
    """mu_lower / certified mu (the audit's lower bound over the accountant's upper bound); None if mu is 0 or inf."""
    mu_lower: float
    certified_mu: float
    strongest_fpr: float
    """FPR upper bound of the point where the evidence comes closest to the certified ROC (``consistent``) or goes
    furthest above it (``violates_claim``), measured in probit coordinates: the max over points of
    ``probit_margin``. NaN when no point has a positive TPR lower bound."""
    margin: float
    """max over points of TPR_lo - certified TPR upper bound at FPR_hi: > 0 iff ``violates_claim``."""
    confidence: float
    method: str
    n_members: int
    n_non_members: int
    explanation: str
    probit_margin: float = -math.inf
    """max over points of Phi^-1(TPR_lo) - Phi^-1(certified TPR at FPR_hi): same sign as ``margin`` (Phi^-1 is
    increasing), on the scale of mu (a Gaussian curve is the line Phi^-1(TPR) = Phi^-1(FPR) + mu). The plain
    TPR gap shrinks to 0 at FPR -> 1 for every curve and every attack, so its argmax says nothing for a consistent
    verdict; the probit gap does not."""
    fpr_upper: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0), repr=False)
    """The empirical points: FPR upper bounds (``ScoreEvidence.fpr_upper``)."""
    tpr_lower: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0), repr=False)
    """The empirical points: TPR lower bounds (``ScoreEvidence.tpr_lower``)."""
    tpr_upper: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0), repr=False)
    """Certified TPR upper bound at each ``fpr_upper`` (1 - the pessimistic curve's FNR lower bound)."""
    method_id: str = METHOD_ID_SCORES
    basis: str = "certified"
    """``certified``: the curve is a proven upper bound on the ROC; ``estimate``: only an estimate of it (the verdict
    then compares the attack with an estimate; stated in ``explanation``)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "basis": self.basis,
            "tightness": None if self.tightness is None else _finite_or_none(self.tightness),
            "mu_lower": {"value": self.mu_lower, "bound": "lower"},
            "certified_mu": {"value": _finite_or_none(self.certified_mu), "bound": "upper"},
            "strongest_fpr": _finite_or_none(self.strongest_fpr),
            "margin": _finite_or_none(self.margin),
            "probit_margin": _finite_or_none(self.probit_margin),
            "points": [
                {
                    "fpr": float(f),
                    "fpr_bound": "upper",
                    "tpr": float(t),
                    "tpr_bound": "lower",
                    "certified_tpr": float(c),
                }
                for f, t, c in zip(self.fpr_upper, self.tpr_lower, self.tpr_upper, strict=True)
            ],
            "confidence": self.confidence,
            "method": self.method,
            "method_id": self.method_id,
            "n_members": self.n_members,
            "n_non_members": self.n_non_members,
            "explanation": self.explanation,
        }


def check_evidence(
    certified: Any, evidence: ScoreEvidence, *, certified_mu: float | None = None, basis: str = "certified"
) -> EvidenceCheck:
    """Verdict of score evidence against the declared mechanism's certified *upper* (pessimistic) ROC.

    ``certified`` is the declared mechanism's certified curve, as any of: a gdpcore ``Mechanism`` (analysed here with
    the defaults), a ``PrivacyReport`` (its pessimistic side), a *pessimistic* ``SymmetricCurve`` (exact
    piecewise-linear) or :class:`PessimisticCurveSamples` (samples of one, bounded between samples by convexity -
    never a chord, which would understate the certified TPR). Direction: the curve must lower-bound the mechanism's
    trade-off curve (FNR), i.e. upper-bound its ROC; an optimistic curve would turn the verdict into false alarms.
    ``certified_mu`` overrides the mu reported as ``certified_mu`` (default: the report's / curve's mu).
    ``basis``: ``"estimate"`` when the caller knows the curve is only an estimate (e.g. a shuffled sampler accounted
    as Poisson): the verdict is computed the same way and its explanation says so.

    ``violates_claim`` iff some empirical point (FPR upper bound, TPR lower bound) lies strictly above the certified
    TPR upper bound at that FPR. If the claim holds, every true point lies on or below that curve, and with
    probability >= ``evidence.confidence`` every empirical point lies below a true one: the false-alarm probability is
    at most 1 - confidence. ``consistent`` is no evidence of a violation, not a proof of privacy.
    """
    if not isinstance(evidence, ScoreEvidence):
        raise ValueError(f"evidence must be a ScoreEvidence (from evidence_from_scores), got {evidence!r}")
    b = _basis(basis)
    fnr_lower, mu_cert = _certified_curve(certified, certified_mu)
    fnr = np.clip(np.asarray(fnr_lower(np.clip(evidence.fpr_upper, 1e-300, 1.0 - 1e-16)), dtype=float), 0.0, 1.0)
    tpr_upper = 1.0 - fnr
    margins = evidence.tpr_lower - tpr_upper
    j = int(np.argmax(margins))
    margin = float(margins[j])
    violates = margin > 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        # Phi^-1(1 - fnr) = -Phi^-1(fnr), accurate where the certified TPR is near 1.
        probit = special.ndtri(evidence.tpr_lower) + special.ndtri(fnr)
    probit = np.where(np.isnan(probit), -np.inf, probit)
    k = int(np.argmax(probit))
    strongest = float(evidence.fpr_upper[k]) if math.isfinite(probit[k]) else math.nan
    tight = evidence.mu_lower / mu_cert if (mu_cert > 0 and math.isfinite(mu_cert)) else None
    return EvidenceCheck(
        verdict="violates_claim" if violates else "consistent",
        tightness=tight,
        mu_lower=evidence.mu_lower,
        certified_mu=mu_cert,
        strongest_fpr=strongest,
        margin=margin,
        confidence=evidence.confidence,
        method=evidence.method,
        n_members=evidence.n_members,
        n_non_members=evidence.n_non_members,
        explanation=(VIOLATION_TEXT if violates else CONSISTENT_TEXT) + (ESTIMATE_TEXT if b == "estimate" else ""),
        probit_margin=float(probit[k]),
        fpr_upper=np.asarray(evidence.fpr_upper, dtype=float).copy(),
        tpr_lower=np.asarray(evidence.tpr_lower, dtype=float).copy(),
        tpr_upper=tpr_upper,
        method_id=evidence.method_id,
        basis=b,
    )


# -- registry (family-wise) --------------------------------------------------------------------------------------------
def registry_confidence(n_versions: int, alpha: float = 0.05) -> float:
    """Per-version confidence 1 - alpha / N (Bonferroni) so that auditing N versions raises a false
    ``violates_claim`` on any of them with probability <= alpha (union bound; any dependence between versions)."""
    n = _count("n_versions", n_versions, 1)
    if not isinstance(alpha, numbers.Real) or isinstance(alpha, bool) or not (0.0 < float(alpha) < 1.0):
        raise ValueError(f"alpha must be a real number in (0, 1), got {alpha!r}")
    return 1.0 - float(alpha) / n


@dataclasses.dataclass(frozen=True, eq=False)
class RegistryAudit:
    """Verdicts of N versions at family-wise error rate ``alpha`` (:func:`audit_registry`)."""

    alpha: float
    per_version_confidence: float
    checks: tuple[EvidenceCheck, ...]
    method: str = "Bonferroni: each version audited at confidence 1 - alpha / N"

    @property
    def verdicts(self) -> tuple[str, ...]:
        return tuple(c.verdict for c in self.checks)

    @property
    def any_violation(self) -> bool:
        """True iff some version ``violates_claim``; under all-consistent claims this has probability <= alpha."""
        return any(v == "violates_claim" for v in self.verdicts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "alpha": self.alpha,
            "per_version_confidence": self.per_version_confidence,
            "method": self.method,
            "any_violation": self.any_violation,
            "checks": [c.to_dict() for c in self.checks],
        }


def audit_registry(versions: Sequence[tuple[Any, Any, Any]], *, alpha: float = 0.05) -> RegistryAudit:
    """Audit N versions ``(mechanism_or_report, member_scores, non_member_scores)`` with family-wise error <= alpha.

    Bonferroni (each version at confidence 1 - alpha / N). Holm's step-down would need a p-value per version;
    with one verdict per version at a fixed confidence, Bonferroni is the valid choice.
    """
    items = list(versions)
    conf = registry_confidence(len(items), alpha)
    checks = tuple(check_evidence(mech, evidence_from_scores(mem, non, confidence=conf)) for mech, mem, non in items)
    return RegistryAudit(alpha=float(alpha), per_version_confidence=conf, checks=checks)
