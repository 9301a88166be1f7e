"""Hugging Face model cards through huggingface_hub's card classes (extra ``gdp-audit[hf]``; local files, no network):
an existing README.md keeps its front-matter keys and text, the privacy block loads back, the vocabulary is MLflow's."""

from __future__ import annotations

import json

import pytest
from huggingface_hub import ModelCard  # the gdp-audit[hf] extra: CI installs it (no skip)

from tasks.cards import hf_yaml_block, merge_into_readme
from tasks.mlflow_tags import privacy_tags

README = """\
---
license: apache-2.0
language:
- en
tags:
- vision
- cifar10
datasets:
- cifar10
base_model: owner/wrn-40-4
custom_owner_key:
  nested: [1, 2]
---

# WRN-40-4 on CIFAR-10

Owner text: trained with DP-SGD. Do not remove.
"""


def _row() -> dict:
    """An audit row as tasks.audit writes it (numbers of a plain 2-GDP Gaussian; only the card fields matter here)."""
    return {
        "model": "wrn",
        "version": 3,
        "audit_key": "k" * 16,
        "mu": 2.0,
        "mu_lower": 2.0,
        "mu_bound": "exact",
        "mu_cutoff": 0.0,
        "gdp_regret": 0.0,
        "gdp_regret_bound": "exact",
        "gdp_complete": True,
        "verdict": "GDP is a complete description",
        "delta": 1e-5,
        "delta_policy": "1e-05",
        "epsilon": 5.0,
        "epsilon_bound": "upper",
        "eps_deltas": [1e-5, 1e-6],
        "eps_values": [5.0, 5.6],
        "tpr_fprs": [1e-3, 1e-2],
        "tpr": [0.05, 0.2],
        "tpr_bound": "upper",
        "advantage": 0.68,
        "advantage_bound": "upper",
        "bayes_security": 0.32,
        "bayes_security_bound": "lower",
        "accountant": "closed_form",
        "discretization": None,
        "privacy_unit": "example",
        "neighbouring": "add_remove",
        "mechanism_json": json.dumps({"kind": "gaussian", "noise_multiplier": 0.5}),
        "gdpcore_version": "0.1.0",
        "audited_at": "2026-01-01 00:00:00+00:00",
    }


def test_merge_keeps_existing_front_matter_and_text(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(README, encoding="utf-8")
    before = ModelCard.load(readme)
    merge_into_readme(readme, _row(), report_uri="s3://audits/privacy.duckdb")
    after = ModelCard.load(readme)
    data = after.data.to_dict()
    old = before.data.to_dict()
    for key, value in old.items():  # every key kept with its value (tags only gain ours)
        if key != "tags":
            assert data[key] == value, key
    assert data["tags"] == ["vision", "cifar10", "differential-privacy"]
    assert after.text == before.text and "Do not remove." in after.text
    dp = data["differential_privacy"]
    assert dp["mu"] == 2.0 and dp["mu_bound"] == "exact" and dp["neighboring_relation"] == "add_remove"
    assert dp["report"] == "s3://audits/privacy.duckdb"
    # merging again replaces the block (idempotent), keeps the tags unique
    merge_into_readme(readme, _row())
    again = ModelCard.load(readme).data.to_dict()
    assert again["tags"] == data["tags"] and "report" not in again["differential_privacy"]
    assert {k: v for k, v in again.items() if k != "differential_privacy"} == {
        k: v for k, v in data.items() if k != "differential_privacy"
    }


def test_missing_readme_is_created(tmp_path):
    readme = tmp_path / "new" / "README.md"
    merge_into_readme(readme, _row())
    card = ModelCard.load(readme)
    assert card.data.to_dict()["tags"] == ["differential-privacy"] and "# wrn" in card.text


def test_yaml_block_is_card_data_with_the_mlflow_vocabulary():
    block = hf_yaml_block(_row())
    card = ModelCard(block + "\n# x\n")
    dp = card.data.to_dict()["differential_privacy"]
    tags = privacy_tags(_row())
    for key in ("definition", "neighboring_relation", "mu_bound", "verdict", "accountant"):
        assert tags["privacy." + key.replace("_bound", ".bound")] == str(dp[key]), key
    assert "privacy.report_uri" not in tags and "report" not in dp


@pytest.mark.parametrize("bad", ["---\nlicense: [unclosed\n---\n# x\n"])
def test_broken_front_matter_is_refused_and_left_alone(tmp_path, bad):
    readme = tmp_path / "README.md"
    readme.write_text(bad, encoding="utf-8")
    with pytest.raises(Exception):  # noqa: B017 - huggingface_hub's own YAML error
        merge_into_readme(readme, _row())
    assert readme.read_text(encoding="utf-8") == bad
    assert [p.name for p in tmp_path.iterdir()] == ["README.md"]


def _block(card: str) -> str:
    """The section the tool writes, spelled out here: whole-line markers carrying the SHA-256 (16 hex) of the card."""
    import hashlib

    from tasks.mlflow_tags import CARD_BEGIN, CARD_END

    h = hashlib.sha256(card.encode()).hexdigest()[:16]
    return f"{CARD_BEGIN} {h} (replaced by each audit; write above or below) -->\n{card}\n{CARD_END} {h} -->"


def test_mlflow_description_merge_never_cuts_the_owner_text():
    """MLflow side of the same rule (tasks.mlflow_tags.merge_description): owner text kept, card section replaced."""
    from tasks.mlflow_tags import CARD_END, merge_description

    assert merge_description(None, "# card") == _block("# card")
    first = merge_description("Owner notes.", "# card v1")
    assert first == f"Owner notes.\n\n{_block('# card v1')}"
    edited = "Edited.\n\n" + first.split("\n\n", 1)[1] + "\n\nFooter by the owner."
    second = merge_description(edited, "# card v2")
    assert second == f"Edited.\n\n{_block('# card v2')}\n\nFooter by the owner."
    long_owner = "x" * 3990
    assert merge_description(long_owner, "# card") == long_owner  # no room: description untouched (tags only)
    big = merge_description("Owner.", "y" * 10_000)
    assert len(big) <= 4000 and big.startswith("Owner.\n\n") and "truncated" in big
    assert big.rsplit("\n", 1)[1].startswith(CARD_END)
