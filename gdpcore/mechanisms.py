"""Mechanism descriptions: frozen, hashable, keyword-only value objects.

A mechanism object *describes* a release (like dp_accounting's DpEvent); it does not account for it. Accounting
lives in :mod:`gdpcore.accounting` and :mod:`gdpcore.report`. Every object has a JSON round trip
(``to_dict()`` / :func:`mechanism_from_dict`) and a stable content hash (:attr:`Mechanism.content_hash`) used as a
cache key and row id by the pipeline.

Conventions, stated once and carried as explicit fields (never hidden assumptions):

* ``sensitivity`` is the L2 (Gaussian family) or L1 (Laplace) sensitivity of the released query under the
  mechanism's ``neighbouring`` relation; default 1, i.e. noise parameters are *noise multipliers* in units of the
  sensitivity (DP-SGD's clipping norm).
* ``neighbouring`` is ``"add_remove"`` (add or remove one record; DP-SGD's relation) or ``"replace_one"`` (substitute
  one record). For additive-noise mechanisms the trade-off curve depends on the relation only through the
  sensitivity the user states for it. Randomized response is defined for ``"replace_one"`` (one respondent's bit).
  Poisson subsampling (:class:`SubsampledGaussian`) is analysed under ``"add_remove"`` only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from gdpcore._validation import Choice, Constraint, Count, Positive, Probability

__all__ = [
    "NEIGHBOURING_RELATIONS",
    "Composed",
    "DiscreteGaussian",
    "Gaussian",
    "Laplace",
    "Mechanism",
    "Param",
    "RandomizedResponse",
    "SelfComposed",
    "SubsampledGaussian",
    "mechanism_from_dict",
    "param",
    "parameters",
]

NEIGHBOURING_RELATIONS: tuple[str, ...] = ("add_remove", "replace_one")

# Bumped whenever the serialised form of a mechanism changes meaning; part of every content hash.
_SCHEMA_VERSION = 1

_PARAM_KEY = "gdpcore.param"
_NESTED_KEY = "gdpcore.nested"


@dataclasses.dataclass(frozen=True)
class _ParamMeta:
    doc: str
    constraint: Constraint
    lake_column: str | None


@dataclasses.dataclass(frozen=True)
class Param:
    """One scalar parameter of a mechanism kind, as declared on its class with :func:`param`.

    Everything that lists parameters (the spec schema of ``tasks/spec.py``, the lake's typed parameter columns, the
    CLI help) is derived from these declarations through :mod:`gdpcore.kinds`.
    """

    name: str
    type: type
    doc: str
    constraint: Constraint
    default: Any  # dataclasses.MISSING when required
    lake_column: str

    @property
    def required(self) -> bool:
        return self.default is dataclasses.MISSING

    def describe(self) -> str:
        """One line: name, rule, default and meaning (for help texts)."""
        default = "required" if self.required else f"default {self.default!r}"
        return f"{self.name} ({self.constraint.describe()}; {default}): {self.doc}"


def param(doc: str, constraint: Constraint, *, default: Any = dataclasses.MISSING, lake_column: str | None = None):
    """Declare a scalar mechanism parameter: a dataclass field carrying its meaning and its rule.

    ``lake_column`` renames the parameter's column in the results lake where its name would collide with a result
    column (randomized response's ``epsilon`` is stored as ``rr_epsilon``).
    """
    meta = {_PARAM_KEY: _ParamMeta(doc=doc, constraint=constraint, lake_column=lake_column)}
    return dataclasses.field(default=default, metadata=meta)


def _nested(many: bool, doc: str):
    return dataclasses.field(metadata={_NESTED_KEY: ("many" if many else "one", doc)})


def parameters(cls: type[Mechanism]) -> tuple[Param, ...]:
    """The declared scalar parameters of a mechanism class, in field order (nested mechanisms excluded)."""
    out = []
    for f in dataclasses.fields(cls):
        meta = f.metadata.get(_PARAM_KEY)
        if meta is None:
            continue
        out.append(
            Param(
                name=f.name,
                type=meta.constraint.type,
                doc=meta.doc,
                constraint=meta.constraint,
                default=f.default,
                lake_column=meta.lake_column or f.name,
            )
        )
    return tuple(out)


def nested_fields(cls: type[Mechanism]) -> dict[str, str]:
    """{field name: "one" | "many"} for the fields of ``cls`` that hold nested mechanisms."""
    return {f.name: f.metadata[_NESTED_KEY][0] for f in dataclasses.fields(cls) if _NESTED_KEY in f.metadata}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Mechanism:
    """Base class. Subclasses declare ``kind`` (the JSON tag) and their parameters with :func:`param`; declared
    parameters are validated (and normalised: ``steps=100.0`` becomes ``100``) here, once for every kind."""

    kind: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            meta = f.metadata.get(_PARAM_KEY)
            if meta is not None:
                object.__setattr__(self, f.name, meta.constraint.check(f.name, getattr(self, f.name)))

    # -- serialisation -------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with a ``kind`` tag; nested mechanisms become nested dicts."""
        out: dict[str, Any] = {"kind": self.kind}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, Mechanism):
                value = value.to_dict()
            elif isinstance(value, tuple):
                value = [v.to_dict() if isinstance(v, Mechanism) else v for v in value]
            out[field.name] = value
        return out

    def to_json(self) -> str:
        """Canonical JSON (sorted keys, no whitespace): the input of :attr:`content_hash`."""
        return json.dumps({"schema": _SCHEMA_VERSION, **self.to_dict()}, sort_keys=True, separators=(",", ":"))

    @property
    def content_hash(self) -> str:
        """SHA-256 of the canonical JSON, hex, first 32 characters. Equal mechanisms have equal hashes."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:32]

    # -- structure -------------------------------------------------------------------------------------------------
    @property
    def neighbouring_relation(self) -> str:
        """The neighbouring relation the guarantee is stated for (a leaf kind's ``neighbouring`` parameter)."""
        value = self.__dict__.get("neighbouring")
        if not isinstance(value, str):
            raise TypeError(f"mechanism kind {self.kind!r} declares no 'neighbouring' parameter")
        return value

    def to_dp_event(self) -> Any:
        """The dp_accounting ``DpEvent`` describing this mechanism (noise relative to one record's norm bound; see
        :mod:`gdpcore.events`), dispatched through the kind registry (:func:`gdpcore.kinds.to_dp_event`).
        :class:`gdpcore.kinds.UnsupportedMechanismError` for a kind dp_accounting has no event for."""
        from gdpcore import kinds  # local: the registry imports this module

        return kinds.to_dp_event(self)

    def gaussian_mu(self) -> float | None:
        """Exact mu-GDP parameter if the mechanism is a composition of plain Gaussians, else None.

        A Gaussian whose noise std is noise_multiplier x sensitivity is exactly (1/noise_multiplier)-GDP, and mu_i-GDP
        mechanisms compose to sqrt(sum mu_i^2)-GDP (Dong et al. 2022, Cor. 3.3); seed 000 Sec. 5 "Other algorithms".
        Dispatched through the kind registry (:func:`gdpcore.kinds.exact_mu`).
        """
        from gdpcore import kinds  # local: the registry imports this module

        return kinds.exact_mu(self)


_SENSITIVITY_DOC = "sensitivity of the released query under the neighbouring relation (noise is in units of it)"
_RELATION_DOC = "neighbouring relation the guarantee is stated for"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Gaussian(Mechanism):
    """Gaussian mechanism: query + N(0, (noise_multiplier * sensitivity)^2).

    Exactly mu-GDP with mu = 1 / noise_multiplier (the sensitivity cancels).
    """

    kind: ClassVar[str] = "gaussian"
    noise_multiplier: float = param("noise standard deviation in units of the L2 sensitivity", Positive())
    sensitivity: float = param("L2 " + _SENSITIVITY_DOC, Positive(), default=1.0)
    neighbouring: str = param(_RELATION_DOC, Choice(NEIGHBOURING_RELATIONS), default="add_remove")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Laplace(Mechanism):
    """Laplace mechanism: query + Lap(scale); pure (sensitivity/scale)-DP."""

    kind: ClassVar[str] = "laplace"
    scale: float = param("Laplace noise scale b (absolute, not in units of the sensitivity)", Positive())
    sensitivity: float = param("L1 " + _SENSITIVITY_DOC, Positive(), default=1.0)
    neighbouring: str = param(_RELATION_DOC, Choice(NEIGHBOURING_RELATIONS), default="add_remove")

    @property
    def epsilon(self) -> float:
        return self.sensitivity / self.scale


@dataclasses.dataclass(frozen=True, kw_only=True)
class RandomizedResponse(Mechanism):
    """Binary randomized response: report the true bit with probability e^eps / (1 + e^eps).

    Its trade-off curve is exactly f_{eps,0} (seed 000 Sec. 2.4); it is defined for ``replace_one`` adjacency.
    """

    kind: ClassVar[str] = "randomized_response"
    epsilon: float = param(
        "pure-DP parameter: the true bit is reported with probability e^eps / (1 + e^eps)",
        Positive(),
        lake_column="rr_epsilon",
    )
    neighbouring: str = param(
        _RELATION_DOC + " (one respondent's bit)", Choice(("replace_one",)), default="replace_one"
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class SubsampledGaussian(Mechanism):
    """DP-SGD: ``steps`` compositions of a Poisson-subsampled Gaussian (add/remove adjacency).

    Each step includes every record independently with probability ``sampling_rate`` and releases the sum of
    clipped contributions plus N(0, (noise_multiplier * sensitivity)^2) (seed 000 Eq. 1).
    """

    kind: ClassVar[str] = "subsampled_gaussian"
    noise_multiplier: float = param("noise standard deviation in units of the clipping norm", Positive())
    sampling_rate: float = param("Poisson sampling probability of each record per step", Probability())
    steps: int = param("number of composed steps", Count())
    sensitivity: float = param("clipping norm (L2 sensitivity of one record's contribution)", Positive(), default=1.0)
    neighbouring: str = param(
        _RELATION_DOC + " (Poisson subsampling: add_remove only)", Choice(("add_remove",)), default="add_remove"
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class DiscreteGaussian(Mechanism):
    """Discrete Gaussian mechanism on the integers (Canonne, Kamath, Steinke 2020), integer sensitivity."""

    kind: ClassVar[str] = "discrete_gaussian"
    sigma: float = param("scale parameter of the discrete Gaussian on the integers", Positive())
    sensitivity: int = param("integer L1 / L2 " + _SENSITIVITY_DOC, Count(), default=1)
    neighbouring: str = param(_RELATION_DOC, Choice(NEIGHBOURING_RELATIONS), default="add_remove")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Composed(Mechanism):
    """Sequential composition of heterogeneous mechanisms sharing one neighbouring relation."""

    kind: ClassVar[str] = "composed"
    mechanisms: tuple[Mechanism, ...] = _nested(True, "the mechanisms run in sequence")

    def __post_init__(self) -> None:
        mechs = self.mechanisms
        if isinstance(mechs, (str, bytes, Mapping)) or not isinstance(mechs, Sequence):
            raise ValueError(f"mechanisms must be a list of mechanisms, got {mechs!r}")
        mechs = tuple(mechs)
        if not mechs:
            raise ValueError("mechanisms must not be empty, got []")
        for i, m in enumerate(mechs):
            if not isinstance(m, Mechanism):
                raise ValueError(f"mechanisms[{i}] must be a mechanism, got {m!r}")
        relations = {m.neighbouring_relation for m in mechs}
        if len(relations) > 1:
            raise ValueError(
                f"mechanisms must share one neighbouring relation, got {sorted(relations)!r}: composing guarantees "
                "stated for different adjacency notions has no meaning"
            )
        object.__setattr__(self, "mechanisms", mechs)

    @property
    def neighbouring_relation(self) -> str:
        return self.mechanisms[0].neighbouring_relation


@dataclasses.dataclass(frozen=True, kw_only=True)
class SelfComposed(Mechanism):
    """``count`` sequential runs of the same mechanism."""

    kind: ClassVar[str] = "self_composed"
    mechanism: Mechanism = _nested(False, "the mechanism run repeatedly")
    count: int = param("number of runs", Count())

    def __post_init__(self) -> None:
        if not isinstance(self.mechanism, Mechanism):
            raise ValueError(f"mechanism must be a mechanism, got {self.mechanism!r}")
        super().__post_init__()

    @property
    def neighbouring_relation(self) -> str:
        return self.mechanism.neighbouring_relation


def mechanism_from_dict(data: Mapping[str, Any], *, _path: str = "mechanism") -> Mechanism:
    """Inverse of :meth:`Mechanism.to_dict`. Unknown kinds and fields raise ``ValueError`` naming the path.

    Kinds are looked up in the registry (:mod:`gdpcore.kinds`), so every registered kind round-trips.
    """
    from gdpcore import kinds  # local: the registry imports this module

    if not isinstance(data, Mapping):
        raise ValueError(f"{_path} must be a mapping with a 'kind' key, got {data!r}")
    kind = data.get("kind")
    names = kinds.kind_names()
    if not (isinstance(kind, str) and kind in names):
        raise ValueError(f"{_path}.kind must be one of {', '.join(map(repr, sorted(names)))}, got {kind!r}")
    cls = kinds.get(kind).cls
    field_names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - field_names - {"kind"}
    if unknown:
        raise ValueError(f"{_path} ({kind}) has unknown field(s) {sorted(unknown)!r}; allowed: {sorted(field_names)!r}")
    nested = nested_fields(cls)
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        if name == "kind":
            continue
        if nested.get(name) == "many":
            if not isinstance(value, list | tuple):
                raise ValueError(f"{_path}.{name} must be a list, got {value!r}")
            value = tuple(mechanism_from_dict(v, _path=f"{_path}.{name}[{i}]") for i, v in enumerate(value))
        elif nested.get(name) == "one":
            value = mechanism_from_dict(value, _path=f"{_path}.{name}")
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required field is missing
        raise ValueError(f"{_path} ({kind}): {exc}") from None
    except ValueError as exc:
        raise ValueError(f"{_path} ({kind}): {exc}") from None
