"""Publishing: compact the lake's staging files into curated tables and (re)build the DuckDB report atomically.

The report (``data/reports/privacy.duckdb`` by default) holds *views* over a curated snapshot of the lake plus a
one-row ``report_info`` table. View paths are *relative to the report's folder* (:func:`report_path_sql`): with
DuckDB's ``file_search_path`` set (``gdp sql`` / :func:`query_report` set it to the report's folder) they resolve
against it; without it, in a client that opened the report file itself (``duckdb privacy.duckdb``, Python's
``duckdb.connect(path)``, a SQL IDE), against the folder of that file, from any working directory; otherwise a query
fails with one message saying what to run. A report copied or moved together with its lake (same relative layout)
therefore answers the same queries anywhere. ``gdp export`` (:func:`tasks.export.export_report`)
materialises every view into one self-contained file that needs no lake at all. Readers open a report through
:mod:`tasks.report_query` (the read-only, confined sandbox).

File format: the report is written with ``STORAGE_VERSION`` :data:`tasks.duckdb_access.STORAGE_VERSION`, the format of the oldest duckdb
``pyproject.toml`` allows, so every allowed duckdb opens it (a duckdb 2.0 default file cannot be read by 1.x).

Atomicity: the curated snapshot is written to a fresh content-addressed directory (``curated/<snapshot>/``, see
:mod:`tasks.snapshots`), the
report to a temporary file next to the target, and the file is then ``os.replace``-d over the old report. A reader
therefore opens either the old report (whose snapshot is kept: the newest few snapshots survive garbage collection)
or the new one, never a half-written one. DuckDB allows one writer process: only this module opens a report
read-write, and it only ever writes a file nobody else has opened yet.

Object storage (``--lake`` / ``--report s3://...``, :func:`_publish_remote`): the snapshot is uploaded under a fresh
name, ``_SUCCESS`` last; the report's views name it by URL (read through s3fs registered with DuckDB), and an
``s3://`` report is installed by one PUT conditional on the ETag read before the lake was listed. The argument that
this keeps the guarantees above without rename or flock is in :mod:`tasks.object_store`.

View contract: ``cells`` (cell_id, noise_multiplier, sampling_rate, steps, mu, gdp_regret, advantage,
bayes_security, status, ...), ``epsilons(cell_id, delta, epsilon, ...)``, ``curves(cell_id, fpr, fnr, ...)``,
``regrets(cell_id, representation, regret, ...)``, ``axes(cell_id, axis, value, value_text)`` (the swept
value of every grid key, for any kind and for compositions, whose parameters have no typed column); every view also has ``spec`` and ``mechanism`` (hive partitions):
(spec, cell_id) identifies a row of ``cells``. Every column is documented in :mod:`tasks.schema` (written into the
file as column comments, rendered into PIPELINE.md).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from pathlib import Path
from typing import Any

from tasks.duckdb_access import DB_SIDE_FILES, STORAGE_VERSION, confine, count_rows, relative_posix, sql_literal
from tasks.export import export_report
from tasks.lake import LAKE_SCHEMA_VERSION, code_version, remove_report_temporaries, remove_stale_temporaries
from tasks.locks import publish_lock
from tasks.registry_views import registry_views
from tasks.report_query import query_report
from tasks.safe_write import atomic_output, tmp_path
from tasks.snapshots import _CELL_COLUMNS as _CELL_COLUMNS  # tests/test_contract.py checks the cells view's columns
from tasks.snapshots import (
    KEEP_SNAPSHOTS,
    TABLES,
    build_snapshot,
    gc_snapshots,
    is_complete,
    mark_used,
    quarantine_damaged_files,
    read_parquet_sql,
    snapshot_counts,
    snapshot_id,
    table_partitions,
)

__all__ = [
    "STORAGE_VERSION",
    "PublishResult",
    "VIEWS",
    "check_writable",
    "prepare_piece",
    "export_report",
    "publish_lake",
    "query_report",
    "report_is_current",
    "report_path_sql",
]

VIEWS: dict[str, str] = {
    "cells": "One row per grid cell and spec: mechanism parameters, mu (tightest pessimistic mu-GDP), gdp_regret, "
    "advantage, bayes_security, status ('ok' or why not), bound labels and provenance (accountant, discretization, "
    "gdpcore version, run id). Key: (spec, cell_id).",
    "epsilons": "epsilon(delta) per cell for every delta of its spec; bound says upper/exact.",
    "curves": "The pessimistic trade-off curve of each cell: lowest FNR at each FPR of a fixed grid (+ the spec's fprs).",
    "regrets": "Regret of each representation (gdp, epsilon_delta at delta, zcdp, rdp, pure_dp) per cell.",
    "axes": "The swept value of every grid key per cell: axis is a parameter name (flat kinds) or a path into the "
    "spec's mechanism template (compositions: mechanisms[0].noise_multiplier, mechanism.scale, count). "
    "One column per axis: first(value) FILTER (WHERE axis = ...) grouped by cell_id.",
    "calibrations": "calibration_sweep results: smallest noise_multiplier meeting the target per (sampling_rate, "
    "steps); achieved = the metric re-evaluated there (pessimistic accountant); status says when none exists.",
    "runs": "One row per sweep run: spec hash, counts, gdpcore version, task runner, timings.",
}


@dataclasses.dataclass(frozen=True)
class PublishResult:
    report: str
    snapshot: str
    reused_snapshot: bool
    counts: dict[str, int]
    published_at: str


def _comment_columns(con: Any, name: str) -> None:
    """COMMENT ON every column of view/table ``name`` from tasks.schema (the one documented schema)."""
    from tasks.schema import COLUMN_DOCS

    docs = COLUMN_DOCS.get(name, {})
    columns = [
        r[0]
        for r in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE database_name = current_database() "
            "AND schema_name = current_schema() AND table_name = ? ORDER BY column_index",
            [name],
        ).fetchall()
    ]
    comments = [f"COMMENT ON COLUMN {name}.{c} IS {sql_literal(docs[c])}" for c in columns if c in docs]
    if comments:
        con.execute(";\n".join(comments))


@dataclasses.dataclass(frozen=True)
class _Remote:
    """Where the report's views read when the lake is on object storage: the lake's URL and the uploaded snapshot."""

    lake: str
    snapshot: str


def _write_report(
    report: Path, lake: Path, snap: Path, counts: dict[str, int], published_at: str, remote: _Remote | None = None
) -> None:
    report.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(report) as tmp:  # tasks.safe_write: fsynced, renamed into place, a link at report refused
        try:
            _fill_report(tmp, report.parent, lake, snap, counts, published_at, remote)
        finally:  # also when building failed (a full disk): no .tmp-* or .wal is left behind
            for leftover in (tmp.with_name(tmp.name + ext) for ext in DB_SIDE_FILES):
                leftover.unlink(missing_ok=True)


def report_path_sql(rel: str, report_name: str) -> str:
    """The SQL expression a view of report ``report_name`` reads the lake path ``rel`` (relative to the report's
    folder) through. DuckDB resolves a relative path against ``file_search_path``, else the working directory, so a
    report opened from elsewhere failed with ``No files found that match the pattern "../lake/curated/..."``. The
    expression is folded when the view is bound (table-function arguments are constant expressions):

    * ``file_search_path`` set (``gdp sql``, :func:`tasks.report_query.open_report`, a user who ran ``SET``): ``rel``
      as it is, resolved against it;
    * else, when the report is the client's main database: ``rel`` joined to the report's folder, read from
      ``temp_directory``, whose default is ``<database file>.tmp`` (DuckDB's configuration reference, setting
      ``temp_directory``);
    * else (the report ATTACHed to another session, renamed, or ``temp_directory`` set by hand): an error whose one
      message says what to run."""
    if rel.startswith("/") or ":" in rel.split("/", 1)[0]:
        raise ValueError(f"report_path_sql needs a path relative to the report's folder, got {rel!r}")
    tmp = "current_setting('temp_directory')"
    message = (
        "this gdp-audit report reads its lake at " + rel.split("/**", 1)[0] + " relative to the folder of the "
        f"report file: open that file itself as the database, named as published (duckdb {report_name}), or first run "
        "SET file_search_path = '<folder holding the report file>'"
    )
    return (
        f"CASE WHEN current_setting('file_search_path') <> '' THEN {sql_literal(rel)} "
        f"WHEN parse_filename({tmp}) = {sql_literal(report_name + '.tmp')} "
        f"THEN concat_ws('/', nullif(parse_dirpath({tmp}), ''), {sql_literal(rel)}) "
        f"ELSE error({sql_literal(message)}) END"
    )


def _report_name(tmp: Path) -> str:
    """The report's file name from the temporary it is built in (``.<name>.tmp-...``, :func:`tasks.safe_write.tmp_path`)."""
    import re

    m = re.fullmatch(r"\.(.+)\.tmp-[^/]+", tmp.name)
    return m.group(1) if m else tmp.name


def _fill_report(
    tmp: Path,
    base: Path,
    lake: Path,
    snap: Path,
    counts: dict[str, int],
    published_at: str,
    remote: _Remote | None = None,
) -> None:
    import json

    import duckdb

    con = duckdb.connect()
    urls = []
    if remote is not None:  # views read s3:// through s3fs (tasks.object_store), confined to the published folders
        from tasks.object_store import filesystem

        con.register_filesystem(filesystem())
        urls = [f"{remote.lake}/curated/{remote.snapshot}", f"{remote.lake}/registry/published"]
    # Views name paths relative to the report's folder; DuckDB binds them against file_search_path (set before the
    # connection is confined to the lake and the report being written).
    con.execute(f"SET file_search_path = {sql_literal(base.resolve())}")
    confine(
        con,
        [lake],
        [tmp, *(tmp.with_name(tmp.name + ext) for ext in DB_SIDE_FILES)],
        spill=lake.resolve() / "_duckdb_spill",
        relative_to=base,
        urls=urls,
    )
    try:
        con.execute(f"ATTACH {sql_literal(tmp)} AS new_report (STORAGE_VERSION '{STORAGE_VERSION}')")
        con.execute("USE new_report")
        # Views name paths relative to the report's folder; DuckDB binds them against file_search_path.
        con.execute(f"SET file_search_path = {sql_literal(base)}")
        report_name = _report_name(tmp)
        # The catalog in one transaction, the column comments of a view in one call: one commit instead of one per
        # view and per comment (a few hundred statements; publishing a 1000-cell lake took 0.23 s, now 0.15 s).
        con.execute("BEGIN TRANSACTION")
        for name in (*TABLES, "runs", "calibrations"):
            if remote is not None:  # an absolute URL: the same from every machine
                glob = f"{remote.lake}/curated/{remote.snapshot}/{name}/**/*.parquet"
                path = sql_literal(glob)
            else:
                glob = relative_posix(snap / name, base) + "/**/*.parquet"
                path = report_path_sql(glob, report_name)  # resolvable from any client and directory
            con.execute(
                f"CREATE VIEW {name} AS SELECT * FROM {read_parquet_sql(glob, table_partitions(name), path_sql=path)}"
            )
            con.execute(f"COMMENT ON VIEW {name} IS {sql_literal(VIEWS[name])}")
            _comment_columns(con, name)
        # Registry audits: models, model_privacy, model_comparisons over a fixed registry snapshot.
        if remote is not None:
            lake_url = remote.lake
            views = registry_views(lake, relative_to=lake, path_sql=lambda rel: sql_literal(f"{lake_url}/{rel}"))
        else:
            views = registry_views(lake, relative_to=base, path_sql=lambda rel: report_path_sql(rel, report_name))
        for name, (select, comment) in views.items():
            con.execute(f"CREATE VIEW {name} AS {select}")
            con.execute(f"COMMENT ON VIEW {name} IS {sql_literal(comment)}")
            _comment_columns(con, name)
            counts[name] = count_rows(con, name)
        con.execute(
            "CREATE TABLE report_info AS SELECT ?::TIMESTAMPTZ AS published_at, ? AS lake, ? AS snapshot, "
            "? AS lake_schema_version, ? AS publisher_code_version, ?::JSON AS row_counts, ? AS storage_version",
            [
                published_at,
                remote.lake if remote is not None else relative_posix(lake, base),
                remote.snapshot if remote is not None else snap.name,
                LAKE_SCHEMA_VERSION,
                code_version(),
                json.dumps(counts),
                STORAGE_VERSION,
            ],
        )
        con.execute(
            "COMMENT ON TABLE report_info IS 'One row: when and from which lake snapshot the report was published.'"
        )
        _comment_columns(con, "report_info")
        con.execute("COMMIT")
        con.execute("CHECKPOINT new_report")
        con.execute("USE memory")
        con.execute("DETACH new_report")
    finally:
        con.close()


def publish_lake(lake: str | Path, report: str | Path, *, lock_timeout: float | None = None) -> PublishResult:
    """Compact ``lake`` into a curated snapshot (reused if nothing changed) and atomically replace ``report``.

    One publisher per lake at a time (:func:`tasks.locks.publish_lock`; a second one waits). Files that cannot be
    read are quarantined first, and only temporaries of dead writers are removed."""
    from tasks.object_store import is_url

    if is_url(str(lake)) or is_url(str(report)):
        return _publish_remote(str(lake), str(report), lock_timeout)
    lake = Path(lake).resolve()
    report = Path(report).parent.resolve() / Path(report).name  # never resolve the report itself: a link is refused
    check_writable(lake, "lake")
    check_writable(report.parent, "report folder")
    with publish_lock(lake, timeout=lock_timeout):
        return _publish_locked(lake, report)


def prepare_piece(lake: str | Path, rel: str) -> None:
    """Compact the new staging file ``rel`` of the local lake ``lake`` for the next publish now
    (:func:`tasks.snapshots.piece_for`): a sweep calls this for each chunk as soon as its file is in the lake, so
    its publish compacts only what arrived last. Safe beside a running publish: a piece is content-addressed and
    renamed into place whole. On one DuckDB thread: the cores are the workers' while they compute (a 2000-row
    piece: 0.16 s either way, 0.19 s of CPU on two threads against 0.16 s on one)."""
    from tasks.snapshots import piece_for

    root = Path(lake).resolve()
    piece_for(root, root / rel, threads=1)


def check_writable(folder: Path, what: str) -> None:
    """Fail fast, naming the folder, when it cannot be created or written (read-only mount, permissions, full disk
    of inodes): the alternative was a DuckDB traceback after half a minute of retries."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = tmp_path(folder / ".write-probe")  # a fresh name, created without following a link
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        probe.unlink()
    except OSError as exc:
        raise ValueError(f"the {what} {folder} is not writable: {exc.strerror or exc}") from None


def _publish_locked(lake: Path, report: Path) -> PublishResult:
    for sub in ("staging", "members", "runs", "calibrations", "_calibration", "registry"):
        remove_stale_temporaries(lake / sub)
    remove_report_temporaries(report)
    quarantine_damaged_files(lake)
    curated = lake / "curated"
    curated.mkdir(exist_ok=True)
    snap = curated / snapshot_id(lake)
    reused = is_complete(snap)
    if reused:
        counts = snapshot_counts(snap)
        mark_used(snap)
    else:
        counts = build_snapshot(lake, snap)
    published_at = dt.datetime.now(dt.UTC).isoformat()
    _write_report(report, lake, snap, counts, published_at)
    gc_snapshots(curated, keep=snap)
    return PublishResult(str(report), snap.name, reused, counts, published_at)


def report_is_current(lake: str | Path, report: str | Path) -> bool:
    """True when ``report`` was published from exactly the lake content a publish would read now, by this code
    (then publishing again would only rewrite the same report)."""
    from tasks.object_store import is_url

    if is_url(str(lake)) or is_url(str(report)):
        return False  # on object storage a publish is decided by the store (tasks.object_store): always publish
    lake, report = Path(lake).resolve(), Path(report).resolve()
    if not report.exists() or not lake.exists():
        return False
    snap = snapshot_id(lake)
    if not is_complete(lake / "curated" / snap):
        return False
    try:
        _, rows = query_report(report, "SELECT snapshot, publisher_code_version, lake FROM report_info")
    except ValueError:
        return False
    return rows == [(snap, code_version(), relative_posix(lake, report.parent))]


PUBLISH_ATTEMPTS = 5
"""How many times a publish to object storage starts again after another publisher replaced the report first."""


def _publish_remote(lake_location: str, report_location: str, lock_timeout: float | None) -> PublishResult:
    """Publish a lake on object storage (:mod:`tasks.object_store`, whose docstring states the guarantees): pull the
    lake into its local mirror, build or reuse the curated snapshot, upload it under a fresh name, and install the
    report: an ``s3://`` report by a PUT conditional on the ETag read before the lake was listed (retried from a new
    listing when another publisher won), a local report by rename as for a local lake."""
    from tasks import object_store as store

    if not store.is_url(lake_location):
        raise ValueError(
            f"--report {store.parse_url(report_location, '--report')}: a report on object storage needs its lake there "
            "too (--lake s3://...): a reader elsewhere could not read a local lake"
        )
    lake_url = store.parse_url(lake_location, "--lake")
    report_url = store.parse_url(report_location, "--report") if store.is_url(report_location) else None
    local_report = None
    if report_url is None:
        local_report = Path(report_location).parent.resolve() / Path(report_location).name
        check_writable(local_report.parent, "report folder")
    mirror = store.mirror_root(lake_url)
    check_writable(mirror, "lake cache (GDP_CACHE)")
    with publish_lock(mirror, timeout=lock_timeout):  # one publisher per machine; the ETag check covers the rest
        for _ in range(PUBLISH_ATTEMPTS):
            before = store.head(report_url, "--report") if report_url is not None else None
            result = _publish_remote_once(lake_url, mirror, report_url, local_report, before)
            if result is not None:
                return result
    raise ValueError(
        f"--report {report_url}: other publishers replaced the report {PUBLISH_ATTEMPTS} times while this one "
        "built it; run again"
    )


def _publish_remote_once(
    lake_url: Any, mirror: Path, report_url: Any, local_report: Path | None, before: Any
) -> PublishResult | None:
    """One attempt of :func:`_publish_remote`; None when the report's conditional PUT lost to another publisher."""
    import tempfile

    from tasks import object_store as store

    store.sync(lake_url, mirror, store.LAKE_PREFIXES)
    for sub in ("staging", "members", "runs", "calibrations", "_calibration", "registry"):
        remove_stale_temporaries(mirror / sub)
    quarantine_damaged_files(mirror)  # in the mirror: a damaged object is downloaded again, never published
    (mirror / "curated").mkdir(exist_ok=True)
    sid = snapshot_id(mirror)
    found = store.find_snapshot(lake_url, sid)
    reused = found is not None and store.renew_snapshot(lake_url, found[0], found[1], found[2])
    if found is not None and reused:
        name, counts = found[0], {k: int(v) for k, v in found[2]["counts"].items()}
    else:
        local_snap = mirror / "curated" / sid
        counts = snapshot_counts(local_snap) if is_complete(local_snap) else build_snapshot(mirror, local_snap)
        name = store.upload_snapshot(lake_url, local_snap, sid, counts)
    registry_views(mirror)  # build (or reuse) the registry snapshot in the mirror, then upload it before views bind
    store.upload_tree(lake_url, mirror, mirror / "registry" / "published")
    published_at = dt.datetime.now(dt.UTC).isoformat()
    remote = _Remote(str(lake_url), name)
    snap = mirror / "curated" / sid
    if local_report is not None:
        _write_report(local_report, mirror, snap, dict(counts), published_at, remote)
        shown = str(local_report)
    else:
        with tempfile.TemporaryDirectory(prefix="gdp-publish-") as tmp:
            built = Path(tmp) / report_url.key.rsplit("/", 1)[-1]
            _write_report(built, mirror, snap, dict(counts), published_at, remote)
            if not store.put_if_match(report_url, built.read_bytes(), before.etag if before else None, "--report"):
                return None  # another publisher installed a report after we read its ETag: start again
        shown = str(report_url)
    if not store.snapshot_exists(lake_url, name):  # collected while we published (tasks.object_store): again
        return None
    store.gc_snapshots(lake_url, keep=name, n=KEEP_SNAPSHOTS)
    gc_snapshots(mirror / "curated", keep=snap)
    return PublishResult(shown, name, bool(reused), counts, published_at)
