"""Pipeline sub-commands of ``gdp`` (sweep, regret-map, calibration-sweep, publish, sql, plot, demo, audit, card), registered into
:data:`flows.cli.SUBCOMMANDS`.

Each command's ``run`` imports Prefect/DuckDB lazily so that ``gdp analyze`` stays fast. Specs are validated
*before* Prefect is imported or any flow starts, so an invalid spec fails in well under a second and writes nothing.
Flows run on Prefect's ephemeral server unless ``PREFECT_API_URL`` points at a real one.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from flows.cli import SUBCOMMANDS
from tasks.trace import phase

DEMO_SPEC = Path(__file__).resolve().parent.parent / "data" / "specs" / "demo.yaml"


def _prefect_env(verbose: bool) -> None:
    """Quiet, offline defaults for CLI runs (explicit environment settings win): the command prints its own summary
    (failures included), so Prefect's log lines and absl's warnings only show with -v."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # no telemetry calls from the local server
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


def _preflight(args: argparse.Namespace, *, prefect: bool = True) -> None:
    """Fail fast, naming the folder, when the lake, the report's folder or PREFECT_HOME cannot be written - before
    Prefect's server starts (a read-only PREFECT_HOME used to time out after 60 s, a read-only lake after ~29 s)."""
    from tasks.lake import default_lake, default_report
    from tasks.publish import check_writable

    lake = getattr(args, "lake", None)
    if hasattr(args, "lake"):
        check_writable(Path(lake or default_lake()), "lake")
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
    from flows.runners import default_workers
    from tasks.lake import default_lake, default_report, members_current
    from tasks.plan import build_plan
    from tasks.publish import report_is_current

    lake = Path(args.lake or default_lake())
    report = Path(args.report or default_report())
    plan = build_plan(spec, lake, workers=args.workers or default_workers())
    if plan.chunks or not members_current(lake, plan.spec_name, plan.spec_hash, plan.cell_ids, plan.eval_key):
        return None
    return plan if report_is_current(lake, report) else None


def _start_api() -> None:
    from flows.runners import start_api_server

    start_api_server()


def _runner(args: argparse.Namespace) -> Any:
    from flows.runners import make_task_runner, share_api_with_workers

    os.environ["GDP_TASK_RUNNER_LABEL"] = args.runner + (f"@{args.dask_address}" if args.dask_address else "")
    runner = make_task_runner(args.runner, dask_address=args.dask_address, max_workers=args.workers)
    share_api_with_workers(args.runner)
    return runner


def _check_workers(args: argparse.Namespace) -> None:
    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")


# -- sweep ----------------------------------------------------------------------------------------------------------
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


# -- sql --------------------------------------------------------------------------------------------------------------
def _jsonable(v: Any) -> Any:
    if isinstance(v, float):
        if math.isnan(v):
            return None
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return v
    if isinstance(v, int | str | bool) or v is None:
        return v
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return str(v)


def _table_text(columns: list[str], rows: list[tuple]) -> str:
    """An aligned text table (rich): numbers right-aligned, NULL for missing values, the row count below."""
    import io

    from rich import box
    from rich.console import Console
    from rich.table import Table

    def cell(v: Any) -> str:
        if v is None:
            return "NULL"
        if isinstance(v, float):
            return f"{v:.6g}"
        return str(v)

    body = [[cell(v) for v in r] for r in rows]
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    for i, c in enumerate(columns):
        numeric = bool(body) and all(_is_num(r[i]) or r[i] == "NULL" for r in body)
        table.add_column(c, justify="right" if numeric else "left", no_wrap=True)
    for r in body:
        table.add_row(*r)
    out = io.StringIO()
    Console(file=out, width=100_000, color_system=None, highlight=False).print(table)
    lines = [line.rstrip() for line in out.getvalue().splitlines() if line.strip()]
    lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(lines)


def _is_num(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _sql(args: argparse.Namespace) -> int:
    from tasks.lake import default_report
    from tasks.publish import query_report

    columns, rows = query_report(
        args.report or default_report(),
        args.query,
        **{
            k: v
            for k, v in (("timeout", args.timeout), ("memory_limit", args.memory_limit), ("threads", args.threads))
            if v is not None
        },
    )
    if args.format == "json":
        print(json.dumps([{c: _jsonable(v) for c, v in zip(columns, r, strict=True)} for r in rows], indent=1))
    elif args.format == "csv":
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(columns)
        w.writerows(rows)
    else:
        print(_table_text(columns, rows))
    return 0


def _export(args: argparse.Namespace) -> int:
    from tasks.lake import default_report
    from tasks.publish import export_report

    report = args.report or str(default_report())
    counts = export_report(report, args.out, fmt=args.format)
    total = sum(counts.values())
    print(f"exported {report} -> {args.out} ({args.format}, {len(counts)} tables, {total:,} rows)")
    return 0


# -- plot -------------------------------------------------------------------------------------------------------------
def _plot(args: argparse.Namespace) -> int:
    from tasks.lake import default_report
    from tasks.plots import heatmap_filename, plot_curve, plot_heatmap

    report = args.report or str(default_report())
    out_dir = Path(report).resolve().parent / "plots"
    if args.what == "curve":
        if not args.cell:
            raise ValueError('gdp plot curve needs --cell CELL_ID (see: gdp sql "SELECT cell_id FROM cells")')
        out = args.out or str(out_dir / f"curve_{args.cell}.png")
        info = plot_curve(report, args.cell, out=out, spec=args.spec, overwrite=args.overwrite or not args.out)
    else:
        if not (args.spec and args.x and args.y):
            raise ValueError("gdp plot heatmap needs --spec NAME --x AXIS --y AXIS")
        fixed = {}
        for item in args.fixed or []:
            key, _, value = item.partition("=")
            try:
                fixed[key] = float(value)
            except ValueError:
                raise ValueError(f"--fixed must look like steps=1000, got {item!r}") from None
        # The default name encodes metric, axes and fixed/reduce: a different plot never lands on another's file.
        name = heatmap_filename(args.metric, args.x, args.y, fixed, args.reduce)
        out = args.out or str(out_dir / args.spec / name)
        info = plot_heatmap(
            report,
            args.spec,
            x=args.x,
            y=args.y,
            metric=args.metric,
            out=out,
            fixed=fixed,
            reduce=args.reduce,
            overwrite=args.overwrite or not args.out,
        )
    print(info["path"])
    return 0


# -- demo -------------------------------------------------------------------------------------------------------------
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


# -- registry audits (issue 7) ----------------------------------------------------------------------------------------
def _print_flags(s: Any) -> None:
    """What both audit summaries (manifest registry, MLflow registry) list under their count line."""
    for x in getattr(s, "evidence_violations", []):  # hook (tasks.evidence): violations first
        print(f"  EVIDENCE OF A VIOLATION: {x}")
    for msg in s.failed.values():
        print(f"  FAILED {msg}", file=sys.stderr)
    for x in s.less_private:
        print(f"  less private: {x}")
    for x in s.claim_flags:
        print(f"  published claim: {x}")
    for x in s.estimates:
        print(f"  estimate, not a bound: {x}")


def _audit(args: argparse.Namespace) -> int:
    """``gdp audit [REGISTRY]``: the manifests of REGISTRY (tagging their MLflow versions with --mlflow-uri); without
    REGISTRY and with --mlflow-uri, the MLflow Model Registry itself (issue 17, tasks.mlflow_registry)."""
    from tasks.registry import DEFAULT_REGISTRY, MANIFEST_DEADLINE, load_registry, registry_files

    if args.registry is None and args.mlflow_uri:
        return _audit_mlflow(args)
    if args.model:
        raise ValueError("--model selects registered models of the MLflow registry: give --mlflow-uri and no REGISTRY")
    registry = args.registry or str(DEFAULT_REGISTRY)
    if not args.allow_empty:  # a missing or empty registry fails here, before Prefect starts and without a traceback
        if not registry_files(registry):
            raise ValueError(
                f"registry {registry} has no .yaml/.yml file (not mounted?); nothing was written. If it is meant to "
                "be empty (its models removed from the report), pass --allow-empty"
            )
        good, errors = load_registry(registry, deadline=MANIFEST_DEADLINE)
        if not good:
            raise ValueError(
                f"registry {registry} has no valid model version ({len(errors)} invalid file(s), e.g. {errors[0]}); "
                "nothing was written. If it is meant to be empty, pass --allow-empty"
            )
    s = _run_audit(args, registry=registry, mlflow_uri=args.mlflow_uri)
    print(
        f"audit {s.registry}: {len(s.models)} model versions ({len(s.computed)} computed, {len(s.reused)} "
        f"unchanged), {s.comparisons_computed} comparisons computed, {len(s.failed)} failed"
    )
    _print_flags(s)
    if args.mlflow_uri:
        print(f"MLflow: tagged {len(s.mlflow_tagged)}, not registered: {', '.join(s.mlflow_missing) or 'none'}")
    print(f"report: {s.report}   (views: models, model_privacy, model_comparisons, evidence)\ncards: {s.cards_dir}")
    return 1 if s.failed else 0


def _run_audit(args: argparse.Namespace, **source: Any) -> Any:
    """The privacy-audit flow with the options both audit sources share (``source``: where the models come from)."""
    _preflight(args)
    _prefect_env(args.verbose)
    from flows.privacy_audit import privacy_audit

    return privacy_audit(
        **source,
        lake=args.lake,
        report=args.report,
        cards_dir=args.cards,
        allow_empty=args.allow_empty,
        report_uri=args.report_uri,
        progress=not args.no_progress,
        evidence_level=getattr(args, "evidence_level", 0.05),  # hook (tasks.evidence)
    )


def _audit_mlflow(args: argparse.Namespace) -> int:
    from tasks.mlflow_registry import public_uri

    try:
        import mlflow  # noqa: F401
    except ImportError:
        raise ValueError("--mlflow-uri needs MLflow: pip install 'gdp-audit[mlflow]'") from None
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = MlflowClient(tracking_uri=args.mlflow_uri, registry_uri=args.mlflow_uri)
    # Before Prefect starts: an unreachable server or an unknown --model is a one-line error, exit 2. The probe retries
    # once (MLflow's default backs off for minutes); the audit itself keeps MLflow's and its task's retries.
    probe_env = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}
    saved = {k: os.environ.get(k) for k in probe_env}
    os.environ.update({k: v for k, v in probe_env.items() if saved[k] is None})
    try:
        client.search_registered_models(max_results=1)
        for name in args.model or ():
            client.get_registered_model(name)
    except MlflowException as exc:
        raise ValueError(f"--mlflow-uri {public_uri(args.mlflow_uri)}: {str(exc).splitlines()[0][:300]}") from None
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
    s = _run_audit(
        args,
        source="mlflow",
        mlflow_uri=args.mlflow_uri,
        models=args.model or None,
        production_alias=args.production_alias,
    )
    print(
        f"audit mlflow:{public_uri(args.mlflow_uri)}: {len(s.models) + len(s.not_auditable)} model versions: "
        f"{len(s.computed)} audited, {len(s.reused)} reused (unchanged), {len(s.not_auditable)} not auditable, "
        f"{len(s.failed)} failed; {s.comparisons_computed} comparisons computed"
    )
    for key, why in sorted(s.not_auditable.items()):
        print(f"  not auditable {key}: {why}")
    _print_flags(s)
    print(f"MLflow: {s.mlflow_tags_written} tag value(s) written on {len(s.mlflow_tagged)} audited version(s)")
    print(f"report: {s.report}   (views: models, model_privacy, model_comparisons, evidence)\ncards: {s.cards_dir}")
    return 1 if s.failed else 0


def _card(args: argparse.Namespace) -> int:
    from tasks.audit import audit_path, read_audit
    from tasks.cards import hf_yaml_block, merge_into_readme, render_markdown, write_card
    from tasks.lake import default_report
    from tasks.publish import query_report

    report = Path(args.report or default_report())
    model, _, version = args.model.partition(":")
    where = "model = ?" if not version else "model = ? AND version = ?"
    sql = f"SELECT model, version, audit_key FROM model_privacy WHERE {where} ORDER BY version DESC LIMIT 1"
    sql = sql.replace("?", "'" + model.replace("'", "''") + "'", 1)
    if version:
        if not version.isdigit():
            raise ValueError(f"VERSION must be an integer, got {version!r}")
        sql = sql.replace("?", version, 1)
    _, rows = query_report(report, sql)
    if not rows:
        raise ValueError(f"no audited model version {args.model!r} in {report}: run 'gdp audit' first")
    _, lake_rows = query_report(report, "SELECT lake FROM report_info")
    if lake_rows[0][0] is None:
        raise ValueError(f"{report} is an exported report without its lake: run 'gdp card' on the published report")
    m, v, key = rows[0]
    lake = report.resolve().parent / lake_rows[0][0]  # relative to the report's folder (absolute in old reports)
    row = read_audit(audit_path(lake, m, v, key))
    from tasks.evidence import attach_from_report  # hook (tasks.evidence): the card's Evidence section

    row = attach_from_report(row, report, lake)
    uri = args.report_uri or os.environ.get("GDP_REPORT_URI") or None  # never a local path by default
    if args.hf_readme:
        print(merge_into_readme(args.hf_readme, row, report_uri=uri))
    elif args.out:
        paths = write_card(row, args.out, report_uri=uri)
        print("\n".join(paths.values()))
    elif args.format == "yaml":
        print(hf_yaml_block(row, report_uri=uri), end="")
    else:
        print(render_markdown(row, report_uri=uri, png_name=None), end="")
    return 0


_REPORT_URI_HELP = (
    "where readers find the report (e.g. s3://bucket/privacy.duckdb), named in cards and MLflow tags "
    "(default $GDP_REPORT_URI; no local path is published otherwise)"
)


def _register() -> None:
    def sweep_args(p: argparse.ArgumentParser) -> None:
        _add_run_args(p)

    def regret_args(p: argparse.ArgumentParser) -> None:
        _add_run_args(p)
        p.add_argument("--x", help="heat-map x axis (a grid key; default: spec plot.x or the first varying key)")
        p.add_argument("--y", help="heat-map y axis (a grid key; default: spec plot.y or the second varying key)")

    def publish_args(p: argparse.ArgumentParser) -> None:
        _add_store_args(p)
        p.add_argument(
            "-v", "--verbose", action="store_true", help="accepted for compatibility (publishing starts no flow server)"
        )

    def sql_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("query", metavar="SQL", help='one read-only SELECT, e.g. "SELECT * FROM cells LIMIT 5"')
        p.add_argument(
            "--format",
            choices=("table", "csv", "json"),
            default="table",
            help="output: aligned table (default), CSV, or JSON (a list of row objects)",
        )
        p.add_argument("--timeout", type=float, help="seconds before the query is interrupted (default 60)")
        p.add_argument("--memory-limit", help="DuckDB memory limit, e.g. 256MB (default 1GB)")
        p.add_argument("--threads", type=int, help="DuckDB threads (default 2)")
        _add_store_args(p, lake=False)

    def export_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("out", metavar="OUT", help="new file (duckdb) or folder (parquet) to write; never overwritten")
        p.add_argument(
            "--format",
            choices=("duckdb", "parquet"),
            default="duckdb",
            help="duckdb: one self-contained DuckDB file (default); parquet: a folder from EXPORT DATABASE "
            "(IMPORT DATABASE restores it)",
        )
        _add_store_args(p, lake=False)

    def plot_args(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "what",
            choices=("heatmap", "curve"),
            help="heatmap: a metric over two grid axes of one spec; curve: one cell's trade-off curve",
        )
        p.add_argument("--spec", help="spec name (as in the cells view)")
        p.add_argument("--cell", help='cell_id of the curve to draw (see: gdp sql "SELECT cell_id FROM cells")')
        p.add_argument("--x", help="heat-map x axis: a grid key such as sampling_rate")
        p.add_argument("--y", help="heat-map y axis: a grid key such as noise_multiplier")
        p.add_argument(
            "--metric",
            default="gdp_regret",
            choices=("mu", "gdp_regret", "advantage", "bayes_security"),
            help="heat-map metric (default gdp_regret)",
        )
        p.add_argument("--fixed", action="append", metavar="AXIS=VALUE", help="fix another axis (repeatable)")
        p.add_argument(
            "--reduce",
            default="max",
            choices=("max", "min", "mean"),
            help="how to reduce axes that are neither plotted nor fixed",
        )
        p.add_argument("--out", help="PNG path (default: next to the report, under plots/, named after the plot)")
        p.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
        _add_store_args(p, lake=False)

    def demo_args(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--runner", choices=("thread", "process"), default="process", help="task runner (default process)"
        )
        _add_store_args(p)

    def audit_args(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "registry",
            nargs="?",
            metavar="REGISTRY",
            help="folder of YAML manifests or one YAML file (default: the sample registry data/registry)",
        )
        p.add_argument(
            "--mlflow-uri",
            help="tracking URI. Without REGISTRY: audit this MLflow Model Registry itself (each version's dp.* "
            "description from its tags or its run; see README 'Audit my MLflow registry'); with REGISTRY: tag the "
            "versions its manifests name (needs gdp-audit[mlflow])",
        )
        p.add_argument(
            "--model",
            action="append",
            metavar="NAME",
            help="with --mlflow-uri and no REGISTRY: audit this registered model only (repeatable; default all)",
        )
        p.add_argument(
            "--production-alias",
            default="production",
            help="MLflow alias of the production version (default 'production'; else the legacy Production stage)",
        )
        p.add_argument("--cards", help="where privacy cards go (default: cards/ next to the report)")
        p.add_argument(
            "--allow-empty",
            action="store_true",
            help="accept a registry with no valid model version (removes its models from the report)",
        )
        p.add_argument("--report-uri", help=_REPORT_URI_HELP)
        p.add_argument(  # hook (tasks.evidence): family-wise level of the evidence checks
            "--evidence-level",
            type=float,
            default=0.05,
            help="audit-wide false-alarm level of the evidence checks: each of the N versions with canary scores is "
            "checked at confidence 1 - level/N (Bonferroni; default 0.05)",
        )
        p.add_argument("--no-progress", action="store_true", help="no progress bar")
        p.add_argument("-v", "--verbose", action="store_true", help="show Prefect's INFO logs")
        _add_store_args(p)

    def card_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("model", metavar="MODEL[:VERSION]", help="model name, optionally :version (default newest)")
        p.add_argument("--format", choices=("md", "yaml"), default="md", help="Markdown card or HF model-card YAML")
        p.add_argument("--out", help="write card.md, curve.png and model_card.yaml under OUT/MODEL/vVERSION/")
        p.add_argument(
            "--hf-readme",
            metavar="README.md",
            help="merge the privacy metadata into this Hugging Face model card's front matter (keeps its keys; "
            "needs gdp-audit[hf])",
        )
        p.add_argument("--report-uri", help=_REPORT_URI_HELP)
        _add_store_args(p, lake=False)

    SUBCOMMANDS.update(
        {
            "sweep": ("sweep a grid spec into the lake and publish the report", sweep_args, _sweep),
            "regret-map": (
                "sweep + regret/mu heat maps and the worst cell's trade-off curve",
                regret_args,
                _regret_map,
            ),
            "calibration-sweep": (
                "calibrate the noise multiplier over a (sampling_rate, steps) grid",
                sweep_args,
                _calibration_sweep,
            ),
            "publish": ("compact the lake and atomically rebuild the DuckDB report", publish_args, _publish),
            "sql": ("run a read-only SQL query against the report", sql_args, _sql),
            "export": ("write the report as one self-contained file (no lake needed)", export_args, _export),
            "plot": ("PNG heat map or trade-off curve from the report", plot_args, _plot),
            "demo": ("tiny regret map on 2 cores, then a sample query", demo_args, _demo),
            "audit": ("audit a model registry: privacy cards, DuckDB rows, MLflow tags", audit_args, _audit),
            "card": ("print or write the privacy card of MODEL[:VERSION] from the report", card_args, _card),
        }
    )


_register()
