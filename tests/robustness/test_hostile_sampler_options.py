"""Hostile library sampler options in a manifest (tasks.manifest: Keras ``shuffle`` of a tf_privacy form, Opacus
``poisson_sampling``): every bad value is one bounded error line naming the field and the value, from YAML and from an
MLflow ``dp.tf_privacy`` JSON alike; nothing is built from it."""

from __future__ import annotations

import json

import pytest

from tasks.manifest import ManifestError, load_manifest_file, validate_manifest
from tasks.mlflow_registry import NotAuditable, description_to_manifest

_TF = {"batch_size": 250, "epochs": 1, "noise_multiplier": 1.0}
_BAD = ["yes", "True", "BATCH", 1, 0, 1.0, "false ", [True], {"batch": True}, "x" * 100_000, "\x00\n"]


@pytest.mark.parametrize("bad", _BAD)
def test_bad_keras_shuffle_is_one_bounded_line(bad):
    with pytest.raises(ManifestError) as err:
        validate_manifest(
            {
                "name": "m",
                "version": 1,
                "delta": 1e-5,
                "dataset_size": 1000,
                "mechanism": {"tf_privacy": {**_TF, "shuffle": bad}},
            }
        )
    text = str(err.value)
    assert err.value.field == "mechanism.tf_privacy.shuffle" and "Keras Model.fit shuffle must be" in text
    assert "\n" not in text and len(text) < 600


@pytest.mark.parametrize("bad", _BAD[:4] + [_BAD[9]])
def test_bad_keras_shuffle_from_mlflow_names_the_key(bad):
    desc = {"dp.delta": "1e-5", "dp.dataset_size": "1000", "dp.tf_privacy": json.dumps({**_TF, "shuffle": bad})}
    with pytest.raises(NotAuditable) as err:
        description_to_manifest(desc, name="m", version=1)
    assert "dp.tf_privacy" in str(err.value) and "\n" not in str(err.value) and len(str(err.value)) < 800


def test_yaml_contradiction_names_file_and_both_fields(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(
        "name: m\nversion: 1\ndelta: 1.0e-5\ndataset_size: 1000\nsampler: poisson\n"
        "mechanism:\n  tf_privacy: {batch_size: 250, epochs: 1, noise_multiplier: 1.0, shuffle: false}\n"
    )
    with pytest.raises(ManifestError) as err:
        load_manifest_file(path)
    assert str(err.value) == (
        f"{path}: mechanism.tf_privacy: shuffle: false means sampler cyclic, which contradicts sampler: poisson"
    )
