"""tasks.mlflow_describe: the ``dp.*`` description written from an Opacus accountant, read back by the audit.

Independent truth: the gdpcore mechanism built directly from the (noise multiplier, sampling rate, steps) the run was
given (never from the tags or the accountant), and :func:`gdpcore.analyze` of it; the live test audits a model
trained with ``PrivacyEngine(accountant="gdp-audit")`` and registered in a real ``mlflow server`` whose only
description is what the helper wrote.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import gdpcore
from gdpcore import Composed, SubsampledGaussian
from tasks.mlflow_describe import MECHANISM_KEYS, describe_mlflow, dp_description
from tasks.mlflow_registry import description_to_manifest
from tests.registry.conftest import MLFLOW_ORM_WARNINGS
from tests.registry.test_mlflow_live import mlflow_server  # noqa: F401 - the live `mlflow server` fixture
from tests.test_opacus_accountant import OPACUS_WARNINGS, _require_opacus


class _Recorded:
    """What the helper reads of an Opacus accountant: ``history`` and the ``mechanism`` classmethod."""

    def __init__(self, history):
        self.history = history

    @classmethod
    def mechanism(cls):
        return "rdp"


def _mechanism(tags):
    return description_to_manifest(tags, name="m", version=1).build_mechanism()


def test_one_phase_as_scalars_read_back_bit_for_bit():
    sigma, q, steps = 1.0 / 3.0, 0.1 / 7.0, 1234  # floats whose short text is not their value
    tags = dp_description(_Recorded([(sigma, q, steps)]), dataset_size=60000, delta=1e-5)
    assert tags["dp.noise_multiplier"] == repr(sigma) and tags["dp.steps"] == "1234"
    assert tags["dp.sampler"] == "poisson" and tags["dp.neighbouring"] == "add_remove"
    assert "dp.opacus_history" not in tags and "Opacus rdp accountant" in tags["dp.source"]
    assert _mechanism(tags) == SubsampledGaussian(noise_multiplier=sigma, sampling_rate=q, steps=steps)


def test_phases_and_numpy_scalars_as_history_json():
    hist = [(np.float64(1.1), np.float64(0.02), np.int64(100)), (0.9, 0.02, 50)]
    tags = dp_description(history=hist, dataset_size=60000, delta="1/N^1.1", sampler="shuffle")
    assert json.loads(tags["dp.opacus_history"]) == [[1.1, 0.02, 100], [0.9, 0.02, 50]]
    assert tags["dp.delta"] == "1/N^1.1" and tags["dp.sampler"] == "shuffle"
    truth = Composed(
        mechanisms=(
            SubsampledGaussian(noise_multiplier=1.1, sampling_rate=0.02, steps=100),
            SubsampledGaussian(noise_multiplier=0.9, sampling_rate=0.02, steps=50),
        )
    )
    assert _mechanism(tags) == truth
    one = dp_description(history=hist[:1], dataset_size=10, delta=1e-3, include_history=True)
    assert "dp.opacus_history" in one and "dp.noise_multiplier" not in one


def test_refused_by_the_audits_reader_before_anything_is_written():
    with pytest.raises(ValueError, match="nothing to describe"):
        dp_description(_Recorded([]), dataset_size=100, delta=1e-5)
    with pytest.raises(ValueError, match="one of them"):
        dp_description(dataset_size=100, delta=1e-5)
    with pytest.raises(ValueError, match="delta"):
        dp_description(history=[(1.0, 0.1, 10)], dataset_size=100, delta=1.5)
    with pytest.raises(ValueError, match="sampling"):
        dp_description(history=[(1.0, 1.5, 10)], dataset_size=100, delta=1e-5)
    with pytest.raises(ValueError, match="over MLflow's 5,000-character tag limit"):
        dp_description(history=[(1.0 + i / 1e4, 0.01, 1) for i in range(400)], dataset_size=100, delta=1e-5)
    acct = _Recorded([(1.0, 0.01, 10)])
    acct.sampler = "poisson"
    with pytest.raises(ValueError, match="differs from the accountant's sampler"):
        dp_description(acct, dataset_size=100, delta=1e-5, sampler="shuffle")
    with pytest.raises(ValueError, match="where to write"):
        describe_mlflow("sqlite:///unused.db", {"dp.delta": "1e-5"})


def _train_tiny(schedule):
    """Opacus PrivacyEngine(accountant="gdp-audit") training a Linear layer on random data (1000 examples, batches
    of 10: q = 0.01), one epoch per noise multiplier of ``schedule``; returns the engine's accountant."""
    import torch
    from opacus import PrivacyEngine

    from gdpcore.adapters import register_opacus_accountant

    register_opacus_accountant()
    with warnings.catch_warnings():
        for message in OPACUS_WARNINGS:
            warnings.filterwarnings("ignore", message=message)
        gen = torch.Generator().manual_seed(1)
        data = torch.utils.data.TensorDataset(torch.randn(1000, 3, generator=gen), torch.randn(1000, 1, generator=gen))
        model = torch.nn.Linear(3, 1)
        engine = PrivacyEngine(accountant="gdp-audit")
        model, opt, loader = engine.make_private(
            module=model,
            optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
            data_loader=torch.utils.data.DataLoader(data, batch_size=10),
            noise_multiplier=schedule[0],
            max_grad_norm=1.0,
        )
        for sigma in schedule:
            opt.noise_multiplier = sigma
            for xb, yb in loader:
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(xb), yb).backward()
                opt.step()
    return engine.accountant


@pytest.mark.slow  # the module-scoped `mlflow server` (tests/registry/test_mlflow_live.py) and a Prefect audit
@pytest.mark.torch
@pytest.mark.usefixtures("prefect_server")
@pytest.mark.timeout(600)
@MLFLOW_ORM_WARNINGS[0]
@MLFLOW_ORM_WARNINGS[1]
def test_trained_model_with_only_the_helpers_tags_is_audited(mlflow_server, tmp_path):  # noqa: F811
    _require_opacus()
    from mlflow import MlflowClient

    from flows.privacy_audit import privacy_audit
    from tasks.publish import query_report

    uri = mlflow_server
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    exp = client.create_experiment("opacus-described", artifact_location=(tmp_path / "artifacts").as_uri())
    client.create_registered_model("described-mlp")
    schedules = {1: [1.0, 1.0], 2: [1.2, 0.9]}  # v1: one phase (scalar tags on the run); v2: two (history, version)
    truth = {}
    for v, schedule in schedules.items():
        acct = _train_tiny(schedule)
        run = client.create_run(exp)
        rid = run.info.run_id
        client.create_model_version("described-mlp", source=f"runs:/{rid}/model", run_id=rid)
        tags = dp_description(acct, dataset_size=1000, delta=1e-5)
        if v == 1:
            assert "dp.noise_multiplier" in tags
            assert describe_mlflow(uri, tags, run_id=rid) == [f"run {rid}"]
        else:
            assert "dp.opacus_history" in tags
            client.set_model_version_tag("described-mlp", "2", "dp.noise_multiplier", "3.0")  # a stale form
            assert describe_mlflow(uri, tags, model_name="described-mlp", version=2) == ["described-mlp:2"]
            assert "dp.noise_multiplier" not in client.get_model_version("described-mlp", "2").tags
        client.set_terminated(rid)
        if v == 1:  # equal noise in both epochs: one phase of 200 steps
            mech = SubsampledGaussian(noise_multiplier=1.0, sampling_rate=0.01, steps=200)
        else:
            parts = [SubsampledGaussian(noise_multiplier=s, sampling_rate=0.01, steps=100) for s in schedule]
            mech = Composed(mechanisms=tuple(parts))
        truth[v] = (gdpcore.analyze(mech), acct.get_epsilon(1e-5))
    s = privacy_audit(
        source="mlflow", mlflow_uri=uri, lake=str(tmp_path / "lake"), report=str(tmp_path / "r.duckdb"), publish=True
    )
    assert s.failed == {}
    _, rows = query_report(
        tmp_path / "r.duckdb",
        "SELECT version, epsilon, epsilon_bound, mu, mu_bound FROM model_privacy WHERE model = 'described-mlp' "
        "ORDER BY version",
    )
    assert [r[0] for r in rows] == [1, 2]
    for version, eps, eps_bound, mu, mu_bound in rows:
        report, accountant_eps = truth[version]
        # the audit's upper bound lies in the certified bracket of the raw mechanism (1% tolerance each side)
        assert eps_bound == "upper" and mu_bound == "upper"
        assert float(report.epsilon(1e-5, side="optimistic")) <= eps <= 1.01 * float(report.epsilon(1e-5))
        assert abs(eps - accountant_eps) <= 0.01 * accountant_eps
        assert float(report.mu_lower) <= mu <= 1.01 * report.mu
    for v in schedules:
        vtags = client.get_model_version("described-mlp", str(v)).tags
        assert vtags["privacy.status"] == "audited" and vtags["privacy.epsilon.bound"] == "upper"
    assert not [k for k in client.get_model_version("described-mlp", "1").tags if k in MECHANISM_KEYS]
