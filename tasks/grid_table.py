"""The Arrow contract of grid results: :data:`GRID_SCHEMA` rows and :data:`CURVE_SCHEMA` curve vertices.

The numbers come from :func:`gdpcore.analyze_grid` (one :class:`gdpcore.PrivacyReport` per mechanism) and are
flattened by :func:`gdpcore.grid.report_row`; this module only fixes their column types and order (Arrow belongs to
the pipeline, not to the pure core).

Columns: ``row``, the mechanism's hash, kind and canonical JSON, ``status`` ("ok" or why the numbers are looser than
asked), float columns ``mu``, ``gdp_regret``, ``advantage``, ``bayes_security`` and the lower ends of their brackets
(``*_lower``, null where there is none), list<double> ``epsilon`` / ``epsilon_lower`` (aligned with ``deltas``) and
``fnr`` (aligned with ``fprs``), bound labels (``*_bound``: "upper", "lower", "estimate", "exact"), the accountant and
its steps (``discretization``, ``discretization_lower``), the estimated discretisation error, the certified gap and
its target (``gap_tolerance``), the support length, the memory plan and the ``engine`` ("gdpcore.pld",
"closed_form" or "rdp_fallback"; :data:`gdpcore.engine.PLD_ENGINE`). Table metadata records ``deltas``, ``fprs`` and the settings.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from gdpcore import Mechanism, analyze_grid
from gdpcore.engine import DEFAULT_GRID_TOLERANCE, DEFAULT_TIME_BUDGET
from gdpcore.grid import BOUND_COLUMNS, DEFAULT_GRID_MEMORY_BUDGET, FLOAT_COLUMNS, check_queries, curve_rows, report_row
from gdpcore.report import DEFAULT_ALPHA_MIN

__all__ = ["CURVE_SCHEMA", "GRID_SCHEMA", "analyze_grid_table", "analyze_grid_tables"]

GRID_SCHEMA = pa.schema(
    [
        pa.field("row", pa.int64(), nullable=False),
        pa.field("mechanism_hash", pa.string(), nullable=False),
        pa.field("mechanism_kind", pa.string(), nullable=False),
        pa.field("mechanism", pa.string(), nullable=False),  # canonical JSON of the mechanism
        pa.field("status", pa.string(), nullable=False),
        *(pa.field(name, pa.float64()) for name in FLOAT_COLUMNS),
        pa.field("epsilon", pa.list_(pa.float64())),
        pa.field("epsilon_lower", pa.list_(pa.float64())),
        pa.field("fnr", pa.list_(pa.float64())),
        *(pa.field(f"{name}_bound", pa.string()) for name in BOUND_COLUMNS),
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
"""Column order of grid tables (see the module docstring)."""

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


def analyze_grid_tables(
    mechanisms: Sequence[Mechanism],
    *,
    deltas: Sequence[float],
    fprs: Sequence[float],
    alpha_min: float = DEFAULT_ALPHA_MIN,
    tolerance: float = DEFAULT_GRID_TOLERANCE,
    memory_budget_bytes: float = DEFAULT_GRID_MEMORY_BUDGET,
    time_budget_seconds: float = DEFAULT_TIME_BUDGET,
    add_guard: bool = False,
    shared: bool = True,
    discretization: float | None = None,
    curve_lines: int | None = 256,
) -> tuple[pa.Table, pa.Table | None]:
    """(report table, long-form curve table or None when ``curve_lines`` is None) of :func:`gdpcore.analyze_grid`."""
    a_q = check_queries("fprs", fprs, allow_ends=True)
    if curve_lines is not None and (
        isinstance(curve_lines, bool) or not isinstance(curve_lines, int) or curve_lines < 2
    ):
        raise ValueError(f"curve_lines must be an integer >= 2 or None, got {curve_lines!r}")
    d_q = [float(d) for d in deltas]
    a_list = a_q.tolist()

    def row_of(i: int, r: Any) -> tuple[dict[str, Any], dict[str, list] | None]:
        # Rows straight away: the reports (and their curves) are not kept for the whole batch.
        return report_row(i, r, deltas=d_q, fprs=a_list), (
            None if curve_lines is None else curve_rows(i, r, curve_lines)
        )

    results = analyze_grid(
        mechanisms,
        deltas=deltas,
        alpha_min=alpha_min,
        tolerance=tolerance,
        memory_budget_bytes=memory_budget_bytes,
        time_budget_seconds=time_budget_seconds,
        add_guard=add_guard,
        shared=shared,
        discretization=discretization,
        on_report=row_of,
    )
    rows = [row for row, _ in results]
    meta = {
        "deltas": d_q,
        "fprs": a_q.tolist(),
        "alpha_min": alpha_min,
        "tolerance": tolerance,
        "memory_budget_bytes": memory_budget_bytes,
        "time_budget_seconds": time_budget_seconds,
        "add_guard": add_guard,
        "shared": shared,
        "discretization": discretization,
    }
    table = _table(rows, meta)
    if curve_lines is None:
        return table, None
    curves = [c for _, c in results if c is not None]
    cols = {f.name: [v for c in curves for v in c[f.name]] for f in CURVE_SCHEMA}
    return table, pa.Table.from_pydict(cols, schema=CURVE_SCHEMA)


def analyze_grid_table(mechanisms: Sequence[Mechanism], **kwargs: Any) -> pa.Table:
    """:func:`analyze_grid_tables` without the curve table."""
    kwargs["curve_lines"] = None
    table, _ = analyze_grid_tables(mechanisms, **kwargs)
    return table


def _table(rows: list[dict[str, Any]], metadata: dict[str, Any]) -> pa.Table:
    columns = {field.name: [r[field.name] for r in rows] for field in GRID_SCHEMA}
    table = pa.Table.from_pydict(columns, schema=GRID_SCHEMA)
    return table.replace_schema_metadata({k: json.dumps(v) for k, v in metadata.items()})
