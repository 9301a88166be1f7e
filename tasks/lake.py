"""The results lake: layout, declared Parquet schemas, atomic writes and the index of what is already computed.

Layout under the lake root (``data/lake`` by default, ``--lake`` / ``GDP_LAKE`` to change)::

    staging/spec=<name>/mechanism=<kind>/chunk-<chunk_key>.parquet   one file per evaluated chunk (wide rows, list columns)
    members/spec=<name>/members.parquet                              the cells that make up the spec's current result
    runs/spec=<name>/run-<run_id>.parquet                            one provenance row per sweep run
    curated/<snapshot>/{cells,epsilons,curves,regrets}/spec=<name>/mechanism=<kind>/*.parquet
                                                                     compacted tables the report's views read

Staging files are content-addressed (the chunk key hashes the cells, the evaluation settings and the gdpcore code
version), written to a temporary name and renamed into place, so a reader or a crashed run never sees half a file
and a re-run rewrites nothing. Only the flow process writes the lake: a chunk task returns its rows as Arrow IPC bytes
(:func:`table_to_ipc`) and the flow writes and checks the file (``flows.chunks.collect_chunks``), so task workers
never need to see the lake's folder. Only the publish step reads staging and writes ``curated`` (see
:mod:`tasks.publish`).

``--lake s3://bucket/prefix`` keeps this layout as object keys; the code here then works on a local mirror that
:mod:`tasks.object_store` syncs with conditional writes (content-addressed files are only created, never replaced).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from gdpcore import kinds as _kinds
from tasks.safe_write import HOST_TAG as _HOST_TAG
from tasks.safe_write import atomic_write

__all__ = [
    "LAKE_SCHEMA_VERSION",
    "MEMBERS_SCHEMA",
    "RUNS_SCHEMA",
    "STAGING_SCHEMA",
    "atomic_write_parquet",
    "axis_columns",
    "chunk_path",
    "code_version",
    "computed_cells",
    "default_lake",
    "default_report",
    "read_model_row",
    "remove_spec_temporaries",
    "table_from_ipc",
    "table_to_ipc",
    "write_model_row",
]

LAKE_SCHEMA_VERSION = 1
"""Bumped when a column changes meaning (columns are only ever added; docs/references.md C-2)."""

# The typed parameter columns of every flat mechanism kind, derived from gdpcore's kind registry (a new kind's
# parameters get their columns without an edit here; a name clash is renamed by the kind's `lake_column`).
_ARROW_TYPES = {float: pa.float64(), int: pa.int64(), str: pa.string()}
_PARAM_FIELDS: list[pa.Field] = [pa.field(col, _ARROW_TYPES[typ]) for col, typ in _kinds.param_columns().items()]
PARAM_COLUMNS: tuple[str, ...] = tuple(f.name for f in _PARAM_FIELDS)

STAGING_SCHEMA = pa.schema(
    [
        pa.field("cell_id", pa.string(), nullable=False),  # gdpcore Mechanism.content_hash
        pa.field("eval_key", pa.string(), nullable=False),  # hash of evaluation settings + gdpcore code version
        pa.field("chunk_key", pa.string(), nullable=False),
        pa.field("mechanism_kind", pa.string(), nullable=False),
        pa.field("mechanism_json", pa.string(), nullable=False),
        *_PARAM_FIELDS,
        pa.field("status", pa.string(), nullable=False),
        pa.field("mu", pa.float64()),
        pa.field("mu_lower", pa.float64()),
        pa.field("gdp_regret", pa.float64()),
        pa.field("advantage", pa.float64()),
        pa.field("advantage_lower", pa.float64()),
        pa.field("bayes_security", pa.float64()),
        pa.field("mu_bound", pa.string()),
        pa.field("gdp_regret_bound", pa.string()),
        pa.field("advantage_bound", pa.string()),
        pa.field("bayes_security_bound", pa.string()),
        pa.field("epsilon_bound", pa.string()),
        pa.field("fnr_bound", pa.string()),
        pa.field("deltas", pa.list_(pa.float64())),
        pa.field("epsilon", pa.list_(pa.float64())),
        pa.field("epsilon_lower", pa.list_(pa.float64())),
        pa.field("curve_fpr", pa.list_(pa.float64())),
        pa.field("curve_fnr", pa.list_(pa.float64())),
        pa.field("regret_representation", pa.list_(pa.string())),
        pa.field("regret_delta", pa.list_(pa.float64())),
        pa.field("regret", pa.list_(pa.float64())),
        pa.field("regret_bound", pa.list_(pa.string())),
        pa.field("accountant", pa.string()),
        pa.field("discretization", pa.float64()),
        # The optimistic end's step, the achieved certified gap and its target (gdpcore.engine.certified_gap).
        pa.field("discretization_lower", pa.float64()),
        pa.field("certified_gap", pa.float64()),
        pa.field("gap_tolerance", pa.float64()),
        pa.field("alpha_min", pa.float64()),
        pa.field("engine", pa.string()),
        pa.field("gdpcore_version", pa.string(), nullable=False),
        pa.field("code_version", pa.string(), nullable=False),
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("computed_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)
"""One row per cell of a chunk. The publish step explodes the list columns into ``epsilons``, ``curves``, ``regrets``."""

MEMBERS_SCHEMA = pa.schema(
    [
        pa.field("cell_id", pa.string(), nullable=False),
        pa.field("eval_key", pa.string(), nullable=False),
        pa.field("grid_index", pa.int64(), nullable=False),
        pa.field("spec_hash", pa.string(), nullable=False),
        # The spec's grid keys (parameter names, or paths into a mechanism template such as
        # mechanisms[0].noise_multiplier) and this cell's value of each: numeric (NULL for a text value) and as JSON
        # text. Stored with the members, not the staging rows: a cell computed for one spec keeps its numbers when
        # another spec (or an edited template) reaches it through other axes.
        pa.field("axis_names", pa.list_(pa.string())),
        pa.field("axis_values", pa.list_(pa.float64())),
        pa.field("axis_texts", pa.list_(pa.string())),
    ]
)
"""A spec's current cells. Rewritten (atomically) only when it changes, so an unchanged re-run leaves it byte-equal."""

_MEMBER_KEY_COLUMNS = ("cell_id", "eval_key", "grid_index", "spec_hash")

RUNS_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("flow", pa.string(), nullable=False),
        pa.field("spec_hash", pa.string(), nullable=False),
        pa.field("spec_json", pa.string(), nullable=False),
        pa.field("cells", pa.int64(), nullable=False),
        pa.field("cells_computed", pa.int64(), nullable=False),
        pa.field("chunks_computed", pa.int64(), nullable=False),
        pa.field("chunks_failed", pa.int64(), nullable=False),
        pa.field("gdpcore_version", pa.string(), nullable=False),
        pa.field("code_version", pa.string(), nullable=False),
        pa.field("task_runner", pa.string(), nullable=False),
        pa.field("started_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("finished_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)


def default_lake() -> Path:
    return Path(os.environ.get("GDP_LAKE", "data/lake"))


def default_report() -> Path:
    return Path(os.environ.get("GDP_REPORT", "data/reports/privacy.duckdb"))


_CODE_VERSION: str | None = None


def code_version() -> str:
    """``gdpcore.__version__`` plus a hash of gdpcore's source: any change to the numerics invalidates cached chunks.

    (Prefect's TASK_SOURCE only hashes the task's own lines, and the package version is not bumped on every edit.)
    """
    global _CODE_VERSION
    if _CODE_VERSION is None:
        import gdpcore

        _CODE_VERSION = f"{gdpcore.__version__}+src.{source_hash(Path(gdpcore.__file__).parent)}"
    return _CODE_VERSION


def source_hash(root: Path) -> str:
    """Hash of every ``*.py`` under ``root``, subpackages included (a move into one must still invalidate caches),
    keyed by the path relative to ``root``."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        h.update(path.relative_to(root).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def param_columns(mechanism: Mapping[str, Any]) -> dict[str, Any]:
    """The typed parameter columns of one mechanism dict (absent parameters are null).

    A flat kind fills its own parameters' columns. A composition (any kind nesting mechanisms) fills only
    ``neighbouring`` (the relation all its parts share); its parameters are in ``mechanism_json`` and its swept values
    in the spec's members (the report's ``axes`` view), since one column per parameter cannot say which part it
    belongs to."""
    out: dict[str, Any] = dict.fromkeys(PARAM_COLUMNS)
    spec = _kinds.get(mechanism["kind"])
    if not spec.flat:
        if "neighbouring" in out:
            from gdpcore import mechanism_from_dict

            out["neighbouring"] = mechanism_from_dict(mechanism).neighbouring_relation
        return out
    columns = _kinds.lake_columns(mechanism["kind"])
    for key, value in mechanism.items():
        if key == "kind":
            continue
        out[columns.get(key, key)] = value
    return out


def axis_columns(values: Sequence[Any]) -> tuple[list[float | None], list[str]]:
    """(numeric value or None, JSON text) of each axis value of one cell (members' ``axis_values`` / ``axis_texts``)."""
    numbers = [float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None for v in values]
    return numbers, [json.dumps(v) for v in values]


_COMPONENT = re.compile(r"[A-Za-z0-9=][A-Za-z0-9._=-]{0,199}")


def safe_join(root: str | Path, *parts: str) -> Path:
    """``root / part / ...`` for parts built from names (spec, model, version, keys), refusing anything that is not a
    plain file-name component (no separator, newline, '..', leading dot) or whose resolved path leaves ``root``."""
    for part in parts:
        if not isinstance(part, str) or not _COMPONENT.fullmatch(part):
            raise ValueError(f"refusing {part!r} as a file name (letters, digits, '.', '_', '-', '=' only)")
    root = Path(root)
    path = root.joinpath(*parts)
    base = root.resolve()
    if not path.resolve().is_relative_to(base):
        raise ValueError(f"refusing {path}: it resolves outside {base}")
    return path


def chunk_path(lake: Path, spec_name: str, kind: str, chunk_key: str) -> Path:
    return safe_join(lake, "staging", f"spec={spec_name}", f"mechanism={kind}", f"chunk-{chunk_key}.parquet")


def members_path(lake: Path, spec_name: str) -> Path:
    return safe_join(lake, "members", f"spec={spec_name}", "members.parquet")


def runs_path(lake: Path, spec_name: str, run_id: str) -> Path:
    return safe_join(lake, "runs", f"spec={spec_name}", f"run-{run_id}.parquet")


_TMP = re.compile(r"\.tmp-(?:([A-Za-z0-9]*)-(\d+)-)?[0-9a-f]+(?:\.wal)?$")
STALE_SECONDS = 3600.0
"""A temporary whose writer cannot be checked (another host, an old-style name) is an orphan after this long."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_orphan(tmp: Path, *, now: float | None = None) -> bool:
    """True if ``tmp`` (a name from :func:`tmp_path`) belongs to no live writer: this host's writer pid is gone, or
    (other host / old name / recycled pid) it has not changed for :data:`STALE_SECONDS`."""
    m = _TMP.search(tmp.name)
    if m is None:
        return False
    try:
        age = (time.time() if now is None else now) - tmp.lstat().st_mtime
    except OSError:
        return False
    if age > STALE_SECONDS:
        return True
    host, pid = m.group(1), m.group(2)
    if host == _HOST_TAG and pid is not None:
        return int(pid) != os.getpid() and not _pid_alive(int(pid))
    return False


def atomic_write_parquet(table: pa.Table, path: Path, provenance: Mapping[str, Any]) -> int:
    """Write ``table`` to ``path`` via a hidden temporary file + ``os.replace``; returns the file size.

    The temporary name does not end in ``.parquet``, so lake globs never pick it up; a crash leaves at most a stray
    ``.tmp-*`` file, removed by the next publish or sweep once its writer is gone (:func:`remove_stale_temporaries`).
    Written through :func:`tasks.safe_write.atomic_write` (fsynced, a symbolic link at ``path`` refused).
    """

    meta = dict(table.schema.metadata or {})
    meta[b"gdp.lake_schema_version"] = str(LAKE_SCHEMA_VERSION).encode()
    meta[b"gdp.provenance"] = json.dumps(dict(provenance), sort_keys=True, default=str).encode()
    with_meta = table.replace_schema_metadata(meta)
    atomic_write(path, lambda f: pq.write_table(with_meta, f, compression="zstd"))
    return path.stat().st_size


def table_to_ipc(table: pa.Table) -> bytes:
    """``table`` as one Arrow IPC stream with zstd-compressed buffers: how a chunk's rows travel from the worker that
    computed them to the flow that writes them (the Arrow columnar format, so the flow decodes without a row copy)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def table_from_ipc(data: object, schema: pa.Schema) -> pa.Table:
    """The table :func:`table_to_ipc` encoded; ``ValueError`` unless ``data`` is one IPC stream of exactly ``schema``
    (field names, types and nullability; metadata aside)."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ValueError(f"a chunk result must be Arrow IPC bytes, got {type(data).__name__}")
    try:
        table = pa.ipc.open_stream(pa.py_buffer(data)).read_all()
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(f"a chunk result is not an Arrow IPC stream: {type(exc).__name__}: {exc}"[:300]) from None
    if not table.schema.remove_metadata().equals(schema.remove_metadata()):
        raise ValueError("a chunk result's schema differs from the lake's declared schema")
    return table


def write_model_row(path: Path, row: Mapping[str, Any], schema: pa.Schema) -> Path:
    """One model version's record (an audit or evidence row) as its own file at ``path``, with its model, version
    and run_id as provenance; returns ``path``."""
    atomic_write_parquet(
        pa.Table.from_pylist([dict(row)], schema=schema),
        path,
        {"model": row["model"], "version": row["version"], "run_id": row["run_id"]},
    )
    return path


def read_model_row(path: Path) -> dict[str, Any]:
    """The record :func:`write_model_row` wrote to ``path``."""
    row: dict[str, Any] = pq.read_table(path).to_pylist()[0]
    return row


def remove_stale_temporaries(directory: Path, *, recursive: bool = True) -> int:
    """Delete the ``.*.tmp-*`` files and folders of *dead* writers in ``directory``; returns how many.

    A live writer's temporary (this host, pid alive) is left alone, so a publish never deletes the in-flight files
    of a concurrent sweep or publish."""
    n = 0
    if not directory.exists():
        return n
    candidates = directory.rglob(".*.tmp-*") if recursive else directory.glob(".*.tmp-*")
    for tmp in list(candidates):
        if not is_orphan(tmp):
            continue
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        n += 1
    return n


def remove_spec_temporaries(lake: Path, spec_name: str, report: Path | None = None) -> int:
    """Delete what dead writers left for one spec: ``.*.tmp-*`` under its staging, members and runs directories,
    and ``.<report>.tmp-*`` (+ ``.wal``) next to ``report`` (a publisher killed before its rename); returns how many.

    Called by a sweep before it publishes, so a re-run after a killed run leaves no orphan behind. Only temporaries
    whose writer is gone are touched (:func:`is_orphan`): concurrent writers keep theirs.
    """
    n = sum(remove_stale_temporaries(lake / sub / f"spec={spec_name}") for sub in ("staging", "members", "runs"))
    if report is not None:
        n += remove_report_temporaries(report)
    return n


def remove_report_temporaries(report: Path) -> int:
    n = 0
    if report.parent.exists():
        for tmp in report.parent.glob(f".{report.name}.tmp-*"):
            if is_orphan(tmp):
                tmp.unlink(missing_ok=True)
                n += 1
    return n


# -- content checks and quarantine ----------------------------------------------------------------------------------
def quarantine(lake: Path, path: Path, reason: str) -> Path:
    """Move a damaged lake file out of every glob the pipeline reads, to ``<lake>/_quarantine/<stamp>/<relpath>``,
    with a ``.reason`` note next to it; returns the new path. The cells it held are recomputed by the next sweep."""
    lake = Path(lake)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]
    try:
        rel = path.resolve().relative_to(lake.resolve())
    except ValueError:
        rel = Path(path.name)
    dest = lake / "_quarantine" / stamp / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(path, dest)
    except FileNotFoundError:  # another process quarantined it first
        return dest
    dest.with_name(dest.name + ".reason").write_text(reason + "\n", encoding="utf-8")
    return dest


def check_parquet(path: Path) -> str | None:
    """None if ``path`` is a readable Parquet file (footer, schema and row count consistent), else why not."""
    try:
        meta = pq.read_metadata(path)
        if meta.num_rows < 0 or meta.num_columns < 1:
            return f"implausible metadata ({meta.num_rows} rows, {meta.num_columns} columns)"
    except (OSError, pa.ArrowException, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"[:300]
    return None


def computed_cells(lake: Path, spec_name: str) -> set[tuple[str, str]]:
    """(cell_id, eval_key) pairs already present in the spec's staging files."""
    root = lake / "staging" / f"spec={spec_name}"
    done: set[tuple[str, str]] = set()
    if not root.exists():
        return done
    for path in sorted(root.glob("mechanism=*/chunk-*.parquet")):
        try:  # reads the footer and two whole columns: a truncated or corrupt file fails here
            t = pq.read_table(path, columns=["cell_id", "eval_key"])
            if t.num_rows != pq.read_metadata(path).num_rows:
                raise ValueError("row count differs from the footer")
        except (OSError, pa.ArrowException, ValueError) as exc:
            quarantine(lake, path, f"unreadable staging chunk: {type(exc).__name__}: {exc}"[:500])
            continue  # its cells count as missing: this sweep recomputes them
        done.update(zip(t.column("cell_id").to_pylist(), t.column("eval_key").to_pylist(), strict=True))
    return done


Axes = tuple[Sequence[str], Sequence[Sequence[Any]]]
"""(grid keys, each cell's values of them in the same order): what a spec's members record per cell."""


def _members_table(spec_hash: str, cell_ids: Sequence[str], eval_key: str, axes: Axes | None = None) -> pa.Table:
    n = len(cell_ids)
    cols: dict[str, list[Any]] = {
        "cell_id": list(cell_ids),
        "eval_key": [eval_key] * n,
        "grid_index": list(range(n)),
        "spec_hash": [spec_hash] * n,
        "axis_names": [None] * n,
        "axis_values": [None] * n,
        "axis_texts": [None] * n,
    }
    if axes is not None:
        names, values = axes
        if len(values) != n:
            raise ValueError(f"axes: {len(values)} value rows for {n} cells")
        cols["axis_names"] = [list(names)] * n
        pairs = [axis_columns(v) for v in values]
        cols["axis_values"] = [p[0] for p in pairs]
        cols["axis_texts"] = [p[1] for p in pairs]
    return pa.Table.from_pydict(cols, schema=MEMBERS_SCHEMA)


def members_current(lake: Path, spec_name: str, spec_hash: str, cell_ids: Sequence[str], eval_key: str) -> bool:
    """True when the spec's members file already records exactly these cells (write_members would write nothing).

    The axis columns are not compared: they are a function of the spec, which ``spec_hash`` identifies. A file in an
    older layout (without them) is not current, so the next sweep rewrites it once."""
    path = members_path(lake, spec_name)
    if not path.exists():
        return False
    old = pq.read_table(path)
    table = _members_table(spec_hash, cell_ids, eval_key).select(list(_MEMBER_KEY_COLUMNS))
    return old.schema.remove_metadata().equals(MEMBERS_SCHEMA) and old.select(
        list(_MEMBER_KEY_COLUMNS)
    ).replace_schema_metadata(None).equals(table)


def write_members(
    lake: Path, spec_name: str, spec_hash: str, cell_ids: Sequence[str], eval_key: str, *, axes: Axes | None = None
) -> bool:
    """Record the spec's current cells (and, for grid specs, each cell's swept values); returns False (and writes
    nothing) when they are unchanged."""
    if members_current(lake, spec_name, spec_hash, cell_ids, eval_key):
        return False
    table = _members_table(spec_hash, cell_ids, eval_key, axes)
    atomic_write_parquet(table, members_path(lake, spec_name), {"spec": spec_name, "spec_hash": spec_hash})
    return True


def write_run(lake: Path, spec_name: str, record: Mapping[str, Any]) -> Path:
    """Append one provenance row for a sweep run (its own file: concurrent runs never contend)."""
    table = pa.Table.from_pylist([dict(record)], schema=RUNS_SCHEMA)
    path = runs_path(lake, spec_name, str(record["run_id"]))
    atomic_write_parquet(table, path, {"spec": spec_name})
    return path
