"""``calibration_sweep``: the smallest noise multiplier meeting an attack-aware target (advantage, TPR at FPR, mu,
(epsilon, delta) or Bayes security) for every (sampling_rate, steps) of a grid, via ``gdpcore.calibrate_noise``;
results land in the lake and the report's ``calibrations`` view.

    gdp calibration-sweep data/specs/calibration.yaml
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact

from flows.chunks import collect_chunks
from flows.grid_sweep import _key
from flows.naming import run_name
from flows.progress import ProgressBar
from flows.publish import publish_in_flow
from flows.runners import default_workers, runner_from_env
from tasks.calibrate import CalibrationChunk, calibrate_chunk, chunk_file, plan_calibration, write_calibration_chunk
from tasks.evaluate import transient_io_error
from tasks.lake import default_lake, default_report
from tasks.spec import CalibrationSpec, load_calibration_spec

__all__ = ["CalibrationSummary", "calibration_sweep"]


@dataclasses.dataclass(frozen=True)
class CalibrationSummary:
    spec: str
    cells: int
    cells_computed: int
    cells_failed: int
    chunks_failed: int
    report: str


@task(name="plan-calibration", retries=2, retry_delay_seconds=1, retry_condition_fn=transient_io_error)
def plan(spec: CalibrationSpec, lake: str, workers: int) -> tuple[list[str], str, tuple[CalibrationChunk, ...]]:
    return plan_calibration(spec, Path(lake), workers=workers)


@task(name="record-calibration-members", retries=2, retry_delay_seconds=1, retry_condition_fn=transient_io_error)
def record_members(spec: CalibrationSpec, ids: list[str], eval_key: str, lake: str) -> bool:
    from tasks.lake import write_members

    # Same file format as the grid members, kept in its own tree.
    return write_members(Path(lake) / "_calibration", spec.name, spec.spec_hash, ids, eval_key)


@flow(name="calibration-sweep", task_runner=runner_from_env(), flow_run_name=run_name("calibration", "spec_path"))
def calibration_sweep(
    spec_path: str,
    lake: str | None = None,
    report: str | None = None,
    force: bool = False,
    workers: int | None = None,
    progress: bool = False,
) -> CalibrationSummary:
    spec = load_calibration_spec(spec_path, force=force)
    lake = str(lake or default_lake())
    report = str(report or default_report())
    from tasks.locks import spec_lock
    from tasks.publish import check_writable

    check_writable(Path(lake), "lake")
    with spec_lock(Path(lake), f"calibration.{spec.name}", on_wait=get_run_logger().warning):
        return _calibrate_locked(spec, lake, report, workers, progress)


def _calibrate_locked(
    spec: CalibrationSpec, lake: str, report: str, workers: int | None, progress: bool = False
) -> CalibrationSummary:
    ids, eval_key, chunks = plan(spec, lake, workers or default_workers())
    get_run_logger().info(
        "%s: %d cells, %d to calibrate in %d chunks", spec.name, len(ids), sum(c.size for c in chunks), len(chunks)
    )
    bar = ProgressBar(
        sum(c.size for c in chunks), enabled=progress, artifact_key=_key("calibration-progress", spec.name)
    )
    manifests: list[dict[str, Any]]
    manifests, failures = collect_chunks(
        calibrate_chunk,
        chunks,
        lake,
        write=lambda c, r: write_calibration_chunk(Path(lake), c, r),
        expected_path=lambda c: str(chunk_file(Path(lake), c.spec_name, c.key).relative_to(Path(lake))),
        path_of=lambda m: m["path"],
        bar=bar,
    )
    bar.close()
    record_members(spec, ids, eval_key, lake)
    publish_in_flow(lake, report)
    summary = CalibrationSummary(  # every manifest is a chunk this run wrote and verified
        spec=spec.name,
        cells=len(ids),
        cells_computed=sum(m["cells"] for m in manifests),
        cells_failed=sum(m["cells"] - m["cells_ok"] for m in manifests),
        chunks_failed=len(failures),
        report=report,
    )
    create_markdown_artifact(
        key=_key("calibration", spec.name),
        markdown=(
            f"# Calibration sweep `{spec.name}`\n\nTarget: `{spec.target.kwargs()}`\n\n"
            f"- cells: {summary.cells} ({summary.cells_computed} computed, {summary.cells_failed} without a "
            f"solution in this run)\n- failed chunks: {summary.chunks_failed}\n"
            f"- report: `{Path(report).resolve()}` (view `calibrations`)"
        ),
    )
    if failures:
        raise RuntimeError(f"{len(failures)} calibration chunk(s) failed: {failures[0]!r}")
    return summary
