"""``analyze_grid(mechanisms, *, deltas) -> list[PrivacyReport]``: privacy reports for a batch of mechanisms.

The batch is accounted by one :class:`gdpcore.engine.Producer`: Poisson-subsampled Gaussians that share
(sigma, q) are taken together, largest T first, so their single-step PMFs and transforms are built once and reused
for every T (then released); compositions of several such phases (schedules) that share their set of (sigma, q) are
taken together the same way (each phase's single steps built once for all of them); every other mechanism goes
through the same producer on its own. Every report is built
from its curves the one way (:meth:`gdpcore.report.PrivacyReport.from_curves`): the grid has no numbers of its own.

:func:`report_row` flattens a report into the plain-dict row the pipeline stores (one row per mechanism, every
number beside its bound label and provenance); the Arrow schema of those rows belongs to the pipeline
(``tasks/grid_table.py``), not to this pure core.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gdpcore._validation import (
    check_alpha_min,
    check_discretization,
    check_open_unit_array,
    check_positive,
    check_tolerance,
)
from gdpcore.curve import curve_from_profile
from gdpcore.engine import DEFAULT_GRID_TOLERANCE, DEFAULT_TIME_BUDGET, Budget, Producer
from gdpcore.kinds import exact_mu, subsampled_gaussian_phases
from gdpcore.mechanisms import Mechanism
from gdpcore.report import DEFAULT_ALPHA_MIN, PrivacyReport

__all__ = [
    "BOUND_COLUMNS",
    "DEFAULT_GRID_MEMORY_BUDGET",
    "FLOAT_COLUMNS",
    "analyze_grid",
    "check_queries",
    "curve_rows",
    "report_row",
]

DEFAULT_GRID_MEMORY_BUDGET = 512 * 2**20
"""Working-memory budget of one cell in a batch, bytes (workers run cells side by side)."""

FLOAT_COLUMNS = ("mu", "mu_lower", "gdp_regret", "advantage", "advantage_lower", "bayes_security")
BOUND_COLUMNS = ("epsilon", "fnr", "mu", "gdp_regret", "advantage", "bayes_security")


def _check_mechanisms(mechanisms: Any) -> list[Mechanism]:
    if isinstance(mechanisms, (str, bytes, Mechanism)) or not isinstance(mechanisms, Sequence):
        raise ValueError(f"mechanisms must be a sequence of gdpcore mechanisms, got {mechanisms!r}")
    out = list(mechanisms)
    for i, m in enumerate(out):
        if not isinstance(m, Mechanism):
            raise ValueError(f"mechanisms[{i}] must be a gdpcore mechanism, got {m!r}")
    return out


def check_queries(name: str, values: Any, *, allow_ends: bool) -> np.ndarray:
    """A one-dimensional array of deltas (open unit interval) or FPRs (closed), or ``ValueError`` naming ``name``."""
    if isinstance(values, (str, bytes)):
        raise ValueError(f"{name} must be a sequence of numbers, got {values!r}")
    arr = check_open_unit_array(name, values, allow_zero=allow_ends, allow_one=allow_ends)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a one-dimensional sequence of numbers, got {values!r}")
    return arr


def analyze_grid(
    mechanisms: Sequence[Mechanism],
    *,
    deltas: Sequence[float],
    alpha_min: float = DEFAULT_ALPHA_MIN,
    tolerance: float = DEFAULT_GRID_TOLERANCE,
    memory_budget_bytes: float = DEFAULT_GRID_MEMORY_BUDGET,
    time_budget_seconds: float = DEFAULT_TIME_BUDGET,
    add_guard: bool = False,
    shared: bool = True,
    discretization: float | None = None,
    on_report: Callable[[int, PrivacyReport], Any] | None = None,
) -> list[Any]:
    """One :class:`PrivacyReport` per mechanism, in input order (or what ``on_report`` made of it).

    Args:
        mechanisms: gdpcore mechanism descriptions.
        deltas: the deltas whose epsilon brackets the refinement controls (each in (0, 1)).
        alpha_min: FPR/FNR cut-off below which mu is not certified (see :func:`gdpcore.analyze`).
        tolerance: target certified gap per mechanism (see :func:`gdpcore.engine.certified_gap`).
        memory_budget_bytes: per-mechanism working-memory budget; beyond it a status says what was done instead.
        time_budget_seconds: per-mechanism refinement time budget.
        add_guard: also compose the add direction of subsampled Gaussians and guard the curve with it.
        shared: share single steps between mechanisms with equal (sigma, q) (False: one producer per mechanism,
            the reference path).
        discretization: a fixed step for every mechanism instead of refinement to ``tolerance``.
        on_report: called as ``on_report(i, report)`` as soon as mechanism ``i``'s report exists; its result is kept
            instead of the report, so a large batch need not hold every report's curves (a few MB each) at once.
    """
    mechs = _check_mechanisms(mechanisms)
    d_q = check_queries("deltas", deltas, allow_ends=False)
    tol = check_tolerance(tolerance)
    budget = Budget(
        memory_bytes=check_positive("memory_budget_bytes", memory_budget_bytes),
        seconds=check_positive("time_budget_seconds", time_budget_seconds),
    )
    check_alpha_min(alpha_min)
    if discretization is not None:
        discretization = check_discretization(discretization)
    if not isinstance(add_guard, bool):
        raise ValueError(f"add_guard must be True or False, got {add_guard!r}")
    if not isinstance(shared, bool):
        raise ValueError(f"shared must be True or False, got {shared!r}")

    def producer() -> Producer:
        return Producer(deltas=d_q, alpha_min=alpha_min, tolerance=tol, budget=budget, add_guard=add_guard)

    if on_report is not None and not callable(on_report):
        raise ValueError(f"on_report must be callable or None, got {on_report!r}")

    def emit(i: int, report: PrivacyReport) -> Any:
        return report if on_report is None else on_report(i, report)

    reports: list[Any] = [None] * len(mechs)
    groups: dict[tuple[float, float], list[int]] = {}
    schedules: dict[tuple[tuple[float, float], ...], list[int]] = {}
    for i, m in enumerate(mechs):
        phases = subsampled_gaussian_phases(m) if shared else None
        if phases is not None and len(phases) == 1 and exact_mu(m) is None:
            groups.setdefault(next(iter(phases)), []).append(i)
            continue
        if phases is not None and len(phases) > 1:  # compositions of DP-SGD phases: share per set of (sigma, q)
            schedules.setdefault(tuple(sorted(phases)), []).append(i)
            continue
        curves = producer().produce(m, discretization=discretization)
        reports[i] = emit(i, PrivacyReport.from_curves(m, curves, alpha_min=alpha_min))
    # One (sigma, q) group at a time: its single steps and transforms serve every T, then are released. Schedules of
    # several phases (e.g. a swept composition of two DP-SGD phases) with the same set of (sigma, q) likewise: each
    # phase's single steps are built once for the whole set of cells.
    for idx in [*groups.values(), *schedules.values()]:
        prod = producer()
        for i in sorted(idx, key=lambda j: -_total_steps(mechs[j])):
            curves = prod.produce(mechs[i], discretization=discretization)
            reports[i] = emit(i, PrivacyReport.from_curves(mechs[i], curves, alpha_min=alpha_min))
        prod.release()
    return reports  # every index was filled exactly once


def _total_steps(mechanism: Mechanism) -> int:
    return sum((subsampled_gaussian_phases(mechanism) or {}).values())


def report_row(i: int, report: PrivacyReport, *, deltas: Sequence[float], fprs: Sequence[float]) -> dict[str, Any]:
    """The flat row of one report: every number with its bound label, the lower ends of brackets (None where
    there is none: RDP fallback), and the provenance (accountant, steps, certified gap, status, engine)."""
    mech = report.mechanism
    d_q = np.asarray(deltas, dtype=float)
    a_q = np.asarray(fprs, dtype=float)
    labels = report.bound_types
    prov = report.provenance
    eps = np.atleast_1d(report.epsilon(d_q)) if d_q.size else np.zeros(0)
    has_lower = report.has_optimistic
    eps_lo = None
    if has_lower:
        eps_lo = np.atleast_1d(report.epsilon(d_q, side="optimistic")) if d_q.size else np.zeros(0)
        eps_lo = np.minimum(eps_lo, eps)
    fnr = np.atleast_1d(report.fnr(a_q)) if a_q.size else np.zeros(0)
    mu = report.mu
    adv = report.advantage

    def lower(value: float, upper: float) -> float | None:
        return None if not has_lower or math.isnan(value) else float(min(value, upper))

    return {
        "row": i,
        "mechanism_hash": mech.content_hash,
        "mechanism_kind": mech.kind,
        "mechanism": mech.to_json(),
        "status": report.status,
        "mu": mu,
        "mu_lower": lower(report.mu_lower, mu),
        "gdp_regret": report.gdp_regret,
        "advantage": adv,
        "advantage_lower": lower(report.advantage_lower, adv),
        "bayes_security": report.bayes_security,
        "epsilon": [float(x) for x in eps],
        "epsilon_lower": None if eps_lo is None else [float(x) for x in eps_lo],
        "fnr": [float(x) for x in fnr],
        **{f"{name}_bound": labels[name] for name in BOUND_COLUMNS},
        "accountant": report.accountant,
        "discretization": report.discretization,
        "discretization_error": None if prov is None else prov.discretization_error,
        "discretization_lower": None if prov is None else prov.discretization_lower,
        "certified_gap": None if prov is None else prov.certified_gap,
        "gap_tolerance": None if prov is None else prov.tolerance,
        "support_length": None if prov is None else prov.support_length,
        "memory_estimate_bytes": None if prov is None else prov.memory_estimate_bytes,
        "engine": "closed_form" if prov is None else prov.engine,
    }


def curve_rows(i: int, report: PrivacyReport, max_lines: int) -> dict[str, list[Any]]:
    """Vertices of a thinned pessimistic curve: a subset of the supporting lines (dropping lines lowers the curve,
    so every vertex stays pessimistic); exact reports: the closed form f_mu on a dense grid."""
    mech = report.mechanism
    if report.exact:
        a = np.concatenate([[0.0], np.geomspace(1e-12, 1.0, max_lines)])
        b = np.atleast_1d(report.fnr(a))
    else:
        curve = report.curve("pessimistic")
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
