"""The pipeline's Prefect deployments, declared once.

:data:`DEPLOYMENTS` is the single source of truth: ``prefect.yaml`` is generated from it (``python -m
flows.deployments`` rewrites the file; a test checks the committed file equals the rendering) and ``flows/serve.py``
serves the same table without a work pool. ``tests/pipeline/test_deployments.py`` deploys it to a local Prefect
server with a process work pool and runs every deployment end to end.

No machine path, no placeholder address: specs, lake and report are relative to the project checkout the worker runs
in (the pull step changes into the Prefect Variable ``gdp_project_dir``, set once per server with ``prefect variable
set gdp_project_dir /path/to/checkout`` for the machines the workers run on), and the task runner
comes from job variables - ``GDP_TASK_RUNNER`` (process | thread | dask) and, for a Dask cluster,
``DASK_SCHEDULER_ADDRESS`` (unset: a temporary LocalCluster). Override them per run or per work pool, e.g.
``prefect deployment run regret-map/regret-map --job-variable env='{"GDP_TASK_RUNNER": "dask",
"DASK_SCHEDULER_ADDRESS": "tcp://scheduler:8786"}'``.
"""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "DEPLOYMENTS",
    "POOL",
    "PROJECT_VARIABLE",
    "PULL",
    "Deployment",
    "prefect_yaml",
    "render_prefect_yaml",
    "serve_deployments",
]

POOL = "gdp-process"
# A Prefect Variable, resolved by the worker when the run starts (``{{ $ENV }}`` placeholders are resolved by
# `prefect deploy` on the deploying machine and would store its path): `prefect variable set gdp_project_dir DIR`.
PROJECT_VARIABLE = "gdp_project_dir"
PULL = [
    {
        "prefect.deployments.steps.set_working_directory": {
            "directory": "{{ prefect.variables." + PROJECT_VARIABLE + " }}"
        }
    }
]
ENV = {"GDP_TASK_RUNNER": "process", "GDP_LAKE": "data/lake", "GDP_REPORT": "data/reports/privacy.duckdb"}


@dataclasses.dataclass(frozen=True)
class Deployment:
    name: str
    entrypoint: str  # path/to/module.py:flow_function, relative to the project root
    description: str
    parameters: dict[str, Any] = dataclasses.field(default_factory=dict)
    cron: str | None = None  # UTC
    slug: str | None = None  # schedule slug: later edits update the schedule instead of adding one
    concurrency_limit: int | None = 1  # one writer of a spec's / registry's members file at a time
    active: bool = True  # False: the schedule is declared but paused until the user resumes it

    def flow(self) -> Any:
        path, func = self.entrypoint.split(":")
        return getattr(importlib.import_module(path.removesuffix(".py").replace("/", ".")), func)


DEPLOYMENTS: tuple[Deployment, ...] = (
    Deployment(
        "grid-sweep",
        "flows/grid_sweep.py:grid_sweep",
        "Sweep a grid spec into the lake and publish the DuckDB report (only new cells are computed).",
        {"spec_path": "data/specs/demo.yaml"},
    ),
    Deployment(
        "regret-map",
        "flows/regret_map.py:regret_map",
        "Sweep + regret/mu heat maps and the worst cell's trade-off curve. On a Dask cluster: job variables "
        "GDP_TASK_RUNNER=dask and DASK_SCHEDULER_ADDRESS=tcp://host:8786.",
        {"spec_path": "data/specs/dpsgd-cifar-map.yaml", "x": "sampling_rate", "y": "noise_multiplier"},
    ),
    Deployment(
        "calibration-sweep",
        "flows/calibration_sweep.py:calibration_sweep",
        "Calibrate the noise multiplier over a (sampling_rate, steps) grid (view `calibrations`).",
        {"spec_path": "data/specs/calibration.yaml"},
    ),
    Deployment(
        "publish-report",
        "flows/publish.py:publish_report",
        "Rebuild the report from the lake (atomic replace).",
    ),
    Deployment(
        "nightly-privacy-audit",
        "flows/privacy_audit.py:privacy_audit",
        "Nightly audit of the model registry: recomputes only model versions whose manifest or gdpcore changed, "
        "republishes models/model_privacy/model_comparisons and the privacy cards; set mlflow_uri to tag MLflow.",
        {"registry": "data/registry"},
        cron="0 2 * * *",
        slug="nightly-registry",
    ),
    Deployment(
        "nightly-mlflow-audit",
        "flows/privacy_audit.py:privacy_audit",
        "Nightly audit of a live MLflow Model Registry: reads each registered version's dp.* description "
        "from its tags or its source run, audits only new or changed versions, writes privacy.* tags back and lists "
        "versions that are not auditable. Set the job variable MLFLOW_TRACKING_URI (e.g. --job-variable "
        'env=\'{"MLFLOW_TRACKING_URI": "http://mlflow:5000"}\' or on the work pool), then resume the schedule '
        "(paused as deployed: there is no tracking server to assume).",
        {"source": "mlflow"},
        cron="30 2 * * *",
        slug="nightly-mlflow-registry",
        active=False,
    ),
)

_HEADER = """\
# Prefect deployments for gdp-audit. GENERATED from flows/deployments.py (python -m flows.deployments): edit there.
#   prefect server start                                  # deployments and schedules need a persistent server
#   prefect config set PREFECT_API_URL=http://127.0.0.1:4200/api
#   prefect work-pool create gdp-process --type process
#   prefect variable set gdp_project_dir "$PWD"           # the checkout workers run in (read by the pull step at run time)
#   prefect worker start --pool gdp-process
#   prefect deploy --all                                  # from the project root
#   prefect deployment run 'grid-sweep/grid-sweep'
# Without a server/work pool: `python -m flows.serve` serves the same {n} deployments from one process.
# Task runner per run or per pool through job variables: GDP_TASK_RUNNER (process | thread | dask) and
# DASK_SCHEDULER_ADDRESS (a running cluster; unset with dask: a temporary LocalCluster). See flows/runners.py.
"""


def prefect_yaml() -> dict[str, Any]:
    """prefect.yaml as a dict."""
    deployments = []
    for d in DEPLOYMENTS:
        entry: dict[str, Any] = {"name": d.name, "description": d.description, "entrypoint": d.entrypoint}
        if d.parameters:
            entry["parameters"] = dict(d.parameters)
        if d.cron:
            entry["schedules"] = [{"cron": d.cron, "timezone": "UTC", "slug": d.slug}]
            if not d.active:
                entry["schedules"][0]["active"] = False
        if d.concurrency_limit:
            entry["concurrency_limit"] = d.concurrency_limit
        entry["work_pool"] = {"name": POOL, "job_variables": {"env": dict(ENV)}}
        deployments.append(entry)
    import prefect

    return {
        "name": "gdp-audit",
        "prefect-version": prefect.__version__,
        "build": None,
        "push": None,
        "pull": PULL,
        "deployments": deployments,
    }


def render_prefect_yaml() -> str:
    doc = prefect_yaml()
    doc.pop("prefect-version")  # not pinned in the file: it would change with every Prefect release
    return _HEADER.format(n=len(DEPLOYMENTS)) + yaml.safe_dump(doc, sort_keys=False, width=120)


def serve_deployments() -> list[Any]:
    """The same deployments as ``RunnerDeployment`` objects for :func:`prefect.serve` (no work pool)."""
    out = []
    for d in DEPLOYMENTS:
        kwargs: dict[str, Any] = {"name": d.name, "description": d.description, "parameters": dict(d.parameters)}
        if d.cron and d.active:
            kwargs["cron"] = d.cron
        elif d.cron:
            from prefect.schedules import Cron

            kwargs["schedules"] = [Cron(d.cron, timezone="UTC", active=False, slug=d.slug)]
        if d.concurrency_limit:
            kwargs["concurrency_limit"] = d.concurrency_limit
        out.append(d.flow().to_deployment(**kwargs))
    return out


if __name__ == "__main__":
    (Path(__file__).resolve().parent.parent / "prefect.yaml").write_text(render_prefect_yaml(), encoding="utf-8")
