"""Lake snapshots: immutable, content-addressed folders the report's views read, and their one lifecycle.

A snapshot is built in a temporary folder next to its final place, marked complete with a ``_SUCCESS`` file and
renamed into place (:func:`write_snapshot`): a reader sees it whole or not at all. A reused snapshot is touched
(:func:`mark_used`); garbage collection (:func:`gc_snapshots`) keeps the :data:`KEEP_SNAPSHOTS` most recently used
ones, so a reader still holding an older report finds its files. Two kinds use this lifecycle: the curated grid
tables (``curated/<snapshot>/``, built here from ``staging/``, ``runs/`` and ``calibrations/``) and the registry
tables (``registry/published/<snapshot>/``, :mod:`tasks.registry_views`).

On object storage (no directory rename) a snapshot built here in the lake's local mirror is uploaded under a name of
its own with its ``_SUCCESS`` object last, and collected after a grace period (:mod:`tasks.object_store`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tasks.duckdb_access import count_rows, lake_connection, sql_literal
from tasks.lake import (
    LAKE_SCHEMA_VERSION,
    RUNS_SCHEMA,
    STAGING_SCHEMA,
    check_parquet,
    code_version,
    quarantine,
    remove_stale_temporaries,
)
from tasks.schema import cell_columns

__all__ = [
    "KEEP_SNAPSHOTS",
    "PIECES",
    "TABLES",
    "build_snapshot",
    "gc_snapshots",
    "is_complete",
    "mark_used",
    "piece_for",
    "quarantine_damaged_files",
    "read_parquet_sql",
    "snapshot_counts",
    "snapshot_id",
    "write_snapshot",
]

KEEP_SNAPSHOTS = 3
_T = TypeVar("_T")


# -- lifecycle ------------------------------------------------------------------------------------------------------
def is_complete(snap: Path) -> bool:
    """True when ``snap`` was renamed into place by :func:`write_snapshot` (its ``_SUCCESS`` marker exists)."""
    return (snap / "_SUCCESS").exists()


def mark_used(snap: Path) -> None:
    """Make the complete snapshot ``snap`` the most recently used one (it survives :func:`gc_snapshots`)."""
    os.utime(snap / "_SUCCESS", follow_symlinks=False)


def write_snapshot(snap: Path, build: Callable[[Path], _T]) -> _T:
    """Run ``build`` on a fresh temporary folder beside ``snap``, mark it complete and rename it to ``snap`` (a
    directory rename: the snapshot appears complete or not at all); a failed build leaves nothing. Returns what
    ``build`` returned."""
    from tasks.safe_write import atomic_output, atomic_write_text

    snap.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(snap) as tmp:  # fsynced, renamed into place; a link planted at snap is refused
        tmp.mkdir()
        result = build(tmp)
        atomic_write_text(tmp / "_SUCCESS", dt.datetime.now(dt.UTC).isoformat())
    return result


def gc_snapshots(folder: Path, keep: Path, n: int = KEEP_SNAPSHOTS) -> list[str]:
    """Keep the ``n`` most recently used complete snapshots in ``folder`` (and ``keep``); remove older ones and the
    temporaries of builders that died; returns the removed snapshots' names."""
    removed = []
    snaps = sorted(
        (p for p in folder.iterdir() if p.is_dir() and is_complete(p)),
        key=lambda p: (p / "_SUCCESS").stat().st_mtime,
        reverse=True,
    )
    for old in snaps[n:]:
        if old != keep:
            shutil.rmtree(old, ignore_errors=True)
            removed.append(old.name)
    remove_stale_temporaries(folder, recursive=False)  # snapshots of builders that died mid-build
    return removed


# -- the curated grid tables ----------------------------------------------------------------------------------------
# The registry's parameter columns included (tasks.schema.cell_columns): one list for the view and its docs.
_CELL_COLUMNS = ", ".join(cell_columns())

TABLES: dict[str, str] = {
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


def read_parquet_sql(
    glob: Path | str, partitions: tuple[str, ...] = ("spec", "mechanism"), *, path_sql: str | None = None
) -> str:
    """``read_parquet(glob)`` with the lake's hive partitions read as VARCHAR (never guessed from the names);
    ``path_sql``: an SQL expression giving the glob instead (a report's portable path, tasks.publish)."""
    types = ", ".join(f"'{p}': VARCHAR" for p in partitions)
    return (
        f"read_parquet({path_sql or sql_literal(glob)}, hive_partitioning = true, union_by_name = true, "
        f"hive_types = {{{types}}}, hive_types_autocast = false)"
    )


def table_partitions(table: str) -> tuple[str, ...]:
    """The hive partition columns of curated table ``table``."""
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


def snapshot_id(lake: Path) -> str:
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


def build_snapshot(lake: Path, snap: Path) -> dict[str, int]:
    """Compact the lake's staging, runs and calibration files into the curated snapshot ``snap`` (atomically, see
    :func:`write_snapshot`); returns {table: rows}."""
    return write_snapshot(snap, lambda tmp: _fill_snapshot(lake, tmp))


# -- pieces: the curated rows of one staging file -------------------------------------------------------------------
# A snapshot's grid tables are the union of its staging files' *pieces*: a staging file's cells that are members of
# its spec (with the members' eval_key), one Parquet file per table, sorted by grid index. A piece depends only on its
# staging file and its spec's members file, so it is built once (content-addressed by both) and a snapshot links it.
# A sweep builds each chunk's piece as soon as the chunk is in the lake, while the workers compute the next ones
# (flows.grid_sweep), so publishing a 10^4-cell sweep compacts only its last chunk (benchmarks/RESULTS.md, "CLI fixed
# costs"). The rows are those of one compaction of the whole lake: a cell in two staging files of its spec keeps
# the row computed last (then the smaller chunk_key), as `_losers` decides over every piece's keys.
PIECES = "_pieces"


def _piece_key(lake: Path, staging_file: Path, members: Path) -> str:
    h = hashlib.sha256(f"piece;lake-schema-{LAKE_SCHEMA_VERSION};publisher-{code_version()}".encode())
    for path in (staging_file, members):
        h.update(str(path.relative_to(lake)).encode())
        h.update(_stat_key(path))  # a rewritten file (members change when the spec's cell set does) is a new piece
    return h.hexdigest()[:20]


def piece_for(lake: Path, staging_file: Path, con: Any = None, *, threads: int | None = None) -> Path | None:
    """The piece of ``staging_file`` (``curated/_pieces/<key>/``), built now unless it exists (on the publisher's
    connection ``con``, or a new one with at most ``threads`` DuckDB threads); None when the file's spec has no
    members file (none of its cells is published)."""
    members = lake / "members" / staging_file.parent.parent.name / "members.parquet"
    if not members.is_file():
        return None
    piece = lake / "curated" / PIECES / _piece_key(lake, staging_file, members)
    if is_complete(piece):
        return piece
    try:
        if con is not None:
            write_snapshot(piece, lambda tmp: _fill_piece(con, staging_file, members, tmp))
        else:
            own = lake_connection(lake, threads=threads)
            try:
                write_snapshot(piece, lambda tmp: _fill_piece(own, staging_file, members, tmp))
            finally:
                own.close()
    except OSError:
        if not is_complete(piece):  # not another builder's rename of the same piece first
            raise
    return piece


def _axis_columns(con: Any, members_sql: str) -> str:
    """Members written before the axis columns existed have none (the next sweep of the spec adds them)."""
    have = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {members_sql}").fetchall()}
    return ", ".join(
        f"m.{c}" if c in have else f"NULL::{t} AS {c}"
        for c, t in (("axis_names", "VARCHAR[]"), ("axis_values", "DOUBLE[]"), ("axis_texts", "VARCHAR[]"))
    )


def _kv() -> str:
    return (
        f"KV_METADATA {{'gdp.lake_schema_version': '{LAKE_SCHEMA_VERSION}', "
        f"'gdp.publisher_code_version': '{code_version()}'}}"
    )


def _fill_piece(con: Any, staging_file: Path, members: Path, tmp: Path) -> None:
    import json

    from tasks.safe_write import atomic_write_text

    members_sql = read_parquet_sql(members, ("spec",))
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE live AS
        SELECT s.*, m.grid_index, {_axis_columns(con, members_sql)} FROM {read_parquet_sql(staging_file)} s
        JOIN {members_sql} m ON s.spec = m.spec AND s.cell_id = m.cell_id AND s.eval_key = m.eval_key
        QUALIFY row_number() OVER (PARTITION BY s.spec, s.cell_id ORDER BY s.computed_at DESC, s.chunk_key) = 1"""
    )
    rows = {}
    for name, select in TABLES.items():
        (rows[name],) = con.execute(
            f"COPY (SELECT * EXCLUDE (spec, mechanism) FROM ({select})) TO {sql_literal(tmp / f'{name}.parquet')} "
            f"(FORMAT parquet, COMPRESSION zstd, {_kv()})"
        ).fetchone()
    con.execute(
        f"COPY (SELECT spec, cell_id, computed_at, chunk_key FROM live) TO {sql_literal(tmp / 'keys.parquet')} "
        "(FORMAT parquet)"
    )
    (grid_min,) = con.execute("SELECT min(grid_index) FROM live").fetchone()
    con.execute("DROP TABLE live")
    atomic_write_text(tmp / "piece.json", json.dumps({"rows": rows, "grid_min": grid_min}))


def _losers(con: Any, pieces: list[Path]) -> dict[str, list[str]]:
    """{piece name: cell_ids whose row another piece replaces}: a cell in two staging files of its spec keeps the
    row computed last, then the one of the smaller chunk_key (the rule of a whole-lake compaction)."""
    if len(pieces) < 2:
        return {}
    files = "[" + ", ".join(sql_literal(p / "keys.parquet") for p in pieces) + "]"
    rows = con.execute(
        f"""SELECT filename, cell_id FROM (
            SELECT filename, cell_id, row_number() OVER (
                PARTITION BY spec, cell_id ORDER BY computed_at DESC, chunk_key) AS rank
            FROM read_parquet({files}, filename = true)) WHERE rank > 1"""
    ).fetchall()
    out: dict[str, list[str]] = {}
    for filename, cell in rows:
        out.setdefault(Path(filename).parent.name, []).append(cell)
    return out


def _link(src: Path, dst: Path) -> None:
    """``dst`` is ``src``'s content: a hard link (both are immutable), or a copy where the file system has none."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def _gc_pieces(lake: Path, used: set[str]) -> None:
    """Remove the pieces this snapshot did not use (of staging files gone or members rewritten); a snapshot keeps
    its own links to the files it uses. A piece a concurrent sweep built meanwhile may go too: built again."""
    folder = lake / "curated" / PIECES
    for piece in folder.iterdir() if folder.is_dir() else ():
        if piece.name not in used and is_complete(piece):
            shutil.rmtree(piece, ignore_errors=True)
    if folder.is_dir():
        remove_stale_temporaries(folder, recursive=False)  # pieces of builders that died mid-build


def _fill_snapshot(lake: Path, tmp: Path) -> dict[str, int]:
    import json

    from tasks.calibrate import CALIBRATION_SCHEMA

    con = lake_connection(lake)
    # Replacement scans of Python variables are off on a confined connection: register the empty tables by name
    # (before any query: DuckDB refuses a register while a result is pending).
    con.register("empty", STAGING_SCHEMA.empty_table())
    con.register("runs_empty", RUNS_SCHEMA.empty_table())
    con.register("cal_empty", CALIBRATION_SCHEMA.empty_table())
    try:
        pieces = [
            (f, p)
            for f in sorted(lake.glob("staging/spec=*/mechanism=*/chunk-*.parquet"))
            if (p := piece_for(lake, f, con)) is not None
        ]
        counts = dict.fromkeys(TABLES, 0)
        losers = _losers(con, [p for _, p in pieces])
        for staging_file, piece in pieces:
            meta = json.loads((piece / "piece.json").read_text())
            partition = Path(staging_file.parent.parent.name) / staging_file.parent.name  # spec=<s>/mechanism=<m>
            name = f"part-{meta['grid_min'] or 0:012d}-{piece.name}.parquet"  # file order = grid order of pieces
            for table in TABLES:
                if not meta["rows"][table]:
                    continue
                out = tmp / table / partition / name
                if piece.name not in losers:
                    _link(piece / f"{table}.parquet", out)
                    counts[table] += meta["rows"][table]
                    continue
                out.parent.mkdir(parents=True, exist_ok=True)
                con.execute(
                    "CREATE OR REPLACE TEMP TABLE replaced AS SELECT UNNEST(?::VARCHAR[]) AS cell_id",
                    [losers[piece.name]],
                )
                (n,) = con.execute(
                    f"COPY (SELECT * FROM read_parquet({sql_literal(piece / f'{table}.parquet')}) "
                    f"WHERE cell_id NOT IN (SELECT cell_id FROM replaced)) TO {sql_literal(out)} "
                    f"(FORMAT parquet, COMPRESSION zstd, {_kv()})"
                ).fetchone()
                counts[table] += n
        # A zero-row file per table keeps the view's glob and schema valid even when the table is empty.
        con.execute(
            "CREATE TEMP TABLE live AS SELECT *, NULL::BIGINT AS grid_index, NULL::VARCHAR[] AS axis_names, "
            "NULL::DOUBLE[] AS axis_values, NULL::VARCHAR[] AS axis_texts, NULL::VARCHAR AS spec, "
            "NULL::VARCHAR AS mechanism FROM empty"
        )
        for table, select in TABLES.items():
            empty_dir = tmp / table / "spec=__empty__" / "mechanism=__empty__"
            empty_dir.mkdir(parents=True)
            con.execute(
                f"COPY (SELECT * EXCLUDE (spec, mechanism) FROM ({select}) LIMIT 0) TO "
                f"{sql_literal(empty_dir / 'empty.parquet')} (FORMAT parquet, {_kv()})"
            )
        runs_out = tmp / "runs" / "spec=__empty__"
        runs_out.mkdir(parents=True)

        con.execute(f"COPY (SELECT * FROM runs_empty) TO {sql_literal(runs_out / 'empty.parquet')} (FORMAT parquet)")
        if any(lake.glob("runs/spec=*/run-*.parquet")):
            runs_sel = f"SELECT * FROM {read_parquet_sql(lake / 'runs' / '**' / '*.parquet', ('spec',))}"
            con.execute(
                f"COPY ({runs_sel}) TO {sql_literal(tmp / 'runs')} (FORMAT parquet, PARTITION_BY (spec), "
                "FILENAME_PATTERN 'part-{i}', OVERWRITE_OR_IGNORE)"
            )
            counts["runs"] = count_rows(con, f"({runs_sel})")
        else:
            counts["runs"] = 0
        counts["calibrations"] = _build_calibrations(con, lake, tmp / "calibrations", _kv())
    finally:
        con.close()
    _gc_pieces(lake, {p.name for _, p in pieces})
    return counts


def _build_calibrations(con: Any, lake: Path, out: Path, kv: str) -> int:
    """``calibrations``: each calibration spec's current (sampling_rate, steps) cells (see tasks.calibrate)."""
    empty = out / "spec=__empty__"
    empty.mkdir(parents=True)
    con.execute(
        f"COPY (SELECT *, NULL::BIGINT AS grid_index FROM cal_empty) TO {sql_literal(empty / 'empty.parquet')} "
        f"(FORMAT parquet, {kv})"
    )
    members = lake / "_calibration" / "members"
    if not (any(lake.glob("calibrations/spec=*/chunk-*.parquet")) and any(members.glob("spec=*/members.parquet"))):
        return 0
    select = (
        f"SELECT c.*, m.grid_index FROM {read_parquet_sql(lake / 'calibrations' / '**' / '*.parquet', ('spec',))} c "
        f"JOIN {read_parquet_sql(members / '**' / '*.parquet', ('spec',))} m "
        "ON c.spec = m.spec AND c.cell_id = m.cell_id AND c.eval_key = m.eval_key "
        "QUALIFY row_number() OVER (PARTITION BY c.spec, c.cell_id ORDER BY c.computed_at DESC) = 1 "
        "ORDER BY c.spec, m.grid_index"
    )
    n = count_rows(con, f"({select})")
    if n:
        con.execute(
            f"COPY ({select}) TO {sql_literal(out)} (FORMAT parquet, PARTITION_BY (spec), COMPRESSION zstd, "
            f"FILENAME_PATTERN 'part-{{i}}', OVERWRITE_OR_IGNORE, {kv})"
        )
    return n


def snapshot_counts(snap: Path) -> dict[str, int]:
    con = lake_connection(snap)
    try:
        return {
            name: count_rows(con, read_parquet_sql(snap / name / "**" / "*.parquet", table_partitions(name)))
            for name in (*TABLES, "runs", "calibrations")
        }
    finally:
        con.close()
