"""``analyze_grid(mechanisms, *, deltas, fprs) -> pyarrow.Table``: privacy reports for a chunk of mechanisms.

External contract (issue 5): one row per input mechanism, in input order, with float columns ``mu``,
``gdp_regret``, ``advantage``, ``bayes_security``, a string column ``status`` (``"ok"`` or the reason the row is not
a full PLD report) and list<double> columns ``epsilon`` (aligned with ``deltas``) and ``fnr`` (aligned with
``fprs``). Further columns label what each number is (``*_bound``: "upper", "lower", "estimate", "exact"), which
accountant and discretisation produced it, and where it came from (``mechanism_hash``, ``engine``).

This first version is the reference path: it loops :func:`gdpcore.analyze` (one dp_accounting PLD per mechanism).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from gdpcore._validation import check_open_unit_array, check_probability
from gdpcore.accounting import DEFAULT_DISCRETIZATION
from gdpcore.mechanisms import Mechanism
from gdpcore.report import DEFAULT_ALPHA_MIN, analyze

__all__ = ["GRID_SCHEMA", "analyze_grid"]

_FLOAT_COLUMNS = ("mu", "mu_lower", "gdp_regret", "advantage", "advantage_lower", "bayes_security")
_BOUND_COLUMNS = ("epsilon", "fnr", "mu", "gdp_regret", "advantage", "bayes_security")

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
        pa.field("engine", pa.string()),
    ]
)
"""Column order of :func:`analyze_grid` tables (metadata records ``deltas``, ``fprs`` and the settings)."""


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
        "engine": "per_point",
    }


def _table(rows: list[dict[str, Any]], metadata: dict[str, Any]) -> pa.Table:
    columns = {field.name: [r[field.name] for r in rows] for field in GRID_SCHEMA}
    table = pa.Table.from_pydict(columns, schema=GRID_SCHEMA)
    return table.replace_schema_metadata({k: json.dumps(v) for k, v in metadata.items()})


def analyze_grid(
    mechanisms: Sequence[Mechanism],
    *,
    deltas: Sequence[float],
    fprs: Sequence[float],
    discretization: float = DEFAULT_DISCRETIZATION,
    alpha_min: float = DEFAULT_ALPHA_MIN,
) -> pa.Table:
    """Privacy reports of ``mechanisms`` as one Arrow table (see the module docstring for the contract).

    Args:
        mechanisms: gdpcore mechanism descriptions; one output row each, in this order.
        deltas: the delta values at which epsilon is reported (each in (0, 1)).
        fprs: the false-positive rates at which the lowest false-negative rate is reported (each in [0, 1]).
        discretization: dp_accounting's value discretisation interval.
        alpha_min: FPR/FNR cut-off below which mu is not certified (see :func:`gdpcore.analyze`).
    """
    mechs = _check_mechanisms(mechanisms)
    d = _check_queries("deltas", deltas, allow_ends=False)
    a = _check_queries("fprs", fprs, allow_ends=True)
    if not (isinstance(discretization, float | int) and 0 < discretization <= 0.1 and math.isfinite(discretization)):
        raise ValueError(f"discretization must be in (0, 0.1], got {discretization!r}")
    check_probability("alpha_min", alpha_min, high_open=True)
    rows = []
    for i, mech in enumerate(mechs):
        report = analyze(mech, discretization=float(discretization), alpha_min=alpha_min)
        rows.append(_row_from_report(i, mech, report, d, a))
    meta = {"deltas": d.tolist(), "fprs": a.tolist(), "alpha_min": alpha_min, "discretization": discretization}
    return _table(rows, meta)
