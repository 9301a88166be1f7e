"""MLflow tags say which sampler was accounted and which bound each number is (tasks.mlflow_tags): a balls-in-bins
run's upper numbers (the deterministic-batch guarantee) and its proven lower end, a cyclic run's exact numbers, a
shuffled run's Poisson estimate and proven lower bound.

Independent truth: the cyclic run is exactly (sqrt(epochs)/sigma)-GDP (Dong, Roth, Su 2022, Cor. 3.3), so its
mu tag is that closed form; the balls-in-bins ends are checked against the same closed form from above (no end can
exceed the exact value of the deterministic-batch mechanism that dominates it)."""

from __future__ import annotations

import math

import pytest

from tasks.audit import compute_audit_row
from tasks.manifest import validate_manifest
from tasks.mlflow_tags import is_tool_tag, privacy_tags

_HISTORY = {"opacus_history": {"mechanism": "rdp", "history": [[1.1, 1 / 235, 4700]]}}


def _row(sampler: str) -> dict:
    m = validate_manifest(
        {"name": "s", "version": 1, "dataset_size": 60000, "delta": 1e-5, "sampler": sampler, "mechanism": _HISTORY}
    )
    return compute_audit_row(m, "test")


@pytest.fixture(scope="module")
def rows():
    return {s: _row(s) for s in ("cyclic", "balls_in_bins", "shuffle")}


def test_cyclic_tags_are_exact_and_name_the_kind(rows):
    tags = privacy_tags(rows["cyclic"])
    assert tags["privacy.sampling"] == "cyclic" and tags["privacy.sampling.kind"] == "cyclic_gaussian"
    assert tags["privacy.mu.bound"] == "exact" and float(tags["privacy.mu"]) == pytest.approx(math.sqrt(20) / 1.1)
    assert "privacy.mu.lower" not in tags and all(is_tool_tag(k) for k in tags)


def test_balls_in_bins_tags_give_both_ends_with_their_labels(rows):
    tags = privacy_tags(rows["balls_in_bins"])
    exact_cyclic = math.sqrt(20) / 1.1
    assert tags["privacy.sampling.kind"] == "balls_in_bins_gaussian"
    # the upper end is at most the deterministic-batch guarantee that dominates it (equal when no amplification is
    # claimed), the lower end below the upper one
    assert tags["privacy.mu.bound"] == "upper" and float(tags["privacy.mu"]) <= exact_cyclic * (1 + 1e-9)
    assert (
        tags["privacy.mu.lower.bound"] == tags["privacy.epsilon.lower.bound"] == "lower (proven, Chua et al. 2025 pair)"
    )
    assert 0 < float(tags["privacy.mu.lower"]) <= float(tags["privacy.mu"])
    assert 0 < float(tags["privacy.epsilon.lower"]) < float(tags["privacy.epsilon"])
    assert all(is_tool_tag(k) for k in tags)


def test_shuffled_tags_give_the_estimate_and_the_proven_lower_bound(rows):
    tags = privacy_tags(rows["shuffle"])
    assert tags["privacy.sampling"] == "shuffle" and "privacy.sampling.kind" not in tags
    assert tags["privacy.epsilon.bound"] == "estimate"
    assert tags["privacy.shuffle.epsilon_lower.bound"] == tags["privacy.shuffle.mu_lower.bound"] == "lower"
    assert tags["privacy.shuffle.analysis"] == "Chua et al. 2024"
    assert all(is_tool_tag(k) for k in tags)
