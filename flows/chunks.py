"""Submitting one task per chunk and collecting what it wrote: the one loop grid and calibration sweeps share."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from prefect.futures import as_completed

from flows.progress import ProgressBar
from tasks.trace import phase

__all__ = ["collect_chunks"]


class SizedChunk(Protocol):
    @property
    def size(self) -> int: ...

    @property
    def short_key(self) -> str: ...


C = TypeVar("C", bound=SizedChunk)
M = TypeVar("M")


def collect_chunks(
    chunk_task: Any,
    chunks: Sequence[C],
    lake: str,
    *,
    expected_path: Callable[[C], str],
    path_of: Callable[[M], str],
    bar: ProgressBar,
) -> tuple[list[M], list[str]]:
    """Submit ``chunk_task(chunk, lake)`` for every chunk and collect the manifests ``M`` as the tasks finish.

    A chunk fails (one line in the returned failures) when its task raised or did not complete. A manifest is kept
    only when it names the chunk's own file (``path_of(manifest) == expected_path(chunk)``, both relative to the
    lake) and that file is in the lake; otherwise it is a cache hit of a deleted, quarantined or other spec's file
    and the chunk is computed again, once, with the cache refreshed. ``bar`` advances by each chunk's size when the
    chunk is collected, recomputed or not: at the end it shows every chunk. ``chunk_task`` is a Prefect task (its
    generic type cannot name ``C`` and ``M`` here)."""
    if not chunks:
        return [], []
    submitted = [(c, chunk_task.submit(c, lake)) for c in chunks]
    phase("submitted")
    by_future = {f.task_run_id: c for c, f in submitted}
    manifests: list[M] = []
    failures: list[str] = []
    stale: list[C] = []
    for fut in as_completed([f for _, f in submitted]):
        chunk = by_future[fut.task_run_id]
        result = fut.result(raise_on_failure=False)
        if isinstance(result, BaseException) or not fut.state.is_completed():
            failures.append(f"chunk {chunk.short_key}: {result!r}"[:300])
        elif path_of(result) != expected_path(chunk) or not (Path(lake) / path_of(result)).exists():
            stale.append(chunk)  # a cached manifest of a deleted, quarantined or other spec's file
        else:
            manifests.append(result)
        bar.update(chunk.size)
        phase("chunk-collected")
    if stale:  # the Prefect cache remembers a file someone deleted: recompute those chunks
        refresh = chunk_task.with_options(refresh_cache=True)
        for c, fut in [(c, refresh.submit(c, lake)) for c in stale]:
            result = fut.result(raise_on_failure=False)
            if isinstance(result, BaseException) or not fut.state.is_completed():
                failures.append(f"chunk {c.short_key}: {result!r}"[:300])
            else:
                manifests.append(result)
    return manifests, failures
