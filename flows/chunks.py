"""Submitting one task per chunk and persisting what it returns: the one loop grid and calibration sweeps share.

The chunk tasks only compute; they return the chunk's rows (Arrow IPC bytes, :class:`tasks.evaluate.ChunkResult`)
and this loop, in the flow process, writes each chunk's file as soon as its task finishes and then checks that the
file is in the lake with one row per cell. The flow is the only writer, so a Dask worker never needs to see the
lake's folder: a cluster whose workers mount another disk (or none) produces the same lake as a local run. A chunk
counts as done only once its file is verified; anything else (the task raised, returned something that is not the
chunk's rows, the write failed, the file is not where the flow reads it) is a failure line, and the sweep raises
after publishing what it did persist - never "0 failed" with rows missing.

Memory: a result is written and released as soon as its task finishes (completion order, not submission order), so
the flow holds the rows of the chunks that finished since it last wrote, not of the whole sweep.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pyarrow as pa

from flows.progress import ProgressBar
from tasks.trace import phase

__all__ = ["collect_chunks", "persisted_problem"]


class SizedChunk(Protocol):
    @property
    def size(self) -> int: ...

    @property
    def short_key(self) -> str: ...


C = TypeVar("C", bound=SizedChunk)
M = TypeVar("M")


def persisted_problem(lake: str, relpath: str, expected: str, rows: int) -> str | None:
    """None when ``<lake>/<expected>`` is a readable Parquet file of ``rows`` rows and the writer named that path
    (``relpath``); otherwise why the chunk is not in the lake. Checked by the flow, on the path it reads."""
    if relpath != expected:
        return f"its file was written to {relpath!r}, not {expected!r}"
    path = Path(lake) / expected
    if not path.is_file():
        return f"its file {path} is not in the lake after the write"
    from tasks.lake import check_parquet

    problem = check_parquet(path)
    if problem is not None:
        return f"its file {path} is unreadable: {problem}"
    import pyarrow.parquet as pq

    found = pq.read_metadata(path).num_rows
    if found != rows:
        return f"its file {path} has {found} rows for {rows} cells"
    return None


def _announce(chunk_task: Any, chunks: Sequence[Any]) -> None:
    """Emit the Prefect event ``gdp.chunks.submitted`` (the chunk task's name, how many chunks and cells), for
    automations and the run's event feed, from the flow's own context before any chunk task runs.

    It also keeps finished results collectable. Prefect's events client is a process-wide service that keeps the
    context of the call that starts it: started by a task (a thread runner's task emitting its first state event),
    it would keep that task run, its result included, alive for the rest of the process (the chain, traced with
    ``gc.get_referrers``: result -> ResultRecord -> State -> TaskRun -> TaskRunContext -> a context copy). The flow
    run's heartbeat thread used to start it first; a flow run without heartbeats
    (:func:`flows.runners.flow_run_settings`) starts it here (tests/pipeline/test_collect_chunks.py)."""
    from prefect.events import emit_event

    name = str(getattr(chunk_task, "name", "chunk-task"))
    emit_event(
        event="gdp.chunks.submitted",
        resource={"prefect.resource.id": f"gdp.chunks.{name}", "prefect.resource.name": name},
        payload={"chunks": len(chunks), "cells": sum(int(getattr(c, "size", 1)) for c in chunks)},
    )


def collect_chunks(
    chunk_task: Any,
    chunks: Sequence[C],
    lake: str,
    *,
    write: Callable[[C, Any], M],
    expected_path: Callable[[C], str],
    path_of: Callable[[M], str],
    bar: ProgressBar,
    while_computing: Callable[[], None] | None = None,
    on_persisted: Callable[[M], None] | None = None,
    when_idle: Callable[[M], None] | None = None,
) -> tuple[list[M], list[str]]:
    """Submit ``chunk_task(chunk)`` for every chunk; as each finishes, ``write(chunk, result)`` its rows into the lake
    (in this process) and keep the manifest ``M`` it returns once :func:`persisted_problem` finds the chunk's file
    (``expected_path(chunk)``, relative to ``lake``) with one row per cell.

    Returns (manifests, failures): one failure line per chunk whose task raised or did not complete, whose result
    could not be written, or whose file is not in the lake afterwards. ``bar`` advances by each chunk's size when
    it is collected, failed or not. ``chunk_task`` is a Prefect task (its generic type cannot name ``C`` here).

    ``while_computing`` runs here once every chunk is submitted, while the workers compute (the flow process is
    otherwise idle until the first chunk finishes); if it raises, every finished chunk is still written and checked,
    and its exception is raised then. ``on_persisted(manifest)`` runs for each chunk as soon as its file passed the
    check (a lake on object storage pushes it then). ``when_idle(manifest)`` runs after that only if no other
    finished chunk is waiting to be written (work that can wait, such as compacting the chunk for the report: this
    loop never falls behind the workers for it)."""
    if not chunks:
        return [], []
    _announce(chunk_task, chunks)
    finished: queue.SimpleQueue[Any] = queue.SimpleQueue()
    pending: dict[Any, tuple[C, Any]] = {}
    for chunk in chunks:
        fut = chunk_task.submit(chunk)
        pending[fut.task_run_id] = (chunk, fut)
        fut.add_done_callback(lambda f: finished.put(f.task_run_id))
    phase("submitted")
    error: BaseException | None = None
    if while_computing is not None:
        try:
            while_computing()
        except Exception as exc:  # raised once the chunks in flight are persisted
            error = exc
    manifests: list[M] = []
    failures: list[str] = []
    while pending:
        chunk, fut = pending.pop(finished.get())
        problem = _persist(fut, chunk, lake, write, expected_path, path_of, manifests)
        if problem is None and on_persisted is not None:
            on_persisted(manifests[-1])
        if problem is None and when_idle is not None and finished.empty():
            when_idle(manifests[-1])
        del fut  # the future holds the rows: released as soon as they are written (Dask frees them on its worker)
        if problem is not None:
            failures.append(f"chunk {chunk.short_key}: {problem}"[:300])
        bar.update(chunk.size)
        phase("chunk-collected")
    if error is not None:
        raise error
    return manifests, failures


def _persist(
    fut: Any,
    chunk: C,
    lake: str,
    write: Callable[[C, Any], M],
    expected_path: Callable[[C], str],
    path_of: Callable[[M], str],
    manifests: list[M],
) -> str | None:
    """Write one finished task's rows and verify the file; the manifest is appended to ``manifests`` only then.
    Returns why the chunk is not in the lake, or None."""
    result = fut.result(raise_on_failure=False)
    if isinstance(result, BaseException) or not fut.state.is_completed():
        return repr(result)
    try:
        manifest = write(chunk, result)
    except (OSError, ValueError, pa.ArrowException) as exc:  # a full disk, a result that is not the chunk's rows
        return f"its rows could not be written: {type(exc).__name__}: {exc}"
    problem = persisted_problem(lake, path_of(manifest), expected_path(chunk), chunk.size)
    if problem is None:
        manifests.append(manifest)
    return problem
