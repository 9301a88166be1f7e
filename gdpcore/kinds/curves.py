"""Curves as input: a privacy profile on a grid, a piecewise-linear trade-off curve and a dp_accounting PLD.

An auditor who holds only another accountant's output (seed 000 Sec. 6: "accept a user-supplied PLD or profile, or
any piecewise-linear f") gets the same report, card and sweep row as for any other kind: each input becomes a
*discrete dominating pair* (:class:`DiscretePair`: the upper law's masses at finite privacy losses, plus its mass at
+inf), whose ``pld`` hook rounds the losses onto the engine's lattice - up on the pessimistic side, down on the
optimistic side (dp_accounting's ``from_two_probability_mass_functions`` rule) - so the engine brackets the input's
curve exactly as it brackets a mechanism's.

**The bound type.** A user's curve is what the user says it is: nothing here can check it against a mechanism. Every
number derived from one of these kinds is a bound *relative to the input* (upper / lower as labelled: the pessimistic
end is an upper bound on the privacy profile the input states, the optimistic end a lower bound on it), and the
report's accountant says so (:data:`USER_SUPPLIED`, :attr:`KindSpec.input_note`).

The three inputs:

* :class:`PrivacyProfile` - (eps_i, delta_i) on a grid. Each point is an (eps_i, delta_i)-DP statement, i.e.
  f_{eps_i, delta_i}-DP with f_{eps,delta}(alpha) = max(0, 1 - delta - e^eps alpha, e^{-eps}(1 - delta - alpha))
  (seed 000 Eq. 2); the mechanism satisfies all of them, so its curve is f = max_i f_{eps_i, delta_i} (seed 000
  Thm 2.4, Eq. 3, with the sup over the grid only). Between grid points this is the *weakest* curve the statements
  allow: a profile sampled from a mechanism gives a curve below the mechanism's (mu above its mu).
* :class:`TradeoffCurve` - breakpoints (fpr_i, fnr_i) of a convex piecewise-linear f, from (0, f(0)) to (a, 0).
  Testing P against Q with f = T(P, Q), segment j is an outcome with P-mass fpr_j - fpr_{j-1} and Q-mass
  fnr_{j-1} - fnr_j (Neyman-Pearson: likelihood ratio = minus the slope; seed 000 Thm A.10 read backwards), and
  1 - f(0) is Q-mass where P = 0.
  **Asymmetric input**: a mechanism with T(M(S), M(S')) >= f for one order of each neighbouring pair has
  T >= f^{-1} for the other order, so every pair of the relation (add/remove and replace-one both contain both
  orders) has T >= min(f, f^{-1}), and T is convex: T >= conv(min(f, f^{-1})). That symmetrisation is what is
  analysed (Dong, Roth & Su 2022 Def. F.1, its first case; its other case, max(f, f^{-1}), would claim more than
  the input says and is never taken). It equals the pointwise max of the two directions' profiles, as the engine
  symmetrises an asymmetric PLD (:func:`gdpcore.curve.curve_from_loss_pmf`). A symmetric input is analysed as
  given; an asymmetric one is lowered by at most :attr:`TradeoffCurve.asymmetry`, which the report's accountant
  states.
* :class:`PrivacyLossDistributionInput` - the PMFs of a dp_accounting ``PrivacyLossDistribution`` (both adjacency
  directions, each with its +inf mass). dp_accounting has no serialised form of a PLD; this kind's JSON is one
  (:func:`from_pld`). Only a pessimistic PLD is accepted (its delta(eps) is the upper bound the user states); a
  negative round-off atom is moved to the +inf mass (never dropped). An asymmetric PLD keeps both directions: the
  engine's profile is their pointwise max (:func:`gdpcore.curve.curve_from_loss_pmf`), the same symmetrisation.

Limits: a curve with a real catastrophic mass (f(0) < 1 by more than ``gdpcore.curve.INFINITY_MASS_TOLERANCE``, e.g.
one (eps, delta) statement) gets its pessimistic end right (mu = inf, eps = inf below that mass), but the engine's
optimistic twin treats +inf mass as tail truncation and drops it (:func:`gdpcore.engine.generic_parts`), so such a
report's lower ends are loose and its status "tolerance_not_met"; both ends stay valid bounds. The RDP of a pair with
+inf mass is +inf (exact). A dp_accounting PMF is read as given: one whose total mass exceeds 1 (up to
``PLD_MASS_SLACK``) is not a probability law, and its RDP and rho are those of the PMF as written.

Every rejection is a ``ValueError`` (:class:`gdpcore.mechanisms.ParameterError` from :func:`from_tradeoff_curve`,
:func:`from_privacy_profile`, :func:`from_pld`) naming the field, the index and the values (bounded).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy import special

from gdpcore import closed_form
from gdpcore._validation import Choice, Constraint, bounded_repr
from gdpcore.kinds._common import floats_text, log_uniform, relation
from gdpcore.kinds.registry import KindSpec, Unsupported
from gdpcore.mechanisms import NEIGHBOURING_RELATIONS, Mechanism, ParameterError, param

__all__ = [
    "PRIVACY_LOSS_DISTRIBUTION",
    "PRIVACY_PROFILE",
    "TRADEOFF_CURVE",
    "USER_SUPPLIED",
    "DiscretePair",
    "PrivacyLossDistributionInput",
    "PrivacyProfile",
    "TradeoffCurve",
    "from_pld",
    "from_privacy_profile",
    "from_tradeoff_curve",
]

USER_SUPPLIED = "user-supplied"
"""First word of every input note: the numbers are bounds relative to what the user supplied."""

CURVE_TOLERANCE = 1e-12
"""Floating-point slack of the checks on a user's curve (convexity, f <= 1 - alpha, a symmetric input): a violation
within it is repaired on the safe side (the point lowered onto the bound or the lower convex hull), beyond it
rejected."""

MAX_EPSILON = 700.0
"""Largest epsilon a profile point may state: e^eps must stay finite in float64 (``gdpcore.curve`` caps alike)."""

PLD_MASS_SLACK = 1e-3
"""How far above 1 a PLD direction's total mass may be: dp_accounting's composed add-direction PMFs carry excess mass
at fine discretisation (1.0000675 at sigma 0.7, q 0.1, T 2500, step 1e-4; gdpcore.accounting). More is refused."""

MAX_LOSS = 100.0
"""Largest |privacy loss| put on the engine's lattice (2e6 atoms at step 1e-4): a loss beyond it is moved to the safe
side of each end (:meth:`DiscretePair.rounded`); it moves delta(eps) by at most e^{eps - 100} of its mass for eps
below 100."""

_SNAP = 1e-9
"""Losses within this many lattice steps of a lattice point are put on it (float noise of k * d_user / d): moves a
loss by at most 1e-9 steps."""

_RELATION_DOC = "neighbouring relation the supplied guarantee is stated for"


# ---------------------------------------------------------------------------------------------------------------------
# Parameters: lists of numbers stored as canonical text, checked with the index of the offending point
# ---------------------------------------------------------------------------------------------------------------------
def _numbers(name: str, value: Any) -> np.ndarray:
    """``value`` (comma-separated text, list, tuple or 1-d array) as finite floats; errors name the index. Parsed
    in one numpy call; the element-wise pass runs only to name the first bad element."""
    if isinstance(value, str):
        parts = value.split(",") if value.strip() else []
        try:
            arr = np.array(parts, dtype=float)
        except ValueError:
            for i, p in enumerate(parts):
                try:
                    float(p)
                except ValueError:
                    raise ValueError(f"{name}[{i}] must be a number, got {bounded_repr(p.strip())}") from None
            raise
    elif isinstance(value, list | tuple | np.ndarray):
        raw = value if isinstance(value, np.ndarray) else np.asarray(value, dtype=object)
        if raw.ndim != 1:
            raise ValueError(f"{name} must be a 1-d list of numbers, got an array of shape {raw.shape}")
        if raw.dtype.kind in "iuf":
            arr = raw.astype(float)
        else:
            nums = []
            for i, v in enumerate(raw):
                if isinstance(v, bool | np.bool_) or not isinstance(v, int | float | np.integer | np.floating):
                    raise ValueError(f"{name}[{i}] must be a number, got {bounded_repr(v)}")
                try:
                    nums.append(float(v))
                except OverflowError:  # an int beyond the float range
                    raise ValueError(f"{name}[{i}] must be a finite real, got {bounded_repr(v)}") from None
            arr = np.asarray(nums, dtype=float)
    else:
        raise ValueError(f"{name} must be a list of numbers, got {bounded_repr(value)}")
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty, got {bounded_repr(value)}")
    bad = _first(~np.isfinite(arr))
    if bad is not None:
        raise ValueError(f"{name}[{bad}] must be a finite real, got {float(arr[bad])!r}")
    return arr


def _text(arr: np.ndarray) -> str:
    """Canonical comma-separated text of floats (Python's shortest round-trip repr)."""
    return ",".join(map(repr, np.asarray(arr, dtype=float).tolist()))


class Numbers(Constraint):
    """A non-empty list of finite reals, stored as canonical comma-separated text (the kind stays flat: one column,
    one ``--flag``); every rejection names the index of the point."""

    type = str

    def check(self, name: str, value: Any) -> str:
        return _text(_numbers(name, value))

    def describe(self) -> str:
        return "comma-separated finite reals"


def _values(text: str) -> np.ndarray:
    return np.array(text.split(","), dtype=float)


def _point(name: str, arr: np.ndarray, i: int) -> str:
    return f"{name}[{i}] = {float(arr[i])!r}"


# ---------------------------------------------------------------------------------------------------------------------
# The one internal representation: a discrete dominating pair
# ---------------------------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, eq=False)
class DiscretePair:
    """One adjacency direction of a discrete pair (P, Q) with f = T(P, Q): the upper law Q's masses at the finite
    privacy losses log(Q/P) (``losses``, any order) and its mass where P = 0 (``infinity_mass``). Q-mass where Q = 0
    (loss -inf) adds nothing to any delta(eps) and is left out. dp_accounting's convention: delta(eps) =
    sum_o [Q(o) - e^eps P(o)]_+ (``PrivacyLossDistribution``)."""

    losses: np.ndarray
    masses: np.ndarray
    infinity_mass: float

    def delta(self, epsilon: float) -> float:
        """delta(eps) of the pair (exact, for tests and checks)."""
        keep = self.losses > epsilon
        return float(np.sum(self.masses[keep] * -np.expm1(epsilon - self.losses[keep])) + self.infinity_mass)

    def pure_epsilon(self) -> float:
        if self.infinity_mass > 0.0:
            return math.inf
        pos = self.masses > 0.0
        return float(max(0.0, np.max(self.losses[pos]))) if pos.any() else 0.0

    def log_rdp_sum(self, t: np.ndarray) -> np.ndarray:
        """log sum_o Q(o) (Q(o)/P(o))^(t-1) at each order t (inf with +inf mass)."""
        if self.infinity_mass > 0.0:
            return np.full(np.shape(t), math.inf)
        pos = self.masses > 0.0
        logm, loss = np.log(self.masses[pos]), self.losses[pos]
        out = np.empty(np.size(t))
        for i, ti in enumerate(np.ravel(t)):  # orders one at a time: at most a few hundred, atoms vectorised
            out[i] = special.logsumexp(logm + (ti - 1.0) * loss)
        return out.reshape(np.shape(t))

    def rounded(self, step: float, pessimistic: bool) -> tuple[dict[int, float], float]:
        """(lattice index -> mass, +inf mass) at ``step``: losses rounded up (pessimistic: every delta(eps) can only
        grow) or down (optimistic: every delta(eps) can only shrink), as dp_accounting rounds a pair's losses.
        Losses beyond +-``MAX_LOSS`` are moved the same way: above it to +inf (pessimistic) or onto it (optimistic),
        below -``MAX_LOSS`` onto it (pessimistic) or dropped (optimistic: no delta(eps >= 0) reads them)."""
        losses, masses, inf = self.losses, self.masses, float(self.infinity_mass)
        big, small = losses > MAX_LOSS, losses < -MAX_LOSS
        if pessimistic:
            inf = min(1.0, inf + float(masses[big].sum()))
            losses, masses = np.maximum(losses[~big], -MAX_LOSS), masses[~big]
        else:
            losses, masses = np.minimum(losses[~small], MAX_LOSS), masses[~small]
        r = losses / step
        near = np.round(r)
        r = np.where(np.abs(r - near) <= _SNAP, near, r)
        idx = np.ceil(r) if pessimistic else np.floor(r)
        keys, inv = np.unique(idx.astype(np.int64), return_inverse=True)
        sums = np.bincount(inv, weights=masses, minlength=keys.size)
        return {int(k): float(v) for k, v in zip(keys, sums, strict=True) if v > 0.0}, inf


def _pld(pairs: tuple[DiscretePair, DiscretePair | None], step: float, pessimistic: bool):
    """The dp_accounting PLD of (remove pair, add pair or None when symmetric) at ``step``."""
    pmfs: list[pld_pmf.PLDPmf | None] = []
    for pair in pairs:
        if pair is None:
            pmfs.append(None)
            continue
        probs, inf = pair.rounded(step, pessimistic)
        if not probs:  # every finite loss is -inf: delta(eps) is the +inf mass alone
            probs = {0: 0.0}
        pmfs.append(pld_pmf.create_pmf(probs, step, inf, pessimistic))
    return pld_lib.PrivacyLossDistribution(pmfs[0], pmfs[1])


def _rdp(pairs: tuple[DiscretePair, DiscretePair | None], t: Any) -> np.ndarray:
    """RDP of the pair(s) at orders ``t`` > 1: the larger of the two directions (exact for the pair)."""
    t = np.asarray(t, dtype=float)
    out = np.full(t.shape, 0.0)
    for pair in pairs:
        if pair is not None:
            with np.errstate(over="ignore"):
                out = np.maximum(out, pair.log_rdp_sum(t) / (t - 1.0))
    return np.maximum(out, 0.0)


_RHO_ORDERS = np.geomspace(1.0 + 1e-6, 1e4, 400)


def _rho(pairs: tuple[DiscretePair, DiscretePair | None]) -> tuple[float, str, str]:
    """A certified upper bound on rho* = sup_{t > 1} eps(t)/t: eps(t) is non-decreasing in t, so on each cell
    [t_a, t_b] of a geometric grid eps(t)/t <= eps(t_b)/t_a, and beyond the last order eps(t)/t <= eps_pure/t;
    ``"upper"`` (the grid's ratio 1.024 sets its slack)."""
    t = _RHO_ORDERS
    eps = _rdp(pairs, t)
    if not np.all(np.isfinite(eps)):
        return math.inf, "upper", "any"
    cells = eps[1:] / t[:-1]
    # t -> 1: eps(t) -> KL, bounded on (1, t_0] by eps(t_0) / 1.
    pure = max(p.pure_epsilon() for p in pairs if p is not None)
    return float(max(np.max(cells), eps[0], pure / t[-1])), "upper", "any"


# ---------------------------------------------------------------------------------------------------------------------
# (a) privacy profile on a grid
# ---------------------------------------------------------------------------------------------------------------------
def _check_profile(eps: np.ndarray, delta: np.ndarray) -> None:
    if eps.size != delta.size:
        raise ValueError(
            f"epsilons and deltas must have the same length, got {eps.size} epsilons and {delta.size} deltas"
        )
    i = _first(~((eps >= 0.0) & (eps <= MAX_EPSILON)))
    if i is not None:
        raise ValueError(f"epsilons must be in [0, {MAX_EPSILON:g}]: {_point('epsilons', eps, i)}")
    i = _first(~((delta >= 0.0) & (delta <= 1.0)))
    if i is not None:
        raise ValueError(f"deltas must be in [0, 1]: {_point('deltas', delta, i)} (at epsilon {float(eps[i])!r})")
    i = _first(np.diff(eps) <= 0.0)
    if i is not None:
        raise ValueError(
            f"epsilons must be strictly increasing: {_point('epsilons', eps, i + 1)} <= {_point('epsilons', eps, i)}"
        )
    i = _first(np.diff(delta) > 0.0)
    if i is not None:
        raise ValueError(
            f"deltas must be non-increasing in epsilon (a privacy profile): {_point('deltas', delta, i + 1)} > "
            f"{_point('deltas', delta, i)}"
        )


def _first(bad: np.ndarray) -> int | None:
    """Index of the first True, or None."""
    idx = np.flatnonzero(bad)
    return int(idx[0]) if idx.size else None


def profile_pair(eps: np.ndarray, delta: np.ndarray) -> DiscretePair:
    """The symmetric discrete pair of f = max_i f_{eps_i, delta_i} (the curve's steep half and its mirror image).
    Validated input (:func:`_check_profile`): eps strictly increasing, delta non-increasing.

    The steep half (alpha up to the fixed point alpha*, slopes <= -1 by symmetry and convexity) is the upper envelope
    of the lines beta = 1 - delta_i - e^{eps_i} alpha, i.e. the lower envelope of tail(alpha) = 1 - beta =
    min_i (delta_i + e^{eps_i} alpha) (seed 000 Eq. 3; the construction of :mod:`gdpcore.curve`). The segment of line i, of length a_i,
    is an outcome with loss eps_i (P-mass a_i, Q-mass e^{eps_i} a_i); its mirror image an outcome with loss -eps_i
    (Q-mass a_i); tail(0) = min_i delta_i is Q-mass where P = 0. Masses sum to tail(alpha*) + alpha* = 1.
    """
    hull: list[tuple[float, float, float, float]] = []  # (eps, delta, slope e^eps, start alpha)
    for i in range(eps.size - 1, -1, -1):  # slopes decreasing
        e, d = float(eps[i]), float(delta[i])
        s = math.exp(e)
        start = 0.0
        while hull:
            _, d0, s0, x0 = hull[-1]
            x = (d - d0) / (s0 - s)  # where the new (shallower) line meets the top one
            if x <= x0:
                hull.pop()
                continue
            start = x
            break
        hull.append((e, d, s, start))
    losses, masses = [], []
    for j, (e, d, s, start) in enumerate(hull):
        end = hull[j + 1][3] if j + 1 < len(hull) else math.inf
        fixed = (1.0 - d) / (1.0 + s)  # where this line meets the diagonal
        stop = min(end, fixed)
        a = stop - start
        if a > 0.0:
            losses += [e, -e]
            masses += [s * a, a]
        if fixed <= end:
            break
    return DiscretePair(np.asarray(losses, float), np.asarray(masses, float), float(np.min(delta)))


@dataclasses.dataclass(frozen=True, kw_only=True)
class PrivacyProfile(Mechanism):
    """A privacy profile on a grid: the mechanism is (eps_i, delta_i)-DP for every i; its curve is the intersection
    max_i f_{eps_i, delta_i} (see the module docstring). Bounds are relative to the supplied profile."""

    kind: ClassVar[str] = "privacy_profile"
    epsilons: str = param(
        "the epsilons of the profile points (comma separated, strictly increasing, in [0, 700])",
        Numbers(),
        lake_column="profile_epsilons",
    )
    deltas: str = param(
        "delta(epsilon) at each epsilon (comma separated, in [0, 1], non-increasing)",
        Numbers(),
        lake_column="profile_deltas",
    )
    neighbouring: str = param(_RELATION_DOC, Choice(NEIGHBOURING_RELATIONS), default="add_remove")

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_profile(_values(self.epsilons), _values(self.deltas))

    def pair(self) -> DiscretePair:
        return _cached(self, "_pair", lambda: profile_pair(_values(self.epsilons), _values(self.deltas)))


# ---------------------------------------------------------------------------------------------------------------------
# (b) piecewise-linear trade-off curve
# ---------------------------------------------------------------------------------------------------------------------
def _check_curve(fpr: np.ndarray, fnr: np.ndarray, names: tuple[str, str] = ("fpr", "fnr")) -> np.ndarray:
    """Validate breakpoints; returns fnr repaired on the safe side within ``CURVE_TOLERANCE`` (f <= 1 - alpha).
    ``names`` are what the errors call the two lists (the contract's fpr / fnr, or the kind's fields)."""
    xn, yn = names
    if fpr.size != fnr.size:
        raise ValueError(f"{xn} and {yn} must have the same length, got {fpr.size} and {fnr.size} values")
    if fpr.size < 2:
        raise ValueError(f"{xn} must hold at least two breakpoints, got {fpr.size}")
    for name, arr in ((xn, fpr), (yn, fnr)):
        out = _first((arr < 0.0) | (arr > 1.0))
        if out is not None:
            raise ValueError(f"{name} must be in [0, 1]: {_point(name, arr, out)}")
    if fpr[0] != 0.0:
        raise ValueError(f"{xn} must start at 0 (the curve from alpha = 0 on): {_point(xn, fpr, 0)}")
    if fnr[-1] != 0.0:
        raise ValueError(f"{yn} must end at 0 (the curve down to beta = 0): {_point(yn, fnr, fnr.size - 1)}")
    i = _first(np.diff(fpr) <= 0.0)
    if i is not None:
        raise ValueError(f"{xn} must be strictly increasing: {_point(xn, fpr, i + 1)} <= {_point(xn, fpr, i)}")
    i = _first(np.diff(fnr) > 0.0)
    if i is not None:
        raise ValueError(f"{yn} must be non-increasing: {_point(yn, fnr, i + 1)} > {_point(yn, fnr, i)}")
    over = fnr - (1.0 - fpr)
    bad = np.flatnonzero(over > CURVE_TOLERANCE)
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"{yn} must satisfy f(alpha) <= 1 - alpha (no test does worse than a coin): {_point(yn, fnr, i)} > "
            f"1 - {_point(xn, fpr, i)}"
        )
    fnr = np.minimum(fnr, 1.0 - fpr)  # within the slack: lowered onto the bound (a weaker curve)
    # Convex: each inner point lies on or below the chord of its neighbours (cross product of the two segments >= 0).
    dx, dy = np.diff(fpr), np.diff(fnr)
    j = _first(dx[:-1] * dy[1:] - dx[1:] * dy[:-1] < -CURVE_TOLERANCE)
    if j is not None:
        i = j + 1
        raise ValueError(
            f"{yn} must be convex in {xn}: breakpoint {i} ({_point(xn, fpr, i)}, {_point(yn, fnr, i)}) lies above "
            f"the chord from breakpoint {i - 1} ({float(fpr[i - 1])!r}, {float(fnr[i - 1])!r}) to breakpoint "
            f"{i + 1} ({float(fpr[i + 1])!r}, {float(fnr[i + 1])!r})"
        )
    return fnr


def _lower_hull(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lower convex hull of the points (monotone chain), left to right."""
    order = np.lexsort((y, x))
    hx: list[float] = []
    hy: list[float] = []
    for i in order:
        px, py = float(x[i]), float(y[i])
        if hx and px == hx[-1]:
            continue  # same x, higher y (sorted): not on the lower hull
        while len(hx) >= 2 and (hx[-1] - hx[-2]) * (py - hy[-2]) - (hy[-1] - hy[-2]) * (px - hx[-2]) <= 0.0:
            hx.pop()
            hy.pop()
        hx.append(px)
        hy.append(py)
    return np.asarray(hx), np.asarray(hy)


def symmetrised(fpr: np.ndarray, fnr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vertices of conv(min(f, f^{-1})) (module docstring): the lower convex hull of the vertices of f,
    their mirror images (the vertices of f^{-1}) and (1, 0), cut where it first reaches 0."""
    x = np.concatenate([fpr, fnr, [1.0]])
    y = np.concatenate([fnr, fpr, [0.0]])
    hx, hy = _lower_hull(x, y)
    first_zero = int(np.flatnonzero(hy <= 0.0)[0])
    return hx[: first_zero + 1], np.maximum(hy[: first_zero + 1], 0.0)


def curve_pair(fpr: np.ndarray, fnr: np.ndarray) -> DiscretePair:
    """The discrete pair (P, Q) with T(P, Q) the convex piecewise-linear curve through the vertices (Neyman-Pearson:
    segment j is an outcome with P-mass fpr_j - fpr_{j-1}, Q-mass fnr_{j-1} - fnr_j; 1 - f(0) is Q-mass where
    P = 0; flat segments at beta = 0 carry no Q-mass)."""
    p = np.diff(fpr)
    q = -np.diff(fnr)
    keep = q > 0.0
    return DiscretePair(np.log(q[keep] / p[keep]), q[keep], float(1.0 - fnr[0]))


@dataclasses.dataclass(frozen=True, kw_only=True)
class TradeoffCurve(Mechanism):
    """A convex piecewise-linear trade-off curve f given by its breakpoints (fpr_i, fnr_i), from (0, f(0)) to a
    point with fnr 0, linear between them; asymmetric input is analysed as its symmetrisation (module docstring).
    Bounds are relative to the supplied curve."""

    kind: ClassVar[str] = "tradeoff_curve"
    breakpoint_fpr: str = param(
        "false-positive rates of the breakpoints (comma separated, from 0, strictly increasing)",
        Numbers(),
    )
    breakpoint_fnr: str = param(
        "false-negative rates f(fpr) at the breakpoints (comma separated, non-increasing, convex, to 0, "
        "f(alpha) <= 1 - alpha)",
        Numbers(),
    )
    neighbouring: str = param(_RELATION_DOC, Choice(NEIGHBOURING_RELATIONS), default="add_remove")

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_curve(_values(self.breakpoint_fpr), _values(self.breakpoint_fnr), ("breakpoint_fpr", "breakpoint_fnr"))

    def symmetric_vertices(self) -> tuple[np.ndarray, np.ndarray]:
        """The vertices of the curve analysed: conv(min(f, f^{-1})) (f itself when the input is symmetric)."""

        def build() -> tuple[np.ndarray, np.ndarray]:
            fpr = _values(self.breakpoint_fpr)
            return symmetrised(fpr, _check_curve(fpr, _values(self.breakpoint_fnr)))

        return _cached(self, "_vertices", build)

    @property
    def asymmetry(self) -> float:
        """How far the analysed (symmetrised) curve lies below the supplied one, max over the breakpoints (0 for a
        symmetric input up to ``CURVE_TOLERANCE``)."""
        fpr, fnr = _values(self.breakpoint_fpr), _values(self.breakpoint_fnr)
        sx, sy = self.symmetric_vertices()
        # Both piecewise linear: the largest gap is at a vertex of one of them.
        x = np.concatenate([fpr, sx])
        below = np.interp(x, np.append(fpr, 1.0), np.append(fnr, 0.0)) - np.interp(
            x, np.append(sx, 1.0), np.append(sy, 0.0)
        )
        value = float(max(0.0, np.max(below)))
        return 0.0 if value <= CURVE_TOLERANCE else value

    def pair(self) -> DiscretePair:
        return _cached(self, "_pair", lambda: curve_pair(*self.symmetric_vertices()))


# ---------------------------------------------------------------------------------------------------------------------
# (c) dp_accounting PrivacyLossDistribution
# ---------------------------------------------------------------------------------------------------------------------
_PMF_FIELDS = ("discretization", "lower_index", "infinity_mass", "probs")


def _pmf_text(discretization: float, lower_index: int, infinity_mass: float, probs: np.ndarray) -> str:
    """The canonical text of one direction's PMF: ``discretization=..;lower_index=..;infinity_mass=..;probs=..``,
    zero atoms at both ends trimmed (the lower index moved along)."""
    nonzero = np.flatnonzero(probs != 0.0)
    if nonzero.size:
        lower_index += int(nonzero[0])
        probs = probs[nonzero[0] : nonzero[-1] + 1]
    else:
        probs = np.zeros(1)
    return (
        f"discretization={float(discretization)!r};lower_index={int(lower_index)};"
        f"infinity_mass={float(infinity_mass)!r};probs={_text(probs)}"
    )


def _parse_pmf(name: str, text: str) -> tuple[float, int, float, np.ndarray]:
    fields: dict[str, str] = {}
    for part in text.split(";"):
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in _PMF_FIELDS:
            raise ValueError(
                f"{name} must read {';'.join(f + '=...' for f in _PMF_FIELDS)}, got part {bounded_repr(part)}"
            )
        if key.strip() in fields:
            raise ValueError(f"{name} gives {key.strip()} twice")
        fields[key.strip()] = value.strip()
    missing = [f for f in _PMF_FIELDS if f not in fields]
    if missing:
        raise ValueError(f"{name} lacks {', '.join(missing)} (fields {', '.join(_PMF_FIELDS)})")
    try:
        d = float(fields["discretization"])
        lower = int(fields["lower_index"])
        inf = float(fields["infinity_mass"])
    except ValueError:
        raise ValueError(
            f"{name} fields discretization, lower_index (an integer) and infinity_mass must be numbers, got "
            f"{bounded_repr(fields['discretization'])}, {bounded_repr(fields['lower_index'])}, "
            f"{bounded_repr(fields['infinity_mass'])}"
        ) from None
    probs = _numbers(f"{name} probs", fields["probs"])
    return d, lower, inf, probs


def _check_pmf(name: str, d: float, lower: int, inf: float, probs: np.ndarray) -> tuple[float, int, float, np.ndarray]:
    """Validated (discretization, lower index, +inf mass, probs): negative round-off atoms (dp_accounting's FFT
    compositions, at most 1e-12 each) are moved to the +inf mass, which only raises every delta(eps)."""
    if not (math.isfinite(d) and d > 0.0):
        raise ValueError(f"{name} discretization must be a finite real > 0, got {d!r}")
    if not (math.isfinite(inf) and 0.0 <= inf <= 1.0):
        raise ValueError(f"{name} infinity_mass must be in [0, 1], got {inf!r}")
    if abs(lower) > 2**53 or abs(lower + probs.size) * d > 1e6:
        raise ValueError(f"{name} lower_index puts losses beyond 1e6: lower_index = {lower!r}, discretization {d!r}")
    bad = np.flatnonzero(~np.isfinite(probs) | (probs < -1e-12))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{name} probs must be finite and >= 0: {_point('probs', probs, i)}")
    negative = probs < 0.0
    if negative.any():
        inf = min(1.0, inf + float(-probs[negative].sum()))
        probs = np.where(negative, 0.0, probs)
    total = float(probs.sum()) + inf
    if total > 1.0 + PLD_MASS_SLACK:
        raise ValueError(f"{name} must have total mass at most 1 (+{PLD_MASS_SLACK:g}), got {total!r}")
    return d, lower, inf, probs


class PmfText(Constraint):
    """One direction of a dp_accounting PLD as canonical text (``discretization=..;lower_index=..;infinity_mass=..;
    probs=p0,p1,...``); the empty text for the add direction means symmetric."""

    type = str

    def __init__(self, *, optional: bool = False) -> None:
        self.optional = optional

    def check(self, name: str, value: Any) -> str:
        if not isinstance(value, str):
            raise ValueError(f"{name} must be text, got {bounded_repr(value)}")
        if self.optional and not value.strip():
            return ""
        d, lower, inf, probs = _check_pmf(name, *_parse_pmf(name, value))
        return _pmf_text(d, lower, inf, probs)

    def describe(self) -> str:
        extra = "; empty: symmetric" if self.optional else ""
        return "text 'discretization=D; lower_index=K; infinity_mass=M; probs=p0,p1,...'" + extra


def _pmf_pair(text: str) -> DiscretePair:
    d, lower, inf, probs = _parse_pmf("pmf", text)
    keep = probs > 0.0
    losses = (lower + np.flatnonzero(keep)) * d
    return DiscretePair(losses.astype(float), probs[keep], inf)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PrivacyLossDistributionInput(Mechanism):
    """The pessimistic PMFs of a dp_accounting ``PrivacyLossDistribution`` (remove direction, and the add direction
    when it differs). Bounds are relative to the supplied PLD; build it with :func:`from_pld`."""

    kind: ClassVar[str] = "privacy_loss_distribution"
    remove_pmf: str = param(
        "the remove-direction PMF of a pessimistic dp_accounting PLD",
        PmfText(),
    )
    add_pmf: str = param(
        "the add-direction PMF in the same form (empty: the PLD is symmetric)", PmfText(optional=True), default=""
    )
    neighbouring: str = param(_RELATION_DOC, Choice(NEIGHBOURING_RELATIONS), default="add_remove")

    def pairs(self) -> tuple[DiscretePair, DiscretePair | None]:
        """(first, second or None): the remove and add directions, the one whose profile dominates first. The curve
        analysed depends only on the two profiles (their pointwise max), and the engine's optimistic twin reads the
        first direction only (:func:`gdpcore.engine.generic_parts`): a dominating add direction put second would leave
        the bracket wide open."""

        def build() -> tuple[DiscretePair, DiscretePair | None]:
            remove = _pmf_pair(self.remove_pmf)
            if not self.add_pmf:
                return remove, None
            add = _pmf_pair(self.add_pmf)
            return (add, remove) if _dominates(add, remove) else (remove, add)

        return _cached(self, "_pairs", build)


def _dominates(a: DiscretePair, b: DiscretePair) -> bool:
    """delta_a(eps) >= delta_b(eps) on a grid of eps >= 0 up to the largest loss, and larger somewhere."""
    top = max(1e-3, float(np.max(a.losses, initial=0.0)), float(np.max(b.losses, initial=0.0)))
    grid = np.linspace(0.0, top, 64)
    da = np.array([a.delta(e) for e in grid])
    db = np.array([b.delta(e) for e in grid])
    return bool(np.all(da >= db - 1e-15) and np.any(da > db))


def _cached(m: Mechanism, key: str, build: Callable[[], Any]) -> Any:
    """A derived value of a frozen mechanism, built once (kept out of the dataclass fields: not hashed, not
    serialised)."""
    if key not in m.__dict__:
        object.__setattr__(m, key, build())
    return m.__dict__[key]


def _pairs(m: Mechanism) -> tuple[DiscretePair, DiscretePair | None]:
    if isinstance(m, PrivacyLossDistributionInput):
        return m.pairs()
    assert isinstance(m, PrivacyProfile | TradeoffCurve)
    return (m.pair(), None)


# ---------------------------------------------------------------------------------------------------------------------
# Public constructors (the Python contract): validated, errors naming the point
# ---------------------------------------------------------------------------------------------------------------------
def _build(cls: type[Mechanism], **kwargs: Any) -> Any:
    try:
        return cls(**kwargs)
    except ParameterError:
        raise
    except ValueError as exc:
        reason = str(exc)
        first = reason.split(" ", 1)[0].split("[", 1)[0].split(".", 1)[0]
        field = first if first in {f.name for f in dataclasses.fields(cls)} else None
        raise ParameterError("mechanism", cls.kind, field, reason) from None


def from_privacy_profile(epsilons: Any, deltas: Any, *, neighbouring: str = "add_remove") -> PrivacyProfile:
    """The mechanism that is (eps_i, delta_i)-DP for every i (curve: max_i f_{eps_i, delta_i}); every number derived
    from it is a bound relative to this profile. :class:`gdpcore.mechanisms.ParameterError` names a bad point."""
    return _build(PrivacyProfile, epsilons=epsilons, deltas=deltas, neighbouring=neighbouring)


def from_tradeoff_curve(fpr: Any, fnr: Any, *, neighbouring: str = "add_remove") -> TradeoffCurve:
    """The mechanism whose trade-off curve is the convex piecewise-linear f through (fpr_i, fnr_i) (symmetrised when
    asymmetric: :attr:`TradeoffCurve.asymmetry`); bounds are relative to this curve.
    :class:`gdpcore.mechanisms.ParameterError` names a bad point (out of [0, 1], NaN, not monotone, not convex,
    above 1 - alpha)."""
    try:
        fpr_text, fnr_text = Numbers().check("fpr", fpr), Numbers().check("fnr", fnr)
        _check_curve(_values(fpr_text), _values(fnr_text))  # errors in the contract's names (fpr, fnr)
    except ValueError as exc:
        field = str(exc).split(" ", 1)[0].split("[", 1)[0]
        raise ParameterError("mechanism", TradeoffCurve.kind, "breakpoint_" + field, str(exc)) from None
    return _build(TradeoffCurve, breakpoint_fpr=fpr_text, breakpoint_fnr=fnr_text, neighbouring=neighbouring)


def _direction_text(pmf: Any, name: str) -> str:
    if not getattr(pmf, "_pessimistic_estimate", False):
        raise ParameterError(
            "mechanism",
            PrivacyLossDistributionInput.kind,
            name,
            f"{name} must be a pessimistic estimate (pessimistic_estimate=True): an optimistic PLD bounds the profile "
            "from below, not a guarantee",
        )
    dense = pmf.to_dense_pmf()
    probs = np.asarray(dense._probs, dtype=float)  # noqa: SLF001 - DensePLDPmf has no public arrays
    return _pmf_text(
        dense._discretization,  # noqa: SLF001 - DensePLDPmf has no public arrays
        dense._lower_loss,  # noqa: SLF001 - DensePLDPmf has no public arrays
        dense._infinity_mass,  # noqa: SLF001 - DensePLDPmf has no public arrays
        probs if probs.size else np.zeros(1),
    )


def from_pld(pld: Any, *, neighbouring: str = "add_remove") -> PrivacyLossDistributionInput:
    """The mechanism described by a pessimistic dp_accounting ``PrivacyLossDistribution`` (both adjacency
    directions, each with its +inf mass); bounds are relative to this PLD. :class:`ParameterError` for anything
    else, an optimistic PLD, or a PMF with a bad atom (named by index)."""
    if not isinstance(pld, pld_lib.PrivacyLossDistribution):
        raise ParameterError(
            "mechanism",
            PrivacyLossDistributionInput.kind,
            None,
            f"pld must be a dp_accounting PrivacyLossDistribution, got {bounded_repr(pld)}",
        )
    remove = _direction_text(pld._pmf_remove, "remove_pmf")  # noqa: SLF001 - no public accessor for a PLD's PMFs
    add = "" if pld._symmetric else _direction_text(pld._pmf_add, "add_pmf")  # noqa: SLF001 - no public flag
    return _build(PrivacyLossDistributionInput, remove_pmf=remove, add_pmf=add, neighbouring=neighbouring)


# ---------------------------------------------------------------------------------------------------------------------
# Draws for the contract test (cheap sizes)
# ---------------------------------------------------------------------------------------------------------------------
def _draw_profile(rng: np.random.Generator) -> PrivacyProfile:
    mu = log_uniform(rng, 0.3, 3.0)
    top = mu * mu / 2.0 + 8.0 * mu  # delta_mu(top) < 1e-14: the +inf mass stays below the truncation tolerance
    eps = np.linspace(0.0, top, int(rng.integers(15, 60)))
    delta = closed_form.get_delta_from_gdp(mu=mu, epsilon=eps)
    delta = np.minimum.accumulate(np.asarray(delta, float))
    return PrivacyProfile(epsilons=floats_text(eps), deltas=floats_text(delta), neighbouring=relation(rng))


def _draw_curve(rng: np.random.Generator) -> TradeoffCurve:
    if rng.uniform() < 0.5:  # G_mu sampled: symmetric up to the sampling
        mu = log_uniform(rng, 0.3, 3.0)
        alpha = np.concatenate([[0.0], np.geomspace(1e-8, 1.0, int(rng.integers(10, 40)))])
        beta = np.asarray(closed_form.get_beta_from_gdp(mu=mu, alpha=alpha), float)
        beta[-1] = 0.0
        return TradeoffCurve(
            breakpoint_fpr=floats_text(alpha), breakpoint_fnr=floats_text(beta), neighbouring=relation(rng)
        )
    # A two-outcome pair P = (a, 1 - a), Q = (b, 1 - b), b > a: asymmetric in general.
    a = float(rng.uniform(0.05, 0.45))
    b = float(rng.uniform(a + 0.05, 0.95))
    return TradeoffCurve(
        breakpoint_fpr=f"0.0,{a!r},1.0", breakpoint_fnr=f"1.0,{1.0 - b!r},0.0", neighbouring=relation(rng)
    )


def _draw_pld(rng: np.random.Generator) -> PrivacyLossDistributionInput:
    step = float(rng.choice([1e-3, 2e-3]))
    if rng.uniform() < 0.5:
        pld = pld_lib.from_gaussian_mechanism(
            log_uniform(rng, 0.7, 3.0), value_discretization_interval=step, use_connect_dots=True
        )
    else:
        pld = pld_lib.from_laplace_mechanism(
            log_uniform(rng, 0.5, 3.0),
            value_discretization_interval=step,
            sampling_prob=1.0 if rng.uniform() < 0.5 else float(rng.uniform(0.1, 0.9)),
        )
    return from_pld(pld, neighbouring="add_remove")


# ---------------------------------------------------------------------------------------------------------------------
# Kind declarations
# ---------------------------------------------------------------------------------------------------------------------
def _note(what: str) -> Callable[[Mechanism], str]:
    def note(m: Mechanism) -> str:
        extra = ""
        if isinstance(m, TradeoffCurve) and m.asymmetry > 0.0:
            extra = (
                f"; asymmetric: analysed as its symmetrisation conv(min(f, f^-1)), up to {m.asymmetry:.3g} below the "
                "supplied curve"
            )
        if isinstance(m, PrivacyLossDistributionInput) and m.add_pmf:
            extra = "; both adjacency directions, their pointwise max"
        return f"{USER_SUPPLIED} {what} (every bound is relative to the input{extra})"

    return note


def _hooks(what: str) -> dict[str, Any]:
    """The hooks every curve input shares: its pair(s) rounded onto the engine's lattice, their pure epsilon, RDP
    (exact for the pair) and a certified rho."""
    no_event = Unsupported(f"dp_accounting has no DpEvent for a {what}")
    return {
        "pld": lambda m, *, step, pessimistic: _pld(_pairs(m), step, pessimistic),
        "pure_epsilon": lambda m: max(p.pure_epsilon() for p in _pairs(m) if p is not None),
        "rdp": lambda m, t: (_rdp(_pairs(m), t), "exact"),
        "rho": lambda m: _rho(_pairs(m)),
        "to_dp_event": no_event,
        "exact_mu": Unsupported(f"a {what} has no closed-form mu; analyze() brackets it"),
        "input_note": _note(what),
    }


PRIVACY_PROFILE = KindSpec(
    cls=PrivacyProfile,
    summary="a privacy profile (eps_i, delta_i) on a grid, user-supplied: curve max_i f_{eps_i,delta_i}",
    draw=_draw_profile,
    **_hooks("privacy profile"),
)
TRADEOFF_CURVE = KindSpec(
    cls=TradeoffCurve,
    summary="a convex piecewise-linear trade-off curve from breakpoints (fpr_i, fnr_i), user-supplied",
    draw=_draw_curve,
    **_hooks("trade-off curve"),
)
PRIVACY_LOSS_DISTRIBUTION = KindSpec(
    cls=PrivacyLossDistributionInput,
    summary="a pessimistic dp_accounting PrivacyLossDistribution (its PMFs), user-supplied",
    draw=_draw_pld,
    **_hooks("dp_accounting PLD"),
)
