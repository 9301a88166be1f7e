"""The batch samplers and tuning in the registry: the sample registry's shuffled Opacus run shows the proven lower
bound of its shuffled run (gdpcore.kinds.samplers, Chua et al. 2024) beside its Poisson estimate.

Independent truth: the lower bound is computed here directly from the ``shuffled_gaussian`` kind with the batch
counts Opacus records (1 / len(data_loader): 235 batches of 256 and 118 of 512 of 60,000 examples,
data/registry/runs/make_opacus_accountant.py), not read from the audit.
"""

from __future__ import annotations

import math

import pytest

import gdpcore
from tasks.audit import compute_audit_row
from tasks.cards import render_markdown
from tasks.manifest import load_manifest_file

from .conftest import SAMPLE_REGISTRY


@pytest.fixture(scope="module")
def shuffled_row():
    (m,) = [m for m in load_manifest_file(SAMPLE_REGISTRY / "training-runs.yaml") if m.name == "mnist-opacus-shuffled"]
    return m, compute_audit_row(m, "test")


def test_the_shuffled_opacus_run_records_one_over_its_batch_count(shuffled_row):
    m, _ = shuffled_row
    phases = m.build_mechanism().to_dict()["mechanisms"]
    # Opacus's make_private: sample_rate = 1 / len(data_loader), ceil(60000 / 256) = 235, ceil(60000 / 512) = 118
    assert [(p["noise_multiplier"], p["sampling_rate"], p["steps"]) for p in phases] == [
        (1.1, 1 / math.ceil(60000 / 256), 20 * 235),
        (0.9, 1 / math.ceil(60000 / 512), 5 * 118),
    ]


def test_shuffled_run_lower_bound_beside_the_poisson_estimate(shuffled_row):
    m, row = shuffled_row
    delta = m.delta_value
    direct = gdpcore.analyze(
        gdpcore.mechanisms.Composed(
            mechanisms=(
                gdpcore.mechanism_from_dict(
                    {"kind": "shuffled_gaussian", "noise_multiplier": 1.1, "steps_per_epoch": 235, "epochs": 20}
                ),
                gdpcore.mechanism_from_dict(
                    {"kind": "shuffled_gaussian", "noise_multiplier": 0.9, "steps_per_epoch": 118, "epochs": 5}
                ),
            )
        ),
        discretization=m.accounting.discretization,
        alpha_min=m.accounting.alpha_min,
        deltas=[delta],
    )
    assert row["sampler"] == "shuffle" and row["epsilon_bound"] == "estimate"
    assert row["shuffle_epsilon_lower"] == pytest.approx(float(direct.epsilon(delta, side="optimistic")), rel=1e-12)
    assert row["shuffle_mu_lower"] == pytest.approx(float(direct.mu_lower), rel=1e-12)
    assert row["shuffle_label"] == "lower (proven, Chua et al. 2024)" and row["shuffle_analysis"] == "Chua et al. 2024"
    # Chua et al. 2024's point: the shuffled run is provably less private than its Poisson number says
    assert row["shuffle_epsilon_lower"] > row["epsilon"]
    assert row["shuffle_mu_lower"] > row["mu"]
    card = render_markdown(row, png_name=None)
    lower, poisson = f"{row['shuffle_epsilon_lower']:.4g}", f"{row['epsilon']:.4g}"
    assert (
        f"is at least {lower} (proven lower bound, Chua et al. 2024); the Poisson figure {poisson} is an estimate"
        in card
    )
    assert "The Poisson figure understates the risk." in card
    from tasks.mlflow_tags import is_tool_tag, privacy_tags

    tags = privacy_tags(row)
    assert tags["privacy.shuffle.epsilon_lower"] == f"{row['shuffle_epsilon_lower']:.6g}"
    assert tags["privacy.epsilon.bound"] == "estimate" and tags["privacy.shuffle.label"].startswith("lower (proven")
    assert all(is_tool_tag(k) for k in tags)


def test_runs_that_did_not_shuffle_have_no_shuffle_bound():
    (m,) = [m for m in load_manifest_file(SAMPLE_REGISTRY / "training-runs.yaml") if m.name == "mnist-tf-privacy"]
    row = compute_audit_row(m, "test")
    assert row["shuffle_epsilon_lower"] is None and row["shuffle_label"] is None
    assert "proven lower bound" not in render_markdown(row, png_name=None)


_HISTORY = {"opacus_history": {"mechanism": "rdp", "history": [[1.1, 1 / 235, 4700]]}}


@pytest.mark.parametrize(
    ("sampler", "kind"), [("cyclic", "cyclic_gaussian"), ("balls_in_bins", "balls_in_bins_gaussian")]
)
def test_cyclic_and_balls_in_bins_manifests_are_accounted_by_their_kind(sampler, kind):
    from tasks.manifest import validate_manifest

    m = validate_manifest(
        {"name": "s", "version": 1, "dataset_size": 60000, "delta": 1e-5, "sampler": sampler, "mechanism": _HISTORY}
    )
    assert m.estimate_reason is None and m.sampler_value == sampler
    mech = m.build_mechanism().to_dict()
    assert mech["kind"] == kind and (mech["steps_per_epoch"], mech["epochs"]) == (235, 20)
    if sampler == "cyclic":  # exact: (sqrt(epochs) / sigma)-GDP (Dong, Roth, Su 2022, Cor. 3.3)
        row = compute_audit_row(m, "test")
        assert row["mu_bound"] == "exact" and row["mu"] == pytest.approx(math.sqrt(20) / 1.1, rel=1e-9)
        assert "accounted as such: the epochs compose Gaussian mechanisms exactly" in render_markdown(
            row, png_name=None
        )


def test_the_adapters_label_poisson_numbers_of_a_cyclic_run_estimates():
    """Called directly (not through a manifest, which accounts the run by its kind), an adapter keeps Poisson numbers
    for a cyclic / balls-in-bins run: those are estimates, with the reason."""
    from gdpcore.adapters import OWN_KIND_REASON, from_tf_privacy

    run = from_tf_privacy(number_of_examples=100, batch_size=10, num_epochs=1, noise_multiplier=1.0, sampler="cyclic")
    assert run.estimate_reason == OWN_KIND_REASON


def test_cyclic_needs_whole_epochs_of_one_over_q_batches():
    from tasks.manifest import ManifestError, validate_manifest

    bad = {"dpsgd": {"noise_multiplier": 1.0, "sampling_rate": 0.003, "steps": 100}}
    with pytest.raises(ManifestError, match="sampler cyclic needs q = 1/T"):
        validate_manifest(
            {"name": "s", "version": 1, "delta": 1e-5, "sampler": "cyclic", "mechanism": bad}
        ).build_mechanism()


# -- hyper-parameter tuning (gdpcore.tuning; Papernot & Steinke 2022) -------------------------------------------------
_TINY = {
    "name": "tiny-a",
    "version": 1,
    "dataset_size": 10000,
    "delta": 1e-5,
    "mechanism": {"dpsgd": {"noise_multiplier": 1.0, "batch_size": 100, "steps": 50}},
}


def test_a_manifest_without_tuning_keeps_its_spec_hash():
    from tasks.manifest import validate_manifest

    # the hash this manifest had before the tuning field existed (computed with the previous tasks/manifest.py)
    assert validate_manifest(_TINY).spec_hash() == "8dd1d712a69b09bded4e710a"
    tuned = validate_manifest({**_TINY, "tuning": {"distribution": "fixed", "count": 3}})
    assert tuned.spec_hash() != "8dd1d712a69b09bded4e710a"


@pytest.mark.parametrize(
    "tuning",
    [
        {"distribution": "fixed", "count": 4},
        {"distribution": "geometric", "mean": 10},
        {"distribution": "poisson", "mean": 10},
    ],
)
def test_tuning_epsilon_is_papernot_steinke_and_at_least_one_run(tuning):
    from gdpcore.tuning import get_tuned_report_bound
    from tasks.manifest import validate_manifest

    m = validate_manifest({**_TINY, "tuning": tuning})
    row = compute_audit_row(m, "test")
    single = gdpcore.analyze(
        gdpcore.mechanism_from_dict(
            {"kind": "subsampled_gaussian", "noise_multiplier": 1.0, "sampling_rate": 0.01, "steps": 50}
        ),
        deltas=[1e-5],
    )
    expected = get_tuned_report_bound(single, distribution=tuning, deltas=[1e-5]).epsilon(1e-5)
    assert row["tuning_epsilon"] == pytest.approx(expected, rel=1e-6)
    assert row["epsilon_single_run"] == pytest.approx(float(single.epsilon(1e-5)), rel=1e-6)
    assert row["tuning_epsilon"] >= row["epsilon_single_run"] and row["tuning_bound"] == "upper"
    assert row["tuning_expected_runs"] == pytest.approx(tuning.get("count", tuning.get("mean")))
    card = render_markdown(row, png_name=None)
    assert f"is <= {row['tuning_epsilon']:.4g} (upper); one run: {row['epsilon_single_run']:.4g}" in card
    assert row["tuning_analysis"] in card
    from tasks.mlflow_tags import is_tool_tag, privacy_tags

    tags = privacy_tags(row)
    assert tags["privacy.tuning.epsilon"] == f"{row['tuning_epsilon']:.6g}" and tags["privacy.tuning.bound"] == "upper"
    assert all(is_tool_tag(k) for k in tags)
    if tuning["distribution"] == "fixed":  # best of K fixed runs: the K-fold composition (exactly, for RR_eps)
        assert "K-fold composition" in row["tuning_analysis"]
    else:
        assert "Papernot & Steinke 2022" in row["tuning_analysis"]


def test_no_tuning_no_tuning_fields():
    from tasks.manifest import validate_manifest

    row = compute_audit_row(validate_manifest(_TINY), "test")
    assert row["tuning_epsilon"] is None and row["epsilon_single_run"] is None
    assert "Hyper-parameter tuning." not in render_markdown(row, png_name=None)


@pytest.mark.parametrize(
    ("tuning", "field"),
    [
        ({"distribution": "fixed", "count": 0}, "tuning.count"),
        ({"distribution": "geometric", "mean": 0.5}, "tuning.mean"),
        ({"distribution": "poisson", "count": 3}, "tuning.count"),
        ({"distribution": "uniform", "count": 3}, "tuning.distribution"),
    ],
)
def test_bad_tuning_blocks_name_the_field(tuning, field):
    from tasks.manifest import ManifestError, validate_manifest

    with pytest.raises(ManifestError, match=field.replace(".", r"\.")):
        validate_manifest({**_TINY, "tuning": tuning})


def test_an_mlflow_description_states_tuning_and_the_new_samplers():
    from tasks.mlflow_registry import NotAuditable, description_to_manifest

    base = {"dp.noise_multiplier": "1.1", "dp.sampling_rate": str(1 / 235), "dp.steps": "4700", "dp.delta": "1e-5"}
    m = description_to_manifest({**base, "dp.tuning": '{"distribution": "poisson", "mean": 8}'}, name="t", version=1)
    assert m.tuning == {"distribution": "poisson", "mean": 8}
    m = description_to_manifest({**base, "dp.sampler": "cyclic"}, name="t", version=1)
    assert m.build_mechanism().to_dict()["kind"] == "cyclic_gaussian"
    with pytest.raises(NotAuditable, match=r"dp\.tuning: .*tuning\.mean"):
        description_to_manifest({**base, "dp.tuning": '{"distribution": "poisson", "mean": 0}'}, name="t", version=1)
