"""Chunked evaluation: plan which cells of a spec still need computing, evaluate one chunk, write one Parquet file.

The numbers come from :func:`gdpcore.analyze_grid` (one row per mechanism). This module only shapes them into the
lake's staging schema (:data:`tasks.lake.STAGING_SCHEMA`) and adds provenance. A chunk is a few dozen to a few
thousand cells, so a flow run has hundreds of task runs, not one per cell (docs/references.md C-1).

Resumability has two layers:

* planning (:func:`plan_sweep`) drops cells whose (cell_id, eval_key) is already in the spec's staging files, so a
  re-run computes nothing and an edit to one grid value computes only the new cells;
* the Prefect task cache is keyed on the chunk key (cells + evaluation settings + gdpcore code version) and the lake,
  so a retried flow run that re-plans the same chunk reuses the finished task's manifest.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import errno
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from prefect import task
from prefect.cache_policies import TASK_SOURCE, CacheKeyFnPolicy

from tasks.lake import (
    STAGING_SCHEMA,
    atomic_write_parquet,
    chunk_path,
    param_columns,
)
from tasks.plan import (  # noqa: F401 - re-exported: planning lives in tasks.plan (importable without Prefect)
    CURVE_FPRS,
    Chunk,
    ChunkManifest,
    EvalSettings,
    SweepPlan,
    _hash,
    _sharing_key,
    auto_chunk_size,
    build_plan,
)
from tasks.spec import GridSpec
from tasks.trace import phase

__all__ = [
    "CHUNK_TASK_RETRIES",
    "CURVE_FPRS",
    "Chunk",
    "ChunkManifest",
    "EvalSettings",
    "SweepPlan",
    "compute_chunk_table",
    "current_run_id",
    "evaluate_chunk",
    "plan_sweep",
    "transient_io_error",
]


@task(name="plan-sweep", retries=2, retry_delay_seconds=1)
def plan_sweep(spec: GridSpec, lake: str, workers: int = 2) -> SweepPlan:
    """Which cells of ``spec`` are missing from the lake, cut into chunks."""
    return build_plan(spec, Path(lake), workers=workers)


# -- evaluation ----------------------------------------------------------------------------------------------------------
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
    now = dt.datetime.now(dt.UTC)
    eval_key, chunk_key, version = settings.eval_key, chunk.key, gdpcore.__version__  # once per chunk, not per row
    rows = []
    for mech, mdict, rep in zip(mechs, mech_dicts, reports, strict=True):
        if isinstance(rep, str):
            g: dict[str, Any] = {"status": rep}
        else:
            g, more = rep
        # Every row with numbers keeps them (ok, tolerance_not_met, discretization_limited, over_budget: all valid
        # bounds of their labelled type); only error rows have none.
        ok = not isinstance(rep, str)
        reps, rdeltas, rvalues, rbounds = (["gdp"], [None], [g.get("gdp_regret")], [g.get("gdp_regret_bound")])
        if ok and "gdp" not in settings.representations:
            reps, rdeltas, rvalues, rbounds = [], [], [], []
        if ok:
            reps, rdeltas, rvalues, rbounds = (
                a + b for a, b in zip((reps, rdeltas, rvalues, rbounds), more, strict=True)
            )
        else:
            reps, rdeltas, rvalues, rbounds = [], [], [], []
        row = {
            "cell_id": mech.content_hash,
            "eval_key": eval_key,
            "chunk_key": chunk_key,
            "mechanism_kind": mech.kind,
            "mechanism_json": mech.to_json(),
            **param_columns(mdict),
            "status": g.get("status", "error: missing row"),
            **{
                k: g.get(k)
                for k in (
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
            },
            "deltas": list(settings.deltas) if ok else None,
            "curve_fpr": list(settings.fprs) if ok else None,
            "curve_fnr": g.get("fnr"),
            "regret_representation": reps,
            "regret_delta": rdeltas,
            "regret": rvalues,
            "regret_bound": rbounds,
            "alpha_min": settings.alpha_min,
            "gdpcore_version": version,
            "code_version": settings.code_version,
            "run_id": run_id,
            "computed_at": now,
        }
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=STAGING_SCHEMA)


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


def _chunk_cache_key(context: Any, parameters: dict[str, Any]) -> str:
    """Chunk content (cells + settings + gdpcore code version), the spec it belongs to and the lake it was written to.

    The spec is part of the key: two specs sharing cells have chunks with equal content, and a cache hit across specs
    returned the *other* spec's file, so the second spec's cells were never written (found by fault injection)."""
    chunk: Chunk = parameters["chunk"]
    where = _hash([chunk.spec_name, chunk.kind, str(Path(parameters["lake"]).resolve())])[:12]
    return f"gdp-chunk-{chunk.key}-{where}"


_PERMANENT_IO = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR})


def transient_io_error(task: Any, task_run: Any, state: Any) -> bool:
    """Retry only transient I/O failures (NFS hiccup, lost file handle); a full disk, a read-only or forbidden folder
    and numerical errors fail at once (retrying a full disk took minutes per chunk)."""
    try:
        state.result()
    except OSError as exc:
        return exc.errno not in _PERMANENT_IO
    except Exception:
        return False
    return False


# How a chunk task (evaluate-chunk, calibrate-chunk) persists its result and retries: transient I/O errors only.
CHUNK_TASK_RETRIES: dict[str, Any] = {
    "persist_result": True,
    "retries": 2,
    "retry_delay_seconds": [2, 10],
    "retry_condition_fn": transient_io_error,
}


def current_run_id() -> str:
    """The running flow's id ("no-flow-run" outside a flow): the run_id stored with a chunk."""
    from prefect.runtime import flow_run

    return str(flow_run.id or "no-flow-run")


@task(
    name="evaluate-chunk",
    task_run_name="evaluate {chunk.spec_name}/{chunk.short_key} ({chunk.size} cells)",
    cache_policy=CacheKeyFnPolicy(cache_key_fn=_chunk_cache_key) + TASK_SOURCE,
    **CHUNK_TASK_RETRIES,
)
def evaluate_chunk(chunk: Chunk, lake: str) -> ChunkManifest:
    """Evaluate one chunk and write it as one Parquet file (temp + rename); return its manifest."""
    phase("chunk-start")
    started = time.perf_counter()
    run_id = current_run_id()
    try:
        table = compute_chunk_table(chunk, run_id)
    except (ValueError, ArithmeticError, TypeError, pa.ArrowException) as exc:  # e.g. a value outside int64
        table = error_table(chunk, run_id, exc)
    phase("chunk-computed")
    path = chunk_path(Path(lake), chunk.spec_name, chunk.kind, chunk.key)
    atomic_write_parquet(
        table,
        path,
        {
            "run_id": run_id,
            "chunk_key": chunk.key,
            "code_version": chunk.settings.code_version,
            "settings": dataclasses.asdict(chunk.settings),
        },
    )
    ok_mask = [s == "ok" for s in table.column("status").to_pylist()]
    mus = [m for m, ok in zip(table.column("mu").to_pylist(), ok_mask, strict=True) if ok and m is not None]
    phase("chunk-written")
    return ChunkManifest(
        chunk_key=chunk.key,
        path=str(path.relative_to(Path(lake))),
        cells=table.num_rows,
        cells_ok=sum(ok_mask),
        worst_mu=max(mus) if mus else None,
        seconds=time.perf_counter() - started,
        computed_by_run=run_id,
    )


def chunk_cells(chunks: Sequence[Chunk]) -> int:
    return sum(c.size for c in chunks)
