"""The sample registry's tuned model (data/registry/tuned-classifier.yaml): each version states best-of-K tuning and
its card shows the tuning-adjusted bound, labelled and with its analysis named, next to the single run's number.

Independent truth: the fixed-K version's bound is the 10-fold composition of the single run, computed here by
dp_accounting's own PLD accountant on the DpEvent of 10 x 7,032 Poisson-subsampled Gaussian steps (not by gdpcore);
the random-K version's bound is at least the single run's and below the fixed-K one at the same E[K] (Papernot &
Steinke 2022: a random K avoids the factor K; their Thm 2 itself is checked in tests/test_tuning.py)."""

from __future__ import annotations

import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant

from tasks.audit import compute_audit_row
from tasks.cards import render_markdown
from tasks.manifest import load_manifest_file

from .conftest import SAMPLE_REGISTRY


@pytest.fixture(scope="module")
def tuned_rows():
    manifests = load_manifest_file(SAMPLE_REGISTRY / "tuned-classifier.yaml")
    return {m.version: (m, compute_audit_row(m, "test")) for m in manifests}


def test_fixed_k_version_is_dp_accountings_k_fold_composition(tuned_rows):
    m, row = tuned_rows[2]
    assert m.tuning == {"distribution": "fixed", "count": 10}
    q = 256 / 60000
    event = dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(1.1)), 10 * 7032)
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    reference = acc.compose(event).get_epsilon(1e-5)
    assert row["tuning_bound"] == "upper" and "K-fold composition" in row["tuning_analysis"]
    assert row["tuning_epsilon"] == pytest.approx(reference, rel=0.01)
    assert row["tuning_epsilon"] > row["epsilon_single_run"] == row["epsilon"]


def test_random_k_version_is_between_the_single_run_and_fixed_k(tuned_rows):
    m, row = tuned_rows[1]
    _, fixed = tuned_rows[2]
    assert m.tuning == {"distribution": "geometric", "mean": 10}
    assert row["tuning_expected_runs"] == pytest.approx(10.0)
    assert "Papernot & Steinke 2022, Thm 2" in row["tuning_analysis"] and row["tuning_bound"] == "upper"
    assert row["epsilon_single_run"] < row["tuning_epsilon"] < fixed["tuning_epsilon"]


@pytest.mark.parametrize("version", [1, 2])
def test_card_shows_the_tuned_bound_next_to_the_single_run(tuned_rows, version):
    _, row = tuned_rows[version]
    card = render_markdown(row, png_name=None)
    analysis = "Papernot & Steinke 2022, Thm 2" if version == 1 else "K-fold composition of the single run"
    runs = "K random, E[K] = 10" if version == 1 else "K = 10"
    tuned, single = f"{row['tuning_epsilon']:.4g}", f"{row['epsilon']:.4g}"
    assert f"best of K runs ({runs}; {analysis}) | {tuned} | upper |" in card
    assert f"| epsilon at declared delta = 1e-05 (fixed 1e-05) | {single} | upper |" in card
    assert "That is one training run's guarantee" in card and f"<= {tuned} (upper" in card


def test_tags_carry_the_tuned_bound_and_the_single_run_each_with_its_bound(tuned_rows):
    from tasks.mlflow_tags import is_tool_tag, privacy_tags

    _, row = tuned_rows[1]
    tags = privacy_tags(row)
    assert tags["privacy.tuning.epsilon"] == f"{row['tuning_epsilon']:.6g}"
    assert tags["privacy.tuning.epsilon.bound"] == "upper"
    assert tags["privacy.tuning.epsilon_single_run"] == f"{row['epsilon']:.6g}"
    assert tags["privacy.tuning.epsilon_single_run.bound"] == "upper"
    assert "privacy.sampling.kind" not in tags and tags["privacy.sampling"] == "poisson"
    assert all(is_tool_tag(k) for k in tags)
