"""The mechanism-kind registry: what gdp-audit knows about each kind, declared once per kind.

A mechanism *kind* (``"gaussian"``, ``"subsampled_gaussian"``, ...) is a :class:`gdpcore.mechanisms.Mechanism`
subclass (its parameters, declared with :func:`gdpcore.mechanisms.param`, give the spec schema, the lake's parameter
columns and the CLI help) plus one :class:`KindSpec` here with its *hooks*:

=============================  =======================================================================================
hook                           what it returns for one mechanism of the kind
=============================  =======================================================================================
``pld``                        dp_accounting ``PrivacyLossDistribution`` (``step``, ``pessimistic``); every producer of
                               curves (``analyze``, ``analyze_grid``, divergences, Bayes security) needs it
``pure_epsilon``               exact pure-DP epsilon (``inf`` when the kind is not pure DP)
``rdp``                        (RDP curve at the orders, label ``"exact"`` or ``"upper"``)
``rho``                        (zCDP rho* = sup_t eps(t)/t, label, where the sup is attained: "one" / "inf" / "any")
``draw``                       a random representative instance (``numpy`` Generator): the contract test's sampler
``to_dp_event``                the dp_accounting ``DpEvent`` (named-accountant reproduction, RDP fallback)
``from_dp_event``              (event, neighbouring) -> the kind's mechanism if ``event`` describes one, else None: the
                               inverse of ``to_dp_event`` (:func:`mechanism_from_dp_event`), sensitivity 1
``exact_mu``                   the exact mu-GDP parameter, or None when this instance has no closed form
``clt_mu_squared``             the central-limit mu^2 (Bu et al. 2020; an estimate)
``gdp_upper_bound``            an analytic (mu, label) with the mechanism mu-GDP
``subsampled_gaussian_phases`` {(noise multiplier, q): steps} when the instance is a Poisson-subsampled Gaussian with
                               q < 1, else None
=============================  =======================================================================================

Every hook is either a callable or :class:`Unsupported` with a reason; :data:`REQUIRED_HOOKS` must be callables.
:func:`check_kind` lists what a declaration lacks and :func:`register` refuses an incomplete one. ``Composed`` and
``SelfComposed`` are handled generically: each property knows how to repeat and combine values
(:data:`PROPERTIES`), and :func:`evaluate` walks the mechanism tree once (dp_accounting's ``_maybe_compose``). A leaf
whose hook is unsupported raises :class:`UnsupportedMechanismError` (a ``ValueError``) instead of a wrong number;
:func:`supports` is the dry run of that walk (dp_accounting's ``PrivacyAccountant.supports``).

Adding a kind takes two edits: a frozen, keyword-only :class:`~gdpcore.mechanisms.Mechanism` subclass whose fields are
declared with :func:`~gdpcore.mechanisms.param` (validation, JSON round trip, content hash, spec schema, lake columns
and CLI help follow), and one ``register(KindSpec(...))`` below. ``tests/test_contract.py`` then runs instances from its
``draw`` hook through every producer and checks every invariant; a missing hook fails :func:`check_kind` first.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

import dp_accounting
import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld import privacy_loss_mechanism
from scipy import special

from gdpcore import closed_form
from gdpcore.mechanisms import (
    ZCDP,
    Composed,
    DiscreteGaussian,
    DiscreteLaplace,
    Gaussian,
    KaryRandomizedResponse,
    Laplace,
    Mechanism,
    MixtureOfGaussians,
    Param,
    RandomizedResponse,
    SampledWithoutReplacementGaussian,
    SelfComposed,
    SubsampledDiscreteLaplace,
    SubsampledGaussian,
    SubsampledLaplace,
    TreeAggregation,
    TruncatedSubsampledGaussian,
    float_list,
    nested_fields,
    parameters,
)

__all__ = [
    "HOOKS",
    "OPTIONAL_HOOKS",
    "PRODUCERS",
    "PROPERTIES",
    "REQUIRED_HOOKS",
    "KindContractError",
    "KindSpec",
    "Unsupported",
    "UnsupportedMechanismError",
    "check_kind",
    "clt_mu",
    "clt_mu_subsampled_gaussian",
    "evaluate",
    "exact_mu",
    "flat_kinds",
    "draw",
    "get",
    "help_text",
    "kind_names",
    "lake_columns",
    "leaf_kinds",
    "mechanism_from_dp_event",
    "param_columns",
    "pld",
    "register",
    "single_steps",
    "solve_clt_subsampled_gaussian",
    "subsampled_gaussian_phases",
    "supports",
    "to_dp_event",
    "unregister",
]


class UnsupportedMechanismError(ValueError):
    """A producer or property was asked of a mechanism kind that declares it unsupported (never a wrong number)."""


class KindContractError(ValueError):
    """A kind declaration lacks what the producers need (see :func:`check_kind`)."""


@dataclasses.dataclass(frozen=True)
class Unsupported:
    """A hook declared unsupported, with the reason shown in :class:`UnsupportedMechanismError`."""

    reason: str


class _Missing:
    """Default of every hook: a hook left undeclared (neither a callable nor :class:`Unsupported`)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()

Hook = Callable[..., Any] | Unsupported

REQUIRED_HOOKS: tuple[str, ...] = ("draw", "pld", "pure_epsilon", "rdp", "rho")
"""Hooks every leaf kind must implement: the PLD is what every curve producer consumes, the pure-eps / RDP / rho
parameters what every representation regret needs, ``draw`` what the contract test runs."""
OPTIONAL_HOOKS: tuple[str, ...] = (
    "to_dp_event",
    "from_dp_event",
    "exact_mu",
    "clt_mu_squared",
    "gdp_upper_bound",
    "subsampled_gaussian_phases",
)
"""Hooks a kind must *declare* but may declare :class:`Unsupported` (with a reason)."""
HOOKS: tuple[str, ...] = REQUIRED_HOOKS + OPTIONAL_HOOKS


@dataclasses.dataclass(frozen=True, kw_only=True)
class KindSpec:
    """Everything the project needs to know about one mechanism kind (see the module docstring for the hooks)."""

    cls: type[Mechanism]
    summary: str
    composite: bool = False  # Composed / SelfComposed: walked generically, no hooks of their own
    draw: Hook = MISSING
    pld: Hook = MISSING
    pure_epsilon: Hook = MISSING
    rdp: Hook = MISSING
    rho: Hook = MISSING
    to_dp_event: Hook = MISSING
    exact_mu: Hook = MISSING
    clt_mu_squared: Hook = MISSING
    gdp_upper_bound: Hook = MISSING
    subsampled_gaussian_phases: Hook = MISSING
    from_dp_event: Hook = MISSING
    steps_param: str | None = None
    """The integer parameter that counts independent sequential runs of one step (``"steps"``), if the kind has one:
    the instance with it set to 1 is one step, and its ``pld`` hook the single step's PLD. The engine composes the
    steps itself (:func:`single_steps`), with a round-off bound; None for one-shot kinds."""

    @property
    def name(self) -> str:
        return self.cls.kind

    @property
    def params(self) -> tuple[Param, ...]:
        """The kind's scalar parameters (declared on its class; nested mechanisms excluded)."""
        return parameters(self.cls)

    @property
    def flat(self) -> bool:
        """Every field a scalar parameter (no nested mechanisms): the kind can be swept on a grid."""
        return not nested_fields(self.cls)

    def hook(self, name: str) -> Hook:
        if name not in HOOKS:
            raise ValueError(f"hook must be one of {', '.join(HOOKS)}, got {name!r}")
        return getattr(self, name)


# ---------------------------------------------------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------------------------------------------------
_REGISTRY: dict[str, KindSpec] = {}


def check_kind(spec: KindSpec) -> list[str]:
    """What ``spec`` lacks for the producers, one sentence each (empty: complete)."""
    problems: list[str] = []
    if not (isinstance(spec.cls, type) and issubclass(spec.cls, Mechanism)):
        return [f"cls must be a Mechanism subclass, got {spec.cls!r}"]
    name = spec.cls.kind
    if not (isinstance(name, str) and name):
        problems.append(f"{spec.cls.__name__}.kind must be a non-empty string, got {name!r}")
    if not dataclasses.is_dataclass(spec.cls):
        problems.append(f"{spec.cls.__name__} must be a frozen keyword-only dataclass")
        return problems
    declared = {p.name for p in parameters(spec.cls)} | set(nested_fields(spec.cls))
    for f in dataclasses.fields(spec.cls):
        if f.name not in declared:
            problems.append(f"{name}: field {f.name!r} is not declared with gdpcore.mechanisms.param()")
    if spec.composite:
        if spec.flat:
            problems.append(f"{name}: a composite kind must hold nested mechanisms")
        if not callable(spec.draw) or isinstance(spec.draw, Unsupported):
            problems.append(f"{name}: hook 'draw' is not declared (the contract test draws every kind)")
        return problems
    if not spec.flat:
        problems.append(f"{name}: a leaf kind must not hold nested mechanisms (register it as composite)")
    if spec.steps_param is not None and spec.steps_param not in {p.name for p in parameters(spec.cls) if p.type is int}:
        problems.append(f"{name}: steps_param {spec.steps_param!r} is not an integer parameter of {spec.cls.__name__}")
    if "neighbouring" not in {p.name for p in parameters(spec.cls)}:
        problems.append(f"{name}: a leaf kind must declare its 'neighbouring' relation parameter")
    for hook in HOOKS:
        value = getattr(spec, hook)
        if value is MISSING:
            problems.append(f"{name}: hook {hook!r} is not declared (give a callable or Unsupported(reason))")
        elif isinstance(value, Unsupported):
            if hook in REQUIRED_HOOKS:
                problems.append(f"{name}: hook {hook!r} is required by every producer and cannot be unsupported")
            elif not value.reason:
                problems.append(f"{name}: Unsupported({hook!r}) needs a reason")
        elif not callable(value):
            problems.append(f"{name}: hook {hook!r} must be callable or Unsupported, got {value!r}")
    return problems


def register(spec: KindSpec, *, replace: bool = False) -> KindSpec:
    """Add ``spec`` to the registry; :class:`KindContractError` listing every gap if it is incomplete."""
    problems = check_kind(spec)
    if problems:
        raise KindContractError("incomplete mechanism kind: " + "; ".join(problems))
    if spec.name in _REGISTRY and not replace and _REGISTRY[spec.name] is not spec:
        raise KindContractError(f"mechanism kind {spec.name!r} is already registered")
    _REGISTRY[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    """Remove a kind (tests register throw-away kinds)."""
    _REGISTRY.pop(name, None)


def get(kind: str | Mechanism) -> KindSpec:
    """The :class:`KindSpec` of a kind name or of a mechanism's kind."""
    name = kind.kind if isinstance(kind, Mechanism) else kind
    spec = _REGISTRY.get(name) if isinstance(name, str) else None
    if spec is None:
        raise ValueError(f"mechanism kind must be one of {', '.join(map(repr, _REGISTRY))}, got {name!r}")
    return spec


def kind_names() -> tuple[str, ...]:
    """Every registered kind, in registration order."""
    return tuple(_REGISTRY)


def leaf_kinds() -> tuple[str, ...]:
    """Registered kinds with hooks of their own (not Composed / SelfComposed)."""
    return tuple(n for n, s in _REGISTRY.items() if not s.composite)


def flat_kinds() -> tuple[str, ...]:
    """Kinds whose parameters are all scalars: those a grid spec can sweep."""
    return tuple(n for n, s in _REGISTRY.items() if s.flat)


def lake_columns(kind: str) -> dict[str, str]:
    """{parameter name: lake column name} of a flat kind."""
    return {p.name: p.lake_column for p in get(kind).params}


def param_columns() -> dict[str, type]:
    """The lake's typed parameter columns: {column: float | int | str} over every flat kind, first-seen order; a
    column declared int by one kind and float by another is float."""
    out: dict[str, type] = {}
    for name in flat_kinds():
        for p in get(name).params:
            prev = out.get(p.lake_column)
            if prev is None:
                out[p.lake_column] = p.type
            elif prev is not p.type:
                if {prev, p.type} == {int, float}:
                    out[p.lake_column] = float
                else:
                    raise KindContractError(
                        f"lake column {p.lake_column!r} is declared {prev.__name__} and {p.type.__name__}; give one "
                        "of them another lake_column"
                    )
    return out


def help_text() -> str:
    """Every flat kind with its parameters, for ``gdp analyze --help``."""
    lines = ["mechanism kinds (parameters as --name value; composed kinds via --spec):"]
    for name in flat_kinds():
        spec = get(name)
        lines.append(f"  {name}: {spec.summary}")
        for p in spec.params:
            default = "required" if p.required else f"default {p.default!r}"
            lines.append(f"      --{p.name.replace('_', '-')}  {p.constraint.describe()}; {default}: {p.doc}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------------
# Properties: how each one repeats (SelfComposed) and combines (Composed); one generic walk
# ---------------------------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _Property:
    description: str  # for error messages
    repeat: Callable[[Any, int], Any]
    combine: Callable[[list[Any]], Any]
    wrap: Callable[[Any], Any] | None = None  # leaf value -> property value (default: as is)


def _none_or(fn: Callable[..., Any]) -> Callable[..., Any]:
    def inner(v: Any, *args: Any) -> Any:
        return None if v is None else fn(v, *args)

    return inner


def _merge_phases(parts: list[dict[tuple[float, float], int] | None]) -> dict[tuple[float, float], int] | None:
    if any(p is None for p in parts):
        return None
    out: dict[tuple[float, float], int] = {}
    for p in parts:
        for k, v in p.items():  # type: ignore[union-attr]
            out[k] = out.get(k, 0) + v
    return out


def _combine_rdp(parts: list[tuple[np.ndarray, str]]) -> tuple[np.ndarray, str]:
    label = "exact" if all(lab == "exact" for _, lab in parts) else "upper"
    return np.sum([v for v, _ in parts], axis=0), label


PROPERTIES: dict[str, _Property] = {
    "pld": _Property(
        "the privacy loss distribution",
        repeat=lambda p, n: p.self_compose(n) if n > 1 else p,
        combine=lambda ps: functools.reduce(lambda a, b: a.compose(b), ps),
    ),
    "pure_epsilon": _Property("the pure-DP epsilon", repeat=lambda e, n: n * e, combine=lambda es: float(sum(es))),
    "rdp": _Property("the RDP curve", repeat=lambda v, n: (n * v[0], v[1]), combine=_combine_rdp),
    "rho": _Property(
        "the zCDP parameter rho",
        repeat=lambda parts, n: [(n * r, lab, lim) for r, lab, lim in parts],
        combine=lambda ps: [p for parts in ps for p in parts],
        wrap=lambda part: [part],
    ),
    "to_dp_event": _Property(
        "a dp_accounting DpEvent",
        repeat=lambda e, n: dp_accounting.SelfComposedDpEvent(e, n),
        combine=lambda es: dp_accounting.ComposedDpEvent(list(es)),
    ),
    "exact_mu": _Property(
        "an exact mu-GDP closed form",
        repeat=_none_or(lambda mu, n: mu * n**0.5),
        combine=lambda mus: None if any(m is None for m in mus) else float(sum(m * m for m in mus) ** 0.5),
    ),
    "clt_mu_squared": _Property("the central-limit (CLT) mu", repeat=lambda x, n: n * x, combine=math.fsum),
    "gdp_upper_bound": _Property(
        "an analytic GDP bound",
        repeat=lambda v, n: (v[0] * math.sqrt(n), "upper"),
        combine=lambda vs: (math.sqrt(sum(mu**2 for mu, _ in vs)), "upper"),
    ),
    "subsampled_gaussian_phases": _Property(
        "a Poisson-subsampled Gaussian decomposition",
        repeat=_none_or(lambda d, n: {k: v * n for k, v in d.items()}),
        combine=_merge_phases,
    ),
}
assert set(PROPERTIES) == set(HOOKS) - {"draw", "from_dp_event"}

PRODUCERS: dict[str, tuple[str, ...]] = {
    "analyze": ("pld",),
    "analyze_grid": ("pld",),
    "divergence": ("pld",),
    "bayes_security": ("pld",),
    "regret.pure_dp": ("pld", "pure_epsilon"),
    "regret.epsilon_delta": ("pld",),
    "regret.zcdp": ("pld", "rho"),
    "regret.rdp": ("pld", "rdp"),
    "regret.gdp": ("pld",),
    "claims.rdp": ("to_dp_event",),
    "claims.pld": ("pld",),
    "claims.clt": ("clt_mu_squared",),
    "gdpt.gdp_upper_bound": ("gdp_upper_bound",),
}
"""Public producers and the properties each needs (the "what" of :func:`supports` beside the property names)."""


def _children(mechanism: Mechanism) -> tuple[list[Mechanism], int] | None:
    if isinstance(mechanism, SelfComposed):
        return [mechanism.mechanism], mechanism.count
    if isinstance(mechanism, Composed):
        return list(mechanism.mechanisms), 1
    return None


def evaluate(mechanism: Mechanism, what: str, *args: Any, **kwargs: Any) -> Any:
    """The property ``what`` of ``mechanism``: leaf hooks combined over the composition tree, walked once.

    Raises :class:`UnsupportedMechanismError` naming the first leaf kind that declares ``what`` unsupported.
    """
    prop = PROPERTIES.get(what)
    if prop is None:
        raise ValueError(f"property must be one of {', '.join(PROPERTIES)}, got {what!r}")
    if not isinstance(mechanism, Mechanism):
        raise ValueError(f"mechanism must be a gdpcore mechanism, got {mechanism!r}")
    children = _children(mechanism)
    if children is not None:
        parts, count = children
        values = [evaluate(m, what, *args, **kwargs) for m in parts]
        if isinstance(mechanism, SelfComposed):
            return prop.repeat(values[0], count)
        return prop.combine(values)
    hook = get(mechanism).hook(what)
    if isinstance(hook, Unsupported):
        raise UnsupportedMechanismError(
            f"{prop.description} is not available for {type(mechanism).__name__} (kind {mechanism.kind!r}): "
            f"{hook.reason}"
        )
    if hook is MISSING:
        raise UnsupportedMechanismError(f"mechanism kind {mechanism.kind!r} does not declare {what!r}")
    value = hook(mechanism, *args, **kwargs)
    return value if prop.wrap is None else prop.wrap(value)


def _leaves(mechanism: Mechanism) -> list[Mechanism]:
    children = _children(mechanism)
    if children is None:
        return [mechanism]
    return [leaf for m in children[0] for leaf in _leaves(m)]


def supports(kind: str | Mechanism, what: str) -> bool:
    """Dry run: would ``what`` (a property name or a :data:`PRODUCERS` name) be answered for ``kind`` (a kind name,
    for which composite kinds count as supported, or a mechanism, whose every leaf must support it)?"""
    needs = PRODUCERS.get(what, (what,))
    for need in needs:
        if need not in PROPERTIES and need != "from_dp_event":
            raise ValueError(f"what must be one of {', '.join((*PROPERTIES, *PRODUCERS))}, got {what!r}")
    if isinstance(kind, Mechanism):
        leaves = [get(leaf) for leaf in _leaves(kind)]
    else:
        spec = get(kind)
        if spec.composite:
            return True
        leaves = [spec]
    return all(callable(s.hook(need)) and not isinstance(s.hook(need), Unsupported) for s in leaves for need in needs)


# -- public property functions ----------------------------------------------------------------------------------------
def pld(mechanism: Mechanism, *, step: float, pessimistic: bool) -> pld_lib.PrivacyLossDistribution:
    """The dp_accounting PLD (connect-the-dots if pessimistic, rounded-down privacy buckets otherwise)."""
    return evaluate(mechanism, "pld", step=step, pessimistic=pessimistic)


def single_steps(mechanism: Mechanism) -> list[tuple[Mechanism, int]]:
    """``mechanism`` as independent single steps with their repetition counts: [(one step, count), ...].

    The composition tree is flattened (composition is commutative: ``SelfComposed(Composed([A, B]), 3)`` is A and B
    three times each), a leaf with a ``steps_param`` becomes its one-step instance repeated that many times, and equal
    single steps are merged (their counts add), in order of first appearance. The engine composes these with
    :mod:`gdpcore.fast_pld` (FFT powers with a round-off bound) instead of dp_accounting's ``self_compose``.
    """
    counts: dict[str, int] = {}
    steps: dict[str, Mechanism] = {}

    def walk(m: Mechanism, times: int) -> None:
        children = _children(m)
        if children is not None:
            parts, count = children
            for part in parts:
                walk(part, times * count)
            return
        name = get(m).steps_param
        if name is not None:
            times *= int(getattr(m, name))
            m = dataclasses.replace(m, **{name: 1})
        key = m.content_hash
        steps.setdefault(key, m)
        counts[key] = counts.get(key, 0) + times

    if not isinstance(mechanism, Mechanism):
        raise ValueError(f"mechanism must be a gdpcore mechanism, got {mechanism!r}")
    walk(mechanism, 1)
    return [(steps[k], counts[k]) for k in steps]


def to_dp_event(mechanism: Mechanism) -> dp_accounting.DpEvent:
    """The dp_accounting ``DpEvent`` describing ``mechanism``."""
    return evaluate(mechanism, "to_dp_event")


def exact_mu(mechanism: Mechanism) -> float | None:
    """Exact mu-GDP parameter of ``mechanism``, or None when it has no closed form (any part without one)."""
    try:
        return evaluate(mechanism, "exact_mu")
    except UnsupportedMechanismError:
        return None


def clt_mu(mechanism: Mechanism) -> float:
    """Central-limit mu (Bu et al. 2020; Opacus ``GaussianAccountant``): mu^2 adds over parts; an estimate."""
    return math.sqrt(evaluate(mechanism, "clt_mu_squared"))


def subsampled_gaussian_phases(mechanism: Mechanism) -> dict[tuple[float, float], int] | None:
    """{(noise multiplier, q): total steps} when ``mechanism`` is a composition of Poisson-subsampled Gaussians with
    q < 1 only (any nesting of Composed / SelfComposed), else None."""
    try:
        return evaluate(mechanism, "subsampled_gaussian_phases")
    except UnsupportedMechanismError:
        return None


def clt_mu_subsampled_gaussian(*, noise_multiplier: float, sampling_rate: float, steps: int) -> float:
    """mu = q sqrt(T (e^{1/sigma^2} - 1)) (Bu et al. 2020, Dong et al. 2022 Cor. 5.4); exactly sqrt(T)/sigma at q = 1.

    The central-limit estimate, not a bound: it can understate the privacy loss of few, strongly subsampled steps.
    """
    if sampling_rate == 1.0:
        return math.sqrt(steps) / noise_multiplier
    return sampling_rate * math.sqrt(steps * math.expm1(1.0 / noise_multiplier**2))


def solve_clt_subsampled_gaussian(
    mu: float,
    *,
    noise_multiplier: float | None = None,
    sampling_rate: float | None = None,
    steps: float | None = None,
) -> float:
    """The one parameter left as None for which :func:`clt_mu_subsampled_gaussian` equals ``mu`` (real-valued:
    ``steps`` is not rounded, ``sampling_rate`` may exceed 1; the caller clamps). A starting point for calibration,
    never an answer: the CLT mu is an estimate."""
    given = {"noise_multiplier": noise_multiplier, "sampling_rate": sampling_rate, "steps": steps}
    missing = [k for k, v in given.items() if v is None]
    if len(missing) != 1:
        raise ValueError(f"exactly one of noise_multiplier, sampling_rate, steps must be None, got {missing!r}")
    if not (math.isfinite(mu) and mu > 0):
        raise ValueError(f"mu must be finite and > 0, got {mu!r}")
    if noise_multiplier is None:
        q, t = float(sampling_rate or 0.0), float(steps or 0.0)
        return math.sqrt(t) / mu if q == 1.0 else 1.0 / math.sqrt(math.log1p(mu**2 / (q * q * t)))
    sigma = float(noise_multiplier)
    growth = math.expm1(1.0 / sigma**2)
    if steps is None:
        q = float(sampling_rate or 0.0)
        return mu**2 / (q * q * growth) if q < 1.0 else (mu * sigma) ** 2
    return mu / math.sqrt(float(steps) * growth)


# ---------------------------------------------------------------------------------------------------------------------
# Leaf formulas
# ---------------------------------------------------------------------------------------------------------------------
def _rdp_laplace(eps0: float, t: np.ndarray) -> np.ndarray:
    # Mironov 2017 Prop. 6: (1/(t-1)) log(t/(2t-1) e^{(t-1) eps0} + (t-1)/(2t-1) e^{-t eps0}), written stably.
    c = np.expm1((1.0 - 2.0 * t) * eps0) / (2.0 * t - 1.0)
    return eps0 + np.log1p((t - 1.0) * c) / (t - 1.0)


def _rdp_randomized_response(eps: float, t: np.ndarray) -> np.ndarray:
    # D_t(Bern(p) || Bern(1-p)) with p = e^eps/(1+e^eps): (1/(t-1)) log(p^t q^{1-t} + q^t p^{1-t}).
    lp, lq = -np.logaddexp(0.0, -eps), -np.logaddexp(0.0, eps)
    return np.logaddexp(t * lp + (1 - t) * lq, t * lq + (1 - t) * lp) / (t - 1.0)


def _rdp_subsampled_gaussian(q: float, sigma: float, t: np.ndarray) -> np.ndarray:
    """eps_1(t) = (1/(t-1)) log E_{x~N(0,sigma^2)} [(1 - q + q e^{(2x-1)/(2 sigma^2)})^t] (seed 000 Sec. 2.3),
    by trapezoidal quadrature in log space on a grid covering both modes (x ~ 0 and x ~ t). The integrand is smooth
    and Gaussian-tailed, so the trapezoid rule with step sigma/64 is accurate to machine precision."""
    out = np.empty(t.size)
    for i, ti in enumerate(t):
        x_hi = max(0.0, ti) + 40.0 * sigma + 1.0
        x = np.arange(-40.0 * sigma, x_hi, sigma / 64.0)
        h = x[1] - x[0]
        log_phi = -0.5 * (x / sigma) ** 2 - math.log(sigma * math.sqrt(2.0 * math.pi))
        z = (2.0 * x - 1.0) / (2.0 * sigma**2)
        # Two branches evaluated everywhere by np.where: clip z so the unused one cannot overflow (z reaches ~1e3
        # at order 1024 with sigma ~ 1).
        log_ratio = np.log1p(q * np.expm1(np.minimum(z, 30.0)))
        log_ratio = np.where(z > 30, math.log(q) + z + np.log1p((1 - q) * np.exp(-np.minimum(z, 700)) / q), log_ratio)
        log_int = special.logsumexp(log_phi + ti * log_ratio) + math.log(h)
        out[i] = log_int / (ti - 1.0)
    return np.maximum(out, 0.0)


_RECORD_FACTOR = {"add_remove": 1.0, "replace_one": 2.0}
"""Sensitivity of a sum of records with norm bound 1 under each relation: a DpEvent's noise is relative to one
record's norm bound (dp_accounting's GaussianDpEvent / LaplaceDpEvent docstrings, and its PLD accountant, whose
REPLACE_ONE Gaussian compares N(1, s^2) with N(-1, s^2)); a replaced record can move the sum from +C to -C."""


def _record_bound_factor(m: Mechanism) -> float:
    """noise relative to the relation's sensitivity -> noise relative to one record's norm bound."""
    return _RECORD_FACTOR[m.neighbouring_relation]


def _rr_noise_parameter(epsilon: float) -> float:
    # Binary RR reporting the truth w.p. e^eps/(1+e^eps) is dp_accounting's RR with noise parameter 2/(1+e^eps).
    return 2.0 / (1.0 + math.exp(epsilon))


def _log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _relation(rng: np.random.Generator) -> str:
    return str(rng.choice(["add_remove", "replace_one"]))


_NOT_PURE = math.inf  # delta(eps) > 0 for every eps


def _sg_from_event(event: dp_accounting.DpEvent, neighbouring: str) -> SubsampledGaussian | None:
    steps = 1
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        event, steps = event.event, event.count
    if (
        neighbouring == "add_remove"
        and isinstance(event, dp_accounting.PoissonSampledDpEvent)
        and isinstance(event.event, dp_accounting.GaussianDpEvent)
    ):
        return SubsampledGaussian(
            noise_multiplier=event.event.noise_multiplier, sampling_rate=event.sampling_probability, steps=steps
        )
    return None


def _rr_from_event(event: dp_accounting.DpEvent, neighbouring: str) -> RandomizedResponse | None:
    if (
        neighbouring == "replace_one"
        and isinstance(event, dp_accounting.RandomizedResponseDpEvent)
        and event.num_buckets == 2
        and 0 < event.noise_parameter < 1
    ):
        return RandomizedResponse(epsilon=math.log(2.0 / event.noise_parameter - 1.0), neighbouring=neighbouring)
    return None


# ---------------------------------------------------------------------------------------------------------------------
# The kinds
# ---------------------------------------------------------------------------------------------------------------------
# The trade-off curve of a Gaussian depends on the relation only through the stated sensitivity; connect-the-dots
# is pessimistic only (the optimistic twin uses privacy buckets rounded down).
register(
    KindSpec(
        cls=Gaussian,
        summary="query + N(0, (noise_multiplier * sensitivity)^2); exactly (1/noise_multiplier)-GDP",
        draw=lambda rng: Gaussian(
            noise_multiplier=_log_uniform(rng, 0.3, 5.0),
            sensitivity=float(rng.choice([1.0, 2.0])),
            neighbouring=_relation(rng),
        ),
        pld=lambda m, *, step, pessimistic: pld_lib.from_gaussian_mechanism(
            m.noise_multiplier * m.sensitivity,
            sensitivity=m.sensitivity,
            pessimistic_estimate=pessimistic,
            value_discretization_interval=step,
            use_connect_dots=pessimistic,
        ),
        pure_epsilon=lambda m: _NOT_PURE,
        rdp=lambda m, t: (t / (2.0 * m.noise_multiplier**2), "exact"),
        rho=lambda m: (1.0 / (2.0 * m.noise_multiplier**2), "exact", "any"),
        to_dp_event=lambda m: dp_accounting.GaussianDpEvent(m.noise_multiplier * _record_bound_factor(m)),
        exact_mu=lambda m: 1.0 / m.noise_multiplier,
        clt_mu_squared=lambda m: 1.0 / m.noise_multiplier**2,  # exact, not an approximation
        gdp_upper_bound=lambda m: (1.0 / m.noise_multiplier, "exact"),
        subsampled_gaussian_phases=Unsupported("not a Poisson-subsampled Gaussian"),
        from_dp_event=lambda e, rel: (
            Gaussian(
                noise_multiplier=e.noise_multiplier / _RECORD_FACTOR[rel],
                sensitivity=_RECORD_FACTOR[rel],
                neighbouring=rel,
            )
            if isinstance(e, dp_accounting.GaussianDpEvent) and e.noise_multiplier > 0
            else None
        ),
    )
)

register(
    KindSpec(
        cls=Laplace,
        summary="query + Lap(scale); pure (sensitivity/scale)-DP",
        draw=lambda rng: Laplace(
            scale=_log_uniform(rng, 0.3, 5.0), sensitivity=float(rng.choice([1.0, 0.5])), neighbouring=_relation(rng)
        ),
        pld=lambda m, *, step, pessimistic: pld_lib.from_laplace_mechanism(
            m.scale,
            sensitivity=m.sensitivity,
            pessimistic_estimate=pessimistic,
            value_discretization_interval=step,
            use_connect_dots=pessimistic,
        ),
        pure_epsilon=lambda m: m.sensitivity / m.scale,
        rdp=lambda m, t: (_rdp_laplace(m.sensitivity / m.scale, t), "exact"),
        # eps(t)/t is largest as t -> 1, where it is the KL divergence e^-eps0 + eps0 - 1.
        rho=lambda m: (m.sensitivity / m.scale + math.expm1(-m.sensitivity / m.scale), "exact", "one"),
        # dp_accounting's LaplaceDpEvent takes the scale in units of the L1 sensitivity.
        to_dp_event=lambda m: dp_accounting.LaplaceDpEvent(m.scale / m.sensitivity * _record_bound_factor(m)),
        exact_mu=Unsupported("Laplace is not exactly GDP"),
        clt_mu_squared=Unsupported("the CLT accountant applies to (subsampled) Gaussians only"),
        # seed 003 Thm 5.1: every eps-DP mechanism is mu-GDP with mu = -2 Phi^-1(1/(1 + e^eps)).
        gdp_upper_bound=lambda m: (closed_form.get_mu_from_pure_dp(epsilon=m.sensitivity / m.scale), "upper"),
        subsampled_gaussian_phases=Unsupported("not a Poisson-subsampled Gaussian"),
        from_dp_event=lambda e, rel: (
            Laplace(scale=e.noise_multiplier, sensitivity=_RECORD_FACTOR[rel], neighbouring=rel)
            if isinstance(e, dp_accounting.LaplaceDpEvent) and e.noise_multiplier > 0
            else None
        ),
    )
)

register(
    KindSpec(
        cls=RandomizedResponse,
        summary="binary randomized response, truth w.p. e^epsilon/(1 + e^epsilon); exactly f_{epsilon,0}",
        draw=lambda rng: RandomizedResponse(epsilon=_log_uniform(rng, 0.05, 4.0)),
        pld=lambda m, *, step, pessimistic: pld_lib.from_randomized_response(
            noise_parameter=_rr_noise_parameter(m.epsilon),
            num_buckets=2,
            pessimistic_estimate=pessimistic,
            value_discretization_interval=step,
        ),
        pure_epsilon=lambda m: m.epsilon,
        rdp=lambda m, t: (_rdp_randomized_response(m.epsilon, t), "exact"),
        # eps(t)/t is largest as t -> 1, where it is the KL divergence eps tanh(eps/2).
        rho=lambda m: (m.epsilon * math.tanh(m.epsilon / 2.0), "exact", "one"),
        to_dp_event=lambda m: dp_accounting.RandomizedResponseDpEvent(_rr_noise_parameter(m.epsilon), 2),
        exact_mu=Unsupported("randomized response is not exactly GDP"),
        clt_mu_squared=Unsupported("the CLT accountant applies to (subsampled) Gaussians only"),
        gdp_upper_bound=lambda m: (closed_form.get_mu_from_pure_dp(epsilon=m.epsilon), "exact"),
        subsampled_gaussian_phases=Unsupported("not a Poisson-subsampled Gaussian"),
        from_dp_event=_rr_from_event,
    )
)


def _sg_pld(m: SubsampledGaussian, *, step: float, pessimistic: bool) -> pld_lib.PrivacyLossDistribution:
    single = pld_lib.from_gaussian_mechanism(
        m.noise_multiplier * m.sensitivity,
        sensitivity=m.sensitivity,
        pessimistic_estimate=pessimistic,
        value_discretization_interval=step,
        sampling_prob=m.sampling_rate,
        use_connect_dots=pessimistic,
    )
    return single.self_compose(m.steps) if m.steps > 1 else single


def _sg_rdp(m: SubsampledGaussian, t: np.ndarray) -> tuple[np.ndarray, str]:
    if m.sampling_rate == 1.0:
        return m.steps * t / (2.0 * m.noise_multiplier**2), "exact"
    return m.steps * _rdp_subsampled_gaussian(m.sampling_rate, m.noise_multiplier, t), "exact"


def _sg_draw(rng: np.random.Generator) -> SubsampledGaussian:
    return SubsampledGaussian(
        noise_multiplier=_log_uniform(rng, 0.7, 4.0),
        sampling_rate=1.0 if rng.uniform() < 0.1 else _log_uniform(rng, 1e-3, 0.5),
        steps=int(round(_log_uniform(rng, 1.0, 3000.0))),
    )


register(
    KindSpec(
        cls=SubsampledGaussian,
        steps_param="steps",
        summary="DP-SGD: steps compositions of a Poisson-subsampled Gaussian (add/remove)",
        draw=_sg_draw,
        pld=_sg_pld,
        pure_epsilon=lambda m: _NOT_PURE,
        rdp=_sg_rdp,
        # T/(2 sigma^2), approached as t -> inf: subsampling gives no zCDP benefit (seed 000 App. C.3).
        rho=lambda m: (m.steps / (2.0 * m.noise_multiplier**2), "exact", "any" if m.sampling_rate == 1.0 else "inf"),
        to_dp_event=lambda m: dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(m.sampling_rate, dp_accounting.GaussianDpEvent(m.noise_multiplier)),
            m.steps,
        ),
        # With sampling_rate == 1 every step is a plain Gaussian: exactly (sqrt(T)/sigma)-GDP.
        exact_mu=lambda m: m.steps**0.5 / m.noise_multiplier if m.sampling_rate == 1.0 else None,
        clt_mu_squared=lambda m: (
            clt_mu_subsampled_gaussian(
                noise_multiplier=m.noise_multiplier, sampling_rate=m.sampling_rate, steps=m.steps
            )
            ** 2
        ),
        # Subsampling never hurts; seed 003 Sec. 5.3 shows it does not improve the worst-case tail.
        gdp_upper_bound=lambda m: (
            math.sqrt(m.steps) / m.noise_multiplier,
            "exact" if m.sampling_rate == 1.0 else "upper",
        ),
        subsampled_gaussian_phases=lambda m: (
            {(m.noise_multiplier, m.sampling_rate): m.steps} if m.sampling_rate < 1 else None
        ),
        from_dp_event=_sg_from_event,
    )
)

register(
    KindSpec(
        cls=DiscreteGaussian,
        summary="discrete Gaussian on the integers (Canonne, Kamath, Steinke 2020), integer sensitivity",
        draw=lambda rng: DiscreteGaussian(
            sigma=_log_uniform(rng, 0.8, 10.0), sensitivity=int(rng.integers(1, 3)), neighbouring=_relation(rng)
        ),
        pld=lambda m, *, step, pessimistic: pld_lib.from_discrete_gaussian_mechanism(
            m.sigma,
            sensitivity=m.sensitivity,
            pessimistic_estimate=pessimistic,
            value_discretization_interval=step,
            use_connect_dots=pessimistic,
        ),
        pure_epsilon=lambda m: _NOT_PURE,
        # Upper bound: the discrete Gaussian is (Delta^2/(2 sigma^2))-zCDP (Canonne, Kamath, Steinke 2020).
        rdp=lambda m, t: (t * m.sensitivity**2 / (2.0 * m.sigma**2), "upper"),
        rho=lambda m: (m.sensitivity**2 / (2.0 * m.sigma**2), "upper", "any"),
        to_dp_event=Unsupported("dp_accounting has no DpEvent for the discrete Gaussian"),
        exact_mu=Unsupported("the discrete Gaussian is not exactly GDP"),
        clt_mu_squared=Unsupported("the CLT accountant applies to (subsampled) Gaussians only"),
        gdp_upper_bound=Unsupported("no analytic GDP bound for the discrete Gaussian here; use analyze()"),
        subsampled_gaussian_phases=Unsupported("not a Poisson-subsampled Gaussian"),
        from_dp_event=Unsupported("dp_accounting has no DpEvent for the discrete Gaussian"),
    )
)


_SLOW_IN_COMPOSITIONS = (
    "mixture_of_gaussians",
    "sampled_without_replacement_gaussian",
    "truncated_subsampled_gaussian",
)


def _draw_parts(rng: np.random.Generator, n: int) -> list[Mechanism]:
    """``n`` random leaf mechanisms of random registered kinds sharing one neighbouring relation (cheap sizes)."""
    # Kinds whose dp_accounting construction takes seconds at the engine's first step are left out of compositions.
    leaves = [k for k in leaf_kinds() if k not in _SLOW_IN_COMPOSITIONS]
    parts: list[Mechanism] = []
    while len(parts) < n:
        m = get(str(rng.choice(leaves))).draw(rng)  # type: ignore[operator]
        if isinstance(m, SubsampledGaussian):
            m = dataclasses.replace(m, steps=min(m.steps, 200))
        if not parts or m.neighbouring_relation == parts[0].neighbouring_relation:
            parts.append(m)
    return parts


register(
    KindSpec(
        cls=Composed,
        summary="sequential composition of mechanisms sharing one neighbouring relation",
        composite=True,
        draw=lambda rng: Composed(mechanisms=tuple(_draw_parts(rng, int(rng.integers(2, 4))))),
    )
)
register(
    KindSpec(
        cls=SelfComposed,
        summary="count sequential runs of the same mechanism",
        composite=True,
        draw=lambda rng: SelfComposed(mechanism=_draw_parts(rng, 1)[0], count=int(rng.integers(2, 6))),
    )
)


def mechanism_from_dp_event(event: dp_accounting.DpEvent, *, neighbouring: str = "add_remove") -> Mechanism:
    """The mechanism a dp_accounting ``DpEvent`` describes (the inverse of :func:`to_dp_event`).

    DpEvents state noise relative to one record's norm bound and carry no neighbouring relation (see
    :mod:`gdpcore.events`): the result has the given ``neighbouring``. Each leaf kind recognises its own events first
    (a ``SelfComposedDpEvent`` of a ``PoissonSampledDpEvent`` of a Gaussian is one :class:`SubsampledGaussian`); other
    ``SelfComposedDpEvent`` / ``ComposedDpEvent`` become :class:`SelfComposed` / :class:`Composed` (``NoOpDpEvent``
    parts dropped). An event no kind describes raises :class:`UnsupportedMechanismError` naming its type.
    """
    if not isinstance(event, dp_accounting.DpEvent):
        raise ValueError(f"event must be a dp_accounting DpEvent, got {event!r}")
    if neighbouring not in ("add_remove", "replace_one"):
        raise ValueError(f"neighbouring must be 'add_remove' or 'replace_one', got {neighbouring!r}")
    for name in leaf_kinds():
        hook = get(name).from_dp_event
        if callable(hook) and not isinstance(hook, Unsupported):
            m = hook(event, neighbouring)
            if m is not None:
                return m
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        if isinstance(event.event, dp_accounting.NoOpDpEvent):
            raise UnsupportedMechanismError("NoOpDpEvent: a release without privacy cost has no mechanism to report")
        inner = mechanism_from_dp_event(event.event, neighbouring=neighbouring)
        return SelfComposed(mechanism=inner, count=event.count)
    if isinstance(event, dp_accounting.ComposedDpEvent):
        kept = [e for e in event.events if not isinstance(e, dp_accounting.NoOpDpEvent)]
        if not kept:
            raise UnsupportedMechanismError("ComposedDpEvent of NoOpDpEvents only: nothing to report")
        parts = tuple(mechanism_from_dp_event(e, neighbouring=neighbouring) for e in kept)
        return Composed(mechanisms=parts)
    raise UnsupportedMechanismError(
        f"{type(event).__name__} cannot be accounted for under {neighbouring!r}: no registered mechanism kind "
        f"describes {event!r}"
    )


def draw(kind: str, rng: np.random.Generator) -> Mechanism:
    """A random representative instance of ``kind`` (the contract test's sampler)."""
    hook = get(kind).draw
    if not callable(hook) or isinstance(hook, Unsupported):
        raise UnsupportedMechanismError(f"mechanism kind {kind!r} declares no draw hook")
    return hook(rng)


# ---------------------------------------------------------------------------------------------------------------------
# Kinds of issue 14: what users already describe with dp_accounting events
# ---------------------------------------------------------------------------------------------------------------------
def _rdp_from_pure(eps: float, t: np.ndarray) -> np.ndarray:
    """RDP upper bound of a pure eps-DP mechanism: min(eps, t eps^2 / 2) (eps-DP implies (eps^2/2)-zCDP, Bun &
    Steinke 2016 Prop. 3.3; and D_t <= D_inf = eps)."""
    return np.minimum(eps, t * eps * eps / 2.0)


def _amplified(eps0: float, q: float) -> float:
    """Pure eps of a Poisson-subsampled eps0-DP mechanism, log(1 + q (e^eps0 - 1)) (Balle, Barthe, Gaboardi 2018
    Thm 8; attained by Laplace noise, whose loss reaches eps0 on a set of positive mass)."""
    return math.log1p(q * math.expm1(eps0))


def _amplified_pure_hooks(eps0: Callable[[Any], float]) -> dict[str, Any]:
    """The hooks every ``steps``-fold Poisson-subsampled pure-DP kind derives from its per-step amplified epsilon
    (pure epsilon, RDP, zCDP rho and the GDP upper bound; all upper bounds), given the base epsilon ``eps0(m)``."""

    def step_eps(m: Any) -> float:
        return _amplified(eps0(m), m.sampling_rate)

    return {
        "pure_epsilon": lambda m: m.steps * step_eps(m),
        "rdp": lambda m, t: (m.steps * _rdp_from_pure(step_eps(m), t), "upper"),
        "rho": lambda m: (m.steps * step_eps(m) ** 2 / 2.0, "upper", "any"),
        "gdp_upper_bound": lambda m: (
            math.sqrt(m.steps) * closed_form.get_mu_from_pure_dp(epsilon=step_eps(m)),
            "upper",
        ),
    }


def _self_composed(event: dp_accounting.DpEvent) -> tuple[dp_accounting.DpEvent, int]:
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        return event.event, event.count
    return event, 1


def _repeat(pld: pld_lib.PrivacyLossDistribution, steps: int) -> pld_lib.PrivacyLossDistribution:
    return pld.self_compose(steps) if steps > 1 else pld


# -- discrete Laplace ---------------------------------------------------------------------------------------------------
register(
    KindSpec(
        cls=DiscreteLaplace,
        summary="discrete Laplace on the integers, P(z) ~ exp(-a|z|); pure (a * sensitivity)-DP (add/remove)",
        draw=lambda rng: DiscreteLaplace(
            noise_parameter=_log_uniform(rng, 0.1, 3.0), sensitivity=int(rng.integers(1, 3))
        ),
        pld=lambda m, *, step, pessimistic: pld_lib.from_discrete_laplace_mechanism(
            m.noise_parameter,
            sensitivity=m.sensitivity,
            pessimistic_estimate=pessimistic,
            value_discretization_interval=step,
            use_connect_dots=pessimistic,
        ),
        pure_epsilon=lambda m: m.noise_parameter * m.sensitivity,
        rdp=lambda m, t: (_rdp_from_pure(m.noise_parameter * m.sensitivity, t), "upper"),
        rho=lambda m: ((m.noise_parameter * m.sensitivity) ** 2 / 2.0, "upper", "any"),
        to_dp_event=lambda m: dp_accounting.dp_event.DiscreteLaplaceDpEvent(m.noise_parameter, m.sensitivity),
        from_dp_event=lambda e, rel: (
            DiscreteLaplace(noise_parameter=e.noise_parameter, sensitivity=e.sensitivity)
            if isinstance(e, dp_accounting.dp_event.DiscreteLaplaceDpEvent) and rel == "add_remove"
            else None
        ),
        exact_mu=Unsupported("the discrete Laplace mechanism is not exactly GDP"),
        clt_mu_squared=Unsupported("the CLT accountant applies to (subsampled) Gaussians only"),
        gdp_upper_bound=lambda m: (closed_form.get_mu_from_pure_dp(epsilon=m.noise_parameter * m.sensitivity), "upper"),
        subsampled_gaussian_phases=Unsupported("not a Poisson-subsampled Gaussian"),
    )
)


# -- Poisson-subsampled Laplace and discrete Laplace --------------------------------------------------------------------
def _subsampled_from_event(base: type, build: Callable[[Any, float, int], Mechanism | None]):
    def hook(event: dp_accounting.DpEvent, neighbouring: str) -> Mechanism | None:
        inner, steps = _self_composed(event)
        if (
            neighbouring == "add_remove"
            and isinstance(inner, dp_accounting.PoissonSampledDpEvent)
            and isinstance(inner.event, base)
        ):
            return build(inner.event, inner.sampling_probability, steps)
        return None

    return hook


def _sl_eps0(m: SubsampledLaplace) -> float:
    return m.sensitivity / m.scale


register(
    KindSpec(
        cls=SubsampledLaplace,
        steps_param="steps",
        summary="steps compositions of a Poisson-subsampled Laplace mechanism (add/remove)",
        draw=lambda rng: SubsampledLaplace(
            scale=_log_uniform(rng, 0.3, 5.0),
            sampling_rate=_log_uniform(rng, 1e-2, 0.5),
            steps=int(rng.integers(1, 30)),
            sensitivity=float(rng.choice([1.0, 0.5])),
        ),
        pld=lambda m, *, step, pessimistic: _repeat(
            pld_lib.from_laplace_mechanism(
                m.scale,
                sensitivity=m.sensitivity,
                pessimistic_estimate=pessimistic,
                value_discretization_interval=step,
                sampling_prob=m.sampling_rate,
                use_connect_dots=pessimistic,
            ),
            m.steps,
        ),
        **_amplified_pure_hooks(_sl_eps0),
        to_dp_event=lambda m: dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(m.sampling_rate, dp_accounting.LaplaceDpEvent(m.scale / m.sensitivity)),
            m.steps,
        ),
        from_dp_event=_subsampled_from_event(
            dp_accounting.LaplaceDpEvent,
            lambda e, q, steps: SubsampledLaplace(scale=e.noise_multiplier, sampling_rate=q, steps=steps),
        ),
        exact_mu=Unsupported("the subsampled Laplace mechanism is not exactly GDP"),
        clt_mu_squared=Unsupported("the CLT accountant applies to (subsampled) Gaussians only"),
        subsampled_gaussian_phases=Unsupported("not a Poisson-subsampled Gaussian"),
    )
)


def _sdl_eps0(m: SubsampledDiscreteLaplace) -> float:
    return m.noise_parameter * m.sensitivity


register(
    KindSpec(
        cls=SubsampledDiscreteLaplace,
        steps_param="steps",
        summary="steps compositions of a Poisson-subsampled discrete Laplace mechanism (add/remove)",
        draw=lambda rng: SubsampledDiscreteLaplace(
            noise_parameter=_log_uniform(rng, 0.2, 3.0),
            sampling_rate=_log_uniform(rng, 1e-2, 0.5),
            steps=int(rng.integers(1, 30)),
            sensitivity=int(rng.integers(1, 3)),
        ),
        pld=lambda m, *, step, pessimistic: _repeat(
            pld_lib.from_discrete_laplace_mechanism(
                m.noise_parameter,
                sensitivity=m.sensitivity,
                pessimistic_estimate=pessimistic,
                value_discretization_interval=step,
                sampling_prob=m.sampling_rate,
                use_connect_dots=pessimistic,
            ),
            m.steps,
        ),
        **_amplified_pure_hooks(_sdl_eps0),
        to_dp_event=lambda m: dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(
                m.sampling_rate, dp_accounting.dp_event.DiscreteLaplaceDpEvent(m.noise_parameter, m.sensitivity)
            ),
            m.steps,
        ),
        from_dp_event=_subsampled_from_event(
            dp_accounting.dp_event.DiscreteLaplaceDpEvent,
            lambda e, q, steps: SubsampledDiscreteLaplace(
                noise_parameter=e.noise_parameter, sensitivity=e.sensitivity, sampling_rate=q, steps=steps
            ),
        ),
        exact_mu=Unsupported("the subsampled discrete Laplace mechanism is not exactly GDP"),
        clt_mu_squared=Unsupported("the CLT accountant applies to (subsampled) Gaussians only"),
        subsampled_gaussian_phases=Unsupported("not a Poisson-subsampled Gaussian"),
    )
)


# -- k-ary randomized response (optionally Poisson-subsampled) ---------------------------------------------------------
def _krr_eps(m: KaryRandomizedResponse) -> float:
    p = m.effective_noise_parameter
    return math.log1p(m.num_buckets * (1.0 - p) / p)


def _rdp_kary_rr(p: float, k: int, t: np.ndarray) -> np.ndarray:
    """Exact replace-one RDP of k-ary RR: outputs x, x' carry (A, B) and (B, A), A = 1 - p + p/k, B = p/k, the other
    k - 2 outputs B each: eps(t) = log(A^t B^(1-t) + B^t A^(1-t) + (k - 2) B) / (t - 1)."""
    la, lb = math.log1p(-p + p / k), math.log(p / k)
    terms = [t * la + (1 - t) * lb, t * lb + (1 - t) * la]
    if k > 2:
        terms.append(np.full_like(t, math.log(k - 2) + lb))
    return np.maximum(special.logsumexp(np.stack(terms), axis=0) / (t - 1.0), 0.0)


def _krr_event(m: KaryRandomizedResponse) -> dp_accounting.DpEvent:
    rr = dp_accounting.RandomizedResponseDpEvent(m.noise_parameter, m.num_buckets)
    return rr if m.sampling_rate == 1.0 else dp_accounting.PoissonSampledDpEvent(m.sampling_rate, rr)


def _krr_from_event(event: dp_accounting.DpEvent, neighbouring: str) -> KaryRandomizedResponse | None:
    if neighbouring != "replace_one":
        return None
    q = 1.0
    if isinstance(event, dp_accounting.PoissonSampledDpEvent):
        q, event = event.sampling_probability, event.event
    if isinstance(event, dp_accounting.RandomizedResponseDpEvent) and 0 < event.noise_parameter < 1:
        return KaryRandomizedResponse(
            noise_parameter=event.noise_parameter, num_buckets=event.num_buckets, sampling_rate=q
        )
    return None


register(
    KindSpec(
        cls=KaryRandomizedResponse,
        summary="k-ary randomized response (replace-one), optionally Poisson-subsampled; pure log(1 + k(1-p)/p)-DP",
        draw=lambda rng: KaryRandomizedResponse(
            noise_parameter=float(rng.uniform(0.05, 0.95)),
            num_buckets=int(rng.integers(3, 12)),
            sampling_rate=1.0 if rng.uniform() < 0.5 else float(rng.uniform(0.05, 1.0)),
        ),
        pld=lambda m, *, step, pessimistic: pld_lib.from_randomized_response(
            noise_parameter=m.effective_noise_parameter,
            num_buckets=m.num_buckets,
            pessimistic_estimate=pessimistic,
            value_discretization_interval=step,
        ),
        pure_epsilon=_krr_eps,
        rdp=lambda m, t: (_rdp_kary_rr(m.effective_noise_parameter, m.num_buckets, t), "exact"),
        rho=lambda m: (_krr_eps(m) ** 2 / 2.0, "upper", "any"),
        to_dp_event=_krr_event,
        from_dp_event=_krr_from_event,
        exact_mu=Unsupported("randomized response is not exactly GDP"),
        clt_mu_squared=Unsupported("the CLT accountant applies to (subsampled) Gaussians only"),
        gdp_upper_bound=lambda m: (closed_form.get_mu_from_pure_dp(epsilon=_krr_eps(m)), "upper"),
        subsampled_gaussian_phases=Unsupported("not a Poisson-subsampled Gaussian"),
    )
)


# -- fixed-size batches (sampling without replacement, replace-one) ----------------------------------------------------
def _swor_pld(m: SampledWithoutReplacementGaussian, *, step: float, pessimistic: bool):
    return _repeat(
        pld_lib.from_gaussian_mechanism(
            m.noise_multiplier * m.sensitivity,
            sensitivity=m.sensitivity,
            pessimistic_estimate=pessimistic,
            value_discretization_interval=step,
            sampling_prob=m.sampling_rate,
            use_connect_dots=pessimistic,
            neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE,
        ),
        m.steps,
    )


def _swor_from_event(event: dp_accounting.DpEvent, neighbouring: str) -> SampledWithoutReplacementGaussian | None:
    inner, steps = _self_composed(event)
    if (
        neighbouring == "replace_one"
        and isinstance(inner, dp_accounting.SampledWithoutReplacementDpEvent)
        and isinstance(inner.event, dp_accounting.GaussianDpEvent)
    ):
        return SampledWithoutReplacementGaussian(
            noise_multiplier=inner.event.noise_multiplier,
            dataset_size=inner.source_dataset_size,
            batch_size=inner.sample_size,
            steps=steps,
        )
    return None


def _swor_draw(rng: np.random.Generator) -> SampledWithoutReplacementGaussian:
    n = int(rng.integers(100, 2000))  # cheap sizes: the generic engine refines dp_accounting's PLDs
    return SampledWithoutReplacementGaussian(
        noise_multiplier=_log_uniform(rng, 0.8, 2.0),
        dataset_size=n,
        batch_size=max(1, int(n * _log_uniform(rng, 0.05, 0.5))),
        steps=int(rng.integers(1, 20)),
    )


register(
    KindSpec(
        cls=SampledWithoutReplacementGaussian,
        steps_param="steps",
        summary="DP-SGD with fixed-size batches: steps of a Gaussian on a sample without replacement (replace-one)",
        draw=_swor_draw,
        pld=_swor_pld,
        pure_epsilon=lambda m: _NOT_PURE,
        # Joint convexity of e^{(t-1) D_t}: at most the unsampled replace-one Gaussian, shift 2C: 2t / sigma^2.
        rdp=lambda m, t: (m.steps * 2.0 * t / m.noise_multiplier**2, "exact" if m.sampling_rate == 1.0 else "upper"),
        rho=lambda m: (
            m.steps * 2.0 / m.noise_multiplier**2,
            "exact" if m.sampling_rate == 1.0 else "upper",
            "any",
        ),
        to_dp_event=lambda m: dp_accounting.SelfComposedDpEvent(
            dp_accounting.SampledWithoutReplacementDpEvent(
                m.dataset_size, m.batch_size, dp_accounting.GaussianDpEvent(m.noise_multiplier)
            ),
            m.steps,
        ),
        from_dp_event=_swor_from_event,
        # With every record in every batch the steps are Gaussians moving the sum by 2C: exactly (2 sqrt(T)/sigma)-GDP.
        exact_mu=lambda m: 2.0 * math.sqrt(m.steps) / m.noise_multiplier if m.sampling_rate == 1.0 else None,
        clt_mu_squared=Unsupported("the CLT accountant applies to Poisson-subsampled Gaussians (add/remove) only"),
        gdp_upper_bound=lambda m: (
            2.0 * math.sqrt(m.steps) / m.noise_multiplier,
            "exact" if m.sampling_rate == 1.0 else "upper",
        ),
        subsampled_gaussian_phases=Unsupported("fixed-size batches are not Poisson-subsampled"),
    )
)


# -- mixtures of Gaussians (DP-MF / BandMF amplification, user-level sampling) -----------------------------------------
def _mog_cmax(m: MixtureOfGaussians) -> float:
    return max(float_list(m.sensitivities))


def _mog_single(m: MixtureOfGaussians) -> bool:
    return len(float_list(m.sensitivities)) == 1


class _VectorisedMixtureLoss(privacy_loss_mechanism.MixtureGaussianPrivacyLoss):
    """dp_accounting's mixture-of-Gaussians privacy loss with its inverse's bisection run for all losses at once.

    dp_accounting bisects recursively, one scalar privacy loss per node (8 s for one PLD at step 1e-4). Here every
    target loss bisects in lock-step over the same range: the same midpoints, the same comparisons, the same output
    (for each loss l the smallest multiple of ``precision`` x with privacy_loss(x) <= l, rounded as dp_accounting
    rounds), with the privacy loss evaluated on arrays.
    """

    def _losses(self, x: np.ndarray) -> np.ndarray:
        x_loss = np.outer(x, self.sensitivities) / self._variance
        consts = self._precompute_privacy_loss_constants
        if self.adjacency_type == privacy_loss_mechanism.AdjacencyType.ADD:
            return -special.logsumexp(consts + x_loss, axis=1)
        return special.logsumexp(consts - x_loss, axis=1)

    def _inverse_one(self, loss: float, lo: float, hi: float, precision: float) -> float:
        consts = [float(c) for c in self._precompute_privacy_loss_constants]
        scaled = [float(c) / float(self._variance) for c in self.sensitivities]
        add = self.adjacency_type == privacy_loss_mechanism.AdjacencyType.ADD
        width = hi - lo
        while width > precision:
            mid = (lo + hi) / 2
            terms = [c + s * mid if add else c - s * mid for c, s in zip(consts, scaled, strict=True)]
            top = max(terms)
            value = top + math.log(math.fsum(math.exp(v - top) for v in terms))
            if loss < (-value if add else value):
                lo = mid
            else:
                hi = mid
            width /= 2
        return math.floor(hi / precision) * precision

    def _inverse_privacy_losses_with_range(self, privacy_losses, bounds, precision=1e-6):
        losses = np.asarray(privacy_losses, dtype=float)
        if losses.size == 0:
            return []
        if losses.size == 1:  # the privacy-buckets construction inverts one loss at a time: plain floats
            return np.array([self._inverse_one(float(losses[0]), float(bounds[0]), float(bounds[1]), precision)])
        lo = np.full(losses.size, float(bounds[0]))
        hi = np.full(losses.size, float(bounds[1]))
        width = float(bounds[1]) - float(bounds[0])
        while width > precision:
            mid = (lo + hi) / 2
            go_up = losses < self._losses(mid)
            lo = np.where(go_up, mid, lo)
            hi = np.where(go_up, hi, mid)
            width /= 2
        return np.floor(hi / precision) * precision


def _mog_pld(m: MixtureOfGaussians, *, step: float, pessimistic: bool) -> pld_lib.PrivacyLossDistribution:
    """dp_accounting's ``from_mixture_gaussian_mechanism`` construction with the vectorised inverse above."""

    def single(adjacency: privacy_loss_mechanism.AdjacencyType):
        loss = _VectorisedMixtureLoss(
            m.standard_deviation,
            list(float_list(m.sensitivities)),
            list(float_list(m.probabilities)),
            pessimistic_estimate=pessimistic,
            log_mass_truncation_bound=-50,
            adjacency_type=adjacency,
        )
        return pld_lib._create_pld_pmf_from_monotone_privacy_loss(  # noqa: SLF001 - dp_accounting's own builder
            loss, pessimistic_estimate=pessimistic, value_discretization_interval=step, use_connect_dots=pessimistic
        )

    pld = pld_lib.PrivacyLossDistribution(
        single(privacy_loss_mechanism.AdjacencyType.REMOVE), single(privacy_loss_mechanism.AdjacencyType.ADD)
    )
    return _repeat(pld, m.steps)


def _floats_text(values: Any) -> str:
    """A list of numbers as a :class:`~gdpcore.mechanisms.FloatList` parameter's text."""
    return ",".join(repr(float(x)) for x in values)


def _mog_from_event(event: dp_accounting.DpEvent, neighbouring: str) -> MixtureOfGaussians | None:
    inner, steps = _self_composed(event)
    if neighbouring == "add_remove" and isinstance(inner, dp_accounting.dp_event.MixtureOfGaussiansDpEvent):
        return MixtureOfGaussians(
            standard_deviation=inner.standard_deviation,
            sensitivities=_floats_text(inner.sensitivities),
            probabilities=_floats_text(inner.sampling_probs),
            steps=steps,
        )
    return None


def _mog_draw(rng: np.random.Generator) -> MixtureOfGaussians:
    n = int(rng.integers(2, 4))
    w = rng.dirichlet(np.ones(n))
    w = np.round(w / w.sum(), 6)
    w[-1] = 1.0 - w[:-1].sum()
    return MixtureOfGaussians(  # cheap sizes: few privacy-loss buckets at step 1e-4
        standard_deviation=_log_uniform(rng, 2.0, 5.0),
        sensitivities=_floats_text([0.0, *sorted(float(x) for x in np.round(rng.uniform(0.2, 0.6, n - 1), 3))]),
        probabilities=_floats_text(w),
        steps=int(rng.integers(1, 5)),
    )


register(
    KindSpec(
        cls=MixtureOfGaussians,
        steps_param="steps",
        summary="mixture of Gaussians N(0,s^2) vs sum_i p_i N(c_i,s^2) (DP-MF/BandMF, user-level sampling; add/remove)",
        draw=_mog_draw,
        pld=_mog_pld,
        pure_epsilon=lambda m: _NOT_PURE,
        # Joint convexity: at most the Gaussian with the largest sensitivity (exact for a single component).
        rdp=lambda m, t: (
            m.steps * t * _mog_cmax(m) ** 2 / (2.0 * m.standard_deviation**2),
            "exact" if _mog_single(m) else "upper",
        ),
        rho=lambda m: (
            m.steps * _mog_cmax(m) ** 2 / (2.0 * m.standard_deviation**2),
            "exact" if _mog_single(m) else "upper",
            "any",
        ),
        to_dp_event=lambda m: dp_accounting.SelfComposedDpEvent(
            dp_accounting.dp_event.MixtureOfGaussiansDpEvent(
                m.standard_deviation, list(float_list(m.sensitivities)), list(float_list(m.probabilities))
            ),
            m.steps,
        ),
        from_dp_event=_mog_from_event,
        exact_mu=lambda m: math.sqrt(m.steps) * _mog_cmax(m) / m.standard_deviation if _mog_single(m) else None,
        clt_mu_squared=Unsupported("the CLT accountant applies to Poisson-subsampled Gaussians only"),
        gdp_upper_bound=lambda m: (
            math.sqrt(m.steps) * _mog_cmax(m) / m.standard_deviation,
            "exact" if _mog_single(m) else "upper",
        ),
        subsampled_gaussian_phases=Unsupported("not a Poisson-subsampled Gaussian"),
    )
)


# -- single-epoch tree aggregation (DP-FTRL) ---------------------------------------------------------------------------
def _tree_from_event(event: dp_accounting.DpEvent, neighbouring: str) -> TreeAggregation | None:
    if neighbouring == "add_remove" and isinstance(event, dp_accounting.SingleEpochTreeAggregationDpEvent):
        counts = event.step_counts if isinstance(event.step_counts, list | tuple) else [event.step_counts]
        if not counts or min(counts) < 0 or max(counts) < 1:
            return None
        return TreeAggregation(noise_multiplier=event.noise_multiplier, steps=int(max(counts)))
    return None


def _tree_mu(m: TreeAggregation) -> float:
    return math.sqrt(m.depth) / m.noise_multiplier


register(
    KindSpec(
        cls=TreeAggregation,
        summary="single-epoch tree aggregation (DP-FTRL): exactly (sqrt(ceil(log2(steps+1)))/noise_multiplier)-GDP",
        draw=lambda rng: TreeAggregation(
            noise_multiplier=_log_uniform(rng, 0.5, 10.0), steps=int(round(_log_uniform(rng, 1.0, 5000.0)))
        ),
        pld=lambda m, *, step, pessimistic: pld_lib.from_gaussian_mechanism(
            m.noise_multiplier,
            sensitivity=math.sqrt(m.depth),
            pessimistic_estimate=pessimistic,
            value_discretization_interval=step,
            use_connect_dots=pessimistic,
        ),
        pure_epsilon=lambda m: _NOT_PURE,
        rdp=lambda m, t: (t * m.depth / (2.0 * m.noise_multiplier**2), "exact"),
        rho=lambda m: (m.depth / (2.0 * m.noise_multiplier**2), "exact", "any"),
        to_dp_event=lambda m: dp_accounting.SingleEpochTreeAggregationDpEvent(m.noise_multiplier, m.steps),
        from_dp_event=_tree_from_event,
        exact_mu=_tree_mu,
        clt_mu_squared=lambda m: _tree_mu(m) ** 2,
        gdp_upper_bound=lambda m: (_tree_mu(m), "exact"),
        subsampled_gaussian_phases=Unsupported("not a Poisson-subsampled Gaussian"),
    )
)


# -- truncated Poisson batches -----------------------------------------------------------------------------------------
_DPA_RELATION = {
    "add_remove": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
    "replace_one": dp_accounting.NeighboringRelation.REPLACE_ONE,
}


def _truncated_pld(m: TruncatedSubsampledGaussian, *, step: float, pessimistic: bool):
    if not pessimistic:
        raise UnsupportedMechanismError(
            "dp_accounting's truncated subsampled Gaussian PLD is an upper bound with no optimistic construction: "
            "lower ends are unavailable"
        )
    return _repeat(
        pld_lib.from_truncated_subsampled_gaussian_mechanism(
            dataset_size=m.dataset_size,
            sampling_probability=m.sampling_rate,
            truncated_batch_size=m.truncated_batch_size,
            noise_multiplier=m.noise_multiplier,
            value_discretization_interval=step,
            use_connect_dots=True,
            neighboring_relation=_DPA_RELATION[m.neighbouring],
        ),
        m.steps,
    )


def _truncated_from_event(event: dp_accounting.DpEvent, neighbouring: str) -> TruncatedSubsampledGaussian | None:
    inner, steps = _self_composed(event)
    if isinstance(inner, dp_accounting.dp_event.TruncatedSubsampledGaussianDpEvent):
        return TruncatedSubsampledGaussian(
            noise_multiplier=inner.noise_multiplier,
            sampling_rate=inner.sampling_probability,
            dataset_size=inner.dataset_size,
            truncated_batch_size=inner.truncated_batch_size,
            steps=steps,
            neighbouring=neighbouring,
        )
    return None


def _truncated_draw(rng: np.random.Generator) -> TruncatedSubsampledGaussian:
    n = int(rng.integers(50, 5000))
    q = _log_uniform(rng, 5e-3, 0.3)
    return TruncatedSubsampledGaussian(
        noise_multiplier=_log_uniform(rng, 0.8, 4.0),
        sampling_rate=q,
        dataset_size=n,
        truncated_batch_size=max(1, int(n * q * rng.uniform(0.8, 1.5))),
        steps=int(rng.integers(1, 50)),
        neighbouring=_relation(rng),
    )


# dp_accounting's construction mixes a sensitivity-1 subsampled Gaussian with a branch accounted as a replace-one
# Gaussian of standard deviation sigma/2 (mean shift 2 at noise sigma/2, mu = 4/sigma): the RDP, zCDP and GDP bounds
# below are those of that worst branch (joint convexity), upper bounds of dp_accounting's own upper bound.
register(
    KindSpec(
        cls=TruncatedSubsampledGaussian,
        steps_param="steps",
        summary="steps of a Gaussian on a Poisson sample truncated to a maximum batch size (upper bounds only)",
        draw=_truncated_draw,
        pld=_truncated_pld,
        pure_epsilon=lambda m: _NOT_PURE,
        rdp=lambda m, t: (m.steps * 8.0 * t / m.noise_multiplier**2, "upper"),
        rho=lambda m: (m.steps * 8.0 / m.noise_multiplier**2, "upper", "any"),
        to_dp_event=lambda m: dp_accounting.SelfComposedDpEvent(
            dp_accounting.dp_event.TruncatedSubsampledGaussianDpEvent(
                m.dataset_size, m.sampling_rate, m.truncated_batch_size, m.noise_multiplier
            ),
            m.steps,
        ),
        from_dp_event=_truncated_from_event,
        exact_mu=lambda m: None,
        clt_mu_squared=Unsupported("the CLT accountant does not cover truncated batches"),
        gdp_upper_bound=lambda m: (4.0 * math.sqrt(m.steps) / m.noise_multiplier, "upper"),
        subsampled_gaussian_phases=Unsupported("truncated batches are not a plain Poisson-subsampled Gaussian"),
    )
)


# -- rho-zCDP statements (upper bounds only) ---------------------------------------------------------------------------
_ZCDP_ORDERS = 1.0 + np.geomspace(1e-3, 1e4, 400)
_ZCDP_DELTA_FLOOR = 1e-30  # the profile is carried down to this delta; the rest is put at +inf loss (pessimistic)


def _zcdp_profile_pld(m: ZCDP, *, step: float, pessimistic: bool) -> pld_lib.PrivacyLossDistribution:
    """The pessimistic PLD of a (xi, rho)-zCDP statement: the tightest profile the statement implies, as a PMF.

    Every order t gives delta(eps) <= exp((t-1)(xi + rho t - eps + log(1 - 1/t)) - log t) (Canonne, Kamath, Steinke
    2020 Prop. 12; :func:`gdpcore.representations.get_delta_from_rdp`), so the true profile lies below the minimum
    over a grid of orders, sampled at eps_k = k * step. A privacy profile is convex in v = e^eps, hence below the
    greatest convex minorant H of those samples (the lower convex hull of the points (v_k, delta_k)), which is
    piecewise linear with vertices on the grid. H is the profile of the PMF with mass v_k (s_k - s_(k-1)) at loss
    eps_k (s_k the slopes of H in v) and H(v_K) at +inf: a valid pessimistic PLD whose delta(eps) >= the true
    delta(eps) for every mechanism satisfying the statement. There is no optimistic side: many mechanisms satisfy
    one statement (Bun & Steinke 2016), so lower ends are unavailable.
    """
    if not pessimistic:
        raise UnsupportedMechanismError(
            "a zCDP statement is an upper bound satisfied by many mechanisms: its lower ends are unavailable"
        )
    from gdpcore.representations import get_delta_from_rdp  # local: representations imports this module

    rdp = m.xi + m.rho * _ZCDP_ORDERS
    # Largest eps needed: Bun & Steinke 2016 Prop. 1.3 at the floor (an upper bound on the eps the profile reaches it).
    e_max = m.xi + m.rho + 2.0 * math.sqrt(m.rho * math.log(1.0 / _ZCDP_DELTA_FLOOR))
    k = np.arange(int(math.ceil(e_max / step)) + 1)
    eps = k * step
    delta = np.asarray(get_delta_from_rdp(orders=_ZCDP_ORDERS, rdp=rdp, epsilon=eps), dtype=float)
    v = np.exp(eps)
    hull: list[int] = []  # lower convex hull (Andrew's monotone chain) of (v, delta), v increasing
    for i in range(v.size):
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            if (delta[b] - delta[a]) * (v[i] - v[a]) >= (delta[i] - delta[a]) * (v[b] - v[a]):
                hull.pop()
            else:
                break
        hull.append(i)
    idx = np.asarray(hull)
    from gdpcore.curve import curve_from_profile  # local: gdpcore.curve is not needed by the registry otherwise

    # The symmetric curve of those supporting lines and their mirrors (valid: the statement holds in both directions;
    # seed 000 Thm A.9), then the symmetric pair that realises it: segment i of the curve, slope -e^l, is an atom of
    # P-mass -d(beta) at loss l (Q-mass d(alpha)); the P-mass at alpha = 0 is the +inf atom. Losses are rounded up to
    # the grid (P-mass moved to a larger loss only raises delta: pessimistic).
    alphas, betas = curve_from_profile(eps[idx], delta[idx]).breakpoints()
    d_alpha, d_beta = np.diff(alphas), -np.diff(betas)
    seg = (d_alpha > 0) & (d_beta > 0)
    losses = np.log(d_beta[seg]) - np.log(d_alpha[seg])
    pmf: dict[int, float] = {}
    for loss, mass in zip(np.ceil(losses / step).astype(int), d_beta[seg], strict=True):
        pmf[int(loss)] = pmf.get(int(loss), 0.0) + float(mass)
    infinity = float(max(1.0 - betas[0], 0.0))
    return pld_lib.PrivacyLossDistribution.create_from_rounded_probability(
        pmf, infinity, step, pessimistic_estimate=True, symmetric=True
    )


register(
    KindSpec(
        cls=ZCDP,
        summary="a (xi, rho)-zCDP statement (Bun & Steinke 2016): its curve is an upper bound, lower ends unavailable",
        draw=lambda rng: ZCDP(
            rho=_log_uniform(rng, 0.01, 2.0),
            xi=0.0 if rng.uniform() < 0.7 else _log_uniform(rng, 1e-3, 0.1),
            neighbouring=_relation(rng),
        ),
        pld=_zcdp_profile_pld,
        pure_epsilon=lambda m: _NOT_PURE,
        rdp=lambda m, t: (m.xi + m.rho * t, "upper"),
        # sup_t (xi + rho t)/t = xi + rho, approached as t -> 1.
        rho=lambda m: (m.xi + m.rho, "upper", "one" if m.xi > 0 else "any"),
        to_dp_event=lambda m: dp_accounting.ZCDpEvent(m.rho, m.xi),
        from_dp_event=lambda e, rel: (
            ZCDP(rho=e.rho, xi=e.xi, neighbouring=rel) if isinstance(e, dp_accounting.ZCDpEvent) and e.rho > 0 else None
        ),
        exact_mu=lambda m: None,
        clt_mu_squared=Unsupported("a zCDP statement has no central-limit mu"),
        gdp_upper_bound=Unsupported("rho-zCDP does not imply mu-GDP for any mu"),
        subsampled_gaussian_phases=Unsupported("a zCDP statement is not a Poisson-subsampled Gaussian"),
    )
)
