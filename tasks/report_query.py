"""The read-only query sandbox: every reader of a report (``gdp sql``, ``gdp export``, plots, cards) opens it here.

A report is data, not code: someone may share a crafted ``.duckdb`` file whose views name other local files. Every
reader opens the report through :func:`open_report`, the one confinement policy: ATTACHed read-only, the connection
may read the report and its own lake's published snapshots and nothing else, no network, no extensions.
:func:`query_report` adds the statement checks, the locked configuration and the time and memory limits.

View paths are relative to the report's folder: :func:`open_report` sets ``file_search_path`` to it, so a report
moved together with its lake answers the same queries (see :mod:`tasks.publish`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from tasks.duckdb_access import confine, sql_literal

__all__ = ["SQL_MEMORY_LIMIT", "SQL_THREADS", "SQL_TIMEOUT_SECONDS", "open_report", "query_report"]

_ALLOWED_STATEMENTS = ("SELECT", "EXPLAIN")
_LEADING_COMMENTS = re.compile(r"(?:\s+|--[^\n]*(?:\n|\Z)|/\*.*?\*/)*", re.DOTALL)


def _skip_comments(sql: str) -> str:
    """``sql`` without its leading whitespace and comments."""
    m = _LEADING_COMMENTS.match(sql)  # the pattern also matches nothing: never None
    return sql[m.end() :] if m else sql


def _explain_of_a_select(con: Any, sql: str) -> str:
    """``EXPLAIN ANALYZE`` *executes* the statement it explains (``EXPLAIN ANALYZE COPY ... TO 'file'`` writes the
    file). Return ``EXPLAIN [ANALYZE] <inner>`` rebuilt from an inner statement that parses as exactly one SELECT -
    the rebuilt text is what runs, so comment tricks cannot smuggle another statement in - else raise ValueError."""
    import duckdb

    rest = _skip_comments(sql)
    m = re.match(r"EXPLAIN\b", rest, re.IGNORECASE)
    inner, analyze = (rest[m.end() :] if m else ""), ""
    inner = _skip_comments(inner)
    m = re.match(r"ANALY[SZ]E\b", inner, re.IGNORECASE)
    if m:
        inner, analyze = inner[m.end() :], "ANALYZE "
    try:
        kinds = [st.type.name for st in con.extract_statements(inner)] if inner.strip() else []
    except duckdb.Error:
        kinds = []
    if kinds != ["SELECT"]:
        raise ValueError("the report is read-only: EXPLAIN is allowed only for one SELECT query")
    return f"EXPLAIN {analyze}{inner}"


SQL_TIMEOUT_SECONDS = 60.0
SQL_MEMORY_LIMIT = "1GB"
SQL_THREADS = 2
_MEMORY = re.compile(r"^\s*\d+(?:\.\d+)?\s*(?:[KMGT]i?B|B)\s*$", re.IGNORECASE)


def _report_lake(report: Path) -> Path | None:
    """The lake the report's views read (``report_info.lake``; a relative value is relative to the report's folder),
    read through a connection that may touch the report file and nothing else."""
    import duckdb

    con = confine(duckdb.connect(), [], [report, Path(str(report) + ".wal")])
    try:
        con.execute(f"ATTACH {sql_literal(report)} AS privacy_report (READ_ONLY)")
        try:
            row = con.execute("SELECT lake FROM privacy_report.report_info LIMIT 1").fetchone()
        except duckdb.Error:
            return None
    finally:
        con.close()
    if not row or not isinstance(row[0], str) or not row[0] or "\x00" in row[0]:
        return None
    lake = Path(row[0])
    return lake if lake.is_absolute() else (report.parent / lake)


def _check_no_links(root: Path) -> None:
    """Refuse a lake folder holding a symbolic link: DuckDB's allow-list compares paths, so a link inside a crafted
    lake (``curated/x -> /proc/self/environ``) would let the report read what it points at."""
    if root.is_symlink():
        raise ValueError(f"refusing the report's lake: {root} is a symbolic link")
    if not root.exists():
        return
    for folder, subdirs, files in os.walk(root, followlinks=False):
        for name in subdirs + files:
            if os.path.islink(os.path.join(folder, name)):
                raise ValueError(
                    f"refusing the report's lake: {os.path.join(folder, name)} is a symbolic link (a lake holds "
                    "plain files only)"
                )


def open_report(
    report: Path,
    *,
    memory_limit: str | None = None,
    threads: int | None = None,
    write_files: tuple[Path, ...] = (),
    write_dir: Path | None = None,
) -> Any:
    """The one way a report is opened for reading (``gdp sql``, ``gdp export``): a private in-memory DuckDB with
    ``report`` ATTACHed read-only as ``privacy_report``, confined to the report's own lake. Its views may read the
    lake's published snapshots (``curated/``, ``registry/published/``) and no other file (a crafted view with
    ``read_text('/proc/self/environ')`` fails with a Permission Error), no network, no extensions. ``write_files``
    (a database being created and its WAL) and ``write_dir`` (a folder being written) are the only other files it
    may touch; ``memory_limit`` and ``threads`` bound it when given."""
    import duckdb

    if memory_limit is not None and not _MEMORY.match(memory_limit):
        raise ValueError(f"--memory-limit must look like 512MB or 2GB, got {memory_limit!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"--threads must be an integer >= 1, got {threads!r}")
    lake = _report_lake(report)
    dirs = [] if lake is None else [lake / "curated", lake / "registry" / "published"]
    for d in dirs:
        _check_no_links(d)
    con = duckdb.connect()
    try:
        if memory_limit is not None:
            con.execute(f"SET memory_limit = {sql_literal(memory_limit)}")
        if threads is not None:
            con.execute(f"SET threads = {int(threads)}")
        con.execute("SET max_temp_directory_size = '0B'")
        # The views name lake paths relative to the report's folder (see the module docstring).
        con.execute(f"SET file_search_path = {sql_literal(report.parent)}")
        writable_dirs = [write_dir] if write_dir is not None else []
        confine(
            con, dirs + writable_dirs, [report, Path(str(report) + ".wal"), *write_files], relative_to=report.parent
        )
        con.execute(f"ATTACH {sql_literal(report)} AS privacy_report (READ_ONLY)")
        con.execute("USE privacy_report")
    except BaseException:
        con.close()
        raise
    return con


def query_report(
    report: str | Path,
    sql: str,
    *,
    timeout: float = SQL_TIMEOUT_SECONDS,
    memory_limit: str = SQL_MEMORY_LIMIT,
    threads: int = SQL_THREADS,
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run one read-only query against ``report``; anything but SELECT/EXPLAIN (incl. COPY, ATTACH, SET) is refused.

    Defence in depth: the statement type is checked before execution, the database is ATTACHed ``READ_ONLY``, the
    connection can read only the report and its lake's published snapshots (a report is data, not code: a shared
    report cannot make ``gdp sql`` read other files), the configuration is locked, and the query is interrupted
    after ``timeout`` seconds and bounded to ``memory_limit`` and ``threads``.
    """
    import threading

    import duckdb

    report = Path(report).resolve()
    if not report.exists():
        raise ValueError(f"report {str(report)!r} does not exist: run 'gdp sweep SPEC' or 'gdp publish' first")
    if not (isinstance(timeout, int | float) and not isinstance(timeout, bool) and 0 < timeout < 1e6):
        raise ValueError(f"--timeout must be a number of seconds > 0, got {timeout!r}")
    # A private in-memory database with the report ATTACHed read-only, not duckdb.connect(report): connections of one
    # process to one path share a cached DuckDB instance, which keeps reading the file it opened first (overlapping
    # readers in a long-lived process never saw a newer publish) and has one configuration (the lock below made a
    # concurrent query_report fail).
    try:
        con = open_report(report, memory_limit=memory_limit, threads=threads)
    except duckdb.Error as exc:
        raise ValueError(f"cannot open the report {report}: {exc}") from None
    timer = threading.Timer(float(timeout), con.interrupt)
    timer.daemon = True
    try:
        try:
            statements = con.extract_statements(sql)
        except duckdb.Error as exc:
            raise ValueError(f"cannot parse SQL: {exc}") from None
        if len(statements) != 1:
            raise ValueError(f"give exactly one SQL statement, got {len(statements)}")
        kind = statements[0].type.name
        if kind not in _ALLOWED_STATEMENTS:
            raise ValueError(f"the report is read-only: only SELECT queries are allowed, got a {kind} statement")
        if kind == "EXPLAIN":
            sql = _explain_of_a_select(con, sql)
        con.execute("SET lock_configuration = true")
        timer.start()
        try:
            cur = con.execute(sql)
            columns = [d[0] for d in cur.description or []]
            rows = cur.fetchall()
        except duckdb.InterruptException:
            raise ValueError(f"query interrupted after the {timeout:g} s time limit (--timeout)") from None
        except duckdb.OutOfMemoryException as exc:
            raise ValueError(f"query exceeded the memory limit {memory_limit} (--memory-limit): {exc}") from None
        except duckdb.Error as exc:
            raise ValueError(f"query failed: {exc}") from None
        return columns, rows
    finally:
        timer.cancel()
        con.close()
