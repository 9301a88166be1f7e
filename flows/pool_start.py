"""A process runner's pool: its workers start before Prefect is imported, and compute before they import it.

Why: in a ``gdp sweep`` on one worker, the accounting is the critical path and everything else can overlap it. Before
this module, the worker was spawned by Prefect's runner once the CLI had imported Prefect (~3 s after launch on
2 cores), and it imported Prefect's task engine before its first chunk (benchmarks/RESULTS.md, "CLI fixed costs":
the worker was ready to compute 5.5 s after launch). Now the CLI spawns the pool as soon as it has planned
(:func:`spawn_workers`, stdlib imports only), each worker runs :func:`start_worker` first, which computes the chunk
the flow will submit first (a pool of one worker: with several, the first tasks reach them in no fixed order) with
gdpcore alone (:mod:`tasks.chunk_rows` needs no Prefect), and only then imports Prefect and sets up its event and log
forwarding. The flow's task runner (``flows.runners``) adopts this pool (:func:`take_pool`) instead of starting its
own; the submission of every task, its states and retries, and the flow's writing and checking of every file are
Prefect's and the flow's as before. The chunk's task, when it reaches that worker, returns the precomputed rows
stamped with its run id (:func:`tasks.chunk_rows.early_table`: same content key, same cells, settings and code); a
worker that precomputed another chunk than the one it receives, or that died, computes its task as before.

The pool is the one Prefect's :class:`~prefect.task_runners.ProcessPoolTaskRunner` builds (a spawn-context
:class:`~concurrent.futures.ProcessPoolExecutor` and a queue carrying the workers' events and logs to the flow
process), built earlier; :func:`start_worker` ends with Prefect's own worker set-up. Prefect's names used here are
not public API: ``flows.runners`` uses this only for the Prefect versions it was checked with.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

__all__ = ["Pool", "new_pool", "spawn_workers", "start_worker", "take_pool"]


class Pool(NamedTuple):
    executor: Any  # concurrent.futures.ProcessPoolExecutor
    queue: Any  # multiprocessing Queue: the workers' Prefect events and logs, for the flow process to forward
    workers: int


_spawned: list[Pool] = []  # the pool the CLI spawned, until the flow's task runner takes it


def new_pool(workers: int, first_chunk: Any = None, *, spawn_now: bool = True) -> Pool:
    """A pool of ``workers`` processes, each running :func:`start_worker` first (a pool of one computes
    ``first_chunk``, when given, before anything else); spawned now, or (``spawn_now=False``, as Prefect's runner
    does: a runner entered in a task's context never submits) at the first submissions."""
    import multiprocessing
    import threading
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn")  # as Prefect's runner: no inherited state, the same on every platform
    queue = ctx.Queue()
    chunk_pipe = None
    if first_chunk is not None and workers == 1:
        # Not an initializer argument: those are written to the worker at its spawn, and this process would wait
        # until the worker, having imported its modules (1-2 s), read the chunk's ~0.4 MB. A thread sends it.
        chunk_pipe, sender = ctx.Pipe(duplex=False)
        threading.Thread(target=_send, args=(sender, first_chunk), name="first-chunk", daemon=True).start()
    executor = ProcessPoolExecutor(
        max_workers=workers, mp_context=ctx, initializer=start_worker, initargs=(queue, os.getpid(), chunk_pipe)
    )
    for _ in range(
        workers if spawn_now else 0
    ):  # a spawn-context pool starts a worker per submission while none is idle
        executor.submit(_ready)
    return Pool(executor, queue, workers)


def spawn_workers(workers: int, first_chunk: Any = None) -> None:
    """From the CLI, before Prefect is imported: start the pool the flow's process runner will take
    (:func:`take_pool`). Stopped at exit if no flow took it (an error before the flow started)."""
    import atexit

    if _spawned:
        return
    _spawned.append(new_pool(workers, first_chunk))
    atexit.register(_close_untaken)


def take_pool(workers: int) -> Pool | None:
    """The pool :func:`spawn_workers` started, once, if it has ``workers`` workers; else None."""
    if not _spawned or _spawned[0].workers != workers:
        return None
    return _spawned.pop()


def _close_untaken() -> None:
    while _spawned:
        pool = _spawned.pop()
        pool.executor.shutdown(wait=True, cancel_futures=True)


def _send(conn: Any, chunk: Any) -> None:
    try:
        conn.send(chunk)
    except OSError:  # the worker is gone: the chunk is computed by its task as usual
        pass
    finally:
        conn.close()


def _ready() -> None:
    """The task each spawned worker runs first (it exists to make the pool spawn its workers now)."""


def start_worker(message_queue: Any, parent: int, chunk_pipe: Any) -> None:
    """A pool worker's initializer: exit with the flow process ``parent``
    (:func:`flows.runners.exit_with_parent`), compute the chunk ``chunk_pipe`` brings (if any) before importing
    Prefect, then
    Prefect's own worker set-up (events and logs through ``message_queue``) and the chunk task's imports; the
    objects imported so far are then left out of every later garbage collection (``gc.freeze``: the full
    collection after each chunk, :func:`tasks.chunk_rows.release_chunk_memory`, took 0.08-0.14 s per chunk
    scanning them)."""
    import gc
    import importlib

    from flows.runners import exit_with_parent
    from tasks.trace import phase

    exit_with_parent(parent)
    if chunk_pipe is not None:
        from tasks.chunk_rows import precompute_chunk

        try:
            chunk = chunk_pipe.recv()
        except (EOFError, OSError):  # the CLI process is gone
            chunk = None
        chunk_pipe.close()
        phase("worker-warm")
        if chunk is not None:
            precompute_chunk(chunk)
            phase("chunk-precomputed")
    from prefect.task_runners import _initialize_process_pool_worker

    _initialize_process_pool_worker(message_queue)
    for module in ("prefect.engine", "prefect.task_engine", "tasks.evaluate"):  # what the first chunk task needs
        importlib.import_module(module)
    gc.collect()
    gc.freeze()
    phase("worker-ready")
