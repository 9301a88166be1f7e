"""Mechanism value objects: JSON round trip, stable hashes, keyword-only construction, input validation."""

import json
import math

import pytest

import gdpcore as g
from gdpcore import kinds

EXAMPLES = [
    g.Gaussian(noise_multiplier=1.5),
    g.Gaussian(noise_multiplier=2.0, sensitivity=3.0, neighbouring="replace_one"),
    g.Laplace(scale=0.5),
    g.RandomizedResponse(epsilon=1.0),
    g.SubsampledGaussian(noise_multiplier=9.4, sampling_rate=0.32768, steps=2000),
    g.DiscreteGaussian(sigma=3.2, sensitivity=2),
    g.Composed(mechanisms=[g.Gaussian(noise_multiplier=1.0), g.Laplace(scale=2.0)]),
    g.SelfComposed(mechanism=g.SubsampledGaussian(noise_multiplier=1.0, sampling_rate=0.01, steps=10), count=3),
]


@pytest.mark.parametrize("mechanism", EXAMPLES, ids=lambda m: m.kind)
def test_json_round_trip_preserves_equality_and_hash(mechanism):
    text = json.dumps(mechanism.to_dict())
    again = g.mechanism_from_dict(json.loads(text))
    assert again == mechanism
    assert hash(again) == hash(mechanism)
    assert again.content_hash == mechanism.content_hash


def test_content_hash_is_stable_across_processes_and_versions():
    # A literal value: the hash is a cache key and a row id in the lake, so it must never change silently.
    m = g.SubsampledGaussian(noise_multiplier=9.4, sampling_rate=0.32768, steps=2000)
    assert m.content_hash == "6de909b1b939935eda76f3e9f44a618c"
    assert len(m.content_hash) == 32


def test_hash_distinguishes_parameters_and_normalises_numeric_types():
    a = g.SubsampledGaussian(noise_multiplier=1, sampling_rate=0.01, steps=100)
    b = g.SubsampledGaussian(noise_multiplier=1.0, sampling_rate=0.01, steps=100.0)
    c = g.SubsampledGaussian(noise_multiplier=1.0, sampling_rate=0.01, steps=101)
    assert a == b and a.content_hash == b.content_hash
    assert a.content_hash != c.content_hash


def test_constructors_are_keyword_only():
    with pytest.raises(TypeError):
        g.Gaussian(1.0)  # type: ignore[misc]


def test_explicit_defaults_are_serialised():
    d = g.SubsampledGaussian(noise_multiplier=1.0, sampling_rate=0.1, steps=5).to_dict()
    assert d["sensitivity"] == 1.0 and d["neighbouring"] == "add_remove"
    assert g.RandomizedResponse(epsilon=1.0).to_dict()["neighbouring"] == "replace_one"


@pytest.mark.parametrize(
    ("factory", "field", "value"),
    [
        (lambda v: g.Gaussian(noise_multiplier=v), "noise_multiplier", 0.0),
        (lambda v: g.Gaussian(noise_multiplier=v), "noise_multiplier", -1.0),
        (lambda v: g.Gaussian(noise_multiplier=v), "noise_multiplier", math.nan),
        (lambda v: g.Gaussian(noise_multiplier=v), "noise_multiplier", math.inf),
        (lambda v: g.Gaussian(noise_multiplier=v), "noise_multiplier", "1.0"),
        (lambda v: g.SubsampledGaussian(noise_multiplier=1, sampling_rate=v, steps=1), "sampling_rate", 0.0),
        (lambda v: g.SubsampledGaussian(noise_multiplier=1, sampling_rate=v, steps=1), "sampling_rate", 1.5),
        (lambda v: g.SubsampledGaussian(noise_multiplier=1, sampling_rate=v, steps=1), "sampling_rate", math.nan),
        (lambda v: g.SubsampledGaussian(noise_multiplier=1, sampling_rate=0.1, steps=v), "steps", 2.5),
        (lambda v: g.SubsampledGaussian(noise_multiplier=1, sampling_rate=0.1, steps=v), "steps", -3),
        (lambda v: g.SubsampledGaussian(noise_multiplier=1, sampling_rate=0.1, steps=v), "steps", 0),
        (lambda v: g.SubsampledGaussian(noise_multiplier=1, sampling_rate=0.1, steps=v), "steps", True),
        (lambda v: g.Laplace(scale=v), "scale", 0),
        (lambda v: g.RandomizedResponse(epsilon=v), "epsilon", -0.5),
        (lambda v: g.DiscreteGaussian(sigma=1.0, sensitivity=v), "sensitivity", 1.5),
        (lambda v: g.Gaussian(noise_multiplier=1.0, neighbouring=v), "neighbouring", "swap"),
        (lambda v: g.SelfComposed(mechanism=g.Gaussian(noise_multiplier=1.0), count=v), "count", 0),
    ],
)
def test_bad_input_names_field_and_value(factory, field, value):
    with pytest.raises(ValueError) as err:
        factory(value)
    assert field in str(err.value)
    assert repr(value) in str(err.value)


def test_subsampled_gaussian_rejects_replace_one():
    with pytest.raises(ValueError, match="neighbouring"):
        g.SubsampledGaussian(noise_multiplier=1.0, sampling_rate=0.1, steps=1, neighbouring="replace_one")


def test_composition_requires_one_neighbouring_relation():
    with pytest.raises(ValueError, match="neighbouring relation"):
        g.Composed(mechanisms=[g.RandomizedResponse(epsilon=1.0), g.Gaussian(noise_multiplier=1.0)])
    with pytest.raises(ValueError, match="mechanisms"):
        g.Composed(mechanisms=[])


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"kind": "poisson"}, "kind"),
        ({"noise_multiplier": 1.0}, "kind"),
        ({"kind": "gaussian"}, "noise_multiplier"),
        ({"kind": "gaussian", "noise_multiplier": 1.0, "sigma": 2}, "unknown field"),
        ({"kind": "composed", "mechanisms": [{"kind": "gaussian", "noise_multiplier": -1}]}, "mechanisms[0]"),
        ("gaussian", "mapping"),
    ],
)
def test_from_dict_rejects_malformed_specs(data, needle):
    with pytest.raises(ValueError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        g.mechanism_from_dict(data)


def test_gaussian_mu_closed_form_for_gaussian_compositions():
    assert kinds.exact_mu(g.Gaussian(noise_multiplier=4.0)) == 0.25
    comp = g.Composed(mechanisms=[g.Gaussian(noise_multiplier=2.0), g.Gaussian(noise_multiplier=2.0)])
    assert kinds.exact_mu(comp) == pytest.approx(math.sqrt(0.5))
    assert kinds.exact_mu(g.SelfComposed(mechanism=g.Gaussian(noise_multiplier=2.0), count=4)) == pytest.approx(1.0)
    assert kinds.exact_mu(g.SubsampledGaussian(noise_multiplier=2.0, sampling_rate=1.0, steps=9)) == pytest.approx(1.5)
    assert kinds.exact_mu(g.SubsampledGaussian(noise_multiplier=2.0, sampling_rate=0.5, steps=9)) is None
