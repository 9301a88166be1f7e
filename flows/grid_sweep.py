"""``grid_sweep``: spec -> missing cells -> chunk tasks -> Parquet lake -> published DuckDB report.

    gdp sweep data/specs/demo.yaml --runner process
    python -c "from flows.grid_sweep import grid_sweep; grid_sweep('data/specs/demo.yaml')"

Only cells not already in the lake (same mechanism, same settings, same gdpcore code) are computed: a re-run computes
nothing and adds no rows; editing one grid value computes only the cells that value creates.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.runtime import flow_run
from prefect.utilities.annotations import quote

from flows.chunks import collect_chunks
from flows.naming import run_name
from flows.pool_start import start_up_over
from flows.progress import ProgressBar
from flows.publish import publish_in_flow
from flows.runners import default_workers, runner_from_env
from flows.runners import release_workers as release_pool
from tasks.evaluate import (
    Chunk,
    ChunkManifest,
    SweepPlan,
    evaluate_chunk,
    plan_sweep,
    transient_io_error,
    write_chunk,
)
from tasks.lake import code_version, default_lake, default_report, remove_spec_temporaries, write_members, write_run
from tasks.locks import spec_lock
from tasks.object_store import is_url
from tasks.publish import check_writable, prepare_piece
from tasks.spec import GridSpec, load_grid_spec, spec_json
from tasks.trace import phase

__all__ = ["SweepSummary", "grid_sweep"]


@dataclasses.dataclass(frozen=True)
class SweepSummary:
    spec: str
    run_id: str
    cells: int
    cells_computed: int
    cells_reused: int
    chunks_computed: int
    chunks_failed: int
    worst_mu: float | None
    report: str | None
    lake: str
    failures: tuple[str, ...] = ()


@task(name="record-members", retries=2, retry_delay_seconds=1, retry_condition_fn=transient_io_error)
def record_members(plan: SweepPlan, lake: str) -> bool:
    """The spec's current cell set (what the report shows for it); unchanged sets are not rewritten."""
    return write_members(
        Path(lake),
        plan.spec_name,
        plan.spec_hash,
        plan.cell_ids,
        plan.eval_key,
        axes=(plan.axis_names, plan.axis_values),
    )


@task(name="record-run", retries=2, retry_delay_seconds=1, retry_condition_fn=transient_io_error)
def record_run(spec: GridSpec, summary: SweepSummary, lake: str, runner: str, started: dt.datetime) -> str:
    import gdpcore

    path = write_run(
        Path(lake),
        spec.name,
        {
            "run_id": summary.run_id,
            "flow": "grid-sweep",
            "spec_hash": spec.spec_hash,
            "spec_json": spec_json(spec),
            "cells": summary.cells,
            "cells_computed": summary.cells_computed,
            "chunks_computed": summary.chunks_computed,
            "chunks_failed": summary.chunks_failed,
            "gdpcore_version": gdpcore.__version__,
            "code_version": code_version(),
            "task_runner": runner,
            "started_at": started,
            "finished_at": dt.datetime.now(dt.UTC),
        },
    )
    return str(path)


@flow(name="grid-sweep", task_runner=runner_from_env(), flow_run_name=run_name("sweep", "spec_path"))
def grid_sweep(
    spec_path: str,
    lake: str | None = None,
    report: str | None = None,
    force: bool = False,
    publish: bool = True,
    progress: bool = False,
    workers: int | None = None,
) -> SweepSummary:
    """Sweep the grid of ``spec_path`` into the lake and publish the report.

    Args:
        spec_path: a grid spec (YAML, see :mod:`tasks.spec`).
        lake: lake root (default ``data/lake`` or ``$GDP_LAKE``).
        report: DuckDB report path (default ``data/reports/privacy.duckdb`` or ``$GDP_REPORT``).
        force: allow grids above the spec's ``max_cells``.
        publish: rebuild the report after the sweep.
        progress: draw a progress bar on stderr.
        workers: parallel workers the chunking aims to keep busy (default: cores).
    """
    phase(f"flow-body api={_api_url()}")
    spec = load_grid_spec(spec_path, force=force)  # an invalid spec fails the run here, before anything is written
    return run_sweep(
        spec, lake=lake, report=report, publish=publish, progress=progress, workers=workers, release_workers=True
    )


def run_sweep(
    spec: GridSpec,
    *,
    lake: str | None = None,
    report: str | None = None,
    publish: bool = True,
    progress: bool = False,
    workers: int | None = None,
    on_chunk: Callable[[str], None] | None = None,
    release_workers: bool = False,
) -> SweepSummary:
    """The body of :func:`grid_sweep`, callable from any flow (its tasks run on that flow's task runner).

    One sweep per (lake, spec) at a time (:func:`tasks.locks.spec_lock`): a second sweep of the same spec waits, then
    plans against the finished lake and computes nothing twice. ``on_chunk(path relative to the lake)`` runs for
    each chunk file once it is written and verified (a lake on object storage pushes it there and then).
    ``release_workers``: the calling flow submits no task after this sweep's chunks, so a process pool's workers
    may exit as soon as the last chunk is in (:func:`flows.runners.release_workers`), while the report is published."""
    logger = get_run_logger()
    lake = str(lake or default_lake())
    report = str(report or default_report())
    if is_url(lake):  # object storage: sweep its local mirror, push, publish from the store (tasks.object_store)
        return _run_sweep_remote(
            spec, lake, report, publish=publish, progress=progress, workers=workers, release_workers=release_workers
        )
    check_writable(Path(lake), "lake")
    with spec_lock(Path(lake), spec.name, on_wait=logger.warning):
        return _run_sweep_locked(
            spec,
            lake,
            report,
            publish=publish,
            progress=progress,
            workers=workers,
            on_chunk=on_chunk,
            release_workers=release_workers,
        )


def _run_sweep_remote(
    spec: GridSpec, lake: str, report: str, *, publish: bool, progress: bool, workers: int | None, release_workers: bool
) -> SweepSummary:
    from tasks.lake import remove_spec_temporaries
    from tasks.object_store import lake_mirror, push_file

    logger = get_run_logger()
    failed: RuntimeError | None = None
    with lake_mirror(lake, spec.name) as local:  # pushes what the sweep wrote, also when it failed

        def push(rel: str) -> None:
            """Each verified chunk goes to the store at once (a SIGKILL later loses only the chunks in flight)."""
            try:
                push_file(lake, local, rel)
            except (OSError, ValueError) as exc:  # store unreachable for now: the final push retries, or fails
                logger.warning("chunk %s not pushed yet (%s); the push at the end of the sweep retries it", rel, exc)

        try:
            summary = run_sweep(
                spec,
                lake=str(local),
                report=report,
                publish=False,
                progress=progress,
                workers=workers,
                on_chunk=push,
                release_workers=release_workers,
            )
        except RuntimeError as exc:  # failed chunks: publish the rest, then fail (as run_sweep does)
            failed = exc
        remove_spec_temporaries(local, spec.name)  # what a SIGKILLed sweep left in this mirror (never pushed)
    if publish:
        publish_in_flow(lake, report)
    if failed is not None:
        raise failed
    return dataclasses.replace(summary, lake=lake, report=report if publish else None)


def _run_sweep_locked(
    spec: GridSpec,
    lake: str,
    report: str,
    *,
    publish: bool,
    progress: bool,
    workers: int | None,
    on_chunk: Callable[[str], None] | None = None,
    release_workers: bool = False,
) -> SweepSummary:
    logger = get_run_logger()
    started = dt.datetime.now(dt.UTC)
    run_id = str(flow_run.id)

    plan = plan_sweep(spec, lake, workers=workers or default_workers())
    phase("planned")
    logger.info(
        "%s: %d cells, %d already in the lake, %d to compute in %d chunks",
        spec.name,
        plan.cells_total,
        plan.cells_present,
        plan.cells_to_compute,
        len(plan.chunks),
    )
    recorded: list[bool] = []

    def members() -> None:
        # quote: Prefect would otherwise visit every cell id and axis value of the plan to look for futures in it
        # (~0.4 s at 10^4 cells); the task receives the plan itself.
        record_members(cast(SweepPlan, quote(plan)), lake)  # Prefect unwraps the quote before the task runs
        recorded.append(True)
        phase("members")
        start_up_over()  # a one-worker pool's worker imports Prefect now, not beside this start-up

    def compact(rel: str) -> None:
        """The chunk's rows compacted for the report now, while the workers compute (tasks.snapshots: pieces)."""
        try:
            prepare_piece(lake, rel)
        except Exception as exc:  # an optimisation only: the publish builds (or fails on) the piece again
            logger.warning("chunk %s: its report rows are compacted at publish instead (%s)", rel, exc)

    # The spec's cell set depends on the plan alone: recorded while the workers compute (off the critical path).
    manifests, failures = evaluate_chunks(
        plan.chunks,
        lake,
        progress=progress,
        artifact_key=_key("sweep-progress", spec.name),
        while_computing=members,
        on_chunk=on_chunk,
        when_idle=compact if publish else None,
    )
    if release_workers:
        release_pool()  # no task follows the chunks: the workers exit while the run is recorded and published
    if not recorded:
        members()
    mus = [m.worst_mu for m in manifests if m.worst_mu is not None]
    computed = sum(m.cells for m in manifests)  # every manifest is a chunk this run wrote and verified
    summary = SweepSummary(
        spec=spec.name,
        run_id=run_id,
        cells=plan.cells_total,
        cells_computed=computed,
        cells_reused=plan.cells_present,
        chunks_computed=len(manifests),
        chunks_failed=len(failures),
        worst_mu=max(mus) if mus else None,
        report=report if publish else None,
        lake=lake,
        failures=tuple(failures),
    )
    record_run(spec, summary, lake, _runner_name(), started)
    phase("run-recorded")
    if publish:
        # A run SIGKILLed mid-write left `.*.tmp-*` files (never read: they do not end in .parquet): clear them.
        remove_spec_temporaries(Path(lake), spec.name, Path(report))
        publish_in_flow(lake, report)
        phase("published")
    _sweep_artifacts(spec, summary)
    phase("artifacts")
    if failures:
        raise RuntimeError(f"{len(failures)} of {len(plan.chunks)} chunks failed: " + "; ".join(failures[:3]))
    return summary


def evaluate_chunks(
    chunks: tuple[Chunk, ...],
    lake: str,
    *,
    progress: bool = False,
    artifact_key: str | None = None,
    while_computing: Callable[[], None] | None = None,
    on_chunk: Callable[[str], None] | None = None,
    when_idle: Callable[[str], None] | None = None,
) -> tuple[list[ChunkManifest], list[str]]:
    """Submit one task per chunk; as each finishes, write its rows into the lake here, in the flow process, and
    keep its manifest once the file is verified (:func:`flows.chunks.collect_chunks`): the workers never touch the
    lake, so they need not see its folder. ``on_chunk`` gets each chunk's path (relative to the lake) once its file
    is verified; ``when_idle`` too, when no other finished chunk waits to be written."""
    if not chunks:
        return [], []
    phase("evaluate-chunks")
    bar = ProgressBar(sum(c.size for c in chunks), enabled=progress, artifact_key=artifact_key)
    return collect_chunks(
        evaluate_chunk,
        chunks,
        lake,
        write=lambda c, r: write_chunk(Path(lake), c, r),
        expected_path=lambda c: _expected(lake, c),
        path_of=lambda m: m.path,
        bar=bar,
        while_computing=while_computing,
        on_persisted=None if on_chunk is None else (lambda m: on_chunk(m.path)),
        when_idle=None if when_idle is None else (lambda m: when_idle(m.path)),
    )


def _expected(lake: str, chunk: Chunk) -> str:
    from tasks.lake import chunk_path

    return str(chunk_path(Path(lake), chunk.spec_name, chunk.kind, chunk.key).relative_to(Path(lake)))


def _api_url() -> str | None:
    """The Prefect API this flow reports to (recorded by GDP_TRACE: one temporary server for the flow and workers)."""
    import os

    if not os.environ.get("GDP_TRACE"):
        return None
    from prefect.settings import get_current_settings

    return str(get_current_settings().api.url)


def _runner_name() -> str:
    import os

    return os.environ.get("GDP_TASK_RUNNER_LABEL") or os.environ.get("GDP_TASK_RUNNER", "process")


def _key(prefix: str, name: str) -> str:
    """Prefect artifact keys: lowercase letters, digits and dashes only."""
    return f"{prefix}-" + re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")


def _fmt(x: Any) -> str:
    return "n/a" if x is None else f"{x:.6g}" if isinstance(x, float) else str(x)


def _sweep_artifacts(spec: GridSpec, s: SweepSummary) -> None:
    worst: list[dict[str, Any]] = []
    if s.report and Path(s.report).exists():
        from tasks.report_query import query_report

        # The swept values come from the axes view: grid keys of compositions (and parameters stored under another
        # column name, such as randomized response's epsilon) are not columns of `cells`.
        cols, rows = query_report(
            s.report,
            "SELECT c.cell_id, (SELECT string_agg(a.axis || '=' || a.value_text, ', ') FROM axes a "
            "WHERE a.spec = c.spec AND a.cell_id = c.cell_id) AS axes, c.mu, c.gdp_regret, c.advantage, c.status "
            f"FROM cells c WHERE c.spec = '{spec.name}' ORDER BY c.mu DESC NULLS LAST, c.cell_id LIMIT 10",
        )
        worst = [{c: _fmt(v) for c, v in zip(cols, r, strict=True)} for r in rows]
    md = [
        f"# Grid sweep `{s.spec}`",
        "",
        "| cells | computed | reused from lake | chunks computed | chunks failed | worst mu |",
        "|---|---|---|---|---|---|",
        f"| {s.cells} | {s.cells_computed} | {s.cells_reused} | {s.chunks_computed} | "
        f"{s.chunks_failed} | {_fmt(s.worst_mu)} |",
        "",
        f"- lake: `{s.lake if is_url(s.lake) else Path(s.lake).resolve()}`",
        f"- report: `{s.report if is_url(s.report) else Path(s.report).resolve()}`"
        if s.report
        else "- report: not published (publish=False)",
    ]
    if s.failures:
        md += ["", "## Failures", *[f"- {f}" for f in s.failures]]
    create_markdown_artifact(key=_key("sweep", s.spec), markdown="\n".join(md), description="Sweep summary")
    if worst:
        create_table_artifact(
            key=_key("worst-cells", s.spec), table=worst, description=f"The 10 cells of {s.spec} with the largest mu"
        )


if __name__ == "__main__":  # spawn-based runners need the guard
    import sys

    grid_sweep(sys.argv[1])
