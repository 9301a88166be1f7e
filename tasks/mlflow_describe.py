"""From training to the registry: the ``dp.*`` description of a DP-SGD run, written from its Opacus accountant onto the
MLflow run or model version, in exactly the vocabulary the audit reads (:mod:`tasks.mlflow_registry`), so a model
trained with it is auditable by ``gdp audit --mlflow-uri`` with no hand-written tags.

What is written (all strings, MLflow's contract)
    * the mechanism, from the accountant's ``history`` (``[(noise_multiplier, sample_rate, num_steps), ...]``, the
      same in gdp-audit's and Opacus's RDP / PRV / GDP accountants): one phase as ``dp.noise_multiplier``,
      ``dp.sampling_rate``, ``dp.steps`` (floats written with ``repr``, so they read back bit for bit); several
      phases, or ``include_history=True``, as ``dp.opacus_history`` (the history as JSON);
    * ``dp.dataset_size`` and ``dp.delta``: what the accountant cannot know (the number of privacy units, and the
      delta the privacy statement is made at: a number or ``"1/N^1.1"``);
    * ``dp.sampler`` (``poisson``, ``shuffle`` for ``make_private(poisson_sampling=False)``, or ``fixed``; the
      gdp-audit accountant's own ``sampler`` when not given), ``dp.neighbouring = add_remove`` (what Opacus
      accounts), ``dp.privacy_unit`` when given, and ``dp.source`` saying where the description came from.

The description is checked with the audit's own reader (:func:`tasks.mlflow_registry.description_to_manifest`) before
anything is written: a description the audit would refuse is refused here, with the audit's message, and nothing is
written. Mechanism keys of another form left on the target by an earlier description (e.g. ``dp.noise_multiplier``
when the history is now written as ``dp.opacus_history``) are deleted, because the audit refuses a target described
twice; every other key (the owner's claim ``dp.epsilon``, notes, non-``dp.*`` tags) is left as it is.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tasks.mlflow_registry import DP_PREFIX, NotAuditable, description_to_manifest

__all__ = ["MAX_TAG_CHARS", "MECHANISM_KEYS", "describe_mlflow", "dp_description"]

MAX_TAG_CHARS = 5000
"""MLflow's tag value limit on model versions (the smaller of run and model-version tags on common backends)."""

MECHANISM_KEYS: tuple[str, ...] = tuple(
    DP_PREFIX + k
    for k in (
        "noise_multiplier",
        "sampling_rate",
        "batch_size",
        "steps",
        "epochs",
        "opacus_history",
        "dp_event",
        "tf_privacy",
        "phases",
        "gdpcore",
    )
)
"""The keys that describe the mechanism (tasks.mlflow_registry's table): one form per target."""


def _history_of(accountant: Any, history: Any) -> list[list[Any]]:
    if (accountant is None) == (history is None):
        raise ValueError("give the accountant or its history (one of them)")
    if history is None:
        history = getattr(accountant, "history", None)
        if history is None:
            raise ValueError(f"accountant {type(accountant).__name__} has no history (an Opacus accountant has)")
    if isinstance(history, Mapping):  # a state_dict
        history = history.get("history")
    if isinstance(history, str | bytes) or not isinstance(history, Sequence) or not history:
        raise ValueError("the accountant's history is empty: it recorded no step, so there is nothing to describe")
    return [[_plain(x) for x in entry] if isinstance(entry, Sequence) else [entry] for entry in history]


def _plain(x: Any) -> Any:
    """numpy / torch scalars as Python numbers (their repr and JSON are not the numbers' text); anything else as is,
    for the audit's reader to refuse by name."""
    if isinstance(x, bool):
        return x
    if isinstance(x, numbers.Integral):
        return int(x)
    if isinstance(x, numbers.Real):
        return float(x)
    return x


def _accountant_name(accountant: Any) -> str:
    mech = getattr(accountant, "mechanism", None)
    try:
        name = mech() if callable(mech) else mech
    except TypeError:
        name = None
    return str(name) if name else "unknown"


def dp_description(
    accountant: Any = None,
    *,
    history: Any = None,
    dataset_size: int,
    delta: float | str,
    sampler: str | None = None,
    privacy_unit: str | None = None,
    include_history: bool = False,
) -> dict[str, str]:
    """The ``dp.*`` tags describing the run the accountant (or the ``history``) recorded; checked with the audit's
    reader (raises ValueError with its message, naming the key, when the audit could not read it)."""
    phases = _history_of(accountant, history)
    own_sampler = getattr(accountant, "sampler", None)
    if sampler is not None and own_sampler is not None and sampler != own_sampler:
        raise ValueError(f"sampler {sampler!r} differs from the accountant's sampler {own_sampler!r}")
    sampler = sampler or own_sampler or "poisson"
    if isinstance(dataset_size, bool) or not isinstance(dataset_size, int):
        raise ValueError(f"dataset_size must be an integer, got {dataset_size!r}"[:200])
    if isinstance(delta, bool) or not isinstance(delta, int | float | str):
        raise ValueError(f"delta must be a number or '1/N^c', got {delta!r}"[:200])
    name = "history" if accountant is None else f"Opacus {_accountant_name(accountant)} accountant"
    tags: dict[str, str] = {}
    if len(phases) == 1 and not include_history and len(phases[0]) == 3:
        sigma, q, steps = phases[0]
        tags |= {"dp.noise_multiplier": repr(sigma), "dp.sampling_rate": repr(q), "dp.steps": repr(steps)}
    else:
        text = json.dumps(phases, allow_nan=False, default=repr)
        if len(text) > MAX_TAG_CHARS:
            raise ValueError(
                f"dp.opacus_history: the history's JSON has {len(text):,} characters ({len(phases):,} phases), over "
                f"MLflow's {MAX_TAG_CHARS:,}-character tag limit"
            )
        tags["dp.opacus_history"] = text
    tags |= {
        "dp.dataset_size": str(dataset_size),
        "dp.delta": delta if isinstance(delta, str) else repr(float(delta)),
        "dp.sampler": sampler,
        "dp.neighbouring": "add_remove",
        "dp.source": f"{name}, {len(phases)} phase(s), written by gdp-audit (tasks.mlflow_describe)",
    }
    if privacy_unit is not None:
        tags["dp.privacy_unit"] = privacy_unit
    try:
        description_to_manifest(tags, name="described", version=1, where="tasks.mlflow_describe")
    except NotAuditable as exc:
        raise ValueError(exc.message) from None
    return tags


def describe_mlflow(
    tracking_uri: str,
    description: Mapping[str, str],
    *,
    run_id: str | None = None,
    model_name: str | None = None,
    version: str | int | None = None,
) -> list[str]:
    """Write ``description`` (:func:`dp_description`) as tags of the run ``run_id`` and/or the model version
    ``model_name``/``version``; returns the targets written ("run <id>", "<name>:<version>"). Every target is looked
    up before any tag is written (an unknown one is a ValueError naming it, and nothing is written)."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    if run_id is None and model_name is None:
        raise ValueError("give run_id and/or model_name with version: where to write the description")
    if (model_name is None) != (version is None):
        raise ValueError("model_name and version go together")
    bad = [k for k in description if not k.startswith(DP_PREFIX)]
    if bad:
        raise ValueError(f"only dp.* keys are written, got {bad[0][:100]!r}")
    client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    # (label, existing tags, set(key, value), delete(key)) per target, all looked up before any write
    targets: list[tuple[str, dict[str, str], Callable[[str, str], Any], Callable[[str], Any]]] = []
    try:
        if run_id is not None:
            rid = run_id
            targets.append(
                (
                    f"run {rid}",
                    dict(client.get_run(rid).data.tags),
                    lambda k, v: client.set_tag(rid, k, v),
                    lambda k: client.delete_tag(rid, k),
                )
            )
        if model_name is not None:
            name, ver = model_name, str(version)
            targets.append(
                (
                    f"{name}:{ver}",
                    dict(client.get_model_version(name, ver).tags or {}),
                    lambda k, v: client.set_model_version_tag(name, ver, k, v),
                    lambda k: client.delete_model_version_tag(name, ver, k),
                )
            )
    except MlflowException as exc:
        what = f"run {run_id}" if not targets and run_id is not None else f"model version {model_name}:{version}"
        raise ValueError(f"{what} not found at the tracking server: {str(exc)[:200]}") from None
    for _label, existing, set_tag, delete_tag in targets:
        for key, value in description.items():
            if existing.get(key) != value:
                set_tag(key, value)
        for key in MECHANISM_KEYS:
            if key in existing and key not in description:
                delete_tag(key)
    return [t[0] for t in targets]
