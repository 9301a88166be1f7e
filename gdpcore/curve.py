"""Symmetric piecewise-linear f-DP trade-off curves and everything read off them.

Construction (seed 000 Thm 2.4 / Thm A.9 / Thm A.10; seed 001 Alg. 1; Dong et al. 2022 Def. F.1):

A privacy profile delta(eps) known on a grid 0 = eps_0 < eps_1 < ... < eps_K gives the supporting lines
``beta = 1 - delta(eps_j) - e^{eps_j} alpha`` of the trade-off curve. If every delta(eps_j) is an upper bound on the
mechanism's profile, the upper envelope of these lines is a *lower* bound on the true curve (pessimistic) - whatever
happens between grid points. Consecutive lines meet at the vertices

    alpha_j = (delta_j - delta_{j+1}) / (e^{eps_{j+1}} - e^{eps_j}),   1 - beta_j = delta_j + e^{eps_j} alpha_j,

which for a PMF on the same lattice are exactly the Thm A.10 breakpoints (Pr_Q[L > eps_j], Pr_P[L <= eps_j]).
The lines with eps >= 0 form the steep half of the curve (slopes <= -1); the add/remove curve is symmetric, so the
shallow half is its mirror image (alpha, beta) -> (beta, alpha). Both halves meet on the diagonal.

Everything the report needs is exact on this piecewise-linear object:

* delta(eps) on [eps_j, eps_{j+1}] is ``(1 - beta_j) - e^eps alpha_j`` (the tangent vertex), eps(delta) its inverse;
* beta(alpha) is linear interpolation between vertices;
* mu* (seed 000 Eq. 21) is a max over vertices, because f_mu is convex and the curve linear between vertices
  (Prop. C.1), restricted to FPR >= ``alpha_min`` so that the accountant's tail truncation cannot leak into mu;
* the regret Delta(f, f_mu) (Eq. 6 = Eq. 24) is the sup over eps >= 0 of (delta_mu(eps) - delta_f(eps)) / (1 + e^eps),
  computed to a certified bracket by interval bounds on the cells [eps_j, eps_{j+1}] - no fixed alpha grid.

Numerics: each steep vertex keeps both ``beta`` and ``tail = 1 - beta``, each computed as a sum of positive terms
(Thm A.10: alpha = Q(L > eps_j), tail = P(L > eps_j) + P(L = inf), beta = P(L <= eps_j)), so that values near 0 and
near 1 both keep full relative precision; differences of profile values (which cancel catastrophically when
delta ~ 1 - 1e-17) are used only on the guarded path of :func:`curve_from_profile`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from scipy import special

from gdpcore._certified import refine_cells
from gdpcore._validation import check_open_unit_array
from gdpcore.closed_form import get_log_delta_from_gdp

__all__ = [
    "INFINITY_MASS_TOLERANCE",
    "SymmetricCurve",
    "curve_from_loss_pmf",
    "curve_from_profile",
    "curve_from_remove_pmf",
    "curve_from_threshold_tests",
    "remove_profile",
]

INFINITY_MASS_TOLERANCE = 1e-9
"""An infinite-loss mass above this is a real catastrophic-failure probability (f(0) < 1, so mu = inf by seed 000
Prop. 6.2); below it, it is the accountant's tail-truncation residue (dp_accounting adds <= 1e-15 per composition)."""


def _isf(x: np.ndarray) -> np.ndarray:
    """Phi^{-1}(1 - x), accurate for tiny x."""
    return -special.ndtri(x)


def _ndtri_beta(b: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Phi^{-1}(b) per vertex, from whichever of b / t = 1 - b is known to full precision (each quantile evaluated
    only where it is used)."""
    low = b < 0.5
    out = np.empty(b.size)
    with np.errstate(divide="ignore"):
        out[low] = special.ndtri(np.clip(b[low], 0.0, 1.0))
        out[~low] = -special.ndtri(np.clip(t[~low], 0.0, 1.0))
    return out


@dataclasses.dataclass(frozen=True, eq=False)
class SymmetricCurve:
    """A symmetric, convex, piecewise-linear trade-off curve given by its steep half.

    ``eps`` (length K+1, eps[0] = 0, increasing) and ``delta`` (non-increasing, in [0, 1]) are the profile on the
    grid. ``alpha``/``tail`` are the steep-half vertices ordered by increasing alpha: index 0 is (0, 1 - delta_K)
    and the last one lies on the eps_0 = 0 line; vertex i (i >= 1) is where the lines eps_{K-i} and eps_{K-i+1} meet.
    """

    eps: np.ndarray
    delta: np.ndarray
    alpha: np.ndarray
    tail: np.ndarray  # 1 - beta at each steep vertex
    beta: np.ndarray  # beta at each steep vertex (precise where small)
    add_direction_gap: float = 0.0
    # mu per cut-off, computed once: the engine's certified gap and the report read the same curve several times.
    _mu_cache: dict[float, tuple[float, float, float]] = dataclasses.field(
        init=False, repr=False, compare=False, default_factory=dict
    )

    # -- geometry ----------------------------------------------------------------------------------------------------
    @property
    def fixed_point(self) -> float:
        """alpha* where the curve meets the diagonal: f(alpha*) = alpha*."""
        return _fixed_point(self.alpha, self.beta)

    def breakpoints(self) -> tuple[np.ndarray, np.ndarray]:
        """All vertices (alpha, beta) of the symmetric curve, alpha increasing from 0 to 1."""
        a_star = self.fixed_point
        keep = self.alpha < a_star
        a = self.alpha[keep]
        b = self.beta[keep]
        alphas = np.concatenate([a, [a_star], b[::-1], [1.0]])
        betas = np.concatenate([b, [a_star], a[::-1], [0.0]])
        return alphas, betas

    # -- queries -----------------------------------------------------------------------------------------------------
    def fnr(self, fpr: np.ndarray | float) -> np.ndarray | float:
        """beta(alpha): the smallest false-negative rate at false-positive rate alpha."""
        a = check_open_unit_array("fpr", fpr, allow_zero=True, allow_one=True)
        alphas, betas = self.breakpoints()
        out = np.interp(a, alphas, betas)
        return float(out) if np.ndim(fpr) == 0 else out

    def delta_at(self, epsilon: np.ndarray | float) -> np.ndarray | float:
        """delta(eps) for any real eps (eps < 0 via symmetry: delta(-e) = 1 - e^-e + e^-e delta(e))."""
        e = np.asarray(epsilon, dtype=float)
        if np.isnan(e).any():
            raise ValueError(f"epsilon must not contain NaN, got {epsilon!r}")
        pos = self._delta_nonneg(np.abs(e))
        neg = -np.expm1(-np.abs(e)) + np.exp(-np.abs(e)) * pos
        out = np.clip(np.where(e < 0, neg, pos), 0.0, 1.0)
        return float(out) if np.ndim(epsilon) == 0 else out

    def _delta_nonneg(self, e: np.ndarray) -> np.ndarray:
        # Cell j = [eps_j, eps_{j+1}) uses the vertex where lines j and j+1 meet: steep index K - j.
        K = self.eps.size - 1
        j = np.clip(np.searchsorted(self.eps, e, side="right") - 1, 0, K)
        v = K - j
        with np.errstate(over="ignore", invalid="ignore"):
            val = self.tail[v] - np.exp(e) * self.alpha[v]
        val = np.where(j >= K, self.delta[K], val)
        return np.clip(val, 0.0, 1.0)

    def epsilon_at(self, delta: np.ndarray | float) -> np.ndarray | float:
        """Smallest eps >= 0 with delta(eps) <= delta; +inf if delta <= the curve's floor delta(+inf)."""
        d = check_open_unit_array("delta", delta)
        K = self.eps.size - 1
        # delta is non-increasing on the grid; count grid points with delta_j > d.
        desc = self.delta[::-1]  # non-decreasing
        n_above = self.delta.size - np.searchsorted(desc, d, side="right")
        j = n_above - 1  # last grid index with delta_j > d
        out = np.zeros_like(d)
        inside = (j >= 0) & (j < K)
        if inside.any():
            v = K - j[inside]
            with np.errstate(divide="ignore"):
                out[inside] = np.log((self.tail[v] - d[inside]) / self.alpha[v])
            out[inside] = np.clip(out[inside], self.eps[j[inside]], self.eps[np.minimum(j[inside] + 1, K)])
        out[j >= K] = np.inf
        return float(out) if np.ndim(delta) == 0 else out

    @property
    def advantage(self) -> float:
        """max_alpha (1 - alpha - f(alpha)) = 1 - 2 alpha* for a symmetric curve; equals delta(0) (seed 000 Eq. 8)."""
        return float(min(1.0, max(0.0, 1.0 - 2.0 * self.fixed_point)))

    def mu(self, *, alpha_min: float) -> tuple[float, float, float]:
        """Tightest mu with f_mu <= f wherever FPR and FNR are both >= the cut-off (seed 000 Eq. 21).

        Returns (mu, FPR at which it binds, cut-off used). By symmetry of f and f_mu it suffices to check the steep
        half; vertices are checked together with the interpolated point at the cut-off and the diagonal point.
        The cut-off is ``alpha_min`` unless the curve meets the diagonal below it (advantage > 1 - 2 alpha_min):
        then no point of the curve has both error rates >= alpha_min, the statement would be vacuous, and the
        cut-off is lowered to alpha* x 1e-6 (the caller reports the cut-off used).
        """
        key = float(alpha_min)
        if key not in self._mu_cache:
            self._mu_cache[key] = self._mu(key)
        return self._mu_cache[key]

    def _mu(self, alpha_min: float) -> tuple[float, float, float]:
        a_star = self.fixed_point
        cut = alpha_min if alpha_min < a_star else a_star * 1e-6
        if a_star <= 0.0 or self.tail[0] > INFINITY_MASS_TOLERANCE:
            # f(0) = 1 - P(L = inf) < 1 beyond truncation residue: no finite mu (seed 000 Prop. 6.2).
            return math.inf, 0.0, 0.0
        keep = (self.alpha >= cut) & (self.alpha < a_star)
        a = np.concatenate([[cut], self.alpha[keep], [a_star]])
        b = np.concatenate([[np.interp(cut, self.alpha, self.beta)], self.beta[keep], [a_star]])
        t = np.concatenate([[np.interp(cut, self.alpha, self.tail)], self.tail[keep], [1.0 - a_star]])
        with np.errstate(divide="ignore"):
            values = _isf(a) - _ndtri_beta(b, t)
        i = int(np.argmax(values))
        return float(max(0.0, values[i])), float(a[i]), float(cut)

    def _gdp_on_lines(self, mu: float, d_mu: np.ndarray, first: int, last: int, floor: float) -> float:
        """max(``floor``, max over the lines j in [first, last] of (delta_mu(eps_j) - delta_j) / (1 + e^eps_j)), with
        delta_mu(eps_j) written into ``d_mu[j]`` on the lines read (the others stay NaN).

        delta_mu is read at the ends of blocks of ``_REGRET_BLOCK`` lines first. On a block [eps_a, eps_b] both
        delta_mu and delta_f decrease, so every line in it has a value at most (delta_mu(eps_a) - delta_f(eps_b)) /
        (1 + e^eps_a) (over 1 + e^eps_b if negative); with delta_mu(eps_a) raised by 1e-9 relative (its float error
        is ~1e-13) and every operation rounded monotonically, that bounds the *computed* values too. Blocks whose
        bound is below the best value at the ends are not read: the maximum is the one every line gives, to the
        last bit, and only blocks that can hold it cost their delta_mu."""
        idx = np.arange(first, last + 1)
        ends = idx if idx.size <= 4 * _REGRET_BLOCK else np.unique(np.append(idx[::_REGRET_BLOCK], last))
        eps, delta = self.eps, self.delta
        d_mu[ends] = np.exp(get_log_delta_from_gdp(mu=mu, epsilon=eps[ends]))
        best = max(floor, float(np.max((d_mu[ends] - delta[ends]) / (1.0 + np.exp(eps[ends])))))
        if ends.size == idx.size:
            return best
        a, b = ends[:-1], ends[1:]
        top = d_mu[a] * (1.0 + 1e-9) - delta[b]
        bound = np.where(top > 0, top / (1.0 + np.exp(eps[a])) * (1.0 + 1e-9), top / (1.0 + np.exp(eps[b])))
        live = np.flatnonzero((bound >= best) & (b - a > 1))
        if live.size:
            inner = np.concatenate([np.arange(a[i] + 1, b[i]) for i in live])
            d_mu[inner] = np.exp(get_log_delta_from_gdp(mu=mu, epsilon=eps[inner]))
            best = max(best, float(np.max((d_mu[inner] - delta[inner]) / (1.0 + np.exp(eps[inner])))))
        return best

    def regret_against_gdp(self, mu: float, *, tol: float = 1e-9, max_iter: int = 200) -> tuple[float, float]:
        """Delta(f, f_mu) as a certified bracket (lower, upper) (seed 000 Eq. 24 / Kaissis et al. 2024).

        Delta = sup_{eps >= 0} (delta_mu(eps) - delta_f(eps)) / (1 + e^eps) for symmetric curves. On each grid cell
        delta_f is ``tail_v - e^eps alpha_v``, affine in gamma = e^eps, while delta_mu is convex in gamma (a sup of
        affine functions, Thm A.9); so the numerator is convex on the cell and peaks at an endpoint, which bounds
        the cell from above; cells whose bound can
        still beat the best value found are subdivided (largest bounds first, a bounded batch per round) until the
        bracket is narrower than ``tol`` or ``max_iter`` rounds have run; the bracket is valid either way.
        """
        if not math.isfinite(mu):
            # f_mu = 0 (delta_mu = 1): the numerator 1 - tail_v + e^eps alpha_v over 1 + e^eps is monotone on each
            # cell, so the sup is attained at a grid point (beyond the last one delta_f is constant): exact.
            value = float(np.max((1.0 - self.delta) * special.expit(-self.eps)))
            return value, value
        if mu <= 0:
            return 0.0, 0.0
        K = self.eps.size - 1
        if K == 0:
            value = max(0.0, float((math.exp(get_log_delta_from_gdp(mu=mu, epsilon=0.0)) - self.delta[0]) / 2.0))
            return value, value

        # Lines far out cannot matter: the numerator is at most delta_mu(eps) <= Phi(mu/2 - eps/mu) and the
        # denominator at least e^eps, so every cell beyond eps is bounded by B(eps) = Phi(mu/2 - eps/mu) e^-eps,
        # decreasing in eps. The best value on the lines up to mu^2/2 + 2 mu + 5 (where the sup lies for the
        # regrets met in practice) sets the first line c whose B is within it + tol; lines beyond c are never
        # evaluated, their cells' bound B(eps_c) is carried in ``dead``.
        eps_all = self.eps

        def tail_bound(e: float) -> float:
            return float(special.ndtr(mu / 2.0 - e / mu)) * math.exp(-e)

        head = min(int(np.searchsorted(eps_all, mu * mu / 2.0 + 2.0 * mu + 5.0, side="right")), K)
        # delta_mu is read only on the lines that can matter (:meth:`_gdp_on_lines`): NaN on lines skipped.
        d_mu = np.full(K + 1, math.nan)
        lower = self._gdp_on_lines(mu, d_mu, 0, head, 0.0)
        k_used = K
        if tail_bound(float(eps_all[K])) <= lower + tol:
            lo_i, hi_i = 0, K  # bisection for the first line whose bound is within lower + tol
            while lo_i < hi_i:
                mid = (lo_i + hi_i) // 2
                if tail_bound(float(eps_all[mid])) <= lower + tol:
                    hi_i = mid
                else:
                    lo_i = mid + 1
            k_used = max(lo_i, 1)
        if k_used > head:  # only the lines beyond the head are new
            lower = self._gdp_on_lines(mu, d_mu, head + 1, k_used, lower)
        # Largest upper bound of a cell set aside as unable to beat the best value by more than tol: the returned
        # upper end covers it (a cell dropped at lower + tol / 2 still bounds the sup from above).
        dead = tail_bound(float(eps_all[k_used])) if k_used < K else 0.0
        num = d_mu[: k_used + 1] - self.delta[: k_used + 1]  # exact at grid points: delta_f(eps_j) = delta_j
        # Cells with a line skipped lie in a block whose bound is below ``lower``: never refined, and their bounds
        # are below the lower end, so leaving them out moves neither end of the bracket.
        read = ~np.isnan(num[:-1]) & ~np.isnan(num[1:])
        cells = np.flatnonzero(read)
        lo = eps_all[cells]
        hi = eps_all[cells + 1]
        vert = K - cells  # cell j uses steep vertex K - j
        upper_cells = _cell_upper(num[cells], num[cells + 1], lo, hi)

        def refine(pts: np.ndarray, v: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
            assert v is not None  # the steep vertex of each cell is its payload
            d_mu = np.exp(get_log_delta_from_gdp(mu=mu, epsilon=pts))
            d_f = np.clip(self.tail[v][:, None] - np.exp(pts) * self.alpha[v][:, None], 0.0, 1.0)
            n_pts = d_mu - d_f
            return n_pts / (1.0 + np.exp(pts)), _cell_upper(n_pts[:, :-1], n_pts[:, 1:], pts[:, :-1], pts[:, 1:])

        out = refine_cells(lo, hi, upper_cells, lower, refine, tol=tol, max_iter=max_iter, payload=vert)
        upper = float(max(out.lower, dead, out.dead, out.live.max() if out.live.size else 0.0))
        return out.lower, upper


_REGRET_BLOCK = 64
"""Lines per block of :meth:`SymmetricCurve._gdp_on_lines` (delta_mu is read at every block's ends first)."""


def _cell_upper(n_lo: np.ndarray, n_hi: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Upper bound of N(eps)/(1 + e^eps) on [lo, hi] when N is convex in e^eps (max at an endpoint)."""
    n_max = np.maximum(n_lo, n_hi)
    return np.where(n_max > 0, n_max / (1.0 + np.exp(lo)), n_max / (1.0 + np.exp(hi)))


def _fixed_point(alpha: np.ndarray, beta: np.ndarray) -> float:
    """alpha* with f(alpha*) = alpha*: on a steep segment, or on the eps = 0 line (slope -1) after the last vertex."""
    crossed = alpha >= beta
    if not crossed.any():
        # The last vertex lies on the eps = 0 line beta = 1 - delta_0 - alpha, which meets the diagonal at
        # (1 - delta_0)/2 = (alpha_last + beta_last)/2 - formed from the precise vertex coordinates.
        return max(0.0, float(alpha[-1] + beta[-1]) / 2.0)
    i = int(np.argmax(crossed))
    if i == 0:
        return 0.0
    g0 = alpha[i - 1] - beta[i - 1]
    g1 = alpha[i] - beta[i]
    w = g0 / (g0 - g1)
    return float(alpha[i - 1] + w * (alpha[i] - alpha[i - 1]))


def curve_from_profile(eps: np.ndarray, delta: np.ndarray, *, add_direction_gap: float = 0.0) -> SymmetricCurve:
    """Symmetric curve from upper bounds on the profile delta(eps_j) on a grid starting at eps_0 = 0.

    Non-monotone input is made monotone on the safe side (delta_j := max_{i >= j} delta_i) and clipped to [0, 1].
    """
    eps = np.asarray(eps, dtype=float)
    delta = np.asarray(delta, dtype=float)
    if eps.ndim != 1 or eps.size == 0 or eps[0] != 0.0 or np.any(np.diff(eps) <= 0):
        raise ValueError("eps must be a strictly increasing grid starting at 0")
    delta = np.clip(np.maximum.accumulate(delta[::-1])[::-1], 0.0, 1.0)
    # Vertex between lines j and j+1: alpha = (delta_j - delta_{j+1}) / (e^{eps_{j+1}} - e^{eps_j}) and
    # 1 - beta = delta_j + e^{eps_j} alpha, written with e^{eps_j - eps_{j+1}} only, so that no e^eps is formed
    # (it overflows beyond eps ~ 709, e.g. on RDP-fallback profiles of extreme cells).
    ratio = np.exp(eps[:-1] - eps[1:])  # in (0, 1)
    diff = delta[:-1] - delta[1:]
    a_mid = diff * np.exp(-eps[1:]) / (1.0 - ratio)
    t_mid = delta[:-1] + diff * ratio / (1.0 - ratio)
    alpha = np.concatenate([[0.0], a_mid[::-1]])
    tail = np.concatenate([[delta[-1]], t_mid[::-1]])
    return _finish(eps, delta, alpha, tail, add_direction_gap)


def _finish(eps, delta, alpha, tail, add_direction_gap, beta=None, *, optimistic: bool = False) -> SymmetricCurve:
    # Round-off can leave vertices a hair out of order; restore monotonicity (alpha up, tail up) and range. A lower
    # bound's (optimistic) beta is kept as given and made non-increasing upwards (lowering it would leave its side).
    alpha = np.clip(np.maximum.accumulate(np.maximum(alpha, 0.0)), 0.0, 1.0)
    tail = np.clip(np.maximum.accumulate(tail), 0.0, 1.0)
    if beta is None:
        beta = 1.0 - tail
    elif optimistic:
        beta = np.clip(np.maximum.accumulate(beta[::-1])[::-1], 0.0, 1.0)
    else:
        beta = np.clip(np.minimum.accumulate(np.minimum(beta, 1.0 - tail)), 0.0, 1.0)
    return SymmetricCurve(
        eps=eps, delta=delta, alpha=alpha, tail=tail, beta=beta, add_direction_gap=float(add_direction_gap)
    )


def curve_from_threshold_tests(p_low: np.ndarray, q_high: np.ndarray, *, p_slack: float = 0.0) -> SymmetricCurve:
    """Optimistic symmetric curve through the error rates of tests on a post-processed output: outcome i has P-mass
    >= ``p_low[i]`` and Q-mass <= ``q_high[i]``; ``p_slack`` bounds what the lower bounds may overstate in total.

    Valid (optimistic side): rejecting a set S of outcomes has alpha <= sum_S ``q_high`` and beta <= 1 - sum_S
    ``p_low`` + ``p_slack``, so the mechanism's trade-off curve f (the smallest beta at each alpha) lies below
    every such point; f is convex, hence below the lower convex hull of them and (0, 1), which the sets of the top
    j outcomes by P/Q ratio trace (Neyman-Pearson). f is symmetric (remove/add), so the steep half (slopes <= -1)
    and its mirror image bound it (:class:`SymmetricCurve`).

    Numerics as :func:`_vertices_on_grid` (optimistic branch): alpha from sums of ``q_high``, beta both from the
    sums of ``p_low`` below (plus the mass deficit: precise near 0) and from 1 - the sums above (precise near 1),
    each moved to the safe side of its float error; each hull segment's line e^eps = P/Q from its own masses.
    Segments steeper than e^700 are merged into the first (their vertices sit at alpha < e^-700; the line is kept
    at eps = 700, as :func:`curve_from_remove_pmf` does).
    """
    p = np.asarray(p_low, dtype=float)
    q = np.asarray(q_high, dtype=float)
    for name, x in (("p_low", p), ("q_high", q)):
        if x.ndim != 1 or not np.all(np.isfinite(x)) or np.any(x < 0.0):
            raise ValueError(f"{name} must be a 1-D array of finite masses >= 0, got {x!r}")
    if p.size != q.size:
        raise ValueError(f"p_low and q_high must have one entry per outcome, got {p.size} and {q.size}")
    if not (math.isfinite(p_slack) and p_slack >= 0.0):
        raise ValueError(f"p_slack must be a finite number >= 0, got {p_slack!r}")
    keep = p > 0.0  # an atom without P-mass only adds alpha: no test needs to reject it
    p, q = p[keep], q[keep]
    if p.size == 0:
        return curve_from_profile(np.array([0.0]), np.array([0.0]))
    total = float(np.sum(np.asarray(p_low, dtype=float)))
    n = p.size
    rel = 4.0 * (n + 2) * _U
    sum_err = (math.log2(max(n, 2)) + 3.0) * _U * (total + 1.0)
    deficit = max(0.0, 1.0 - total)

    def log_ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(a) - np.log(b)  # +inf where Q = 0

    # Any set of atoms is a test: rejecting them in decreasing order of P/Q (Neyman-Pearson) gives the convex hull
    # of all of them directly. Atoms with equal ratios form one segment.
    lam = log_ratio(p, q)
    order = np.argsort(-lam, kind="stable")
    seg_p, seg_q, lam = p[order], q[order], lam[order]
    # The first segment must be representable (slope >= -e^700 from (0, 1)): the leading segments are merged until
    # the chord from (0, 1) is (dropping the vertices in between: fewer tests, a higher hull, still valid).
    chord = log_ratio(np.cumsum(seg_p), np.cumsum(seg_q))
    lead = int(np.argmax(chord <= _EPS_CAP)) if (chord <= _EPS_CAP).any() else lam.size - 1
    lam = lam.copy()
    lam[: lead + 1] = math.inf
    starts = np.flatnonzero(np.concatenate([[True], lam[1:] != lam[:-1]]))
    if starts.size < lam.size:
        seg_p = np.add.reduceat(seg_p, starts)
        seg_q = np.add.reduceat(seg_q, starts)
    lam = log_ratio(seg_p, seg_q)
    # Vertex i ends segment i: rejected masses from the top (cum_*), accepted P-mass below (a sum of its own).
    cum_p = np.cumsum(seg_p)
    cum_q = np.cumsum(seg_q)
    below = np.concatenate([np.cumsum(seg_p[::-1])[::-1][1:], [0.0]])
    alpha_v = np.minimum(cum_q * (1.0 + rel), 1.0)
    beta_high = below * (1.0 + rel) + deficit + p_slack + sum_err
    tail_low = cum_p * (1.0 - rel) - p_slack
    beta_v = np.clip(np.minimum(np.minimum(beta_high, 1.0 - tail_low), 1.0 - alpha_v), 0.0, 1.0)
    tail_v = np.clip(np.maximum(np.maximum(tail_low, 1.0 - beta_high), alpha_v), 0.0, 1.0)
    m = int(np.count_nonzero(lam >= 0.0))  # the steep segments come first (lam decreases)
    lines = np.minimum(lam[:m], _EPS_CAP)
    eps = np.concatenate([[0.0], lines[::-1]])
    alpha_s = np.concatenate([[0.0], alpha_v[:m]])
    tail_s = np.concatenate([[0.0], tail_v[:m]])
    beta_s = np.concatenate([[1.0], beta_v[:m]])
    # Line j > 0 (eps_j = lines[m - j]) runs through the vertex ending its segment (steep index m - j + 1); the
    # eps = 0 line through the last steep vertex (index m). delta = tail - e^eps alpha there.
    ends = np.concatenate([[m], np.arange(m, 0, -1)])
    with np.errstate(over="ignore", invalid="ignore"):
        delta = np.clip(tail_s[ends] - np.exp(eps) * alpha_s[ends], 0.0, 1.0)
    delta = np.minimum.accumulate(delta)
    # Vertex 0 is (0, 1 - delta_K): the steepest line meets alpha = 0 there.
    tail_s[0] = delta[-1]
    beta_s[0] = 1.0 - delta[-1]
    return _finish(eps, delta, alpha_s, tail_s, 0.0, beta=beta_s, optimistic=True)


def _suffix_decay(x: np.ndarray, decay: float) -> np.ndarray:
    """out[i] = sum_{m > i} x[m] * decay^(m - i), by a first-order recursion run backwards (scipy lfilter, in C)."""
    # y[k] = decay * (r[k-1] + y[k-1]) on the reversed sequence r.
    # Imported here: scipy.signal costs ~0.6 s of import, paid by every CLI start and pool worker otherwise.
    from scipy import signal

    y = signal.lfilter([0.0, decay], [1.0, -decay], x[::-1])
    return y[::-1]


def profile_on_lattice(pmf, k_max: int) -> np.ndarray:
    """delta(eps_k) = sum_{l > eps_k} p (1 - e^{eps_k - l}) + p_inf at eps_k = k * step, k = 0..k_max.

    Only atoms with loss > eps_k >= 0 enter, so the (truncated, possibly inconsistent) lower tail of the PMF is never
    read. Computed with suffix sums and a first-order recursion: no e^{l} is ever formed, so no overflow.
    """
    p = pmf.probs
    step = pmf.step
    lo = pmf.lower_index
    n = p.size
    k = np.arange(k_max + 1)
    if n == 0:
        return np.full(k.size, pmf.infinity_mass)
    suffix_p = np.concatenate([np.cumsum(p[::-1])[::-1][1:], [0.0]])  # sum_{m > i} p[m]
    suffix_w = _suffix_decay(p, math.exp(-step))  # sum_{m > i} p[m] e^{-(m - i) step}
    i_k = k - lo  # array index of the atom at loss eps_k
    inside = np.clip(i_k, 0, n - 1)
    out = suffix_p[inside] - suffix_w[inside]
    below = i_k < 0  # eps_k below the smallest atom: every atom counts
    if below.any():
        total_w = float(np.sum(p * np.exp(-step * np.arange(n))))  # no BLAS (np.sum, not @): see gdpcore/pld/powers.py
        out = np.where(below, p.sum() - np.exp(-step * (lo - k)) * total_w, out)
    out = np.where(i_k > n - 1, 0.0, out)
    return np.clip(out, 0.0, None) + pmf.infinity_mass


def curve_from_loss_pmf(remove_pmf, add_pmf=None) -> SymmetricCurve:
    """Symmetric curve from the remove-direction PMF, optionally guarded by the add-direction PMF.

    The profile for eps >= 0 is delta_R computed on the remove PMF's losses > eps (see
    :func:`profile_on_lattice`). When ``add_pmf`` is given (asymmetric PLDs such as the Poisson-subsampled Gaussian),
    delta_A is computed the same way; dp_accounting's composed add PMF carries excess mass e = sum(p_add) - 1 > 0 at
    fine discretisation, which can inflate delta_A by at most e. The excess of delta_A over delta_R beyond e is
    ``add_direction_gap``; where it is positive the pointwise max is used, so the curve stays pessimistic even for a
    mechanism whose add direction dominates. For the subsampled Gaussian the remove direction dominates for
    eps >= 0 and the gap is 0 (tests/test_pld.py::test_composed_epsilon_matches_dp_accounting; docs/references.md M-1).
    """
    remove_pmf = remove_pmf.with_roundoff_allowance()
    if add_pmf is not None:
        if add_pmf.step != remove_pmf.step:
            raise ValueError("remove and add PMFs must share one discretization")
        add_pmf = add_pmf.with_roundoff_allowance()
        k_max = max(remove_pmf.lower_index + remove_pmf.probs.size - 1, add_pmf.lower_index + add_pmf.probs.size - 1, 0)
        delta = profile_on_lattice(remove_pmf, k_max)
        delta_add = profile_on_lattice(add_pmf, k_max)
        excess = max(0.0, add_pmf.p_mass - 1.0)
        gap = max(0.0, float((delta_add - excess - delta).max()))
        if gap > 0.0:
            # Guarded path: the vertices of max(delta_R, delta_A) by differences of profile values.
            eps = np.arange(k_max + 1) * remove_pmf.step
            return curve_from_profile(eps, np.maximum(delta, delta_add), add_direction_gap=gap)
    # No guard needed: the remove direction's curve, vertices from sums of positive terms (curve_from_remove_pmf).
    return curve_from_remove_pmf(remove_pmf)


_EPS_CAP = 700.0  # e^eps must stay finite in float64


def curve_from_remove_pmf(pmf, delta_offset: float = 0.0, *, exact_vertices: bool = True) -> SymmetricCurve:
    """Same curve as ``curve_from_loss_pmf(pmf)`` on the grid {0} U [max(lo, 1), min(top, 700 / step)] only.

    Below the lowest atom (lo > 0, typical at large T) delta(eps) = sum p (1 - e^{eps - l}) is affine in e^eps, so
    all the lattice lines in (0, lo * step) meet in one vertex with the line at 0 and the one at lo: dropping them
    leaves the curve unchanged and saves lo points of work and memory (lo is 11 million for sigma=0.6, q=0.1,
    T=1e4 at step 1e-4). Lines with eps > 700 (e^eps overflows) are dropped: fewer lines give a lower, still
    pessimistic curve whose profile floors at delta(700) (epsilon_at below that floor is +inf).

    ``exact_vertices=False`` takes the vertices from differences of the profile values (:func:`curve_from_profile`):
    cheaper, as valid for epsilon read at deltas >= ~1e-12, but imprecise near the axes (beta < ~1e-12); for
    estimates that read epsilon only (the engine's doubled-step comparison).
    """
    if exact_vertices:
        return remove_profile(pmf, delta_offset).curve()
    pmf = pmf.with_roundoff_allowance()
    if pmf.probs.size == 0:
        return curve_from_profile(np.array([0.0]), np.array([pmf.infinity_mass]))
    ks, delta, _, _, _ = _remove_sums(pmf, delta_offset)
    return curve_from_profile(ks * pmf.step, delta)


def _remove_sums(pmf, delta_offset: float):
    """(lattice indices k of the lines, delta(k step) on them, suffix_p, suffix_w, w_all) of a non-empty PMF whose
    round-off allowance is applied: the sums :func:`curve_from_remove_pmf` reads its lines and vertices from."""
    p = pmf.probs
    lo = pmf.lower_index
    step = pmf.step
    n = p.size
    suffix_p = np.concatenate([np.cumsum(p[::-1])[::-1][1:], [0.0]])  # sum_{m > i} p[m]
    suffix_w = _suffix_decay(p, math.exp(-step))  # sum_{m > i} p[m] e^{-(m - i) step}
    k_top = max(0, min(lo + n - 1, math.floor(_EPS_CAP / step)))
    inside = np.arange(max(lo, 0), k_top + 1)
    extra = [0] if inside.size == 0 or inside[0] != 0 else []
    if inside.size == 0 and k_top > 0:
        inside = np.array([k_top])  # the whole support lies above the cap: the profile is affine up to it
    ks = np.concatenate([np.array(extra, dtype=np.int64), inside.astype(np.int64)])
    below = ks < lo
    i = np.clip(ks - lo, 0, n - 1)
    delta = np.clip(suffix_p[i] - suffix_w[i], 0.0, None)
    w_all = 0.0
    if below.any():
        # eps_k below every atom: sum p (1 - e^{eps_k - l}) = sum p - e^{(k - lo) step} sum p e^{-(l - lo step)}.
        w_all = float(np.sum(p * np.exp(-step * np.arange(n))))
        delta = np.where(below, np.clip(p.sum() - np.exp((ks - lo) * step) * w_all, 0.0, None), delta)
    delta = delta + pmf.infinity_mass
    if delta_offset:
        # Lower bounds on a profile (optimistic side): every value lowered by the same certified slack.
        delta = np.clip(delta - delta_offset, 0.0, None)
    return ks, delta, suffix_p, suffix_w, w_all


@dataclasses.dataclass(frozen=True, eq=False)
class RemoveProfile:
    """The first half of :func:`curve_from_remove_pmf`: a remove PMF's lines (``eps``, and ``delta`` made
    non-increasing and clipped to [0, 1], as the curve keeps them) with the sums its vertices are read from.
    :meth:`curve` finishes the curve; the engine reads the lines first to decide whether the composition's tail is
    recomputed before any vertex is computed (``gdpcore.engine.base``)."""

    pmf: Any
    """The PMF with its round-off allowance applied."""
    ks: np.ndarray
    eps: np.ndarray
    delta: np.ndarray
    sums: tuple[np.ndarray, np.ndarray, float] | None
    delta_offset: float

    def curve(self) -> SymmetricCurve:
        """The curve :func:`curve_from_remove_pmf` returns."""
        if self.sums is None:
            return curve_from_profile(self.eps, self.delta)
        suffix_p, suffix_w, w_all = self.sums
        alpha, tail, beta = _vertices_on_grid(
            self.pmf, self.ks, suffix_p, suffix_w, w_all, float(self.delta[-1]), self.delta_offset
        )
        return _finish(self.eps, self.delta, alpha, tail, 0.0, beta=beta, optimistic=not self.pmf.pessimistic)


def remove_profile(pmf, delta_offset: float = 0.0) -> RemoveProfile:
    """The lines of ``curve_from_remove_pmf(pmf, delta_offset)`` and what its vertices need (:class:`RemoveProfile`)."""
    pmf = pmf.with_roundoff_allowance()
    if pmf.probs.size == 0:
        return RemoveProfile(
            pmf, np.zeros(1, dtype=np.int64), np.array([0.0]), np.array([pmf.infinity_mass]), None, 0.0
        )
    ks, delta, suffix_p, suffix_w, w_all = _remove_sums(pmf, delta_offset)
    delta = np.clip(np.maximum.accumulate(delta[::-1])[::-1], 0.0, 1.0)
    return RemoveProfile(pmf, ks, ks * pmf.step, delta, (suffix_p, suffix_w, w_all), delta_offset)


_U = float(np.finfo(float).eps) / 2.0


def _vertices_on_grid(pmf, ks, suffix_p, suffix_w, w_all: float, delta_top: float, offset: float):
    """Steep vertices of the lines at eps_k, k in ``ks`` (increasing, no atom strictly between consecutive k), from
    sums of positive terms, moved to the safe side of their float error and of ``offset``.

    ``pmf`` has its round-off allowance applied (pessimistic: every atom raised; optimistic: lowered, so its total
    is short of 1); ``suffix_p``, ``suffix_w`` and ``w_all`` are :func:`curve_from_remove_pmf`'s sums. For any sub-
    or super-probability lattice PMF p with +inf mass m, the lines 1 - delta_p(eps_k) - e^{eps_k} alpha meet,
    between eps_a and the next grid line, at alpha_a = sum_{l > eps_a} p e^-l = e^{-eps_a} suffix_w and
    beta_a = (1 - sum p - m) + sum_{l <= eps_a} p (Thm A.10 with the mass deficit counted where delta_p does not see
    it); a profile lowered by ``offset`` raises every beta by it. :func:`curve_from_profile` computes the same
    vertices from differences of profile values, which lose all precision where beta < ~1e-12 (delta within 1e-12
    of 1: mu read near the axes put an optimistic FNR at 0.2-0.6 of its true value,
    tests/test_properties.py::test_curve_vertices_near_the_axes_stay_on_their_side). Float error: running sums of n
    positive terms (cumsum, the lfilter recursion) are within 4 n u relative, the total within (log2 n + 3) u;
    pessimistic vertices move left and down by those bounds, optimistic ones right and up (either keeps the
    piecewise-linear curve on its side of the exact one). Ordered as :class:`SymmetricCurve` stores them: vertex 0
    is (0, 1 - delta_K), then k decreasing.
    """
    p = pmf.probs
    n = p.size
    lo = pmf.lower_index
    m_inf = float(pmf.infinity_mass)
    ka = ks[:-1]
    i = np.clip(ka - lo, 0, n - 1)  # the atom at eps_a (clipped where eps_a lies below every atom)
    with np.errstate(under="ignore"):
        alpha = suffix_w[i] * np.exp(-pmf.step * ka)
    above = suffix_p[i]
    below = np.cumsum(p)[i]
    total = float(np.sum(p))
    beneath = ka < lo
    if beneath.any():
        alpha = np.where(beneath, math.exp(-pmf.step * lo) * w_all, alpha)
        above = np.where(beneath, total, above)
        below = np.where(beneath, 0.0, below)
    deficit = 1.0 - total - m_inf
    sum_err = (math.log2(max(n, 2)) + 3.0) * _U * (total + m_inf + 1.0)
    rel = 4.0 * (n + 2) * _U
    # beta from the sums below eps_a (with the deficit, absolute error sum_err) and tail = 1 - beta from the sums
    # above it (relative error only: no cancellation, so tiny tails keep their precision and the lines stay within
    # rel of the profile values that locate their cells) are each a valid bound on its side; each is taken from
    # whichever is the tighter.
    if pmf.pessimistic:
        # Mass the PMF is short of could sit anywhere: on the pessimistic side it is put at +inf (it raises the tail),
        # never below eps_a (that would raise beta); an excess only lowers beta.
        # In place on the fresh arrays above (the same operations in the same order: no temporaries).
        alpha *= 1.0 - rel
        beta_low = below
        beta_low *= 1.0 - rel
        beta_low += min(deficit, 0.0)
        beta_low -= sum_err
        tail_high = above
        tail_high *= 1.0 + rel
        tail_high += m_inf
        tail_high += max(deficit, 0.0)
        beta = np.clip(np.maximum(beta_low, 1.0 - tail_high), 0.0, 1.0)
        tail = np.clip(np.minimum(tail_high, 1.0 - beta_low), 0.0, 1.0)
    else:
        alpha *= 1.0 + rel
        np.minimum(alpha, 1.0, out=alpha)
        beta_high = below
        beta_high *= 1.0 + rel
        beta_high += deficit
        beta_high += offset
        beta_high += sum_err
        tail_low = above
        tail_low *= 1.0 - rel
        tail_low += m_inf
        tail_low -= offset
        # A trade-off curve never exceeds 1 - alpha: capping there keeps every vertex above the true curve.
        beta = np.clip(np.minimum(np.minimum(beta_high, 1.0 - tail_low), 1.0 - alpha), 0.0, 1.0)
        tail = np.clip(np.maximum(np.maximum(tail_low, 1.0 - beta_high), alpha), 0.0, 1.0)
    return (
        np.concatenate([[0.0], alpha[::-1]]),
        np.concatenate([[delta_top], tail[::-1]]),
        np.concatenate([[1.0 - delta_top], beta[::-1]]),
    )
