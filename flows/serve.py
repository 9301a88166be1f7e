"""Serve the pipeline's deployments from one long-running process, without a work pool (``python -m flows.serve``).

Needs a persistent Prefect server (``prefect server start`` + ``PREFECT_API_URL``); schedules pause on shutdown.
"""

from __future__ import annotations

from prefect import serve

from flows.grid_sweep import grid_sweep
from flows.publish import publish_report
from flows.regret_map import regret_map


def deployments() -> list:
    return [
        grid_sweep.to_deployment(name="grid-sweep", parameters={"spec_path": "data/specs/demo.yaml"}),
        regret_map.to_deployment(name="regret-map", parameters={"spec_path": "data/specs/dpsgd-cifar-map.yaml"}),
        grid_sweep.to_deployment(
            name="nightly-privacy-audit", cron="0 2 * * *", parameters={"spec_path": "data/specs/dpsgd-cifar-map.yaml"}
        ),
        publish_report.to_deployment(name="publish-report"),
    ]


if __name__ == "__main__":
    serve(*deployments())
