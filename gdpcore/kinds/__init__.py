"""The mechanism-kind registry: what gdp-audit knows about each kind, declared once per kind.

A mechanism *kind* (``"gaussian"``, ``"subsampled_gaussian"``, ...) is a :class:`gdpcore.mechanisms.Mechanism`
subclass (its parameters, declared with :func:`gdpcore.mechanisms.param`, give the spec schema, the lake's parameter
columns and the CLI help) plus one :class:`KindSpec` (in the family module of :mod:`gdpcore.kinds`) with its *hooks*:

=============================  =======================================================================================
hook                           what it returns for one mechanism of the kind
=============================  =======================================================================================
``pld``                        dp_accounting ``PrivacyLossDistribution`` of one step (``step``, ``pessimistic``);
                               every producer of curves (``analyze``, ``analyze_grid``, divergences, Bayes security)
                               needs it
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

Every hook is either a callable or :class:`Unsupported` with a reason; :data:`REQUIRED_HOOKS` must be callables, the
optional ones default to ``Unsupported`` with a generic reason.
:func:`check_kind` lists what a declaration lacks and :func:`register` refuses an incomplete one. ``Composed`` and
``SelfComposed`` are handled generically: each property knows how to repeat and combine values
(:data:`PROPERTIES`), and :func:`evaluate` walks the mechanism tree once (dp_accounting's ``_maybe_compose``). A leaf
whose hook is unsupported raises :class:`UnsupportedMechanismError` (a ``ValueError``) instead of a wrong number;
:func:`supports` is the dry run of that walk (dp_accounting's ``PrivacyAccountant.supports``).

Adding a kind takes two edits: a frozen, keyword-only :class:`~gdpcore.mechanisms.Mechanism` subclass whose fields are
declared with :func:`~gdpcore.mechanisms.param` (validation, JSON round trip, content hash, spec schema, lake columns
and CLI help follow), and one ``KindSpec(...)`` in a family module, added to :data:`_DECLARED` below.
``tests/test_contract.py`` then runs instances from its ``draw`` hook through every producer and checks every
invariant; a missing hook fails :func:`check_kind` first.

Layout: :mod:`~gdpcore.kinds.registry` (the machinery: :class:`KindSpec`, :func:`register`, :func:`evaluate`,
:func:`supports`), :mod:`~gdpcore.kinds.formulas` (RDP, amplification and central-limit formulas),
:mod:`~gdpcore.kinds.dp_events` (the DpEvent mapping), and one module per family (:mod:`~gdpcore.kinds.gaussian`,
:mod:`~gdpcore.kinds.laplace`, :mod:`~gdpcore.kinds.randomized_response`, :mod:`~gdpcore.kinds.mixture`,
:mod:`~gdpcore.kinds.zcdp`, :mod:`~gdpcore.kinds.replace_one` (replace-one Poisson-subsampled Laplace),
:mod:`~gdpcore.kinds.curves` (user-supplied curves, profiles and PLDs),
:mod:`~gdpcore.kinds.composite`). Registration order is the order of :data:`_DECLARED`:
it orders :func:`kind_names`, the lake's parameter columns and the ``from_dp_event`` hooks
(:func:`mechanism_from_dp_event` takes the first kind that recognises an event, e.g. binary before k-ary
randomized response).
"""

from __future__ import annotations

from gdpcore.kinds import (
    composite,
    curves,
    gaussian,
    laplace,
    mixture,
    randomized_response,
    replace_one,
    samplers,
    zcdp,
)
from gdpcore.kinds.dp_events import mechanism_from_dp_event
from gdpcore.kinds.formulas import clt_mu_subsampled_gaussian, solve_clt_subsampled_gaussian
from gdpcore.kinds.registry import (
    _REGISTRY,
    HOOKS,
    MISSING,
    OPTIONAL_HOOKS,
    PRODUCERS,
    PROPERTIES,
    REQUIRED_HOOKS,
    KindContractError,
    KindSpec,
    Refusal,
    Unsupported,
    UnsupportedMechanismError,
    _leaves,
    accounts_poisson_sampling,
    check_kind,
    clt_mu,
    draw,
    ends_notes,
    evaluate,
    exact_mu,
    flat_kinds,
    get,
    help_text,
    input_notes,
    kind_names,
    lake_columns,
    leaf_kinds,
    param_columns,
    pld,
    pld_points,
    register,
    single_steps,
    subsampled_gaussian_phases,
    supports,
    to_dp_event,
    unregister,
    why_unsupported,
)

__all__ = [
    "HOOKS",
    "MISSING",
    "OPTIONAL_HOOKS",
    "PRODUCERS",
    "PROPERTIES",
    "REQUIRED_HOOKS",
    "KindContractError",
    "KindSpec",
    "Refusal",
    "Unsupported",
    "UnsupportedMechanismError",
    "accounts_poisson_sampling",
    "check_kind",
    "clt_mu",
    "clt_mu_subsampled_gaussian",
    "draw",
    "evaluate",
    "exact_mu",
    "flat_kinds",
    "get",
    "help_text",
    "ends_notes",
    "input_notes",
    "kind_names",
    "lake_columns",
    "leaf_kinds",
    "mechanism_from_dp_event",
    "param_columns",
    "pld",
    "pld_points",
    "register",
    "single_steps",
    "solve_clt_subsampled_gaussian",
    "subsampled_gaussian_phases",
    "supports",
    "to_dp_event",
    "unregister",
    "why_unsupported",
]
# _REGISTRY and _leaves are imported for the tests that monkeypatch the registry or walk a mechanism's leaves.
_PRIVATE_FOR_TESTS = (_REGISTRY, _leaves)

_DECLARED: tuple[KindSpec, ...] = (
    gaussian.GAUSSIAN,
    laplace.LAPLACE,
    randomized_response.RANDOMIZED_RESPONSE,
    gaussian.SUBSAMPLED_GAUSSIAN,
    gaussian.DISCRETE_GAUSSIAN,
    composite.COMPOSED,
    composite.SELF_COMPOSED,
    laplace.DISCRETE_LAPLACE,
    laplace.SUBSAMPLED_LAPLACE,
    laplace.SUBSAMPLED_DISCRETE_LAPLACE,
    randomized_response.KARY_RANDOMIZED_RESPONSE,
    gaussian.SAMPLED_WITHOUT_REPLACEMENT_GAUSSIAN,
    mixture.MIXTURE_OF_GAUSSIANS,
    gaussian.TREE_AGGREGATION,
    gaussian.TRUNCATED_SUBSAMPLED_GAUSSIAN,
    zcdp.ZCDP_STATEMENT,
    curves.PRIVACY_PROFILE,
    curves.TRADEOFF_CURVE,
    curves.PRIVACY_LOSS_DISTRIBUTION,
    samplers.CYCLIC_GAUSSIAN,
    samplers.SHUFFLED_GAUSSIAN,
    samplers.BALLS_IN_BINS_GAUSSIAN,
    replace_one.REPLACE_ONE_SUBSAMPLED_LAPLACE,
    replace_one.REPLACE_ONE_SUBSAMPLED_DISCRETE_LAPLACE,
)
"""Every built-in kind, in registration order (see the module docstring for why the order matters)."""
for _spec in _DECLARED:
    register(_spec)
