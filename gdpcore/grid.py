"""``analyze_grid(mechanisms, *, deltas, fprs) -> pyarrow.Table``: privacy reports for a chunk of mechanisms.

External contract (issue 5): one row per input mechanism, in input order, with float columns ``mu``,
``gdp_regret``, ``advantage``, ``bayes_security``, a string column ``status`` (``"ok"`` or the reason the row is not
a full PLD report) and list<double> columns ``epsilon`` (aligned with ``deltas``) and ``fnr`` (aligned with
``fprs``). Further columns label what each number is (``*_bound``: "upper", "lower", "estimate", "exact"), which
accountant and discretisation produced it, the estimated discretisation error, and where it came from
(``mechanism_hash``, ``engine``). :func:`analyze_grid_with_curves` also returns a long-form curve table.

Engine for Poisson-subsampled Gaussians (``engine="grid"``), the grid's bulk:

* one single-step connect-the-dots PMF per (sigma, q, discretisation), built vectorised by
  :mod:`gdpcore.fast_pld`, serves every T; one rfft of it serves every T whose composed FFT length fits;
* the discretisation is chosen *per cell*: a starting step from the per-step loss spread
  ``s1 = q sqrt(e^{1/sigma^2} - 1)`` (connect-the-dots error is second order in step / s1), then the cell is
  recomputed at twice the step and accepted when every epsilon(delta) moved by at most
  ``3 * epsilon_tolerance`` (relative) - i.e. an estimated error <= ``epsilon_tolerance`` under the d^2 law; otherwise
  the step is halved (the old step becomes the comparison) down to ``min_discretization``. Both computations are
  pessimistic (upper bounds on epsilon), so the check can only make the reported number *tighter*, never optimistic;
  the estimated relative error is reported in ``discretization_error``;
* the lower ends of the brackets (``epsilon_lower``, ``mu_lower``, ``advantage_lower``) come from the optimistic
  twin of :mod:`gdpcore.fast_pld` (privacy buckets rounded down plus the certified residual shift; remove direction
  only, as :func:`gdpcore.analyze` builds its optimistic curve), built only at the final step. The certified gap
  ``(epsilon - epsilon_lower) / epsilon`` at the first delta ``+ advantage - advantage_lower`` is kept within
  ``gap_tolerance`` (default ``DEFAULT_GAP_TOLERANCE`` = 1%): the optimistic step starts at the pessimistic one and
  is refined (gap about proportional to the step) up to ``_GAP_MAX_ROUNDS`` times, within the memory budget and a
  work cap of ``_GAP_WORK_FACTOR`` times the pessimistic support; the achieved gap is the ``certified_gap`` column
  (``gap_tolerance`` the target), so a cell that could not meet it is visible there. Both ends are proven bounds, up
  to the stated slack: the lower ones are evaluated at delta + 1e-4 min(delta, 1e-9) + 1e-15 (Chernoff tail and
  FFT wrap-around), and mu_lower is the mu of a curve whose profile is lowered by the same amount;
* each cell's single-step length (closed form) and composed FFT length (Chernoff window, computed before any FFT)
  are turned into a working-memory estimate before anything large is allocated; a cell over
  ``memory_budget_bytes`` gets a status row and, labelled so, the looser but valid RDP bound of dp_accounting's
  ``RdpAccountant`` (epsilon, and a symmetric curve from its delta(eps) profile);
* the curve is read from the remove-direction PMF only (see :mod:`gdpcore.accounting`); with ``add_guard=True`` the
  add direction is composed too and guards the curve exactly as :func:`gdpcore.curve.curve_from_loss_pmf` does.
  For the Poisson-subsampled Gaussian the remove direction dominates for eps >= 0 (tests measure the gap: 0).

Every other mechanism (and q = 1, an exact Gaussian) goes through :func:`gdpcore.analyze` (``engine="per_point"``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from gdpcore import fast_pld
from gdpcore._validation import check_choice, check_open_unit_array, check_positive, check_probability
from gdpcore.curve import SymmetricCurve, curve_from_loss_pmf, curve_from_profile, curve_from_remove_pmf
from gdpcore.mechanisms import Mechanism, SubsampledGaussian
from gdpcore.report import DEFAULT_ALPHA_MIN, analyze

__all__ = [
    "CURVE_SCHEMA",
    "DEFAULT_EPSILON_TOLERANCE",
    "DEFAULT_GAP_TOLERANCE",
    "DEFAULT_MEMORY_BUDGET",
    "GRID_SCHEMA",
    "analyze_grid",
    "analyze_grid_with_curves",
]

DEFAULT_EPSILON_TOLERANCE = 2e-3
"""Target relative discretisation error of every reported epsilon (estimated, see the module docstring)."""

DEFAULT_GAP_TOLERANCE = 1e-2
"""Target certified gap per cell: (eps_upper - eps_lower) / eps_upper at the first delta + (advantage -
advantage_lower). Both ends are proven bounds (connect-the-dots above, privacy buckets below), so this is a certified
bracket width, unlike ``epsilon_tolerance`` (an estimate)."""

DEFAULT_MEMORY_BUDGET = 512 * 2**20
"""Working-memory budget of one cell, bytes (single step + composition + curve arrays)."""

_MAX_DISCRETIZATION = 2e-3
_MIN_DISCRETIZATION = 1e-6
_CURVE_BYTES_PER_POINT = 96  # profile, suffix sums, vertices, breakpoints (float64)
_RDP_EPS_POINTS = 400

_FLOAT_COLUMNS = ("mu", "mu_lower", "gdp_regret", "advantage", "advantage_lower", "bayes_security")
_GAP_MAX_ROUNDS = 3
_RESIDUAL_TAIL = 1e-4  # Bernstein tail of the residual shift, relative to the smallest delta (capped at 1e-9)
_GAP_WORK_FACTOR = 4  # the optimistic FFT may be at most this many times the pessimistic support (or 2^16 points); beyond it the achieved gap is reported
_BOUND_COLUMNS = ("epsilon", "fnr", "mu", "gdp_regret", "advantage", "bayes_security")
_PLD_BOUNDS = {
    "epsilon": "upper",
    "fnr": "lower",
    "mu": "upper",
    "gdp_regret": "estimate",
    "advantage": "upper",
    "bayes_security": "lower",
}

GRID_SCHEMA = pa.schema(
    [
        pa.field("row", pa.int64(), nullable=False),
        pa.field("mechanism_hash", pa.string(), nullable=False),
        pa.field("mechanism_kind", pa.string(), nullable=False),
        pa.field("mechanism", pa.string(), nullable=False),  # canonical JSON of the mechanism
        pa.field("status", pa.string(), nullable=False),
        *(pa.field(name, pa.float64()) for name in _FLOAT_COLUMNS),
        pa.field("epsilon", pa.list_(pa.float64())),
        pa.field("epsilon_lower", pa.list_(pa.float64())),
        pa.field("fnr", pa.list_(pa.float64())),
        *(pa.field(f"{name}_bound", pa.string()) for name in _BOUND_COLUMNS),
        pa.field("accountant", pa.string()),
        pa.field("discretization", pa.float64()),
        pa.field("discretization_error", pa.float64()),
        pa.field("discretization_lower", pa.float64()),
        pa.field("certified_gap", pa.float64()),
        pa.field("gap_tolerance", pa.float64()),
        pa.field("support_length", pa.int64()),
        pa.field("memory_estimate_bytes", pa.int64()),
        pa.field("engine", pa.string()),
    ]
)
"""Column order of :func:`analyze_grid` tables (metadata records ``deltas``, ``fprs`` and the settings).

``*_lower`` columns are the optimistic ends of brackets (grid engine: privacy buckets at ``discretization_lower``;
per-point PLD path: dp_accounting's optimistic twin), null where there is none (RDP fallback).
``discretization_error`` is the estimated relative error of epsilon/mu from the discretisation (grid engine);
``certified_gap`` the certified bracket width (see ``DEFAULT_GAP_TOLERANCE``) and ``gap_tolerance`` its target."""

CURVE_SCHEMA = pa.schema(
    [
        pa.field("row", pa.int64(), nullable=False),
        pa.field("mechanism_hash", pa.string(), nullable=False),
        pa.field("vertex", pa.int64(), nullable=False),
        pa.field("fpr", pa.float64(), nullable=False),
        pa.field("fnr", pa.float64(), nullable=False),
    ]
)
"""Long-form curve table: vertices of a pessimistic piecewise-linear trade-off curve per row, fpr increasing."""


# -- input checks -------------------------------------------------------------------------------------------------


def _check_mechanisms(mechanisms: Any) -> list[Mechanism]:
    if isinstance(mechanisms, (str, bytes, Mechanism)) or not isinstance(mechanisms, Sequence):
        raise ValueError(f"mechanisms must be a sequence of gdpcore mechanisms, got {mechanisms!r}")
    out = list(mechanisms)
    for i, m in enumerate(out):
        if not isinstance(m, Mechanism):
            raise ValueError(f"mechanisms[{i}] must be a gdpcore mechanism, got {m!r}")
    return out


def _check_queries(name: str, values: Any, *, allow_ends: bool) -> np.ndarray:
    if isinstance(values, (str, bytes)):
        raise ValueError(f"{name} must be a sequence of numbers, got {values!r}")
    arr = check_open_unit_array(name, values, allow_zero=allow_ends, allow_one=allow_ends)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a one-dimensional sequence of numbers, got {values!r}")
    return arr


# -- curves from a composed remove PMF, without the lattice below its lowest atom -------------------------------------


# -- the grid engine ----------------------------------------------------------------------------------------------


@dataclasses.dataclass
class _CellResult:
    curve: SymmetricCurve | None
    status: str
    accountant: str
    discretization: float | None
    error: float | None
    support: int | None
    memory: int | None
    engine: str
    bounds: dict[str, str]
    lower: _Lower | None = None


@dataclasses.dataclass
class _Lower:
    """Optimistic ends of the brackets (privacy buckets rounded down) and the certified gap."""

    epsilon: np.ndarray
    mu: float
    advantage: float
    discretization: float
    gap: float


def _start_step(sigma: float, q: float, tol: float) -> float:
    """A priori step: connect-the-dots error ~ 0.08 (step / s1)^2 relative (measured: peer_benchmarks case D)."""
    s1 = q * math.sqrt(math.expm1(min(1.0 / sigma**2, 700.0)))
    d = s1 * math.sqrt(tol / 0.3)
    # Snap to the ladder 2e-3 * 2^-k so cells with nearby parameters share single-step PMFs.
    k = max(0, math.ceil(math.log2(_MAX_DISCRETIZATION / max(d, 1e-300))))
    return max(_MAX_DISCRETIZATION * 2.0**-k, _MIN_DISCRETIZATION)


def _ladder_floor(d: float) -> float:
    """Largest step of the ladder 2e-3 * 2^-k that is <= d (clamped to [min, max] discretisation)."""
    k = max(0, math.ceil(math.log2(_MAX_DISCRETIZATION / max(d, 1e-300)) - 1e-9))
    return max(_MAX_DISCRETIZATION * 2.0**-k, _MIN_DISCRETIZATION)


def _gap(eps_upper: float, eps_lower: float, adv_upper: float, adv_lower: float) -> float:
    """Certified gap: relative epsilon gap at the first delta (absolute / 1e-3 below 1e-3) + advantage gap."""
    if not math.isfinite(eps_upper):
        eps_part = 0.0 if eps_lower == eps_upper else math.inf
    else:
        eps_part = (eps_upper - eps_lower) / max(abs(eps_upper), 1e-3)
    return float(max(eps_part, 0.0) + max(adv_upper - adv_lower, 0.0))


class _Engine:
    def __init__(self, *, deltas, tol, budget, alpha_min, add_guard, min_step, gap_tol=DEFAULT_GAP_TOLERANCE):
        self.deltas = deltas
        self.gap_tol = gap_tol
        self.tol = tol
        self.budget = budget
        self.alpha_min = alpha_min
        self.add_guard = add_guard
        self.min_step = min_step
        self._single: dict[tuple[float, float, float, str], fast_pld.SingleStepPLD] = {}

    def release(self) -> None:
        self._single.clear()

    def _single_step(self, sigma, q, d, direction="remove"):
        key = (sigma, q, d, direction)
        s = self._single.get(key)
        if s is None:
            s = fast_pld.single_step_pld(noise_multiplier=sigma, sampling_rate=q, discretization=d, direction=direction)
            self._single[key] = s
        return s

    def _plan(self, sigma, q, T, d) -> tuple[int, int, str | None]:
        """(support, bytes, refusal reason or None), estimated before the composition is allocated."""
        n1 = fast_pld.single_step_length(noise_multiplier=sigma, sampling_rate=q, discretization=d)
        if 8 * 6 * n1 > self.budget:
            return n1, 8 * 6 * n1, f"single-step support {n1} points at discretization {d:g}"
        n = fast_pld.fft_length(self._single_step(sigma, q, d), T)
        mem = fast_pld.fft_bytes(n) * (2 if self.add_guard else 1) + _CURVE_BYTES_PER_POINT * n
        if mem > self.budget:
            return n, mem, f"composed support {n} points at discretization {d:g} (~{mem / 2**20:.0f} MiB)"
        return n, mem, None

    def _compose(self, sigma, q, T, d) -> tuple[SymmetricCurve, int]:
        single = self._single_step(sigma, q, d)
        n = fast_pld.fft_length(single, T)
        # Reuse a transform already computed for a larger T of this (sigma, q, d) when its length is close enough.
        reusable = [m for m in single.cached_fft_lengths() if n <= m <= 1.25 * n]
        remove = fast_pld.compose_loss_pmf(single, T, fft_len=reusable[0] if reusable else None)
        if self.add_guard and q < 1:
            add = fast_pld.compose_loss_pmf(self._single_step(sigma, q, d, "add"), T)
            return curve_from_loss_pmf(remove, add), remove.probs.size
        return curve_from_remove_pmf(remove), remove.probs.size

    def _probe(self, curve: SymmetricCurve) -> np.ndarray:
        """epsilon at every delta (and at 1e-5, 1e-9 when no delta is asked): the numbers whose error is controlled.

        mu is not in the probe: at very large epsilon (sigma=0.6, q=0.1, T=1e4) the core's mu is attained at FPRs of
        1e-67 and jumps between steps, which would refine such cells without end.
        """
        ds = self.deltas if self.deltas.size else np.array([1e-5, 1e-9])
        return np.atleast_1d(curve.epsilon_at(ds))

    _ACCOUNTANT = (
        "gdpcore.fast_pld (connect-the-dots, pessimistic; dp_accounting's construction, vectorised; "
        "lower ends: privacy buckets rounded down)"
    )

    def _lower_at(self, sigma, q, T, d, max_points) -> tuple[_Lower, None] | tuple[None, str]:
        """Optimistic ends at step ``d`` (or the reason the step is refused by the budget or the work cap)."""
        n1 = fast_pld.optimistic_single_step_length(noise_multiplier=sigma, sampling_rate=q, discretization=d)
        if n1 > max_points:
            return None, f"optimistic single-step support {n1} points at discretization {d:g} > work cap {max_points}"
        if 8 * 6 * n1 > self.budget:
            return None, f"optimistic single-step support {n1} points at discretization {d:g}"
        single = fast_pld.optimistic_single_step_pld(noise_multiplier=sigma, sampling_rate=q, discretization=d)
        n = fast_pld.fft_length(single, T)
        if n > max_points:
            return None, f"optimistic FFT length {n} at discretization {d:g} > work cap {max_points}"
        mem = fast_pld.fft_bytes(n) + _CURVE_BYTES_PER_POINT * n
        if mem > self.budget:
            return None, f"optimistic composed support {n} points at discretization {d:g} (~{mem / 2**20:.0f} MiB)"
        # delta(eps) >= delta_shifted(eps) - offset (fast_pld.certified_optimistic_loss_pmf: privacy buckets plus
        # the Chernoff-certified residual shift, tail + FFT wrap-around slack in the offset).
        ds = self.deltas if self.deltas.size else np.array([1e-5, 1e-9])
        tail = _RESIDUAL_TAIL * float(min(ds.min(), 1e-9))
        shifted, offset, remainder = fast_pld.certified_optimistic_loss_pmf(single, T, tail=tail)
        curve = curve_from_remove_pmf(shifted, delta_offset=offset)
        # Where the e^eps cap of curve_from_remove_pmf made the profile floor above delta, the mechanism's epsilon
        # exceeds the cap: report the cap.
        eps = np.atleast_1d(curve.epsilon_at(ds))
        eps = np.where(np.isinf(eps), curve.eps[-1], eps) + remainder
        mu = curve.mu(alpha_min=self.alpha_min)[0]
        return _Lower(eps, mu, curve.advantage, d, math.nan), None

    def lower(
        self, sigma, q, T, curve_p: SymmetricCurve, d_p: float, *, refine: bool, support: int | None = None
    ) -> tuple[_Lower | None, str]:
        """Optimistic ends and certified gap; with ``refine``, the step is refined until the gap is within
        ``gap_tol`` (the gap is about proportional to the step), at most
        ``_GAP_MAX_ROUNDS`` times, within the budget and a work cap of ``_GAP_WORK_FACTOR`` times the pessimistic
        support. Returns (lower or None, note)."""
        max_points = max(_GAP_WORK_FACTOR * (support or 0), 2**16) if refine else 2**62
        eps_p = float(self._probe(curve_p)[0])
        adv_p = curve_p.advantage
        d = d_p
        best: _Lower | None = None
        note = ""
        # An infinite upper epsilon (beyond the e^700 cap) cannot be bracketed more tightly: one round only.
        for _ in range(_GAP_MAX_ROUNDS if refine and math.isfinite(eps_p) else 1):
            # The first round, at the pessimistic step, is bounded by the memory budget only.
            low, refusal = self._lower_at(sigma, q, T, d, max_points if best is not None else 2**62)
            if low is None:
                note = f"finer optimistic step refused: {refusal} > budget"
                break
            low.gap = _gap(eps_p, float(low.epsilon[0]), adv_p, low.advantage)
            if best is None or low.gap < best.gap:
                best = low
            if low.gap <= self.gap_tol or not refine or d <= self.min_step:
                break
            d_new = _ladder_floor(d * 0.8 * self.gap_tol / low.gap) if math.isfinite(low.gap) else d / 2
            d = max(min(d_new, d / 2), self.min_step)
        return best, note

    def cell(self, mech: SubsampledGaussian) -> _CellResult:
        sigma, q, T = mech.noise_multiplier, mech.sampling_rate, mech.steps
        d = _start_step(sigma, q, self.tol)
        coarse: tuple[SymmetricCurve, np.ndarray, float] | None = None  # the previous, coarser computation
        while True:
            support, mem, refusal = self._plan(sigma, q, T, d)
            if refusal is not None:
                if coarse is None:
                    return self._rdp_fallback(mech, f"over_budget: {refusal} > budget {self.budget:.0f} bytes")
                # The coarser curve is valid (pessimistic), just not shown to meet the tolerance.
                low, _ = self.lower(sigma, q, T, coarse[0], coarse[2], refine=True)
                return _CellResult(
                    coarse[0],
                    f"discretization_limited: finer step refused, {refusal} > budget",
                    self._ACCOUNTANT,
                    coarse[2],
                    None,
                    None,
                    None,
                    "grid",
                    dict(_PLD_BOUNDS),
                    low,
                )
            curve, support = self._compose(sigma, q, T, d)
            probe = self._probe(curve)
            if coarse is None:
                # Comparison at twice the step (about half the cost): the d^2 law makes coarse - fine ~ 3 error(fine).
                c2, _ = self._compose(sigma, q, T, min(2 * d, 0.1))
                coarse = (c2, self._probe(c2), 2 * d)
            err = _relative_change(coarse[1], probe) / 3.0
            if err <= self.tol or d / 2 < self.min_step:
                status = "ok" if err <= self.tol else f"tolerance_not_met: estimated error {err:.2e} at step {d:g}"
                low, _ = self.lower(sigma, q, T, curve, d, refine=True, support=support)
                return _CellResult(
                    curve, status, self._ACCOUNTANT, d, err, support, mem, "grid", dict(_PLD_BOUNDS), low
                )
            coarse = (curve, probe, d)
            d = d / 2

    def cell_fixed(self, mech: SubsampledGaussian, d: float) -> _CellResult:
        sigma, q, T = mech.noise_multiplier, mech.sampling_rate, mech.steps
        support, mem, refusal = self._plan(sigma, q, T, d)
        if refusal is not None:
            return self._rdp_fallback(mech, f"over_budget: {refusal} > budget {self.budget:.0f} bytes")
        curve, support = self._compose(sigma, q, T, d)
        low, _ = self.lower(sigma, q, T, curve, d, refine=False)
        return _CellResult(curve, "ok", self._ACCOUNTANT, d, None, support, mem, "grid", dict(_PLD_BOUNDS), low)

    def _rdp_fallback(self, mech: SubsampledGaussian, reason: str) -> _CellResult:
        from dp_accounting import dp_event, rdp

        acc = rdp.RdpAccountant()
        acc.compose(
            dp_event.SelfComposedDpEvent(
                dp_event.PoissonSampledDpEvent(mech.sampling_rate, dp_event.GaussianDpEvent(mech.noise_multiplier)),
                mech.steps,
            )
        )
        # delta(eps) upper bounds on an eps grid up to the RDP epsilon at delta = 1e-12: the envelope of their
        # supporting lines is a valid (pessimistic) symmetric curve (Thm A.9); beyond the grid delta <= 1e-12.
        e_max = max(acc.get_epsilon(1e-12), 1e-3)
        eps = np.linspace(0.0, e_max, _RDP_EPS_POINTS)
        delta = np.array([acc.get_delta(float(e)) for e in eps])
        curve = curve_from_profile(eps, delta)
        return _CellResult(
            curve,
            reason + "; numbers are the looser RDP bound (fallback)",
            "dp_accounting.rdp (RDP fallback; upper bounds, looser than PLD)",
            None,
            None,
            None,
            None,
            "rdp_fallback",
            dict(_PLD_BOUNDS),
        )


def _relative_change(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    both_inf = np.isinf(a) & np.isinf(b)
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = np.abs(a - b) / np.maximum(np.abs(b), 1e-12)
        rel = np.where(both_inf, 0.0, rel)
        # Tiny epsilons (< 1e-3) are compared absolutely: a relative error there is meaningless and harmless.
        small = np.maximum(np.abs(a), np.abs(b)) < 1e-3
        rel = np.where(small & ~both_inf, np.abs(a - b) / 1e-3, rel)
    return float(np.nanmax(rel)) if rel.size else 0.0


def _row(i, mech, res: _CellResult, deltas, fprs, alpha_min, gap_tol) -> dict[str, Any]:
    curve = res.curve
    low = res.lower
    eps = np.atleast_1d(curve.epsilon_at(deltas)) if deltas.size else np.zeros(0)
    fnr = np.atleast_1d(curve.fnr(fprs)) if fprs.size else np.zeros(0)
    mu = curve.mu(alpha_min=alpha_min)[0]
    regret = curve.regret_against_gdp(mu)[1]
    adv = curve.advantage
    return {
        "row": i,
        "mechanism_hash": mech.content_hash,
        "mechanism_kind": mech.kind,
        "mechanism": mech.to_json(),
        "status": res.status,
        "mu": mu,
        "mu_lower": None if low is None else min(low.mu, mu),
        "gdp_regret": regret,
        "advantage": adv,
        "advantage_lower": None if low is None else min(low.advantage, adv),
        "bayes_security": 1.0 - adv,
        "epsilon": [float(x) for x in eps],
        "epsilon_lower": None if low is None else [float(x) for x in np.minimum(low.epsilon[: eps.size], eps)],
        "fnr": [float(x) for x in fnr],
        **{f"{name}_bound": res.bounds[name] for name in _BOUND_COLUMNS},
        "accountant": res.accountant,
        "discretization": res.discretization,
        "discretization_error": res.error,
        "discretization_lower": None if low is None else low.discretization,
        "certified_gap": None if low is None else low.gap,
        "gap_tolerance": gap_tol if res.engine == "grid" else None,
        "support_length": res.support,
        "memory_estimate_bytes": res.memory,
        "engine": res.engine,
    }


def _row_from_report(i: int, mech: Mechanism, report, deltas: np.ndarray, fprs: np.ndarray) -> dict[str, Any]:
    labels = report.bound_types
    eps = np.atleast_1d(report.epsilon(deltas)) if deltas.size else np.zeros(0)
    if report.exact:
        eps_lo = eps
    else:
        eps_lo = np.atleast_1d(report.epsilon(deltas, side="optimistic")) if deltas.size else np.zeros(0)
    fnr = np.atleast_1d(report.fnr(fprs)) if fprs.size else np.zeros(0)
    return {
        "row": i,
        "mechanism_hash": mech.content_hash,
        "mechanism_kind": mech.kind,
        "mechanism": mech.to_json(),
        "status": "ok",
        "mu": report.mu,
        "mu_lower": report.mu_lower,
        "gdp_regret": report.gdp_regret,
        "advantage": report.advantage,
        "advantage_lower": report.advantage_lower,
        "bayes_security": report.bayes_security,
        "epsilon": [float(x) for x in eps],
        "epsilon_lower": [float(x) for x in eps_lo],
        "fnr": [float(x) for x in fnr],
        **{f"{name}_bound": labels[name] for name in _BOUND_COLUMNS},
        "accountant": report.accountant,
        "discretization": report.discretization,
        "discretization_error": None,
        "discretization_lower": None,
        "certified_gap": None,
        "gap_tolerance": None,
        "support_length": None if report.exact else int(report.diagnostics["support_length"]),
        "memory_estimate_bytes": None,
        "engine": "per_point",
    }


def _curve_rows(i: int, mech: Mechanism, curve: SymmetricCurve | None, report, max_lines: int) -> dict[str, list]:
    """Vertices of a thinned pessimistic curve: a subset of the supporting lines (dropping lines lowers the curve)."""
    if curve is None:
        # Exact Gaussian: the closed form f_mu, sampled on a dense grid (exact values at the listed points).
        a = np.concatenate([[0.0], np.geomspace(1e-12, 1.0, max_lines)])
        b = np.atleast_1d(report.fnr(a))
    else:
        k = curve.eps.size
        if k > max_lines:
            keep = np.unique(np.concatenate([np.linspace(0, k - 1, max_lines).round().astype(int), [0, k - 1]]))
            curve = curve_from_profile(curve.eps[keep], curve.delta[keep])
        a, b = curve.breakpoints()
    n = a.size
    return {
        "row": [i] * n,
        "mechanism_hash": [mech.content_hash] * n,
        "vertex": list(range(n)),
        "fpr": a.tolist(),
        "fnr": b.tolist(),
    }


def _table(rows: list[dict[str, Any]], metadata: dict[str, Any]) -> pa.Table:
    columns = {field.name: [r[field.name] for r in rows] for field in GRID_SCHEMA}
    table = pa.Table.from_pydict(columns, schema=GRID_SCHEMA)
    return table.replace_schema_metadata({k: json.dumps(v) for k, v in metadata.items()})


def analyze_grid_with_curves(
    mechanisms: Sequence[Mechanism],
    *,
    deltas: Sequence[float],
    fprs: Sequence[float],
    epsilon_tolerance: float = DEFAULT_EPSILON_TOLERANCE,
    gap_tolerance: float = DEFAULT_GAP_TOLERANCE,
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET,
    alpha_min: float = DEFAULT_ALPHA_MIN,
    add_guard: bool = False,
    engine: str = "grid",
    discretization: float | None = None,
    curve_lines: int | None = 256,
) -> tuple[pa.Table, pa.Table | None]:
    """(report table, long-form curve table or None when ``curve_lines`` is None). See :func:`analyze_grid`."""
    mechs = _check_mechanisms(mechanisms)
    d_q = _check_queries("deltas", deltas, allow_ends=False)
    a_q = _check_queries("fprs", fprs, allow_ends=True)
    tol = check_positive("epsilon_tolerance", epsilon_tolerance)
    if tol > 0.1:
        raise ValueError(f"epsilon_tolerance must be in (0, 0.1], got {epsilon_tolerance!r}")
    gap_tol = check_positive("gap_tolerance", gap_tolerance)
    budget = check_positive("memory_budget_bytes", memory_budget_bytes)
    check_probability("alpha_min", alpha_min, high_open=True)
    if alpha_min >= 0.5:
        raise ValueError(f"alpha_min must be < 0.5, got {alpha_min!r}")
    check_choice("engine", engine, ("grid", "per_point"))
    if discretization is not None:
        discretization = check_positive("discretization", discretization)
        if discretization > 0.1:
            raise ValueError(f"discretization must be in (0, 0.1], got {discretization!r}")
    if not isinstance(add_guard, bool):
        raise ValueError(f"add_guard must be True or False, got {add_guard!r}")
    if curve_lines is not None and (
        isinstance(curve_lines, bool) or not isinstance(curve_lines, int) or curve_lines < 2
    ):
        raise ValueError(f"curve_lines must be an integer >= 2 or None, got {curve_lines!r}")

    eng = _Engine(
        deltas=d_q,
        tol=tol,
        budget=budget,
        alpha_min=alpha_min,
        add_guard=add_guard,
        min_step=_MIN_DISCRETIZATION,
        gap_tol=gap_tol,
    )
    rows: list[dict[str, Any] | None] = [None] * len(mechs)
    curves: list[dict[str, list] | None] = [None] * len(mechs)
    fast: dict[tuple[float, float], list[int]] = {}
    for i, m in enumerate(mechs):
        use_fast = engine == "grid" and isinstance(m, SubsampledGaussian) and m.sampling_rate < 1
        if use_fast:
            fast.setdefault((m.noise_multiplier, m.sampling_rate), []).append(i)
            continue
        report = analyze(
            m,
            discretization=discretization or 1e-4,
            alpha_min=alpha_min,
        )
        rows[i] = _row_from_report(i, m, report, d_q, a_q)
        if curve_lines is not None:
            curves[i] = _curve_rows(i, m, report._pessimistic, report, curve_lines)  # noqa: SLF001
    # One (sigma, q) group at a time: its single-step PMFs and transforms are shared by every T, then released.
    for idx in fast.values():
        for i in sorted(idx, key=lambda j: -mechs[j].steps):
            res = eng.cell(mechs[i]) if discretization is None else eng.cell_fixed(mechs[i], discretization)
            rows[i] = _row(i, mechs[i], res, d_q, a_q, alpha_min, gap_tol)
            if curve_lines is not None:
                curves[i] = _curve_rows(i, mechs[i], res.curve, None, curve_lines)
        eng.release()
    meta = {
        "deltas": d_q.tolist(),
        "fprs": a_q.tolist(),
        "alpha_min": alpha_min,
        "epsilon_tolerance": tol,
        "gap_tolerance": gap_tol,
        "memory_budget_bytes": budget,
        "add_guard": add_guard,
        "engine": engine,
        "discretization": discretization,
    }
    table = _table(rows, meta)
    if curve_lines is None:
        return table, None
    cols = {f.name: [v for c in curves for v in c[f.name]] for f in CURVE_SCHEMA}
    return table, pa.Table.from_pydict(cols, schema=CURVE_SCHEMA)


def analyze_grid(
    mechanisms: Sequence[Mechanism],
    *,
    deltas: Sequence[float],
    fprs: Sequence[float],
    epsilon_tolerance: float = DEFAULT_EPSILON_TOLERANCE,
    gap_tolerance: float = DEFAULT_GAP_TOLERANCE,
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET,
    alpha_min: float = DEFAULT_ALPHA_MIN,
    add_guard: bool = False,
    engine: str = "grid",
    discretization: float | None = None,
) -> pa.Table:
    """Privacy reports of ``mechanisms`` as one Arrow table (see the module docstring for the contract).

    Args:
        mechanisms: gdpcore mechanism descriptions; one output row each, in this order.
        deltas: the delta values at which epsilon is reported (each in (0, 1)).
        fprs: the false-positive rates at which the lowest false-negative rate is reported (each in [0, 1]).
        epsilon_tolerance: target relative discretisation error of epsilon (grid engine; per cell; estimated).
        gap_tolerance: target certified gap per cell (grid engine; see ``DEFAULT_GAP_TOLERANCE``): the optimistic
            step is refined until it is met, within ``memory_budget_bytes``; the achieved gap is a column.
        memory_budget_bytes: per-cell working-memory budget; cells beyond it get a status row and an RDP fallback.
        alpha_min: FPR/FNR cut-off below which mu is not certified (see :func:`gdpcore.analyze`).
        add_guard: also compose the add direction and guard the curve with it (about twice the work).
        engine: ``"grid"`` (shared, vectorised engine for subsampled Gaussians) or ``"per_point"`` (loops
            :func:`gdpcore.analyze`: the reference path).
        discretization: a fixed step for every cell instead of the per-cell choice (and for the per-point path).
    """
    table, _ = analyze_grid_with_curves(
        mechanisms,
        deltas=deltas,
        fprs=fprs,
        epsilon_tolerance=epsilon_tolerance,
        gap_tolerance=gap_tolerance,
        memory_budget_bytes=memory_budget_bytes,
        alpha_min=alpha_min,
        add_guard=add_guard,
        engine=engine,
        discretization=discretization,
        curve_lines=None,
    )
    return table
