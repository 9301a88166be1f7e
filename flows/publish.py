"""``publish_report``: compact the lake and atomically replace the DuckDB report (``gdp publish``)."""

from __future__ import annotations

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact

from flows.naming import run_name
from tasks.evaluate import transient_io_error
from tasks.lake import default_lake, default_report
from tasks.publish import PublishResult, publish_lake

__all__ = ["publish_in_flow", "publish_report"]


@task(name="compact-and-publish", retries=2, retry_delay_seconds=[2, 10], retry_condition_fn=transient_io_error)
def compact_and_publish(lake: str, report: str) -> PublishResult:
    """Curated snapshot of the lake + report file built aside and renamed into place."""
    return publish_lake(lake, report)


@flow(name="publish-report", flow_run_name=run_name("publish", "report"))
def publish_report(lake: str | None = None, report: str | None = None) -> PublishResult:
    return publish_in_flow(str(lake or default_lake()), str(report or default_report()))


def publish_in_flow(lake: str, report: str) -> PublishResult:
    """The body of :func:`publish_report`, run inside the calling flow (a sweep publishes as its last task, without
    the ~0.5 s of a sub-flow run of its own)."""
    result = compact_and_publish(lake, report)
    counts = ", ".join(f"{k}={v:,}" for k, v in result.counts.items())
    create_markdown_artifact(
        key="privacy-report",
        markdown=(
            f"# Privacy report published\n\n- report: `{result.report}`\n- snapshot: `{result.snapshot}`"
            f"{' (unchanged, reused)' if result.reused_snapshot else ''}\n- rows: {counts}\n\n"
            f'Query it: `gdp sql "SELECT * FROM cells LIMIT 5" --report {result.report}`'
        ),
        description="Where the DuckDB report is and what it holds",
    )
    return result
