"""Chunked evaluation: plan which cells of a spec still need computing, evaluate one chunk (on any worker), write its
Parquet file (in the flow process).

The numbers come from :func:`gdpcore.analyze_grid` (one row per mechanism); :mod:`tasks.chunk_rows` shapes them into
the lake's staging schema (:data:`tasks.lake.STAGING_SCHEMA`) with provenance, without Prefect. This module holds the
chunk task and the flow's side (planning, writing and checking each chunk's file). A chunk is a few dozen to a few
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
import errno
import multiprocessing
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.chunk_rows import (  # noqa: F401 - re-exported: computing a chunk's rows needs no Prefect
    chunk_table,
    compute_chunk_table,
    early_table,
    error_table,
    precompute_chunk,
    release_chunk_memory,
    vm_rss_kib,
)
from tasks.lake import (
    STAGING_SCHEMA,
    atomic_write_parquet,
    chunk_path,
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
    early = early_table(chunk, current_run_id())
    table, seconds = early if early is not None else (chunk_table(chunk, current_run_id()), 0.0)
    data = table_to_ipc(table)
    del table, early
    if multiprocessing.parent_process() is not None:  # a pool or Dask worker; not the flow process (thread runner)
        release_chunk_memory()
    phase("chunk-computed")
    if os.environ.get("GDP_TRACE"):
        phase(f"worker-rss kib={vm_rss_kib()}")  # what this worker keeps after the chunk (test_worker_memory.py)
        from prefect.settings import get_current_settings

        phase(f"chunk-api url={get_current_settings().api.url}")  # the server this task reported to
    return ChunkResult(data, seconds + time.perf_counter() - started)


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
