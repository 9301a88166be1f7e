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

from gdpcore._validation import check_choice, check_count, check_positive, check_probability

__all__ = [
    "NEIGHBOURING_RELATIONS",
    "Composed",
    "DiscreteGaussian",
    "Gaussian",
    "Laplace",
    "Mechanism",
    "RandomizedResponse",
    "SelfComposed",
    "SubsampledGaussian",
    "mechanism_from_dict",
]

NEIGHBOURING_RELATIONS: tuple[str, ...] = ("add_remove", "replace_one")

# Bumped whenever the serialised form of a mechanism changes meaning; part of every content hash.
_SCHEMA_VERSION = 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class Mechanism:
    """Base class. Subclasses declare ``kind`` (the JSON tag) and validate their fields in ``__post_init__``."""

    kind: ClassVar[str] = ""

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
        return self.neighbouring

    def gaussian_mu(self) -> float | None:
        """Exact mu-GDP parameter if the mechanism is a composition of plain Gaussians, else None.

        A Gaussian whose noise std is noise_multiplier x sensitivity is exactly (1/noise_multiplier)-GDP, and mu_i-GDP mechanisms
        compose to sqrt(sum mu_i^2)-GDP (Dong et al. 2022, Cor. 3.3); seed 000 Sec. 5 "Other algorithms".
        """
        return None


def _check_neighbouring(value: Any) -> str:
    return check_choice("neighbouring", value, NEIGHBOURING_RELATIONS)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Gaussian(Mechanism):
    """Gaussian mechanism: query + N(0, (noise_multiplier * sensitivity)^2).

    Exactly mu-GDP with mu = 1 / noise_multiplier (the sensitivity cancels).
    """

    kind: ClassVar[str] = "gaussian"
    noise_multiplier: float
    sensitivity: float = 1.0
    neighbouring: str = "add_remove"

    def __post_init__(self) -> None:
        object.__setattr__(self, "noise_multiplier", check_positive("noise_multiplier", self.noise_multiplier))
        object.__setattr__(self, "sensitivity", check_positive("sensitivity", self.sensitivity))
        _check_neighbouring(self.neighbouring)

    def gaussian_mu(self) -> float:
        return 1.0 / self.noise_multiplier


@dataclasses.dataclass(frozen=True, kw_only=True)
class Laplace(Mechanism):
    """Laplace mechanism: query + Lap(scale); pure (sensitivity/scale)-DP."""

    kind: ClassVar[str] = "laplace"
    scale: float
    sensitivity: float = 1.0
    neighbouring: str = "add_remove"

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", check_positive("scale", self.scale))
        object.__setattr__(self, "sensitivity", check_positive("sensitivity", self.sensitivity))
        _check_neighbouring(self.neighbouring)

    @property
    def epsilon(self) -> float:
        return self.sensitivity / self.scale


@dataclasses.dataclass(frozen=True, kw_only=True)
class RandomizedResponse(Mechanism):
    """Binary randomized response: report the true bit with probability e^eps / (1 + e^eps).

    Its trade-off curve is exactly f_{eps,0} (seed 000 Sec. 2.4); it is defined for ``replace_one`` adjacency.
    """

    kind: ClassVar[str] = "randomized_response"
    epsilon: float
    neighbouring: str = "replace_one"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_positive("epsilon", self.epsilon))
        check_choice("neighbouring", self.neighbouring, ("replace_one",))


@dataclasses.dataclass(frozen=True, kw_only=True)
class SubsampledGaussian(Mechanism):
    """DP-SGD: ``steps`` compositions of a Poisson-subsampled Gaussian (add/remove adjacency).

    Each step includes every record independently with probability ``sampling_rate`` and releases the sum of
    clipped contributions plus N(0, (noise_multiplier * sensitivity)^2) (seed 000 Eq. 1).
    """

    kind: ClassVar[str] = "subsampled_gaussian"
    noise_multiplier: float
    sampling_rate: float
    steps: int
    sensitivity: float = 1.0
    neighbouring: str = "add_remove"

    def __post_init__(self) -> None:
        object.__setattr__(self, "noise_multiplier", check_positive("noise_multiplier", self.noise_multiplier))
        object.__setattr__(self, "sampling_rate", check_probability("sampling_rate", self.sampling_rate))
        object.__setattr__(self, "steps", check_count("steps", self.steps))
        object.__setattr__(self, "sensitivity", check_positive("sensitivity", self.sensitivity))
        check_choice("neighbouring", self.neighbouring, ("add_remove",))

    def gaussian_mu(self) -> float | None:
        # With sampling_rate == 1 every step is a plain Gaussian: exactly (sqrt(T)/sigma)-GDP.
        if self.sampling_rate == 1.0:
            return self.steps**0.5 / self.noise_multiplier
        return None


@dataclasses.dataclass(frozen=True, kw_only=True)
class DiscreteGaussian(Mechanism):
    """Discrete Gaussian mechanism on the integers (Canonne, Kamath, Steinke 2020), integer sensitivity."""

    kind: ClassVar[str] = "discrete_gaussian"
    sigma: float
    sensitivity: int = 1
    neighbouring: str = "add_remove"

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma", check_positive("sigma", self.sigma))
        object.__setattr__(self, "sensitivity", check_count("sensitivity", self.sensitivity))
        _check_neighbouring(self.neighbouring)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Composed(Mechanism):
    """Sequential composition of heterogeneous mechanisms sharing one neighbouring relation."""

    kind: ClassVar[str] = "composed"
    mechanisms: tuple[Mechanism, ...]

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

    def gaussian_mu(self) -> float | None:
        mus = [m.gaussian_mu() for m in self.mechanisms]
        if any(mu is None for mu in mus):
            return None
        return float(sum(mu * mu for mu in mus) ** 0.5)  # type: ignore[operator]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SelfComposed(Mechanism):
    """``count`` sequential runs of the same mechanism."""

    kind: ClassVar[str] = "self_composed"
    mechanism: Mechanism
    count: int

    def __post_init__(self) -> None:
        if not isinstance(self.mechanism, Mechanism):
            raise ValueError(f"mechanism must be a mechanism, got {self.mechanism!r}")
        object.__setattr__(self, "count", check_count("count", self.count))

    @property
    def neighbouring_relation(self) -> str:
        return self.mechanism.neighbouring_relation

    def gaussian_mu(self) -> float | None:
        mu = self.mechanism.gaussian_mu()
        return None if mu is None else mu * self.count**0.5


_KINDS: dict[str, type[Mechanism]] = {
    cls.kind: cls
    for cls in (Gaussian, Laplace, RandomizedResponse, SubsampledGaussian, DiscreteGaussian, Composed, SelfComposed)
}


def mechanism_from_dict(data: Mapping[str, Any], *, _path: str = "mechanism") -> Mechanism:
    """Inverse of :meth:`Mechanism.to_dict`. Unknown kinds and fields raise ``ValueError`` naming the path."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{_path} must be a mapping with a 'kind' key, got {data!r}")
    kind = data.get("kind")
    cls = _KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"{_path}.kind must be one of {', '.join(map(repr, sorted(_KINDS)))}, got {kind!r}")
    field_names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - field_names - {"kind"}
    if unknown:
        raise ValueError(f"{_path} ({kind}) has unknown field(s) {sorted(unknown)!r}; allowed: {sorted(field_names)!r}")
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        if name == "kind":
            continue
        if cls is Composed and name == "mechanisms":
            if not isinstance(value, list | tuple):
                raise ValueError(f"{_path}.mechanisms must be a list, got {value!r}")
            value = tuple(mechanism_from_dict(v, _path=f"{_path}.mechanisms[{i}]") for i, v in enumerate(value))
        elif cls is SelfComposed and name == "mechanism":
            value = mechanism_from_dict(value, _path=f"{_path}.mechanism")
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required field is missing
        raise ValueError(f"{_path} ({kind}): {exc}") from None
    except ValueError as exc:
        raise ValueError(f"{_path} ({kind}): {exc}") from None
