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
    "TABLES",
    "build_snapshot",
    "gc_snapshots",
    "is_complete",
    "mark_used",
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


def _fill_snapshot(lake: Path, tmp: Path) -> dict[str, int]:
    from tasks.calibrate import CALIBRATION_SCHEMA

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
            members = read_parquet_sql(lake / "members" / "**" / "*.parquet", ("spec",))
            # Members written before the axis columns existed have none (the next sweep of the spec adds them).
            have = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {members}").fetchall()}
            axis_cols = ", ".join(
                f"m.{c}" if c in have else f"NULL::{t} AS {c}"
                for c, t in (("axis_names", "VARCHAR[]"), ("axis_values", "DOUBLE[]"), ("axis_texts", "VARCHAR[]"))
            )
            con.execute(
                f"""CREATE TEMP TABLE live AS
                SELECT s.*, m.grid_index, {axis_cols} FROM {read_parquet_sql(lake / "staging" / "**" / "*.parquet")} s
                JOIN {members} m
                  ON s.spec = m.spec AND s.cell_id = m.cell_id AND s.eval_key = m.eval_key
                QUALIFY row_number() OVER (PARTITION BY s.spec, s.cell_id ORDER BY s.computed_at DESC, s.chunk_key) = 1"""
            )
        else:  # nothing published yet: an empty table with the staging schema
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
        for name, select in TABLES.items():
            out = tmp / name
            out.mkdir(parents=True)
            counts[name] = count_rows(con, f"({select})")
            if counts[name]:
                con.execute(
                    f"COPY ({select}) TO {sql_literal(out)} (FORMAT parquet, PARTITION_BY (spec, mechanism), "
                    f"COMPRESSION zstd, FILENAME_PATTERN 'part-{{i}}', {kv})"
                )
            # A zero-row file keeps the view's glob and schema valid even when the table is empty.
            empty_dir = out / "spec=__empty__" / "mechanism=__empty__"
            empty_dir.mkdir(parents=True)
            con.execute(
                f"COPY (SELECT * EXCLUDE (spec, mechanism) FROM ({select}) LIMIT 0) TO "
                f"{sql_literal(empty_dir / 'empty.parquet')} (FORMAT parquet, {kv})"
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
        counts["calibrations"] = _build_calibrations(con, lake, tmp / "calibrations", kv)
    finally:
        con.close()
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
