"""Evidence read from MLflow (tasks.evidence_mlflow): a canary-scores artifact on the model version's source run is
audited like a manifest's scores file; the version gets privacy.evidence.* tags (removed with the artifact). Against
a SQLite tracking store and against a real ``mlflow server`` (tests/registry/test_mlflow_live.py's fixture)."""

from __future__ import annotations

import pytest

from tasks.publish import query_report

from .conftest import MLFLOW_ORM_WARNINGS, SAMPLE_REGISTRY
from .test_mlflow_live import mlflow_server  # noqa: F401 - the live `mlflow server` fixture (module-scoped)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_server"), *MLFLOW_ORM_WARNINGS]  # ~90 s

DESC = {
    "dp.noise_multiplier": "1.0",
    "dp.sampling_rate": "0.02",
    "dp.steps": "100",
    "dp.dataset_size": "60000",
    "dp.delta": "1e-5",
}


@pytest.fixture(params=["sqlite", "server"])
def tracking_uri(request, tmp_path):
    pytest.importorskip("mlflow")
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'mlflow.db'}"
    return request.getfixturevalue("mlflow_server")


def test_scores_artifact_on_the_source_run_is_audited_and_tagged(tracking_uri, tmp_path):
    from mlflow import MlflowClient

    from flows.privacy_audit import privacy_audit

    uri = tracking_uri
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    exp = client.create_experiment("canaries", artifact_location=(tmp_path / "artifacts").as_uri())
    client.create_registered_model("canary-mlp")
    for v in (1, 2):
        run = client.create_run(exp)
        for k, val in DESC.items():
            client.log_param(run.info.run_id, k, val)
        client.set_tag(run.info.run_id, "dp.evidence.synthetic", "true")
        src = tmp_path / f"v{v}" / "canary_scores.npz"
        src.parent.mkdir()
        src.write_bytes((SAMPLE_REGISTRY / "evidence" / f"canary-mlp-v{v}.npz").read_bytes())
        client.log_artifact(run.info.run_id, str(src), artifact_path="privacy")
        client.set_terminated(run.info.run_id)
        client.create_model_version("canary-mlp", source=run.info.artifact_uri, run_id=run.info.run_id)
    kw = dict(source="mlflow", mlflow_uri=uri, lake=str(tmp_path / "lake"), report=str(tmp_path / "r.duckdb"))
    s = privacy_audit(**kw)
    assert s.failed == {} and s.evidence_checked == ["canary-mlp:1", "canary-mlp:2"]
    assert len(s.evidence_violations) == 1 and s.evidence_violations[0].startswith("canary-mlp:2: ")
    _, rows = query_report(tmp_path / "r.duckdb", "SELECT version, verdict, synthetic FROM evidence ORDER BY version")
    assert rows == [(1, "consistent", True), (2, "violates_claim", True)]
    tags = client.get_model_version("canary-mlp", "2").tags
    assert tags["privacy.evidence.verdict"] == "violates_claim" and tags["privacy.evidence.synthetic"] == "true"
    assert float(tags["privacy.evidence.mu_lower"]) > float(tags["privacy.mu"])
    assert tags["privacy.evidence.confidence"] == "0.975" and tags["privacy.evidence.method"].startswith("order")
    assert tags["privacy.evidence.method_id"] == "cp-orderstat-bonferroni"
    s2 = privacy_audit(**kw)  # the same artifacts again: nothing recomputed
    assert s2.computed == [] and s2.evidence_violations == s.evidence_violations
    assert len(list((tmp_path / "lake" / "registry" / "evidence").rglob("*.parquet"))) == 2
    # the artifact removed from v2's run: its privacy.evidence.* tags go with it
    run_id = client.get_model_version("canary-mlp", "2").run_id
    import shutil
    from urllib.parse import urlparse

    shutil.rmtree(urlparse(client.get_run(run_id).info.artifact_uri).path + "/privacy")
    s3 = privacy_audit(**kw)
    assert s3.evidence_checked == ["canary-mlp:1"] and s3.evidence_violations == []
    tags = client.get_model_version("canary-mlp", "2").tags
    assert not [k for k in tags if k.startswith("privacy.evidence.")] and tags["privacy.status"] == "audited"
