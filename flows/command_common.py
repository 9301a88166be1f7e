"""What the pipeline sub-commands of ``gdp`` share: the :class:`Command` record, Prefect's quiet CLI defaults, the
fail-fast preflight checks, the common options and the task-runner choice."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

__all__ = ["Command", "describe_mechanism"]


class Command(NamedTuple):
    """One ``gdp`` sub-command: its help line, the function adding its options, the function running it (exit code)."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def describe_mechanism(mech: dict[str, Any]) -> str:
    """``gaussian(noise_multiplier=1, ...)``; a parameter that is itself a mechanism (or a list of them) is described the
    same way, e.g. ``self_composed(mechanism=gaussian(...), count=4)``: generic over kinds, no kind named here."""

    def value(v: Any) -> str:
        if isinstance(v, dict) and "kind" in v:
            return describe_mechanism(v)
        if isinstance(v, list) and v and all(isinstance(x, dict) and "kind" in x for x in v):
            return "[" + ", ".join(describe_mechanism(x) for x in v) + "]"
        return f"{v:g}" if isinstance(v, float) else str(v)

    params = ", ".join(f"{k}={value(v)}" for k, v in mech.items() if k != "kind")
    return f"{mech.get('kind', '?')}({params})"


REPORT_URI_HELP = (
    "where readers find the report (e.g. s3://bucket/privacy.duckdb), named in cards and MLflow tags "
    "(default $GDP_REPORT_URI; no local path is published otherwise)"
)


def _prefect_env(verbose: bool) -> None:
    """Quiet, offline defaults for CLI runs (explicit environment settings win): the command prints its own summary
    (failures included), so Prefect's log lines and absl's warnings only show with -v; a temporary API server may
    take :data:`flows.runners.DEFAULT_STARTUP_TIMEOUT` seconds to start."""
    from flows.runners import DEFAULT_STARTUP_TIMEOUT, STARTUP_TIMEOUT_VARIABLE, startup_timeout

    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # no telemetry calls from the local server
    # A temporary server gets minutes, not Prefect's 20 s, to start on a busy host (a user's value is checked, and wins)
    startup_timeout()
    os.environ.setdefault(STARTUP_TIMEOUT_VARIABLE, str(DEFAULT_STARTUP_TIMEOUT))
    if not os.environ.get("PREFECT_API_URL"):  # Prefect will start a local server: never let it outlive us
        from flows.runners import start_orphan_watchdog

        start_orphan_watchdog()
        # The temporary server's start-up registers Prefect's block types (importing every installed integration,
        # prefect-dask and distributed included): ~0.5 s of its ~3 s, for blocks no gdp command uses. A persistent
        # server (PREFECT_API_URL) keeps its own settings.
        os.environ.setdefault("PREFECT_SERVER_REGISTER_BLOCKS_ON_START", "false")
        os.environ.setdefault("PREFECT_SERVER_MEMOIZE_BLOCK_AUTO_REGISTRATION", "false")
    if not verbose:
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", "ERROR")
        os.environ.setdefault("PREFECT_LOGGING_LOGGERS_PREFECT_FLOW_RUNS_LEVEL", "CRITICAL")
        os.environ.setdefault("PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL", "CRITICAL")
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import logging

        logging.getLogger("absl").setLevel(logging.ERROR)


def _preflight(args: argparse.Namespace, *, prefect: bool = True, object_store: bool = False) -> None:
    """Fail fast, naming the folder, when the lake, the report's folder or PREFECT_HOME cannot be written - before
    Prefect's server starts (a read-only PREFECT_HOME used to time out after 60 s, a read-only lake after ~29 s).
    ``object_store``: the command accepts ``s3://`` addresses (tasks.object_store), checked here with one request."""
    from tasks.duckdb_access import publish_memory_limit
    from tasks.lake import default_lake, default_report
    from tasks.object_store import check_store, is_url, shown
    from tasks.publish import check_writable

    publish_memory_limit()  # $GDP_PUBLISH_MEMORY_LIMIT, read when the lake is compacted: one line naming it
    lake = getattr(args, "lake", None)
    for option, value in (("--lake", lake), ("--report", args.report)):
        if is_url(value) and not object_store:
            raise ValueError(
                f"{option} {shown(str(value))}: this command needs a local path (object storage is supported by "
                "gdp sweep, regret-map, publish, sql, export and plot)"
            )
    if is_url(lake):
        check_store(str(lake), "--lake")  # URL, credentials, endpoint and bucket: one line naming the setting
    elif hasattr(args, "lake"):
        check_writable(Path(lake or default_lake()), "lake")
    if is_url(args.report):
        check_store(args.report, "--report", is_report=True)
    else:
        check_writable(Path(args.report or default_report()).resolve().parent, "report folder")
    if prefect and not os.environ.get("PREFECT_API_URL"):
        home = Path(os.environ.get("PREFECT_HOME") or "~/.prefect").expanduser()
        check_writable(home, "PREFECT_HOME folder (Prefect's local server keeps its database there)")


def _add_store_args(p: argparse.ArgumentParser, *, lake: bool = True) -> None:
    if lake:
        p.add_argument("--lake", help="lake root (default data/lake or $GDP_LAKE)")
    p.add_argument("--report", help="DuckDB report (default data/reports/privacy.duckdb or $GDP_REPORT)")


def _add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", metavar="SPEC.yaml", help="grid spec (see data/specs/)")
    p.add_argument(
        "--runner",
        choices=("thread", "process", "dask"),
        default=os.environ.get("GDP_TASK_RUNNER", "process"),
        help="task runner (default process: one worker per core)",
    )
    p.add_argument(
        "--dask-address",
        help="scheduler of a running Dask cluster, e.g. tcp://10.0.0.5:8786 "
        "(default with --runner dask: a temporary LocalCluster)",
    )
    p.add_argument("--workers", type=int, help="worker processes/threads (default: cores)")
    p.add_argument("--force", action="store_true", help="allow grids larger than the spec's max_cells")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("-v", "--verbose", action="store_true", help="show Prefect's INFO logs")
    _add_store_args(p)


def _up_to_date(spec: Any, args: argparse.Namespace) -> Any:
    """Plan without Prefect: the plan when nothing is left to compute, the spec's cell set is recorded and the report
    is current (then the command answers from the lake in about a second), else None."""
    from flows.runners import default_workers, expect_chunks
    from tasks.lake import default_lake, default_report, members_current
    from tasks.object_store import is_url
    from tasks.plan import build_plan
    from tasks.publish import report_is_current

    if is_url(args.lake) or is_url(args.report):
        return None  # on object storage the flow syncs the lake first (tasks.object_store)
    lake = Path(args.lake or default_lake())
    report = Path(args.report or default_report())
    plan = build_plan(spec, lake, workers=args.workers or default_workers())
    expect_chunks(plan.chunks)  # early pool workers compute the first ones while Prefect starts
    if plan.chunks or not members_current(lake, plan.spec_name, plan.spec_hash, plan.cell_ids, plan.eval_key):
        return None
    return plan if report_is_current(lake, report) else None


def _spawn_workers(args: argparse.Namespace) -> None:
    from flows.runners import spawn_workers_now

    spawn_workers_now(args.runner, args.workers)


def _start_api() -> None:
    from flows.runners import start_api_server

    start_api_server()


def _runner(args: argparse.Namespace) -> Any:
    from flows.runners import make_task_runner, share_api_with_workers, start_workers

    os.environ["GDP_TASK_RUNNER_LABEL"] = args.runner + (f"@{args.dask_address}" if args.dask_address else "")
    runner = make_task_runner(args.runner, dask_address=args.dask_address, max_workers=args.workers)
    start_workers(runner)  # process pools: workers spawn and import while the API server boots
    share_api_with_workers(args.runner)
    return runner


def _check_workers(args: argparse.Namespace) -> None:
    """--workers and --dask-address, before Prefect starts."""
    from flows.runners import check_dask_address
    from tasks.safe_yaml import shown

    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {shown(args.workers)}")
    check_dask_address(args.runner, args.dask_address)
