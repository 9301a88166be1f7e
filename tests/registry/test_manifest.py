"""Manifest schema (tasks.registry): every mechanism form resolves to the right gdpcore mechanism; invalid manifests
name the file and the field. No Prefect here."""

from __future__ import annotations

import math
import textwrap

import pytest

from tasks.registry import ManifestError, load_manifest_file, load_registry

from .conftest import SAMPLE_REGISTRY, TINY_A


def _write(tmp_path, text, name="m.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text), encoding="utf-8")
    return p


def test_dpsgd_batch_size_gives_q_and_epochs_give_steps():
    (gpt2,) = [m for m in load_manifest_file(SAMPLE_REGISTRY / "gpt2-sst2-lora.yaml") if m.version == 1]
    mech = gpt2.mechanism_dict()
    # seed 001 App. F.2: q = 256/67348, T = 3 * ceil(67348/256) = 792
    assert mech["sampling_rate"] == pytest.approx(256 / 67348, rel=1e-15)
    assert mech["steps"] == 792
    cifar = load_manifest_file(SAMPLE_REGISTRY / "cifar10-wrn40-4.yaml")
    assert [m.version for m in cifar] == [1, 2, 3, 4, 5, 6]
    # CIFAR-10 train set, N = 50000 (docs/references.md S000-3: seed 000's Table 2 mu row used N = 60000).
    assert {m.mechanism_dict()["sampling_rate"] for m in cifar} == {16384 / 50000}
    assert [(m.mechanism_dict()["noise_multiplier"], m.mechanism_dict()["steps"]) for m in cifar] == [
        (40.0, 906),
        (24.0, 1156),
        (20.0, 1656),
        (16.0, 1765),
        (12.0, 2007),
        (9.4, 2000),
    ]


def test_opacus_history_state_dict_and_list_and_phases_agree(tmp_path):
    head = "name: m\nversion: 1\ndataset_size: 60000\ndelta: 1/N^1.1\nmechanism:\n"
    a = _write(
        tmp_path, head + "  opacus_history: {mechanism: rdp, history: [[1.1, 0.01, 100], [0.9, 0.02, 50]]}\n", "a.yaml"
    )
    b = _write(tmp_path, head + "  opacus_history: [[1.1, 0.01, 100], [0.9, 0.02, 50]]\n", "b.yaml")
    c = _write(
        tmp_path,
        head + "  phases: [{noise_multiplier: 1.1, batch_size: 600, steps: 100},\n"
        "           {noise_multiplier: 0.9, sampling_rate: 0.02, steps: 50}]\n",
        "c.yaml",
    )
    mechs = [load_manifest_file(p)[0].build_mechanism() for p in (a, b, c)]
    assert mechs[0] == mechs[1] == mechs[2]
    assert mechs[0].kind == "composed" and [m.steps for m in mechs[0].mechanisms] == [100, 50]
    m = load_manifest_file(a)[0]
    assert m.delta_value == pytest.approx(60000**-1.1)
    assert m.delta.describe() == "1/N^1.1"


def test_sample_registry_is_valid_and_complete():
    good, errors = load_registry(SAMPLE_REGISTRY)
    assert errors == []
    names = {m.name for m in good}
    assert {
        "cifar10-wrn40-4",
        "cifar10-wrn28-10-imagenet32-ft",
        "gpt2-sst2-lora",
        "census-2020-topdown",
        "mnist-cnn-opacus",
    } <= names
    topdown = next(m for m in good if m.name == "census-2020-topdown")
    # seed 000 Sec. 5: sigma_i = sqrt(10 / (2 a_i rho)) with rho = 3.65 -> continuous equivalent mu = sqrt(2 rho)
    sig = [d["mechanism"]["sigma"] for d in topdown.mechanism_dict()["mechanisms"]]
    assert math.sqrt(sum(10 / s**2 for s in sig)) == pytest.approx(math.sqrt(2 * 3.65), rel=1e-5)
    opacus = next(m for m in good if m.name == "mnist-cnn-opacus")
    assert opacus.mechanism.form == "opacus_history" and len(opacus.mechanism_dict()["mechanisms"]) == 2


def test_spec_hash_ignores_layout_but_not_numbers(tmp_path):
    a = _write(tmp_path, TINY_A.format(version=1, sigma=1.0), "a.yaml")
    b = _write(
        tmp_path,
        "# a comment\n"
        + TINY_A.format(version=1, sigma=1.0).replace("privacy_unit: example\n", "")
        + "privacy_unit: example\n",
        "b.yaml",
    )
    c = _write(tmp_path, TINY_A.format(version=1, sigma=1.1), "c.yaml")
    ha, hb, hc = (load_manifest_file(p)[0].spec_hash() for p in (a, b, c))
    assert ha == hb != hc


@pytest.mark.parametrize(
    ("text", "field", "fragment"),
    [
        (
            "models:\n  - {name: x, version: 1, dataset_size: 10, delta: 1.0e-5, mechanism: {dpsgd: "
            "{noise_multiplier: 1, batch_size: 5, steps: 10}}}\n  - {name: x, version: 2, dataset_size: 10, delta: "
            "1.0e-5, mechanism: {dpsgd: {noise_multiplier: 1, batch_size: 5, steps: 0}}}\n",
            "models[1].mechanism.dpsgd.steps",
            "greater than 0",
        ),
        (
            "name: x\nversion: 1\ndataset_size: 10\ndelta: 1.0e-5\nmechanism: {dpsgd: {noise_multiplier: -1, "
            "batch_size: 5, steps: 3}}\n",
            "mechanism.dpsgd.noise_multiplier",
            "greater than 0",
        ),
        (
            "name: x\nversion: 1\ndataset_size: 10\ndelta: 1.0e-5\nmechanism: {dpsgd: {noise_multiplier: 1, "
            "batch_size: 5}}\n",
            "mechanism.dpsgd",
            "steps or epochs",
        ),
        (
            "name: x\nversion: 1\ndataset_size: 10\ndelta: 1.0e-5\nmechanism: {dpsgd: {noise_multiplier: 1, "
            "batch_size: 5, steps: 3}, opacus_history: [[1, 0.1, 3]]}\n",
            "mechanism",
            "exactly one of",
        ),
        (
            "name: x\nversion: 1\ndataset_size: 10\ndelta: 2/N\nmechanism: {dpsgd: {noise_multiplier: 1, "
            "batch_size: 5, steps: 3}}\n",
            "delta",
            "1/N^1.1",
        ),
        (
            "name: x\nversion: 1\ndataset_size: 10\ndelta: 1.0e-5\nsigma: 3\nmechanism: {dpsgd: {noise_multiplier: 1, "
            "batch_size: 5, steps: 3}}\n",
            "sigma",
            "Extra inputs",
        ),
        (
            "name: x\nversion: 1\ndataset_size: 10\ndelta: 1.0e-5\nneighbouring: replace_one\nmechanism: {dpsgd: "
            "{noise_multiplier: 1, batch_size: 5, steps: 3}}\n",
            "neighbouring",
            "accounted under add_remove",
        ),
        (
            "name: x\nversion: 1\ndataset_size: 10\ndelta: 1.0e-5\nmechanism: {dpsgd: {noise_multiplier: 1, "
            "batch_size: 50, steps: 3}}\n",
            "mechanism.dpsgd",
            "exceeds the dataset size",
        ),
        (
            "name: x\nversion: 1\ndataset_size: 10\ndelta: 1.0e-5\nmechanism: {gdpcore: {kind: gaussian, "
            "noise_multiplier: 0}}\n",
            "mechanism.gdpcore",
            "noise_multiplier",
        ),
        (
            "name: x\nversion: 1\ndataset_size: 10\ndelta: 1.0e-5\nmechanism: {opacus_history: {steps: 3}}\n",
            "mechanism.opacus_history",
            "history",
        ),
        ("name: [unclosed\n", "", "not valid YAML"),
    ],
)
def test_invalid_manifest_names_file_and_field(tmp_path, text, field, fragment):
    path = _write(tmp_path, text, "bad.yaml")
    with pytest.raises(ManifestError) as info:
        load_manifest_file(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: "), msg
    assert info.value.file == str(path)
    assert info.value.field == field, msg
    assert fragment in msg, msg


def test_registry_collects_errors_and_duplicates_without_stopping(tmp_path):
    _write(tmp_path, TINY_A.format(version=1, sigma=1.0), "a.yaml")
    _write(tmp_path, TINY_A.format(version=1, sigma=2.0), "b.yaml")  # duplicate tiny-a:1
    _write(tmp_path, "name: broken\nversion: 1\n", "c.yaml")
    good, errors = load_registry(tmp_path)
    assert [m.key for m in good] == ["tiny-a:1"]
    msgs = sorted(str(e) for e in errors)
    assert any("b.yaml: name/version: tiny-a:1 is already declared" in m for m in msgs), msgs
    assert any("c.yaml: delta: Field required" in m for m in msgs), msgs
