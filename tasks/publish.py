"""Publishing: compact the lake's staging files into curated tables and (re)build the DuckDB report atomically.

The report (``data/reports/privacy.duckdb`` by default) holds *views* over a curated snapshot of the lake plus a
one-row ``report_info`` table. View paths are *relative to the report's folder*: DuckDB resolves them against its
``file_search_path`` setting, which ``gdp sql`` / :func:`query_report` set to the report's folder. A report copied or
moved together with its lake (same relative layout) therefore answers the same queries anywhere; other DuckDB clients
run ``SET file_search_path = '<folder of the report>'`` first. ``gdp export`` (:func:`export_report`) materialises
every view into one self-contained file that needs no lake at all.

File format: the report is written with ``STORAGE_VERSION`` :data:`STORAGE_VERSION`, the format of the oldest duckdb
``pyproject.toml`` allows, so every allowed duckdb opens it (a duckdb 2.0 default file cannot be read by 1.x).

Atomicity: the curated snapshot is written to a fresh content-addressed directory (``curated/<snapshot>/``), the
report to a temporary file next to the target, and the file is then ``os.replace``-d over the old report. A reader
therefore opens either the old report (whose snapshot is kept: the newest few snapshots survive garbage collection)
or the new one, never a half-written one. DuckDB allows one writer process: only this module opens a report
read-write, and it only ever writes a file nobody else has opened yet.

View contract (issue 6): ``cells`` (cell_id, noise_multiplier, sampling_rate, steps, mu, gdp_regret, advantage,
bayes_security, status, ...), ``epsilons(cell_id, delta, epsilon, ...)``, ``curves(cell_id, fpr, fnr, ...)``,
``regrets(cell_id, representation, regret, ...)``, ``axes(cell_id, axis, value, value_text)`` (issue 14: the swept
value of every grid key, for any kind and for compositions, whose parameters have no typed column); every view also has ``spec`` and ``mechanism`` (hive partitions):
(spec, cell_id) identifies a row of ``cells``. Every column is documented in :mod:`tasks.schema` (written into the
file as column comments, rendered into PIPELINE.md).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import os
import re
import shutil
from pathlib import Path
from typing import Any

from tasks.lake import (
    LAKE_SCHEMA_VERSION,
    check_parquet,
    code_version,
    quarantine,
    remove_report_temporaries,
    remove_stale_temporaries,
    tmp_path,
)
from tasks.locks import publish_lock
from tasks.schema import cell_columns

__all__ = [
    "STORAGE_VERSION",
    "PublishResult",
    "VIEWS",
    "export_report",
    "publish_lake",
    "query_report",
    "report_is_current",
]

KEEP_SNAPSHOTS = 3
# DuckDB storage format of reports and exports: the oldest duckdb that pyproject.toml allows (>= 1.2) reads it, and
# every newer one does (checked by tests/pipeline/test_portable_report.py with duckdb 1.2.0 in a temporary venv).
STORAGE_VERSION = "v1.2.0"

# The registry's parameter columns included (tasks.schema.cell_columns): one list for the view and its docs.
_CELL_COLUMNS = ", ".join(cell_columns())

_TABLES: dict[str, str] = {
    "cells": f"SELECT {_CELL_COLUMNS}, spec, mechanism FROM live ORDER BY spec, grid_index",
    "epsilons": (
        "SELECT cell_id, UNNEST(deltas) AS delta, UNNEST(epsilon) AS epsilon, UNNEST(epsilon_lower) AS epsilon_lower, "
        "epsilon_bound AS bound, spec, mechanism FROM live WHERE deltas IS NOT NULL ORDER BY spec, grid_index"
    ),
    "curves": (
        "SELECT cell_id, UNNEST(curve_fpr) AS fpr, UNNEST(curve_fnr) AS fnr, fnr_bound AS bound, spec, mechanism "
        "FROM live WHERE curve_fpr IS NOT NULL ORDER BY spec, grid_index"
    ),
    "regrets": (
        "SELECT cell_id, UNNEST(regret_representation) AS representation, UNNEST(regret_delta) AS delta, "
        "UNNEST(regret) AS regret, UNNEST(regret_bound) AS bound, spec, mechanism FROM live "
        "WHERE regret_representation IS NOT NULL ORDER BY spec, grid_index"
    ),
    # The swept values of every cell, by grid key (a parameter name or a path into a composition's template): the
    # one place every kind's and every composition's swept parameters are queryable, whatever columns `cells` has.
    "axes": (
        "SELECT cell_id, UNNEST(axis_names) AS axis, UNNEST(axis_values) AS value, UNNEST(axis_texts) AS value_text, "
        "spec, mechanism FROM live WHERE axis_names IS NOT NULL ORDER BY spec, grid_index"
    ),
}

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


def _lit(path: Path | str) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def _read(glob: Path | str, partitions: tuple[str, ...] = ("spec", "mechanism")) -> str:
    types = ", ".join(f"'{p}': VARCHAR" for p in partitions)
    return (
        f"read_parquet({_lit(glob)}, hive_partitioning = true, union_by_name = true, "
        f"hive_types = {{{types}}}, hive_types_autocast = false)"
    )


def _parts(table: str) -> tuple[str, ...]:
    return ("spec",) if table in ("runs", "calibrations") else ("spec", "mechanism")


_LAKE_FILES = (
    "staging/spec=*/mechanism=*/chunk-*.parquet",
    "calibrations/spec=*/chunk-*.parquet",
    "members/spec=*/members.parquet",
    "runs/spec=*/run-*.parquet",
    "_calibration/members/spec=*/members.parquet",
    "registry/audits/model=*/version=*/audit-*.parquet",
    "registry/comparisons/cmp-*.parquet",
    "registry/members/registry=*/members.parquet",
)


def quarantine_damaged_files(lake: Path) -> list[str]:
    """Move every lake file whose Parquet footer cannot be read to ``_quarantine/`` (see :func:`tasks.lake.quarantine`)
    so one truncated chunk cannot block the publish of the whole lake; returns the quarantined files (relative)."""
    moved = []
    for pattern in _LAKE_FILES:
        for path in sorted(lake.glob(pattern)):
            why = check_parquet(path)
            if why is not None and path.exists():
                quarantine(lake, path, f"unreadable at publish: {why}")
                moved.append(str(path.relative_to(lake)))
    return moved


def _stat_key(path: Path) -> bytes:
    st = path.stat()
    return f"{st.st_size}:{st.st_mtime_ns}".encode()


def _snapshot_id(lake: Path) -> str:
    """Address of what a publish would read: each staging file's name, size and mtime (a truncated or rewritten file
    changes the id, not only a new name) + the bytes of the small members and runs files."""
    h = hashlib.sha256(f"lake-schema-{LAKE_SCHEMA_VERSION};publisher-{code_version()}".encode())
    for path in sorted(lake.glob("staging/spec=*/mechanism=*/chunk-*.parquet")):
        h.update(str(path.relative_to(lake)).encode())
        h.update(_stat_key(path))
    for path in sorted(lake.glob("calibrations/spec=*/chunk-*.parquet")):
        h.update(str(path.relative_to(lake)).encode())
        h.update(_stat_key(path))
    for path in (
        sorted(lake.glob("members/spec=*/members.parquet"))
        + sorted(lake.glob("runs/spec=*/run-*.parquet"))
        + sorted(lake.glob("_calibration/members/spec=*/members.parquet"))
    ):
        h.update(str(path.relative_to(lake)).encode())
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()[:20]


_DB_SIDE_FILES = (".wal", ".wal.checkpoint")  # files DuckDB writes beside a database it checkpoints


def _confine(
    con: Any, directories: list[Path], paths: list[Path], spill: Path | None = None, relative_to: Path | None = None
) -> Any:
    """Limit ``con`` to files under ``directories`` and the files ``paths``: no other local file, no network, no
    extension install/load (``enable_external_access = false`` + allow-lists); spill to ``spill`` (a folder inside
    an allowed directory) or nowhere. With ``relative_to`` (the report's folder, which views resolve their
    lake-relative paths against), each directory is allowed in that relative spelling too: DuckDB checks the path
    as a view writes it and again once resolved."""
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute(f"SET temp_directory = {_lit(spill) if spill is not None else repr('')}")
    spellings = [str(d.resolve()) + os.sep for d in directories]
    if relative_to is not None:
        for d in directories:
            spellings += [_relative(d, relative_to) + "/", _relative(d.resolve(), relative_to.resolve()) + "/"]
    dirs = ", ".join(_lit(x) for x in dict.fromkeys(spellings))
    con.execute(f"SET allowed_directories = [{dirs}]")
    if paths:
        con.execute(f"SET allowed_paths = [{', '.join(_lit(p) for p in paths)}]")
    con.execute("SET enable_external_access = false")
    return con


def lake_connection(lake: Path, database: Path | None = None) -> Any:
    """The publisher's DuckDB connection: files under ``lake`` (and the ``database`` being written) only."""
    import duckdb

    con = duckdb.connect(str(database) if database is not None else ":memory:")
    extra = [database, Path(str(database) + ".wal")] if database is not None else []
    return _confine(con, [Path(lake)], extra, spill=Path(lake).resolve() / "_duckdb_spill")


def _build_snapshot(lake: Path, snap: Path) -> dict[str, int]:
    from tasks.calibrate import CALIBRATION_SCHEMA
    from tasks.lake import RUNS_SCHEMA, STAGING_SCHEMA

    tmp = tmp_path(snap)
    con = lake_connection(lake)
    # Replacement scans of Python variables are off on a confined connection: register the empty tables by name
    # (before any query: DuckDB refuses a register while a result is pending).
    con.register("empty", STAGING_SCHEMA.empty_table())
    con.register("runs_empty", RUNS_SCHEMA.empty_table())
    con.register("cal_empty", CALIBRATION_SCHEMA.empty_table())
    try:
        has_staging = any(lake.glob("staging/spec=*/mechanism=*/chunk-*.parquet"))
        has_members = any(lake.glob("members/spec=*/members.parquet"))
        if has_staging and has_members:
            members = _read(lake / "members" / "**" / "*.parquet", ("spec",))
            # Members written before the axis columns existed have none (the next sweep of the spec adds them).
            have = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {members}").fetchall()}
            axis_cols = ", ".join(
                f"m.{c}" if c in have else f"NULL::{t} AS {c}"
                for c, t in (("axis_names", "VARCHAR[]"), ("axis_values", "DOUBLE[]"), ("axis_texts", "VARCHAR[]"))
            )
            con.execute(
                f"""CREATE TEMP TABLE live AS
                SELECT s.*, m.grid_index, {axis_cols} FROM {_read(lake / "staging" / "**" / "*.parquet")} s
                JOIN {members} m
                  ON s.spec = m.spec AND s.cell_id = m.cell_id AND s.eval_key = m.eval_key
                QUALIFY row_number() OVER (PARTITION BY s.spec, s.cell_id ORDER BY s.computed_at DESC, s.chunk_key) = 1"""
            )
        else:  # nothing published yet: an empty table with the staging schema
            from tasks.lake import STAGING_SCHEMA

            con.execute(
                "CREATE TEMP TABLE live AS SELECT *, NULL::BIGINT AS grid_index, NULL::VARCHAR[] AS axis_names, "
                "NULL::DOUBLE[] AS axis_values, NULL::VARCHAR[] AS axis_texts, NULL::VARCHAR AS spec, "
                "NULL::VARCHAR AS mechanism FROM empty"
            )
        kv = (
            f"KV_METADATA {{'gdp.lake_schema_version': '{LAKE_SCHEMA_VERSION}', "
            f"'gdp.publisher_code_version': '{code_version()}'}}"
        )
        counts: dict[str, int] = {}
        for name, select in _TABLES.items():
            out = tmp / name
            out.mkdir(parents=True)
            counts[name] = con.execute(f"SELECT count(*) FROM ({select})").fetchone()[0]
            if counts[name]:
                con.execute(
                    f"COPY ({select}) TO {_lit(out)} (FORMAT parquet, PARTITION_BY (spec, mechanism), "
                    f"COMPRESSION zstd, FILENAME_PATTERN 'part-{{i}}', {kv})"
                )
            # A zero-row file keeps the view's glob and schema valid even when the table is empty.
            empty_dir = out / "spec=__empty__" / "mechanism=__empty__"
            empty_dir.mkdir(parents=True)
            con.execute(
                f"COPY (SELECT * EXCLUDE (spec, mechanism) FROM ({select}) LIMIT 0) TO "
                f"{_lit(empty_dir / 'empty.parquet')} (FORMAT parquet, {kv})"
            )
        runs_out = tmp / "runs" / "spec=__empty__"
        runs_out.mkdir(parents=True)
        from tasks.lake import RUNS_SCHEMA

        con.execute(f"COPY (SELECT * FROM runs_empty) TO {_lit(runs_out / 'empty.parquet')} (FORMAT parquet)")
        if any(lake.glob("runs/spec=*/run-*.parquet")):
            runs_sel = f"SELECT * FROM {_read(lake / 'runs' / '**' / '*.parquet', ('spec',))}"
            con.execute(
                f"COPY ({runs_sel}) TO {_lit(tmp / 'runs')} (FORMAT parquet, PARTITION_BY (spec), "
                "FILENAME_PATTERN 'part-{i}', OVERWRITE_OR_IGNORE)"
            )
            counts["runs"] = con.execute(f"SELECT count(*) FROM ({runs_sel})").fetchone()[0]
        else:
            counts["runs"] = 0
        counts["calibrations"] = _build_calibrations(con, lake, tmp / "calibrations", kv)
        (tmp / "_SUCCESS").write_text(dt.datetime.now(dt.UTC).isoformat())
        os.replace(tmp, snap)  # a directory rename: the snapshot appears complete or not at all
    finally:
        con.close()
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return counts


def _build_calibrations(con: Any, lake: Path, out: Path, kv: str) -> int:
    """``calibrations``: each calibration spec's current (sampling_rate, steps) cells (see tasks.calibrate)."""

    empty = out / "spec=__empty__"
    empty.mkdir(parents=True)
    con.execute(
        f"COPY (SELECT *, NULL::BIGINT AS grid_index FROM cal_empty) TO {_lit(empty / 'empty.parquet')} "
        f"(FORMAT parquet, {kv})"
    )
    members = lake / "_calibration" / "members"
    if not (any(lake.glob("calibrations/spec=*/chunk-*.parquet")) and any(members.glob("spec=*/members.parquet"))):
        return 0
    select = (
        f"SELECT c.*, m.grid_index FROM {_read(lake / 'calibrations' / '**' / '*.parquet', ('spec',))} c "
        f"JOIN {_read(members / '**' / '*.parquet', ('spec',))} m "
        "ON c.spec = m.spec AND c.cell_id = m.cell_id AND c.eval_key = m.eval_key "
        "QUALIFY row_number() OVER (PARTITION BY c.spec, c.cell_id ORDER BY c.computed_at DESC) = 1 "
        "ORDER BY c.spec, m.grid_index"
    )
    n = con.execute(f"SELECT count(*) FROM ({select})").fetchone()[0]
    if n:
        con.execute(
            f"COPY ({select}) TO {_lit(out)} (FORMAT parquet, PARTITION_BY (spec), COMPRESSION zstd, "
            f"FILENAME_PATTERN 'part-{{i}}', OVERWRITE_OR_IGNORE, {kv})"
        )
    return n


def _snapshot_counts(snap: Path) -> dict[str, int]:
    con = lake_connection(snap)
    try:
        return {
            name: con.execute(
                f"SELECT count(*) FROM {_read(snap / name / '**' / '*.parquet', _parts(name))}"
            ).fetchone()[0]
            for name in (*_TABLES, "runs", "calibrations")
        }
    finally:
        con.close()


def _relative(path: Path, base: Path) -> str:
    """``path`` relative to ``base`` in POSIX form (the report's views read it against file_search_path)."""
    return Path(os.path.relpath(path, base)).as_posix()


def _comment_columns(con: Any, name: str) -> None:
    """COMMENT ON every column of view/table ``name`` from tasks.schema (the one documented schema)."""
    from tasks.schema import COLUMN_DOCS

    docs = COLUMN_DOCS.get(name, {})
    columns = [r[0] for r in con.execute(f"SELECT * FROM {name} LIMIT 0").description]
    for column in columns:
        if column in docs:
            con.execute(f"COMMENT ON COLUMN {name}.{column} IS {_lit(docs[column])}")


def _write_report(report: Path, lake: Path, snap: Path, counts: dict[str, int], published_at: str) -> None:
    report.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_path(report)
    try:
        _fill_report(tmp, report.parent, lake, snap, counts, published_at)
        os.replace(tmp, report)
    finally:  # also when building failed (a full disk): no .tmp-* or .wal is left behind
        for leftover in (tmp, *(tmp.with_name(tmp.name + ext) for ext in _DB_SIDE_FILES)):
            leftover.unlink(missing_ok=True)


def _fill_report(tmp: Path, base: Path, lake: Path, snap: Path, counts: dict[str, int], published_at: str) -> None:
    import json

    import duckdb

    con = duckdb.connect()
    # Views name paths relative to the report's folder; DuckDB binds them against file_search_path (set before the
    # connection is confined to the lake and the report being written).
    con.execute(f"SET file_search_path = {_lit(base.resolve())}")
    _confine(
        con,
        [lake],
        [tmp, *(tmp.with_name(tmp.name + ext) for ext in _DB_SIDE_FILES)],
        spill=lake.resolve() / "_duckdb_spill",
        relative_to=base,
    )
    try:
        con.execute(f"ATTACH {_lit(tmp)} AS new_report (STORAGE_VERSION '{STORAGE_VERSION}')")
        con.execute("USE new_report")
        # Views name paths relative to the report's folder; DuckDB binds them against file_search_path.
        con.execute(f"SET file_search_path = {_lit(base)}")
        for name in (*_TABLES, "runs", "calibrations"):
            glob = _relative(snap / name, base) + "/**/*.parquet"
            con.execute(f"CREATE VIEW {name} AS SELECT * FROM {_read(glob, _parts(name))}")
            con.execute(f"COMMENT ON VIEW {name} IS {_lit(VIEWS[name])}")
            _comment_columns(con, name)
        # Registry audits (issue 7): models, model_privacy, model_comparisons over a fixed registry snapshot.
        from tasks.audit import registry_views

        for name, (select, comment) in registry_views(lake, relative_to=base).items():
            con.execute(f"CREATE VIEW {name} AS {select}")
            con.execute(f"COMMENT ON VIEW {name} IS {_lit(comment)}")
            _comment_columns(con, name)
            counts[name] = con.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
        con.execute(
            "CREATE TABLE report_info AS SELECT ?::TIMESTAMPTZ AS published_at, ? AS lake, ? AS snapshot, "
            "? AS lake_schema_version, ? AS publisher_code_version, ?::JSON AS row_counts, ? AS storage_version",
            [
                published_at,
                _relative(lake, base),
                snap.name,
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
        con.execute("CHECKPOINT new_report")
        con.execute("USE memory")
        con.execute("DETACH new_report")
    finally:
        con.close()


def _gc_snapshots(curated: Path, keep: Path) -> list[str]:
    """Keep the newest KEEP_SNAPSHOTS complete snapshots (and ``keep``); remove older ones and stray temporaries."""
    removed = []
    snaps = sorted(
        (p for p in curated.iterdir() if p.is_dir() and (p / "_SUCCESS").exists()),
        key=lambda p: (p / "_SUCCESS").stat().st_mtime,
        reverse=True,
    )
    for old in snaps[KEEP_SNAPSHOTS:]:
        if old != keep:
            shutil.rmtree(old, ignore_errors=True)
            removed.append(old.name)
    remove_stale_temporaries(curated, recursive=False)  # snapshots of publishers that died mid-build
    return removed


def publish_lake(lake: str | Path, report: str | Path, *, lock_timeout: float | None = None) -> PublishResult:
    """Compact ``lake`` into a curated snapshot (reused if nothing changed) and atomically replace ``report``.

    One publisher per lake at a time (:func:`tasks.locks.publish_lock`; a second one waits). Files that cannot be
    read are quarantined first, and only temporaries of dead writers are removed."""
    lake = Path(lake).resolve()
    report = Path(report).resolve()
    check_writable(lake, "lake")
    check_writable(report.parent, "report folder")
    with publish_lock(lake, timeout=lock_timeout):
        return _publish_locked(lake, report)


def check_writable(folder: Path, what: str) -> None:
    """Fail fast, naming the folder, when it cannot be created or written (read-only mount, permissions, full disk
    of inodes): the alternative was a DuckDB traceback after half a minute of retries."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = tmp_path(folder / ".write-probe")
        probe.write_bytes(b"")
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
    snap = curated / _snapshot_id(lake)
    reused = (snap / "_SUCCESS").exists()
    if reused:
        counts = _snapshot_counts(snap)
        os.utime(snap / "_SUCCESS")  # most recently used: survives GC
    else:
        counts = _build_snapshot(lake, snap)
    published_at = dt.datetime.now(dt.UTC).isoformat()
    _write_report(report, lake, snap, counts, published_at)
    _gc_snapshots(curated, keep=snap)
    return PublishResult(str(report), snap.name, reused, counts, published_at)


def report_is_current(lake: str | Path, report: str | Path) -> bool:
    """True when ``report`` was published from exactly the lake content a publish would read now, by this code
    (then publishing again would only rewrite the same report)."""
    lake, report = Path(lake).resolve(), Path(report).resolve()
    if not report.exists() or not lake.exists():
        return False
    snap = _snapshot_id(lake)
    if not (lake / "curated" / snap / "_SUCCESS").exists():
        return False
    try:
        _, rows = query_report(report, "SELECT snapshot, publisher_code_version, lake FROM report_info")
    except ValueError:
        return False
    return rows == [(snap, code_version(), _relative(lake, report.parent))]


# -- read-only queries ----------------------------------------------------------------------------------------------
_ALLOWED_STATEMENTS = ("SELECT", "EXPLAIN")
_LEADING_COMMENTS = re.compile(r"(?:\s+|--[^\n]*(?:\n|\Z)|/\*.*?\*/)*", re.DOTALL)


def _explain_of_a_select(con: Any, sql: str) -> str:
    """``EXPLAIN ANALYZE`` *executes* the statement it explains (``EXPLAIN ANALYZE COPY ... TO 'file'`` writes the
    file). Return ``EXPLAIN [ANALYZE] <inner>`` rebuilt from an inner statement that parses as exactly one SELECT -
    the rebuilt text is what runs, so comment tricks cannot smuggle another statement in - else raise ValueError."""
    import duckdb

    rest = sql[_LEADING_COMMENTS.match(sql).end() :]
    m = re.match(r"EXPLAIN\b", rest, re.IGNORECASE)
    inner, analyze = (rest[m.end() :] if m else ""), ""
    inner = inner[_LEADING_COMMENTS.match(inner).end() :]
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

    con = _confine(duckdb.connect(), [], [report, Path(str(report) + ".wal")])
    try:
        con.execute(f"ATTACH {_lit(report)} AS privacy_report (READ_ONLY)")
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
            con.execute(f"SET memory_limit = {_lit(memory_limit)}")
        if threads is not None:
            con.execute(f"SET threads = {int(threads)}")
        con.execute("SET max_temp_directory_size = '0B'")
        # The views name lake paths relative to the report's folder (see the module docstring).
        con.execute(f"SET file_search_path = {_lit(report.parent)}")
        writable_dirs = [write_dir] if write_dir is not None else []
        _confine(
            con, dirs + writable_dirs, [report, Path(str(report) + ".wal"), *write_files], relative_to=report.parent
        )
        con.execute(f"ATTACH {_lit(report)} AS privacy_report (READ_ONLY)")
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


# -- export ---------------------------------------------------------------------------------------------------------
EXPORT_FORMATS = ("duckdb", "parquet")


def export_report(report: str | Path, out: str | Path, *, fmt: str = "duckdb") -> dict[str, int]:
    """Materialise every view and table of ``report`` into a self-contained copy that needs no lake.

    ``fmt="duckdb"``: one DuckDB file (storage version :data:`STORAGE_VERSION`; tables keep the view and column
    comments); ``fmt="parquet"``: a folder written by DuckDB's ``EXPORT DATABASE`` (one Parquet file per table plus
    ``schema.sql`` / ``load.sql``: ``IMPORT DATABASE 'folder'`` restores it, any Parquet reader reads the files).
    Written aside and renamed into place; ``out`` must not exist. Returns {table: rows}.
    """
    import duckdb

    report, out = Path(report).resolve(), Path(out)
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"format must be one of {', '.join(EXPORT_FORMATS)}, got {fmt!r}")
    if not report.exists():
        raise ValueError(f"report {str(report)!r} does not exist: run 'gdp sweep SPEC' or 'gdp publish' first")
    if out.exists():
        raise ValueError(f"{str(out)!r} already exists: choose a new path (export never overwrites)")
    if out.resolve() == report:
        raise ValueError("the export must not replace the report it reads")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_path(out.resolve())
    db = tmp if fmt == "duckdb" else tmp.with_name(tmp.name + ".duckdb")
    side_files = tuple(db.with_name(db.name + ext) for ext in _DB_SIDE_FILES)
    counts: dict[str, int] = {}
    try:
        # Confined like `gdp sql` (a report is data, not code): the views may read the report's own lake snapshots
        # and nothing else; the only files written are the export's temporaries.
        try:
            con = open_report(report, write_files=(db, *side_files), write_dir=tmp if fmt == "parquet" else None)
        except duckdb.Error as exc:
            raise ValueError(f"cannot open the report {report}: {_one_line(exc)}") from None
        try:
            _copy_report(con, db, tmp if fmt == "parquet" else None, counts)
        finally:
            con.close()
        os.replace(tmp, out)
    finally:
        for leftover in (db, *side_files) if fmt == "parquet" else ():
            leftover.unlink(missing_ok=True)
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            for leftover in (tmp, *(tmp.with_name(tmp.name + ext) for ext in _DB_SIDE_FILES)):
                leftover.unlink(missing_ok=True)
    return counts


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _copy_report(con: Any, db: Path, parquet_dir: Path | None, counts: dict[str, int]) -> None:
    """Materialise every view and table of the ATTACHed ``privacy_report`` into the new database ``db`` (then, with
    ``parquet_dir``, EXPORT it there); fills ``counts`` {table: rows}. A view that cannot be read (a crafted view
    naming a file outside the lake) raises ValueError naming it."""
    import duckdb

    con.execute(f"ATTACH {_lit(db)} AS dst (STORAGE_VERSION '{STORAGE_VERSION}')")
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
            con.execute(f'COMMENT ON TABLE dst.main."{name}" IS {_lit(comment)}')
        for column, col_comment in con.execute(
            "SELECT column_name, comment FROM duckdb_columns() WHERE database_name = 'privacy_report' "
            "AND table_name = ? AND comment IS NOT NULL",
            [name],
        ).fetchall():
            con.execute(f'COMMENT ON COLUMN dst.main."{name}"."{column}" IS {_lit(col_comment)}')
        counts[name] = con.execute(f'SELECT count(*) FROM dst.main."{name}"').fetchone()[0]
    if "report_info" in counts:
        con.execute("UPDATE dst.main.report_info SET lake = NULL")  # self-contained: no lake behind it
    con.execute("CHECKPOINT dst")
    if parquet_dir is not None:
        con.execute(f"EXPORT DATABASE dst TO {_lit(parquet_dir)} (FORMAT parquet, COMPRESSION zstd)")
    con.execute("DETACH dst")
