"""The DpEvent mapping: each leaf kind's ``from_dp_event`` hook and :func:`mechanism_from_dp_event`, its inverse walk.

DpEvents state noise relative to one record's norm bound and carry no neighbouring relation (see
:mod:`gdpcore.events`); :data:`RECORD_FACTOR` converts between the two conventions. The ``to_dp_event`` direction is a
one-liner beside each kind's declaration.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import dp_accounting

from gdpcore._validation import bounded_repr
from gdpcore.kinds._common import floats_text
from gdpcore.kinds.registry import Unsupported, UnsupportedMechanismError, get, leaf_kinds
from gdpcore.mechanisms import (
    MAX_NESTING,
    ZCDP,
    Composed,
    DiscreteLaplace,
    Gaussian,
    KaryRandomizedResponse,
    Laplace,
    Mechanism,
    MixtureOfGaussians,
    RandomizedResponse,
    ReplaceOneSubsampledDiscreteLaplace,
    ReplaceOneSubsampledLaplace,
    SampledWithoutReplacementGaussian,
    SelfComposed,
    SubsampledDiscreteLaplace,
    SubsampledGaussian,
    SubsampledLaplace,
    TreeAggregation,
    TruncatedSubsampledGaussian,
)

RECORD_FACTOR = {"add_remove": 1.0, "replace_one": 2.0}
"""Sensitivity of a sum of records with norm bound 1 under each relation: a DpEvent's noise is relative to one
record's norm bound (dp_accounting's GaussianDpEvent / LaplaceDpEvent docstrings, and its PLD accountant, whose
REPLACE_ONE Gaussian compares N(1, s^2) with N(-1, s^2)); a replaced record can move the sum from +C to -C."""


def record_bound_factor(m: Mechanism) -> float:
    """noise relative to the relation's sensitivity -> noise relative to one record's norm bound."""
    return RECORD_FACTOR[m.neighbouring_relation]


def self_composed(event: dp_accounting.DpEvent) -> tuple[dp_accounting.DpEvent, int]:
    """(inner event, count) of a ``SelfComposedDpEvent``; (event, 1) otherwise."""
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        return event.event, event.count
    return event, 1


def gaussian_from_event(e: dp_accounting.DpEvent, rel: str) -> Gaussian | None:
    if isinstance(e, dp_accounting.GaussianDpEvent) and e.noise_multiplier > 0:
        return Gaussian(
            noise_multiplier=e.noise_multiplier / RECORD_FACTOR[rel], sensitivity=RECORD_FACTOR[rel], neighbouring=rel
        )
    return None


def laplace_from_event(e: dp_accounting.DpEvent, rel: str) -> Laplace | None:
    if isinstance(e, dp_accounting.LaplaceDpEvent) and e.noise_multiplier > 0:
        return Laplace(scale=e.noise_multiplier, sensitivity=RECORD_FACTOR[rel], neighbouring=rel)
    return None


def discrete_laplace_from_event(e: dp_accounting.DpEvent, rel: str) -> DiscreteLaplace | None:
    if isinstance(e, dp_accounting.dp_event.DiscreteLaplaceDpEvent) and rel == "add_remove":
        return DiscreteLaplace(noise_parameter=e.noise_parameter, sensitivity=e.sensitivity)
    return None


def zcdp_from_event(e: dp_accounting.DpEvent, rel: str) -> ZCDP | None:
    if isinstance(e, dp_accounting.ZCDpEvent) and e.rho > 0:
        return ZCDP(rho=e.rho, xi=e.xi, neighbouring=rel)
    return None


def subsampled_gaussian_from_event(event: dp_accounting.DpEvent, neighbouring: str) -> SubsampledGaussian | None:
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


def randomized_response_from_event(event: dp_accounting.DpEvent, neighbouring: str) -> RandomizedResponse | None:
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
def _subsampled_from_event(
    base: type, build: Callable[[Any, float, int], Mechanism | None]
) -> Callable[[dp_accounting.DpEvent, str], Mechanism | None]:
    """The ``from_dp_event`` hook of a ``steps``-fold Poisson-subsampled kind whose base event type is ``base``."""

    def hook(event: dp_accounting.DpEvent, neighbouring: str) -> Mechanism | None:
        inner, steps = self_composed(event)
        if (
            neighbouring == "add_remove"
            and isinstance(inner, dp_accounting.PoissonSampledDpEvent)
            and isinstance(inner.event, base)
        ):
            return build(inner.event, inner.sampling_probability, steps)
        return None

    return hook


subsampled_laplace_from_event = _subsampled_from_event(
    dp_accounting.LaplaceDpEvent,
    lambda e, q, steps: SubsampledLaplace(scale=e.noise_multiplier, sampling_rate=q, steps=steps),
)
subsampled_discrete_laplace_from_event = _subsampled_from_event(
    dp_accounting.dp_event.DiscreteLaplaceDpEvent,
    lambda e, q, steps: SubsampledDiscreteLaplace(
        noise_parameter=e.noise_parameter, sensitivity=e.sensitivity, sampling_rate=q, steps=steps
    ),
)


def _replace_one_subsampled_from_event(
    base: type, build: Callable[[Any, float, int], Mechanism | None]
) -> Callable[[dp_accounting.DpEvent, str], Mechanism | None]:
    """The ``from_dp_event`` hook of a ``steps``-fold Poisson-subsampled kind under replace-one whose base event type
    is ``base``: dp_accounting's REPLACE adjacency with sub-sampling (privacy_loss_mechanism.AdditiveNoisePrivacyLoss)
    reads ``PoissonSampledDpEvent(q, base)`` as (1-q) L(0) + q L(-D) vs (1-q) L(0) + q L(D), D one record's norm
    bound (its PLD accountant refuses it for Laplace noise; :mod:`gdpcore.kinds.replace_one` accounts it)."""

    def hook(event: dp_accounting.DpEvent, neighbouring: str) -> Mechanism | None:
        inner, steps = self_composed(event)
        if (
            neighbouring == "replace_one"
            and isinstance(inner, dp_accounting.PoissonSampledDpEvent)
            and isinstance(inner.event, base)
            and inner.sampling_probability > 0
        ):
            return build(inner.event, inner.sampling_probability, steps)
        return None

    return hook


replace_one_subsampled_laplace_from_event = _replace_one_subsampled_from_event(
    dp_accounting.LaplaceDpEvent,
    lambda e, q, steps: (
        ReplaceOneSubsampledLaplace(scale=e.noise_multiplier, sampling_rate=q, steps=steps)
        if e.noise_multiplier > 0
        else None
    ),
)
replace_one_subsampled_discrete_laplace_from_event = _replace_one_subsampled_from_event(
    dp_accounting.dp_event.DiscreteLaplaceDpEvent,
    lambda e, q, steps: (
        ReplaceOneSubsampledDiscreteLaplace(
            noise_parameter=e.noise_parameter, sensitivity=e.sensitivity, sampling_rate=q, steps=steps
        )
        if e.noise_parameter > 0
        else None
    ),
)


def kary_randomized_response_from_event(
    event: dp_accounting.DpEvent, neighbouring: str
) -> KaryRandomizedResponse | None:
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


def sampled_without_replacement_gaussian_from_event(
    event: dp_accounting.DpEvent, neighbouring: str
) -> SampledWithoutReplacementGaussian | None:
    inner, steps = self_composed(event)
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


def mixture_of_gaussians_from_event(event: dp_accounting.DpEvent, neighbouring: str) -> MixtureOfGaussians | None:
    """A ``MixtureOfGaussiansDpEvent`` (add/remove), or under replace-one a ``PoissonSampledDpEvent(q,
    GaussianDpEvent(s))``: dp_accounting's PLD accountant reads it as (1-q) N(0, s^2) + q N(-1, s^2) vs
    (1-q) N(0, s^2) + q N(1, s^2) (one record's norm bound 1, moved from +1 to -1; pld_privacy_accountant.py and
    privacy_loss_mechanism.AdditiveNoisePrivacyLoss, REPLACE adjacency): the replace-one mixture with sensitivities
    (0, 1) and probabilities (1 - q, q)."""
    inner, steps = self_composed(event)
    if (
        neighbouring == "replace_one"
        and isinstance(inner, dp_accounting.PoissonSampledDpEvent)
        and isinstance(inner.event, dp_accounting.GaussianDpEvent)
        and inner.event.noise_multiplier > 0
        and inner.sampling_probability > 0
    ):
        q = inner.sampling_probability
        return MixtureOfGaussians(
            standard_deviation=inner.event.noise_multiplier,
            sensitivities=floats_text([0.0, 1.0]),
            probabilities=floats_text([1.0 - q, q]),
            steps=steps,
            neighbouring=neighbouring,
        )
    if neighbouring == "add_remove" and isinstance(inner, dp_accounting.dp_event.MixtureOfGaussiansDpEvent):
        return MixtureOfGaussians(
            standard_deviation=inner.standard_deviation,
            sensitivities=floats_text(inner.sensitivities),
            probabilities=floats_text(inner.sampling_probs),
            steps=steps,
        )
    return None


def tree_aggregation_from_event(event: dp_accounting.DpEvent, neighbouring: str) -> TreeAggregation | None:
    if neighbouring == "add_remove" and isinstance(event, dp_accounting.SingleEpochTreeAggregationDpEvent):
        counts = event.step_counts if isinstance(event.step_counts, list | tuple) else [event.step_counts]
        if not counts or min(counts) < 0 or max(counts) < 1:
            return None
        return TreeAggregation(noise_multiplier=event.noise_multiplier, steps=int(max(counts)))
    return None


def truncated_subsampled_gaussian_from_event(
    event: dp_accounting.DpEvent, neighbouring: str
) -> TruncatedSubsampledGaussian | None:
    inner, steps = self_composed(event)
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


def _refuse_randomized_response_under_replace_special(event: dp_accounting.DpEvent) -> None:
    """dp_accounting's REPLACE_SPECIAL randomized response compares a respondent's answer with a uniformly random one
    (privacy_loss_distribution.from_randomized_response), a pair no gdpcore kind states: refused, naming it."""
    stack = [event]
    while stack:
        e = stack.pop()
        if isinstance(e, dp_accounting.RandomizedResponseDpEvent):
            raise UnsupportedMechanismError(
                "RandomizedResponseDpEvent cannot be accounted for under REPLACE_SPECIAL (dp_accounting compares the "
                "answer with a uniformly random one there): state it under replace_one"
            )
        if isinstance(e, dp_accounting.ComposedDpEvent):
            stack.extend(e.events)
        elif hasattr(e, "event") and isinstance(e.event, dp_accounting.DpEvent):
            stack.append(e.event)


def merge_zcdp_statements(event: dp_accounting.DpEvent) -> dp_accounting.DpEvent:
    """``event`` with the zCDP statements of each composition merged into one: (xi1, rho1)- and (xi2, rho2)-zCDP
    compose to (xi1 + xi2, rho1 + rho2)-zCDP (Bun & Steinke 2016 Lemma 2.3; their RDP bounds add), and a
    ``SelfComposedDpEvent`` of one to (n xi, n rho). One statement of the composed parameters is what dp_accounting's
    RDP accountant converts; composing the statements' worst-case curves instead loses at every composition (each
    curve is the best bound over all mechanisms satisfying one statement, attained by different ones at different
    epsilons) - 36.56 against 31.13 at delta = 1e-5 for ten (0.1, 1)-zCDP statements."""

    def flat(e: dp_accounting.DpEvent, times: int, depth: int) -> list[tuple[dp_accounting.DpEvent, int]]:
        if depth > MAX_NESTING:
            raise ValueError(f"event is nested more than {MAX_NESTING} levels deep: refused")
        if isinstance(e, dp_accounting.SelfComposedDpEvent):
            return flat(e.event, times * e.count, depth + 1)
        if isinstance(e, dp_accounting.ComposedDpEvent):
            return [part for sub in e.events for part in flat(sub, times, depth + 1)]
        return [(e, times)]

    parts = flat(event, 1, 0)
    statements = [(e, n) for e, n in parts if isinstance(e, dp_accounting.ZCDpEvent)]
    if len(statements) < 2 and not any(n > 1 for _, n in statements):
        return event
    merged = dp_accounting.ZCDpEvent(
        rho=math.fsum(e.rho * n for e, n in statements), xi=math.fsum(e.xi * n for e, n in statements)
    )
    rest = [
        e if n == 1 else dp_accounting.SelfComposedDpEvent(e, n)
        for e, n in parts
        if not isinstance(e, dp_accounting.ZCDpEvent)
    ]
    return dp_accounting.ComposedDpEvent([*rest, merged]) if rest else merged


def mechanism_from_dp_event(
    event: dp_accounting.DpEvent, *, neighbouring: str = "add_remove", _depth: int = 0
) -> Mechanism:
    """The mechanism a dp_accounting ``DpEvent`` describes (the inverse of :func:`to_dp_event`).

    DpEvents state noise relative to one record's norm bound and carry no neighbouring relation (see
    :mod:`gdpcore.events`): the result has the given ``neighbouring``. ``"replace_special"`` is dp_accounting's
    ``REPLACE_SPECIAL`` (a record replaced by a special, zero record; Kairouz et al. 2021, arXiv:2103.00039,
    Def. 1.1): its accountants account every event they take under it exactly as under ``ADD_OR_REMOVE_ONE`` (the
    record's contribution goes to zero: ``from_gaussian_mechanism`` says so, and its RDP accountant requires it for
    ``SingleEpochTreeAggregationDpEvent``) except randomized response, whose special record answers uniformly; so
    the result is stated under ``"add_remove"``, and randomized response under it is refused. zCDP statements in a
    composition are merged into one (:func:`merge_zcdp_statements`). Each leaf kind recognises its own events first
    (a ``SelfComposedDpEvent`` of a ``PoissonSampledDpEvent`` of a Gaussian is one :class:`SubsampledGaussian`); other
    ``SelfComposedDpEvent`` / ``ComposedDpEvent`` become :class:`SelfComposed` / :class:`Composed` (``NoOpDpEvent``
    parts dropped). An event no kind describes raises :class:`UnsupportedMechanismError` naming its type.
    """
    if not isinstance(event, dp_accounting.DpEvent):
        raise ValueError(f"event must be a dp_accounting DpEvent, got {bounded_repr(event)}")
    if _depth > MAX_NESTING:  # each level recurses here and in every later walk of the tree
        raise ValueError(f"event is nested more than {MAX_NESTING} levels deep: refused")
    if neighbouring == "replace_special":
        _refuse_randomized_response_under_replace_special(event)
        neighbouring = "add_remove"
    if neighbouring not in ("add_remove", "replace_one"):
        raise ValueError(
            f"neighbouring must be 'add_remove', 'replace_one' or 'replace_special', got {bounded_repr(neighbouring)}"
        )
    if isinstance(event, dp_accounting.ComposedDpEvent | dp_accounting.SelfComposedDpEvent):
        event = merge_zcdp_statements(event)
    for name in leaf_kinds():
        hook = get(name).from_dp_event
        if callable(hook) and not isinstance(hook, Unsupported):
            m = hook(event, neighbouring)
            if m is not None:
                return m
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        if isinstance(event.event, dp_accounting.NoOpDpEvent):
            raise UnsupportedMechanismError("NoOpDpEvent: a release without privacy cost has no mechanism to report")
        inner = mechanism_from_dp_event(event.event, neighbouring=neighbouring, _depth=_depth + 1)
        return SelfComposed(mechanism=inner, count=event.count)
    if isinstance(event, dp_accounting.ComposedDpEvent):
        kept = [e for e in event.events if not isinstance(e, dp_accounting.NoOpDpEvent)]
        if not kept:
            raise UnsupportedMechanismError("ComposedDpEvent of NoOpDpEvents only: nothing to report")
        parts = tuple(mechanism_from_dp_event(e, neighbouring=neighbouring, _depth=_depth + 1) for e in kept)
        return Composed(mechanisms=parts)
    raise UnsupportedMechanismError(
        f"{type(event).__name__} cannot be accounted for under {bounded_repr(neighbouring)}: no registered mechanism kind "
        f"describes {bounded_repr(event)}"
    )
