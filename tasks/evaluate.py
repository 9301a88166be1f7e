"""Chunked evaluation: plan which cells of a spec still need computing, evaluate one chunk (on any worker), write its
Parquet file (in the flow process).

The numbers come from :func:`gdpcore.analyze_grid` (one row per mechanism). This module only shapes them into the
lake's staging schema (:data:`tasks.lake.STAGING_SCHEMA`) and adds provenance. A chunk is a few dozen to a few
thousand cells, so a flow run has hundreds of task runs, not one per cell (docs/references.md C-1).

Resumability and persistence:

* planning (:func:`plan_sweep`) drops cells whose (cell_id, eval_key) is already in the spec's staging files, so a
  re-run computes nothing and an edit to one grid value computes only the new cells (the lake is the cache: chunk
  tasks have no Prefect cache, see :data:`CHUNK_TASK_RETRIES`);
* every chunk file is written by the flow process from the rows its task returned (:func:`write_chunk`) and checked
  before the chunk counts (``flows.chunks.collect_chunks``): a chunk is in the lake once its file is, whatever
  happened to the worker that computed it.

Why the flow, not the worker, writes: on a Dask cluster whose workers do not mount the flow's disk (Kubernetes,
cloud clusters), files written by workers land where the flow cannot see them, and the sweep reported chunks as
computed that were never in the lake. Returning the rows costs their Arrow IPC bytes through Dask (zstd, 1.1-1.5 KB
per cell with the lake's 133 curve points: less than the Parquet file they become, PIPELINE.md), small next to the
accounting, and leaves one writer per lake: the flow, which already holds the spec's lock (:mod:`tasks.locks`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import errno
import gc
import json
import multiprocessing
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.lake import (
    STAGING_SCHEMA,
    atomic_write_parquet,
    chunk_path,
    param_columns,
    table_from_ipc,
    table_to_ipc,
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
from tasks.schema import is_complete_status
from tasks.spec import GridSpec
from tasks.trace import phase

__all__ = [
    "CHUNK_TASK_RETRIES",
    "CURVE_FPRS",
    "Chunk",
    "ChunkManifest",
    "ChunkResult",
    "EvalSettings",
    "SweepPlan",
    "compute_chunk_table",
    "current_run_id",
    "evaluate_chunk",
    "plan_sweep",
    "precompute_chunk",
    "release_chunk_memory",
    "transient_io_error",
    "write_chunk",
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


# How a chunk task (evaluate-chunk, calibrate-chunk) runs: no Prefect result persistence and no task cache - the lake
# is the cache (planning skips every cell already in it), and a cached result would either claim a file the flow
# cannot see or keep a second copy of the rows in each worker's result storage. Retries for transient I/O errors only.
CHUNK_TASK_RETRIES: dict[str, Any] = {
    "persist_result": False,
    "cache_policy": NO_CACHE,
    "retries": 2,
    "retry_delay_seconds": [2, 10],
    "retry_condition_fn": transient_io_error,
}


@dataclasses.dataclass(frozen=True)
class ChunkResult:
    """What a chunk task returns to the flow: the chunk's rows as Arrow IPC bytes (:func:`tasks.lake.table_to_ipc`)
    and the seconds the worker spent. The flow writes the file (:func:`write_chunk`); the task touches no disk."""

    data: bytes
    seconds: float


def current_run_id() -> str:
    """The running flow's id ("no-flow-run" outside a flow): the run_id stored with a chunk."""
    from prefect.runtime import flow_run

    return str(flow_run.id or "no-flow-run")


def chunk_table(chunk: Chunk, run_id: str) -> pa.Table:
    """Every cell of ``chunk`` as one row: the computed table, or one ``error: ...`` row per cell if it cannot be
    built (e.g. a value outside int64)."""
    try:
        return compute_chunk_table(chunk, run_id)
    except (ValueError, ArithmeticError, TypeError, pa.ArrowException) as exc:
        return error_table(chunk, run_id, exc)


@task(
    name="evaluate-chunk",
    task_run_name="evaluate {chunk.spec_name}/{chunk.short_key} ({chunk.size} cells)",
    **CHUNK_TASK_RETRIES,
)
def evaluate_chunk(chunk: Chunk) -> ChunkResult:
    """Evaluate one chunk on whichever worker runs it and return its rows (no file is written here: the worker may
    not see the lake at all; the flow writes it with :func:`write_chunk`)."""
    phase("chunk-start")
    started = time.perf_counter()
    early = _early_table(chunk, current_run_id())
    table, seconds = early if early is not None else (chunk_table(chunk, current_run_id()), 0.0)
    data = table_to_ipc(table)
    del table, early
    if multiprocessing.parent_process() is not None:  # a pool or Dask worker; not the flow process (thread runner)
        release_chunk_memory()
    phase("chunk-computed")
    if os.environ.get("GDP_TRACE"):
        phase(
            f"worker-rss kib={_vm_rss_kib()}"
        )  # what this worker keeps after the chunk (tests/pipeline/test_worker_memory.py)
    return ChunkResult(data, seconds + time.perf_counter() - started)


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


def _vm_rss_kib() -> int | None:
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
"""Rows a process-pool worker computed before the flow run existed (``flows.runners.start_workers``, while the API
server booted): chunk key -> (table with an empty run_id, seconds). Read once by the first task this worker runs."""


def precompute_chunk(chunk: Chunk) -> None:
    """Compute ``chunk``'s rows now, in this worker, for the task that will ask for them (:func:`evaluate_chunk`)."""
    started = time.perf_counter()
    _EARLY[chunk.key] = (chunk_table(chunk, ""), time.perf_counter() - started)


def _early_table(chunk: Chunk, run_id: str) -> tuple[pa.Table, float] | None:
    """The rows :func:`precompute_chunk` computed for this very chunk (same content key: same cells, settings and
    code), stamped with ``run_id``; None otherwise. Whatever this worker precomputed is dropped at its first task."""
    early = _EARLY.pop(chunk.key, None)
    _EARLY.clear()
    if early is None:
        return None
    table, seconds = early
    i = table.schema.get_field_index("run_id")
    field = table.schema.field(i)
    return table.set_column(i, field, pa.array([run_id] * table.num_rows, field.type)), seconds


def write_chunk(lake: Path, chunk: Chunk, result: ChunkResult) -> ChunkManifest:
    """In the flow process: decode a chunk task's rows, check there is one per cell of ``chunk``, write them to the
    chunk's content-addressed file (temp + rename) and return its manifest. ``ValueError`` for a result that is not
    the chunk's rows."""
    if not isinstance(result, ChunkResult):
        raise ValueError(f"the chunk task returned {type(result).__name__}, not its rows")
    table = table_from_ipc(result.data, STAGING_SCHEMA)
    keys = set(table.column("chunk_key").to_pylist())
    if table.num_rows != chunk.size or keys != {chunk.key}:
        raise ValueError(
            f"the chunk task returned {table.num_rows} rows of chunks {sorted(keys)[:2]} for {chunk.size} cells"
        )
    run_id = str(table.column("run_id")[0])
    path = chunk_path(lake, chunk.spec_name, chunk.kind, chunk.key)
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
    ok_mask = [is_complete_status(s) for s in table.column("status").to_pylist()]
    mus = [m for m, ok in zip(table.column("mu").to_pylist(), ok_mask, strict=True) if ok and m is not None]
    phase("chunk-written")
    return ChunkManifest(
        chunk_key=chunk.key,
        path=str(path.relative_to(lake)),
        cells=table.num_rows,
        cells_ok=sum(ok_mask),
        worst_mu=max(mus) if mus else None,
        seconds=result.seconds,
        computed_by_run=run_id,
    )


def chunk_cells(chunks: Sequence[Chunk]) -> int:
    return sum(c.size for c in chunks)
