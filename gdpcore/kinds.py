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
from scipy import special

from gdpcore import closed_form
from gdpcore.mechanisms import (
    Composed,
    DiscreteGaussian,
    Gaussian,
    Laplace,
    Mechanism,
    Param,
    RandomizedResponse,
    SelfComposed,
    SubsampledGaussian,
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
    if isinstance(event, dp_accounting.RandomizedResponseDpEvent) and event.num_buckets == 2:
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
        to_dp_event=lambda m: dp_accounting.GaussianDpEvent(m.noise_multiplier),
        exact_mu=lambda m: 1.0 / m.noise_multiplier,
        clt_mu_squared=lambda m: 1.0 / m.noise_multiplier**2,  # exact, not an approximation
        gdp_upper_bound=lambda m: (1.0 / m.noise_multiplier, "exact"),
        subsampled_gaussian_phases=Unsupported("not a Poisson-subsampled Gaussian"),
        from_dp_event=lambda e, rel: (
            Gaussian(noise_multiplier=e.noise_multiplier, neighbouring=rel)
            if isinstance(e, dp_accounting.GaussianDpEvent)
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
        to_dp_event=lambda m: dp_accounting.LaplaceDpEvent(m.scale / m.sensitivity),
        exact_mu=Unsupported("Laplace is not exactly GDP"),
        clt_mu_squared=Unsupported("the CLT accountant applies to (subsampled) Gaussians only"),
        # seed 003 Thm 5.1: every eps-DP mechanism is mu-GDP with mu = -2 Phi^-1(1/(1 + e^eps)).
        gdp_upper_bound=lambda m: (closed_form.get_mu_from_pure_dp(epsilon=m.sensitivity / m.scale), "upper"),
        subsampled_gaussian_phases=Unsupported("not a Poisson-subsampled Gaussian"),
        from_dp_event=lambda e, rel: (
            Laplace(scale=e.noise_multiplier, neighbouring=rel) if isinstance(e, dp_accounting.LaplaceDpEvent) else None
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


def _draw_parts(rng: np.random.Generator, n: int) -> list[Mechanism]:
    """``n`` random leaf mechanisms of random registered kinds sharing one neighbouring relation (cheap sizes)."""
    leaves = list(leaf_kinds())
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
