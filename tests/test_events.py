"""DpEvents in and out: the strict JSON form of dp_accounting events and ``gdpcore.from_dp_event``.

Truth here is dp_accounting itself: every event class it defines round-trips through JSON to an equal attrs object,
and a mechanism read from an event gives back the same event.
"""

from __future__ import annotations

import json

import dp_accounting
import pytest
from dp_accounting import dp_event as de

import gdpcore as g
from gdpcore import events, kinds

EXAMPLES = [
    de.GaussianDpEvent(1.1),
    de.LaplaceDpEvent(2.0),
    de.DiscreteLaplaceDpEvent(0.5, 2),
    de.RandomizedResponseDpEvent(0.3, 5),
    de.SelfComposedDpEvent(de.PoissonSampledDpEvent(0.01, de.GaussianDpEvent(1.1)), 1000),
    de.ComposedDpEvent([de.GaussianDpEvent(1.0), de.NoOpDpEvent(), de.NonPrivateDpEvent()]),
    de.SampledWithoutReplacementDpEvent(60000, 256, de.GaussianDpEvent(1.1)),
    de.SampledWithReplacementDpEvent(60000, 256, de.GaussianDpEvent(1.1)),
    de.SingleEpochTreeAggregationDpEvent(1.0, [3, 4]),
    de.SingleEpochTreeAggregationDpEvent(1.0, 7),
    de.MixtureOfGaussiansDpEvent(2.0, [0.0, 1.0, 2.0], [0.5, 0.25, 0.25]),
    de.ZCDpEvent(0.1),
    de.ZCDpEvent(0.1, 0.01),
    de.TruncatedSubsampledGaussianDpEvent(1000, 0.1, 120, 1.0),
    de.RepeatAndSelectDpEvent(de.GaussianDpEvent(1.0), 3.0, 1.0),
    de.UnsupportedDpEvent(),
]


def test_every_dp_accounting_event_class_is_known():
    names = set(events.dp_event_classes())
    assert {type(e).__name__ for e in EXAMPLES} <= names
    assert "DpEvent" not in names  # the abstract base is not a JSON type


@pytest.mark.parametrize("event", EXAMPLES, ids=lambda e: type(e).__name__)
def test_json_round_trip(event):
    text = events.dp_event_to_json(event)
    assert events.dp_event_from_json(text) == event
    data = json.loads(text)
    assert data["type"] == type(event).__name__
    assert events.dp_event_from_dict(events.dp_event_to_dict(event)) == event
    assert g.dp_event_to_json(event) == text  # exported names are the same functions


def test_documented_shape():
    event = de.SelfComposedDpEvent(de.PoissonSampledDpEvent(0.01, de.GaussianDpEvent(1.1)), 1000)
    assert events.dp_event_to_dict(event) == {
        "type": "SelfComposedDpEvent",
        "count": 1000,
        "event": {
            "type": "PoissonSampledDpEvent",
            "sampling_probability": 0.01,
            "event": {"type": "GaussianDpEvent", "noise_multiplier": 1.1},
        },
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"type": "Foo"}', r"event\.type must be one of .*got 'Foo'"),
        ('{"noise_multiplier": 1}', r"event\.type must be one of"),
        ('{"type": "GaussianDpEvent", "noise_multiplier": "x"}', r"event\.noise_multiplier must be a number, got 'x'"),
        ('{"type": "GaussianDpEvent", "noise": 1}', r"unknown field\(s\) \['noise'\] \(value 1\)"),
        ('{"type": "GaussianDpEvent"}', r"lacks required field 'noise_multiplier'"),
        (
            '{"type": "PoissonSampledDpEvent", "sampling_probability": 0.1, '
            '"event": {"type": "GaussianDpEvent", "noise_multiplier": true}}',
            r"event\.event\.noise_multiplier must be a number, got True",
        ),
        ('{"type": "ComposedDpEvent", "events": {"type": "NoOpDpEvent"}}', r"event\.events must be a list"),
        ('{"type": "ComposedDpEvent", "events": [{"type": "X"}]}', r"event\.events\[0\]\.type must be one of"),
        ('{"type": "SelfComposedDpEvent", "event": {"type": "NoOpDpEvent"}, "count": 1.5}', r"event\.count must be"),
        ('{"type": "GaussianDpEvent", "noise_multiplier": NaN}', r"finite number"),
        ("[1", r"malformed"),
        ("[1]", r"event must be an object"),
    ],
)
def test_strict_reading_names_path_and_value(text, message):
    with pytest.raises(ValueError, match=message):
        events.dp_event_from_json(text)


def test_to_dict_refuses_non_events():
    with pytest.raises(ValueError, match="DpEvent"):
        events.dp_event_to_dict({"type": "GaussianDpEvent"})


def test_from_dp_event_dp_sgd_and_back():
    event = de.SelfComposedDpEvent(de.PoissonSampledDpEvent(0.01, de.GaussianDpEvent(1.1)), 1000)
    m = g.from_dp_event(event)
    assert m == g.SubsampledGaussian(noise_multiplier=1.1, sampling_rate=0.01, steps=1000)
    assert kinds.to_dp_event(m) == event
    # dp_accounting's enum is accepted and means the same relation
    assert g.from_dp_event(event, neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE) == m


def test_from_dp_event_drops_no_op_parts():
    m = g.from_dp_event(de.ComposedDpEvent([de.NoOpDpEvent(), de.GaussianDpEvent(2.0)]))
    assert m == g.Composed(mechanisms=(g.Gaussian(noise_multiplier=2.0),))


@pytest.mark.parametrize(
    "event",
    [
        de.RepeatAndSelectDpEvent(de.GaussianDpEvent(1.0), 3.0, 1.0),
        de.NonPrivateDpEvent(),
        de.UnsupportedDpEvent(),
        de.SampledWithReplacementDpEvent(100, 10, de.GaussianDpEvent(1.0)),
        de.ComposedDpEvent([de.GaussianDpEvent(1.0), de.RepeatAndSelectDpEvent(de.GaussianDpEvent(1.0), 3.0, 1.0)]),
    ],
    ids=lambda e: type(e).__name__,
)
def test_from_dp_event_unsupported_names_the_event_type(event):
    inner = event.events[-1] if isinstance(event, de.ComposedDpEvent) else event
    with pytest.raises(g.UnsupportedMechanismError, match=type(inner).__name__):
        g.from_dp_event(event)


def test_from_dp_event_relation_is_checked():
    # REPLACE_SPECIAL: dp_accounting's PLD constructors account a Gaussian exactly as under ADD_OR_REMOVE_ONE
    # (from_gaussian_mechanism docstring); its randomized response there answers uniformly, a pair no kind states.
    special = dp_accounting.NeighboringRelation.REPLACE_SPECIAL
    assert g.from_dp_event(de.GaussianDpEvent(1.0), neighboring_relation=special) == g.Gaussian(noise_multiplier=1.0)
    with pytest.raises(g.UnsupportedMechanismError, match="REPLACE_SPECIAL"):
        g.from_dp_event(de.RandomizedResponseDpEvent(0.5, 4), neighboring_relation=special)
    with pytest.raises(ValueError, match="neighboring_relation must be one of"):
        g.from_dp_event(de.GaussianDpEvent(1.0), neighboring_relation="substitution")
    with pytest.raises(ValueError, match="event must be a dp_accounting DpEvent"):
        g.from_dp_event({"type": "GaussianDpEvent", "noise_multiplier": 1.0})


@pytest.mark.slow  # 12 s at load 8 on the 2 shared cores
def test_replace_one_events_use_the_record_bound_convention_of_dp_accountings_pld_accountant():
    """A GaussianDpEvent's noise is relative to one record's norm bound (its docstring): under replace-one the sum
    moves by 2C, as dp_accounting's PLD accountant reads it (N(1, s^2) vs N(-1, s^2)). gdpcore's reading must match
    that accountant, never the factor-2-optimistic reading (google/differential-privacy#378)."""
    from dp_accounting.pld import pld_privacy_accountant

    event = de.GaussianDpEvent(2.0)
    m = g.from_dp_event(event, neighboring_relation="replace_one")
    assert m == g.Gaussian(noise_multiplier=1.0, sensitivity=2.0, neighbouring="replace_one")
    r = g.analyze(m)
    assert r.exact and r.mu == pytest.approx(1.0)  # shift 2 at noise 2
    acc = pld_privacy_accountant.PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE, 1e-5)
    acc.compose(event)
    assert float(r.epsilon(1e-5)) == pytest.approx(acc.get_epsilon(1e-5), rel=1e-3)
    assert float(r.epsilon(1e-5)) <= acc.get_epsilon(1e-5)  # exact <= dp_accounting's pessimistic value
    assert kinds.to_dp_event(m) == event
    # A gdpcore Gaussian stated with its replace-one sensitivity goes out with the record-bound noise.
    assert kinds.to_dp_event(g.Gaussian(noise_multiplier=1.5, neighbouring="replace_one")) == de.GaussianDpEvent(3.0)
    lap = g.from_dp_event(de.LaplaceDpEvent(4.0), neighboring_relation="replace_one")
    assert lap.epsilon == pytest.approx(0.5)  # L1 sensitivity 2 at scale 4
