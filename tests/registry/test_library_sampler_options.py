"""The sampler where a run's metadata names it: Keras ``Model.fit(shuffle=...)`` in a ``tf_privacy`` form (manifest and
MLflow ``dp.tf_privacy``), Opacus ``poisson_sampling`` in an ``opacus`` form; ``sampler: cyclic`` with a short last
batch; the Hugging Face card metadata's shuffled-run lower bound and best-of-K bound.

Independent truth: a cyclic run (each example in exactly one batch per epoch, whatever the batch sizes) is exactly
(sqrt(epochs)/sigma)-GDP (Dong, Roth, Su 2022, Cor. 3.3: the composition of ``epochs`` Gaussian mechanisms), whose
epsilon at delta is the GDP closed form (Dong, Roth, Su 2022, Cor. 2.13), solved here with scipy's brentq; the
batches per epoch are the arithmetic ceil(N / batch_size); a shuffled run's lower bound is never above that cyclic
closed form (the shuffled mechanism's upper bound, gdpcore.kinds.samplers); the card metadata holds exactly the audit
row's numbers and labels (tasks.cards renders the row, never recomputes).
"""

from __future__ import annotations

import json
import math

import pytest
import yaml
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy import optimize, stats

from gdpcore.adapters import SHUFFLE_REASON
from tasks.audit import compute_audit_row
from tasks.cards import hf_card_metadata, hf_yaml_block
from tasks.manifest import ManifestError, validate_manifest
from tasks.mlflow_registry import NotAuditable, description_to_manifest, merge_description

N = 60_000


def _gdp_epsilon(mu: float, delta: float) -> float:
    """epsilon at delta of mu-GDP (Dong, Roth, Su 2022, Cor. 2.13)."""

    def gap(eps: float) -> float:
        return stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2) - delta

    return float(optimize.brentq(gap, 0.0, 100.0, xtol=1e-14, rtol=1e-14))


def _tf(**kw):
    return {"batch_size": 256, "epochs": 3, "noise_multiplier": 2.0, "used_microbatching": False, **kw}


def _manifest(mechanism, **extra):
    return validate_manifest(
        {"name": "m", "version": 1, "delta": 1e-5, "dataset_size": N, **extra, "mechanism": mechanism}
    )


# -- Keras shuffle in a tf_privacy form ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("microbatching", "sigma_eff"), [(False, 2.0), (True, 1.0)])
def test_keras_unshuffled_run_is_the_cyclic_closed_form_with_a_short_last_batch(microbatching, sigma_eff):
    # 60,000 / 256 = 234.375: 235 batches per epoch, the last one short; 3 epochs.
    m = _manifest({"tf_privacy": _tf(shuffle=False, used_microbatching=microbatching)})
    assert m.sampler_value == "cyclic" and m.estimate_reason is None
    mech = m.mechanism_dict()
    assert mech["kind"] == "cyclic_gaussian"
    assert (mech["steps_per_epoch"], mech["epochs"]) == (math.ceil(N / 256), 3)
    row = compute_audit_row(m, "test")
    mu = math.sqrt(3) / sigma_eff
    assert row["mu_bound"] == "exact" and row["mu"] == pytest.approx(mu, rel=1e-9)
    assert row["epsilon_bound"] == "exact" and row["epsilon"] == pytest.approx(_gdp_epsilon(mu, 1e-5), rel=1e-6)


@pytest.mark.parametrize("shuffle", [True, "batch"])
def test_keras_shuffled_run_with_a_dividing_batch_gets_the_lower_bound_beside_the_estimate(shuffle):
    # 60,000 / 250 = 240 batches per epoch exactly: q = 1/T, the shuffled run's lower bound applies.
    m = _manifest({"tf_privacy": _tf(batch_size=250, shuffle=shuffle, noise_multiplier=1.0)})
    assert m.sampler_value == "shuffle" and m.estimate_reason == SHUFFLE_REASON
    row = compute_audit_row(m, "test")
    assert row["epsilon_bound"] == "estimate" and row["mu_bound"] == "estimate"
    assert row["shuffle_label"] == "lower (proven, Chua et al. 2024)"
    cyclic_eps = _gdp_epsilon(math.sqrt(3) / 1.0, 1e-5)  # the shuffled run's upper bound
    assert 0 < row["shuffle_epsilon_lower"] <= cyclic_eps
    assert 0 < row["shuffle_mu_lower"] <= math.sqrt(3) / 1.0 + 1e-9


def test_keras_shuffled_run_with_a_short_last_batch_has_no_lower_bound():
    m = _manifest({"tf_privacy": _tf(shuffle=True)})  # 256 does not divide 60,000
    row = compute_audit_row(m, "test")
    assert row["sampler"] == "shuffle" and row["epsilon_bound"] == "estimate"
    assert row["shuffle_epsilon_lower"] is None
    assert "shuffled_run_lower_bound" not in hf_card_metadata(row)["differential_privacy"]


@pytest.mark.parametrize(
    ("sampler", "shuffle", "said"),
    [
        ("cyclic", True, "shuffle: true means sampler shuffle"),
        ("shuffle", False, "shuffle: false means sampler cyclic"),
        ("poisson", "batch", "shuffle: 'batch' means sampler shuffle"),
        ("fixed", True, "shuffle: true"),
    ],
)
def test_a_keras_option_contradicting_the_sampler_is_one_error_naming_both(sampler, shuffle, said):
    with pytest.raises(ManifestError) as err:
        _manifest({"tf_privacy": _tf(shuffle=shuffle)}, sampler=sampler)
    text = str(err.value)
    assert "\n" not in text and said in text and f"contradicts sampler: {sampler}" in text
    assert err.value.field == "mechanism.tf_privacy"


def test_an_agreeing_sampler_and_keras_option_are_accepted():
    assert _manifest({"tf_privacy": _tf(shuffle=False)}, sampler="cyclic").mechanism_dict()["kind"] == "cyclic_gaussian"


@pytest.mark.parametrize("bad", ["yes", 1, 0, "Batch", [True]])
def test_a_bad_keras_option_names_the_field_and_value(bad):
    with pytest.raises(ManifestError, match=r"mechanism\.tf_privacy\.shuffle: Keras Model\.fit shuffle must be"):
        _manifest({"tf_privacy": _tf(shuffle=bad)})


def test_keras_cyclic_needs_whole_epochs():
    with pytest.raises(ManifestError, match="sampler cyclic needs whole epochs; got epochs = 2.5"):
        _manifest({"tf_privacy": _tf(shuffle=False, epochs=2.5)})


def test_the_mlflow_tf_privacy_description_carries_the_keras_option():
    base = {"dp.delta": "1e-5", "dp.dataset_size": str(N)}
    m = description_to_manifest({**base, "dp.tf_privacy": json.dumps(_tf(shuffle=False))}, name="m", version=1)
    assert m.sampler_value == "cyclic" and m.mechanism_dict()["kind"] == "cyclic_gaussian"
    with pytest.raises(NotAuditable, match="contradicts sampler: poisson"):
        description_to_manifest(
            {**base, "dp.tf_privacy": json.dumps(_tf(shuffle=True)), "dp.sampler": "poisson"}, name="m", version=1
        )


@pytest.mark.parametrize(("flag", "sampler"), [("False", "shuffle"), ("True", "poisson")])
def test_the_mlflow_run_param_poisson_sampling_is_opacus_flag(flag, sampler):
    params = {"noise_multiplier": "1.0", "sample_rate": "0.01", "epochs": "3", "poisson_sampling": flag}
    desc, _, refused = merge_description({"dp.delta": "1e-5"}, params, {})
    assert refused is None and desc["dp.sampler"] == sampler
    m = description_to_manifest(desc, name="m", version=1)
    assert m.estimate_reason == (SHUFFLE_REASON if sampler == "shuffle" else None)


# -- Opacus poisson_sampling in an opacus form -------------------------------------------------------------------------
def _opacus(tmp_path, flag, **extra):
    (tmp_path / "acct.json").write_text(json.dumps({"history": [[1.0, 0.01, 300]], "mechanism": "rdp"}))
    return validate_manifest(
        {
            "name": "m",
            "version": 1,
            "delta": 1e-5,
            **extra,
            "mechanism": {"opacus": {"file": "acct.json", "poisson_sampling": flag}},
        },
        file=tmp_path / "m.yaml",
    )


def test_opacus_option_gives_the_sampler(tmp_path):
    assert _opacus(tmp_path, True).sampler_value == "poisson"
    assert _opacus(tmp_path, False).estimate_reason == SHUFFLE_REASON
    # poisson_sampling=False only says the user's DataLoader drew the batches: an unshuffled one is cyclic.
    m = _opacus(tmp_path, False, sampler="cyclic")
    mech = m.mechanism_dict()
    assert (mech["kind"], mech["steps_per_epoch"], mech["epochs"]) == ("cyclic_gaussian", 100, 3)
    row = compute_audit_row(m, "test")
    assert row["mu_bound"] == "exact" and row["mu"] == pytest.approx(math.sqrt(3), rel=1e-9)


@pytest.mark.parametrize(("flag", "sampler"), [(True, "shuffle"), (True, "cyclic"), (False, "poisson")])
def test_opacus_option_contradicting_the_sampler_names_both(tmp_path, flag, sampler):
    with pytest.raises(ManifestError) as err:
        _opacus(tmp_path, flag, sampler=sampler)
    assert f"poisson_sampling: {str(flag).lower()}" in str(err.value)
    assert f"contradicts sampler: {sampler}" in str(err.value) and "\n" not in str(err.value)


# -- sampler: cyclic with a short last batch ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("dpsgd", "per_epoch", "epochs"),
    [
        ({"batch_size": 256, "epochs": 4}, 235, 4),  # 60,000 = 234 x 256 + 96
        ({"batch_size": 7, "epochs": 2}, 8572, 2),  # 60,000 = 8,571 x 7 + 3
        ({"sampling_rate": 0.003, "steps": 2 * 334}, 334, 2),  # ceil(1 / 0.003) = 334
    ],
)
def test_cyclic_accepts_a_short_last_batch_and_is_the_closed_form(dpsgd, per_epoch, epochs):
    sigma = 1.3
    m = _manifest({"dpsgd": {"noise_multiplier": sigma, **dpsgd}}, sampler="cyclic")
    mech = m.mechanism_dict()
    assert (mech["kind"], mech["steps_per_epoch"], mech["epochs"]) == ("cyclic_gaussian", per_epoch, epochs)
    row = compute_audit_row(m, "test")
    mu = math.sqrt(epochs) / sigma
    assert row["mu_bound"] == "exact" and row["mu"] == pytest.approx(mu, rel=1e-9)
    assert row["epsilon"] == pytest.approx(_gdp_epsilon(mu, 1e-5), rel=1e-6)


def test_cyclic_short_last_batch_phases():
    phases = [
        {"noise_multiplier": 1.0, "batch_size": 256, "epochs": 2},
        {"noise_multiplier": 2.0, "batch_size": 7, "epochs": 3},
    ]
    row = compute_audit_row(_manifest({"phases": phases}, sampler="cyclic"), "test")
    mu = math.sqrt(2 / 1.0**2 + 3 / 2.0**2)  # GDP composition: mu = sqrt(sum mu_i^2) (Dong, Roth, Su 2022, Cor. 3.3)
    assert row["mu"] == pytest.approx(mu, rel=1e-9)


def test_balls_in_bins_still_needs_one_over_q_batches():
    with pytest.raises(ManifestError, match="sampler balls_in_bins needs q = 1/T"):
        _manifest({"dpsgd": {"noise_multiplier": 1.0, "batch_size": 256, "epochs": 2}}, sampler="balls_in_bins")
    with pytest.raises(ManifestError, match="batch_size 256 does not divide 60000"):
        _manifest({"tf_privacy": _tf()}, sampler="balls_in_bins")


# -- the Hugging Face card metadata ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def shuffled_tuned_row():
    m = _manifest(
        {"tf_privacy": _tf(batch_size=250, shuffle=True, noise_multiplier=1.0)},
        tuning={"distribution": "fixed", "count": 10},
    )
    return compute_audit_row(m, "test")


def test_hf_metadata_carries_the_shuffled_lower_bound_labelled(shuffled_tuned_row):
    row = shuffled_tuned_row
    meta = yaml.safe_load(hf_yaml_block(row).strip().strip("-"))["differential_privacy"]
    low = meta["shuffled_run_lower_bound"]
    assert low["bound"] == "lower (proven, Chua et al. 2024)" and low["mu_bound"] == low["bound"]
    assert low["analysis"] == "Chua et al. 2024"
    assert low["epsilon"] == pytest.approx(row["shuffle_epsilon_lower"], abs=1e-6)
    assert low["mu"] == pytest.approx(row["shuffle_mu_lower"], abs=1e-6)
    assert low["delta"] == row["delta"] == 1e-5
    assert low["poisson_epsilon"] == {"epsilon": pytest.approx(row["epsilon"], abs=1e-6), "bound": "estimate"}
    assert low["poisson_understates_risk"] == (row["shuffle_epsilon_lower"] > row["epsilon"])
    assert low["epsilon"] <= _gdp_epsilon(math.sqrt(3), 1e-5)  # never above the shuffled run's upper bound


def test_hf_metadata_carries_the_tuning_bound_labelled(shuffled_tuned_row):
    row = shuffled_tuned_row
    meta = yaml.safe_load(hf_yaml_block(row).strip().strip("-"))["differential_privacy"]
    tuned = meta["hyperparameter_tuning"]
    assert tuned["bound"] == "estimate"  # the single run's numbers are estimates (shuffled batches)
    assert tuned["analysis"] == row["tuning_analysis"] and tuned["analysis"].startswith("K-fold composition")
    assert tuned["distribution"] == {"distribution": "fixed", "count": 10} and tuned["expected_runs"] == 10
    assert tuned["epsilon"] == pytest.approx(row["tuning_epsilon"], abs=1e-6)
    assert tuned["single_run"] == {"epsilon": pytest.approx(row["epsilon"], abs=1e-6), "bound": "estimate"}
    assert tuned["epsilon"] >= tuned["single_run"]["epsilon"]  # the best of 10 runs is never more private than one
    # Fixed K: the procedure is the K-fold composition of the run (10 x 720 Poisson steps at q = 1/240, sigma 1);
    # dp_accounting's PLD accountant gives the same epsilon (its pessimistic grid: a touch above).
    pld = pld_lib.from_gaussian_mechanism(1.0, sampling_prob=1 / 240, value_discretization_interval=1e-4)
    reference = pld.self_compose(10 * 720).get_epsilon_for_delta(1e-5)
    assert tuned["epsilon"] == pytest.approx(reference, rel=1e-2)
