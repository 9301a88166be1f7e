"""The read-only query sandbox: every reader of a report (``gdp sql``, ``gdp export``, plots, cards) opens it here.

A report is data, not code: someone may share a crafted ``.duckdb`` file whose views name other local files. Every
reader opens the report through :func:`open_report`, the one confinement policy: ATTACHed read-only, the connection
may read the report and its own lake's published snapshots and nothing else, no network, no extensions.
:func:`query_report` adds the statement checks, the locked configuration and the time and memory limits.

View paths are relative to the report's folder: :func:`open_report` sets ``file_search_path`` to it, so a report
moved together with its lake answers the same queries (see :mod:`tasks.publish`).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from gdpcore._validation import bounded_repr
from tasks.duckdb_access import confine, memory_bytes, sql_literal

__all__ = [
    "SQL_MEMORY_LIMIT",
    "SQL_PROCESS_SLACK",
    "SQL_THREADS",
    "SQL_TIMEOUT_SECONDS",
    "check_query_limits",
    "limit_address_space",
    "local_report",
    "memory_bytes",
    "open_report",
    "query_report",
    "read_only_statement",
    "run_bounded",
    "short_error",
]

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


def read_only_statement(sql: str, con: Any = None) -> str:
    """The statement to run for ``sql`` if it is exactly one SELECT (or EXPLAIN of one SELECT), else ValueError.
    Parsing only (nothing runs): ``gdp sql`` checks in its own process before it starts the query's, and the query's
    process checks again on the connection it runs on (``con``; a bare in-memory one when None)."""
    import duckdb

    own = con is None
    con = confine(duckdb.connect(), [], []) if own else con
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
        return _explain_of_a_select(con, sql) if kind == "EXPLAIN" else sql
    finally:
        if own:
            con.close()


SQL_TIMEOUT_SECONDS = 60.0
SQL_MEMORY_LIMIT = "1GB"
SQL_THREADS = 2
# What the query's process may allocate beyond --memory-limit (address space, see limit_address_space): DuckDB's
# own limit covers its buffer pool, not large vectors (list(range(1e9)) asked for one 8 GiB block past it) nor the
# result rows as Python objects and the formatted output; those share this allowance.
SQL_PROCESS_SLACK = 128 * 2**20
SQL_KILL_GRACE_SECONDS = 2.0  # after --timeout, the time DuckDB's interrupt has before the process is killed
SQL_STARTUP_SECONDS = 30.0  # interpreter start + opening the report, before the --timeout clock starts


def check_query_limits(timeout: Any = None, memory_limit: Any = None, threads: Any = None) -> None:
    """The one check of ``--timeout``, ``--memory-limit`` and ``--threads`` (one line naming the option); ``None``
    is not checked (the caller's default applies)."""
    ok_timeout = isinstance(timeout, int | float) and not isinstance(timeout, bool) and 0 < timeout < 1e6
    if timeout is not None and not ok_timeout:
        raise ValueError(f"--timeout must be a number of seconds > 0, got {bounded_repr(timeout)}")
    if memory_limit is not None:
        memory_bytes(memory_limit)
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"--threads must be an integer >= 1, got {bounded_repr(threads)}")


def _address_space() -> int:
    """The current process's virtual size in bytes (Linux ``/proc/self/statm``)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def limit_address_space(memory_limit: str) -> int | None:
    """Cap this process's address space (``RLIMIT_AS``, soft and hard) at its current size + ``memory_limit`` +
    :data:`SQL_PROCESS_SLACK` and return the cap. Called once a query's connection is open, right before it runs:
    from then on an allocation past the cap fails (DuckDB raises its Out of Memory error, Python a MemoryError)
    instead of growing the machine's memory - ``SET memory_limit`` alone did not hold for one huge vector.
    Only for a process that runs nothing else (the child of :func:`run_bounded`): the cap cannot be raised again.
    Where the size cannot be read (no ``/proc``) nothing is capped and None is returned: the watchdog still bounds
    the time."""
    import resource

    try:
        cap = _address_space() + memory_bytes(memory_limit) + SQL_PROCESS_SLACK
    except OSError:
        return None
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    return cap


def _report_lake(report: Path) -> Path | str | None:
    """The lake the report's views read (``report_info.lake``; a relative value is relative to the report's folder,
    an ``s3://`` value is a lake on object storage), read through a connection that may touch the report file and
    nothing else."""
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
    from tasks.object_store import is_url, parse_url

    if is_url(row[0]):
        try:
            return str(parse_url(row[0], "the report's lake"))
        except ValueError:
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

    check_query_limits(memory_limit=memory_limit, threads=threads)
    lake = _report_lake(report)
    dirs, urls = [], []
    if isinstance(lake, str):  # on object storage: read through s3fs (tasks.object_store), no local lake
        urls = [f"{lake}/curated", f"{lake}/registry/published"]
    elif lake is not None:
        dirs = [lake / "curated", lake / "registry" / "published"]
    for d in dirs:
        _check_no_links(d)
    con = duckdb.connect()
    try:
        if urls:
            from tasks.object_store import filesystem

            con.register_filesystem(filesystem())
        if memory_limit is not None:
            con.execute(f"SET memory_limit = {sql_literal(memory_limit)}")
        if threads is not None:
            con.execute(f"SET threads = {int(threads)}")
        con.execute("SET max_temp_directory_size = '0B'")
        # The views name lake paths relative to the report's folder (see the module docstring).
        con.execute(f"SET file_search_path = {sql_literal(report.parent)}")
        writable_dirs = [write_dir] if write_dir is not None else []
        confine(
            con,
            dirs + writable_dirs,
            [report, Path(str(report) + ".wal"), *write_files],
            relative_to=report.parent,
            urls=urls,
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
    on_start: Callable[[], object] | None = None,
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run one read-only query against ``report``; anything but SELECT/EXPLAIN (incl. COPY, ATTACH, SET) is refused.

    Defence in depth: the statement type is checked before execution, the database is ATTACHed ``READ_ONLY``, the
    connection can read only the report and its lake's published snapshots (a report is data, not code: a shared
    report cannot make ``gdp sql`` read other files), the configuration is locked, and the query is interrupted
    after ``timeout`` seconds and bounded to ``memory_limit`` and ``threads``. DuckDB's interrupt and memory limit
    do not hold for every query (one huge vector is neither interrupted nor counted): ``gdp sql`` runs this in a
    child process bounded as a whole (:func:`run_bounded`), whose ``on_start`` (called once the statement is
    checked, right before it runs) caps the child's memory and starts the parent's clock.
    """
    check_query_limits(timeout, memory_limit, threads)
    with local_report(report) as path:
        return _query_local(path, sql, timeout, memory_limit, threads, on_start)


@contextlib.contextmanager
def local_report(report: str | Path) -> Iterator[Path]:
    """The report file to open: ``report`` itself, or for an ``s3://`` report a private copy downloaded for the
    ``with`` block and removed after it (:func:`tasks.object_store.fetch_report`). ValueError when there is none."""
    from tasks.object_store import discard_report_copy, fetch_report, is_url

    if is_url(str(report)):
        path = fetch_report(str(report))
        try:
            yield path
        finally:
            discard_report_copy(path)
        return
    path = Path(report).resolve()
    if not path.exists():
        raise ValueError(f"report {str(path)!r} does not exist: run 'gdp sweep SPEC' or 'gdp publish' first")
    yield path


def _query_local(
    report: Path,
    sql: str,
    timeout: float,
    memory_limit: str,
    threads: int,
    on_start: Callable[[], object] | None,
) -> tuple[list[str], list[tuple[Any, ...]]]:
    import threading

    import duckdb

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
        sql = read_only_statement(sql, con)
        con.execute("SET lock_configuration = true")
        if on_start is not None:
            on_start()
        timer.start()
        try:
            cur = con.execute(sql)
            columns = [d[0] for d in cur.description or []]
            rows = cur.fetchall()
        except duckdb.InterruptException:
            raise ValueError(f"query interrupted after the {timeout:g} s time limit (--timeout)") from None
        except duckdb.OutOfMemoryException as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ValueError(f"query exceeded the memory limit {memory_limit} (--memory-limit): {first}") from None
        except MemoryError:
            raise ValueError(f"query result exceeded the memory limit {memory_limit} (--memory-limit)") from None
        except duckdb.Error as exc:
            raise ValueError(f"query failed: {exc}") from None
        return columns, rows
    finally:
        timer.cancel()
        con.close()


_STATUS_LINE_BYTES = 1 << 16
_ERROR_CHARS = 2000


def short_error(text: str) -> str:
    """An error text for one line of the terminal: cut to about 2,000 characters, saying how long it was."""
    return text if len(text) <= _ERROR_CHARS else f"{text[:_ERROR_CHARS]}… ({len(text):,} chars)"


def _signal_name(number: int) -> str:
    import signal

    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class _ChildStatus:
    """What the child of :func:`run_bounded` reported on its status pipe, and the watchdog's deadline from it."""

    def __init__(self, timeout: float, now: float) -> None:
        self.timeout = timeout
        self.phase = "start"
        self.deadline: float | None = now + timeout + SQL_STARTUP_SECONDS
        self.error: str | None = None
        self._pending = b""

    def feed(self, data: bytes, now: float) -> None:
        import json

        *lines, self._pending = (self._pending + data).split(b"\n")
        if len(self._pending) > _STATUS_LINE_BYTES:  # a bounded channel: the child sends short lines only
            self._pending, self.error = b"", f"(an error message of more than {_STATUS_LINE_BYTES:,} bytes, not shown)"
        for line in lines:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if not isinstance(msg, dict):
                continue
            if msg.get("phase") == "query":
                self.phase, self.deadline = "query", now + self.timeout + SQL_KILL_GRACE_SECONDS
            elif msg.get("phase") == "output":
                self.phase, self.deadline = "output", None
            elif "error" in msg:
                self.error = str(msg["error"])

    def verdict(self, code: int, killed: bool, memory_limit: str) -> None:
        """Return if the child succeeded, else raise the one-line ValueError that says how it stopped."""
        if killed and self.phase == "query":
            raise ValueError(
                f"query stopped after the {self.timeout:g} s time limit (--timeout): its process was killed"
            )
        if killed:
            raise ValueError(
                f"the query did not start within {self.timeout + SQL_STARTUP_SECONDS:g} s: its process was killed"
            )
        if self.error is not None:
            raise ValueError(short_error(self.error))
        if code < 0:
            raise ValueError(
                f"the query's process was ended by {_signal_name(-code)} (a query outgrowing the memory limit "
                f"{memory_limit} (--memory-limit) can end so)"
            )
        if code != 0:
            raise ValueError(f"the query's process failed with exit code {code} (its error is above)")


def run_bounded(
    argv: Sequence[str],
    request: dict[str, Any],
    *,
    timeout: float,
    memory_limit: str,
    out: TextIO,
    env: dict[str, str] | None = None,
) -> None:
    """Run a query in the child process ``argv`` and relay its output to ``out``; the process as a whole is bounded.

    The child reads ``request`` (JSON) from its stdin, with ``status_fd`` added: the pipe on which it reports, one
    JSON object a line, ``{"phase": "query"}`` when its query starts (after :func:`limit_address_space`),
    ``{"phase": "output"}`` when the result is formatted and about to be written to its stdout, or ``{"error":
    "one line"}`` before it exits 2. Its memory is capped by the address-space limit it sets on itself; its time by
    this watchdog: killed (SIGKILL) when the query has run ``timeout`` + :data:`SQL_KILL_GRACE_SECONDS` seconds
    (DuckDB's own interrupt, at ``timeout``, is not checked inside one huge vector), or when it has not started the
    query within ``timeout`` + :data:`SQL_STARTUP_SECONDS`. Writing the output is not timed (a slow reader is not the
    query's fault). Every way the child can stop ends in a ValueError of one line (or a clean return)."""
    import codecs
    import json
    import selectors
    import subprocess
    import time

    status_r, status_w = os.pipe()
    try:
        proc = subprocess.Popen(
            list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=(status_w,), env=env
        )
    finally:
        os.close(status_w)
    assert proc.stdin is not None and proc.stdout is not None
    status = _ChildStatus(timeout, time.monotonic())
    decode = codecs.getincrementaldecoder("utf-8")("replace").decode
    sel = selectors.DefaultSelector()
    killed = False
    try:
        try:
            proc.stdin.write(json.dumps({**request, "status_fd": status_w}).encode())
            proc.stdin.close()
        except BrokenPipeError:  # the child ended before reading: its exit status says why
            pass
        sel.register(status_r, selectors.EVENT_READ)
        sel.register(proc.stdout.fileno(), selectors.EVENT_READ)
        while sel.get_map() and not killed:
            wait = None if status.deadline is None else max(0.0, status.deadline - time.monotonic())
            events = sel.select(wait)
            if not events and status.deadline is not None and time.monotonic() >= status.deadline:
                proc.kill()
                killed = True
            for key, _ in events:
                data = os.read(key.fd, 1 << 16)
                if not data:
                    sel.unregister(key.fd)
                elif key.fd == status_r:
                    status.feed(data, time.monotonic())
                else:
                    out.write(decode(data))
        out.write(decode(b"", final=True))
        code = proc.wait()
    finally:
        sel.close()
        os.close(status_r)
        if proc.poll() is None:  # interrupted (Ctrl-C, a closed output pipe): never leave the child running
            proc.kill()
            proc.wait()
        proc.stdout.close()
    status.verdict(code, killed, memory_limit)
