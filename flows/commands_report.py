"""``gdp sql``, ``export`` and ``plot``: the commands that read a published report (never a flow, no Prefect)."""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

from flows.command_common import (
    Command,
    _add_store_args,
)

__all__ = ["REPORT_COMMANDS"]


def _table_text(columns: list[str], rows: list[tuple]) -> str:
    """An aligned text table (rich): numbers right-aligned, NULL for missing values, the row count below."""

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


def _format_rows(columns: list[str], rows: list[tuple], fmt: str) -> str:
    """The result as ``gdp sql --format`` prints it (table, csv or json), ending in a newline."""
    if fmt == "json":
        from tasks.formatting import json_text

        return json_text([dict(zip(columns, r, strict=True)) for r in rows], indent=1) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        w.writerows(rows)
        return buf.getvalue()
    return _table_text(columns, rows) + "\n"


def _sql(args: argparse.Namespace) -> int:
    """``gdp sql``: the query runs in a child process bounded as a whole (:func:`tasks.report_query.run_bounded`):
    its address space grows by at most ``--memory-limit`` + 128 MiB, and it is killed 2 s after ``--timeout`` if
    DuckDB's interrupt has not stopped it. A limit reached is one line, exit 2."""
    from tasks.lake import default_report
    from tasks.report_query import (
        SQL_MEMORY_LIMIT,
        SQL_THREADS,
        SQL_TIMEOUT_SECONDS,
        check_query_limits,
        read_only_statement,
        run_bounded,
    )

    timeout = SQL_TIMEOUT_SECONDS if args.timeout is None else args.timeout
    memory_limit = SQL_MEMORY_LIMIT if args.memory_limit is None else args.memory_limit
    threads = SQL_THREADS if args.threads is None else args.threads
    check_query_limits(timeout, memory_limit, threads)
    from tasks.object_store import check_store, is_url

    report: str | Path = args.report if is_url(args.report) else Path(args.report or default_report()).resolve()
    if isinstance(report, str):
        check_store(report, "--report", is_report=True)  # the child downloads it (tasks.report_query.local_report)
    elif not report.exists():
        raise ValueError(f"report {str(report)!r} does not exist: run 'gdp sweep SPEC' or 'gdp publish' first")
    read_only_statement(args.query)  # a write is refused here, before a process starts (the child checks again)
    request = {
        "report": str(report),
        "sql": args.query,
        "timeout": timeout,
        "memory_limit": memory_limit,
        "threads": threads,
        "format": args.format,
    }
    root = str(Path(__file__).resolve().parent.parent)  # the child imports this checkout's flows and tasks
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    sys.stdout.flush()
    run_bounded(
        [sys.executable, "-m", "flows.commands_report"],
        request,
        timeout=timeout,
        memory_limit=memory_limit,
        out=sys.stdout,
        env=env,
    )
    return 0


def _sql_child() -> int:
    """The child of ``gdp sql`` (``python -m flows.commands_report``, see :func:`tasks.report_query.run_bounded`):
    read the request from stdin, run the query under the address-space cap, report on the status pipe, print."""
    import signal

    from tasks.report_query import limit_address_space, query_report, short_error

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which ends this process
    req = json.loads(sys.stdin.read())
    status = os.fdopen(int(req["status_fd"]), "w", buffering=1)

    def send(**msg: str) -> None:
        status.write(json.dumps(msg) + "\n")
        status.flush()

    def start() -> None:
        limit_address_space(req["memory_limit"])
        send(phase="query")

    try:
        columns, rows = query_report(
            req["report"],
            req["sql"],
            timeout=req["timeout"],
            memory_limit=req["memory_limit"],
            threads=req["threads"],
            on_start=start,
        )
        text = _format_rows(columns, rows, req["format"])
        del rows
    except ValueError as exc:
        send(error=short_error(str(exc)))
        return 2
    except MemoryError:
        send(error=f"query result exceeded the memory limit {req['memory_limit']} (--memory-limit)")
        return 2
    send(phase="output")
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # the parent stopped reading (its own reader left): nothing more to say
        return 141
    return 0


def _export(args: argparse.Namespace) -> int:
    from tasks.export import export_report
    from tasks.lake import default_report

    report = args.report or str(default_report())
    counts = export_report(report, args.out, fmt=args.format)
    total = sum(counts.values())
    print(f"exported {report} -> {args.out} ({args.format}, {len(counts)} tables, {total:,} rows)")
    return 0


def _plot(args: argparse.Namespace) -> int:
    """The PNG goes to ``--out``, else under ``plots/`` next to a local report, or under ``./plots/`` (the current
    folder) for a report on object storage (read as ``gdp sql`` reads it; flows/regret_map.py says why the PNG is
    not uploaded beside it)."""
    from tasks.lake import default_report
    from tasks.object_store import check_store, is_url
    from tasks.plots import heatmap_filename, plot_curve, plot_heatmap, report_version

    report = args.report or str(default_report())
    remote = is_url(report)
    if remote:
        check_store(report, "--report", is_report=True)  # URL, credentials, endpoint, bucket: one line
    out_dir = Path("plots").resolve() if remote else Path(report).resolve().parent / "plots"
    if args.what == "curve":
        if not args.cell:
            raise ValueError('gdp plot curve needs --cell CELL_ID (see: gdp sql "SELECT cell_id FROM cells")')
        out = args.out or str(out_dir / f"curve_{args.cell}.png")
        with report_version(report) as source:  # its three queries read one version of an s3:// report
            info = plot_curve(source, args.cell, out=out, spec=args.spec, overwrite=args.overwrite or not args.out)
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
    if remote and not args.out:
        print(  # stderr: stdout stays the PNG's path alone, for scripts
            f"(the report is on object storage: the PNG is written under {out_dir}, not beside it; --out FILE)",
            file=sys.stderr,
        )
    return 0


def _sql_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("query", metavar="SQL", help='one read-only SELECT, e.g. "SELECT * FROM cells LIMIT 5"')
    p.add_argument(
        "--format",
        choices=("table", "csv", "json"),
        default="table",
        help="output: aligned table (default), CSV, or JSON (a list of row objects)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        help="seconds before the query is interrupted (default 60; its process is killed 2 s later)",
    )
    p.add_argument(
        "--memory-limit",
        help="memory limit, e.g. 256MB (default 1GB): DuckDB's, and the query's process may grow by at most this "
        "+ 128 MiB",
    )
    p.add_argument("--threads", type=int, help="DuckDB threads (default 2)")
    _add_store_args(p, lake=False)


def _export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("out", metavar="OUT", help="new file (duckdb) or folder (parquet) to write; never overwritten")
    p.add_argument(
        "--format",
        choices=("duckdb", "parquet"),
        default="duckdb",
        help="duckdb: one self-contained DuckDB file (default); parquet: a folder from EXPORT DATABASE "
        "(IMPORT DATABASE restores it)",
    )
    _add_store_args(p, lake=False)


def _plot_args(p: argparse.ArgumentParser) -> None:
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
    p.add_argument(
        "--out",
        help="PNG path (default: under plots/ next to the report, or under ./plots/ for an s3:// report, named after "
        "the plot)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    _add_store_args(p, lake=False)


REPORT_COMMANDS: dict[str, Command] = {
    "sql": Command("run a read-only SQL query against the report", _sql_args, _sql),
    "export": Command("write the report as one self-contained file (no lake needed)", _export_args, _export),
    "plot": Command("PNG heat map or trade-off curve from the report", _plot_args, _plot),
}


if __name__ == "__main__":  # the child process of `gdp sql` (see _sql)
    sys.exit(_sql_child())
