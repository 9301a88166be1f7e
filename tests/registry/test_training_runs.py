"""Training-run files and manifest forms (tasks/training_runs.py, tasks/registry.py): Opacus accountant files with
and without torch, the opacus / tf_privacy / dp_event manifest forms, the sampler, and one Opacus history giving the
same numbers through Python, the CLI and a manifest. Numerical truth for the adapters themselves is in
tests/test_adapters.py."""

from __future__ import annotations

import io
import json
import pickle
import zipfile
from pathlib import Path

import pytest

import gdpcore
from flows.cli import main
from gdpcore.adapters import FIXED_REASON, SHUFFLE_REASON, from_opacus_history
from gdpcore.mechanisms import SampledWithoutReplacementGaussian
from tasks.audit import compute_audit_row, estimate_flags
from tasks.cards import hf_record, render_markdown
from tasks.mlflow_tags import privacy_tags
from tasks.registry import ManifestError, load_manifest_file
from tasks.training_runs import TrainingRunFileError, load_opacus_file, read_opacus_state

DATA = Path(__file__).resolve().parents[1] / "data"
PT = DATA / "opacus_rdp_two_phase.pt"  # torch.save(RDPAccountant.state_dict()); how it was made: tests/data/README.md
CKPT = DATA / "opacus_checkpoint.pt"  # PrivacyEngine.save_checkpoint's dict, same accountant (tests/data/README.md)
TWO_PHASE = [[1.1, 0.004266666666666667, 4688], [0.9, 0.008533333333333334, 586]]
DELTA = 60_000**-1.1
STEP = 1e-3  # one fixed step everywhere, so that the three paths run the identical computation


# -- files ----------------------------------------------------------------------------------------------------------
def test_pt_state_dict_read_without_torch():
    """The torch.save file is read by the restricted unpickler: Opacus's pickled ``mechanism`` classmethod
    (getattr(opacus.accountants.rdp.RDPAccountant, 'mechanism')) becomes its name, and nothing is imported."""
    state = read_opacus_state(PT, use_torch=False)
    assert state == {"history": TWO_PHASE, "mechanism": "rdp"}
    run = load_opacus_file(PT, use_torch=False)
    assert run.mechanism == from_opacus_history(TWO_PHASE).mechanism and "RDPAccountant" in run.source


@pytest.mark.torch
def test_pt_state_dict_read_with_torch():
    """With the optional torch (``gdp-audit[opacus]``, installed by the Makefile; without it skipped with the reason,
    an error under CI=true): torch.load(weights_only=True) with Opacus's names allow-listed as inert placeholders."""
    from tests.test_opacus_accountant import _require_opacus

    _require_opacus()
    assert read_opacus_state(PT, use_torch=True) == read_opacus_state(PT, use_torch=False)
    assert read_opacus_state(CKPT, use_torch=True) == read_opacus_state(CKPT, use_torch=False)


def test_full_checkpoint_read_without_torch():
    """PrivacyEngine.save_checkpoint's dict (model and optimizer tensors + privacy_accountant_state_dict): the tensors
    are skipped unread, the accountant is what is read; a tensor inside the accountant's state is an error."""
    assert read_opacus_state(CKPT, use_torch=False) == {"history": TWO_PHASE, "mechanism": "rdp"}
    assert load_opacus_file(CKPT).mechanism == from_opacus_history(TWO_PHASE).mechanism


def _torch_zip(payload: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("archive/data.pkl", payload)
        zf.writestr("archive/version", "3\n")
    return buf.getvalue()


class _Evil:
    def __reduce__(self):
        import os

        return (os.system, ("echo pwned",))


def test_restricted_reader_refuses_anything_but_plain_values(tmp_path):
    evil = tmp_path / "evil.pt"
    evil.write_bytes(_torch_zip(pickle.dumps({"history": [_Evil()]}, protocol=2)))
    with pytest.raises(
        TrainingRunFileError, match=r"evil.pt: refused to load posix.system|evil.pt: refused to load os"
    ):
        read_opacus_state(evil, use_torch=False)
    # {"history": [[1.1, <torch._utils._rebuild_tensor_v2()>]]} written by hand in pickle protocol 2: a tensor where a
    # number belongs
    tensor_in_history = tmp_path / "tensor.pt"
    tensor_in_history.write_bytes(
        _torch_zip(
            b"\x80\x02}q\x00X\x07\x00\x00\x00historyq\x01]q\x02]q\x03(G?\xf1\x99\x99\x99\x99\x99\x9a"
            b"ctorch._utils\n_rebuild_tensor_v2\nq\x04)Rq\x05eas."
        )
    )
    with pytest.raises(TrainingRunFileError, match=r"tensor.pt: state\['history'\]\[0\]\[1\] is a tensor"):
        read_opacus_state(tensor_in_history, use_torch=False)
    not_zip = tmp_path / "legacy.pt"
    not_zip.write_bytes(pickle.dumps({"history": TWO_PHASE}))
    with pytest.raises(TrainingRunFileError, match="legacy.pt: not a zip-format torch.save file"):
        read_opacus_state(not_zip, use_torch=False)
    with pytest.raises(TrainingRunFileError, match="nope.pt: no such file"):
        read_opacus_state(tmp_path / "nope.pt")
    with pytest.raises(TrainingRunFileError, match=r"x.txt: expected a .json or .pt"):
        (tmp_path / "x.txt").write_text("{}")
        read_opacus_state(tmp_path / "x.txt")


def test_json_files(tmp_path):
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"history": TWO_PHASE, "mechanism": "prv"}))
    hist = tmp_path / "history.json"
    hist.write_text(json.dumps(TWO_PHASE))
    assert load_opacus_file(state).mechanism == load_opacus_file(hist).mechanism == load_opacus_file(PT).mechanism
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"history": [[1.1, 2.0, 3]]}))
    with pytest.raises(TrainingRunFileError, match=r"bad.json: history\[0\]\[1\] \(sample_rate\) must be in \(0, 1\]"):
        load_opacus_file(bad)


# -- Python == CLI == manifest --------------------------------------------------------------------------------------
def _manifest(tmp_path: Path, mechanism: str, extra: str = "") -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(
        "name: run\nversion: 1\ndataset_size: 60000\ndelta: 1/N^1.1\n"
        f"accounting: {{discretization: {STEP}}}\n{extra}mechanism:\n{mechanism}",
        encoding="utf-8",
    )
    return path


def test_opacus_two_phase_same_numbers_through_python_cli_and_manifest(tmp_path, capsys):
    python = from_opacus_history(TWO_PHASE).analyze(discretization=STEP, deltas=[DELTA]).report
    py = {"eps": float(python.epsilon(DELTA)), "mu": python.mu, "adv": python.advantage}

    assert main(["analyze", "--opacus", str(PT), "--discretization", str(STEP), "--delta", repr(DELTA), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    cli = {"eps": out["epsilon"][0]["value"], "mu": out["mu"]["value"], "adv": out["advantage"]["value"]}

    rows = []
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "acct.pt").write_bytes(PT.read_bytes())
    for form in ("  opacus: {file: runs/acct.pt}\n", f"  opacus_history: {json.dumps(TWO_PHASE)}\n"):
        (m,) = load_manifest_file(_manifest(tmp_path, form))
        rows.append(compute_audit_row(m, "test"))
    manifest = [{"eps": r["epsilon"], "mu": r["mu"], "adv": r["advantage"]} for r in rows]

    assert py == cli == manifest[0] == manifest[1], (py, cli, manifest)
    assert out["training_run"]["sampler"] == "poisson" and rows[0]["estimate_reason"] is None
    assert rows[0]["mechanism_json"] == rows[1]["mechanism_json"]


# -- manifest forms -------------------------------------------------------------------------------------------------
def test_tf_privacy_form_uses_dataset_size_and_its_step_count(tmp_path):
    (m,) = load_manifest_file(
        _manifest(tmp_path, "  tf_privacy: {batch_size: 256, epochs: 60, noise_multiplier: 1.1}\n")
    )
    mech = m.build_mechanism()
    assert mech == gdpcore.SubsampledGaussian(noise_multiplier=0.55, sampling_rate=256 / 60_000, steps=14_063)
    assert m.sampler_value == "poisson" and m.estimate_reason is None


def test_shuffled_manifest_is_an_estimate_everywhere(tmp_path):
    (m,) = load_manifest_file(
        _manifest(
            tmp_path,
            "  dpsgd: {noise_multiplier: 1.0, sampling_rate: 0.01, steps: 100}\n",
            extra="sampler: shuffle\nclaimed: {epsilon: 3, delta: 1.0e-5, accountant: RDP}\n",
        )
    )
    row = compute_audit_row(m, "test")
    bounds = {row[c] for c in row if c.endswith("_bound") and row[c] is not None}
    assert bounds == {"estimate"} and row["sampler"] == "shuffle" and row["estimate_reason"] == SHUFFLE_REASON
    card = render_markdown(row, png_name=None)
    assert "is estimated (not proven) to be" in card and "**Estimate, not a guarantee.** Every number" in card
    assert "| upper |" not in card and "| lower |" not in card
    assert "can be neither certified nor refuted" in card and "so the claim holds" not in card
    hf = hf_record(row)
    assert hf["sampling"] == "shuffle" and hf["estimate_reason"] == SHUFFLE_REASON
    assert hf["neighboring_relation"] == "add_remove" and hf["mu_bound"] == "estimate"
    assert {e["bound"] for e in hf["epsilon_delta"]} == {"estimate"}
    tags = privacy_tags(row)
    assert tags["privacy.sampling"] == "shuffle" and tags["privacy.estimate_reason"] == SHUFFLE_REASON
    assert tags["privacy.neighboring_relation"] == "add_remove" and tags["privacy.mu.bound"] == "estimate"
    assert estimate_flags({"run:1": row}) == [f"run:1 (shuffle): {SHUFFLE_REASON}"]


def test_fixed_sampler(tmp_path):
    (m,) = load_manifest_file(
        _manifest(tmp_path, "  dpsgd: {noise_multiplier: 1.0, batch_size: 600, steps: 100}\n", extra="sampler: fixed\n")
    )
    assert m.estimate_reason == FIXED_REASON  # add/remove: Poisson numbers, labelled estimate
    path = _manifest(
        tmp_path,
        "  dpsgd: {noise_multiplier: 1.0, batch_size: 600, steps: 100}\n",
        extra="sampler: fixed\nneighbouring: replace_one\n",
    )
    (m,) = load_manifest_file(path)  # accounted exactly: fixed-size batches under replace-one
    assert m.estimate_reason is None
    assert m.build_mechanism() == SampledWithoutReplacementGaussian(
        noise_multiplier=1.0, dataset_size=60_000, batch_size=600, steps=100
    )
    row = compute_audit_row(m, "test")
    assert row["neighbouring"] == "replace_one" and row["sampler"] == "fixed" and row["mu_bound"] == "upper"
    assert hf_record(row)["neighboring_relation"] == privacy_tags(row)["privacy.neighboring_relation"] == "replace_one"
    assert "Fixed-size batches drawn without replacement, accounted as such" in render_markdown(row, png_name=None)


def test_dp_event_form(tmp_path):
    event = {
        "type": "SelfComposedDpEvent",
        "count": 100,
        "event": {
            "type": "PoissonSampledDpEvent",
            "sampling_probability": 0.01,
            "event": {"type": "GaussianDpEvent", "noise_multiplier": 1.0},
        },
    }
    (m,) = load_manifest_file(_manifest(tmp_path, f"  dp_event: {json.dumps(event)}\n"))
    assert m.build_mechanism() == gdpcore.SubsampledGaussian(noise_multiplier=1.0, sampling_rate=0.01, steps=100)
    assert m.sampler_value is None and m.estimate_reason is None
    # Under replace-one, dp_accounting's Poisson-sampled Gaussian is the pair (1-q)N(0) + qN(1) vs (1-q)N(0) + qN(-1)
    # (its pld_privacy_accountant): a replace-one mixture of the zero and the unit shift, composed 100 times.
    (r,) = load_manifest_file(
        _manifest(tmp_path, f"  dp_event: {json.dumps(event)}\n", extra="neighbouring: replace_one\n")
    )
    assert r.build_mechanism() == gdpcore.MixtureOfGaussians(
        standard_deviation=1.0, sensitivities="0,1", probabilities="0.99,0.01", steps=100, neighbouring="replace_one"
    )
    event["event"]["event"]["noise_multiplier"] = "big"
    with pytest.raises(ManifestError, match=r"mechanism.dp_event: .*noise_multiplier.*'big'"):
        load_manifest_file(_manifest(tmp_path, f"  dp_event: {json.dumps(event)}\n"))


@pytest.mark.parametrize(
    ("mechanism", "extra", "field", "text"),
    [
        (
            "  tf_privacy: {epochs: 60, noise_multiplier: 1.1}\n",
            "",
            "mechanism.tf_privacy.batch_size",
            "Field required",
        ),
        (
            "  tf_privacy: {batch_size: 256, epochs: 60, noise_multiplier: '1.1'}\n",
            "",
            "mechanism.tf_privacy.noise_multiplier",
            "valid number",
        ),
        ("  opacus: {file: missing.pt}\n", "", "mechanism.opacus", "missing.pt: no such file"),
        ("  opacus: {file: ../../etc/passwd}\n", "", "mechanism.opacus", "resolves outside the manifest's folder"),
        (
            "  opacus: {file: acct.json, poisson_sampling: false}\n",
            "sampler: poisson\n",
            "mechanism.opacus",
            "contradicts sampler",
        ),
        (
            "  dpsgd: {noise_multiplier: 1.0, sampling_rate: 0.01, steps: 10}\n",
            "sampler: random\n",
            "sampler",
            "'poisson', 'shuffle', 'fixed', 'cyclic' or 'balls_in_bins'",
        ),
        (
            "  dpsgd: {noise_multiplier: 1.0, sampling_rate: 0.01, steps: 10}\n",
            "neighbouring: replace_one\n",
            "neighbouring",
            "replace_one needs sampler: fixed",
        ),
        (
            "  tf_privacy: {batch_size: 256, epochs: 1, noise_multiplier: 1.1, max_examples_per_user: 0}\n",
            "",
            "mechanism.tf_privacy.max_examples_per_user",
            "greater than 0",
        ),
    ],
)
def test_manifest_errors_name_file_field_and_value(tmp_path, mechanism, extra, field, text):
    (tmp_path / "acct.json").write_text(json.dumps(TWO_PHASE))
    path = _manifest(tmp_path, mechanism, extra)
    with pytest.raises(ManifestError) as info:
        load_manifest_file(path)
    assert info.value.file == str(path) and info.value.field == field, str(info.value)
    assert text in info.value.message, str(info.value)


# -- CLI errors -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "text"),
    [
        (
            ["--tf-privacy", "--number-of-examples", "60000", "--epochs", "60", "--noise-multiplier", "1"],
            "--tf-privacy needs --batch-size",
        ),
        (
            [
                "--tf-privacy",
                "--number-of-examples",
                "6",
                "--batch-size",
                "7",
                "--epochs",
                "1",
                "--noise-multiplier",
                "1",
            ],
            "batch_size 7 exceeds number_of_examples 6",
        ),
        (["--batch-size", "7"], "--batch-size is an option of --tf-privacy"),
        (["--opacus", "nope.pt"], "nope.pt: no such file"),
        (["--opacus", str(PT), "--dp-event", "x.json"], "give one mechanism source"),
        (
            ["--sampler", "shuffle", "gaussian", "--noise-multiplier", "1"],
            "--sampler applies to --opacus and --tf-privacy",
        ),
        (["--tf-privacy", "--epochs", "-1"], "argument --epochs: must be a positive number, got -1"),
    ],
)
def test_cli_bad_input_exits_2_with_the_field(argv, text, capsys):
    assert main(["analyze", *argv]) == 2
    err = capsys.readouterr().err
    assert text in err and "Traceback" not in err, err


def test_cli_shuffled_opacus_run_is_labelled_estimate(capsys):
    argv = ["analyze", "--opacus", str(PT), "--sampler", "shuffle", "--discretization", "1e-3", "--claim", "3,1e-5,RDP"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "the claim is neither certified nor refuted" in out and "certifies" not in out
    assert f"ESTIMATE        every number below is an estimate: {SHUFFLE_REASON}" in out
    assert "(upper" not in out and "(lower" not in out and "(estimate)" in out


def test_validate_manifest_from_a_mapping():
    """What a registry reader other than YAML (e.g. MLflow's) builds is validated the same way, errors named by label."""
    from tasks.registry import validate_manifest

    data = {
        "name": "m",
        "version": 3,
        "dataset_size": 60_000,
        "delta": 1e-5,
        "sampler": "shuffle",
        "mechanism": {"opacus_history": TWO_PHASE},
    }
    m = validate_manifest(data, file="mlflow:/m/3")
    assert m.estimate_reason == SHUFFLE_REASON and m.build_mechanism() == from_opacus_history(TWO_PHASE).mechanism
    with pytest.raises(ManifestError) as info:
        validate_manifest({**data, "mechanism": {"tf_privacy": {"batch_size": 256}}}, file="mlflow:/m/3")
    assert str(info.value).startswith("mlflow:/m/3: mechanism.tf_privacy.epochs: Field required"), str(info.value)
