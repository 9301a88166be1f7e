"""``gdp sweep``, ``regret-map``, ``calibration-sweep``, ``publish`` and ``demo``: the commands that run flows.

Specs are validated *before* Prefect is imported or any flow starts, so an invalid spec fails in well under a second
and writes nothing; a spec whose cells are all in the lake and whose report is current is answered without Prefect.
Flows run on Prefect's ephemeral server unless ``PREFECT_API_URL`` points at a real one.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from flows.command_common import (
    Command,
    _add_run_args,
    _add_store_args,
    _check_workers,
    _prefect_env,
    _preflight,
    _runner,
    _start_api,
    _up_to_date,
)
from flows.commands_report import _sql
from tasks.trace import phase

__all__ = ["RUN_COMMANDS"]

DEMO_SPEC = Path(__file__).resolve().parent.parent / "data" / "specs" / "demo.yaml"


def _sweep(args: argparse.Namespace) -> int:
    from tasks.spec import load_grid_spec

    spec = load_grid_spec(args.spec, force=args.force)  # fail fast, before Prefect starts
    phase("spec-loaded")
    _check_workers(args)
    _preflight(args)
    plan = _up_to_date(spec, args)
    if plan is not None:
        from tasks.lake import default_report

        print(
            f"sweep {spec.name}: {plan.cells_total} cells (0 computed, {plan.cells_present} already in the lake); "
            "nothing to compute, report up to date"
        )
        print(f"report: {Path(args.report or default_report()).resolve()}")
        return 0
    _prefect_env(args.verbose)  # before the first Prefect import
    _start_api()  # boots while the flow is imported and its task runner built
    phase("server-starting")
    from flows.grid_sweep import grid_sweep

    phase("flow-imported")
    runner = _runner(args)
    phase("runner+server")
    summary = grid_sweep.with_options(task_runner=runner)(
        spec_path=str(args.spec),
        lake=args.lake,
        report=args.report,
        force=args.force,
        progress=not args.no_progress,
        workers=args.workers,
    )
    phase("flow-returned")
    print(
        f"sweep {spec.name}: {summary.cells} cells ({summary.cells_computed} computed, {summary.cells_reused} "
        f"already in the lake), {summary.chunks_computed} chunk(s) computed, {summary.chunks_failed} failed"
    )
    print(f"report: {Path(summary.report).resolve()}" if summary.report else "report: not published")
    phase("printed")
    return 0


def _regret_map(args: argparse.Namespace) -> int:
    from tasks.spec import load_grid_spec

    spec = load_grid_spec(args.spec, force=args.force)
    _check_workers(args)
    _preflight(args)
    _prefect_env(args.verbose)  # before the first Prefect import
    from flows.regret_map import choose_axes

    choose_axes(spec, args.x, args.y)  # bad axes fail before any work
    _start_api()  # boots while the flow is imported and its task runner built
    from flows.regret_map import regret_map

    result = regret_map.with_options(task_runner=_runner(args))(
        spec_path=str(args.spec),
        lake=args.lake,
        report=args.report,
        x=args.x,
        y=args.y,
        force=args.force,
        progress=not args.no_progress,
        workers=args.workers,
    )
    print(f"regret map {spec.name}: {result.sweep.cells} cells, axes {result.y} vs {result.x}")
    for metric, path in result.heatmaps.items():
        print(f"  {metric:<10} {path}")
    if result.curve:
        print(f"  curve      {result.curve}   (worst-regret cell {result.worst_cell})")
    if result.sweep.report:  # None only for a sweep that did not publish (regret_map always publishes)
        print(f"report: {Path(result.sweep.report).resolve()}")
    return 0


def _calibration_sweep(args: argparse.Namespace) -> int:
    from tasks.spec import load_calibration_spec

    spec = load_calibration_spec(args.spec, force=args.force)
    _check_workers(args)
    _preflight(args)
    from flows.runners import default_workers
    from tasks.calibrate import plan_calibration
    from tasks.lake import default_lake, default_report, members_current
    from tasks.publish import query_report, report_is_current

    lake, report = Path(args.lake or default_lake()), Path(args.report or default_report())
    ids, eval_key, chunks = plan_calibration(spec, lake, workers=args.workers or default_workers())
    if (
        not chunks
        and members_current(lake / "_calibration", spec.name, spec.spec_hash, ids, eval_key)
        and report_is_current(lake, report)
    ):  # planned before Prefect starts: nothing to compute, the report already shows it
        print(
            f"calibration sweep {spec.name}: {len(ids)} (sampling_rate, steps) cells, 0 computed; nothing to compute, "
            "report up to date"
        )
    else:
        _prefect_env(args.verbose)
        _start_api()  # boots while the flow is imported and its task runner built
        from flows.calibration_sweep import calibration_sweep

        result = calibration_sweep.with_options(task_runner=_runner(args))(
            spec_path=str(args.spec),
            lake=args.lake,
            report=args.report,
            force=args.force,
            workers=args.workers,
            progress=not args.no_progress,
        )
        print(
            f"calibration sweep {spec.name}: {result.cells} (sampling_rate, steps) cells, {result.cells_computed} "
            f"computed, {result.cells_failed} without a solution"
        )
    name = spec.name.replace("'", "''")
    _, flagged = query_report(
        report,
        f"SELECT sampling_rate, steps, status FROM calibrations WHERE spec = '{name}' AND status <> 'ok' "
        "ORDER BY grid_index",
    )
    for q, steps, status in flagged:
        print(f"  sampling_rate={q:g}, steps={steps}: {status}")
    print(f"report: {report.resolve()}   (view: calibrations)")
    return 0


def _publish(args: argparse.Namespace) -> int:
    """Publishing is one local step: it runs without Prefect (no server to start, none to orphan when killed).
    Deployments and sweeps publish through the ``publish-report`` flow."""
    from tasks.lake import default_lake, default_report
    from tasks.publish import publish_lake

    _preflight(args, prefect=False)
    result = publish_lake(args.lake or default_lake(), args.report or default_report())
    counts = ", ".join(f"{k}={v:,}" for k, v in result.counts.items())
    print(
        f"published {result.report} (snapshot {result.snapshot}{', reused' if result.reused_snapshot else ''}): "
        f"{counts}"
    )
    return 0


def _demo(args: argparse.Namespace) -> int:
    import time

    from tasks.lake import default_report

    started = time.monotonic()
    ns = argparse.Namespace(
        spec=str(DEMO_SPEC),
        runner=args.runner,
        dask_address=None,
        workers=None,
        force=False,
        no_progress=False,
        verbose=False,
        lake=args.lake,
        report=args.report,
        x=None,
        y=None,
    )
    _regret_map(ns)
    report = args.report or str(default_report())
    query = (
        "SELECT steps, round(sampling_rate, 4) AS q, min(noise_multiplier) FILTER (WHERE mu <= 1) AS sigma_for_mu_le_1, "
        "round(max(gdp_regret), 4) AS worst_gdp_regret FROM cells WHERE spec = 'demo' AND steps = 1000 "
        "GROUP BY ALL ORDER BY ALL"
    )
    print(f'\n$ gdp sql "{query}"')
    _sql(argparse.Namespace(report=report, query=query, format="table", timeout=None, memory_limit=None, threads=None))
    print(f"\ndemo finished in {time.monotonic() - started:.0f} s")
    return 0


def _sweep_args(p: argparse.ArgumentParser) -> None:
    _add_run_args(p)


def _regret_args(p: argparse.ArgumentParser) -> None:
    _add_run_args(p)
    p.add_argument("--x", help="heat-map x axis (a grid key; default: spec plot.x or the first varying key)")
    p.add_argument("--y", help="heat-map y axis (a grid key; default: spec plot.y or the second varying key)")


def _publish_args(p: argparse.ArgumentParser) -> None:
    _add_store_args(p)
    p.add_argument(
        "-v", "--verbose", action="store_true", help="accepted for compatibility (publishing starts no flow server)"
    )


def _demo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runner", choices=("thread", "process"), default="process", help="task runner (default process)")
    _add_store_args(p)


RUN_COMMANDS: dict[str, Command] = {
    "sweep": Command("sweep a grid spec into the lake and publish the report", _sweep_args, _sweep),
    "regret-map": Command(
        "sweep + regret/mu heat maps and the worst cell's trade-off curve", _regret_args, _regret_map
    ),
    "calibration-sweep": Command(
        "calibrate the noise multiplier over a (sampling_rate, steps) grid", _sweep_args, _calibration_sweep
    ),
    "publish": Command("compact the lake and atomically rebuild the DuckDB report", _publish_args, _publish),
    "demo": Command("tiny regret map on 2 cores, then a sample query", _demo_args, _demo),
}
