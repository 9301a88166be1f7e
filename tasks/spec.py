"""Grid specs: the YAML contract of ``gdp sweep`` / ``gdp regret-map`` / ``gdp calibrate-sweep``, validated with pydantic.

A grid spec names one gdpcore mechanism kind and a list of values for each of its parameters; the grid is their
cartesian product (first key outermost)::

    name: dpsgd-cifar-map
    mechanism: subsampled_gaussian          # any flat gdpcore mechanism kind
    grid:                                   # each parameter: a list, a scalar, or {linspace|logspace: [start, stop, num]}
      noise_multiplier: {linspace: [0.6, 2.0, 8]}
      sampling_rate: {logspace: [0.001, 0.1, 6]}
      steps: [100, 1000, 10000]
    deltas: [1.0e-5, 1.0e-6, 1.0e-9]
    fprs: [1.0e-4, 1.0e-3, 1.0e-2, 0.1]
    representations: [epsilon_delta, zcdp, gdp]

**Any kind, and compositions.** ``mechanism`` is either the name of a flat kind (every parameter a scalar; the grid
keys are its parameter names, as above) or a *template*: a mechanism in gdpcore's JSON form (``gdp analyze --spec``),
of any registered kind, nested ``composed`` / ``self_composed`` included. A grid key is then a *path* from the
template's root to one scalar parameter: ``.`` steps into a nested field, ``[i]`` picks the i-th of a list (inside a
``{...}`` flow mapping, quote a key holding ``[``: YAML reads it as a list otherwise)::

    name: dpsgd-plus-release
    mechanism:
      kind: composed
      mechanisms:
        - {kind: subsampled_gaussian, sampling_rate: 0.05, steps: 50}    # the DP-SGD phase
        - {kind: gaussian}                                               # a final Gaussian release
    grid:
      mechanisms[0].noise_multiplier: [0.8, 1.2]
      mechanisms[1].noise_multiplier: [2.0, 4.0]

    mechanism: {kind: self_composed, mechanism: {kind: laplace}}         # k-fold Laplace
    grid: {count: [1, 5, 20], mechanism.scale: [1.0, 2.0]}

**Sweeping the kind itself** (e.g. the batch samplers at the same noise, batches per epoch and epochs): with a flat
kind's name as ``mechanism``, the grid key ``kind`` lists flat kinds that take exactly the parameters of that kind
(same names and types); each cell takes one of them and the other grid keys are shared (data/specs/samplers.yaml)::

    name: samplers
    mechanism: shuffled_gaussian
    grid:
      kind: [shuffled_gaussian, cyclic_gaussian, balls_in_bins_gaussian]
      noise_multiplier: [0.8, 1.5]
      steps_per_epoch: [100]
      epochs: [1, 5]

Each cell's ``mechanism_kind`` (and the lake's ``mechanism=`` partition of its chunk) is its own kind.

Everything is derived from gdpcore's kind registry (:mod:`gdpcore.kinds`): which fields nest mechanisms, which are
parameters, their types (integer parameters are rounded) and rules, so a newly registered kind can be swept with no
edit here. A parameter is given once: in the template or as a grid key, not both. A template whose mechanism cannot
be accounted (a leaf kind declaring the PLD or a requested representation's property unsupported,
:func:`gdpcore.kinds.supports`) is refused when the spec is loaded, not as failed rows. The swept values of every cell
are stored with the spec's members and shown by the report's ``axes`` view (one row per cell and grid key).

``linspace`` is evenly spaced, ``logspace`` geometrically spaced *between the given values* (numpy ``geomspace``; not
exponents), both inclusive. Generated values are rounded to 12 significant digits so they compare equal in SQL, and to
the nearest integer for integer parameters (``steps``, discrete ``sensitivity``). Lists are taken literally.

Every error is a ``ValueError`` naming the file, the key and the offending value; loading touches no file but the
spec, so an invalid spec writes nothing. YAML is read with :func:`tasks.safe_yaml.load_yaml_file` only (size, depth and
alias-expansion limits, duplicate keys rejected, YAML 1.2 scalars: ``1e-5`` is a number).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr, ValidationError, field_validator

from gdpcore import kinds as _kinds
from gdpcore._validation import bounded_repr
from gdpcore.mechanisms import ParameterError
from gdpcore.representations import REPRESENTATIONS  # the names PrivacyReport.regret(representation) accepts
from tasks.safe_yaml import bounded_message, shown_key
from tasks.spec_paths import (
    axis_param,
    is_integer,
    node_kind,
    parse_path,
    set_path,
    template_value,
    walk_nodes,
)

__all__ = [
    "GRID_KINDS",
    "REPRESENTATIONS",
    "KIND_AXIS",
    "CalibrationSpec",
    "GridSpec",
    "PlotSpec",
    "axis_param",
    "load_calibration_spec",
    "load_grid_spec",
]

KIND_AXIS = "kind"
"""The grid key that sweeps the kind of a flat mechanism (``_check_kind_axis``)."""

# Mechanism kinds that can be named by a string (every parameter a scalar), and their integer parameters: derived from
# gdpcore's kind registry. Every other registered kind (composed, self_composed, ...) is swept through a template.
GRID_KINDS: tuple[str, ...] = _kinds.flat_kinds()
DEFAULT_MAX_CELLS = 100_000
HARD_MAX_CELLS = 2_000_000
"""Not even ``--force`` plans more cells than this in one spec (planning holds every cell: ~0.6 kB each)."""
MAX_INTEGER_PARAM = 10**9
"""Largest ``steps`` / discrete ``sensitivity``: beyond it the accountant overflows (10^23 steps: OverflowError)."""
_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")  # fullmatch: '$' also matches before a trailing newline

Number = StrictInt | StrictFloat
Scalar = StrictInt | StrictFloat | str


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_name(v: str) -> str:
    if not _NAME_RE.fullmatch(v):
        raise ValueError(
            f"must be 1-100 of letters, digits, '.', '_', '-' (not starting with one of '._-'), got {bounded_repr(v)}"
        )
    return v


class Linspace(_Strict):
    linspace: tuple[Number, Number, StrictInt]


class Logspace(_Strict):
    logspace: tuple[Number, Number, StrictInt]


AxisSpec = Annotated[list[Scalar], Field(min_length=1)] | Linspace | Logspace | Scalar


def _probability_list(name: str, values: list[float]) -> list[float]:
    for i, v in enumerate(values):
        if not (0.0 < v < 1.0):
            raise ValueError(f"{name}[{i}] must be in (0, 1), got {bounded_repr(v)}")
    return values


class PlotSpec(_Strict):
    """Heat-map axes for ``regret_map``: two grid keys; other axes are fixed at ``fixed`` or reduced by ``reduce``."""

    x: str
    y: str
    fixed: dict[str, Scalar] = Field(default_factory=dict)
    reduce: Literal["max", "min", "mean"] = "max"


class _GridAxes:
    """Derived views shared by the grid-shaped specs (fields ``mechanism`` and ``grid``)."""

    if TYPE_CHECKING:  # the pydantic fields of GridSpec / CalibrationSpec, declared there
        mechanism: str | dict[str, Any]
        grid: Mapping[Any, Any]

    @property
    def template(self) -> dict[str, Any]:
        """The mechanism template as a gdpcore mechanism dict (a flat kind's name: ``{"kind": name}``)."""
        m = self.mechanism
        return {"kind": m} if isinstance(m, str) else copy.deepcopy(dict(m))

    @property
    def kind(self) -> str:
        """The kind at the template's root (the lake's ``mechanism=`` partition)."""
        m = self.mechanism
        return m if isinstance(m, str) else str(m.get("kind"))

    def axes(self) -> dict[str, list[Any]]:
        """Each grid key with its expanded list of values (spec order)."""
        template = self.template
        return {key: _expand_axis(is_integer(template, key), key, value) for key, value in self.grid.items()}

    @property
    def n_cells(self) -> int:
        return math.prod(len(v) for v in self.axes().values())  # after de-duplication of rounded values


class GridSpec(_GridAxes, _Strict):
    name: str = Field(pattern=_NAME_PATTERN)
    # A flat kind's name, or a mechanism template of any kind (grid keys are then paths into it; see the docstring).
    mechanism: StrictStr | dict[str, Any]
    grid: dict[str, AxisSpec] = Field(min_length=1)
    deltas: Annotated[list[Number], Field(min_length=1)] = [1e-5, 1e-6, 1e-9]
    fprs: Annotated[list[Number], Field(min_length=1)] = [1e-4, 1e-3, 1e-2, 1e-1]
    representations: Annotated[list[Literal[REPRESENTATIONS]], Field(min_length=1)] = ["gdp"]  # type: ignore[valid-type]  # a Literal built from the tuple: pydantic reads it, mypy cannot
    # None: gdpcore.analyze_grid picks the PLD discretisation per cell to its epsilon tolerance.
    # gdpcore accepts (0, 0.1]; below 1e-6 the PLD grid needs more memory than any machine has.
    discretization: Annotated[float, Field(ge=1e-6, le=0.1)] | None = None
    alpha_min: Annotated[float, Field(gt=0, lt=0.5)] = 1e-10
    chunk_size: Annotated[int, Field(ge=1, le=100_000)] | None = None
    max_cells: Annotated[int, Field(ge=1)] = DEFAULT_MAX_CELLS
    plot: PlotSpec | None = None

    _name = field_validator("name")(_check_name)

    @field_validator("mechanism")
    @classmethod
    def _kind(cls, v: str | dict[str, Any]) -> str | dict[str, Any]:
        if isinstance(v, str):
            flat = _kinds.flat_kinds()  # read now, not at import: a kind registered later is picked up
            if v not in flat:
                raise ValueError(
                    f"got {bounded_repr(v)}: must be a mechanism template mapping for any kind (composed kinds: "
                    "{kind: composed, mechanisms: [...]}, grid keys are paths into it) or one of the flat kinds "
                    f"{', '.join(flat)}"
                )
            return v
        return v  # its kinds, paths and values are checked with the grid (_check_template)

    @field_validator("deltas")
    @classmethod
    def _deltas(cls, v: list[float]) -> list[float]:
        return _probability_list("deltas", [float(x) for x in v])

    @field_validator("fprs")
    @classmethod
    def _fprs(cls, v: list[float]) -> list[float]:
        out = [float(x) for x in v]
        for i, x in enumerate(out):
            if not (0.0 <= x <= 1.0):
                raise ValueError(f"fprs[{i}] must be in [0, 1], got {bounded_repr(x)}")
        return out

    # -- derived -------------------------------------------------------------------------------------------------------
    def iter_cells(self) -> Iterator[dict[str, Any]]:
        """Mechanism dicts (the template with every grid key set) in grid order, first key outermost."""
        for cell, _ in self.iter_cells_with_axes():
            yield cell

    def iter_cells_with_axes(self) -> Iterator[tuple[dict[str, Any], tuple[Any, ...]]]:
        """(mechanism dict, the cell's value of each grid key in spec order), in grid order."""
        axes = self.axes()
        keys = list(axes)
        template = self.template
        flat = not any(isinstance(v, dict | list) for v in template.values())
        paths = [parse_path(k) for k in keys]
        for combo in itertools.product(*axes.values()):
            if flat:  # a flat kind: {"kind": ..., **fixed, **swept} (the common, large case: no deep copy)
                yield {**template, **dict(zip(keys, combo, strict=True))}, combo
                continue
            cell = copy.deepcopy(template)
            for path, value in zip(paths, combo, strict=True):
                set_path(cell, path, value)
            yield cell, combo

    @property
    def spec_hash(self) -> str:
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]


class CalibrationTarget(_Strict):
    """Exactly one attack-aware target for ``gdpcore.calibrate_noise`` (the keyword names of gdpcore.calibration.api)."""

    advantage: Annotated[float, Field(gt=0, lt=1)] | None = None
    tpr: Annotated[float, Field(gt=0, lt=1)] | None = None
    fnr: Annotated[float, Field(gt=0, lt=1)] | None = None
    fpr: Annotated[float, Field(ge=0, lt=1)] | None = None
    mu: Annotated[float, Field(gt=0)] | None = None
    epsilon: Annotated[float, Field(gt=0)] | None = None
    delta: Annotated[float, Field(gt=0, lt=1)] | None = None
    bayes_security: Annotated[float, Field(gt=0, lt=1)] | None = None

    def kwargs(self) -> dict[str, float]:
        """The ``target_*`` keyword arguments of ``calibrate_noise``."""
        set_ = {k: v for k, v in self.model_dump().items() if v is not None}
        primary = [k for k in ("advantage", "tpr", "fnr", "mu", "epsilon", "bayes_security") if k in set_]
        if len(primary) != 1:
            raise ValueError(
                f"target needs exactly one of advantage, tpr, fnr, mu, epsilon, bayes_security, got {bounded_repr(set_)}"
            )
        (p,) = primary
        partner = {"tpr": "fpr", "fnr": "fpr", "epsilon": "delta"}.get(p)
        extra = set(set_) - {p} - ({partner} if partner else set())
        if extra:
            raise ValueError(f"target.{sorted(extra)[0]} is not used with target.{p}, got {bounded_repr(set_)}")
        if partner and partner not in set_:
            raise ValueError(f"target.{p} needs target.{partner}, got {bounded_repr(set_)}")
        out = {f"target_{p}": set_[p]}
        if partner:
            out[partner] = set_[partner]
        return out


class CalibrationSpec(_GridAxes, _Strict):
    """``calibration_sweep``: the smallest noise multiplier meeting ``target`` for every (sampling_rate, steps)."""

    name: str = Field(pattern=_NAME_PATTERN)
    mechanism: Literal["subsampled_gaussian"] = "subsampled_gaussian"
    grid: dict[Literal["sampling_rate", "steps"], AxisSpec] = Field(min_length=2)
    target: CalibrationTarget
    max_cells: Annotated[int, Field(ge=1)] = 10_000
    chunk_size: Annotated[int, Field(ge=1, le=10_000)] | None = None

    _name = field_validator("name")(_check_name)

    @field_validator("target")
    @classmethod
    def _one_target(cls, v: CalibrationTarget) -> CalibrationTarget:
        v.kwargs()
        return v

    def iter_cells(self) -> Iterator[dict[str, Any]]:
        axes = self.axes()
        for q, t in itertools.product(axes["sampling_rate"], axes["steps"]):
            yield {"sampling_rate": q, "steps": t}

    @property
    def spec_hash(self) -> str:
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]


# -- axis expansion ------------------------------------------------------------------------------------------------------
def _round(x: float, integer: bool) -> float | int:
    return int(round(x)) if integer else float(f"{x:.12g}")


def _expand_axis(integer: bool, key: str, value: Any) -> list[Any]:
    if isinstance(value, Linspace | Logspace):
        name = "linspace" if isinstance(value, Linspace) else "logspace"
        start, stop, num = getattr(value, name)
        if num < 1:
            raise ValueError(f"grid.{shown_key(key)}.{name}[2] (num) must be >= 1, got {bounded_repr(num)}")
        if name == "logspace":
            if start <= 0 or stop <= 0:
                raise ValueError(
                    f"grid.{shown_key(key)}.logspace needs start and stop > 0, got {bounded_repr([start, stop, num])}"
                )
            raw = np.geomspace(start, stop, num)
        else:
            raw = np.linspace(start, stop, num)
        out = list(dict.fromkeys(_round(float(x), integer) for x in raw))  # dedupe after rounding, keep order
        return out
    if isinstance(value, list):
        return list(value)
    return [value]


# -- loading ------------------------------------------------------------------------------------------------------------
def _read_yaml(path: Path) -> Mapping[str, Any]:
    from tasks.safe_yaml import load_yaml_file

    data = load_yaml_file(path)  # YamlError (a ValueError) names the file, and the line where there is one
    if not isinstance(data, Mapping):
        raise ValueError(
            f"{path}: a spec must be a YAML mapping with keys name, mechanism, grid, ...; got {bounded_repr(data)}"
        )
    return data


def _user_path(data: Any, loc: tuple[Any, ...]) -> tuple[tuple[Any, ...], Any]:
    """Keep the parts of a pydantic error location that are keys/indices of the user's data (drop union tags)."""
    keep: list[Any] = []
    current = data
    missing = object()
    for part in loc:
        nxt = missing
        if isinstance(current, Mapping) and part in current:
            nxt = current[part]
        elif isinstance(current, list | tuple) and isinstance(part, int) and 0 <= part < len(current):
            nxt = current[part]
        if nxt is missing:
            if isinstance(current, Mapping) and isinstance(part, str) and not _is_union_tag(part):
                keep.append(part)  # a key the user did not write (missing required key)
                return tuple(keep), None
            continue
        keep.append(part)
        current = nxt
    return tuple(keep), current


def _is_union_tag(part: str) -> bool:
    return any(ch in part for ch in "[]()-") or part[:1].isupper() or part in {"int", "float", "str", "bool"}


def _format_validation_error(path: Path, data: Mapping[str, Any], exc: ValidationError) -> str:
    by_key: dict[str, str] = {}
    for err in exc.errors(include_url=False):
        loc, value = _user_path(data, tuple(err["loc"]))
        key = ".".join(shown_key(p) for p in loc) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing":
            line = f"{key}: required key is missing"
        elif err["type"] == "extra_forbidden":
            line = f"{key} = {bounded_repr(value)}: unknown key"
        else:
            # Capped: a message may quote what the user wrote (the registry's kind list alone is ~300 characters).
            line = f"{key} = {bounded_repr(value)}: {msg[:1000]}"
        by_key.setdefault(key, line)  # a value failing every member of a union: keep the first reason
    lines = list(by_key.values())
    more = f"; and {len(lines) - _MAX_ERRORS_SHOWN} more" if len(lines) > _MAX_ERRORS_SHOWN else ""
    return f"{path}: invalid spec: " + "; ".join(lines[:_MAX_ERRORS_SHOWN]) + more


_MAX_ERRORS_SHOWN = 5
"""Invalid keys named in one message (a 100,000-value axis of strings is 100,000 errors)."""


def _check_template(path: Path, spec: GridSpec | CalibrationSpec, base: dict[str, Any]) -> None:
    """Grid keys resolve to scalar parameters of the template, none is given twice, and every required parameter of
    every mechanism node is given in the template or swept."""
    template = spec.template
    try:
        node_kind(template, "mechanism")
    except ValueError as exc:
        raise ValueError(f"{path}: invalid spec: {exc}") from None
    if KIND_AXIS in spec.grid:
        _check_kind_axis(path, spec)
    for key in spec.grid:
        if key == KIND_AXIS:
            continue
        try:
            where, param = axis_param(template, key)
        except ValueError as exc:
            raise ValueError(f"{path}: invalid spec: grid.{shown_key(key)}: {exc}") from None
        node: Any = template
        for name, index in parse_path(key)[:-1]:
            node = node[name] if index is None else node[name][index]
        if param.name in node:
            raise ValueError(
                f"{path}: invalid spec: grid.{shown_key(key)}: also set in the mechanism template ({where}.{param.name} = "
                f"{bounded_repr(node[param.name])}); give it in one place"
            )
    swept = {(axis_param(template, k)[0], axis_param(template, k)[1].name) for k in spec.grid if k != KIND_AXIS}
    swept |= {("mechanism", k) for k in base}
    for where, node in walk_nodes(template):
        kind = _kinds.get(node["kind"])
        missing = sorted(
            p.name for p in kind.params if p.required and p.name not in node and (where, p.name) not in swept
        )
        if missing:
            at = "grid" if where == "mechanism" and isinstance(spec.mechanism, str) else where
            raise ValueError(
                f"{path}: invalid spec: {at}: missing required parameter(s) {', '.join(missing)} of {kind.name}"
                + ("" if at == "grid" else " (give it in the template or sweep it in grid)")
            )


def _kind_signature(kind: _kinds.KindSpec) -> dict[str, Any]:
    return {p.name: p.type for p in kind.params}


def _check_kind_axis(path: Path, spec: GridSpec | CalibrationSpec) -> None:
    """``grid.kind``: only with a flat kind named as ``mechanism``; every value a flat kind taking exactly that kind's
    parameters (names and types), so every other grid key means the same in every cell."""
    key = f"grid.{KIND_AXIS}"
    if not isinstance(spec.mechanism, str):
        raise ValueError(
            f"{path}: invalid spec: {key}: sweeping the kind needs a flat kind's name as mechanism (the kind whose "
            "parameters the other grid keys name), not a template"
        )
    values = spec.axes()[KIND_AXIS]
    flat = _kinds.flat_kinds()
    want = _kind_signature(_kinds.get(spec.mechanism))
    for i, value in enumerate(values):
        if not (isinstance(value, str) and value in flat):
            raise ValueError(
                f"{path}: invalid spec: {key}[{i}] = {bounded_repr(value)}: must be one of the flat kinds "
                f"{', '.join(flat)}"
            )
        got = _kind_signature(_kinds.get(value))
        if got != want:
            raise ValueError(
                f"{path}: invalid spec: {key}[{i}] = {bounded_repr(value)}: its parameters "
                f"({', '.join(sorted(got))}) differ from those of mechanism {spec.mechanism} ({', '.join(sorted(want))})"
            )
        why = _unsupported(value, tuple(getattr(spec, "representations", ())))
        if why is not None:
            raise ValueError(f"{path}: invalid spec: {key}[{i}] = {bounded_repr(value)}: cannot be accounted: {why}")
    if len(set(values)) != len(values):
        raise ValueError(f"{path}: invalid spec: {key} = {bounded_repr(values)}: a kind is listed twice")


def _unsupported(mechanism: Any, representations: tuple[str, ...]) -> str | None:
    """Why ``mechanism`` (a mechanism, or a flat kind's name) cannot be swept (a leaf kind declares a needed property unsupported), or None."""
    for what in ("analyze_grid", *(f"regret.{r}" for r in representations if r != "gdp")):
        refusal = _kinds.why_unsupported(mechanism, what)
        if refusal is not None:
            return str(refusal)
    return None


def _validate_mechanism_values(path: Path, spec: GridSpec | CalibrationSpec, base: dict[str, Any]) -> None:
    """Build one mechanism per axis value (others at their first value): every bad value is caught before any work."""
    from gdpcore import mechanism_from_dict

    _check_template(path, spec, base)
    try:
        axes = spec.axes()
    except ValueError as exc:  # e.g. a logspace with a negative end
        raise ValueError(f"{path}: invalid spec: {exc}") from None
    template = spec.template
    for key, values in axes.items():
        if key == KIND_AXIS or axis_param(template, key)[1].type is not int:
            continue
        for i, value in enumerate(values):
            if isinstance(value, int | float) and not isinstance(value, bool) and not abs(value) <= MAX_INTEGER_PARAM:
                raise ValueError(
                    f"{path}: invalid spec: grid.{shown_key(key)}[{i}] = {bounded_repr(value)}: must be at most {MAX_INTEGER_PARAM:,}"
                )
    first = {k: v[0] for k, v in axes.items()}
    paths = {k: parse_path(k) for k in axes}
    mechanism = None
    for key, values in axes.items():
        for i, value in enumerate(values):
            cell = copy.deepcopy(template)
            for k, v in {**base, **first, key: value}.items():
                set_path(cell, paths.get(k) or parse_path(k), v)
            try:
                mechanism = mechanism_from_dict(cell)
            except ValueError as exc:
                # A ParameterError names the parameter to blame; other errors (unknown kind or field) blame none.
                msg = exc.reason if isinstance(exc, ParameterError) else str(exc)
                blamed = exc.key if isinstance(exc, ParameterError) else None
                if blamed is not None and blamed != key and blamed in axes:  # another axis's first value is bad
                    key, i, value = blamed, 0, axes[blamed][0]
                elif blamed is not None and blamed not in axes:
                    fixed, bad = template_value(template, blamed)
                    if fixed:  # a value written in the template itself
                        raise ValueError(
                            f"{path}: invalid spec: mechanism.{blamed} = {bounded_repr(bad)}: {msg[:300]}"
                        ) from None
                raise ValueError(
                    f"{path}: invalid spec: grid.{shown_key(key)}[{i}] = {bounded_repr(value)}: {msg[:300]}"
                ) from None
    if mechanism is not None:
        why = _unsupported(mechanism, tuple(getattr(spec, "representations", ())))
        if why is not None:
            shown = spec.mechanism if isinstance(spec.mechanism, str) else spec.kind
            raise ValueError(f"{path}: invalid spec: mechanism = {bounded_repr(shown)}: cannot be accounted: {why}")


def _axis_size(value: Any) -> int:
    if isinstance(value, Linspace):
        return max(0, value.linspace[2])
    if isinstance(value, Logspace):
        return max(0, value.logspace[2])
    return len(value) if isinstance(value, list) else 1


def _check_size(path: Path, spec: GridSpec | CalibrationSpec, force: bool) -> None:
    """Checked on the declared sizes, before any axis is expanded (10^9 cells must not allocate anything)."""
    grid: Mapping[Any, Any] = spec.grid
    sizes = {k: _axis_size(v) for k, v in grid.items()}
    for key, size in sizes.items():
        if size < 1:
            raise ValueError(
                f"{path}: invalid spec: grid.{shown_key(key)} = {bounded_repr(grid[key])}: the axis has no values"
            )
    n = math.prod(sizes.values())
    if n > HARD_MAX_CELLS:
        shape = bounded_message(" x ".join(f"{shown_key(k)}:{s}" for k, s in sizes.items()), 300)
        raise ValueError(
            f"{path}: grid has {n:,} cells ({shape}) > {HARD_MAX_CELLS:,}, the most one spec can hold even with "
            "--force; split it into several specs"
        )
    if n > spec.max_cells and not force:
        shape = bounded_message(" x ".join(f"{shown_key(k)}:{s}" for k, s in sizes.items()), 300)
        raise ValueError(
            f"{path}: grid has {n:,} cells ({shape}) > max_cells={spec.max_cells:,}; "
            "raise max_cells in the spec or pass --force"
        )


_Spec = TypeVar("_Spec", GridSpec, CalibrationSpec)


def _load_spec(path: Path, model: type[_Spec], force: bool, base: dict[str, Any]) -> _Spec:
    """Read ``path`` as a ``model`` spec: schema, size and mechanism values checked (``base`` as for
    :func:`_validate_mechanism_values`); ``ValueError`` naming the file, key and value."""
    data = _read_yaml(path)
    try:
        spec = model.model_validate(dict(data))
    except ValidationError as exc:
        raise ValueError(_format_validation_error(path, data, exc)) from None
    _check_size(path, spec, force)
    _validate_mechanism_values(path, spec, base)
    return spec


def load_grid_spec(path: str | Path, *, force: bool = False) -> GridSpec:
    """Read and validate a grid spec; raises ``ValueError`` naming the file, key and value."""
    path = Path(path)
    spec = _load_spec(path, GridSpec, force, {})
    if spec.plot is not None:
        if spec.kind not in _kinds.flat_kinds():
            raise ValueError(
                f"{path}: invalid spec: plot: heat maps read the typed parameter columns of a flat kind; a "
                f"{spec.kind} sweep has none (query its swept values in the report's axes view)"
            )
        for axis in ("x", "y"):
            key = getattr(spec.plot, axis)
            if key not in spec.grid:
                raise ValueError(
                    f"{path}: invalid spec: plot.{axis} = {bounded_repr(key)}: not a grid key (grid keys: {bounded_repr(list(spec.grid))})"
                )
        if spec.plot.x == spec.plot.y:
            raise ValueError(f"{path}: invalid spec: plot.y = {bounded_repr(spec.plot.y)}: must differ from plot.x")
        for key in spec.plot.fixed:
            if key not in spec.grid or key in (spec.plot.x, spec.plot.y):
                raise ValueError(
                    f"{path}: invalid spec: plot.fixed.{shown_key(key)}: not a grid key other than x and y"
                )
    return spec


def load_calibration_spec(path: str | Path, *, force: bool = False) -> CalibrationSpec:
    return _load_spec(Path(path), CalibrationSpec, force, {"noise_multiplier": 1.0})


def spec_json(spec: BaseModel) -> str:
    return json.dumps(spec.model_dump(mode="json"), sort_keys=True)
