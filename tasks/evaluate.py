"""Chunked evaluation: plan which cells of a spec still need computing, evaluate one chunk, write one Parquet file.

The numbers come from :func:`gdpcore.analyze_grid` (one row per mechanism). This module only shapes them into the
lake's staging schema (:data:`tasks.lake.STAGING_SCHEMA`) and adds provenance. A chunk is a few dozen to a few
thousand cells, so a flow run has hundreds of task runs, not one per cell (anchors report 1.10).

Resumability has two layers:

* planning (:func:`plan_sweep`) drops cells whose (cell_id, eval_key) is already in the spec's staging files, so a
  re-run computes nothing and an edit to one grid value computes only the new cells;
* the Prefect task cache is keyed on the chunk key (cells + evaluation settings + gdpcore code version) and the lake,
  so a retried flow run that re-plans the same chunk reuses the finished task's manifest.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from prefect import task
from prefect.cache_policies import TASK_SOURCE, CacheKeyFnPolicy

from tasks.lake import (
    STAGING_SCHEMA,
    atomic_write_parquet,
    chunk_path,
    param_columns,
)
from tasks.plan import (  # noqa: F401 - re-exported: planning lives in tasks.plan (importable without Prefect)
    CURVE_FPRS,
    Chunk,
    ChunkManifest,
    EvalSettings,
    SweepPlan,
    _hash,
    _sharing_key,
    auto_chunk_size,
    build_plan,
)
from tasks.spec import GridSpec

__all__ = [
    "CURVE_FPRS",
    "Chunk",
    "ChunkManifest",
    "EvalSettings",
    "SweepPlan",
    "compute_chunk_table",
    "evaluate_chunk",
    "plan_sweep",
]


@task(name="plan-sweep", retries=2, retry_delay_seconds=1)
def plan_sweep(spec: GridSpec, lake: str, workers: int = 2) -> SweepPlan:
    """Which cells of ``spec`` are missing from the lake, cut into chunks."""
    return build_plan(spec, Path(lake), workers=workers)


# -- evaluation ----------------------------------------------------------------------------------------------------------
def _grid_rows(mechs: list[Any], settings: EvalSettings) -> list[dict[str, Any]]:
    """analyze_grid on the whole chunk; on a numerical error, per cell, so one bad cell cannot sink its chunk."""
    import gdpcore

    kwargs: dict[str, Any] = dict(deltas=list(settings.deltas), fprs=list(settings.fprs), alpha_min=settings.alpha_min)
    if settings.discretization is not None:
        kwargs["discretization"] = settings.discretization
    try:
        return gdpcore.analyze_grid(mechs, **kwargs).to_pylist()
    except (ValueError, ArithmeticError, RuntimeError) as exc:
        if len(mechs) == 1:
            return [{"status": f"error: {type(exc).__name__}: {exc}"[:500]}]
    rows: list[dict[str, Any]] = []
    for m in mechs:
        rows.extend(_grid_rows([m], settings))
    return rows


def _representation_regrets(mech: Any, settings: EvalSettings) -> tuple[list, list, list, list]:
    """Regret per representation (gdpcore issue 3's ``PrivacyReport.regret``), when that API is available."""
    import gdpcore

    reps, deltas, values, bounds = [], [], [], []
    others = [r for r in settings.representations if r != "gdp"]
    if not others or not hasattr(gdpcore.PrivacyReport, "regret"):
        return reps, deltas, values, bounds
    # Needs a per-point PrivacyReport (dp_accounting PLD): the grid engine does not expose these regrets yet.
    report = gdpcore.analyze(mech, discretization=settings.discretization or 1e-4, alpha_min=settings.alpha_min)
    for rep in others:
        for d in settings.deltas if rep == "epsilon_delta" else (None,):
            value = report.regret(rep, delta=d) if d is not None else report.regret(rep)
            reps.append(rep)
            deltas.append(d)
            values.append(float(value))
            bounds.append("exact" if report.exact else "estimate")
    return reps, deltas, values, bounds


def compute_chunk_table(chunk: Chunk, run_id: str) -> pa.Table:
    """Evaluate every cell of ``chunk`` with gdpcore and shape the rows into :data:`STAGING_SCHEMA`."""
    import gdpcore

    mech_dicts = [json.loads(m) for m in chunk.mechanisms]
    for d in mech_dicts:
        d.pop("schema", None)
    mechs = [gdpcore.mechanism_from_dict(d) for d in mech_dicts]
    grid_rows = _grid_rows(mechs, chunk.settings)
    now = dt.datetime.now(dt.UTC)
    rows = []
    settings = chunk.settings
    for mech, mdict, g in zip(mechs, mech_dicts, grid_rows, strict=True):
        ok = g.get("status") == "ok"
        reps, rdeltas, rvalues, rbounds = (["gdp"], [None], [g.get("gdp_regret")], [g.get("gdp_regret_bound")])
        if ok and "gdp" not in settings.representations:
            reps, rdeltas, rvalues, rbounds = [], [], [], []
        if ok:
            more = _representation_regrets(mech, settings)
            reps, rdeltas, rvalues, rbounds = (
                a + b for a, b in zip((reps, rdeltas, rvalues, rbounds), more, strict=True)
            )
        else:
            reps, rdeltas, rvalues, rbounds = [], [], [], []
        row = {
            "cell_id": mech.content_hash,
            "eval_key": settings.eval_key,
            "chunk_key": chunk.key,
            "mechanism_kind": mech.kind,
            "mechanism_json": mech.to_json(),
            **param_columns(mdict),
            "status": g.get("status", "error: missing row"),
            **{
                k: g.get(k)
                for k in (
                    "mu",
                    "mu_lower",
                    "gdp_regret",
                    "advantage",
                    "advantage_lower",
                    "bayes_security",
                    "mu_bound",
                    "gdp_regret_bound",
                    "advantage_bound",
                    "bayes_security_bound",
                    "epsilon_bound",
                    "fnr_bound",
                    "epsilon",
                    "epsilon_lower",
                    "accountant",
                    "discretization",
                    "engine",
                )
            },
            "deltas": list(settings.deltas) if ok else None,
            "curve_fpr": list(settings.fprs) if ok else None,
            "curve_fnr": g.get("fnr"),
            "regret_representation": reps,
            "regret_delta": rdeltas,
            "regret": rvalues,
            "regret_bound": rbounds,
            "alpha_min": settings.alpha_min,
            "gdpcore_version": gdpcore.__version__,
            "code_version": settings.code_version,
            "run_id": run_id,
            "computed_at": now,
        }
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=STAGING_SCHEMA)


def _chunk_cache_key(context: Any, parameters: dict[str, Any]) -> str:
    """Chunk content (cells + settings + gdpcore code version) and the lake it was written to."""
    chunk: Chunk = parameters["chunk"]
    return f"gdp-chunk-{chunk.key}-{_hash(str(Path(parameters['lake']).resolve()))[:12]}"


def _transient_io_error(task: Any, task_run: Any, state: Any) -> bool:
    """Retry only I/O failures (full disk, NFS hiccup, lost file handle); numerical errors are not transient."""
    try:
        state.result()
    except OSError:
        return True
    except Exception:
        return False
    return False


def _run_id() -> str:
    from prefect.runtime import flow_run

    return str(flow_run.id or "no-flow-run")


@task(
    name="evaluate-chunk",
    task_run_name="evaluate {chunk.spec_name}/{chunk.short_key} ({chunk.size} cells)",
    cache_policy=CacheKeyFnPolicy(cache_key_fn=_chunk_cache_key) + TASK_SOURCE,
    persist_result=True,
    retries=2,
    retry_delay_seconds=[2, 10],
    retry_condition_fn=_transient_io_error,
)
def evaluate_chunk(chunk: Chunk, lake: str) -> ChunkManifest:
    """Evaluate one chunk and write it as one Parquet file (temp + rename); return its manifest."""
    started = time.perf_counter()
    run_id = _run_id()
    table = compute_chunk_table(chunk, run_id)
    path = chunk_path(Path(lake), chunk.spec_name, chunk.kind, chunk.key)
    atomic_write_parquet(
        table,
        path,
        {
            "run_id": run_id,
            "chunk_key": chunk.key,
            "code_version": chunk.settings.code_version,
            "settings": dataclasses.asdict(chunk.settings),
        },
    )
    ok_mask = [s == "ok" for s in table.column("status").to_pylist()]
    mus = [m for m, ok in zip(table.column("mu").to_pylist(), ok_mask, strict=True) if ok and m is not None]
    return ChunkManifest(
        chunk_key=chunk.key,
        path=str(path.relative_to(Path(lake))),
        cells=table.num_rows,
        cells_ok=sum(ok_mask),
        worst_mu=max(mus) if mus else None,
        seconds=time.perf_counter() - started,
        computed_by_run=run_id,
    )


def chunk_cells(chunks: Sequence[Chunk]) -> int:
    return sum(c.size for c in chunks)
