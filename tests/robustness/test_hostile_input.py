"""Hostile grid specs (tasks/spec.py): hypothesis mutations of a valid spec (wrong types, NaN/inf, huge numbers,
unicode, nesting) and raw YAML with tags such as !!python/object. Every case is either rejected with a ValueError that
names the file, or accepted and then fully valid; loading writes nothing and constructs no Python object from a tag.

The registry-manifest parser (tasks/registry.py) gets the same treatment in test_hostile_registry.py.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gdpcore
from tasks.spec import GridSpec, load_grid_spec
from tests.robustness._child import load_in_child

BASE: dict[str, Any] = {
    "name": "fuzz",
    "mechanism": "subsampled_gaussian",
    "grid": {"noise_multiplier": [0.8, 1.5], "sampling_rate": {"logspace": [0.001, 0.1, 3]}, "steps": [10, 100]},
    "deltas": [1e-5, 1e-6],
    "fprs": [1e-3, 0.1],
    "representations": ["gdp", "epsilon_delta"],
    "chunk_size": 4,
    "max_cells": 1000,
    "plot": {"x": "sampling_rate", "y": "noise_multiplier", "fixed": {"steps": 10}},
}
PATHS = [
    ("name",),
    ("mechanism",),
    ("grid",),
    ("grid", "noise_multiplier"),
    ("grid", "noise_multiplier", 0),
    ("grid", "sampling_rate"),
    ("grid", "sampling_rate", "logspace"),
    ("grid", "sampling_rate", "logspace", 2),
    ("grid", "steps"),
    ("grid", "steps", 1),
    ("grid", "extra_param"),
    ("deltas",),
    ("deltas", 0),
    ("fprs",),
    ("fprs", 1),
    ("representations",),
    ("representations", 0),
    ("chunk_size",),
    ("max_cells",),
    ("discretization",),
    ("alpha_min",),
    ("plot",),
    ("plot", "x"),
    ("plot", "fixed"),
    ("unknown_key",),
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**30), 10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, -1, 0.0, 1.0, 1e-320, 1e308, 2**63, "nan", ".inf", "1e-5", "", " ", "gdp", "steps"]),
    st.text(max_size=12),  # unicode, control characters, surrogates are filtered by hypothesis' default alphabet
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(st.one_of(st.text(max_size=8), st.integers()), inner, max_size=3)
    ),
    max_leaves=8,
)


def _set(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    head, *rest = path
    if isinstance(doc, dict):
        doc[head] = _set(doc.get(head, {}), tuple(rest), value)
    elif isinstance(doc, list) and isinstance(head, int) and head < len(doc):
        doc[head] = _set(doc[head], tuple(rest), value)
    return doc


def _check(path: Path, text: str) -> GridSpec | None:
    """The contract for one document: ValueError naming the file, or a spec that is valid all the way down."""
    path.write_text(text, encoding="utf-8")
    before = sorted(path.parent.iterdir())
    try:
        spec = load_grid_spec(path)
    except ValueError as exc:
        msg = str(exc)
        assert msg.startswith(f"{path}:") and len(msg) < 20_000, msg[:500]
        spec = None
    assert sorted(path.parent.iterdir()) == before  # loading wrote nothing
    if spec is not None:
        assert spec.n_cells <= spec.max_cells
        assert all(0 < d < 1 and math.isfinite(d) for d in spec.deltas)
        assert all(0 <= a <= 1 for a in spec.fprs)
        for cell in spec.iter_cells():  # every accepted cell is a valid mechanism with finite parameters
            m = gdpcore.mechanism_from_dict(cell)
            assert all(not isinstance(v, float) or math.isfinite(v) for v in cell.values()), cell
            assert m.content_hash
    return spec


@settings(
    max_examples=min(300, settings.default.max_examples), suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(mutations=st.lists(st.tuples(st.sampled_from(PATHS), values), min_size=1, max_size=3))
def test_mutated_specs_are_rejected_clearly_or_fully_valid(tmp_path, mutations):
    doc = copy.deepcopy(BASE)
    for p, v in mutations:
        doc = _set(doc, p, v)
    _check(tmp_path / "spec.yaml", yaml.safe_dump(doc, allow_unicode=True))


TAGS = [
    "!!python/object/apply:os.system ['touch {sentinel}']",
    "!!python/object/apply:subprocess.check_output [['touch', '{sentinel}']]",
    "!!python/object/new:tasks.spec.GridSpec {{}}",
    "!!python/object:gdpcore.Gaussian {{noise_multiplier: 1.0}}",
    "!!python/name:os.system",
    "!!python/module:os",
    "!!python/tuple [1, 2]",
    "!!binary aGVsbG8=",
    "!!set {{0.5: null}}",
    "!!timestamp 2026-01-01",
    "!!omap [{{a: 1}}]",
    "!custom 0.5",
    "!!float .nan",
    "!!float -.inf",
    "!!int 99999999999999999999999999",
    "!!str 1.0",
]
SLOTS = [
    "{v}",
    "name: {v}\nmechanism: gaussian\ngrid: {{noise_multiplier: [1.0]}}\n",
    "name: t\nmechanism: gaussian\ngrid: {{noise_multiplier: {v}}}\n",
    "name: t\nmechanism: gaussian\ngrid: {{noise_multiplier: [{v}]}}\n",
    "name: t\nmechanism: gaussian\ngrid: {{noise_multiplier: [1.0]}}\ndeltas: [{v}]\n",
    "name: t\nmechanism: {v}\ngrid: {{noise_multiplier: [1.0]}}\n",
]


@pytest.mark.parametrize("slot", range(len(SLOTS)))
@pytest.mark.parametrize("tag", TAGS)
def test_yaml_tags_construct_nothing(tmp_path, tag, slot):
    sentinel = tmp_path / "pwned"
    text = SLOTS[slot].format(v=tag.format(sentinel=sentinel))
    spec = _check(tmp_path / "spec.yaml", text)
    assert not sentinel.exists()
    if tag.startswith("!!python") or tag.startswith("!custom"):
        assert spec is None  # safe_load refuses the tag: a ValueError, never an object
    if spec is not None:  # standard tags safe_load knows may still pass validation: only plain data came out
        assert isinstance(spec, GridSpec) and all(isinstance(v, (int, float)) for v in spec.deltas)


@pytest.mark.parametrize("case", ["billion_laughs", "huge_list", "huge_linspace", "deep_nesting", "long_unicode"])
@pytest.mark.slow  # bounded resource attacks: 7-28 s each at load 8-12 on 2 cores
def test_resource_attacks_end_quickly(tmp_path, case):
    """Alias bombs, huge lists and deep nesting are refused (or accepted) in seconds, in a child with a timeout."""
    if case == "billion_laughs":
        lines = ["a0: &a0 [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]"]
        lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
        text = "\n".join(lines) + "\nname: t\nmechanism: gaussian\ngrid: {noise_multiplier: *a9}\n"
    elif case == "huge_list":
        text = "name: t\nmechanism: gaussian\ngrid: {noise_multiplier: [" + ", ".join(["1.0"] * 120_000) + "]}\n"
    elif case == "huge_linspace":
        text = "name: t\nmechanism: gaussian\ngrid: {noise_multiplier: {linspace: [0.5, 5, 1000000000000]}}\n"
    elif case == "deep_nesting":
        text = "name: t\nmechanism: gaussian\ngrid: {noise_multiplier: " + "[" * 5000 + "]" * 5000 + "}\n"
    else:
        text = "name: t\nmechanism: gaussian\ngrid: {noise_multiplier: [1.0]}\nfprs: ['" + "é" * 1_000_000 + "']\n"
    path = tmp_path / "spec.yaml"
    path.write_text(text, encoding="utf-8")
    outcome = load_in_child("tasks.spec:load_grid_spec", str(path))
    assert outcome.startswith("ValueError: "), outcome
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]
