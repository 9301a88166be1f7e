"""A live MLflow Model Registry audited through a real ``mlflow server`` (127.0.0.1, SQLite backend, local
artifact root, all in tmp_path), filled the way training scripts fill it: runs logging params (dp.* keys, Opacus's own
names), ``mlflow.pyfunc.log_model`` + ``mlflow.register_model`` or ``MlflowClient.create_model_version``, model-version
tags added by owners, an alias and a legacy stage for production.

Independent truth: dp_accounting's PLD accountant at a 10x finer step than gdpcore's (the tagged epsilon is an upper
bound that must lie above it and within the engine's tolerance), dp_accounting's RDP accountant for a published
claim, and Opacus's step convention (epochs x 1/sample_rate steps when 1/sample_rate is an integer).
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings

import pytest

import gdpcore
from tasks.publish import query_report
from tests.registry.conftest import MLFLOW_ORM_WARNINGS
from tests.robustness.conftest import Proc, free_port, healthy, wait_for

pytestmark = [
    pytest.mark.slow,  # a real mlflow server, 20 registered versions, four audits: ~2 min on 2 shared cores
    pytest.mark.timeout(600),  # its mlflow-server fixture alone took 257 s (setup) at load 12 on 2 cores
    pytest.mark.usefixtures("prefect_server"),
    *MLFLOW_ORM_WARNINGS,
]

OWNER_NOTES = "Owner notes: ResNet-20 on the 2025 snapshot; contact vision-team. Do not delete."
NO_DP_NOTES = "Baseline without DP (for comparison only)."


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """``mlflow server`` on a free 127.0.0.1 port, SQLite backend and local artifact root; stopped by its process
    group at the end of the module."""
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "MLFLOW_TRACKING_URI")}
    args = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}"]
    args += ["--default-artifact-root", str(root / "artifacts"), "--host", "127.0.0.1", "--port", str(port)]
    server = Proc([*args, "--workers", "1"], root / "server.log", env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: healthy(url) or (not server.alive() and pytest.fail(server.log()[-3000:])), 120, "mlflow")
        yield url
    finally:
        server.stop(timeout=5)


def _train(uri: str, name: str, *, params=None, run_tags=None, version_tags=None, description=None, log_model=False):
    """What a training script does: a run logging its params, then the model registered from the run."""
    import mlflow
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("dp-training")
    with mlflow.start_run() as run:
        if params:
            mlflow.log_params(params)
        if run_tags:
            mlflow.set_tags(run_tags)
        if log_model:
            # MLflow's pyfunc module warns about its own type hints on import (UserWarning): not ours, not an error
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import mlflow.pyfunc

                class Identity(mlflow.pyfunc.PythonModel):
                    def predict(self, context, model_input: list[str]) -> list[str]:
                        return model_input

                mlflow.pyfunc.log_model(name="model", python_model=Identity(), pip_requirements=[])
    rid = run.info.run_id
    if log_model:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mv = mlflow.register_model(f"runs:/{rid}/model", name)
        if description:
            client.update_model_version(name, mv.version, description=description)
    else:
        try:
            client.get_registered_model(name)
        except mlflow.exceptions.MlflowException:
            client.create_registered_model(name)
        mv = client.create_model_version(name, source=f"runs:/{rid}/model", run_id=rid, description=description)
    for k, v in (version_tags or {}).items():
        client.set_model_version_tag(name, mv.version, k, v)
    return mv.version, rid


POISSON = [1.0, 1.1, 1.2, 0.9, 1.3, 1.0]  # sigma of dpsgd-poisson v1..v6 (q = 0.01, 100 steps)
CLAIMS = [(1.2, 1.6), (1.0, 2.2), (1.4, 1.2), (1.1, 0.5)]  # (sigma, claimed RDP eps) of claimed-resnet v1..v4
OPACUS_HISTORY = [[1.1, 0.02, 100], [0.9, 0.02, 50]]
DP_EVENT_STEP = {
    "type": "PoissonSampledDpEvent",
    "sampling_probability": 0.004,
    "event": {"type": "GaussianDpEvent", "noise_multiplier": 0.9},
}


@pytest.fixture(scope="module")
def registry(mlflow_server):
    """20 versions across 6 registered models, as training scripts and owners leave them."""
    from mlflow import MlflowClient

    uri = mlflow_server
    t0 = time.perf_counter()
    runs: dict[str, str] = {}
    for i, sigma in enumerate(POISSON, start=1):  # dp.* params on the run, the first two via log_model
        params = {"dp.noise_multiplier": sigma, "dp.sampling_rate": 0.01, "dp.steps": 100, "dp.dataset_size": 50000}
        params |= {"dp.delta": 1e-5, "dp.sampler": "poisson", "learning_rate": 0.1}
        v, runs[f"dpsgd-poisson:{i}"] = _train(uri, "dpsgd-poisson", params=params, log_model=i <= 2)
    for i in range(1, 4):  # Opacus users' own param names (+ the dataset size under dp.)
        params = {"noise_multiplier": 1.0 + 0.1 * i, "sample_rate": 0.02, "epochs": 2, "max_grad_norm": 1.0}
        params |= {"poisson_sampling": True, "target_delta": 1e-5, "dp.dataset_size": 60000}
        _, runs[f"opacus-cifar:{i}"] = _train(uri, "opacus-cifar", params=params)
    # v4: the accountant's history, attached by the owner to the model version (the run logged nothing DP)
    _, runs["opacus-cifar:4"] = _train(
        uri,
        "opacus-cifar",
        params={"learning_rate": 0.05},
        version_tags={
            "dp.opacus_history": json.dumps({"history": OPACUS_HISTORY, "mechanism": "rdp"}),
            "dp.dataset_size": "60000",
            "dp.delta": "1e-5",
        },
    )
    for i, (sigma, eps) in enumerate(CLAIMS, start=1):  # the owner's description and claim on the version tags
        tags = {"dp.noise_multiplier": str(sigma), "dp.batch_size": "256", "dp.dataset_size": "60000"}
        tags |= {"dp.epochs": "1", "dp.delta": "1e-5", "dp.epsilon": str(eps), "dp.accountant": "RDP"}
        tags |= {"team": "vision", "dp.source": "internal training log 2025-06"}
        _, runs[f"claimed-resnet:{i}"] = _train(
            uri, "claimed-resnet", params={"lr": 0.1}, version_tags=tags, description=OWNER_NOTES
        )
    for i in range(1, 3):  # shuffled batches
        params = {"dp.noise_multiplier": 1.0, "dp.batch_size": 500, "dp.dataset_size": 50000, "dp.epochs": 1}
        params |= {"dp.delta": 1e-5, "dp.sampler": "shuffle"}
        _, runs[f"shuffled-bert:{i}"] = _train(uri, "shuffled-bert", params=params)
    for i in range(1, 3):  # no DP at all: batch_size and epochs alone describe nothing
        _, runs[f"no-dp-baseline:{i}"] = _train(
            uri, "no-dp-baseline", params={"batch_size": 64, "epochs": 3, "lr": 0.1}, description=NO_DP_NOTES
        )
    for i in range(1, 3):  # a dp_accounting DpEvent (its JSON form, gdpcore.events) as a run tag
        event = {"type": "SelfComposedDpEvent", "count": 100 * i, "event": DP_EVENT_STEP}
        _, runs[f"dp-event-lm:{i}"] = _train(
            uri,
            "dp-event-lm",
            params={"dp.dataset_size": 100000, "dp.delta": 1e-6},
            run_tags={"dp.dp_event": json.dumps(event)},
        )
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    client.set_registered_model_alias("dpsgd-poisson", "production", "3")
    with warnings.catch_warnings():  # stages are deprecated in MLflow 3 (a FutureWarning) but still in use
        warnings.simplefilter("ignore")
        client.transition_model_version_stage("opacus-cifar", "2", "Production")
    client.set_registered_model_tag("claimed-resnet", "gdp_audit.card", "true")  # the owner opts in to the card
    n = sum(len(client.search_model_versions(f"name='{m.name}'")) for m in client.search_registered_models())
    return {"uri": uri, "runs": runs, "n_versions": n, "seconds": time.perf_counter() - t0}


TINY = """\
name: tiny-a
version: 1
privacy_unit: example
neighbouring: add_remove
dataset_size: 10000
delta: 1.0e-5
mechanism:
  dpsgd: {noise_multiplier: 1.0, batch_size: 100, steps: 50}
"""


@pytest.fixture(scope="module")
def audited(registry, tmp_path_factory):
    """A manifest audit and three MLflow audits into one lake/report: first, unchanged re-run, one new version."""
    from flows.cli import main
    from flows.privacy_audit import privacy_audit

    root = tmp_path_factory.mktemp("mlflow-audit")
    (root / "manifests").mkdir()
    (root / "manifests" / "a.yaml").write_text(TINY)
    store = dict(lake=str(root / "lake"), report=str(root / "r.duckdb"))
    privacy_audit(registry=str(root / "manifests"), **store)
    uri = registry["uri"]
    t = time.perf_counter()
    first = privacy_audit(source="mlflow", mlflow_uri=uri, **store)
    t_first = time.perf_counter() - t
    files = sorted(str(p) for p in (root / "lake" / "registry").rglob("*.parquet") if "published" not in p.parts)
    t = time.perf_counter()
    second = privacy_audit(source="mlflow", mlflow_uri=uri, **store)
    t_second = time.perf_counter() - t
    files_after = sorted(str(p) for p in (root / "lake" / "registry").rglob("*.parquet") if "published" not in p.parts)
    # one registered model only: nothing recomputed, the other models' members kept
    from tasks.audit import read_members
    from tasks.mlflow_registry import mlflow_registry_label

    partial = privacy_audit(source="mlflow", mlflow_uri=uri, models=["opacus-cifar"], publish=False, **store)
    kept = {r["mlflow_model"] for r in read_members(root / "lake", mlflow_registry_label(uri))}
    params = {"dp.noise_multiplier": 1.5, "dp.sampling_rate": 0.01, "dp.steps": 100, "dp.dataset_size": 50000}
    new_version, _ = _train(uri, "dpsgd-poisson", params=params | {"dp.delta": 1e-5})
    cli_args = ["audit", "--mlflow-uri", uri, "--lake", store["lake"], "--report", store["report"], "--no-progress"]
    return {
        "root": root,
        "uri": uri,
        "first": first,
        "second": second,
        "files": (files, files_after),
        "partial": (partial, kept),
        "new_version": new_version,
        "cli": (main, cli_args),
        "seconds": (registry["seconds"], t_first, t_second),
        "report": root / "r.duckdb",
    }


def _client(uri):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def test_the_registry_is_audited_through_the_server(registry, audited):
    s = audited["first"]
    print(
        f"\ntimes: register {audited['seconds'][0]:.1f} s, audit {audited['seconds'][1]:.1f} s, "
        f"re-run {audited['seconds'][2]:.1f} s"
    )
    assert registry["n_versions"] >= 20
    assert s.source == "mlflow" and s.registry == f"mlflow:{registry['uri']}" and not s.failed
    auditable = {f"dpsgd-poisson:{i}" for i in range(1, 7)} | {f"opacus-cifar:{i}" for i in range(1, 5)}
    auditable |= {f"claimed-resnet:{i}" for i in range(1, 5)} | {"dp-event-lm:1", "dp-event-lm:2"}
    auditable |= {"shuffled-bert:1", "shuffled-bert:2"}
    assert auditable <= set(s.computed) and not s.reused
    assert set(s.models) == set(s.computed)
    assert len(s.models) + len(s.not_auditable) == registry["n_versions"]
    # the undescribed versions: not auditable, the missing key named, the run not failed
    for i in (1, 2):
        why = s.not_auditable[f"no-dp-baseline:{i}"]
        assert why.startswith("incomplete DP description: missing dp.noise_multiplier") and "dp.delta" in why
    client = _client(registry["uri"])
    mv = client.get_model_version("no-dp-baseline", "1")
    assert mv.tags["privacy.status"].startswith("not auditable: incomplete DP description: missing dp.noise_multiplier")
    assert not any(k.startswith("privacy.") and k != "privacy.status" for k in mv.tags)
    assert mv.description == NO_DP_NOTES  # the owner's text untouched
    for key in auditable:
        name, v = key.split(":")
        tags = client.get_model_version(name, v).tags
        bound = "estimate" if name == "shuffled-bert" else "upper"  # shuffled batches: Poisson numbers, estimates
        assert tags["privacy.status"] == "audited" and tags["privacy.mu.bound"] == bound, key
        assert tags["privacy.epsilon.bound"] == bound and tags["privacy.audit_key"], key


def test_tagged_numbers_against_dp_accounting(registry, audited):
    """dpsgd-poisson v1 (sigma 1, q 0.01, 100 steps, delta 1e-5): the tagged eps is an upper bound above
    dp_accounting's PLD at a 10x finer step, and tight (within 1%); mu equals gdpcore.analyze's."""
    import dp_accounting
    from dp_accounting.pld import PLDAccountant

    tags = _client(registry["uri"]).get_model_version("dpsgd-poisson", "1").tags
    rep = gdpcore.analyze(gdpcore.SubsampledGaussian(noise_multiplier=1.0, sampling_rate=0.01, steps=100))
    assert float(tags["privacy.mu"]) == pytest.approx(rep.mu, rel=1e-5)
    acc = PLDAccountant(value_discretization_interval=rep.discretization / 10)
    event = dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.0))
    ref = acc.compose(dp_accounting.SelfComposedDpEvent(event, 100)).get_epsilon(1e-5)
    eps = float(tags["privacy.epsilon"])
    assert ref <= eps * (1 + 1e-6) and eps <= ref * 1.01, (eps, ref)

    # the Opacus history (two phases) on the version tags: the composition of both phases
    tags4 = _client(registry["uri"]).get_model_version("opacus-cifar", "4").tags
    acc = PLDAccountant(value_discretization_interval=rep.discretization / 10)
    for sigma, q, steps in OPACUS_HISTORY:
        acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
    ref4 = acc.get_epsilon(1e-5)
    eps4 = float(tags4["privacy.epsilon"])
    assert ref4 <= eps4 * (1 + 1e-6) and eps4 <= ref4 * 1.01, (eps4, ref4)


def test_framework_names_and_conventions(audited):
    """Opacus's own param names: sample_rate 0.02 and 2 epochs are 2 x 1/0.02 = 100 steps (Opacus's convention)."""
    _, rows = query_report(
        audited["report"],
        "SELECT version, mechanism_json, description_source FROM model_privacy WHERE model = 'opacus-cifar' "
        "AND version <= 3 ORDER BY version",
    )
    assert [r[0] for r in rows] == [1, 2, 3]
    for version, mech, source in rows:
        m = json.loads(mech)
        assert m["kind"] == "subsampled_gaussian" and m["steps"] == 100 and m["sampling_rate"] == 0.02
        assert m["noise_multiplier"] == pytest.approx(1.0 + 0.1 * version)
        assert source == f"mlflow:{audited['uri']}#opacus-cifar/{version}"
    _, rows = query_report(
        audited["report"],
        "SELECT description_from FROM models WHERE model = 'opacus-cifar' ORDER BY version",
    )
    assert rows[0][0].startswith("run ") and rows[0][0].endswith("params")
    assert rows[3][0] == "model-version tags"


def test_claims_and_owner_text(registry, audited):
    """claimed-resnet (owner opted in): the card sits in its own section after the owner's description; the claim is
    re-checked with dp_accounting's RDP accountant; the owner's tags stay."""
    import dp_accounting
    from dp_accounting.rdp import RdpAccountant

    from tasks.mlflow_tags import CARD_BEGIN, CARD_END

    client = _client(registry["uri"])
    q, steps = 256 / 60000, -(-60000 // 256)  # epochs x ceil(N / B)
    for i, (sigma, eps) in enumerate(CLAIMS, start=1):
        mv = client.get_model_version("claimed-resnet", str(i))
        assert mv.description.startswith(OWNER_NOTES + "\n\n" + CARD_BEGIN)
        assert mv.description.rsplit("\n", 1)[1].startswith(CARD_END)
        assert mv.tags["team"] == "vision" and mv.tags["dp.epsilon"] == str(eps)
        rdp = RdpAccountant().compose(
            dp_accounting.SelfComposedDpEvent(
                dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps
            )
        )
        assert float(mv.tags["privacy.claim.reproduced_epsilon"]) == pytest.approx(rdp.get_epsilon(1e-5), rel=1e-4)
    assert any(flag.startswith("claimed-resnet:4: claimed eps=0.5") for flag in audited["first"].claim_flags)
    # not opted in: no card in the description, no files in the run
    mv = client.get_model_version("dpsgd-poisson", "3")
    assert not mv.description and "privacy.card" not in mv.tags
    assert not client.list_artifacts(registry["runs"]["dpsgd-poisson:3"], "privacy")


def test_shuffled_versions_are_labelled_estimate(registry, audited):
    """dp.sampler=shuffle: the Poisson-accounted numbers are kept, every one labelled estimate, with the reason, in
    the tags, the lake row and the run summary."""
    s = audited["first"]
    assert [x.split(" ")[0] for x in s.estimates] == ["shuffled-bert:1", "shuffled-bert:2"]
    tags = _client(registry["uri"]).get_model_version("shuffled-bert", "1").tags
    for key in ("mu", "epsilon", "tpr", "advantage", "bayes_security"):
        assert tags[f"privacy.{key}.bound"] == "estimate", key
    assert tags["privacy.estimate_reason"] and "shuffle" in tags["privacy.sampling"]
    _, rows = query_report(
        audited["report"],
        "SELECT sampler, mu_bound, epsilon_bound, estimate_reason FROM model_privacy WHERE model = 'shuffled-bert'",
    )
    assert len(rows) == 2 and all(r[0] == "shuffle" and r[1] == r[2] == "estimate" and r[3] for r in rows)
    # the numbers themselves are the Poisson accounting's: q = 500 / 50000, 1 epoch = 100 steps
    ref = gdpcore.analyze(gdpcore.SubsampledGaussian(noise_multiplier=1.0, sampling_rate=0.01, steps=100))
    assert float(tags["privacy.mu"]) == pytest.approx(ref.mu, rel=1e-5)


def test_dp_event_version_against_dp_accounting(registry, audited):
    """dp-event-lm v2: SelfComposed(PoissonSampled(0.004, Gaussian(0.9)), 200) at delta 1e-6, read from a run tag:
    the tagged eps is an upper bound above dp_accounting's PLD at a 10x finer step, within 1%."""
    import dp_accounting
    from dp_accounting.pld import PLDAccountant

    tags = _client(registry["uri"]).get_model_version("dp-event-lm", "2").tags
    assert tags["privacy.epsilon.bound"] == "upper" and float(tags["privacy.delta"]) == 1e-6
    step = float(tags["privacy.discretization"]) / 10
    event = dp_accounting.PoissonSampledDpEvent(0.004, dp_accounting.GaussianDpEvent(0.9))
    ref = PLDAccountant(value_discretization_interval=step).compose(event, 200).get_epsilon(1e-6)
    eps = float(tags["privacy.epsilon"])
    assert ref <= eps * (1 + 1e-6) and eps <= ref * 1.01, (eps, ref)
    _, rows = query_report(
        audited["report"], "SELECT description_from FROM models WHERE model = 'dp-event-lm' AND version = 2"
    )
    run_id = registry["runs"]["dp-event-lm:2"]
    assert rows == [(f"run {run_id} params + run {run_id} tags",)]


def test_rerun_computes_nothing_and_a_new_version_is_audited_alone(registry, audited, capsys):
    s2 = audited["second"]
    assert s2.computed == [] and set(s2.reused) == set(audited["first"].models)
    assert s2.comparisons_computed == 0 and s2.mlflow_tags_written == 0
    files, files_after = audited["files"]
    assert files == files_after
    partial, kept = audited["partial"]
    assert sorted(partial.models) == [f"opacus-cifar:{i}" for i in range(1, 5)] and partial.computed == []
    assert kept == {"dpsgd-poisson", "opacus-cifar", "claimed-resnet", "shuffled-bert", "no-dp-baseline", "dp-event-lm"}
    # the owner removes the noise multiplier from claimed-resnet v4: its audit, numbers and card section go away
    client = _client(registry["uri"])
    client.delete_model_version_tag("claimed-resnet", "4", "dp.noise_multiplier")
    main, args = audited["cli"]
    assert main(args) == 0
    out = capsys.readouterr().out
    n_old = len(audited["first"].models)
    n_na = len(audited["first"].not_auditable)
    new = audited["new_version"]
    total = n_old + n_na + 1
    assert f"{total} model versions: 1 audited, {n_old - 1} reused (unchanged), {n_na + 1} not auditable" in out
    assert "not auditable claimed-resnet:4: incomplete DP description: missing dp.noise_multiplier" in out
    mv4 = client.get_model_version("claimed-resnet", "4")
    assert mv4.description == OWNER_NOTES and mv4.tags["team"] == "vision"
    assert mv4.tags["privacy.status"].startswith("not auditable: incomplete DP description: missing dp.noise_mult")
    assert not any(k.startswith("privacy.") and k != "privacy.status" for k in mv4.tags)
    assert "not auditable no-dp-baseline:1: incomplete DP description: missing dp.noise_multiplier" in out
    tags = _client(registry["uri"]).get_model_version("dpsgd-poisson", new).tags
    ref = gdpcore.analyze(gdpcore.SubsampledGaussian(noise_multiplier=1.5, sampling_rate=0.01, steps=100))
    assert float(tags["privacy.mu"]) == pytest.approx(ref.mu, rel=1e-5)


def test_views_hold_registry_and_manifest_versions(audited):
    _, rows = query_report(
        audited["report"],
        "SELECT model, version, registry, production, description_source, status, not_auditable FROM models "
        "ORDER BY model, version",
    )
    by = {(r[0], r[1]): r for r in rows}
    assert by[("tiny-a", 1)][4].startswith("manifest:") and by[("tiny-a", 1)][5] == "audited"
    label = by[("dpsgd-poisson", 1)][2]
    assert label.startswith("mlflow-127.0.0.1_")
    assert by[("dpsgd-poisson", 1)][4] == f"mlflow:{audited['uri']}#dpsgd-poisson/1"
    assert by[("no-dp-baseline", 2)][5] == "not auditable" and "dp.noise_multiplier" in by[("no-dp-baseline", 2)][6]
    assert [k for k, r in by.items() if r[3]] == [("dpsgd-poisson", 3), ("opacus-cifar", 2)]  # alias, stage
    _, rows = query_report(audited["report"], "SELECT DISTINCT registry FROM model_privacy ORDER BY 1")
    assert [r[0] for r in rows] == sorted([label, "manifests"])
    _, rows = query_report(
        audited["report"],
        "SELECT version, against, other_version FROM model_comparisons WHERE model = 'dpsgd-poisson' "
        "AND version = 5 ORDER BY against",
    )
    assert rows == [(5, "previous", 4), (5, "production", 3)]
