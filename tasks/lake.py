"""The results lake: layout, declared Parquet schemas, atomic writes and the index of what is already computed.

Layout under the lake root (``data/lake`` by default, ``--lake`` / ``GDP_LAKE`` to change)::

    staging/spec=<name>/mechanism=<kind>/chunk-<chunk_key>.parquet   one file per evaluated chunk (wide rows, list columns)
    members/spec=<name>/members.parquet                              the cells that make up the spec's current result
    runs/spec=<name>/run-<run_id>.parquet                            one provenance row per sweep run
    curated/<snapshot>/{cells,epsilons,curves,regrets}/spec=<name>/mechanism=<kind>/*.parquet
                                                                     compacted tables the report's views read
    _cache/                                                          Prefect's persisted task results (chunk manifests)

Staging files are content-addressed (the chunk key hashes the cells, the evaluation settings and the gdpcore code
version), written to a temporary name and renamed into place, so a reader or a crashed run never sees half a file
and a re-run rewrites nothing. Only the publish step reads staging and writes ``curated`` (see :mod:`tasks.publish`).
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = [
    "LAKE_SCHEMA_VERSION",
    "MEMBERS_SCHEMA",
    "RUNS_SCHEMA",
    "STAGING_SCHEMA",
    "atomic_write_parquet",
    "chunk_path",
    "code_version",
    "computed_cells",
    "default_lake",
    "default_report",
    "remove_spec_temporaries",
]

LAKE_SCHEMA_VERSION = 1
"""Bumped when a column changes meaning (columns are only ever added; see anchors report 2.6)."""

_PARAM_FIELDS: list[pa.Field] = [
    pa.field("noise_multiplier", pa.float64()),
    pa.field("sampling_rate", pa.float64()),
    pa.field("steps", pa.int64()),
    pa.field("sensitivity", pa.float64()),
    pa.field("neighbouring", pa.string()),
    pa.field("scale", pa.float64()),  # laplace
    pa.field("sigma", pa.float64()),  # discrete_gaussian
    pa.field("rr_epsilon", pa.float64()),  # randomized_response's `epsilon` parameter
]
PARAM_COLUMNS: tuple[str, ...] = tuple(f.name for f in _PARAM_FIELDS)
_RENAMED_PARAMS = {"epsilon": "rr_epsilon"}

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
    ]
)
"""A spec's current cells. Rewritten (atomically) only when it changes, so an unchanged re-run leaves it byte-equal."""

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

        h = hashlib.sha256()
        root = Path(gdpcore.__file__).parent
        for path in sorted(root.glob("*.py")):
            h.update(path.name.encode())
            h.update(path.read_bytes())
        _CODE_VERSION = f"{gdpcore.__version__}+src.{h.hexdigest()[:12]}"
    return _CODE_VERSION


def param_columns(mechanism: Mapping[str, Any]) -> dict[str, Any]:
    """The typed parameter columns of one flat mechanism dict (absent parameters are null)."""
    out: dict[str, Any] = dict.fromkeys(PARAM_COLUMNS)
    for key, value in mechanism.items():
        if key == "kind":
            continue
        out[_RENAMED_PARAMS.get(key, key)] = value
    return out


def chunk_path(lake: Path, spec_name: str, kind: str, chunk_key: str) -> Path:
    return lake / "staging" / f"spec={spec_name}" / f"mechanism={kind}" / f"chunk-{chunk_key}.parquet"


def members_path(lake: Path, spec_name: str) -> Path:
    return lake / "members" / f"spec={spec_name}" / "members.parquet"


def runs_path(lake: Path, spec_name: str, run_id: str) -> Path:
    return lake / "runs" / f"spec={spec_name}" / f"run-{run_id}.parquet"


def atomic_write_parquet(table: pa.Table, path: Path, provenance: Mapping[str, Any]) -> int:
    """Write ``table`` to ``path`` via a hidden temporary file + ``os.replace``; returns the file size.

    The temporary name does not end in ``.parquet``, so lake globs never pick it up; a crash leaves at most a stray
    ``.tmp-*`` file (removed by the next publish, or the next sweep of the spec: :func:`remove_spec_temporaries`).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = dict(table.schema.metadata or {})
    meta[b"gdp.lake_schema_version"] = str(LAKE_SCHEMA_VERSION).encode()
    meta[b"gdp.provenance"] = json.dumps(dict(provenance), sort_keys=True, default=str).encode()
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex}")
    try:
        pq.write_table(table.replace_schema_metadata(meta), tmp, compression="zstd")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path.stat().st_size


def remove_stale_temporaries(directory: Path) -> int:
    """Delete ``.*.tmp-*`` leftovers of crashed writers in ``directory`` (recursively); returns how many."""
    n = 0
    if directory.exists():
        for tmp in directory.rglob(".*.tmp-*"):
            tmp.unlink(missing_ok=True)
            n += 1
    return n


def remove_spec_temporaries(lake: Path, spec_name: str, report: Path | None = None) -> int:
    """Delete what writers SIGKILLed mid-write left for one spec: ``.*.tmp-*`` under its staging, members and runs
    directories, and ``.<report>.tmp-*`` next to ``report`` (a publisher killed before its rename); returns how many.

    Called by a sweep before it publishes, so a re-run after a killed run leaves no orphan behind. Only this spec's
    directories are touched: a concurrent sweep of another spec keeps its in-flight temporaries.
    """
    n = sum(remove_stale_temporaries(lake / sub / f"spec={spec_name}") for sub in ("staging", "members", "runs"))
    if report is not None and report.parent.exists():
        for tmp in report.parent.glob(f".{report.name}.tmp-*"):
            tmp.unlink(missing_ok=True)
            n += 1
    return n


def computed_cells(lake: Path, spec_name: str) -> set[tuple[str, str]]:
    """(cell_id, eval_key) pairs already present in the spec's staging files."""
    root = lake / "staging" / f"spec={spec_name}"
    done: set[tuple[str, str]] = set()
    if not root.exists():
        return done
    for path in sorted(root.glob("mechanism=*/chunk-*.parquet")):
        t = pq.read_table(path, columns=["cell_id", "eval_key"])
        done.update(zip(t.column("cell_id").to_pylist(), t.column("eval_key").to_pylist(), strict=True))
    return done


def _members_table(spec_hash: str, cell_ids: Sequence[str], eval_key: str) -> pa.Table:
    return pa.Table.from_pydict(
        {
            "cell_id": list(cell_ids),
            "eval_key": [eval_key] * len(cell_ids),
            "grid_index": list(range(len(cell_ids))),
            "spec_hash": [spec_hash] * len(cell_ids),
        },
        schema=MEMBERS_SCHEMA,
    )


def members_current(lake: Path, spec_name: str, spec_hash: str, cell_ids: Sequence[str], eval_key: str) -> bool:
    """True when the spec's members file already records exactly these cells (write_members would write nothing)."""
    path = members_path(lake, spec_name)
    if not path.exists():
        return False
    old = pq.read_table(path)
    table = _members_table(spec_hash, cell_ids, eval_key)
    return old.schema.remove_metadata().equals(MEMBERS_SCHEMA) and old.replace_schema_metadata(None).equals(table)


def write_members(lake: Path, spec_name: str, spec_hash: str, cell_ids: Sequence[str], eval_key: str) -> bool:
    """Record the spec's current cells; returns False (and writes nothing) when they are unchanged."""
    if members_current(lake, spec_name, spec_hash, cell_ids, eval_key):
        return False
    table = _members_table(spec_hash, cell_ids, eval_key)
    atomic_write_parquet(table, members_path(lake, spec_name), {"spec": spec_name, "spec_hash": spec_hash})
    return True


def write_run(lake: Path, spec_name: str, record: Mapping[str, Any]) -> Path:
    """Append one provenance row for a sweep run (its own file: concurrent runs never contend)."""
    table = pa.Table.from_pylist([dict(record)], schema=RUNS_SCHEMA)
    path = runs_path(lake, spec_name, str(record["run_id"]))
    atomic_write_parquet(table, path, {"spec": spec_name})
    return path
