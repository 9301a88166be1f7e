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
  Poisson subsampling (:class:`SubsampledGaussian`) is analysed under ``"add_remove"``; under ``"replace_one"`` a
  Poisson-subsampled Gaussian is the replace-one :class:`MixtureOfGaussians` with sensitivities (0, 1), a
  Poisson-subsampled (discrete) Laplace :class:`ReplaceOneSubsampledLaplace` (:class:`ReplaceOneSubsampledDiscreteLaplace`).

Size: over 600 lines because it holds every kind's class (16 short declarations) beside the machinery they share
(:func:`param`, :class:`Mechanism`, :func:`mechanism_from_dict`); kept in one module so the conventions above are
stated once next to every parameter that follows them. Everything a kind *does* lives in :mod:`gdpcore.kinds`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from gdpcore._validation import (
    Choice,
    Constraint,
    Count,
    Positive,
    Probability,
    bounded_repr,
    check_count,
    check_positive,
    check_probability,
)

__all__ = [
    "NEIGHBOURING_RELATIONS",
    "Composed",
    "DiscreteGaussian",
    "DiscreteLaplace",
    "KaryRandomizedResponse",
    "MixtureOfGaussians",
    "SampledWithoutReplacementGaussian",
    "SubsampledDiscreteLaplace",
    "SubsampledLaplace",
    "TreeAggregation",
    "TruncatedSubsampledGaussian",
    "ZCDP",
    "Gaussian",
    "Laplace",
    "Mechanism",
    "Param",
    "ParameterError",
    "RandomizedResponse",
    "ReplaceOneSubsampledDiscreteLaplace",
    "ReplaceOneSubsampledLaplace",
    "SelfComposed",
    "SubsampledGaussian",
    "mechanism_from_dict",
    "param",
    "parameters",
]

NEIGHBOURING_RELATIONS: tuple[str, ...] = ("add_remove", "replace_one")


class ParameterError(ValueError):
    """A mechanism description with a value its kind refuses, as ``"{path} ({kind}): {reason}"``: ``path`` is where the
    mechanism sits ("mechanism.mechanisms[0]"), ``field`` the parameter to blame (None when no single one is)."""

    def __init__(self, path: str, kind: str, field: str | None, reason: str) -> None:
        super().__init__(f"{path} ({kind}): {reason}")
        self.path, self.kind, self.field, self.reason = path, kind, field, reason

    @property
    def key(self) -> str | None:
        """The blamed parameter as a path below the top mechanism ("mechanisms[0].noise_multiplier"), or None."""
        if self.field is None:
            return None
        where = self.path.removeprefix("mechanism").removeprefix(".")
        return f"{where}.{self.field}" if where else self.field


_CLASSES: dict[str, type[Mechanism]] = {}
"""{kind: class}, filled by :meth:`Mechanism.__init_subclass__` in definition order."""

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


def content_hash_of_json(canonical_json: str) -> str:
    """:attr:`Mechanism.content_hash` of the mechanism whose :meth:`Mechanism.to_json` is ``canonical_json`` (for a
    caller that already holds that text: the hash is not computed twice)."""
    return hashlib.sha256(canonical_json.encode()).hexdigest()[:32]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Mechanism:
    """Base class. Subclasses declare ``kind`` (the JSON tag) and their parameters with :func:`param`; declared
    parameters are validated (and normalised: ``steps=100.0`` becomes ``100``) here, once for every kind."""

    kind: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Every subclass with a ``kind`` is known to :func:`mechanism_from_dict` from its definition on: the JSON
        round trip needs no registry (which imports this module, not the other way round)."""
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("kind"):
            _CLASSES[cls.kind] = cls

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
        return content_hash_of_json(self.to_json())

    # -- structure -------------------------------------------------------------------------------------------------
    @property
    def neighbouring_relation(self) -> str:
        """The neighbouring relation the guarantee is stated for (a leaf kind's ``neighbouring`` parameter)."""
        value = self.__dict__.get("neighbouring")
        if not isinstance(value, str):
            raise TypeError(f"mechanism kind {self.kind!r} declares no 'neighbouring' parameter")
        return value


MIN_REAL, MAX_REAL = 1e-100, 1e100
"""The range of every real mechanism parameter (noise scales, sensitivities, rho, list entries): beyond it the privacy
loss's own scale (1 / sigma^2, sensitivity / scale, e^eps) leaves double precision, and a float's square overflows,
so no bound could be computed; inside it every kind's bounds stay finite (a tiny noise gives a huge, labelled eps)."""
MAX_COUNT = 10**18
"""The largest integer mechanism parameter (steps, sensitivities, sizes, repetition counts): every count is carried as
a float by the accountants (RDP and zCDP scale with it), exact up to 2^53 and finite far beyond."""


MAX_NESTING = 100
"""The deepest nesting of compositions (:class:`Composed` / :class:`SelfComposed`) a mechanism may have: every walk of
the tree recurses once per level, and no real schedule nests more than a few levels."""


def nesting(mechanism: Mechanism) -> int:
    """Composition levels above ``mechanism``'s deepest leaf (0 for a leaf), as its constructor measured it."""
    return int(getattr(mechanism, "_nesting", 0))


def _check_nesting(owner: Mechanism, children: Sequence[Mechanism]) -> None:
    depth = 1 + max(nesting(m) for m in children)
    if depth > MAX_NESTING:
        raise ValueError(f"{owner.kind} is nested more than {MAX_NESTING} levels deep: refused")
    object.__setattr__(owner, "_nesting", depth)


class Real(Positive):
    """A real number in [``MIN_REAL``, ``MAX_REAL``] (every positive real parameter of a mechanism)."""

    def check(self, name: str, value: Any) -> float:
        out = check_positive(name, value)
        if not MIN_REAL <= out <= MAX_REAL:
            raise ValueError(f"{name} must be a real in [{MIN_REAL:g}, {MAX_REAL:g}], got {bounded_repr(value)}")
        return out

    def describe(self) -> str:
        return f"real in [{MIN_REAL:g}, {MAX_REAL:g}]"


class BoundedCount(Count):
    """An integer in [``minimum``, ``MAX_COUNT``] (integral floats accepted)."""

    def check(self, name: str, value: Any) -> int:
        out = check_count(name, value, minimum=self.minimum)
        if out > MAX_COUNT:
            raise ValueError(f"{name} must be an integer in [{self.minimum}, 10**18], got {bounded_repr(value)}")
        return out

    def describe(self) -> str:
        return f"integer >= {self.minimum} (at most 10**18)"


_SENSITIVITY_DOC = "sensitivity of the released query under the neighbouring relation (noise is in units of it)"
_RELATION_DOC = "neighbouring relation the guarantee is stated for"


def _poisson_sampling_rate():  # a fresh field per class (a dataclass field object cannot be shared)
    return param("Poisson sampling probability of each record per step", Probability())


def _poisson_neighbouring():
    """The relation field of a Poisson-subsampled mechanism: amplification by Poisson subsampling is stated under
    add/remove only, so that is the one relation it accepts."""
    return param(
        _RELATION_DOC + " (Poisson subsampling: add_remove only)", Choice(("add_remove",)), default="add_remove"
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Gaussian(Mechanism):
    """Gaussian mechanism: query + N(0, (noise_multiplier * sensitivity)^2).

    Exactly mu-GDP with mu = 1 / noise_multiplier (the sensitivity cancels).
    """

    kind: ClassVar[str] = "gaussian"
    noise_multiplier: float = param("noise standard deviation in units of the L2 sensitivity", Real())
    sensitivity: float = param("L2 " + _SENSITIVITY_DOC, Real(), default=1.0)
    neighbouring: str = param(_RELATION_DOC, Choice(NEIGHBOURING_RELATIONS), default="add_remove")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Laplace(Mechanism):
    """Laplace mechanism: query + Lap(scale); pure (sensitivity/scale)-DP."""

    kind: ClassVar[str] = "laplace"
    scale: float = param("Laplace noise scale b (absolute, not in units of the sensitivity)", Real())
    sensitivity: float = param("L1 " + _SENSITIVITY_DOC, Real(), default=1.0)
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
        Real(),
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
    noise_multiplier: float = param("noise standard deviation in units of the clipping norm", Real())
    sampling_rate: float = _poisson_sampling_rate()
    steps: int = param("number of composed steps", BoundedCount())
    sensitivity: float = param("clipping norm (L2 sensitivity of one record's contribution)", Real(), default=1.0)
    neighbouring: str = _poisson_neighbouring()


@dataclasses.dataclass(frozen=True, kw_only=True)
class DiscreteGaussian(Mechanism):
    """Discrete Gaussian mechanism on the integers (Canonne, Kamath, Steinke 2020), integer sensitivity."""

    kind: ClassVar[str] = "discrete_gaussian"
    sigma: float = param("scale parameter of the discrete Gaussian on the integers", Real())
    sensitivity: int = param("integer L1 / L2 " + _SENSITIVITY_DOC, BoundedCount(), default=1)
    neighbouring: str = param(_RELATION_DOC, Choice(NEIGHBOURING_RELATIONS), default="add_remove")


class OpenProbability(Constraint):
    """A real number in (0, 1) (randomized response's noise parameter)."""

    type = float

    def check(self, name: str, value: Any) -> float:
        return check_probability(name, value, high_open=True)

    def describe(self) -> str:
        return "real in (0, 1)"


class NonNegative(Constraint):
    """A finite real number >= 0."""

    type = float

    def check(self, name: str, value: Any) -> float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        try:
            out = float(value) if ok else math.nan
        except OverflowError:  # an int beyond the float range
            out = math.inf
        if not 0 <= out <= MAX_REAL:
            raise ValueError(f"{name} must be a real in [0, {MAX_REAL:g}], got {bounded_repr(value)}")
        return out

    def describe(self) -> str:
        return f"real in [0, {MAX_REAL:g}]"


class FloatList(Constraint):
    """A non-empty list of finite reals, stored as canonical comma-separated text ("0.0,1.0") so that the kind stays
    flat (one scalar column per parameter in the lake, one ``--flag`` in the CLI). Lists and tuples are accepted and
    normalised; ``positive`` / ``probabilities`` restrict the values (probabilities must also sum to 1)."""

    type = str

    def __init__(self, *, kind: str = "real >= 0") -> None:
        self.kind = kind

    def check(self, name: str, value: Any) -> str:
        if isinstance(value, str):
            parts: list[Any] = [p.strip() for p in value.split(",")]
            try:
                nums = [float(p) for p in parts]
            except ValueError:
                raise ValueError(f"{name} must be a comma-separated list of numbers, got {value!r}") from None
        elif isinstance(value, list | tuple) and value:
            nums = []
            for v in value:
                if isinstance(v, bool) or not isinstance(v, int | float):
                    raise ValueError(f"{name} must be a list of numbers, got {value!r}")
                nums.append(float(v))
        else:
            raise ValueError(f"{name} must be a non-empty list of numbers, got {value!r}")
        if not nums or any(not (0 <= x <= MAX_REAL) for x in nums):
            raise ValueError(f"{name} must hold reals in [0, {MAX_REAL:g}], got {bounded_repr(value)}")
        if self.kind == "probabilities":
            if any(x > 1 for x in nums) or abs(sum(nums) - 1.0) > 1e-9:
                raise ValueError(f"{name} must be probabilities summing to 1, got {value!r}")
        return ",".join(repr(x) for x in nums)

    def describe(self) -> str:
        if self.kind == "probabilities":
            return "comma-separated probabilities summing to 1"
        return "comma-separated reals >= 0"


def float_list(text: str) -> tuple[float, ...]:
    """The numbers of a :class:`FloatList` parameter."""
    return tuple(float(x) for x in text.split(","))


_RECORD_BOUND_DOC = (
    "noise standard deviation in units of one record's norm bound C (the clipping norm; dp_accounting's "
    "noise_multiplier)"
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DiscreteLaplace(Mechanism):
    """Discrete Laplace mechanism on the integers: P(z) proportional to exp(-a |z|); pure (a * sensitivity)-DP.

    dp_accounting's ``DiscreteLaplaceDpEvent(noise_parameter=a, sensitivity)``; add/remove only (its accountants
    refuse replace-one for this event).
    """

    kind: ClassVar[str] = "discrete_laplace"
    noise_parameter: float = param("parameter a of the discrete Laplace noise, P(z) ~ exp(-a |z|)", Real())
    sensitivity: int = param("integer L1 sensitivity of the released integer query", BoundedCount(), default=1)
    neighbouring: str = param(
        _RELATION_DOC + " (dp_accounting accounts for this event under add_remove only)",
        Choice(("add_remove",)),
        default="add_remove",
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class SubsampledLaplace(Mechanism):
    """``steps`` compositions of a Poisson-subsampled Laplace mechanism (add/remove): each record is included with
    probability ``sampling_rate`` and the L1-clipped sum is released with Lap(scale) noise per coordinate."""

    kind: ClassVar[str] = "subsampled_laplace"
    scale: float = param("Laplace noise scale b (absolute, not in units of the sensitivity)", Real())
    sampling_rate: float = _poisson_sampling_rate()
    steps: int = param("number of composed steps", BoundedCount(), default=1)
    sensitivity: float = param("L1 norm bound of one record's contribution", Real(), default=1.0)
    neighbouring: str = _poisson_neighbouring()


@dataclasses.dataclass(frozen=True, kw_only=True)
class SubsampledDiscreteLaplace(Mechanism):
    """``steps`` compositions of a Poisson-subsampled discrete Laplace mechanism (add/remove)."""

    kind: ClassVar[str] = "subsampled_discrete_laplace"
    noise_parameter: float = param("parameter a of the discrete Laplace noise, P(z) ~ exp(-a |z|)", Real())
    sampling_rate: float = _poisson_sampling_rate()
    steps: int = param("number of composed steps", BoundedCount(), default=1)
    sensitivity: int = param("integer L1 norm bound of one record's contribution", BoundedCount(), default=1)
    neighbouring: str = _poisson_neighbouring()


def _replace_one_only():
    return param(_RELATION_DOC + " (replace_one only)", Choice(("replace_one",)), default="replace_one")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReplaceOneSubsampledLaplace(Mechanism):
    """``steps`` compositions of a Poisson-subsampled Laplace mechanism under replace-one: each record is included
    with probability ``sampling_rate`` q; the replaced record's contribution (L1 norm at most ``sensitivity`` D) moves
    from +D to -D, so one step releases (1-q) Lap(0, b) + q Lap(-D, b) against (1-q) Lap(0, b) + q Lap(D, b)
    (dp_accounting's REPLACE adjacency with sub-sampling, privacy_loss_mechanism.AdditiveNoisePrivacyLoss; its
    ``PoissonSampledDpEvent(q, LaplaceDpEvent(b / D))`` under REPLACE_ONE)."""

    kind: ClassVar[str] = "replace_one_subsampled_laplace"
    scale: float = param("Laplace noise scale b (absolute, not in units of the sensitivity)", Real())
    sampling_rate: float = _poisson_sampling_rate()
    steps: int = param("number of composed steps", BoundedCount(), default=1)
    sensitivity: float = param("L1 norm bound of one record's contribution", Real(), default=1.0)
    neighbouring: str = _replace_one_only()


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReplaceOneSubsampledDiscreteLaplace(Mechanism):
    """``steps`` compositions of a Poisson-subsampled discrete Laplace mechanism under replace-one: one step releases
    (1-q) DLap(0, a) + q DLap(-D, a) against (1-q) DLap(0, a) + q DLap(D, a) on the integers, D = ``sensitivity``
    (the pair of :class:`ReplaceOneSubsampledLaplace` with discrete Laplace noise)."""

    kind: ClassVar[str] = "replace_one_subsampled_discrete_laplace"
    noise_parameter: float = param("parameter a of the discrete Laplace noise, P(z) ~ exp(-a |z|)", Real())
    sampling_rate: float = _poisson_sampling_rate()
    steps: int = param("number of composed steps", BoundedCount(), default=1)
    sensitivity: int = param("integer L1 norm bound of one record's contribution", BoundedCount(), default=1)
    neighbouring: str = _replace_one_only()


@dataclasses.dataclass(frozen=True, kw_only=True)
class KaryRandomizedResponse(Mechanism):
    """k-ary randomized response (dp_accounting's ``RandomizedResponseDpEvent``): with probability
    1 - ``noise_parameter`` report the true category, otherwise a uniformly random one of the ``num_buckets``.

    Pure eps = log(1 + k (1 - p) / p) (ratio of the largest to the smallest output probability). Replace-one only
    (one respondent's category is replaced by another). With ``sampling_rate`` q < 1 each respondent takes part
    with probability q and a non-participant's output is uniformly random: the output law is then randomized response
    with noise parameter 1 - q (1 - p) exactly (the mixture q R(x) + (1 - q) U), i.e. Poisson subsampling amplifies
    randomized response in closed form.
    """

    kind: ClassVar[str] = "kary_randomized_response"
    noise_parameter: float = param(
        "probability p of replacing the true category by a uniformly random one", OpenProbability()
    )
    num_buckets: int = param("number of categories k", BoundedCount(minimum=2), lake_column="rr_num_buckets")
    sampling_rate: float = param(
        "probability that a respondent takes part (one who does not outputs a uniformly random category)",
        Probability(),
        default=1.0,
    )
    neighbouring: str = param(
        _RELATION_DOC + " (one respondent's category)", Choice(("replace_one",)), default="replace_one"
    )

    @property
    def effective_noise_parameter(self) -> float:
        """p' = 1 - q (1 - p): the noise parameter of the same output law without subsampling."""
        # As q p + (1 - q): both terms >= 0, so a tiny p at q = 1 is kept (1 - (1 - 1e-300) would round to 0).
        return self.sampling_rate * self.noise_parameter + (1.0 - self.sampling_rate)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SampledWithoutReplacementGaussian(Mechanism):
    """DP-SGD with fixed-size batches: each of ``steps`` steps draws ``batch_size`` distinct records uniformly from
    ``dataset_size`` and releases the sum of their clipped contributions plus N(0, (noise_multiplier * C)^2).

    Replace-one adjacency only (the dataset size is public). With q = batch_size / dataset_size the replaced record is
    in a batch with probability q and moves the sum by up to 2C: the privacy-loss pair is
    (1 - q) N(0, s^2) + q N(-C, s^2) vs (1 - q) N(0, s^2) + q N(C, s^2), the pair of dp_accounting's replace-one
    subsampled Gaussian and of the Fourier accountant's substitution relation (Koskela, Jaelkoe, Honkela 2020).
    """

    kind: ClassVar[str] = "sampled_without_replacement_gaussian"
    noise_multiplier: float = param(_RECORD_BOUND_DOC, Real())
    dataset_size: int = param("number of records the batches are drawn from (public)", BoundedCount(minimum=2))
    batch_size: int = param("records per batch (fixed; 0 releases noise only)", BoundedCount(minimum=0))
    steps: int = param("number of composed steps", BoundedCount(), default=1)
    sensitivity: float = param("clipping norm C (one record's L2 norm bound)", Real(), default=1.0)
    neighbouring: str = param(
        _RELATION_DOC + " (fixed-size batches: replace_one only)", Choice(("replace_one",)), default="replace_one"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.batch_size > self.dataset_size:
            raise ValueError(f"batch_size must be <= dataset_size = {self.dataset_size}, got {self.batch_size!r}")

    @property
    def sampling_rate(self) -> float:
        return self.batch_size / self.dataset_size


@dataclasses.dataclass(frozen=True, kw_only=True)
class MixtureOfGaussians(Mechanism):
    """``steps`` compositions of a mixture-of-Gaussians mechanism (dp_accounting's ``MixtureOfGaussiansDpEvent``;
    Choquette-Choo et al. 2023, arXiv:2310.15526): on D the output is N(0, s^2), on a neighbour D' it is
    sum_i p_i N(c_i, s^2). DP-MF / BandMF amplification and user-level Poisson sampling (a user's record count in a
    batch is binomial) are of this form. Under replace-one the record's contribution moves from +c to -c: the pair is
    sum_i p_i N(-c_i, s^2) vs sum_i p_i N(c_i, s^2); sensitivities (0, 1) with probabilities (1 - q, q) is
    dp_accounting's replace-one Poisson-subsampled Gaussian."""

    kind: ClassVar[str] = "mixture_of_gaussians"
    standard_deviation: float = param(
        "standard deviation s of the Gaussian noise, in units of one record's norm bound", Real()
    )
    sensitivities: str = param("the sensitivities c_i (comma separated, >= 0)", FloatList())
    probabilities: str = param(
        "the probabilities p_i of the sensitivities (comma separated, summing to 1)",
        FloatList(kind="probabilities"),
        lake_column="mixture_probabilities",
    )
    steps: int = param("number of composed steps", BoundedCount(), default=1)
    neighbouring: str = param(_RELATION_DOC, Choice(NEIGHBOURING_RELATIONS), default="add_remove")

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(float_list(self.sensitivities)) != len(float_list(self.probabilities)):
            raise ValueError(
                f"sensitivities and probabilities must have the same length, got {self.sensitivities!r} and "
                f"{self.probabilities!r}"
            )
        if max(float_list(self.sensitivities)) == 0.0:
            raise ValueError(f"sensitivities must not all be 0, got {self.sensitivities!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TreeAggregation(Mechanism):
    """Single-epoch tree aggregation (DP-FTRL; Kairouz et al. 2021, arXiv:2103.00039 App. D): prefix sums of
    ``steps`` leaves released through a binary tree with N(0, (noise_multiplier * C)^2) noise on every node; each
    record is in one leaf, so it moves the h = ceil(log2(steps + 1)) nodes on its path by at most C each. The release
    is exactly a Gaussian mechanism with mu = sqrt(h) / noise_multiplier (as dp_accounting's RDP accountant counts
    it). The relation is add/remove in the sense of dp_accounting's REPLACE_SPECIAL: a record's contribution is
    replaced by zero."""

    kind: ClassVar[str] = "tree_aggregation"
    noise_multiplier: float = param("noise standard deviation per node in units of the clipping norm C", Real())
    steps: int = param("number of leaves (steps) of the tree; several trees: the largest", BoundedCount())
    neighbouring: str = param(
        _RELATION_DOC + " (a record's contribution replaced by zero: dp_accounting's REPLACE_SPECIAL)",
        Choice(("add_remove",)),
        default="add_remove",
    )

    @property
    def depth(self) -> int:
        """Nodes on a leaf's path, ceil(log2(steps + 1)) (dp_accounting's ``max_depth``)."""
        return int(math.ceil(math.log2(self.steps + 1)))


@dataclasses.dataclass(frozen=True, kw_only=True)
class TruncatedSubsampledGaussian(Mechanism):
    """``steps`` compositions of a Gaussian mechanism on a Poisson sample truncated to at most
    ``truncated_batch_size`` records (dp_accounting's ``TruncatedSubsampledGaussianDpEvent``, arXiv:2508.15089).

    dp_accounting's PLD for it is an upper bound (its sensitivity-2 branch is accounted under replace-one, "a slightly
    loose upper bound") and has no optimistic construction: reports give upper ends only (lower ends unavailable).
    """

    kind: ClassVar[str] = "truncated_subsampled_gaussian"
    noise_multiplier: float = param(_RECORD_BOUND_DOC, Real())
    sampling_rate: float = _poisson_sampling_rate()
    dataset_size: int = param("number of records sampled from", BoundedCount())
    truncated_batch_size: int = param("largest batch kept (larger samples are truncated at random)", BoundedCount())
    steps: int = param("number of composed steps", BoundedCount(), default=1)
    neighbouring: str = param(_RELATION_DOC, Choice(NEIGHBOURING_RELATIONS), default="add_remove")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ZCDP(Mechanism):
    """A (xi, rho)-zCDP *statement* (dp_accounting's ``ZCDpEvent``; Bun & Steinke 2016): RDP eps(alpha) <=
    xi + rho * alpha for every alpha > 1. It is not one mechanism: its curve is the best upper bound the statement
    implies, so every report of it gives upper ends only; lower ends are unavailable (NaN), never a lower bound."""

    kind: ClassVar[str] = "zcdp"
    rho: float = param("zCDP parameter rho (RDP slope)", Real())
    xi: float = param("additive constant xi of the RDP bound (0 for rho-zCDP)", NonNegative(), default=0.0)
    neighbouring: str = param(
        _RELATION_DOC + " the statement was made for", Choice(NEIGHBOURING_RELATIONS), default="add_remove"
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Composed(Mechanism):
    """Sequential composition of heterogeneous mechanisms sharing one neighbouring relation."""

    kind: ClassVar[str] = "composed"
    mechanisms: tuple[Mechanism, ...] = _nested(True, "the mechanisms run in sequence")

    def __post_init__(self) -> None:
        mechs = self.mechanisms
        if isinstance(mechs, (str, bytes, Mapping)) or not isinstance(mechs, Sequence):
            raise ValueError(f"mechanisms must be a list of mechanisms, got {bounded_repr(mechs)}")
        mechs = tuple(mechs)
        if not mechs:
            raise ValueError("mechanisms must not be empty, got []")
        for i, m in enumerate(mechs):
            if not isinstance(m, Mechanism):
                raise ValueError(f"mechanisms[{i}] must be a mechanism, got {bounded_repr(m)}")
        relations = {m.neighbouring_relation for m in mechs}
        if len(relations) > 1:
            raise ValueError(
                f"mechanisms must share one neighbouring relation, got {sorted(relations)!r}: composing guarantees "
                "stated for different adjacency notions has no meaning"
            )
        object.__setattr__(self, "mechanisms", mechs)
        _check_nesting(self, mechs)

    @property
    def neighbouring_relation(self) -> str:
        return self.mechanisms[0].neighbouring_relation


@dataclasses.dataclass(frozen=True, kw_only=True)
class SelfComposed(Mechanism):
    """``count`` sequential runs of the same mechanism."""

    kind: ClassVar[str] = "self_composed"
    mechanism: Mechanism = _nested(False, "the mechanism run repeatedly")
    count: int = param("number of runs", BoundedCount())

    def __post_init__(self) -> None:
        if not isinstance(self.mechanism, Mechanism):
            raise ValueError(f"mechanism must be a mechanism, got {bounded_repr(self.mechanism)}")
        super().__post_init__()
        _check_nesting(self, [self.mechanism])

    @property
    def neighbouring_relation(self) -> str:
        return self.mechanism.neighbouring_relation


def mechanism_from_dict(data: Mapping[str, Any], *, _path: str = "mechanism", _depth: int = 0) -> Mechanism:
    """Inverse of :meth:`Mechanism.to_dict`. Unknown kinds and fields raise ``ValueError`` naming the path.

    Kinds are looked up by the ``kind`` every :class:`Mechanism` subclass declares, so every kind round-trips.
    """
    if not isinstance(data, Mapping):
        raise ValueError(f"{_path} must be a mapping with a 'kind' key, got {bounded_repr(data)}")
    if _depth > MAX_NESTING:
        raise ValueError(f"mechanism is nested more than {MAX_NESTING} levels deep: refused")
    kind = data.get("kind")
    if not (isinstance(kind, str) and kind in _CLASSES):
        raise ValueError(
            f"{_path}.kind must be one of {', '.join(map(repr, sorted(_CLASSES)))}, got {bounded_repr(kind)}"
        )
    cls = _CLASSES[kind]
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
                raise ValueError(f"{_path}.{name} must be a list, got {bounded_repr(value)}")
            value = tuple(
                mechanism_from_dict(v, _path=f"{_path}.{name}[{i}]", _depth=_depth + 1) for i, v in enumerate(value)
            )
        elif nested.get(name) == "one":
            value = mechanism_from_dict(value, _path=f"{_path}.{name}", _depth=_depth + 1)
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required field is missing
        raise ParameterError(_path, kind, None, str(exc)) from None
    except ValueError as exc:
        # Every check of a field value (the constraints of param() and the kinds' own __post_init__) starts its
        # message with the name of the field it blames.
        reason = str(exc)
        first = reason.split(" ", 1)[0]
        raise ParameterError(_path, kind, first if first in field_names else None, reason) from None
