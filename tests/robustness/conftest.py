"""Robustness tests: the pipeline among real processes on 127.0.0.1 - a `prefect server`, a Dask scheduler and
workers, `gdp` CLI runs that get SIGKILLed - each started here with a timeout on every wait and stopped in a finally
block.

Processes are started in their own session and stopped by *their* process-group id (never by name), so a test that
fails half-way leaves no scheduler, worker or server behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(cond: Callable[[], object], timeout: float, what: str, interval: float = 0.2) -> object:
    """Poll ``cond`` until it returns something truthy; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


class Proc:
    """A child process in its own session, logging to a file; ``stop()`` ends its whole process group."""

    def __init__(self, args: Sequence[str], log: Path, env: dict[str, str], cwd: Path = REPO):
        self.args = list(args)
        self.log_path = log
        self._log = open(log, "wb")
        self.popen = subprocess.Popen(
            self.args, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True
        )
        self.pid = self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the process itself only (a worker dying, a flow process being SIGKILLed)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)

    def stop(self, timeout: float = 15) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)  # the group this Proc created (start_new_session): its children too
            try:
                self.popen.wait(timeout=timeout)
                break
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)  # stragglers of the group whose leader already exited
        self._log.close()


def base_env(home: Path, api_url: str | None = None) -> dict[str, str]:
    """Environment for child processes: single-threaded numerics, a private PREFECT_HOME, quiet, no telemetry."""
    env = dict(os.environ)
    env.pop("PREFECT_API_URL", None)
    # `gdp` commands run in-process by earlier tests quiet Prefect through os.environ (flows.commands._prefect_env);
    # children must not inherit that, or the workers' task-run log lines these tests read disappear.
    for key in [k for k in env if k.startswith("PREFECT_LOGGING_LOGGERS_")]:
        env.pop(key)
    env.update(
        OMP_NUM_THREADS="1",
        OPENBLAS_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        PREFECT_HOME=str(home),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_LOGGING_LEVEL="WARNING",
        PYTHONPATH=str(REPO),
        PYTHONUNBUFFERED="1",
        DASK_DISTRIBUTED__WORKER__DAEMON="false",
    )
    # pytest's "warnings are errors" must not leak into the child processes under test
    env.pop("PYTHONWARNINGS", None)
    if api_url:
        env["PREFECT_API_URL"] = api_url
    return env


def healthy(url: str) -> bool:
    """Whether the server at ``url`` answers ``/health`` with 200 within 2 s."""
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory) -> Iterator[dict[str, str]]:
    """A real ``prefect server start`` on 127.0.0.1 (temporary PREFECT_HOME, SQLite); yields {url, home}.

    Remote Dask workers run Prefect's task engine (prefect_dask submits ``run_task_sync`` to them), so they need an
    API they can reach: the flow's ephemeral loopback server is not one of them (see test_cluster.py).
    """
    home = tmp_path_factory.mktemp("prefect-home")
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = base_env(home)
    env.update(PREFECT_SERVER_API_HOST="127.0.0.1", PREFECT_SERVER_API_PORT=str(port), PREFECT_UI_ENABLED="false")
    # Services stay on (the task-run recorder turns the workers' task-run events into task runs); the schedulers
    # and late-run marker are not needed.
    for svc in ("SCHEDULER", "LATE_RUNS", "FOREMAN", "CANCELLATION_CLEANUP", "PAUSE_EXPIRATIONS"):
        env[f"PREFECT_SERVER_SERVICES_{svc}_ENABLED"] = "false"
    proc = Proc(
        [
            str(BIN / "prefect"),
            "server",
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-ui",
            "--analytics-off",
        ],
        home / "server.log",
        env,
    )
    try:
        wait_for(
            lambda: healthy(url) or (not proc.alive() and pytest.fail(proc.log()[-3000:])),
            120,
            "prefect server health",
        )
        yield {"url": url, "home": str(home)}
    finally:
        proc.stop()


class DaskCluster:
    """``worker_prefix`` wraps each worker's command (e.g. in its own mount namespace) and ``worker_home(name)`` gives
    each worker its own working directory and HOME (default: the repository and the inherited HOME)."""

    def __init__(
        self,
        root: Path,
        env: dict[str, str],
        n_workers: int = 2,
        worker_prefix: Sequence[str] = (),
        worker_home: Callable[[str], Path] | None = None,
    ):
        self.root = root
        self.env = env
        self.worker_prefix = list(worker_prefix)
        self.worker_home = worker_home
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.scheduler = Proc(
            [
                str(BIN / "dask"),
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--no-dashboard",
                "--no-show",
            ],
            root / "scheduler.log",
            env,
        )
        self.workers: list[Proc] = []
        for i in range(n_workers):
            self.add_worker(f"w{i}")

    def add_worker(self, name: str) -> Proc:
        home = self.worker_home(name) if self.worker_home else None
        w = Proc(
            [
                *self.worker_prefix,
                str(BIN / "dask"),
                "worker",
                self.address,
                "--host",
                "127.0.0.1",
                "--nthreads",
                "1",
                "--nworkers",
                "1",
                "--no-dashboard",
                "--name",
                name,
                "--memory-limit",
                "2GiB",
                "--local-directory",
                str(self.root / f"scratch-{name}"),
            ],
            self.root / f"{name}.log",
            {**self.env, "HOME": str(home)} if home else self.env,
            home or REPO,
        )
        w.name = name
        self.workers.append(w)
        return w

    def n_workers(self) -> int:
        from distributed import Client

        with Client(self.address, timeout=10) as c:
            return len(c.scheduler_info(n_workers=-1)["workers"])

    def wait_workers(self, n: int, timeout: float = 90) -> None:
        from distributed import Client

        with Client(self.address, timeout=timeout) as c:
            c.wait_for_workers(n, timeout=timeout)

    def stop(self) -> None:
        for p in [*self.workers, self.scheduler]:
            p.stop()


@pytest.fixture
def dask_cluster(tmp_path, prefect_api) -> Iterator[DaskCluster]:
    """`dask scheduler` + two `dask worker` processes on 127.0.0.1 that report to the session's Prefect server."""
    root = tmp_path / "dask"
    root.mkdir()
    env = base_env(Path(prefect_api["home"]), prefect_api["url"])
    env["PREFECT_LOGGING_LEVEL"] = "INFO"  # worker logs show task-run states and any 'Starting temporary server'
    cluster = DaskCluster(root, env)
    try:
        cluster.wait_workers(2)
        yield cluster
    finally:
        cluster.stop()


SPEC = """\
name: {name}
mechanism: subsampled_gaussian
grid:
  noise_multiplier: {sigmas}
  sampling_rate: [0.01, 0.05]
  steps: {steps}
deltas: [1.0e-5, 1.0e-6]
fprs: [1.0e-3, 0.1]
representations: [gdp]
chunk_size: {chunk}
"""


def write_spec(path: Path, name: str, sigmas: Sequence[float], steps: Sequence[int], chunk: int) -> Path:
    path.write_text(textwrap.dedent(SPEC.format(name=name, sigmas=list(sigmas), steps=list(steps), chunk=chunk)))
    return path


def gdp(args: Sequence[str], env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess:
    """Run the `gdp` CLI to completion (bounded); output captured."""
    return subprocess.run([str(BIN / "gdp"), *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def lake_cells(lake: Path, spec: str) -> list[str]:
    """cell_id of every staging row of ``spec`` (duplicates kept: the caller checks 'exactly once')."""
    import pyarrow.parquet as pq

    out: list[str] = []
    for p in sorted((lake / "staging" / f"spec={spec}").glob("mechanism=*/chunk-*.parquet")):
        out += pq.read_table(p, columns=["cell_id"]).column("cell_id").to_pylist()
    return out


def temporaries(*roots: Path) -> list[Path]:
    return sorted(p for r in roots if r.exists() for p in r.rglob("*") if ".tmp-" in p.name)


def group_members(pgid: int) -> list[int]:
    """Live processes of process group ``pgid`` (Linux /proc), zombies excluded."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(stat.parent.name))
    return out
