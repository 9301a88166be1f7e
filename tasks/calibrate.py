"""Attack-aware calibration chunks: ``gdpcore.calibrate_noise`` for each (sampling_rate, steps) cell of a
:class:`tasks.spec.CalibrationSpec`, one Parquet file per chunk under ``<lake>/calibrations/``, written by the flow
from the rows the chunk task returns (workers need not see the lake).

Same resumability contract as the grid sweep: a cell is (sampling_rate, steps, target) + gdpcore code version;
cells already in the lake are not recomputed; the spec's current cell set goes to ``members_calibration/``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from prefect import task

from tasks.evaluate import CHUNK_TASK_RETRIES, ChunkResult, current_run_id
from tasks.lake import atomic_write_parquet, code_version, table_from_ipc, table_to_ipc
from tasks.spec import CalibrationSpec

__all__ = ["CALIBRATION_SCHEMA", "CalibrationChunk", "calibrate_chunk", "plan_calibration", "write_calibration_chunk"]

CALIBRATION_SCHEMA = pa.schema(
    [
        pa.field("cell_id", pa.string(), nullable=False),
        pa.field("eval_key", pa.string(), nullable=False),
        pa.field("sampling_rate", pa.float64(), nullable=False),
        pa.field("steps", pa.int64(), nullable=False),
        pa.field("target", pa.string(), nullable=False),  # e.g. "advantage"
        pa.field("target_value", pa.float64(), nullable=False),
        pa.field("fpr", pa.float64()),
        pa.field("delta", pa.float64()),
        pa.field("status", pa.string(), nullable=False),  # "ok" or why no noise multiplier meets the target
        pa.field("noise_multiplier", pa.float64()),
        pa.field("achieved", pa.float64()),
        pa.field("rejected", pa.float64()),
        pa.field("at_limit", pa.bool_()),
        pa.field("accountant", pa.string()),
        pa.field("discretization", pa.float64()),
        pa.field("bound_types", pa.string()),  # JSON
        pa.field("gdpcore_version", pa.string(), nullable=False),
        pa.field("code_version", pa.string(), nullable=False),
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("computed_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]


@dataclasses.dataclass(frozen=True)
class CalibrationChunk:
    spec_name: str
    cells: tuple[tuple[float, int], ...]  # (sampling_rate, steps)
    target: tuple[tuple[str, float], ...]  # calibrate_noise keyword arguments
    code_version: str

    @property
    def key(self) -> str:
        return _hash(dataclasses.asdict(self) | {"spec_name": None})

    @property
    def short_key(self) -> str:
        return self.key[:10]

    @property
    def size(self) -> int:
        return len(self.cells)


def cell_id(q: float, t: int, target: tuple[tuple[str, float], ...]) -> str:
    return _hash({"sampling_rate": q, "steps": t, "target": target})


def chunk_file(lake: Path, spec_name: str, key: str) -> Path:
    from tasks.lake import safe_join

    return safe_join(lake, "calibrations", f"spec={spec_name}", f"chunk-{key}.parquet")


def plan_calibration(
    spec: CalibrationSpec, lake: Path, *, workers: int = 2
) -> tuple[list[str], str, tuple[CalibrationChunk, ...]]:
    """(all cell ids in grid order, eval_key, chunks of the cells not yet in the lake)."""
    from tasks.evaluate import auto_chunk_size

    target = tuple(sorted(spec.target.kwargs().items()))
    eval_key = _hash({"target": target, "code_version": code_version()})
    present: set[tuple[str, str]] = set()
    root = lake / "calibrations" / f"spec={spec.name}"
    if root.exists():
        for path in sorted(root.glob("chunk-*.parquet")):
            try:
                t = pq.read_table(path, columns=["cell_id", "eval_key"])
            except (OSError, pa.ArrowException, ValueError) as exc:  # truncated or corrupt: recompute its cells
                from tasks.lake import quarantine

                quarantine(lake, path, f"unreadable calibration chunk: {type(exc).__name__}: {exc}"[:500])
                continue
            present.update(zip(t.column("cell_id").to_pylist(), t.column("eval_key").to_pylist(), strict=True))
    ids, todo = [], []
    for cell in spec.iter_cells():
        q, steps = float(cell["sampling_rate"]), int(cell["steps"])
        cid = cell_id(q, steps, target)
        ids.append(cid)
        if (cid, eval_key) not in present:
            todo.append((q, steps))
    size = spec.chunk_size or auto_chunk_size(len(todo), workers)
    chunks = tuple(
        CalibrationChunk(
            spec_name=spec.name, cells=tuple(todo[i : i + size]), target=target, code_version=code_version()
        )
        for i in range(0, len(todo), size)
    )
    return ids, eval_key, chunks


def compute_calibration_table(chunk: CalibrationChunk, run_id: str) -> pa.Table:
    import gdpcore

    kwargs: dict[str, Any] = dict(chunk.target)
    target_name = next(k for k in kwargs if k.startswith("target_")).removeprefix("target_")
    eval_key = _hash({"target": chunk.target, "code_version": chunk.code_version})
    now = dt.datetime.now(dt.UTC)
    rows = []
    for q, steps in chunk.cells:
        row: dict[str, Any] = {
            "cell_id": cell_id(q, steps, chunk.target),
            "eval_key": eval_key,
            "sampling_rate": q,
            "steps": steps,
            "target": target_name,
            "target_value": kwargs[f"target_{target_name}"],
            "fpr": kwargs.get("fpr"),
            "delta": kwargs.get("delta"),
            "gdpcore_version": gdpcore.__version__,
            "code_version": chunk.code_version,
            "run_id": run_id,
            "computed_at": now,
        }
        try:
            res = gdpcore.calibrate_noise(sampling_rate=q, steps=steps, **kwargs)
        except ValueError as exc:  # infeasible target in the search range: a result, not a crash
            row["status"] = f"no solution: {exc}"[:1000]
        else:
            row.update(
                # at_limit: even the search's smallest noise multiplier meets the target - the minimal one may be
                # smaller, so the row is an upper bound on the answer and says so instead of a plain "ok".
                status="ok"
                if not res.at_limit
                else f"at_search_limit: the smallest noise multiplier searched ({res.noise_multiplier:g}) already "
                "meets the target; the minimal one may be smaller",
                noise_multiplier=res.noise_multiplier,
                achieved=res.achieved,
                rejected=None if res.rejected is None else float(res.rejected),
                at_limit=res.at_limit,
                accountant=res.accountant,
                discretization=res.discretization,
                bound_types=json.dumps(res.bound_types, sort_keys=True),
            )
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=CALIBRATION_SCHEMA)


@task(
    name="calibrate-chunk",
    task_run_name="calibrate {chunk.spec_name}/{chunk.short_key} ({chunk.size} cells)",
    **CHUNK_TASK_RETRIES,
)
def calibrate_chunk(chunk: CalibrationChunk) -> ChunkResult:
    """Calibrate every cell of the chunk on whichever worker runs it and return the rows (the flow writes them:
    :func:`write_calibration_chunk`; see :mod:`tasks.evaluate` for why)."""
    started = time.perf_counter()
    table = compute_calibration_table(chunk, current_run_id())
    return ChunkResult(table_to_ipc(table), time.perf_counter() - started)


def write_calibration_chunk(lake: Path, chunk: CalibrationChunk, result: ChunkResult) -> dict[str, Any]:
    """In the flow process: decode a calibration task's rows, check there is one per cell, write the chunk's file
    atomically and return a small manifest. ``ValueError`` for a result that is not the chunk's rows."""
    if not isinstance(result, ChunkResult):
        raise ValueError(f"the chunk task returned {type(result).__name__}, not its rows")
    table = table_from_ipc(result.data, CALIBRATION_SCHEMA)
    if table.num_rows != chunk.size:
        raise ValueError(f"the chunk task returned {table.num_rows} rows for {chunk.size} cells")
    run_id = str(table.column("run_id")[0])
    path = chunk_file(lake, chunk.spec_name, chunk.key)
    atomic_write_parquet(table, path, {"run_id": run_id, "chunk_key": chunk.key, "code_version": chunk.code_version})
    ok = sum(not s.startswith("no solution") for s in table.column("status").to_pylist())
    return {
        "chunk_key": chunk.key,
        "path": str(path.relative_to(lake)),
        "cells": table.num_rows,
        "cells_ok": ok,
        "seconds": result.seconds,
        "computed_by_run": run_id,
    }
