"""Task runners, chosen per run (``gdp sweep --runner``) or per deployment (``GDP_TASK_RUNNER`` env, prefect.yaml).

* ``process`` (default): :class:`prefect.task_runners.ProcessPoolTaskRunner`, one worker per core - the accounting is
  CPU-bound numpy, so threads would only share one core.
* ``thread``: :class:`prefect.task_runners.ThreadPoolTaskRunner` with a bounded pool (tests, debugging).
* ``dask``: :class:`prefect_dask.DaskTaskRunner` against ``--dask-address tcp://host:8786`` (a running cluster) or,
  without an address, a temporary ``distributed.LocalCluster``. Remote Dask workers need the project installed and a
  Prefect API they can reach (a real ``prefect server``, not the ephemeral one).
"""

from __future__ import annotations

import os
from typing import Any

__all__ = [
    "RUNNERS",
    "default_workers",
    "exit_with_parent",
    "make_task_runner",
    "runner_from_env",
    "stop_with_this_process",
]

RUNNERS = ("process", "thread", "dask")


def default_workers() -> int:
    env = os.environ.get("GDP_MAX_WORKERS")
    if env:
        return max(1, int(env))
    return os.cpu_count() or 1


def make_task_runner(kind: str = "process", *, dask_address: str | None = None, max_workers: int | None = None) -> Any:
    """A Prefect task runner for ``kind`` in :data:`RUNNERS`; raises ``ValueError`` naming a bad kind or address."""
    if kind not in RUNNERS:
        raise ValueError(f"--runner must be one of {', '.join(RUNNERS)}, got {kind!r}")
    if dask_address is not None and kind != "dask":
        raise ValueError(f"--dask-address is only used with --runner dask, got --runner {kind}")
    workers = max_workers or default_workers()
    if kind == "thread":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=workers)
    if kind == "process":
        from prefect.task_runners import ProcessPoolTaskRunner

        return ProcessPoolTaskRunner(max_workers=workers, initializer=exit_with_parent, initargs=(os.getpid(),))
    if dask_address is not None and not dask_address.startswith(("tcp://", "tls://", "inproc://", "ucx://")):
        raise ValueError(f"--dask-address must look like tcp://host:8786, got {dask_address!r}")
    try:
        from prefect_dask import DaskTaskRunner
    except ImportError:  # pragma: no cover - optional extra
        raise ValueError("--runner dask needs prefect-dask: pip install -e '.[dask]'") from None
    if dask_address:
        return DaskTaskRunner(address=dask_address)
    # ":0": a free port for the dashboard (None would fall back to the configured :8787, which may be taken).
    return DaskTaskRunner(
        cluster_kwargs={"n_workers": workers, "threads_per_worker": 1, "processes": True, "dashboard_address": ":0"}
    )


def runner_from_env() -> Any:
    """The runner a deployment asked for via ``GDP_TASK_RUNNER`` / ``DASK_SCHEDULER_ADDRESS`` / ``GDP_MAX_WORKERS``."""
    kind = os.environ.get("GDP_TASK_RUNNER", "process")
    address = os.environ.get("DASK_SCHEDULER_ADDRESS") if kind == "dask" else None
    return make_task_runner(kind, dask_address=address or None)


def share_api_with_workers(kind: str) -> None:
    """Let process/Dask workers report to *this* process's Prefect API.

    With no ``PREFECT_API_URL`` configured, Prefect starts a temporary (ephemeral) server on first use - separately
    in every spawned worker process, which is slow and times out on a loaded 2-core machine. Starting it here and
    exporting its URL makes the workers (which inherit the environment) use the same one. Prefect stops the server
    at interpreter exit, and a watchdog stops it if this process is SIGKILLed (so it also runs for ``thread``).
    A configured ``PREFECT_API_URL`` (a real server) is left alone.
    """
    if os.environ.get("PREFECT_API_URL"):
        return
    from prefect.settings import get_current_settings

    if get_current_settings().api.url:
        os.environ["PREFECT_API_URL"] = str(get_current_settings().api.url)
        return
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()  # the same singleton Prefect's own client uses in this process
    server.start(timeout=int(os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "60")))
    os.environ["PREFECT_API_URL"] = server.api_url
    if server.server_process is not None:
        stop_with_this_process(server.server_process.pid, marker="uvicorn")


def exit_with_parent(parent: int | None = None) -> None:
    """Process-pool worker initializer: exit once the flow process ``parent`` that spawned this worker is gone.

    A SIGKILLed flow process runs no cleanup, and its idle pool workers would otherwise wait on their queue forever
    (measured: still alive minutes later, each holding gdpcore's imports). A daemon thread polls the parent pid.
    The flow passes its own pid: a worker still importing when the flow was killed reaches this initializer already
    re-parented, and ``os.getppid()`` would then name init - the worker never exited (found by fault injection).
    """
    import threading
    import time

    from tasks.trace import phase

    phase("worker-init")
    if parent is None:
        parent = os.getppid()
    if os.getppid() != parent:
        os._exit(0)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)  # a chunk cut short leaves at most a .tmp-* file, removed by the next sweep

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


_WATCHDOG = """
import os, signal, sys, time
parent, pid, marker = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].encode()
while os.getppid() == parent:
    time.sleep(1.0)
try:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        ours = marker in f.read()
except OSError:
    ours = not os.path.exists("/proc")  # no procfs: trust the pid
if ours:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
"""


_ORPHAN_WATCHDOG = """
import os, signal, sys, time
parent, me = int(sys.argv[1]), os.getpid()
markers = [m.encode() for m in os.environ.get("GDP_WATCHDOG_MARKERS", "").split(",") if m]
seen = {}

def scan():
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) in seen or int(d) == me:
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            if ppid != parent:
                continue
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, ValueError, IndexError):
            continue
        if any(m in cmd for m in markers):
            seen[int(d)] = cmd

while os.getppid() == parent:
    scan()
    time.sleep(0.25)

def ours(pid, cmd):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read() == cmd
    except OSError:
        return False

for sig in (signal.SIGTERM, signal.SIGKILL):
    live = [p for p, c in seen.items() if ours(p, c)]
    for p in live:
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + 10
    while live and time.monotonic() < deadline:
        time.sleep(0.2)
        live = [p for p in live if ours(p, seen[p])]
    if not live:
        break
"""
_orphan_watchdog_started = False


def start_orphan_watchdog(markers: tuple[str, ...] = ("uvicorn", "spawn_main")) -> None:
    """From this process's first second on, a tiny watchdog child records every direct child whose command line
    contains one of ``markers`` (Prefect's ephemeral API server runs as ``python -m uvicorn ...``; multiprocessing's
    spawned workers - process pool, isolated manifest loader - as ``... spawn_main(...)``) and, once this
    process is gone - SIGKILL included, even during Prefect's ~10 s start-up, before any pid is known here - stops
    them (SIGTERM, then SIGKILL after 10 s). Linux (/proc) only; a no-op elsewhere. Idempotent."""
    global _orphan_watchdog_started
    if _orphan_watchdog_started or not os.path.isdir("/proc"):
        return
    import sys

    # posix_spawn, not Popen: the watchdog outlives this process by design, and a Popen object would warn "still
    # running" at exit. Markers go via the environment: in argv they would match the watchdog's own command line.
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        os.posix_spawn(
            sys.executable,
            [sys.executable, "-c", _ORPHAN_WATCHDOG, str(os.getpid())],
            {**os.environ, "GDP_WATCHDOG_MARKERS": ",".join(markers)},
            file_actions=[(os.POSIX_SPAWN_DUP2, devnull, fd) for fd in (0, 1, 2)],
        )
    finally:
        os.close(devnull)
    _orphan_watchdog_started = True


def stop_with_this_process(pid: int, marker: str) -> None:
    """Start a tiny watchdog child that SIGTERMs ``pid`` when this process is gone - even SIGKILLed, when Prefect's
    atexit hook never runs and the ephemeral API server would outlive the flow (measured: orphaned indefinitely).
    The watchdog checks ``marker`` in the target's command line first, so a recycled pid is left alone."""
    import subprocess
    import sys

    subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(pid), marker],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        close_fds=True,
    )
