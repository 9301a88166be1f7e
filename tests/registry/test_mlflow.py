"""privacy.* tags on a real local MLflow registry (SQLite backend in tmp_path), read back through MlflowClient."""

from __future__ import annotations

import pytest
import yaml

import gdpcore
from tests.registry.conftest import MLFLOW_ORM_WARNINGS

pytestmark = [pytest.mark.usefixtures("prefect_server"), *MLFLOW_ORM_WARNINGS]


@pytest.mark.slow  # MLflow's SQLite migrations + one audit: about 15 s on 2 cores
def test_tags_description_and_card_artifacts_on_a_real_registry(tiny_registry, tmp_path, monkeypatch):
    import mlflow  # the gdp-audit[mlflow] extra: CI must install it (no skip)
    from mlflow import MlflowClient

    from flows.privacy_audit import privacy_audit

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    exp = client.create_experiment("dp", artifact_location=(tmp_path / "artifacts").as_uri())
    run = client.create_run(exp)
    client.create_registered_model("tiny-a")
    owner_notes = "Owner notes: trained on the 2024 snapshot; contact ml-team."
    client.create_model_version(
        "tiny-a", source=f"runs:/{run.info.run_id}/model", run_id=run.info.run_id, description=owner_notes
    )
    # tiny-b is not registered: reported as missing, not an error
    from .conftest import TINY_A

    reg, write = tiny_registry
    write("a.yaml", TINY_A.format(version=1, sigma=1.0) + "claimed: {epsilon: 1.2, delta: 1.0e-5, accountant: RDP}\n")

    monkeypatch.delenv("GDP_REPORT_URI", raising=False)
    monkeypatch.delenv("PREFECT_UI_URL", raising=False)
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
    assert tags["privacy.unit"] == "example" and tags["privacy.neighboring_relation"] == "add_remove"
    # no local path of the auditing machine, no link into the run's temporary Prefect server
    assert "privacy.report_uri" not in tags and "privacy.audit_flow_run" not in tags
    assert not any(str(tmp_path) in v for v in tags.values())
    assert tags["privacy.bayes_security.bound"] == "lower" and tags["privacy.verdict"].startswith("GDP is")
    # the published claim and its re-check (dp_accounting RDP gives 1.136 <= 1.2; the tight bound certifies it)
    assert tags["privacy.claim.epsilon"] == "1.2" and tags["privacy.claim.accountant"] == "RDP"
    assert tags["privacy.claim.status"] == "claim looser than its accountant"
    assert float(tags["privacy.claim.reproduced_epsilon"]) == pytest.approx(1.13576, abs=1e-4)
    assert tags["privacy.claim.reproduced_epsilon.bound"] == "upper" and tags["privacy.claim.certified"] == "true"
    # the owner's description is kept; the card sits in its own marked section after it
    from tasks.mlflow_tags import CARD_BEGIN, CARD_END

    assert mv.description.startswith(owner_notes + "\n\n" + CARD_BEGIN)
    assert mv.description.split("\n")[3] == "# Privacy card: tiny-a v1"  # the card's first line, after the BEGIN line
    assert mv.description.rsplit("\n", 1)[1].startswith(CARD_END)
    # the same vocabulary as the HF block (tasks.cards)
    hf = yaml.safe_load((tmp_path / "cards" / "tiny-a" / "v1" / "model_card.yaml").read_text().strip("-\n"))
    dp = hf["differential_privacy"]
    assert tags["privacy.unit"] == dp["privacy_unit"]
    for key in ("definition", "neighboring_relation", "mu_bound", "verdict", "accountant"):
        assert tags["privacy." + key.replace("_bound", ".bound")] == str(dp[key]), key
    assert "report" not in dp

    # a re-audit with a configured report URI and a persistent UI: the card section is replaced, not appended again,
    # and the owner's edit above it survives
    client.update_model_version(
        "tiny-a", "1", description="Edited owner notes.\n\n" + mv.description.split("\n\n", 1)[1]
    )
    monkeypatch.setenv("PREFECT_UI_URL", "https://prefect.example.org")
    privacy_audit(
        registry=str(tiny_registry[0]),
        lake=str(tmp_path / "lake"),
        report=str(tmp_path / "r.duckdb"),
        mlflow_uri=uri,
        report_uri="s3://audits/privacy.duckdb",
    )
    mv2 = client.get_model_version("tiny-a", "1")
    assert mv2.description.startswith("Edited owner notes.\n\n" + CARD_BEGIN)
    assert mv2.description.count(CARD_BEGIN) == 1 and mv2.description.rsplit("\n", 1)[1].startswith(CARD_END)
    assert mv2.tags["privacy.report_uri"] == "s3://audits/privacy.duckdb"
    assert mv2.tags["privacy.audit_flow_run"].startswith("https://prefect.example.org/runs/flow-run/")
    arts = {a.path for a in client.list_artifacts(run.info.run_id, "privacy/v1")}
    assert arts == {"privacy/v1/card.md", "privacy/v1/curve.png", "privacy/v1/model_card.yaml"}
    assert mlflow.__version__
