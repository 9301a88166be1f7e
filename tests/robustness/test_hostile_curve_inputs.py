"""Hostile input to the curve-input kinds (gdpcore.kinds.curves): every rejection is a one-line ValueError naming the
field (and the point), bounded in size; nothing crashes with another exception type."""

from __future__ import annotations

import pytest

import gdpcore as g
from gdpcore.mechanisms import ParameterError

HOSTILE_LISTS = [
    [0, 10**400, 1],  # an int beyond the float range
    [0, 1e308 * 10, 1],  # inf
    "x" * 10**6,
    [0, [1], 1],
    {"a": 1},
    None,
    "0,1e999,1",
    [0, True, 1],
    "",
]


@pytest.mark.parametrize("value", HOSTILE_LISTS, ids=range(len(HOSTILE_LISTS)))
def test_hostile_breakpoints_are_refused_in_one_bounded_line(value):
    with pytest.raises(ParameterError) as info:
        g.from_tradeoff_curve(value, [1.0, 0.2, 0.0])
    text = str(info.value)
    assert "\n" not in text and len(text) < 400 and info.value.key == "breakpoint_fpr"


@pytest.mark.parametrize("value", HOSTILE_LISTS, ids=range(len(HOSTILE_LISTS)))
def test_hostile_profile_is_refused_in_one_bounded_line(value):
    with pytest.raises(ParameterError) as info:
        g.from_privacy_profile([0.0, 1.0, 2.0], value)
    assert len(str(info.value)) < 400 and info.value.key == "deltas"


@pytest.mark.parametrize(
    "text",
    [
        "discretization=1e-3;lower_index=" + "9" * 5000 + ";infinity_mass=0;probs=1",
        "discretization=1e-3;lower_index=0;infinity_mass=0;probs=1;probs=0.5",
        "x" * 10**6,
        "discretization=nan;lower_index=0;infinity_mass=0;probs=1",
        "discretization=1e-3;lower_index=0;infinity_mass=nan;probs=1",
        "discretization=1e-3;lower_index=99999999999999999999;infinity_mass=0;probs=1",
        "discretization=1e-3;lower_index=0;infinity_mass=0;probs=" + ",".join(["1e300"] * 3),
    ],
    ids=range(7),
)
def test_hostile_pmf_text_is_refused_naming_the_field(text):
    with pytest.raises(ParameterError) as info:
        g.mechanism_from_dict({"kind": "privacy_loss_distribution", "remove_pmf": text})
    assert len(str(info.value)) < 500 and info.value.key == "remove_pmf"
