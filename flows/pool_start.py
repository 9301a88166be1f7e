"""A process runner's pool: it starts with the ``gdp`` command, and its first chunk computes before Prefect is imported.

Why: in a ``gdp sweep`` on one worker, the accounting is the critical path and everything else can overlap it. Before
this module, the worker was spawned by Prefect's runner once the CLI had imported Prefect (~3 s after launch on
2 cores), and it imported Prefect's task engine before its first chunk (benchmarks/RESULTS.md, "CLI fixed costs":
the worker was ready to compute 5.5 s after launch). Now:

* ``gdp sweep`` / ``gdp regret-map`` with the process runner spawn the pool as their first act (:mod:`flows.launch`,
  :func:`pool_request`; this module imports the standard library only), so a worker imports gdpcore while the CLI
  imports its own modules and plans;
* a pool of one worker gets a process beside it, spawned with it, that computes the chunk the flow will submit
  first (:func:`compute_first_chunk`): it imports gdpcore while the CLI imports and plans, receives that chunk
  through a pipe as soon as the CLI has planned it (:func:`send_first_chunk`; with several workers the first tasks
  reach them in no fixed order, so there is no such process) and computes it with gdpcore alone
  (:mod:`tasks.chunk_rows` needs no Prefect);
* the pool's worker itself is then spawned by the flow's first submission, once the command's and the temporary
  server's start-up are over, or as soon as the first chunk is computed if that comes first (a small sweep): it
  imports Prefect's task engine on the other core while a long first chunk computes, once the flow's start-up is
  over (:func:`start_up_over`; the server, too, boots after the command's Prefect import while that chunk computes,
  so that the start-up takes turns on the free core instead of competing with the chunk: :func:`start_worker`,
  :func:`first_chunk_computing`), and its first task takes the first-chunk process's rows through a pipe
  (:func:`tasks.chunk_rows.early_table`). Before, one worker computed the first chunk and then imported Prefect,
  and the second chunk started 2.0 s after the first was accounted; now 0.27-0.30 s (benchmarks/RESULTS.md, "CLI
  fixed costs").

The flow's task runner (``flows.runners``) adopts this pool (:func:`take_pool`) instead of starting its own; the
submission of every task, its states and retries, and the flow's writing and checking of every file are Prefect's
and the flow's as before. The first chunk's task returns the rows computed beside it stamped with its run id (same
content key, same cells, settings and code); a first task for another chunk stops that process and computes its
own, and if that process died the task computes as before. A command that ends before a flow took the pool
(nothing to compute, a bad spec) discards it at once (:func:`discard_pool`).

The pool is the one Prefect's :class:`~prefect.task_runners.ProcessPoolTaskRunner` builds (a spawn-context
:class:`~concurrent.futures.ProcessPoolExecutor` and a queue carrying the workers' events and logs to the flow
process), built earlier; :func:`start_worker` ends with Prefect's own worker set-up. Prefect's names used here are
not public API: this runs only for the Prefect versions ``flows.runners`` was checked with.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

__all__ = [
    "Pool",
    "compute_first_chunk",
    "default_workers",
    "discard_pool",
    "exit_with_parent",
    "new_pool",
    "prefect_tested",
    "send_first_chunk",
    "pool_request",
    "first_chunk_computing",
    "spawn_workers",
    "start_up_over",
    "start_worker",
    "take_pool",
]

POOL_COMMANDS = ("sweep", "regret-map")

_WAIT_FOR_START_UP = 3.0
"""The longest a one-worker pool's worker waits before importing Prefect (:func:`start_worker`): the flow's start-up
takes ~1 s after its first submission; should the signal never come (a flow that failed), the worker goes on."""


def default_workers() -> int:
    """Worker processes a pool gets unless told: ``GDP_MAX_WORKERS``, else one per core."""
    env = os.environ.get("GDP_MAX_WORKERS")
    if env:
        return max(1, int(env))
    return os.cpu_count() or 1


_TESTED_PREFECT = ((3, 8), (3, 9))  # Prefect minor versions checked (prefect_tested)


def prefect_tested() -> bool:
    """Whether the installed Prefect is one whose internals gdp-audit mirrors (not public API): the temporary
    server's command line (``flows.runners._server_command``) and the process runner's start (this module); any
    other version lets Prefect start its own server and workers, a few seconds slower."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        major, minor = (int(x) for x in version("prefect").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        return False
    return (major, minor) in _TESTED_PREFECT


def exit_with_parent(parent: int | None = None) -> None:
    """In a pool worker as it starts (:func:`start_worker`): exit once the flow process ``parent`` that spawned this
    worker is gone.

    A SIGKILLed flow process runs no cleanup, and its idle pool workers would otherwise wait on their queue forever
    (measured: still alive minutes later, each holding gdpcore's imports). A daemon thread polls the parent pid.
    The flow passes its own pid: a worker still importing when the flow was killed reaches this initializer already
    re-parented, and ``os.getppid()`` would then name init - the worker never exited (found by fault injection).
    """
    import atexit
    import threading
    import time

    from tasks.trace import phase

    phase(f"worker-init api={os.environ.get('PREFECT_API_URL')}")
    atexit.register(_end_worker)  # before any handler the tasks register: it runs after them
    if os.environ.get("GDP_TRACE"):
        atexit.register(phase, "worker-atexit")
    if parent is None:
        parent = os.getppid()
    if os.getppid() != parent:
        os._exit(0)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)  # a chunk cut short leaves at most a .tmp-* file, removed by the next sweep

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _end_worker() -> None:
    """A pool worker's exit, once the pool has shut it down and every exit handler registered since this worker
    started has run (Prefect's event-loop threads and services, the tasks' own): flush logging and the standard
    streams, then end the process without the interpreter's module teardown (~0.5 s with Prefect, SciPy and pyarrow
    loaded, and the flow process waits for it when it shuts the pool down). The worker's queues to the flow process
    were flushed before exit handlers run (multiprocessing does that when the worker's loop returns). Pool workers
    exit with 0 here; the pool does not read their exit codes."""
    import logging
    import sys

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)


@dataclasses.dataclass
class Pool:
    executor: Any  # concurrent.futures.ProcessPoolExecutor
    queue: Any  # multiprocessing Queue: the workers' Prefect events and logs, for the flow process to forward
    workers: int
    chunk_sender: Any = None  # the pipe to a single worker, until its first chunk (or None: no chunk) is sent
    chunk_sent: bool = False  # with a first-chunk process: a chunk was sent to it (it computes now)
    go: Any = None  # with a first-chunk process: the pipe's end its worker polls (a message once that chunk is done)


_spawned: list[Pool] = []  # the pool the CLI spawned, until the flow's task runner takes it
# With a first-chunk process: the pipe's end that tells the pool's worker it may import Prefect (start_up_over).
_start_up_signal: list[Any] = []


def new_pool(workers: int, *, spawn_now: bool = True, first_chunk_later: bool = False) -> Pool:
    """A pool of ``workers`` processes, each running :func:`start_worker` first; spawned now, or
    (``spawn_now=False``, as Prefect's runner does: a runner entered in a task's context never submits) at the first
    submissions. ``first_chunk_later`` (a pool of one worker, spawned now): a process beside the pool,
    :func:`compute_first_chunk`, computes the chunk :func:`send_first_chunk` will bring, and the pool's worker is
    spawned at the flow's first submission or once that chunk is computed, whichever is sooner
    (:func:`_spawn_when_done`), and takes those rows for its first task."""
    import multiprocessing
    import threading
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn")  # as Prefect's runner: no inherited state, the same on every platform
    queue = ctx.Queue()
    rows = sender = go = None
    if first_chunk_later and workers == 1 and spawn_now:
        # The chunk is not a process argument: those are written at the spawn, and this process would wait until the
        # child, having imported its modules (1-2 s), read the chunk's ~0.4 MB. A thread sends it (send_first_chunk).
        chunk_in, sender = ctx.Pipe(duplex=False)
        rows, rows_out = ctx.Pipe(duplex=False)
        # One signal, "the first chunk is computed (or there is none), or the flow's start-up is over": what this
        # process's spawning thread and the pool's worker wait for (both poll ``go``, neither reads it). A pipe, not
        # an event: a pipe needs no named semaphore, which a command that ends with os._exit (flows.cli) would leave
        # behind for multiprocessing's resource tracker to report.
        go, go_out = ctx.Pipe(duplex=False)
        _start_up_signal[:] = [go_out]
        first = ctx.Process(
            target=compute_first_chunk,
            args=(chunk_in, rows_out, os.getpid(), go_out),
            name="gdp-first-chunk",
            daemon=True,
        )
        first.start()
        chunk_in.close()  # the child holds its own ends (end-of-file there and in the worker: that process is gone)
        rows_out.close()
    executor = ProcessPoolExecutor(
        max_workers=workers, mp_context=ctx, initializer=start_worker, initargs=(queue, os.getpid(), rows, go)
    )
    # A spawn-context pool starts a worker per submission while none is idle. With a first-chunk process, the worker
    # is spawned by the flow's first submission, or as soon as the first chunk is computed if that comes first (a
    # small sweep): it imports Prefect once the command's and the temporary server's start-up are over, or once
    # nothing computes, instead of competing with both for the cores while the first chunk computes.
    for _ in range(workers if spawn_now and rows is None else 0):
        executor.submit(_ready)
    if go is not None:
        threading.Thread(target=_spawn_when_done, args=(go, executor), name="spawn-worker", daemon=True).start()
    return Pool(executor, queue, workers, sender, go=go)


def _spawn_when_done(go: Any, executor: Any) -> None:
    """Spawn the pool's worker once the first-chunk process has computed its chunk or has none to compute (a message
    on ``go``, or end-of-file), unless a submission spawned it already (the pool then just runs :func:`_ready` in it;
    :func:`start_up_over` signals only after the flow's submissions); nothing if the pool was shut down meanwhile."""
    go.poll(None)
    try:
        executor.submit(_ready)
    except RuntimeError:  # shut down (the flow ended, or the command needed no workers)
        pass


def spawn_workers(workers: int, *, first_chunk: bool = True) -> None:
    """Start the pool the flow's process runner will take (:func:`take_pool`), once; with ``first_chunk`` (a command
    that will plan one, ``gdp sweep``), a pool of one worker gets the first-chunk process, which waits for
    :func:`send_first_chunk`."""
    import atexit

    if not _spawned:
        _spawned.append(new_pool(workers, first_chunk_later=first_chunk))
        atexit.register(discard_pool)  # if no flow takes it (an error before the flow started)


def pool_request(argv: Sequence[str]) -> tuple[int, bool, bool] | None:
    """For the ``gdp`` command line ``argv`` (without the program name): (workers, verbose, whether the command plans
    a first chunk: ``gdp sweep``) when it is ``gdp sweep`` / ``gdp regret-map`` with the process runner, whose pool
    :mod:`flows.launch` spawns before the CLI's imports;
    None otherwise, and for anything unusual (help, an option the command will reject, an untested Prefect): the
    command then starts its workers as before, or fails."""
    if not argv or argv[0] not in POOL_COMMANDS or {"-h", "--help"} & set(argv):
        return None
    import argparse

    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    parser.add_argument("--runner", default=os.environ.get("GDP_TASK_RUNNER", "process"))
    parser.add_argument("--workers", type=int)
    parser.add_argument("-v", "--verbose", action="store_true")
    try:
        known, _ = parser.parse_known_args(argv[1:])
    except (argparse.ArgumentError, SystemExit):
        return None
    if known.runner != "process" or (known.workers is not None and known.workers < 1) or not prefect_tested():
        return None
    return known.workers or default_workers(), bool(known.verbose), argv[0] == "sweep"


def send_first_chunk(chunk: Any) -> None:
    """Give the spawned pool's single worker the chunk to compute before it imports Prefect (None: no chunk); once."""
    import threading

    pool = _spawned[0] if _spawned else None
    if pool is None or pool.chunk_sender is None:
        return
    sender, pool.chunk_sender = pool.chunk_sender, None
    pool.chunk_sent = chunk is not None
    threading.Thread(target=_send, args=(sender, chunk), name="first-chunk", daemon=True).start()


def first_chunk_computing() -> bool:
    """Whether a first-chunk process (:func:`compute_first_chunk`) was sent a chunk by this command, has not computed
    it yet, and the pool is not taken yet: the command's own start-up then competes with it for the cores, and the
    server is better started after this process's Prefect import than beside it (``flows.runners.start_api_server``)."""
    if not _spawned or not _spawned[0].chunk_sent:
        return False
    go = _spawned[0].go
    try:
        return go is None or not go.poll(0)  # a message there: the chunk is computed already (a short one)
    except (OSError, ValueError):
        return False


def start_up_over() -> None:
    """The flow's start-up is over (its chunks submitted, the spec's cell set recorded): the pool's worker, spawned by
    the first submission and waiting in :func:`start_worker`, may import Prefect now. A no-op without a first-chunk
    process."""
    while _start_up_signal:
        _signal(_start_up_signal.pop())


def _signal(go: Any) -> None:
    """Tell the pool's worker waiting in :func:`start_worker` that it may import Prefect (``go``: a pipe's end)."""
    try:
        go.send(True)
    except (OSError, ValueError):  # the worker is gone, or the pipe was closed
        pass


def take_pool(workers: int) -> Pool | None:
    """The pool :func:`spawn_workers` started, once, if it has ``workers`` workers (its first-chunk process told
    there is no chunk to compute if the CLI planned none); else None."""
    if not _spawned or _spawned[0].workers != workers:
        return None
    send_first_chunk(None)
    return _spawned.pop()


def discard_pool() -> None:
    """Stop a pool no flow took (the command ended first: nothing to compute, an error): its workers are told so
    and stopped at once, not after their imports."""
    import multiprocessing

    while _spawned:
        pool = _spawned.pop()
        if pool.chunk_sender is not None:
            pool.chunk_sender.close()  # the worker reads end-of-file: it exits
        pool.executor.shutdown(wait=False, cancel_futures=True)
        for child in multiprocessing.active_children():  # this command's only multiprocessing children: the pool
            child.terminate()


def _send(conn: Any, chunk: Any) -> None:
    try:
        conn.send(chunk)
    except OSError:  # the worker is gone: the chunk is computed by its task as usual
        pass
    finally:
        conn.close()


def _ready() -> None:
    """The task each spawned worker runs first (it exists to make the pool spawn its workers now)."""


def _import_pandas() -> None:
    """Import pandas now, while this process waits: pyarrow imports it at its first conversion of Python values (any
    ``pa.array``, ``pa.scalar``: a chunk's rows, the run id stamped on precomputed rows), 0.14-0.2 s that were on
    the critical path of the first chunk, in the process computing it and again in the worker taking its rows."""
    import importlib

    try:
        importlib.import_module("pandas")
    except ImportError:  # pragma: no cover - pandas comes with an extra (mlflow); without it pyarrow imports none
        pass


def compute_first_chunk(chunk_pipe: Any, rows_pipe: Any, parent: int, go: Any) -> None:
    """The process beside a one-worker pool (:func:`new_pool`): import gdpcore while the command imports and plans,
    receive the chunk the flow will submit first (:func:`send_first_chunk`; end-of-file or None: there is none,
    exit), tell the pool's worker which chunk it is and which process computes it, compute its rows with gdpcore
    alone (:mod:`tasks.chunk_rows`, no Prefect) and send them to the worker (:func:`tasks.chunk_rows.early_table`
    takes them for that chunk's task); exit with the flow process ``parent`` (:func:`exit_with_parent`). Once its
    chunk is computed (or there is none) it says so through ``go``: the command may spawn the pool's worker
    (:func:`_spawn_when_done`), and that worker may import Prefect (:func:`start_worker`)."""
    import time

    from tasks.trace import phase

    exit_with_parent(parent)
    from tasks.chunk_rows import chunk_table  # gdpcore and pyarrow, while the command plans

    phase("first-chunk-imports")
    _import_pandas()  # while the command plans
    try:
        chunk = chunk_pipe.recv()
    except (EOFError, OSError):  # the command ended (or died) before it planned a chunk
        _signal(go)
        os._exit(0)
    chunk_pipe.close()
    phase("worker-warm")
    if chunk is None:
        _signal(go)  # the pool's worker may start now
        os._exit(0)
    try:
        rows_pipe.send((chunk.key, os.getpid()))
        started = time.perf_counter()
        table = chunk_table(chunk, "")
        seconds = time.perf_counter() - started
        phase("chunk-precomputed")
        _signal(go)  # the pool's worker may start now (if no submission spawned it yet), and then read these rows
        rows_pipe.send((table, seconds))
    except OSError:  # the worker is gone, or it runs another chunk first: its task computes as usual
        _signal(go)
    os._exit(0)


def start_worker(message_queue: Any, parent: int, rows_pipe: Any, go: Any = None) -> None:
    """A pool worker's initializer: exit with the flow process ``parent`` (:func:`exit_with_parent`), Prefect's own
    worker set-up (events and logs through ``message_queue``) and the chunk task's imports; the objects imported so
    far are then left out of every later garbage collection (``gc.freeze``: the full collection after each chunk,
    :func:`tasks.chunk_rows.release_chunk_memory`, took 0.08-0.14 s per chunk scanning them). ``rows_pipe``: the
    first-chunk process's rows (:func:`compute_first_chunk`), for this worker's first task. ``go`` (with those
    rows): its Prefect import waits until the first chunk is computed or the flow's start-up is over
    (:func:`start_up_over`), so that while a long first chunk computes on one core, the command's start-up and this
    import take turns on the other instead of competing with it (the first chunk computed ~1 s faster,
    benchmarks/RESULTS.md "CLI fixed costs"); at most ``_WAIT_FOR_START_UP`` seconds."""
    import gc
    import importlib

    from tasks.trace import phase

    exit_with_parent(parent)
    if go is not None:
        go.poll(_WAIT_FOR_START_UP)  # a message (or end-of-file: the command is gone) ends the wait
        phase("worker-may-import")
    from prefect.task_runners import _initialize_process_pool_worker

    _initialize_process_pool_worker(message_queue)
    for module in ("prefect.engine", "prefect.task_engine", "tasks.evaluate"):  # what the first chunk task needs
        importlib.import_module(module)
    _import_pandas()
    if rows_pipe is not None:
        from tasks.chunk_rows import expect_early_rows

        expect_early_rows(rows_pipe)
    gc.collect()
    gc.freeze()
    if rows_pipe is None:
        phase("worker-warm")  # ready for its first task (with a first-chunk process, that process was warm first)
    phase("worker-ready")
