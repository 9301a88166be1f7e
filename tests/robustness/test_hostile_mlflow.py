"""Hostile MLflow registries: one version never stops the audit, the owner's description and tags survive, and a
complete description is audited.

A real local MLflow registry (SQLite backend in a temporary folder), read and tagged through ``MlflowClient``:

* a ``dp.dp_event`` nested 400 levels (20 KB) validates but cannot be hashed (pydantic's serialization depth): that
  version is *not auditable* with a one-line reason, and the other versions are audited and tagged;
* ``dp.noise_multiplier`` + ``dp.sampling_rate`` + ``dp.steps`` + ``dp.delta`` is a complete description: no
  ``dp.dataset_size`` is needed when no number depends on it;
* the owner's text around, inside or quoting the card markers stays intact across three runs, and an owner's own
  ``privacy.*`` tag on a not-auditable version stays.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.registry.conftest import MLFLOW_ORM_WARNINGS

pytestmark = [pytest.mark.usefixtures("prefect_server"), *MLFLOW_ORM_WARNINGS]

COMPLETE = {"dp.noise_multiplier": "1.1", "dp.sampling_rate": "0.01", "dp.steps": "100", "dp.delta": "1e-5"}


def _deep_event(levels: int = 400) -> str:
    event: dict = {"type": "GaussianDpEvent", "noise_multiplier": 1.0}
    for _ in range(levels):
        event = {"type": "SelfComposedDpEvent", "event": event, "count": 1}
    return json.dumps(event, separators=(",", ":"))


def _client(uri: str):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri, registry_uri=uri)


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    """One audit of a registry holding the deep event next to two complete versions (one opted in to the card)."""
    from flows.privacy_audit import privacy_audit

    tmp = tmp_path_factory.mktemp("hostile-mlflow")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    client = _client(uri)
    client.create_registered_model("complete")
    for sigma, card in (("1.1", "true"), ("2.0", "false")):
        mv = client.create_model_version("complete", source="file:///models/x", description="Owner notes.")
        for key, value in (COMPLETE | {"dp.noise_multiplier": sigma, "gdp_audit.card": card}).items():
            client.set_model_version_tag("complete", mv.version, key, value)
    client.create_registered_model("deep")
    client.create_model_version("deep", source="file:///models/y")
    deep = {"dp.dp_event": _deep_event(), "dp.delta": "1e-5", "dp.dataset_size": "1000"}
    # an owner's own privacy.* tag, and a number an earlier audit wrote (stale: the version is not auditable now)
    deep |= {"privacy.reviewed_by": "alice", "privacy.mu": "0.5", "privacy.mu.bound": "upper"}
    for key, value in deep.items():
        client.set_model_version_tag("deep", "1", key, value)
    summary = privacy_audit(
        source="mlflow", mlflow_uri=uri, lake=str(tmp / "lake"), report=str(tmp / "r.duckdb"), publish=True
    )
    return {"uri": uri, "summary": summary, "tmp": tmp}


def test_one_unhashable_version_does_not_stop_the_audit(audited):
    s = audited["summary"]
    assert sorted(s.models) == ["complete:1", "complete:2"] and s.failed == {}
    assert sorted(s.mlflow_tagged) == ["complete:1", "complete:2"]
    why = s.not_auditable["deep:1"]
    # refused by the DpEvent reader's depth limit (gdpcore.kinds.dp_events.MAX_NESTING) before the spec hash's
    # model_dump could reach pydantic's serialization depth; either way only this version is not auditable
    assert "dp.dp_event" in why and "nested more than 100 levels deep" in why
    assert "\n" not in why and len(why) < 400
    tags = _client(audited["uri"]).get_model_version("deep", "1").tags
    assert tags["privacy.status"] == f"not auditable: {why}"
    for v in ("1", "2"):
        assert _client(audited["uri"]).get_model_version("complete", v).tags["privacy.status"] == "audited"


def test_a_complete_description_without_dataset_size_is_audited(audited):
    """sigma 1.1, q 0.01, 100 steps, delta 1e-5: the tagged eps is an upper bound, so it lies between dp_accounting's
    optimistic PLD (a lower bound on the true eps) and its RDP bound (an upper bound the tight one never exceeds)."""
    import dp_accounting
    from dp_accounting.pld import privacy_loss_distribution as pld
    from dp_accounting.rdp import RdpAccountant

    mv = _client(audited["uri"]).get_model_version("complete", "1")
    tags = mv.tags
    assert tags["privacy.epsilon.bound"] == "upper" and float(tags["privacy.delta"]) == 1e-5
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.1)), 100
    )
    optimistic = pld.from_gaussian_mechanism(
        1.1, sampling_prob=0.01, pessimistic_estimate=False, use_connect_dots=False
    )
    lower = optimistic.self_compose(100).get_epsilon_for_delta(1e-5)
    upper = RdpAccountant().compose(event).get_epsilon(1e-5)
    assert lower <= float(tags["privacy.epsilon"]) <= upper, (lower, tags["privacy.epsilon"], upper)
    # the card names the fixed policy and no N (none was given)
    card = (Path(audited["summary"].cards_dir) / "complete" / "v1" / "card.md").read_text()
    assert "from the declared policy fixed 1e-05. epsilon values" in card and "N = " not in card


def test_the_owners_privacy_tag_on_a_not_auditable_version_stays(audited):
    tags = _client(audited["uri"]).get_model_version("deep", "1").tags
    assert tags["privacy.reviewed_by"] == "alice"  # the owner's
    assert "privacy.mu" not in tags and "privacy.mu.bound" not in tags  # an earlier audit's numbers: removed
    assert tags["dp.delta"] == "1e-5"


def _owner_texts() -> dict[str, str]:
    """Owner descriptions that quote, pair or imitate the card's markers (the current card's own ids included)."""
    from tasks.mlflow_tags import CARD_BEGIN, CARD_END

    fake = "0123456789abcdef"
    return {
        "quotes the BEGIN marker": f"Our registry tool writes {CARD_BEGIN} lines.\n\nSecond paragraph stays.",
        "a BEGIN line of its own": f"Quoted:\n{CARD_BEGIN} {fake} (replaced by each audit; write above or below) -->"
        "\n\nSecond paragraph stays.",
        "an END line": f"Notes.\n{CARD_END} {fake} -->\nMore notes after the END line.",
        "BEGIN text END of its own": f"Intro.\n{CARD_BEGIN} {fake} (replaced by each audit; write above or below) -->\n"
        f"The owner's own section.\n{CARD_END} {fake} -->\nOutro.",
        "the old unpaired markers": "<!-- gdp-audit privacy card: begin (replaced by each audit; write above or "
        "below) -->\nOwner text between old markers.\n<!-- gdp-audit privacy card: end -->",
    }


@pytest.fixture(scope="module")
def row_and_cards(audited):
    """The audit row and card files of complete:1 (tasks.audit, tasks.cards), and a second card standing for a
    later audit whose card text changed."""
    from tasks.audit import compute_audit_row
    from tasks.cards import write_card
    from tasks.mlflow_registry import description_to_manifest

    manifest = description_to_manifest(COMPLETE, name="complete", version=1)
    row = compute_audit_row(manifest, "test")
    first = write_card(row, audited["tmp"] / "cards-a")
    later_dir = audited["tmp"] / "cards-b"
    shutil.copytree(Path(first["markdown"]).parent, later_dir)
    later = {k: str(later_dir / Path(v).name) for k, v in first.items()}
    md = Path(later["markdown"])
    md.write_text(md.read_text() + "\nA later audit's extra line.\n")
    return row, first, later


@pytest.mark.parametrize("case", list(_owner_texts()))
def test_the_owners_description_is_intact_across_three_runs(audited, row_and_cards, case):
    from tasks.mlflow_tags import CARD_BEGIN, publish_to_mlflow, strip_card

    row, first, later = row_and_cards
    owner = _owner_texts()[case]
    uri, name = audited["uri"], "owner-" + case.replace(" ", "-")
    client = _client(uri)
    client.create_registered_model(name)
    client.create_model_version(name, source="file:///models/z", description=owner)
    seen = []
    for card in (first, first, later):  # the second run changes nothing; the third carries a new card
        res = publish_to_mlflow(uri, [(name, "1", row, card)])
        assert res.tagged == [f"{name}:1"] and res.failed == {}
        seen.append(client.get_model_version(name, "1").description)
        assert seen[-1].startswith(owner + "\n\n")  # every character of the owner's text, in place
        assert strip_card(seen[-1]) == owner
        assert seen[-1].count(CARD_BEGIN) == owner.count(CARD_BEGIN) + 1  # one card, never a second one
    assert seen[1] == seen[0]  # nothing changed: nothing rewritten
    assert "A later audit's extra line." in seen[2] and "A later audit's extra line." not in seen[1]
