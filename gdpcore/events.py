"""dp_accounting DpEvents in and out of gdpcore: the mechanism an event describes, and a strict JSON form of events.

Users already describe their releases as dp_accounting ``DpEvent`` objects (TF-Privacy and dp_accounting build them;
Opacus histories map onto them). :func:`from_dp_event` turns one into a gdpcore mechanism, so every report, curve and
bracket of :func:`gdpcore.analyze` is available for it; :meth:`gdpcore.mechanisms.Mechanism.to_dp_event` goes back.
Both are dispatched through the kind registry (:mod:`gdpcore.kinds`): each kind recognises its own events.

Neighbouring relation. A DpEvent carries none; dp_accounting's accountants take it as an argument. The same is asked
here (``neighboring_relation``: ``"add_remove"``, ``"replace_one"`` or ``"replace_special"``, or dp_accounting's
``NeighboringRelation`` members). Noise in a DpEvent is stated relative to one record's norm bound C
(dp_accounting's ``GaussianDpEvent`` / ``LaplaceDpEvent`` docstrings); under replace-one a record's contribution can go
from +C to -C, so the released sum has sensitivity 2C - the reading of dp_accounting's PLD accountant (its
``REPLACE_ONE`` Gaussian compares N(C, s^2) with N(-C, s^2)). gdpcore mechanisms state noise relative to the query's
sensitivity under their relation, so an event read under replace-one becomes a mechanism with ``sensitivity=2`` where
its kind has a sensitivity parameter. An event no registered kind accounts for under the relation raises
:class:`gdpcore.kinds.UnsupportedMechanismError` naming the event type.

JSON form (:func:`dp_event_to_dict` / :func:`dp_event_from_dict`). One object per event: ``"type"`` is the
dp_accounting class name, every other key is one of the class's attrs fields, with nested events as objects and lists
of events as arrays. For example DP-SGD with 1,000 steps::

    {"type": "SelfComposedDpEvent", "count": 1000,
     "event": {"type": "PoissonSampledDpEvent", "sampling_probability": 0.01,
               "event": {"type": "GaussianDpEvent", "noise_multiplier": 1.1}}}

Reading is strict: an unknown ``type``, an unknown or missing field, or a value of the wrong type raises ``ValueError``
naming its path (``event.event.noise_multiplier``) and the value. The shape follows dp_accounting's own
``to_named_tuple`` (class name + fields) without its module path, so files stay valid if dp_accounting moves a class.
"""

from __future__ import annotations

import json
import math
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import attr
import dp_accounting
from dp_accounting import dp_event as _dp_event_module

from gdpcore import kinds
from gdpcore._validation import bounded_repr
from gdpcore.mechanisms import NEIGHBOURING_RELATIONS, Mechanism

__all__ = [
    "TYPE_KEY",
    "dp_event_classes",
    "dp_event_from_dict",
    "dp_event_from_json",
    "dp_event_to_dict",
    "dp_event_to_json",
    "from_dp_event",
    "relation_name",
]

TYPE_KEY = "type"
"""The key naming the dp_accounting class of an event object."""


def _all_subclasses(cls: type) -> list[type]:
    out: list[type] = []
    sub: type
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_all_subclasses(sub))
    return out


def dp_event_classes() -> dict[str, type[dp_accounting.DpEvent]]:
    """{class name: class} of every concrete DpEvent dp_accounting defines (the ``"type"`` values JSON may use)."""
    return {
        c.__name__: c
        for c in _all_subclasses(dp_accounting.DpEvent)
        if c.__module__ == _dp_event_module.__name__ and attr.has(c)
    }


# -- relation ---------------------------------------------------------------------------------------------------------
_FROM_ENUM = {
    dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE: "add_remove",
    dp_accounting.NeighboringRelation.REPLACE_ONE: "replace_one",
    dp_accounting.NeighboringRelation.REPLACE_SPECIAL: "replace_special",
}


def relation_name(value: Any) -> str:
    """gdpcore's name of a neighbouring relation given as a gdpcore name or a dp_accounting ``NeighboringRelation``.

    ``REPLACE_SPECIAL`` (a record replaced by a special, zero record) is ``"replace_special"``: events read under it
    are accounted as dp_accounting accounts them (:func:`gdpcore.kinds.mechanism_from_dp_event`).
    """
    if isinstance(value, dp_accounting.NeighboringRelation) and value in _FROM_ENUM:
        return _FROM_ENUM[value]
    if isinstance(value, str) and value in (*NEIGHBOURING_RELATIONS, "replace_special"):
        return value
    raise ValueError(
        f"neighboring_relation must be one of {', '.join(map(repr, NEIGHBOURING_RELATIONS))}, 'replace_special' (or "
        f"dp_accounting's NeighboringRelation members), got {bounded_repr(value)}"
    )


def from_dp_event(event: dp_accounting.DpEvent, *, neighboring_relation: Any = "add_remove") -> Mechanism:
    """The gdpcore mechanism a dp_accounting ``DpEvent`` describes under ``neighboring_relation``.

    Every kind in the registry recognises its own events (a ``SelfComposedDpEvent`` of a ``PoissonSampledDpEvent`` of
    a ``GaussianDpEvent`` is one :class:`~gdpcore.mechanisms.SubsampledGaussian`); other self-composed and composed
    events become :class:`~gdpcore.mechanisms.SelfComposed` / :class:`~gdpcore.mechanisms.Composed`;
    ``NoOpDpEvent`` parts of a composition are dropped. Raises :class:`gdpcore.kinds.UnsupportedMechanismError`
    naming the event type when no kind accounts for it under the relation (e.g. ``RepeatAndSelectDpEvent``,
    ``NonPrivateDpEvent``), ``ValueError`` for a non-event or an unknown
    relation. See the module docstring for the noise convention under replace-one.
    """
    relation = relation_name(neighboring_relation)
    return kinds.mechanism_from_dp_event(event, neighbouring=relation)


# -- JSON ---------------------------------------------------------------------------------------------------------------
def _check_number(path: str, value: Any, *, integer: bool) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        want = "an integer" if integer else "a number"
        raise ValueError(f"{path} must be {want}, got {value!r}")
    if integer:
        if isinstance(value, float):
            if not value.is_integer():
                raise ValueError(f"{path} must be an integer, got {value!r}")
            value = int(value)
        return value
    try:
        out = float(value)
    except OverflowError:  # an integer beyond the float range (10**400)
        out = math.inf
    if not math.isfinite(out):
        raise ValueError(f"{path} must be a finite number, got {bounded_repr(value)}")
    return out


def _kind_of(annotation: Any) -> str:
    """The JSON shape of an attrs field annotation of dp_event.py: event, events, int, ints_or_int, float, floats."""
    if annotation is int:
        return "int"
    if annotation is float:
        return "float"
    if isinstance(annotation, type) and issubclass(annotation, dp_accounting.DpEvent):
        return "event"
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Union and set(args) >= {int} and any(typing.get_origin(a) in (list, Sequence) for a in args):
        return "int_or_ints"
    if origin in (list, Sequence, typing.List) and args:  # noqa: UP006 - matching dp_event.py's own annotations
        inner = args[0]
        if isinstance(inner, type) and issubclass(inner, dp_accounting.DpEvent):
            return "events"
        if inner is float:
            return "floats"
        if inner is int:
            return "ints"
    raise TypeError(f"unsupported DpEvent field annotation {annotation!r}")  # a new dp_accounting field type


def _decode(path: str, shape: str, value: Any) -> Any:
    if shape == "event":
        return dp_event_from_dict(value, _path=path)
    if shape in ("events", "floats", "ints"):
        if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
            raise ValueError(f"{path} must be a list, got {value!r}")
        if shape == "events":
            return [dp_event_from_dict(v, _path=f"{path}[{i}]") for i, v in enumerate(value)]
        return [_check_number(f"{path}[{i}]", v, integer=shape == "ints") for i, v in enumerate(value)]
    if shape == "int_or_ints":
        if isinstance(value, list | tuple):
            return [_check_number(f"{path}[{i}]", v, integer=True) for i, v in enumerate(value)]
        return _check_number(path, value, integer=True)
    return _check_number(path, value, integer=shape == "int")


def dp_event_from_dict(data: Any, *, _path: str = "event") -> dp_accounting.DpEvent:
    """The DpEvent of a JSON object (see the module docstring); strict: ``ValueError`` naming the path and value."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{_path} must be an object with a {TYPE_KEY!r} key, got {data!r}")
    classes = dp_event_classes()
    name = data.get(TYPE_KEY)
    if not (isinstance(name, str) and name in classes):
        raise ValueError(f"{_path}.{TYPE_KEY} must be one of {', '.join(sorted(classes))}, got {name!r}")
    cls = classes[name]
    fields = {f.name: f for f in attr.fields(cls)}
    unknown = sorted(set(data) - set(fields) - {TYPE_KEY})
    if unknown:
        raise ValueError(
            f"{_path} ({name}) has unknown field(s) {unknown!r} (value {data[unknown[0]]!r}); "
            f"allowed: {sorted(fields)!r}"
        )
    kwargs: dict[str, Any] = {}
    for fname, f in fields.items():
        if fname not in data:
            if f.default is attr.NOTHING:
                raise ValueError(f"{_path} ({name}) lacks required field {fname!r}")
            continue
        kwargs[fname] = _decode(f"{_path}.{fname}", _kind_of(f.type), data[fname])
    return cls(**kwargs)


def _encode(value: Any) -> Any:
    if isinstance(value, dp_accounting.DpEvent):
        return dp_event_to_dict(value)
    if isinstance(value, list | tuple):
        return [_encode(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, int | float):  # numpy scalars
        value = value.item()
    return value


def dp_event_to_dict(event: dp_accounting.DpEvent) -> dict[str, Any]:
    """A JSON-ready dict of ``event``: ``{"type": class name, field: value, ...}``, nested events recursively."""
    if not isinstance(event, dp_accounting.DpEvent) or type(event).__name__ not in dp_event_classes():
        raise ValueError(f"event must be one of dp_accounting's DpEvent classes, got {event!r}")
    out: dict[str, Any] = {TYPE_KEY: type(event).__name__}
    for f in attr.fields(type(event)):
        out[f.name] = _encode(getattr(event, f.name))
    return out


def dp_event_to_json(event: dp_accounting.DpEvent, *, indent: int | None = None) -> str:
    """JSON text of ``event`` (:func:`dp_event_to_dict`; sorted keys, so equal events give equal text)."""
    return json.dumps(dp_event_to_dict(event), sort_keys=True, indent=indent)


def dp_event_from_json(text: str | bytes) -> dp_accounting.DpEvent:
    """The DpEvent of JSON ``text``; ``ValueError`` for malformed JSON (with its position) or a bad event."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"event JSON is malformed: {exc}") from None
    return dp_event_from_dict(data)
