"""The kind registry's machinery: :class:`KindSpec`, :func:`register`, the property table and the one tree walk.

No kind is declared here (the families are in the sibling modules, registered by :mod:`gdpcore.kinds`). Every
optional hook (:data:`OPTIONAL_HOOKS`) defaults to :class:`Unsupported` with a generic reason, so a declaration names
only the hooks it implements or refuses with a reason of its own; required hooks default to ``MISSING``, which
:func:`check_kind` reports.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import dp_accounting
import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from gdpcore.mechanisms import ZCDP, Composed, Mechanism, Param, SelfComposed, nested_fields, parameters


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
"""Hooks a kind may leave :class:`Unsupported`: :class:`KindSpec` defaults each to ``Unsupported`` with a generic
reason (give a reason of your own where the generic one says less)."""
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
    to_dp_event: Hook = Unsupported("dp_accounting has no DpEvent for this kind")
    exact_mu: Hook = Unsupported("this kind is not exactly GDP")
    clt_mu_squared: Hook = Unsupported("the CLT accountant applies to (subsampled) Gaussians only")
    gdp_upper_bound: Hook = Unsupported("no analytic GDP bound for this kind; use analyze()")
    subsampled_gaussian_phases: Hook = Unsupported("not a Poisson-subsampled Gaussian")
    from_dp_event: Hook = Unsupported("no dp_accounting DpEvent describes this kind")
    poisson_sampled_gaussian: bool = False
    """The kind accounts a Gaussian on Poisson-sampled batches: a run that drew fixed-size batches but is described
    by it is accounted as Poisson sampling (:func:`accounts_poisson_sampling`, the caveat of
    :data:`gdpcore.adapters.FIXED_REASON`)."""
    input_note: Callable[[Mechanism], str] | None = None
    """For a kind that *is* a user's statement (a curve, profile or PLD supplied as input, :mod:`gdpcore.kinds.curves`):
    what every number of its report is relative to ("user-supplied ..."), put in front of the report's accountant
    (:func:`input_notes`). None for a mechanism the engine accounts from its own description."""
    ends_note: Callable[[Mechanism], str] | None = None
    """For a kind whose two ends bound *different* mechanisms (the batch samplers of :mod:`gdpcore.kinds.samplers`:
    the upper end a proven guarantee of a dominating mechanism, the lower end a proven construction on a dominated
    one): what each end is. The certified gap of such a report is the width of that bracket, not a discretisation
    error, and no finer step closes it: the engine runs one round and says so in the status (:func:`ends_notes`);
    the note is put in front of the report's accountant. None when both ends bound the kind's own curve."""
    steps_param: str | None = None
    """The integer parameter that counts independent sequential runs of one step (``"steps"``), if the kind has one:
    the instance with it set to 1 is one step, and its ``pld`` hook the single step's PLD. The engine composes the
    steps itself (:func:`single_steps`), with a round-off bound; None for one-shot kinds."""
    construction_points: Callable[[Any, float], float] | None = None
    """``(one step, lattice points) -> points`` its construction works on, when that is more than its loss lattice
    (the discrete kinds' integer outputs, a mixture's components per loss), for the planner (:func:`pld_points`);
    None: the lattice."""

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
    out: dict[tuple[float, float], int] = {}
    for p in parts:
        if p is None:
            return None
        for k, v in p.items():
            out[k] = out.get(k, 0) + v
    return out


def _combine_rdp(parts: list[tuple[np.ndarray, str]]) -> tuple[np.ndarray, str]:
    label = "exact" if all(lab == "exact" for _, lab in parts) else "upper"
    return np.sum([v for v, _ in parts], axis=0), label


_ONE_STEP = (
    "a kind's pld hook builds one step's dp_accounting PLD: compose the single steps (single_steps) with "
    "gdpcore.pld, as the engine does"
)


def _one_step_only(*_: Any) -> Any:
    raise UnsupportedMechanismError(_ONE_STEP)


PROPERTIES: dict[str, _Property] = {
    "pld": _Property("the privacy loss distribution of one step", repeat=_one_step_only, combine=_one_step_only),
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


def _leaves_at(mechanism: Mechanism, path: str) -> list[tuple[str, Mechanism]]:
    """(path, leaf) of every leaf, the path in the spec grammar of :mod:`gdpcore.mechanisms` ("mechanisms[1]")."""
    nested = nested_fields(type(mechanism))
    if not nested:
        return [(path, mechanism)]
    out: list[tuple[str, Mechanism]] = []
    for name, many in nested.items():
        value = getattr(mechanism, name)
        children = list(enumerate(value)) if many == "many" else [(None, value)]
        for i, child in children:
            step = name if i is None else f"{name}[{i}]"
            out += _leaves_at(child, f"{path}.{step}" if path else step)
    return out


@dataclasses.dataclass(frozen=True)
class Refusal:
    """Why ``what`` cannot be answered: the property ``need`` it requires is unsupported by the leaf kind ``kind``
    found at ``path`` in the mechanism ("" for the mechanism itself or a kind name), for ``reason``."""

    what: str
    need: str
    kind: str
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.what} needs {self.need}, which {self.kind} does not support ({self.reason})"


def why_unsupported(kind: str | Mechanism, what: str) -> Refusal | None:
    """The dry run of :func:`evaluate` that answers *why*: None when ``what`` (a property name or a
    :data:`PRODUCERS` name) would be answered for ``kind`` (a kind name, for which composite kinds count as
    supported, or a mechanism, whose every leaf must support it), else the first :class:`Refusal` (needs in the
    producer's order, then leaves in the tree's order)."""
    needs = PRODUCERS.get(what, (what,))
    for need in needs:
        if need not in PROPERTIES and need != "from_dp_event":
            raise ValueError(f"what must be one of {', '.join((*PROPERTIES, *PRODUCERS))}, got {what!r}")
    if isinstance(kind, Mechanism):
        leaves = [(path, get(leaf)) for path, leaf in _leaves_at(kind, "")]
    else:
        spec = get(kind)
        if spec.composite:
            return None
        leaves = [("", spec)]
    for need in needs:
        for path, leaf_spec in leaves:
            hook = leaf_spec.hook(need)
            if isinstance(hook, Unsupported) or not callable(hook):
                reason = hook.reason if isinstance(hook, Unsupported) else "not declared"
                return Refusal(what=what, need=need, kind=leaf_spec.name, path=path, reason=reason)
    return None


def accounts_poisson_sampling(mechanism: Mechanism) -> bool:
    """Does some leaf of ``mechanism`` account a Gaussian on Poisson-sampled batches (``poisson_sampled_gaussian``)?"""
    return any(get(leaf).poisson_sampled_gaussian for leaf in _leaves(mechanism))


def input_notes(mechanism: Mechanism) -> list[str]:
    """The ``input_note`` of every leaf that is a user's statement (distinct, in tree order): what the numbers of a
    report of ``mechanism`` are relative to; empty for a mechanism accounted from its own description."""
    notes: list[str] = []
    for leaf in _leaves(mechanism):
        hook = get(leaf).input_note
        note = hook(leaf) if hook is not None else None
        if note and note not in notes:
            notes.append(note)
    return notes


def ends_notes(mechanism: Mechanism) -> list[str]:
    """The ``ends_note`` of every leaf whose two ends bound different mechanisms (distinct, in tree order); empty when
    every leaf's ends bound its own curve (the engine then refines the step until the gap meets the tolerance)."""
    notes: list[str] = []
    for leaf in _leaves(mechanism):
        hook = get(leaf).ends_note
        note = hook(leaf) if hook is not None else None
        if note and note not in notes:
            notes.append(note)
    return notes


def supports(kind: str | Mechanism, what: str) -> bool:
    """Dry run: would ``what`` (a property name or a :data:`PRODUCERS` name) be answered for ``kind`` (a kind name,
    for which composite kinds count as supported, or a mechanism, whose every leaf must support it)? See
    :func:`why_unsupported` for the reason when not."""
    return why_unsupported(kind, what) is None


# -- public property functions ----------------------------------------------------------------------------------------
def pld(mechanism: Mechanism, *, step: float, pessimistic: bool) -> pld_lib.PrivacyLossDistribution:
    """The dp_accounting PLD of one step (connect-the-dots if pessimistic, rounded-down privacy buckets otherwise).

    ``mechanism`` must be a single step (an item of :func:`single_steps`): a composition, or a leaf whose
    ``steps_param`` exceeds 1, raises :class:`UnsupportedMechanismError`. Composition carries a round-off bound in
    :mod:`gdpcore.pld`; dp_accounting's own ``compose`` / ``self_compose`` serve as an oracle in the tests only.
    """
    spec = get(mechanism)
    if spec.composite or (spec.steps_param is not None and getattr(mechanism, spec.steps_param) != 1):
        raise UnsupportedMechanismError(f"{mechanism.kind} with more than one step: {_ONE_STEP}")
    return evaluate(mechanism, "pld", step=step, pessimistic=pessimistic)


_TAIL_Z = 12.0
"""Standard deviations of a Gaussian privacy loss dp_accounting keeps (its tails are truncated at mass e^-50 per side,
z = 10; 12 leaves a margin): :func:`pld_points` spans a non-pure step's loss over rho +/- this many deviations."""


def pld_points(mechanism: Mechanism, *, step: float) -> float:
    """The size of one step's dp_accounting construction at ``step`` (lattice points plus enumerated outputs),
    predicted in closed form *before* it is built, so the planner can refuse what no budget holds (a Laplace of
    scale 1e-6 spans 2e6 / step losses; a discrete Laplace of sensitivity 1e18 enumerates 1e18 outputs).

    The loss span: a pure eps-DP step's losses lie in [-eps, eps] (2 eps / step points); any other step's privacy
    loss has mean rho and standard deviation sqrt(2 rho) for the Gaussians (Bun & Steinke 2016 Sec. 3; rho from the
    kind's ``rho`` hook, an upper bound for every kind), and dp_accounting keeps about ``_TAIL_Z`` deviations either
    side: 2 rho + 2 ``_TAIL_Z`` sqrt(2 rho). An estimate for planning (never a number anyone reads); it errs large.
    Overflow gives inf: refused. A step with neither bound (rho = inf) is sized by ``construction_points`` alone."""
    spec = get(mechanism)
    with np.errstate(over="ignore"):
        try:
            eps = float(evaluate(mechanism, "pure_epsilon"))
            if math.isfinite(eps):
                span = 2.0 * eps
            else:
                rho = max(float(r) for r, _, _ in evaluate(mechanism, "rho"))
                # No zCDP bound either (a user-supplied curve with mass at +inf): the loss span is unknown here, and
                # such a construction is bounded by its own input (or by its construction_points).
                span = 2.0 * rho + 2.0 * _TAIL_Z * math.sqrt(2.0 * rho) if math.isfinite(rho) else 0.0
            points = span / step + 3.0
            if spec.construction_points is not None:
                points = float(spec.construction_points(mechanism, points))
        except (OverflowError, ZeroDivisionError):
            return math.inf
    return points if math.isfinite(points) else math.inf


def single_steps(mechanism: Mechanism) -> list[tuple[Mechanism, int]]:
    """``mechanism`` as independent single steps with their repetition counts: [(one step, count), ...].

    The composition tree is flattened (composition is commutative: ``SelfComposed(Composed([A, B]), 3)`` is A and B
    three times each), a leaf with a ``steps_param`` becomes its one-step instance repeated that many times, and equal
    single steps are merged (their counts add), in order of first appearance. The engine composes these with
    :mod:`gdpcore.pld` (FFT powers with a round-off bound) instead of dp_accounting's ``self_compose``. zCDP
    statements are merged into one whose rho and xi are the sums (Bun & Steinke 2016 Lemma 2.3): composing their
    worst-case curves instead is looser than converting the composed statement
    (:func:`gdpcore.kinds.dp_events.merge_zcdp_statements`).
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
    out = [(steps[k], counts[k]) for k in steps]
    statements = [(m, n) for m, n in out if isinstance(m, ZCDP)]
    if len(statements) > 1 or any(n > 1 for _, n in statements):
        merged = ZCDP(
            rho=math.fsum(m.rho * n for m, n in statements),
            xi=math.fsum(m.xi * n for m, n in statements),
            neighbouring=statements[0][0].neighbouring,
        )
        out = [(m, n) for m, n in out if not isinstance(m, ZCDP)] + [(merged, 1)]
    return out


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


def draw(kind: str, rng: np.random.Generator) -> Mechanism:
    """A random representative instance of ``kind`` (the contract test's sampler)."""
    hook = get(kind).draw
    if not callable(hook) or isinstance(hook, Unsupported):
        raise UnsupportedMechanismError(f"mechanism kind {kind!r} declares no draw hook")
    return hook(rng)
