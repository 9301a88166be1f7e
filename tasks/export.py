"""``gdp export``: a report materialised into one self-contained file (or Parquet folder) that needs no lake."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tasks.duckdb_access import DB_SIDE_FILES, STORAGE_VERSION, count_rows, sql_literal
from tasks.report_query import local_report, open_report
from tasks.safe_write import atomic_output

__all__ = ["EXPORT_FORMATS", "export_report"]

EXPORT_FORMATS = ("duckdb", "parquet")


def export_report(report: str | Path, out: str | Path, *, fmt: str = "duckdb") -> dict[str, int]:
    """Materialise every view and table of ``report`` into a self-contained copy that needs no lake.

    ``fmt="duckdb"``: one DuckDB file (storage version :data:`STORAGE_VERSION`; tables keep the view and column
    comments); ``fmt="parquet"``: a folder written by DuckDB's ``EXPORT DATABASE`` (one Parquet file per table plus
    ``schema.sql`` / ``load.sql``: ``IMPORT DATABASE 'folder'`` restores it, any Parquet reader reads the files).
    Written aside and renamed into place; ``out`` must not exist. Returns {table: rows}.
    """
    from tasks.object_store import is_url, shown

    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"format must be one of {', '.join(EXPORT_FORMATS)}, got {fmt!r}")
    if is_url(str(out)):
        raise ValueError(f"OUT {shown(str(out))}: an export is written to a local path")
    out = Path(out)
    if out.exists() or out.is_symlink():
        raise ValueError(f"{str(out)!r} already exists: choose a new path (export never overwrites)")
    if not is_url(str(report)) and out.resolve() == Path(report).resolve():
        raise ValueError("the export must not replace the report it reads")
    # An s3:// report is read from a private downloaded copy (tasks.report_query.local_report).
    with local_report(report) as path:
        return _export_local(path, out, fmt)


def _export_local(report: Path, out: Path, fmt: str) -> dict[str, int]:
    import duckdb

    # The export's folder resolved, its own name not: a symbolic link planted at OUT is refused, never followed
    # (tasks.safe_write); DuckDB's allow-lists compare the resolved spelling.
    out.parent.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    with atomic_output(out.parent.resolve() / out.name) as tmp:
        db = tmp if fmt == "duckdb" else tmp.with_name(tmp.name + ".duckdb")
        side_files = tuple(db.with_name(db.name + ext) for ext in DB_SIDE_FILES)
        try:
            # Confined like `gdp sql` (a report is data, not code): the views may read the report's own lake
            # snapshots and nothing else; the only files written are the export's temporaries.
            try:
                con = open_report(report, write_files=(db, *side_files), write_dir=tmp if fmt == "parquet" else None)
            except duckdb.Error as exc:
                raise ValueError(f"cannot open the report {report}: {_one_line(exc)}") from None
            try:
                _copy_report(con, db, tmp if fmt == "parquet" else None, counts)
            finally:
                con.close()
        finally:
            for leftover in side_files if fmt == "duckdb" else (db, *side_files):
                leftover.unlink(missing_ok=True)
    return counts


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _copy_report(con: Any, db: Path, parquet_dir: Path | None, counts: dict[str, int]) -> None:
    """Materialise every view and table of the ATTACHed ``privacy_report`` into the new database ``db`` (then, with
    ``parquet_dir``, EXPORT it there); fills ``counts`` {table: rows}. A view that cannot be read (a crafted view
    naming a file outside the lake) raises ValueError naming it."""
    import duckdb

    con.execute(f"ATTACH {sql_literal(db)} AS dst (STORAGE_VERSION '{STORAGE_VERSION}')")
    objects = con.execute(
        "SELECT view_name, comment FROM duckdb_views() WHERE database_name = 'privacy_report' AND NOT internal "
        "UNION ALL SELECT table_name, comment FROM duckdb_tables() WHERE database_name = 'privacy_report' ORDER BY 1"
    ).fetchall()
    for name, comment in objects:
        try:
            con.execute(f'CREATE TABLE dst.main."{name}" AS SELECT * FROM privacy_report.main."{name}"')
        except duckdb.Error as exc:
            raise ValueError(f"cannot export the report's view {name!r}: {_one_line(exc)}") from None
        if comment:
            con.execute(f'COMMENT ON TABLE dst.main."{name}" IS {sql_literal(comment)}')
        for column, col_comment in con.execute(
            "SELECT column_name, comment FROM duckdb_columns() WHERE database_name = 'privacy_report' "
            "AND table_name = ? AND comment IS NOT NULL",
            [name],
        ).fetchall():
            con.execute(f'COMMENT ON COLUMN dst.main."{name}"."{column}" IS {sql_literal(col_comment)}')
        counts[name] = count_rows(con, f'dst.main."{name}"')
    if "report_info" in counts:
        con.execute("UPDATE dst.main.report_info SET lake = NULL")  # self-contained: no lake behind it
    con.execute("CHECKPOINT dst")
    if parquet_dir is not None:
        con.execute(f"EXPORT DATABASE dst TO {sql_literal(parquet_dir)} (FORMAT parquet, COMPRESSION zstd)")
    con.execute("DETACH dst")
