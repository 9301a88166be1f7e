"""``gdp sql``, ``export`` and ``plot``: the commands that read a published report (never a flow, no Prefect)."""

from __future__ import annotations

import argparse
import csv
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
    from tasks.report_query import query_report

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
        from tasks.formatting import json_text

        print(json_text([dict(zip(columns, r, strict=True)) for r in rows], indent=1))
    elif args.format == "csv":
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(columns)
        w.writerows(rows)
    else:
        print(_table_text(columns, rows))
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


def _sql_args(p: argparse.ArgumentParser) -> None:
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
    p.add_argument("--out", help="PNG path (default: next to the report, under plots/, named after the plot)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    _add_store_args(p, lake=False)


REPORT_COMMANDS: dict[str, Command] = {
    "sql": Command("run a read-only SQL query against the report", _sql_args, _sql),
    "export": Command("write the report as one self-contained file (no lake needed)", _export_args, _export),
    "plot": Command("PNG heat map or trade-off curve from the report", _plot_args, _plot),
}
