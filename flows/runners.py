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

__all__ = ["RUNNERS", "default_workers", "make_task_runner", "runner_from_env"]

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

        return ProcessPoolTaskRunner(max_workers=workers)
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
    at interpreter exit. A configured ``PREFECT_API_URL`` (a real server) is left alone.
    """
    if kind == "thread" or os.environ.get("PREFECT_API_URL"):
        return
    from prefect.settings import get_current_settings

    if get_current_settings().api.url:
        os.environ["PREFECT_API_URL"] = str(get_current_settings().api.url)
        return
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()  # the same singleton Prefect's own client uses in this process
    server.start(timeout=int(os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "60")))
    os.environ["PREFECT_API_URL"] = server.api_url
