"""A chunk's rows, computed: :func:`gdpcore.analyze_grid` on the chunk's cells, shaped into the lake's staging schema
(:data:`tasks.lake.STAGING_SCHEMA`) with provenance. No Prefect and no file I/O: the process that computes a sweep's first
chunk while Prefect is still being imported imports this (``flows.pool_start.compute_first_chunk``); the chunk task
(:func:`tasks.evaluate.evaluate_chunk`) and the flow's file writing live in :mod:`tasks.evaluate`.
"""

from __future__ import annotations

import datetime as dt
import gc
import json
import time
from typing import Any

import pyarrow as pa

from tasks.lake import PARAM_COLUMNS, STAGING_SCHEMA, param_columns
from tasks.plan import Chunk, EvalSettings
from tasks.trace import phase

__all__ = [
    "chunk_table",
    "compute_chunk_table",
    "early_table",
    "error_table",
    "expect_early_rows",
    "precompute_chunk",
    "release_chunk_memory",
    "vm_rss_kib",
]


def _cell_result(i: int, report: Any, settings: EvalSettings) -> tuple[dict[str, Any], tuple[list, list, list, list]]:
    """What a lake row needs of one report (its flat row and its representation regrets), taken as soon as the
    report exists so that a chunk never holds every cell's curves at once."""
    from gdpcore.grid import report_row

    return report_row(i, report, deltas=settings.deltas, fprs=settings.fprs), _representation_regrets(report, settings)


def _grid_reports(mechs: list[Any], settings: EvalSettings) -> list[Any]:
    """gdpcore.analyze_grid on the whole chunk (one result per cell, see :func:`_cell_result`); on a numerical error, per
    cell, so one bad cell cannot sink its chunk (that cell gets an ``error: ...`` status string instead)."""
    import gdpcore

    kwargs: dict[str, Any] = {
        "deltas": list(settings.deltas),
        "alpha_min": settings.alpha_min,
        "on_report": lambda i, r: _cell_result(i, r, settings),
    }
    if settings.discretization is not None:
        kwargs["discretization"] = settings.discretization
    try:
        return list(gdpcore.analyze_grid(mechs, **kwargs))
    except (ValueError, ArithmeticError, RuntimeError, MemoryError) as exc:  # a cell too large is an error row
        if len(mechs) == 1:
            return [f"error: {type(exc).__name__}: {exc}"[:500]]
    out: list[Any] = []
    for m in mechs:
        out.extend(_grid_reports([m], settings))
    return out


def _representation_regrets(report: Any, settings: EvalSettings) -> tuple[list, list, list, list]:
    """Regret per representation, read off the same report (one accountant per row)."""
    reps, deltas, values, bounds = [], [], [], []
    for rep in (r for r in settings.representations if r != "gdp"):
        for d in settings.deltas if rep == "epsilon_delta" else (None,):
            value = report.regret(rep, delta=d) if d is not None else report.regret(rep)
            reps.append(rep)
            deltas.append(d)
            values.append(float(value))
            bounds.append("exact" if report.exact else "estimate")
    return reps, deltas, values, bounds


def compute_chunk_table(chunk: Chunk, run_id: str) -> pa.Table:
    """Evaluate every cell of ``chunk`` with gdpcore and shape the rows into :data:`STAGING_SCHEMA`."""
    import gdpcore

    mech_dicts = [json.loads(m) for m in chunk.mechanisms]
    for d in mech_dicts:
        d.pop("schema", None)
    mechs = [gdpcore.mechanism_from_dict(d) for d in mech_dicts]
    settings = chunk.settings
    reports = _grid_reports(mechs, settings)
    phase("chunk-accounted")  # chunk-start .. chunk-accounted: the accounting; the rest is shaping and writing
    return _staging_table(chunk, mechs, mech_dicts, reports, run_id)


_REPORT_COLUMNS = (
    "mu",
    "mu_lower",
    "gdp_regret",
    "advantage",
    "advantage_lower",
    "bayes_security",
    "mu_bound",
    "gdp_regret_bound",
    "advantage_bound",
    "bayes_security_bound",
    "epsilon_bound",
    "fnr_bound",
    "epsilon",
    "epsilon_lower",
    "accountant",
    "discretization",
    "discretization_lower",
    "certified_gap",
    "gap_tolerance",
    "engine",
)
"""The staging columns copied as they are from a cell's report row (:func:`gdpcore.grid.report_row`)."""


def _staging_table(
    chunk: Chunk, mechs: list[Any], mech_dicts: list[dict[str, Any]], reports: list[Any], run_id: str
) -> pa.Table:
    """The chunk's rows in :data:`STAGING_SCHEMA`, built column by column (one Arrow array per column: 3x faster
    than a list of row dicts at 2000 cells, benchmarks/RESULTS.md "CLI fixed costs"). Every row with numbers keeps
    them (ok, tolerance_not_met, discretization_limited, over_budget: all valid bounds of their labelled type); an
    error row (a status string instead of a report) has none."""
    import gdpcore

    settings = chunk.settings
    n = len(mechs)
    rows: list[dict[str, Any]] = []
    regrets: list[tuple[list, list, list, list]] = []
    with_gdp = "gdp" in settings.representations
    for rep in reports:
        if isinstance(rep, str):
            rows.append({"status": rep})
            regrets.append(([], [], [], []))
            continue
        g, more = rep
        rows.append(g)
        head = (["gdp"], [None], [g.get("gdp_regret")], [g.get("gdp_regret_bound")]) if with_gdp else ([], [], [], [])
        regrets.append(tuple(a + b for a, b in zip(head, more, strict=True)))
    ok = [not isinstance(rep, str) for rep in reports]
    jsons = [m.to_json() for m in mechs]
    params = [param_columns(d) for d in mech_dicts]
    deltas, fprs = list(settings.deltas), list(settings.fprs)
    columns: dict[str, Any] = {
        "cell_id": [gdpcore.content_hash_of_json(j) for j in jsons],
        "eval_key": [settings.eval_key] * n,
        "chunk_key": [chunk.key] * n,
        "mechanism_kind": [m.kind for m in mechs],
        "mechanism_json": jsons,
        **{col: [p[col] for p in params] for col in PARAM_COLUMNS},
        "status": [g.get("status", "error: missing row") for g in rows],
        **{k: [g.get(k) for g in rows] for k in _REPORT_COLUMNS},
        "deltas": [deltas if o else None for o in ok],
        "curve_fpr": [fprs if o else None for o in ok],
        "curve_fnr": [g.get("fnr") for g in rows],
        **{
            name: [r[j] for r in regrets]
            for j, name in enumerate(("regret_representation", "regret_delta", "regret", "regret_bound"))
        },
        "alpha_min": [settings.alpha_min] * n,
        "gdpcore_version": [gdpcore.__version__] * n,
        "code_version": [settings.code_version] * n,
        "run_id": [run_id] * n,
        "computed_at": [dt.datetime.now(dt.UTC)] * n,
    }
    return pa.Table.from_arrays([pa.array(columns[f.name], f.type) for f in STAGING_SCHEMA], schema=STAGING_SCHEMA)


def error_table(chunk: Chunk, run_id: str, exc: BaseException) -> pa.Table:
    """One ``error: ...`` row per cell of a chunk whose table could not be built: every cell keeps exactly one row."""
    import gdpcore

    status = f"error: {type(exc).__name__}: {exc}"[:500]
    now = dt.datetime.now(dt.UTC)
    rows = []
    for mech_json in chunk.mechanisms:
        data = json.loads(mech_json)
        data.pop("schema", None)
        rows.append(
            {
                "cell_id": gdpcore.mechanism_from_dict(data).content_hash,
                "eval_key": chunk.settings.eval_key,
                "chunk_key": chunk.key,
                "mechanism_kind": chunk.kind,
                "mechanism_json": mech_json,
                "status": status,
                "alpha_min": chunk.settings.alpha_min,
                "gdpcore_version": gdpcore.__version__,
                "code_version": chunk.settings.code_version,
                "run_id": run_id,
                "computed_at": now,
            }
        )
    return pa.Table.from_pylist(rows, schema=STAGING_SCHEMA)


def chunk_table(chunk: Chunk, run_id: str) -> pa.Table:
    """Every cell of ``chunk`` as one row: the computed table, or one ``error: ...`` row per cell if it cannot be
    built (e.g. a value outside int64)."""
    try:
        return compute_chunk_table(chunk, run_id)
    except (ValueError, ArithmeticError, TypeError, pa.ArrowException) as exc:
        return error_table(chunk, run_id, exc)


def release_chunk_memory() -> None:
    """After a chunk, in the worker that computed it: collect the chunk's garbage and hand the freed heap back to the
    OS (glibc ``malloc_trim(0)``; a no-op elsewhere).

    Why: a pool worker lives for the whole sweep and computes hundreds of chunks. glibc returns freed memory to the
    OS only from the top of each arena, so the chunk's transient arrays (the engine's PLDs, the rows, the Arrow
    table: ~100 MiB at 2000 cells, benchmarks/RESULTS.md "Scale") can stay resident as free but fragmented heap,
    per arena (Prefect's client threads allocate in arenas of their own). Trimming after every chunk keeps the
    worker's RSS between chunks close to what it really keeps (its imports and caches: 11 MiB less after each
    50-cell chunk, measured), which tests/pipeline/test_worker_memory.py checks chunk after chunk. It is a bound,
    not the cause of the growth measured at 10^5 cells, which chunks of up to 2000 cells on 2 x 10^4-cell grids
    did not reproduce. Costs milliseconds per chunk."""
    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


_TRIM: list[Any] = []


def _malloc_trim() -> Any:
    """glibc's ``malloc_trim`` (looked up once), or None on another C library."""
    if not _TRIM:
        try:
            import ctypes

            _TRIM.append(ctypes.CDLL("libc.so.6").malloc_trim)
        except (OSError, AttributeError):
            _TRIM.append(None)
    return _TRIM[0]


def vm_rss_kib() -> int | None:
    """This process's resident set (``VmRSS``, KiB) from /proc, None where there is none."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


_EARLY: dict[str, tuple[pa.Table, float]] = {}
"""Rows this process computed before the flow run existed (:func:`precompute_chunk`): chunk key -> (table with an
empty run_id, seconds). Read once by the first task this worker runs."""

_EARLY_PIPES: list[Any] = []
"""In a pool worker: the pipe from the process that computes the flow's first chunk beside it
(``flows.pool_start.compute_first_chunk``, :func:`expect_early_rows`). Read once, by the first task."""


def precompute_chunk(chunk: Chunk) -> None:
    """Compute ``chunk``'s rows now, in this process, for the task that will ask for them (:func:`early_table`)."""
    started = time.perf_counter()
    _EARLY[chunk.key] = (chunk_table(chunk, ""), time.perf_counter() - started)


def expect_early_rows(pipe: Any) -> None:
    """The first task this worker runs takes its rows from ``pipe`` if they are its chunk's (:func:`early_table`):
    the pipe first brings (chunk key, pid of the process computing it), then (table with an empty run_id, seconds)."""
    _EARLY_PIPES[:] = [pipe]


def early_table(chunk: Chunk, run_id: str) -> tuple[pa.Table, float] | None:
    """The rows computed ahead of the flow run for this very chunk (same content key: same cells, settings and code),
    by this process (:func:`precompute_chunk`) or by the process beside it (:func:`expect_early_rows`: this waits
    for them), stamped with ``run_id``; None otherwise. Whatever was computed ahead is dropped at the first task."""
    early = _EARLY.pop(chunk.key, None)
    _EARLY.clear()
    if _EARLY_PIPES:
        pipe = _EARLY_PIPES.pop()
        if early is None:
            early = _rows_from_pipe(pipe, chunk.key)
        else:
            pipe.close()
    if early is None:
        return None
    table, seconds = early
    i = table.schema.get_field_index("run_id")
    field = table.schema.field(i)
    return table.set_column(i, field, pa.array([run_id] * table.num_rows, field.type)), seconds


def _rows_from_pipe(pipe: Any, key: str) -> tuple[pa.Table, float] | None:
    """The rows the process at the other end of ``pipe`` computes, if they are chunk ``key``'s (it is stopped
    otherwise: its work would be wasted); None when it ended without them (an error, the command ended). Closes the
    pipe."""
    import os
    import signal

    try:
        their_key, pid = pipe.recv()
        if their_key != key:
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass
            return None
        table, seconds = pipe.recv()  # waits while it computes
    except (EOFError, OSError, ValueError, TypeError):
        return None
    finally:
        pipe.close()
    phase("early-rows")  # chunk-start .. early-rows: this task waited for the first-chunk process
    if not isinstance(table, pa.Table) or not table.schema.equals(STAGING_SCHEMA, check_metadata=False):
        return None
    if table.num_rows and set(table.column("chunk_key").to_pylist()) != {key}:  # (no pyarrow.compute: 0.05 s import)
        return None
    return table, float(seconds)
