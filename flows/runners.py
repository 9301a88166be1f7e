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

from flows.pool_start import default_workers, exit_with_parent
from flows.pool_start import prefect_tested as _launch_tested

__all__ = [
    "RUNNERS",
    "STARTUP_TIMEOUT_VARIABLE",
    "ApiServerUnavailable",
    "api_server_error_line",
    "check_dask_address",
    "default_workers",
    "exit_with_parent",
    "flow_run_settings",
    "make_task_runner",
    "run_flow",
    "runner_from_env",
    "share_api_with_workers",
    "release_workers",
    "spawn_workers_now",
    "start_workers",
    "start_api_server",
    "startup_timeout",
    "stop_with_this_process",
]

RUNNERS = ("process", "thread", "dask")


def check_dask_address(kind: str, dask_address: str | None) -> None:
    """``--dask-address`` fits ``--runner`` and looks like a scheduler address; checked before Prefect starts."""
    if dask_address is not None and kind != "dask":
        raise ValueError(f"--dask-address is only used with --runner dask, got --runner {_shown(kind)}")
    if dask_address is not None and not dask_address.startswith(("tcp://", "tls://", "inproc://", "ucx://")):
        raise ValueError(f"--dask-address must look like tcp://host:8786, got {_shown(dask_address)}")


def make_task_runner(kind: str = "process", *, dask_address: str | None = None, max_workers: int | None = None) -> Any:
    """A Prefect task runner for ``kind`` in :data:`RUNNERS`; raises ``ValueError`` naming a bad kind or address."""
    if kind not in RUNNERS:
        raise ValueError(f"--runner must be one of {', '.join(RUNNERS)}, got {_shown(kind)}")
    check_dask_address(kind, dask_address)
    workers = max_workers or default_workers()
    if kind == "thread":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=workers)
    if kind == "process":
        return _process_pool_runner()(max_workers=workers)  # each worker exits with this process: flows.pool_start
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


def runner_from_env(
    *, variable: str = "GDP_TASK_RUNNER", default: str = "process", max_workers: int | None = None
) -> Any:
    """The runner a deployment asked for via ``variable`` (``GDP_TASK_RUNNER`` for sweeps, ``default`` when unset) /
    ``DASK_SCHEDULER_ADDRESS`` / ``GDP_MAX_WORKERS`` (``max_workers`` when given)."""
    kind = os.environ.get(variable, default)
    address = os.environ.get("DASK_SCHEDULER_ADDRESS") if kind == "dask" else None
    return make_task_runner(kind, dask_address=address or None, max_workers=max_workers)


def _process_pool_runner() -> type:
    """Prefect's :class:`~prefect.task_runners.ProcessPoolTaskRunner` whose pool is :mod:`flows.pool_start`'s: one
    the CLI spawned before Prefect was imported, or a new one started the same way."""
    from prefect.task_runners import ProcessPoolTaskRunner

    class EarlyProcessPoolTaskRunner(ProcessPoolTaskRunner):
        """A process pool whose workers may start before the flow run does.

        Prefect enters a *duplicate* of the flow's task runner when the flow run starts (the flow's own runner,
        which Prefect also pickles into every task's context, is never entered). :meth:`start_early` enters such a
        duplicate at once; the flow run's ``duplicate()`` then hands over that started one (once), so the workers
        spawned while the API server booted run the chunks. Entering (early or not) builds what Prefect's own
        ``__enter__`` builds - the pool, the forwarding of the workers' events and logs, the resolver threads - with
        the pool taken from :func:`flows.pool_start.take_pool` when the CLI already spawned it. Submission, message
        forwarding and the shutdown at the flow's end are Prefect's own."""

        _started_early: Any = None  # on the flow's runner: the started duplicate it hands over
        _adopt_as_is = False  # on that duplicate: entered already

        def start_early(self, chunks: list[Any]) -> None:
            runner = super().duplicate()
            runner.begin(chunks)
            self._started_early = runner

        def begin(self, chunks: list[Any]) -> None:
            """Enter this (duplicate) runner now; the flow run that adopts it enters it as it is."""
            import atexit

            self._start(chunks, spawn_now=True)
            self._adopt_as_is = True
            atexit.register(self._close_unadopted)

        def _start(self, chunks: list[Any], *, spawn_now: bool) -> None:
            """Prefect's ``ProcessPoolTaskRunner.__enter__`` (prefect 3.9) with the pool of :mod:`flows.pool_start`:
            every worker runs :func:`flows.pool_start.start_worker` (a single one takes ``chunks[0]``'s rows from
            the first-chunk process beside it); spawned now or, as Prefect's own (a runner entered in a task's context
            never submits), when submitted to."""
            import threading
            from concurrent.futures import ThreadPoolExecutor

            from prefect.task_runners import TaskRunner

            from flows.pool_start import new_pool, send_first_chunk, spawn_workers, take_pool

            TaskRunner.__enter__(self)  # the base runner's start (Prefect's own __enter__ would build another pool)
            if spawn_now:
                spawn_workers(self._max_workers, first_chunk=bool(chunks))  # unless the command spawned it already
                send_first_chunk(chunks[0] if chunks else None)
            pool = take_pool(self._max_workers) or new_pool(self._max_workers, spawn_now=spawn_now)
            self._subprocess_message_queue = pool.queue
            self._executor = pool.executor
            self._resolver_executor = ThreadPoolExecutor(max_workers=self._max_workers)
            self._message_forwarding_thread = threading.Thread(
                target=self._forward_subprocess_messages, name="ProcessPoolTaskRunnerMessageForwarder", daemon=True
            )
            self._message_forwarding_thread.start()

        def duplicate(self) -> Any:
            runner, self._started_early = self._started_early, None
            return runner if runner is not None else super().duplicate()

        def __enter__(self) -> Any:
            if self._adopt_as_is:
                self._adopt_as_is = False  # adopted by the flow run: its exit shuts the pool down
                return self
            self._start([], spawn_now=False)
            return self

        def release_workers(self) -> None:
            """Let the pool's workers exit now (every task this runner will run has finished): their exit then
            overlaps what the flow still does (publishing), instead of following it at the flow's end."""
            if self._executor is not None:
                self._executor.shutdown(wait=False)

        def _close_unadopted(self) -> None:
            if self._adopt_as_is:  # the flow never started (an error before it): stop the workers
                self._adopt_as_is = False
                self.__exit__(None, None, None)

    return EarlyProcessPoolTaskRunner


_first_chunks: list[Any] = []  # the first chunk the CLI planned: the flow submits it first (expect_chunks)


def expect_chunks(chunks: Any) -> None:
    """The chunks the flow about to start will submit first (the CLI planned them to see whether anything was left to
    compute): a pool of one early worker computes the first before the flow run exists (:mod:`flows.pool_start`)."""
    _first_chunks[:] = list(chunks[:1])


def spawn_workers_now(kind: str, workers: int | None) -> None:
    """From the CLI, before Prefect is imported: spawn a process runner's pool (:func:`flows.pool_start.spawn_workers`)
    with the first chunk :func:`expect_chunks` was given; a no-op for the thread and Dask runners, when nothing is
    left to compute, and for a Prefect version whose runner internals were not checked (:func:`_launch_tested`)."""
    if kind != "process" or not _first_chunks or not _launch_tested():
        return
    from flows.pool_start import send_first_chunk, spawn_workers

    spawn_workers(workers or default_workers())  # unless the command spawned it at launch (flows.launch)
    send_first_chunk(_first_chunks[0])


def start_workers(runner: Any) -> None:
    """Start a process runner's workers now, from the CLI, while the temporary API server boots, instead of at the
    flow's first submission (benchmarks/RESULTS.md, "CLI fixed costs": the server's start, the flow run's creation
    and the workers' start were all on the critical path). The runner takes the pool :func:`spawn_workers_now`
    started, or starts one now (:mod:`flows.pool_start`: with one worker, a process beside the pool computes the chunk
    the flow will submit first, :func:`expect_chunks`, before Prefect is imported). The tasks, their states and
    retries, and the flow's writing and checking of every file are unchanged. The flow run adopts the started pool.
    A no-op for thread and Dask runners, and for a Prefect version whose runner internals were not checked
    (:func:`_launch_tested`)."""
    start = getattr(runner, "start_early", None)
    if start is None or not _launch_tested():
        return
    start(list(_first_chunks))


def flow_run_settings() -> Any:
    """The Prefect settings a command's flow run uses (a context manager): against the temporary API server this
    process started, no flow-run heartbeats. Heartbeats let a lasting Prefect server mark the run crashed when its
    process dies; the temporary server dies with this process, so nothing would ever read them, and the heartbeat
    thread, which sleeps in 1 s steps, held the end of every flow run until it woke (0.5-0.7 s of a sweep's tail,
    benchmarks/RESULTS.md "CLI fixed costs"). With a configured server (``PREFECT_API_URL``, a profile), Prefect's
    own settings hold. ``prefect.settings.temporary_settings`` is Prefect's public API for this."""
    import contextlib

    if not _server_boot:
        return contextlib.nullcontext()
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    return temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None})


def run_flow(flow: Any, runner: Any, **parameters: Any) -> Any:
    """Run a command's ``flow`` on ``runner`` with ``parameters``, under :func:`flow_run_settings`: the one way the
    ``gdp`` commands start a flow run."""
    with flow_run_settings():
        return flow.with_options(task_runner=runner)(**parameters)


def release_workers() -> None:
    """Called by a flow once it will submit no more tasks: the running flow's process pool (if it is one of ours)
    lets its workers exit now, while the flow goes on (publishing)."""
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    release = getattr(getattr(ctx, "task_runner", None), "release_workers", None)
    if release is not None:
        release()


STARTUP_TIMEOUT_VARIABLE = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
"""Prefect's own setting (``server.ephemeral.startup_timeout_seconds``, an int, default 20 s): how long a temporary API
server may take to answer. :func:`_wait_for_server` reads it too, and ``gdp`` sets :data:`DEFAULT_STARTUP_TIMEOUT`
when it is unset (flows.command_common._prefect_env), so Prefect's fallback path waits as long as ours."""

DEFAULT_STARTUP_TIMEOUT = 180
"""Seconds a temporary API server may take to start before a run gives up. The server answers in ~3 s on an idle
2-core machine; with the load average near 6 on the same machine Prefect's 20 s were exceeded (a nightly audit ended
in a traceback). 180 s covers a ~60x slowdown; a machine slower than that is told so in one line (and which setting
to raise), not with a traceback."""

_PREFECT_TIMEOUT_TEXT = "Timed out while attempting to connect to ephemeral Prefect API server"
_PREFECT_UNREACHABLE_TEXT = "Failed to reach API at "  # prefect/_internal/version_checking.py


class ApiServerUnavailable(RuntimeError):
    """The temporary Prefect API server did not start (timed out or exited): an environment fault, not a bug."""


def _shown(value: Any) -> str:
    from tasks.safe_yaml import shown  # the error path only

    return shown(value)


def startup_timeout() -> int:
    """:data:`STARTUP_TIMEOUT_VARIABLE` as Prefect reads it (a whole number of seconds >= 1), or the default; a bad
    value is a ``ValueError`` naming the variable (Prefect would otherwise fail at import with a validation
    traceback)."""
    text = os.environ.get(STARTUP_TIMEOUT_VARIABLE)
    if text is None or not text.strip():
        return DEFAULT_STARTUP_TIMEOUT
    try:
        value = int(text.strip())
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{STARTUP_TIMEOUT_VARIABLE} must be a whole number of seconds >= 1, got {_shown(text)}")
    return value


def api_server_error_line(exc: BaseException) -> str | None:
    """One line for a Prefect API that is not there: a temporary server that did not come up (ours,
    :class:`ApiServerUnavailable`, or Prefect's own ``RuntimeError``, whose message also carries the server's whole
    stdout/stderr) or a configured server that does not answer; None for any other error."""
    if isinstance(exc, ApiServerUnavailable):
        return str(exc)
    if not isinstance(exc, RuntimeError):
        return None
    text = str(exc)
    if text.startswith(_PREFECT_TIMEOUT_TEXT):
        try:
            waited = f"{startup_timeout()} s"
        except ValueError:
            waited = "its start-up timeout"
        return _unavailable_text(f"did not answer within {waited}")
    if text.startswith(_PREFECT_UNREACHABLE_TEXT):  # a configured PREFECT_API_URL that does not answer
        from tasks.safe_yaml import bounded_message

        return bounded_message(f"{text} (is the Prefect server running? PREFECT_API_URL); nothing was run", 500)
    return None


def _unavailable_text(what: str) -> str:
    return (
        f"Prefect's temporary API server {what} (a busy machine?); nothing was run. Raise "
        f"{STARTUP_TIMEOUT_VARIABLE} (seconds), or run `prefect server start` and set PREFECT_API_URL"
    )


_server_boot: dict[str, Any] = {}  # the temporary server this process started: {"process", "port", "watched"}


def _server_command(port: int) -> list[str]:
    """Prefect's own temporary-server command line (``SubprocessASGIServer._run_uvicorn_command`` in prefect 3.9):
    uvicorn serving Prefect's app factory on localhost, errors only."""
    import sys
    from importlib.util import find_spec

    spec = find_spec("prefect")
    assert spec is not None and spec.origin is not None
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "--app-dir",
        os.path.dirname(os.path.dirname(spec.origin)),
        "--factory",
        "prefect.server.api.server:create_app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "error",
        "--lifespan",
        "on",
    ]


def _server_env() -> dict[str, str]:
    """The environment Prefect gives its temporary server: ours, the settings this process holds (when Prefect is
    already imported: its active profile and any temporary settings), no UI, and the ephemeral flags (services
    limited to what a temporary server runs). Before Prefect is imported the server reads the same environment,
    profile and files this process would."""
    import sys

    env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
    if "prefect.settings" in sys.modules:
        from prefect.settings import get_current_settings

        env.update(get_current_settings().to_environment_variables(exclude_unset=True))
    return env


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _launch_server(env: dict[str, str]) -> None:
    import subprocess

    from tasks.trace import phase

    port = _free_port()
    _server_boot.update(port=port, process=subprocess.Popen(_server_command(port), env=env))
    phase(f"api-server-launched port={port}")


def start_api_server() -> None:
    """Begin starting a temporary Prefect API server and return at once; :func:`share_api_with_workers` waits for it.

    Without a configured API (``PREFECT_API_URL`` or the active profile), every flow needs a temporary server, and
    its start-up (~3 s: a Python process importing FastAPI, SQLAlchemy and Prefect's app, then opening the SQLite
    database) is on the critical path. Prefect's client would start it on first use, after this process imported
    Prefect and the server module (~1.5 s) - and then wait. Launched here instead, right after the command checked
    its input and before this process imports Prefect, it boots on the other core meanwhile (tests/pipeline/test_overhead.py). Prefect's
    configuration is read while it boots: a configured server wins, and the temporary one is stopped at once. It is
    the server Prefect would start (:func:`_server_command`, :func:`_server_env`, the same relaunch when uvicorn
    reports a taken port). ``PREFECT_API_URL`` is then exported and Prefect's settings re-read, so this process and
    its workers use it. Stopped at exit (and by :func:`stop_with_this_process` if this process is SIGKILLed). A
    no-op with a configured API or when already started."""
    if _server_boot or os.environ.get("PREFECT_API_URL") or not _launch_tested():
        return
    import atexit
    import sys

    from flows.pool_start import first_chunk_computing

    # Launch first and check the configuration while the server boots; but while a first chunk computes on one core,
    # the server boots after this process's Prefect import, not beside it: the two take turns on the other core (with
    # the pool's worker waiting too, the first chunk computed ~1 s faster, benchmarks/RESULTS.md "CLI fixed costs"),
    # and the flow is still ready long before that chunk is done.
    speculative = "prefect" not in sys.modules and not first_chunk_computing()
    if speculative:
        _launch_server(_server_env())
    from prefect.settings import get_current_settings

    from tasks.trace import phase

    phase("prefect-imported")
    if get_current_settings().api.url:  # a profile or settings file names a server: that one is used
        if speculative:
            _stop_server()
            _server_boot.clear()
        return
    if not speculative:
        _launch_server(_server_env())
    _server_boot["env"] = _server_env()
    _export_api_url()
    atexit.register(_stop_server)


def _export_api_url() -> None:
    """This process and the workers it spawns (they inherit the environment) use the server just launched;
    Prefect read its settings at import, so they are re-read (``refresh_global_settings_context``, Prefect's hook
    for environment changes after import)."""
    from prefect.context import refresh_global_settings_context

    from tasks.trace import phase

    os.environ["PREFECT_API_URL"] = f"http://127.0.0.1:{_server_boot['port']}/api"
    refresh_global_settings_context()
    phase(f"api-server pid={_server_boot['process'].pid} url={os.environ['PREFECT_API_URL']}")


def _stop_server() -> None:
    """Prefect's own stop sequence: SIGTERM, 5 s grace, then SIGKILL; always reaped."""
    import subprocess

    proc = _server_boot.get("process")
    if proc is None or proc.poll() is not None:
        return
    from tasks.trace import phase

    phase("server-stopping")
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    phase("server-stopped")


def _wait_for_server() -> None:
    """Block until the server started by :func:`start_api_server` answers ``/api/health`` (relaunching on a port
    taken meanwhile, uvicorn's exit code 3, like Prefect); a server that does not answer within
    :func:`startup_timeout` seconds is stopped and reported (:class:`ApiServerUnavailable`)."""
    import time
    import urllib.error
    import urllib.request

    timeout = startup_timeout()
    deadline = time.monotonic() + timeout
    local = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1: never through $HTTP_PROXY
    while time.monotonic() < deadline:
        proc = _server_boot["process"]
        code = proc.poll()
        if code == 3:  # uvicorn's STARTUP_FAILURE: the port was taken between our check and its bind
            _launch_server(_server_boot["env"])
            _export_api_url()
            continue
        if code is not None:
            _stop_server()
            raise ApiServerUnavailable(_unavailable_text(f"exited with code {code} during start-up"))
        try:
            with local.open(f"{os.environ['PREFECT_API_URL']}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.05)
    _stop_server()
    raise ApiServerUnavailable(_unavailable_text(f"did not answer within {timeout} s"))


def share_api_with_workers(kind: str) -> None:
    """Let process/Dask workers report to *this* process's Prefect API.

    With no API configured, Prefect would start a temporary (ephemeral) server on first use - separately in every
    spawned worker process, which is slow and times out on a loaded 2-core machine. Starting one here (or earlier:
    :func:`start_api_server`) and exporting its URL makes this process and the workers (which inherit the
    environment) use the same one. It is stopped at interpreter exit, and a watchdog stops it if this process is
    SIGKILLed (so it also runs for ``thread``). A configured ``PREFECT_API_URL`` (a real server) is left alone.
    """
    if not _server_boot:
        if os.environ.get("PREFECT_API_URL"):
            return
        from prefect.settings import get_current_settings

        if get_current_settings().api.url:
            os.environ["PREFECT_API_URL"] = str(get_current_settings().api.url)
            return
        start_api_server()
        if not _server_boot:  # an untested Prefect version: Prefect starts its own server (same timeout setting)
            return
    _wait_for_server()
    if not _server_boot.get("watched"):
        stop_with_this_process(_server_boot["process"].pid, marker="uvicorn")
        _server_boot["watched"] = True


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

def read(d, name):
    with open(f"/proc/{d}/{name}", "rb") as f:
        return f.read()

def child(d):
    return int(read(d, "stat").rsplit(b")", 1)[1].split()[1]) == parent

# Every child of the parent inherits its token (pid and start time) in the environment.
tag = b"GDP_WATCHDOG_TOKEN=" + os.environ.get("GDP_WATCHDOG_TOKEN", "").encode()

def tagged(d):
    return tag in read(d, "environ").split(b"\\0")

def scan(owned):  # record every process with a marker in its command line that owned(pid) claims
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) in seen or int(d) == me:
            continue
        try:
            cmd = read(d, "cmdline")
            if any(m in cmd for m in markers) and owned(d):
                seen[int(d)] = cmd
        except (OSError, ValueError, IndexError):
            continue

while os.getppid() == parent:
    scan(child)
    time.sleep(0.25)

# The parent is gone. A child it started after the last scan (or before this watchdog's first one: on a loaded host
# the parent can be SIGKILLed before this interpreter has even started) has been re-parented and escapes the ppid
# test; it still carries the parent's token.
if not tag.endswith(b"="):
    scan(tagged)

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
    them (SIGTERM, then SIGKILL after 10 s). Children it never saw (this process killed before the watchdog's first
    scan on a loaded host, or between two scans) are found by the token this process puts in the environment every
    child inherits (``GDP_WATCHDOG_TOKEN``: pid and start time) and a marker in their command line. Linux (/proc) only; a no-op elsewhere. Idempotent."""
    global _orphan_watchdog_started
    if _orphan_watchdog_started or not os.path.isdir("/proc"):
        return
    import sys

    # Every child started from now on inherits this process's token (pid and start time: unique on the host), by
    # which the watchdog finds the ones it never saw as direct children (re-parented after a SIGKILL).
    with open("/proc/self/stat", "rb") as f:
        started = f.read().rsplit(b")", 1)[1].split()[19].decode()
    os.environ["GDP_WATCHDOG_TOKEN"] = f"{os.getpid()}-{started}"
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
