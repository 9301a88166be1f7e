"""The privacy of releasing the best of K training runs (hyper-parameter tuning).

A registry version is usually the best of many tuning runs; its epsilon is not the single run's. This module bounds
the privacy of the whole procedure ``A``: draw K, run the single-run mechanism ``Q`` K times (each with its own
hyper-parameters drawn independently of the data), release only the best run by a total order on Q's outputs.
Every number is an *upper* bound and names its analysis:

* **fixed K** - the K-fold composition of Q, computed by the one accounting engine
  (:func:`gdpcore.report.analyze` of :class:`gdpcore.mechanisms.SelfComposed`): the best of K is a post-processing
  of the K outputs. No better bound in terms of Q's guarantee exists in general: for randomized response RR_eps
  with "1" ranked best, the best of K equals 0 only when all K runs output 0, with likelihood ratio
  (e^eps)^K - the best of K is exactly (K eps)-DP, the K-fold composition's pure-DP parameter (tests/test_tuning.py enumerates it). Only a
  *random* K avoids the factor K, which is why Papernot & Steinke 2022 (and Liu & Talwar 2019) randomise K.
* **random K, truncated negative binomial** D_{eta, gamma} (eta = 0 logarithmic, eta = 1 geometric; eta >= 0):
  Papernot & Steinke 2022 ("Hyperparameter Tuning with Renyi Differential Privacy", ICLR 2022, arXiv 2110.03620v2),
  Thm 2 - if Q is (lambda, eps(lambda))-RDP and (lambda_hat, eps(lambda_hat))-RDP then A is (lambda, eps')-RDP with

      eps'(lambda) = eps(lambda) + (1 + eta) (1 - 1/lambda_hat) eps(lambda_hat) + (1 + eta) log(1/gamma) / lambda_hat
                     + log(E[K]) / (lambda - 1),

  minimised over lambda_hat on the order grid.
* **random K, Poisson(m)** (A outputs nothing when K = 0): Papernot & Steinke 2022 Thm 6 - if Q is
  (lambda, eps(lambda))-RDP and (eps_hat, delta_hat)-DP with e^eps_hat <= 1 + 1/(lambda - 1), then A is
  (lambda, eps(lambda) + m delta_hat + log(m) / (lambda - 1))-RDP. eps_hat = log(lambda / (lambda - 1)) (the largest
  allowed, so the smallest delta_hat); delta_hat is read off the single run's *report* (its pessimistic privacy
  profile, tighter than the RDP conversion dp_accounting uses for the same theorem).

The tuned RDP curve is tightened by RDP's monotonicity in the order (as dp_accounting's ``RepeatAndSelectDpEvent``
accounting does) and converted to epsilon(delta) by dp_accounting's ``compute_epsilon`` - the conversion
:mod:`gdpcore.claims` and the engine's RDP fallback use. The single run's RDP curve is the kinds' own
(:func:`gdpcore.engine.kind_rdp_curve`, dp_accounting's default orders). A random-K number is finally taken as at
least the single run's reported epsilon (both sides are upper bounds on A's epsilon once the theorem's is, so the
maximum is one too): a tuned version never reports less than one of its runs. :meth:`TuningBound.report` turns the
tuned privacy profile into a full labelled report (mu, TPR at FPR, advantage) through
:func:`gdpcore.from_privacy_profile`. Formulas, sources and measured numbers: docs/references.md, section H.

Assumptions (the theorems'; they are the user's to meet, :attr:`TuningBound.assumptions` states them): the single
run's guarantee holds for *every* candidate configuration (a run with less noise needs its own, larger, guarantee);
the score that ranks runs is part of Q's output (computed privately or on public data); K is drawn independently of
the data; only the best run is released.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from gdpcore._validation import bounded_repr, check_choice, check_count, check_open_unit_array, check_real
from gdpcore.mechanisms import Mechanism, SelfComposed
from gdpcore.report import PrivacyReport, analyze

__all__ = [
    "TUNING_DISTRIBUTIONS",
    "RepetitionDistribution",
    "TuningBound",
    "analyze_tuning",
    "get_tuned_rdp",
    "get_tuned_report_bound",
]

TUNING_DISTRIBUTIONS: tuple[str, ...] = ("fixed", "truncated_negative_binomial", "poisson")
"""The laws of the number of runs K a manifest can state (geometric and logarithmic are truncated negative binomials
with shape 1 and 0)."""

DistributionKind = Literal["fixed", "truncated_negative_binomial", "poisson"]

_ANALYSIS = {
    "fixed": "K-fold composition of the single run (exact composition by gdpcore's engine; best-of-K is its "
    "post-processing)",
    "truncated_negative_binomial": "Papernot & Steinke 2022, Thm 2 (RDP of best-of-K, K truncated negative binomial), "
    "converted by dp_accounting's compute_epsilon",
    "poisson": "Papernot & Steinke 2022, Thm 6 (RDP of best-of-K, K Poisson), converted by dp_accounting's "
    "compute_epsilon",
}

ASSUMPTIONS = (
    "the single run's guarantee holds for every candidate hyper-parameter configuration",
    "the score ranking the runs is part of the single run's (private) output",
    "K and the candidate configurations are drawn independently of the data",
    "only the best run is released",
)


# ---------------------------------------------------------------------------------------------------------------------
# The law of K
# ---------------------------------------------------------------------------------------------------------------------
def _log_over_xm1(gamma: float) -> float:
    """log(1/gamma) / (1 - gamma), accurate as gamma -> 1 (limit 1)."""
    return 1.0 if gamma == 1.0 else -math.log(gamma) / (1.0 - gamma)


def _tnb_mean(shape: float, gamma: float) -> float:
    """E[K] of D_{eta, gamma} (Papernot & Steinke 2022 Def. 1): eta (1 - gamma) / (gamma (1 - gamma^eta)) for
    eta > 0, (1/gamma - 1) / log(1/gamma) for eta = 0 (the logarithmic distribution)."""
    if gamma == 1.0:
        return 1.0
    if shape == 0.0:
        return 1.0 / (gamma * _log_over_xm1(gamma))
    return shape * (1.0 - gamma) / (gamma * -math.expm1(shape * math.log(gamma)))


def _tnb_gamma_for_mean(shape: float, mean: float) -> float:
    """The gamma whose D_{shape, gamma} has E[K] >= ``mean`` and is closest to it (E[K] falls as gamma grows): the
    conservative side, since the bound grows with E[K] and with log(1/gamma)."""
    if mean == 1.0:
        return 1.0
    if shape == 1.0:
        gamma = 1.0 / mean
    else:
        lo, hi = 0.0, min(1.0, 2.0 * (shape + 1.0) / mean)  # E[K] <= 2 (eta + 1) / gamma
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if mid <= lo or mid >= hi:
                break
            if _tnb_mean(shape, mid) >= mean:
                lo = mid
            else:
                hi = mid
        gamma = lo
    while _tnb_mean(shape, gamma) < mean:  # round-off: move to the conservative side
        gamma = math.nextafter(gamma, 0.0)
    return gamma


def _check_mean(value: Any) -> float:
    out = check_real("mean", value)
    if out < 1.0:
        raise ValueError(f"mean must be >= 1 (the expected number of runs), got {bounded_repr(value)}")
    return out


@dataclasses.dataclass(frozen=True)
class RepetitionDistribution:
    """The law of the number K of training runs whose best is released. Build it with :meth:`fixed`,
    :meth:`geometric`, :meth:`logarithmic`, :meth:`truncated_negative_binomial` or :meth:`poisson`."""

    kind: DistributionKind
    mean: float
    """E[K]."""
    count: int | None = None
    """K, for ``kind="fixed"``."""
    shape: float | None = None
    """eta of the truncated negative binomial (0 logarithmic, 1 geometric)."""
    gamma: float | None = None
    """gamma of the truncated negative binomial (the halting probability; gamma = 1 is K = 1)."""

    @classmethod
    def fixed(cls, count: Any) -> RepetitionDistribution:
        k = check_count("count", count)
        return cls("fixed", float(k), count=k)

    @classmethod
    def truncated_negative_binomial(cls, shape: Any, *, gamma: Any = None, mean: Any = None) -> RepetitionDistribution:
        """D_{eta, gamma} of Papernot & Steinke 2022 Def. 1: P[K = k] = (1 - gamma)^k / (gamma^-eta - 1) *
        prod_{l<k} (l + eta)/(l + 1), k >= 1; give ``gamma`` or ``mean`` (E[K]; gamma is then the conservative
        solution). eta >= 0 (dp_accounting's ``RepeatAndSelectDpEvent`` range)."""
        eta = check_real("shape", shape)
        if eta < 0:
            raise ValueError(f"shape must be >= 0, got {bounded_repr(shape)}")
        if (gamma is None) == (mean is None):
            raise ValueError(
                f"gamma and mean: give exactly one, got gamma={bounded_repr(gamma)}, mean={bounded_repr(mean)}"
            )
        if gamma is not None:
            g = check_real("gamma", gamma)
            if not 0.0 < g <= 1.0:
                raise ValueError(f"gamma must be in (0, 1], got {bounded_repr(gamma)}")
        else:
            g = _tnb_gamma_for_mean(eta, _check_mean(mean))
        if g == 1.0:
            return cls.fixed(1)
        return cls("truncated_negative_binomial", _tnb_mean(eta, g), shape=eta, gamma=g)

    @classmethod
    def geometric(cls, *, gamma: float | None = None, mean: float | None = None) -> RepetitionDistribution:
        """P[K = k] = gamma (1 - gamma)^(k-1): keep training until a coin with heads probability gamma says stop."""
        return cls.truncated_negative_binomial(1.0, gamma=gamma, mean=mean)

    @classmethod
    def logarithmic(cls, *, gamma: float | None = None, mean: float | None = None) -> RepetitionDistribution:
        """P[K = k] = (1 - gamma)^k / (k log(1/gamma)) (shape 0)."""
        return cls.truncated_negative_binomial(0.0, gamma=gamma, mean=mean)

    @classmethod
    def poisson(cls, mean: Any) -> RepetitionDistribution:
        """K ~ Poisson(mean) (nothing is released when K = 0); mean >= 1."""
        return cls("poisson", _check_mean(mean))

    def pmf(self, k: np.ndarray | int) -> np.ndarray:
        """P[K = k] (for simulations and tests)."""
        from scipy import special, stats

        kk = np.asarray(k, dtype=float)
        if self.kind == "fixed":
            return np.where(kk == self.count, 1.0, 0.0)
        if self.kind == "poisson":
            return np.asarray(stats.poisson.pmf(kk, self.mean), dtype=float)
        eta, g = float(self.shape or 0.0), float(self.gamma or 1.0)
        k1 = np.maximum(kk, 1.0)
        if eta == 0.0:
            out = np.exp(k1 * math.log1p(-g) - np.log(k1)) / -math.log(g)
        else:
            log_c = special.gammaln(k1 + eta) - special.gammaln(eta) - special.gammaln(k1 + 1.0)
            out = np.exp(k1 * math.log1p(-g) + log_c) / math.expm1(-eta * math.log(g))
        return np.where(kk >= 1, out, 0.0)

    def to_dict(self) -> dict[str, Any]:
        """The manifest form (:meth:`from_dict` reads it back): ``{"distribution": "fixed", "count": K}``,
        ``{"distribution": "truncated_negative_binomial", "shape": eta, "gamma": gamma}`` or
        ``{"distribution": "poisson", "mean": m}``."""
        if self.kind == "fixed":
            return {"distribution": self.kind, "count": self.count}
        if self.kind == "truncated_negative_binomial":
            return {"distribution": self.kind, "shape": self.shape, "gamma": self.gamma}
        return {"distribution": self.kind, "mean": self.mean}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, path: str = "tuning") -> RepetitionDistribution:
        """Parse a manifest's ``tuning`` block: ``{"distribution": "fixed", "count": K}``,
        ``{"distribution": "geometric" | "logarithmic", "mean": m}`` (or ``"gamma"``),
        ``{"distribution": "truncated_negative_binomial", "shape": eta, "mean": m}`` (or ``"gamma"``),
        ``{"distribution": "poisson", "mean": m}``. Errors name ``path.field``."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{path} must be a mapping, got {bounded_repr(data)}")
        names = ("fixed", "geometric", "logarithmic", "truncated_negative_binomial", "poisson")
        kind: str = check_choice(f"{path}.distribution", data.get("distribution"), names)
        allowed = {
            "fixed": {"count"},
            "geometric": {"gamma", "mean"},
            "logarithmic": {"gamma", "mean"},
            "truncated_negative_binomial": {"shape", "gamma", "mean"},
            "poisson": {"mean"},
        }[kind]
        fields: dict[str, Any] = {str(key): value for key, value in data.items()}
        extra = sorted(set(fields) - allowed - {"distribution"})
        if extra:
            raise ValueError(f"{path}.{extra[0]} is not a field of a {kind} tuning block, got {bounded_repr(extra)}")
        try:
            if kind == "fixed":
                return cls.fixed(fields.get("count"))
            if kind == "poisson":
                return cls.poisson(fields.get("mean"))
            shape = {"geometric": 1.0, "logarithmic": 0.0}.get(kind, fields.get("shape"))
            return cls.truncated_negative_binomial(shape, gamma=fields.get("gamma"), mean=fields.get("mean"))
        except ValueError as exc:
            raise ValueError(f"{path}.{exc}") from None


# ---------------------------------------------------------------------------------------------------------------------
# The tuned RDP curve
# ---------------------------------------------------------------------------------------------------------------------
def _monotone_envelope(rdp: np.ndarray) -> np.ndarray:
    """RDP is non-decreasing in the order: eps(t_i) <= min_{j >= i} eps(t_j) on an increasing grid."""
    return np.minimum.accumulate(rdp[::-1])[::-1]


def get_tuned_rdp(
    orders: Sequence[float] | np.ndarray,
    rdp: Sequence[float] | np.ndarray,
    distribution: RepetitionDistribution,
    *,
    delta_hat: np.ndarray | None = None,
) -> np.ndarray:
    """RDP curve of best-of-K at ``orders`` (increasing, > 1) from the single run's RDP curve ``rdp``.

    Truncated negative binomial: Papernot & Steinke 2022 Thm 2, lambda_hat minimised over ``orders``. Poisson:
    Thm 6 with eps_hat = log(t / (t - 1)) and ``delta_hat[i]`` an upper bound on the single run's delta at that
    eps_hat for ``orders[i]`` (required). Both then take the monotone envelope in the order. Fixed K: K x ``rdp``
    (composition; :func:`get_tuned_report_bound` composes through the engine instead).
    """
    t = np.asarray(orders, dtype=float)
    r = np.asarray(rdp, dtype=float)
    if t.ndim != 1 or t.size == 0 or r.shape != t.shape or not (t > 1).all() or (np.diff(t) <= 0).any():
        raise ValueError(f"orders must be increasing and > 1 with one rdp value each, got {bounded_repr(orders)}")
    if np.isnan(r).any() or (r < 0).any():
        raise ValueError(f"rdp must be >= 0, got {bounded_repr(rdp)}")
    d = distribution
    if d.kind == "fixed":
        return float(d.mean) * r
    if d.kind == "truncated_negative_binomial":
        eta, g = float(d.shape or 0.0), float(d.gamma or 1.0)
        with np.errstate(invalid="ignore"):
            hat = np.where(np.isfinite(r), (1.0 - 1.0 / t) * r - math.log(g) / t, np.inf)
        out = r + (1.0 + eta) * float(hat.min()) + math.log(d.mean) / (t - 1.0)
    else:
        if delta_hat is None:
            raise ValueError("delta_hat is required for a Poisson number of runs (Papernot & Steinke 2022 Thm 6)")
        dh = np.asarray(delta_hat, dtype=float)
        if dh.shape != t.shape or np.isnan(dh).any() or (dh < 0).any():
            raise ValueError(f"delta_hat must be >= 0 with one value per order, got {bounded_repr(delta_hat)}")
        out = r + d.mean * dh + math.log(d.mean) / (t - 1.0)
    return _monotone_envelope(out)


def poisson_eps_hat(orders: np.ndarray) -> np.ndarray:
    """The largest eps_hat Papernot & Steinke 2022 Thm 6 allows at order t: e^eps_hat = 1 + 1/(t - 1)."""
    t = np.asarray(orders, dtype=float)
    return np.log1p(1.0 / (t - 1.0))


# ---------------------------------------------------------------------------------------------------------------------
# The result
# ---------------------------------------------------------------------------------------------------------------------
_PROFILE_POINTS = 400
"""Points of the eps grid :meth:`TuningBound.profile` hands to :func:`gdpcore.from_privacy_profile` (the RDP
fallback's density, :mod:`gdpcore.engine.rdp`)."""


@dataclasses.dataclass(frozen=True)
class TuningBound:
    """Privacy of releasing the best of K runs: epsilon at each of ``deltas`` (an *upper* bound), the analysis that
    gives it, the law of K and E[K]; beside it the single run's epsilon at the same deltas. :meth:`epsilon` and
    :meth:`delta` answer at any point, :meth:`report` gives the full labelled report (mu, TPR, advantage) of the
    tuned procedure. Build it with :func:`get_tuned_report_bound`."""

    distribution: RepetitionDistribution
    analysis: str
    single: PrivacyReport = dataclasses.field(repr=False)
    """The single run's report."""
    deltas: tuple[float, ...] = ()
    bound: str = "upper"
    orders: tuple[float, ...] | None = dataclasses.field(default=None, repr=False)
    rdp: tuple[float, ...] | None = dataclasses.field(default=None, repr=False)
    """The tuned RDP curve (random K) at ``orders``."""
    composed: PrivacyReport | None = dataclasses.field(default=None, repr=False)
    """The K-fold composition's report (fixed K)."""
    assumptions: tuple[str, ...] = ASSUMPTIONS

    @property
    def expected_k(self) -> float:
        return float(self.distribution.mean)

    @property
    def epsilons(self) -> tuple[float, ...]:
        """epsilon at each of ``deltas`` (upper bounds)."""
        return tuple(self.epsilon(d) for d in self.deltas)

    @property
    def single_run_epsilons(self) -> tuple[float, ...]:
        return tuple(float(self.single.epsilon(d)) for d in self.deltas)

    @property
    def value(self) -> float:
        """epsilon at the first of ``deltas``."""
        return self.epsilon(self.deltas[0])

    def _tuned_curve(self) -> tuple[np.ndarray, np.ndarray]:
        t, r = np.asarray(self.orders, dtype=float), np.asarray(self.rdp, dtype=float)
        keep = np.isfinite(r)
        return t[keep], r[keep]

    def epsilon(self, delta: float) -> float:
        """Upper bound on best-of-K's epsilon at ``delta`` in (0, 1); never below the single run's."""
        arr = check_open_unit_array("delta", delta)
        if arr.ndim != 0:
            raise ValueError(f"delta must be one number in (0, 1), got {bounded_repr(delta)}")
        d = float(arr)
        single = float(self.single.epsilon(d))
        if self.composed is not None:
            return max(float(self.composed.epsilon(d)), single)
        from dp_accounting.rdp import rdp_privacy_accountant as rdp_acc

        t, r = self._tuned_curve()
        eps = float(rdp_acc.compute_epsilon(t, r, d)[0]) if t.size else math.inf
        return max(eps, single)

    def delta(self, epsilon: float) -> float:
        """Upper bound on best-of-K's delta at ``epsilon`` >= 0 (dp_accounting's ``compute_delta`` of the tuned RDP
        curve, or the composition's profile); never below the single run's."""
        e = check_real("epsilon", epsilon)
        if e < 0:
            raise ValueError(f"epsilon must be >= 0, got {bounded_repr(epsilon)}")
        single = float(self.single.delta(e))
        if self.composed is not None:
            return max(float(self.composed.delta(e)), single)
        from dp_accounting.rdp import rdp_privacy_accountant as rdp_acc

        t, r = self._tuned_curve()
        return max(float(rdp_acc.compute_delta(t, r, e)[0]) if t.size else 1.0, single)

    def profile(self) -> tuple[np.ndarray, np.ndarray]:
        """(eps, delta(eps)) on ``_PROFILE_POINTS`` points from 0 to epsilon(1e-12): an upper bound on the tuned
        procedure's privacy profile."""
        top = min(max(self.epsilon(1e-12), 1e-3), 700.0)
        eps = np.linspace(0.0, top, _PROFILE_POINTS)
        delta = np.minimum.accumulate(np.asarray([self.delta(float(e)) for e in eps]))  # exact no-op: guards round-off
        return eps, delta

    def mechanism(self) -> Mechanism:
        """The tuned procedure as a :class:`gdpcore.PrivacyProfile` mechanism (its curve is max_i f_{eps_i, delta_i}
        over :meth:`profile`): fixed K returns the composition itself."""
        if self.composed is not None:
            return self.composed.mechanism
        from gdpcore.kinds.curves import from_privacy_profile

        eps, delta = self.profile()
        return from_privacy_profile(eps, delta, neighbouring=self.single.neighbouring_relation)

    def report(self) -> PrivacyReport:
        """The full report of the tuned procedure (every number an upper / lower bound as labelled, relative to
        :meth:`profile`; fixed K: the composition's report)."""
        return self.composed if self.composed is not None else analyze(self.mechanism())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every number with its label."""
        return {
            "tuning": self.distribution.to_dict(),
            "expected_runs": self.expected_k,
            "analysis": self.analysis,
            "assumptions": list(self.assumptions),
            "epsilon": [
                {"delta": d, "value": e, "bound": self.bound, "single_run": s}
                for d, e, s in zip(self.deltas, self.epsilons, self.single_run_epsilons, strict=True)
            ],
        }


def get_tuned_report_bound(
    report: PrivacyReport,
    *,
    distribution: RepetitionDistribution | Mapping[str, Any],
    deltas: Sequence[float] | float = (1e-5,),
) -> TuningBound:
    """The privacy of the best of K runs, each with the guarantee of ``report`` (a single run's report), at
    ``deltas``: the call an audit makes for a manifest's ``tuning`` block (a mapping is parsed by
    :meth:`RepetitionDistribution.from_dict`). See the module docstring for the analyses."""
    if not isinstance(report, PrivacyReport):
        raise ValueError(f"report must be a PrivacyReport, got {bounded_repr(report)}")
    dist = (
        distribution
        if isinstance(distribution, RepetitionDistribution)
        else RepetitionDistribution.from_dict(distribution)
    )
    d_arr = np.atleast_1d(check_open_unit_array("deltas", deltas)).astype(float)
    if d_arr.size == 0:
        raise ValueError("deltas must not be empty, got []")
    d_tuple = tuple(map(float, d_arr))
    if dist.kind == "fixed":
        k = int(dist.count or 1)
        composed = report if k == 1 else analyze(SelfComposed(mechanism=report.mechanism, count=k))
        analysis = _ANALYSIS["fixed"] if k > 1 else "a single run (K = 1): the run's own report"
        return TuningBound(dist, analysis, report, d_tuple, composed=composed)
    from gdpcore.engine import kind_rdp_curve

    orders, curve = kind_rdp_curve(report.mechanism)
    delta_hat = None
    if dist.kind == "poisson":
        delta_hat = np.asarray(report.delta(poisson_eps_hat(orders)), dtype=float)
    tuned = get_tuned_rdp(orders, curve, dist, delta_hat=delta_hat)
    return TuningBound(
        dist,
        _ANALYSIS[dist.kind],
        report,
        d_tuple,
        orders=tuple(map(float, orders)),
        rdp=tuple(map(float, tuned)),
    )


def analyze_tuning(
    mechanism: Mechanism,
    *,
    distribution: RepetitionDistribution | Mapping[str, Any],
    deltas: Sequence[float] | float = (1e-5,),
) -> TuningBound:
    """:func:`get_tuned_report_bound` of ``analyze(mechanism)``: the best of K runs of ``mechanism``."""
    if not isinstance(mechanism, Mechanism):
        raise ValueError(f"mechanism must be a gdpcore mechanism, got {bounded_repr(mechanism)}")
    return get_tuned_report_bound(analyze(mechanism), distribution=distribution, deltas=deltas)
