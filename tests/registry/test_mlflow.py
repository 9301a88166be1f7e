"""privacy.* tags on a real local MLflow registry (SQLite backend in tmp_path), read back through MlflowClient."""

from __future__ import annotations

import pytest

import gdpcore

pytestmark = [
    pytest.mark.usefixtures("prefect_server"),
    # Importing MLflow's SQLAlchemy store runs sqlalchemy.orm.configure_mappers() over every ORM registry in the
    # process. Under SQLAlchemy 2.1 that warns about MLflow's own `lazy="noload"` relationships and about Prefect's
    # server UUID column type (no operator_classes). Both are third-party deprecations, not ours: ignored by message.
    pytest.mark.filterwarnings(
        "ignore:The ``noload`` loader strategy is deprecated:sqlalchemy.exc.SADeprecationWarning"
    ),
    pytest.mark.filterwarnings(
        "ignore:Type object <class 'prefect.server.utilities.database.UUID'> does not refer to an OperatorClass"
        ":sqlalchemy.exc.SADeprecationWarning"
    ),
]


@pytest.mark.slow  # MLflow's SQLite migrations + one audit: about 15 s on 2 cores
def test_tags_description_and_card_artifacts_on_a_real_registry(tiny_registry, tmp_path):
    import mlflow  # the gdp-audit[mlflow] extra: CI must install it (no skip)
    from mlflow import MlflowClient

    from flows.privacy_audit import privacy_audit

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    exp = client.create_experiment("dp", artifact_location=(tmp_path / "artifacts").as_uri())
    run = client.create_run(exp)
    client.create_registered_model("tiny-a")
    client.create_model_version("tiny-a", source=f"runs:/{run.info.run_id}/model", run_id=run.info.run_id)
    # tiny-b is not registered: reported as missing, not an error
    from .conftest import TINY_A

    reg, write = tiny_registry
    write("a.yaml", TINY_A.format(version=1, sigma=1.0) + "claimed: {epsilon: 1.2, delta: 1.0e-5, accountant: RDP}\n")

    s = privacy_audit(
        registry=str(tiny_registry[0]), lake=str(tmp_path / "lake"), report=str(tmp_path / "r.duckdb"), mlflow_uri=uri
    )
    assert s.mlflow_tagged == ["tiny-a:1"] and s.mlflow_missing == ["tiny-b:1"]

    rep = gdpcore.analyze(gdpcore.SubsampledGaussian(noise_multiplier=1.0, sampling_rate=0.01, steps=50))
    mv = MlflowClient(tracking_uri=uri, registry_uri=uri).get_model_version("tiny-a", "1")
    tags = mv.tags
    assert float(tags["privacy.mu"]) == pytest.approx(rep.mu, rel=1e-5) and tags["privacy.mu.bound"] == "upper"
    assert float(tags["privacy.gdp_regret"]) == pytest.approx(rep.gdp_regret, rel=1e-2)
    assert float(tags["privacy.epsilon"]) == pytest.approx(float(rep.epsilon(1e-5)), rel=1e-5)
    assert tags["privacy.epsilon.bound"] == "upper" and float(tags["privacy.delta"]) == 1e-5
    assert tags["privacy.accountant"] == rep.accountant and tags["privacy.discretization"] == f"{rep.discretization:g}"
    assert tags["privacy.report_uri"] == s.report and tags["privacy.unit"] == "example"
    assert tags["privacy.bayes_security.bound"] == "lower" and tags["privacy.verdict"].startswith("GDP is")
    # the published claim and its re-check (dp_accounting RDP gives 1.136 <= 1.2; the tight bound certifies it)
    assert tags["privacy.claim.epsilon"] == "1.2" and tags["privacy.claim.accountant"] == "RDP"
    assert tags["privacy.claim.status"] == "claim looser than its accountant"
    assert float(tags["privacy.claim.reproduced_epsilon"]) == pytest.approx(1.13576, abs=1e-4)
    assert tags["privacy.claim.reproduced_epsilon.bound"] == "upper" and tags["privacy.claim.certified"] == "true"
    assert mv.description.startswith("# Privacy card: tiny-a v1")
    arts = {a.path for a in client.list_artifacts(run.info.run_id, "privacy/v1")}
    assert arts == {"privacy/v1/card.md", "privacy/v1/curve.png", "privacy/v1/model_card.yaml"}
    assert mlflow.__version__
