"""The path grammar of grid keys: ``mechanisms[0].noise_multiplier`` names one scalar parameter inside a mechanism
template (gdpcore's JSON form), ``.`` stepping into a nested field and ``[i]`` picking the i-th of a list.

Used by :mod:`tasks.spec` to validate grid keys (:func:`axis_param`) and to build each cell (:func:`set_path`); the
kinds, their parameters and their nested fields come from gdpcore's kind registry.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from gdpcore import kinds as _kinds
from gdpcore._validation import bounded_repr
from gdpcore.mechanisms import Param, nested_fields

__all__ = [
    "ParamPath",
    "axis_param",
    "is_integer",
    "node_kind",
    "parse_path",
    "set_path",
    "template_value",
    "walk_nodes",
]

_SEGMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\[(\d{1,6})\])?")
ParamPath = tuple[tuple[str, int | None], ...]


def parse_path(key: str) -> ParamPath:
    """``"mechanisms[0].noise_multiplier"`` -> ``(("mechanisms", 0), ("noise_multiplier", None))``."""
    if not isinstance(key, str) or not key or len(key) > 300:
        raise ValueError(
            f"a grid key must be a parameter name or a path such as mechanisms[0].noise_multiplier, got {bounded_repr(key)}"
        )
    out = []
    for part in key.split("."):
        m = _SEGMENT.fullmatch(part)
        if m is None:
            raise ValueError(
                f"{bounded_repr(key)} is not a parameter path (names joined by '.', a list item as name[i], "
                "e.g. mechanisms[0].noise_multiplier)"
            )
        out.append((m.group(1), None if m.group(2) is None else int(m.group(2))))
    return tuple(out)


def node_kind(node: Any, where: str) -> _kinds.KindSpec:
    if not isinstance(node, Mapping):
        raise ValueError(f"{where} must be a mechanism mapping with a 'kind' key, got {bounded_repr(node)}")
    kind = node.get("kind")
    if not (isinstance(kind, str) and kind in _kinds.kind_names()):
        raise ValueError(f"{where}.kind = {bounded_repr(kind)}: must be one of {', '.join(_kinds.kind_names())}")
    return _kinds.get(kind)


def axis_param(template: Mapping[str, Any], key: str) -> tuple[str, Param]:
    """(path of the mechanism node holding it, the registry's :class:`~gdpcore.mechanisms.Param`) of grid key ``key``
    in ``template``; ``ValueError`` saying what is wrong (an unknown name, a missing list item, not a scalar)."""
    path = parse_path(key)
    node: Any = template
    where = "mechanism"
    for name, index in path[:-1]:
        spec = node_kind(node, where)
        nested = nested_fields(spec.cls)
        if name not in nested:
            raise ValueError(
                f"{spec.name} at {where} has no nested mechanism field {bounded_repr(name)} "
                f"(nested fields: {', '.join(nested) or 'none'})"
            )
        child = node.get(name)
        if nested[name] == "many":
            if index is None:
                raise ValueError(f"{where}.{name} is a list of mechanisms: pick one as {name}[i]")
            if not isinstance(child, list) or index >= len(child):
                n = len(child) if isinstance(child, list) else 0
                raise ValueError(f"{where}.{name}[{index}] does not exist in the template ({n} item(s))")
            node, where = child[index], f"{where}.{name}[{index}]"
        else:
            if index is not None:
                raise ValueError(f"{where}.{name} is one mechanism, not a list: drop [{index}]")
            if child is None:
                raise ValueError(f"{where}.{name} is not given in the template")
            node, where = child, f"{where}.{name}"
    spec = node_kind(node, where)
    name, index = path[-1]
    params = {p.name: p for p in spec.params}
    if name not in params or index is not None:
        at = "" if where == "mechanism" else f" at {where.removeprefix('mechanism.')}"
        raise ValueError(f"not a parameter of {spec.name}{at} (parameters: {', '.join(sorted(params)) or 'none'})")
    return where, params[name]


def is_integer(template: Mapping[str, Any], key: str) -> bool:
    try:
        return axis_param(template, key)[1].type is int
    except ValueError:
        return False  # reported by validation


def set_path(cell: dict[str, Any], path: ParamPath, value: Any) -> None:
    node: Any = cell
    for name, index in path[:-1]:
        node = node[name] if index is None else node[name][index]
    node[path[-1][0]] = value


def walk_nodes(node: Any, where: str = "mechanism") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every mechanism node of a template (where, node), root first; malformed nodes are reported by gdpcore."""
    if (
        not isinstance(node, Mapping)
        or not isinstance(node.get("kind"), str)
        or node["kind"] not in _kinds.kind_names()
    ):
        return
    yield where, node
    for name, many in nested_fields(_kinds.get(node["kind"]).cls).items():
        child = node.get(name)
        if many == "many" and isinstance(child, list):
            for i, c in enumerate(child):
                yield from walk_nodes(c, f"{where}.{name}[{i}]")
        elif many == "one":
            yield from walk_nodes(child, f"{where}.{name}")


def template_value(template: Mapping[str, Any], key: str) -> tuple[bool, Any]:
    """(True, value) when the parameter path ``key`` is set in the template itself."""
    try:
        path = parse_path(key)
        node: Any = template
        for name, index in path[:-1]:
            node = node[name] if index is None else node[name][index]
        return (True, node[path[-1][0]]) if isinstance(node, Mapping) and path[-1][0] in node else (False, None)
    except (ValueError, KeyError, IndexError, TypeError):
        return False, None
