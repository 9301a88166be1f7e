"""Hostile registry manifests (tasks/registry.py): hypothesis mutations of a valid manifest and raw YAML
with tags. Every case is rejected with a ManifestError (a ValueError) naming the file, or accepted as a manifest whose
mechanism builds and whose delta lies in (0, 1); loading writes nothing and constructs no object from a tag."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tasks.registry import ManifestError, load_manifest_file
from tests.robustness._child import load_in_child
from tests.robustness.test_hostile_input import TAGS, _set, values

BASE: dict[str, Any] = {
    "name": "fuzz-model",
    "version": 3,
    "privacy_unit": "example",
    "neighbouring": "add_remove",
    "dataset_size": 50000,
    "delta": 1e-5,
    "production": True,
    "claimed": {"epsilon": 8, "delta": 1e-5, "accountant": "RDP"},
    "mechanism": {"dpsgd": {"noise_multiplier": 1.1, "batch_size": 256, "steps": 1000}},
    "accounting": {"discretization": 1e-4, "alpha_min": 1e-10},
    "mlflow": {"registered_model": "fuzz-model", "version": "3"},
}
ALT_MECHANISMS = [
    {"phases": [{"noise_multiplier": 1.0, "sampling_rate": 0.01, "steps": 500}]},
    {"opacus_history": [[1.1, 0.01, 1000], [0.9, 0.01, 500]]},
    {"opacus_history": {"history": [[1.1, 0.01, 1000]]}},
    {"gdpcore": {"kind": "gaussian", "noise_multiplier": 1.0}},
    {"gdpcore": {"kind": "composed", "mechanisms": [{"kind": "laplace", "scale": 1.0}]}},
]
PATHS = [
    ("name",),
    ("version",),
    ("neighbouring",),
    ("dataset_size",),
    ("delta",),
    ("delta", "inverse_power"),
    ("production",),
    ("claimed",),
    ("claimed", "epsilon"),
    ("mechanism",),
    ("mechanism", "dpsgd"),
    ("mechanism", "dpsgd", "noise_multiplier"),
    ("mechanism", "dpsgd", "batch_size"),
    ("mechanism", "dpsgd", "steps"),
    ("mechanism", "dpsgd", "epochs"),
    ("mechanism", "phases"),
    ("mechanism", "gdpcore"),
    ("mechanism", "gdpcore", "kind"),
    ("mechanism", "gdpcore", "noise_multiplier"),
    ("mechanism", "gdpcore", "mechanisms"),
    ("mechanism", "opacus_history"),
    ("accounting", "discretization"),
    ("mlflow",),
    ("manifest_path",),
    ("models",),
    ("unknown",),
]


def _check(path: Path, text: str) -> list | None:
    path.write_text(text, encoding="utf-8")
    before = sorted(path.parent.iterdir())
    try:
        manifests = load_manifest_file(path)
    except ManifestError as exc:
        assert str(exc).startswith(str(path)) and len(str(exc)) < 20_000, str(exc)[:300]
        manifests = None
    assert sorted(path.parent.iterdir()) == before
    for m in manifests or []:
        mech = m.build_mechanism()
        assert 0 < m.delta_value < 1 and math.isfinite(m.delta_value)
        assert mech.content_hash and len(m.spec_hash()) == 24
    return manifests


@settings(
    max_examples=min(250, settings.default.max_examples), suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    alt=st.sampled_from([None, *range(len(ALT_MECHANISMS))]),
    mutations=st.lists(st.tuples(st.sampled_from(PATHS), values), min_size=1, max_size=3),
)
def test_mutated_manifests_are_rejected_clearly_or_fully_valid(tmp_path, alt, mutations):
    doc = copy.deepcopy(BASE)
    if alt is not None:
        doc["mechanism"] = copy.deepcopy(ALT_MECHANISMS[alt])
    for p, v in mutations:
        doc = _set(doc, p, v)
    _check(tmp_path / "m.yaml", yaml.safe_dump(doc, allow_unicode=True))


@pytest.mark.parametrize("tag", TAGS)
def test_manifest_yaml_tags_construct_nothing(tmp_path, tag):
    sentinel = tmp_path / "pwned"
    for text in (
        tag.format(sentinel=sentinel),
        yaml.safe_dump(BASE).replace(
            "noise_multiplier: 1.1", "noise_multiplier: " + tag.format(sentinel=sentinel).replace("{}", "{ }")
        ),
    ):
        got = _check(tmp_path / "m.yaml", text)
        assert not sentinel.exists()
        if tag.startswith(("!!python", "!custom")):
            assert got is None


@pytest.mark.parametrize("case", ["billion_laughs", "deep_nesting", "deep_gdpcore"])
def test_manifest_resource_attacks_end_quickly(tmp_path, case):
    if case == "billion_laughs":
        lines = ["a0: &a0 [1.1, 0.01, 10]"]
        lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
        text = (
            "\n".join(lines)
            + "\n"
            + yaml.safe_dump({**BASE, "mechanism": None}).replace("mechanism: null", "mechanism: {opacus_history: *a9}")
        )
    elif case == "deep_nesting":
        text = yaml.safe_dump({**BASE, "mechanism": None}).replace(
            "mechanism: null", "mechanism: " + "[" * 5000 + "]" * 5000
        )
    else:  # 3000 nested self_composed mechanisms: gdpcore recursion
        inner = "{kind: gaussian, noise_multiplier: 1.0}"
        for _ in range(3000):
            inner = "{kind: self_composed, count: 2, mechanism: " + inner + "}"
        text = yaml.safe_dump({**BASE, "mechanism": None}).replace(
            "mechanism: null", "mechanism: {gdpcore: " + inner + "}"
        )
    path = tmp_path / "m.yaml"
    path.write_text(text, encoding="utf-8")
    outcome = load_in_child("tasks.registry:load_manifest_file", str(path))
    assert outcome.startswith("ValueError: ") or outcome == "accepted", outcome
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.yaml"]
