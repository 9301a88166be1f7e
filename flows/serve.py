"""Serve the pipeline's deployments from one long-running process, without a work pool (``python -m flows.serve``).

The deployments are :data:`flows.deployments.DEPLOYMENTS`, the table ``prefect.yaml`` is generated from. Needs a
persistent Prefect server (``prefect server start`` + ``PREFECT_API_URL``); schedules pause on shutdown.
"""

from __future__ import annotations

from flows.deployments import serve_deployments

__all__ = ["deployments"]


def deployments() -> list:
    return serve_deployments()


if __name__ == "__main__":
    from prefect import serve

    serve(*deployments())
