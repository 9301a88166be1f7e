"""DuckDB connections confined to the files they need, and the SQL spelling helpers every writer and reader shares.

A lake or a report is data, never code: every connection this project opens is confined (:func:`confine`) to the
folders and files its job reads or writes: no other local file, no network, no extension install or load.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from gdpcore._validation import bounded_repr

__all__ = [
    "DB_SIDE_FILES",
    "STORAGE_VERSION",
    "confine",
    "count_rows",
    "lake_connection",
    "memory_bytes",
    "publish_memory_limit",
    "relative_posix",
    "sql_literal",
]

# DuckDB storage format of reports and exports: the oldest duckdb that pyproject.toml allows (>= 1.2) reads it, and
# every newer one does (checked by tests/pipeline/test_portable_report.py with duckdb 1.2.0 in a temporary venv).
STORAGE_VERSION = "v1.2.0"
DB_SIDE_FILES = (".wal", ".wal.checkpoint")  # files DuckDB writes beside a database it checkpoints


_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_UNITS |= {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}

PUBLISH_MEMORY_LIMIT = "1GB"
"""DuckDB's ``memory_limit`` for compacting a lake into its curated snapshot (``$GDP_PUBLISH_MEMORY_LIMIT``
overrides it); past it DuckDB spills to the lake's ``_duckdb_spill`` folder. DuckDB's own default, 80 % of the
machine's memory, let the compaction's deduplicated ``live`` table grow with the lake: peak RSS of the publishing
process 729 MiB at 10^4 cells and 3.7 GiB at 10^5 (13.3 M curve points), 9.5 s; with 1GB, 1.29 GiB at 10^5 in
11.9 s (512MB: 820 MiB, 13.6 s; benchmarks/RESULTS.md, "Scale")."""


def memory_bytes(memory_limit: str, name: str = "--memory-limit") -> int:
    """``memory_limit`` (``512MB``, ``2GiB``) in bytes, read as DuckDB reads it (KB/MB/GB are powers of 1000,
    KiB/MiB/GiB powers of 1024); ValueError naming the setting ``name`` otherwise."""
    m = _MEMORY.match(memory_limit) if isinstance(memory_limit, str) else None
    if m is None:
        raise ValueError(f"{name} must look like 512MB or 2GB, got {bounded_repr(memory_limit)}")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def publish_memory_limit() -> str:
    """The compaction's memory limit: ``$GDP_PUBLISH_MEMORY_LIMIT`` if set and not empty (checked), else
    :data:`PUBLISH_MEMORY_LIMIT`."""
    value = os.environ.get("GDP_PUBLISH_MEMORY_LIMIT") or PUBLISH_MEMORY_LIMIT
    memory_bytes(value, "GDP_PUBLISH_MEMORY_LIMIT")
    return value.strip()


def sql_literal(path: Path | str) -> str:
    """``path`` (or any text) as a single-quoted SQL string literal."""
    return "'" + str(path).replace("'", "''") + "'"


def count_rows(con: Any, relation: str) -> int:
    """``SELECT count(*) FROM relation`` on ``con`` (a table or view name, or a parenthesised query)."""
    return int(con.execute(f"SELECT count(*) FROM {relation}").fetchone()[0])


def relative_posix(path: Path, base: Path) -> str:
    """``path`` relative to ``base`` in POSIX form (the report's views read it against file_search_path)."""
    return Path(os.path.relpath(path, base)).as_posix()


def confine(
    con: Any,
    directories: list[Path],
    paths: list[Path],
    spill: Path | None = None,
    relative_to: Path | None = None,
    urls: list[str] | None = None,
) -> Any:
    """Limit ``con`` to files under ``directories`` and the files ``paths``: no other local file, no network, no
    extension install/load (``enable_external_access = false`` + allow-lists); spill to ``spill`` (a folder inside
    an allowed directory) or nowhere. With ``relative_to`` (the report's folder, which views resolve their
    lake-relative paths against), each directory is allowed in that relative spelling too: DuckDB checks the path
    as a view writes it and again once resolved. ``urls``: object-store folders (``s3://bucket/lake/curated``) read
    through the fsspec file system registered on ``con`` (:mod:`tasks.object_store`), allowed as written."""
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute(f"SET temp_directory = {sql_literal(spill) if spill is not None else repr('')}")
    spellings = [str(d.resolve()) + os.sep for d in directories]
    if relative_to is not None:
        for d in directories:
            spellings += [
                relative_posix(d, relative_to) + "/",
                relative_posix(d.resolve(), relative_to.resolve()) + "/",
            ]
    spellings += [u.rstrip("/") + "/" for u in urls or ()]
    dirs = ", ".join(sql_literal(x) for x in dict.fromkeys(spellings))
    con.execute(f"SET allowed_directories = [{dirs}]")
    if paths:
        con.execute(f"SET allowed_paths = [{', '.join(sql_literal(p) for p in paths)}]")
    con.execute("SET enable_external_access = false")
    return con


def lake_connection(lake: Path, database: Path | None = None, *, threads: int | None = None) -> Any:
    """The publisher's DuckDB connection: files under ``lake`` (and the ``database`` being written) only, within
    :func:`publish_memory_limit`; ``threads``: at most that many of DuckDB's threads (default: one per core)."""
    import duckdb

    con = duckdb.connect(str(database) if database is not None else ":memory:")
    con.execute(f"SET memory_limit = {sql_literal(publish_memory_limit())}")
    if threads is not None:
        con.execute(f"SET threads = {int(threads)}")
    extra = [database, Path(str(database) + ".wal")] if database is not None else []
    return confine(con, [Path(lake)], extra, spill=Path(lake).resolve() / "_duckdb_spill")
