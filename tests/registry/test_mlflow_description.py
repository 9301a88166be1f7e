"""The MLflow registry as the source: a registry version's dp.* description -> manifest, without a server
(tasks.mlflow_registry)."""

from __future__ import annotations

import pytest

from tasks.mlflow_registry import NotAuditable, description_to_manifest, lake_model_name, merge_description, public_uri

BASE = {"dp.noise_multiplier": "1.0", "dp.sampling_rate": "0.01", "dp.steps": "10", "dp.dataset_size": "1000"}


def test_description_mapping_errors_name_the_key():
    base = BASE
    with pytest.raises(NotAuditable, match=r"missing dp\.delta$"):
        description_to_manifest(base, name="m", version=1)
    with pytest.raises(NotAuditable, match=r"dp\.steps='10\.5' is not an integer"):
        description_to_manifest(base | {"dp.delta": "1e-5", "dp.steps": "10.5"}, name="m", version=1)
    with pytest.raises(NotAuditable, match=r"^dp\.sampling_rate: Input should be less than or equal to 1"):
        description_to_manifest(base | {"dp.delta": "1e-5", "dp.sampling_rate": "2"}, name="m", version=1)
    m = description_to_manifest(base | {"dp.delta": "1/N^1.1"}, name="m", version=1)
    assert m.delta_value == pytest.approx(1000**-1.1)
    # an audio model's sample_rate is not a sampling rate; Adam's epsilon is not a claim
    desc, _, refused = merge_description({}, {"noise_multiplier": "1", "sample_rate": "16000", "epsilon": "1e-8"}, {})
    assert "dp.sampling_rate" not in desc and "dp.epsilon" not in desc and "sample_rate=16000" in refused
    desc, _, refused = merge_description({}, {"noise_multiplier": "1", "batch_size": "64", "num_microbatches": "8"}, {})
    assert desc == {} and "num_microbatches=8" in refused


def test_version_tags_win_over_run_params_and_framework_names_only_from_params():
    desc, places, refused = merge_description(
        {"dp.noise_multiplier": "2.0"},
        {"dp.noise_multiplier": "1.0", "sample_rate": "0.02", "epochs": "3", "target_delta": "1e-5"},
        {"dp.dataset_size": "5000", "noise_multiplier": "9"},  # an unprefixed run *tag* is not read
    )
    assert desc == {
        "dp.noise_multiplier": "2.0",
        "dp.dataset_size": "5000",
        "dp.sampling_rate": "0.02",
        "dp.epochs": "3",
        "dp.delta": "1e-5",
    }
    assert places == ["model-version tags", "run params", "run tags"] and refused is None
    m = description_to_manifest(desc, name="m", version=2)
    # Opacus's convention: 3 epochs of 1/0.02 = 50 steps
    assert m.mechanism_dict()["steps"] == 150 and m.mechanism_dict()["noise_multiplier"] == 2.0


def test_opacus_poisson_flag_and_claims():
    desc, _, _ = merge_description({}, {"noise_multiplier": "1", "poisson_sampling": "False"}, {})
    assert desc["dp.sampler"] == "shuffle"
    claim = BASE | {"dp.delta": "1/N^1.1", "dp.epsilon": "3", "dp.accountant": "RDP"}
    m = description_to_manifest(claim, name="m", version=1)
    assert m.claimed.epsilon == 3.0 and m.claimed.accountant == "RDP"
    assert m.claimed.delta == pytest.approx(1000**-1.1)  # the claim is at the declared delta
    with pytest.raises(NotAuditable, match="missing dp.epsilon"):
        description_to_manifest(BASE | {"dp.delta": "1e-5", "dp.accountant": "RDP"}, name="m", version=1)
    with pytest.raises(NotAuditable, match="give one of dp.opacus_history, dp.phases"):
        description_to_manifest(
            {"dp.opacus_history": "[[1.0, 0.01, 5]]", "dp.phases": "[]", "dp.dataset_size": "10", "dp.delta": "1e-5"},
            name="m",
            version=1,
        )


def test_names_and_uris():
    assert lake_model_name("cifar10-wrn") == "cifar10-wrn"
    a, b = lake_model_name("team a/model"), lake_model_name("team_a/model")
    assert a.startswith("team_a_model-") and a != b  # the hash keeps two names apart
    assert public_uri("https://user:token@mlflow.example.org:5000/path?x=1") == "https://mlflow.example.org:5000/path"
    assert (
        public_uri("sqlite:////srv/mlflow.db") == "sqlite:////srv/mlflow.db"
        and public_uri("databricks") == "databricks"
    )


def test_richer_forms_and_sampler_honesty():
    import json

    # TF-Privacy's statement parameters: q = B/N and ceil(epochs / q) = 14,063 steps, TF-Privacy's own count for
    # N=60,000, B=256, 60 epochs (compute_dp_sgd_privacy_statement; README "From my training run")
    tf = {"batch_size": 256, "epochs": 60, "noise_multiplier": 1.1, "used_microbatching": False}
    m = description_to_manifest(
        {"dp.tf_privacy": json.dumps(tf), "dp.dataset_size": "60000", "dp.delta": "1e-5"}, name="m", version=1
    )
    assert m.mechanism_dict()["steps"] == 14_063 and m.estimate_reason is None
    shuffled = description_to_manifest(BASE | {"dp.delta": "1e-5", "dp.sampler": "shuffle"}, name="m", version=1)
    assert shuffled.sampler_value == "shuffle" and shuffled.estimate_reason
    with pytest.raises(NotAuditable, match=r"^dp\.dp_event: "):
        description_to_manifest(
            {"dp.dp_event": '{"type": "NoSuchDpEvent"}', "dp.dataset_size": "10", "dp.delta": "1e-5"},
            name="m",
            version=1,
        )


def test_cli_errors_are_one_line_and_write_nothing(tmp_path, capsys):
    from flows.cli import main
    from tests.robustness.conftest import free_port

    store = ["--lake", str(tmp_path / "lake"), "--report", str(tmp_path / "r.duckdb")]
    assert main(["audit", "data/registry", "--model", "x", *store]) == 2
    assert "--model selects registered models of the MLflow registry" in capsys.readouterr().err
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    assert main(["audit", "--mlflow-uri", uri, *store]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gdp audit: error: --mlflow-uri {uri}: ") and "Traceback" not in err
    assert not (tmp_path / "lake").exists() and not (tmp_path / "r.duckdb").exists()


def test_strip_card_keeps_the_owner_text():
    from tasks.mlflow_tags import CARD_BEGIN, CARD_END, merge_description, strip_card

    owner = "Owner notes.\n\nMore notes."
    with_card = merge_description(owner, "# Privacy card\n\nnumbers")
    assert with_card.startswith(owner) and CARD_BEGIN in with_card
    assert strip_card(with_card) == owner and strip_card(owner) == owner and strip_card(None) == ""
    around = f"Above.\n\n{merge_description(None, 'card')}\nBelow."
    assert strip_card(around) == "Above.\n\nBelow."
    owners = f"Above.\n\n{CARD_BEGIN}\ncard\n{CARD_END}\nBelow."  # markers the owner wrote: their text, kept
    assert strip_card(owners) == owners


def test_hostile_json_is_not_auditable_not_a_crash():
    deep = "[" * 100_000 + "]" * 100_000
    for key in ("dp.gdpcore", "dp.dp_event", "dp.opacus_history"):
        with pytest.raises(NotAuditable) as info:
            description_to_manifest({key: deep, "dp.dataset_size": "10", "dp.delta": "1e-5"}, name="m", version=1)
        assert info.value.keys == [key]


def test_every_tag_the_tool_writes_is_in_the_vocabulary_it_deletes_from():
    """A not-auditable version loses only tags the tool writes (tasks.mlflow_tags.is_tool_tag): that vocabulary must
    hold every key privacy_tags can produce - with a claim, evidence, an estimate reason, a report URI and a run link."""
    from tasks.audit import compute_audit_row
    from tasks.mlflow_tags import is_tool_tag, privacy_tags

    desc = BASE | {"dp.delta": "1e-5", "dp.epsilon": "3", "dp.accountant": "RDP", "dp.sampler": "shuffle"}
    row = compute_audit_row(description_to_manifest(desc, name="m", version=1), "test")
    assert row["estimate_reason"] and row["claim_status"]
    row["evidence"] = {
        "verdict": "consistent",
        "mu_lower": 0.1,
        "confidence": 0.95,
        "method": "m",
        "method_id": "m-1",
        "synthetic": True,
        "evidence_key": "k",
    }
    tags = privacy_tags(row, report_uri="s3://r", flow_run="https://ui/run")
    assert {k for k in tags if k.startswith("privacy.evidence.")} and "privacy.claim.status" in tags
    assert [k for k in [*tags, "privacy.card"] if not is_tool_tag(k)] == []
    assert not is_tool_tag("privacy.reviewed_by") and not is_tool_tag("privacy.evidence.owner_note")
