"""Deployments run as declared: prefect.yaml is generated from flows/deployments.py and flows/serve.py serves
the same table; every deployment, deployed with ``prefect deploy --all`` to a real local server (127.0.0.1) and run
by a process work pool, finishes on a tiny input with a readable run name and distinct artifact keys."""

from __future__ import annotations

import importlib
import inspect
import json
import math
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml
from scipy.stats import norm

import gdpcore
from flows.deployments import DEPLOYMENTS, POOL, PROJECT_VARIABLE, PULL, prefect_yaml, render_prefect_yaml
from tasks.publish import query_report
from tests.robustness.conftest import BIN, Proc, base_env, free_port, healthy, wait_for

ROOT = Path(__file__).resolve().parents[2]


def test_prefect_yaml_is_generated_from_the_table():
    text = (ROOT / "prefect.yaml").read_text()
    assert text == render_prefect_yaml(), "prefect.yaml is stale: run python -m flows.deployments"
    doc = yaml.safe_load(text)
    expected = prefect_yaml()
    expected.pop("prefect-version")
    assert doc == expected
    assert f"same {len(DEPLOYMENTS)} deployments" in text  # the header counts what the file holds


def test_prefect_yaml_entrypoints_parameters_and_schedules():
    from prefect.client.schemas.schedules import CronSchedule
    from prefect.flows import Flow

    doc = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    names = [d["name"] for d in doc["deployments"]]
    assert names == [
        "grid-sweep",
        "regret-map",
        "calibration-sweep",
        "publish-report",
        "nightly-privacy-audit",
        "nightly-mlflow-audit",
    ]
    # resolved by the worker at run time from a Prefect Variable: no path of the deploying machine
    assert doc["pull"] == PULL and "{{ prefect.variables.gdp_project_dir }}" in json.dumps(doc["pull"])
    for dep in doc["deployments"]:
        path, func = dep["entrypoint"].split(":")
        flow = getattr(importlib.import_module(path.removesuffix(".py").replace("/", ".")), func)
        assert isinstance(flow, Flow), dep["entrypoint"]
        inspect.signature(flow.fn).bind(**dep.get("parameters", {}))  # parameters match the flow signature
        for p in dep.get("parameters", {}).values():
            if isinstance(p, str) and p.startswith("data/"):
                assert (ROOT / p).exists(), p
        env = dep["work_pool"]["job_variables"]["env"]
        assert dep["work_pool"]["name"] == POOL and env["GDP_TASK_RUNNER"] in ("process", "thread", "dask")
        assert "DASK_SCHEDULER_ADDRESS" not in env  # no placeholder cluster: a job variable when there is one
        assert not any(str(v).startswith("/") for v in env.values())
    nightly = next(d for d in doc["deployments"] if d["name"] == "nightly-privacy-audit")
    assert nightly["entrypoint"] == "flows/privacy_audit.py:privacy_audit"  # the registry audit
    assert CronSchedule(cron=nightly["schedules"][0]["cron"], timezone="UTC").cron == "0 2 * * *"
    # the MLflow registry audit: no tracking server assumed, so its schedule is paused until the user sets one
    mlflow_nightly = next(d for d in doc["deployments"] if d["name"] == "nightly-mlflow-audit")
    assert mlflow_nightly["parameters"] == {"source": "mlflow"} and mlflow_nightly["schedules"][0]["active"] is False
    assert "MLFLOW_TRACKING_URI" not in mlflow_nightly["work_pool"]["job_variables"]["env"]


def test_serve_serves_the_same_table():
    from flows.serve import deployments

    deps = deployments()
    doc = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    assert [d.name for d in deps] == [d["name"] for d in doc["deployments"]]
    for served, declared in zip(deps, doc["deployments"], strict=True):
        assert served.entrypoint.replace("\\", "/").endswith(declared["entrypoint"]), served.entrypoint
        assert served.parameters == declared.get("parameters", {})
        crons = [s.schedule.cron for s in served.schedules or []]
        assert crons == [s["cron"] for s in declared.get("schedules", [])]


_DRIVER = r"""
import json, sys
from prefect.deployments import run_deployment
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

runs, env = json.loads(sys.argv[1]), json.loads(sys.argv[2])
out = {}
for name, params in runs:
    fr = run_deployment(name, parameters=params, job_variables={"env": env}, timeout=240, poll_interval=1)
    out[name] = {"state": fr.state.type.value, "message": fr.state.message, "run_name": fr.name, "id": str(fr.id)}
with get_client(sync_client=True) as client:
    for info in out.values():
        arts = client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[info["id"]])))
        info["artifacts"] = [a.key for a in arts if a.key]
    out["_pull"] = {d.name: d.pull_steps for d in client.read_deployments()}
print("RESULT " + json.dumps(out))
"""

TINY_REGISTRY = """\
name: tiny-a
version: 1
privacy_unit: example
neighbouring: add_remove
dataset_size: 10000
delta: 1.0e-5
mechanism:
  dpsgd: {noise_multiplier: 1.0, batch_size: 10000, steps: 4}
"""


@pytest.mark.slow  # a real server, `prefect deploy --all`, a process worker, five flow-run subprocesses (~2 min)
@pytest.mark.subprocess  # a `prefect server`, `prefect deploy`, a worker
@pytest.mark.timeout(900)  # ~2 min idle, server start-up and five flow-run processes; 4x that at load 8
def test_every_deployment_runs_on_a_local_server_with_a_process_pool(tmp_path):
    home = tmp_path / "prefect-home"
    home.mkdir()
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = base_env(home)
    env.update(PREFECT_SERVER_API_HOST="127.0.0.1", PREFECT_SERVER_API_PORT=str(port), PREFECT_UI_ENABLED="false")
    for svc in ("LATE_RUNS", "FOREMAN", "CANCELLATION_CLEANUP", "PAUSE_EXPIRATIONS", "SCHEDULER"):
        env[f"PREFECT_SERVER_SERVICES_{svc}_ENABLED"] = "false"
    server = Proc(
        [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port), "--no-ui"],
        tmp_path / "server.log",
        env,
    )
    worker = None
    try:
        wait_for(lambda: healthy(url) or (not server.alive() and pytest.fail(server.log()[-3000:])), 120, "server")
        cli = base_env(home, url) | {"PREFECT_WORKER_QUERY_SECONDS": "1"}

        def prefect(*args: str) -> subprocess.CompletedProcess:
            out = subprocess.run(
                [str(BIN / "prefect"), "--no-prompt", *args], env=cli, cwd=ROOT, capture_output=True, text=True
            )
            assert out.returncode == 0, (args, out.stdout[-3000:], out.stderr[-3000:])
            return out

        prefect("work-pool", "create", POOL, "--type", "process")
        prefect("variable", "set", PROJECT_VARIABLE, str(ROOT))
        prefect("deploy", "--all")
        worker = Proc(
            [str(BIN / "prefect"), "worker", "start", "--pool", POOL, "--limit", "1"], tmp_path / "worker.log", cli
        )
        spec = tmp_path / "tiny.yaml"
        spec.write_text(
            "name: tiny\nmechanism: subsampled_gaussian\ngrid: {noise_multiplier: [0.8, 1.5], sampling_rate: 1.0, "
            "steps: [10, 40]}\ndeltas: [1.0e-5]\nfprs: [0.1]\nrepresentations: [gdp]\nchunk_size: 2\n"
        )
        cal = tmp_path / "cal.yaml"
        cal.write_text("name: cal\ngrid: {sampling_rate: [1.0], steps: [10]}\ntarget: {advantage: 0.1}\n")
        (tmp_path / "registry").mkdir()
        (tmp_path / "registry" / "a.yaml").write_text(textwrap.dedent(TINY_REGISTRY))
        lake, report = tmp_path / "lake", tmp_path / "reports" / "privacy.duckdb"
        runs = [
            ["grid-sweep/grid-sweep", {"spec_path": str(spec)}],
            ["regret-map/regret-map", {"spec_path": str(spec), "x": "steps", "y": "noise_multiplier"}],
            ["calibration-sweep/calibration-sweep", {"spec_path": str(cal)}],
            ["publish-report/publish-report", {}],
            ["privacy-audit/nightly-privacy-audit", {"registry": str(tmp_path / "registry")}],
        ]
        job_env = {
            "GDP_TASK_RUNNER": "process",  # as declared
            "GDP_MAX_WORKERS": "1",
            "GDP_LAKE": str(lake),
            "GDP_REPORT": str(report),
        }
        out = subprocess.run(
            [str(BIN / "python"), "-c", _DRIVER, json.dumps(runs), json.dumps(job_env)],
            env=cli,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert out.returncode == 0, (out.stdout[-3000:], out.stderr[-3000:], worker.log()[-5000:])
        result = json.loads(out.stdout.split("RESULT ", 1)[1])
    finally:
        if worker is not None:
            worker.stop()
        server.stop()
    log = (tmp_path / "worker.log").read_text(errors="replace")
    for name, _ in runs:
        assert result[name]["state"] == "COMPLETED", (name, result[name], log[-5000:])
        keys = result[name]["artifacts"]
        assert keys and len(keys) == len(set(keys)), (name, keys)  # one artifact per key within a run
    names = {n.split("/")[1]: result[n]["run_name"] for n, _ in runs}
    assert names["grid-sweep"].startswith("sweep-tiny-") and names["regret-map"].startswith("regret-map-tiny-")
    assert names["calibration-sweep"].startswith("calibration-cal-") and names["publish-report"].startswith("publish-")
    assert names["nightly-privacy-audit"].startswith("audit-registry-")
    assert {"sweep-progress-tiny", "sweep-tiny"} <= set(result["grid-sweep/grid-sweep"]["artifacts"])
    assert all(steps == PULL for steps in result["_pull"].values()), result["_pull"]  # unresolved: no machine path

    # the outputs, against closed forms: T compositions of a sigma-Gaussian are (sqrt(T)/sigma)-GDP
    _, cells = query_report(report, "SELECT noise_multiplier, steps, mu FROM cells WHERE spec = 'tiny'")
    assert len(cells) == 4
    for sigma, steps, mu in cells:
        assert mu == pytest.approx(math.sqrt(steps) / sigma, rel=1e-6)
    # advantage of mu-GDP is 2 Phi(mu/2) - 1: the target 0.1 is met exactly at mu = 2 Phi^-1(0.55)
    _, cal_rows = query_report(report, "SELECT noise_multiplier, achieved, status FROM calibrations")
    ((sigma, achieved, status),) = cal_rows
    assert status == "ok" and achieved <= 0.1
    assert sigma == pytest.approx(math.sqrt(10) / (2 * norm.ppf(0.55)), rel=1e-3)
    _, audit = query_report(report, "SELECT model, version, mu FROM model_privacy")
    ref = gdpcore.analyze(gdpcore.SubsampledGaussian(noise_multiplier=1.0, sampling_rate=1.0, steps=4))
    assert audit == [("tiny-a", 1, pytest.approx(ref.mu, rel=1e-6))]
    assert sorted(p.name for p in (report.parent / "plots" / "tiny").glob("*.png"))
