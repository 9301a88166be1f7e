"""prefect.yaml and flows.serve describe runnable deployments (entrypoints import, parameters bind, cron parses)."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_prefect_yaml_entrypoints_and_schedules():
    from prefect.flows import Flow

    doc = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    assert doc["pull"] and doc["deployments"]
    names = {d["name"] for d in doc["deployments"]}
    assert {"grid-sweep", "regret-map", "nightly-privacy-audit", "publish-report"} <= names
    for dep in doc["deployments"]:
        path, func = dep["entrypoint"].split(":")
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        flow = getattr(module, func)
        assert isinstance(flow, Flow), dep["entrypoint"]
        inspect.signature(flow.fn).bind(**dep.get("parameters", {}))  # parameters match the flow signature
        for p in dep.get("parameters", {}).values():
            if isinstance(p, str) and p.endswith(".yaml"):
                assert (ROOT / p).exists(), p
        assert dep["work_pool"]["name"] == "gdp-process"
        assert dep["work_pool"]["job_variables"]["env"]["GDP_TASK_RUNNER"] in ("process", "thread", "dask")
    nightly = next(d for d in doc["deployments"] if d["name"] == "nightly-privacy-audit")
    from prefect.client.schemas.schedules import CronSchedule

    assert CronSchedule(cron=nightly["schedules"][0]["cron"], timezone="UTC").cron == "0 2 * * *"


def test_serve_deployments_build_without_a_server():
    from flows.serve import deployments

    deps = deployments()
    assert [d.name for d in deps] == ["grid-sweep", "regret-map", "nightly-privacy-audit", "publish-report"]
    assert deps[2].schedules and deps[2].schedules[0].schedule.cron == "0 2 * * *"
