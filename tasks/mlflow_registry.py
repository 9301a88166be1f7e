"""A live MLflow Model Registry as an audit source: each model version's training description, read where the
training script or the model owner already wrote it, becomes a registry manifest (:class:`tasks.registry.ModelManifest`)
and is audited, carded, tagged and stored exactly like a manifest-audited model version.

Where the description comes from
--------------------------------
Each key is looked up, first hit wins, in (1) the model version's tags, (2) the source run's params, (3) the source
run's tags. Only ``dp.*`` keys are read from tags; the unprefixed framework names of the second table are read from run
params only (where Opacus / TF-Privacy scripts log them), and only when the run has no ``dp.*`` key of the same
meaning. Values are MLflow strings, parsed strictly (``"256"`` is an integer, ``"256.5"`` is not a batch size).

====================================  ========================================================================
key                                   meaning (manifest field it fills)
====================================  ========================================================================
``dp.noise_multiplier``               sigma = noise std / clipping norm (``mechanism.dpsgd.noise_multiplier``)
``dp.sampling_rate``                  Poisson rate q per step, or instead
``dp.batch_size`` + ``dp.dataset_size``  q = batch_size / dataset_size (expected batch size under Poisson sampling)
``dp.steps`` or ``dp.epochs``         steps; epochs become epochs x ceil(N / batch_size) (or ceil(1/q)) steps
                                      (Opacus: int(epochs / q), same when 1/q is an integer; docs/references.md C-4)
``dp.dataset_size``                   N, the number of privacy units (needed by a ``1/N^c`` delta, by
                                      ``dp.batch_size`` and by TF-Privacy's default ``number_of_examples``)
``dp.delta``                          delta: a number or ``1/N^1.1``
``dp.neighbouring``                   ``add_remove`` (default) or ``replace_one``
``dp.sampler``                        ``poisson`` (default, what is accounted), ``shuffle``, ``fixed``, ``cyclic``
                                      or ``balls_in_bins`` (the last two accounted by their own kinds)
``dp.privacy_unit``                   what one record is (default ``example``)
``dp.epsilon`` + ``dp.accountant``    optional published claim (checked at ``dp.claim_delta``, default the delta)
``dp.opacus_history``                 JSON: an Opacus accountant's ``history`` or ``state_dict()``
``dp.dp_event``                       JSON: a dp_accounting ``DpEvent`` (:func:`gdpcore.events.dp_event_from_dict`)
``dp.tf_privacy``                     JSON: TF-Privacy's statement parameters (``batch_size``, ``epochs``,
                                      ``noise_multiplier``, ``used_microbatching``, Keras ``shuffle``, ...;
                                      TF-Privacy's step count)
``dp.phases`` / ``dp.gdpcore``        JSON: the manifest's ``phases`` list / a gdpcore mechanism dict
``dp.tuning``                         JSON: the version is the best of K runs, the manifest's ``tuning`` block
                                      (``{"distribution": "geometric", "mean": 10}``; Papernot & Steinke 2022)
``dp.source``, ``dp.description``     free text (where the numbers come from; notes) shown on the card
====================================  ========================================================================

Framework parameter names accepted without the prefix (run params only):

======================  ==================  ===============================================================
logged as               read as             why it is unambiguous
======================  ==================  ===============================================================
``noise_multiplier``    dp.noise_multiplier Opacus ``make_private`` and TF-Privacy optimizers: std / clip norm
``sample_rate``         dp.sampling_rate    Opacus's Poisson rate; only next to ``noise_multiplier`` and only
                                            a value in (0, 1] (an audio model's 16000 Hz is refused, named)
``batch_size``          dp.batch_size       the logical batch of both frameworks; needs ``dp.dataset_size``
``epochs``              dp.epochs           passes over the data (Opacus / TF-Privacy ``epochs``)
``target_delta``        dp.delta            Opacus ``make_private_with_epsilon(target_delta=...)``
``poisson_sampling``    dp.sampler          Opacus ``make_private(poisson_sampling=...)``: False = shuffled
``max_grad_norm``,      (read, not used)    the clipping norm: sigma is already relative to it
``l2_norm_clip``
======================  ==================  ===============================================================

Not accepted unprefixed, because the same name means something else in ordinary training scripts: ``epsilon``
(Adam's epsilon), ``delta`` (Huber loss), ``steps`` / ``max_steps`` (scheduler, logging or warm-up steps),
``dataset_size`` / ``num_examples`` / ``n_train`` (whole dataset or training split?), ``target_epsilon`` (a target the
calibration met under an accountant the run does not name, not a claim), ``accountant``. A run that logs
``num_microbatches`` different from ``batch_size`` (TF-Privacy microbatching: the effective noise multiplier is
halved) is not audited from unprefixed names: describe it with ``dp.tf_privacy`` (``used_microbatching``).

``dp.sampler``: ``shuffle`` (and ``fixed`` under add/remove) keep the Poisson-accounted numbers but label every one of
them *estimate*, with the reason, in the lake, card and tags (:mod:`tasks.registry`, sampler honesty); an absent
sampler means ``poisson``, exactly as for a YAML manifest.

A version whose description lacks a required key is *not auditable*: the reason names every missing key, e.g.
``missing dp.noise_multiplier, dp.delta``; it is listed in the run summary and the ``models`` view and tagged
``privacy.status`` in MLflow, and the run does not fail.

Write-back: ``privacy.*`` tags always (unchanged values are not rewritten); the privacy card in the version's
description (its own marked section, the owner's text kept) and as source-run artifacts only where the owner opted in
with the tag ``gdp_audit.card = true`` on the model version or on the registered model.

Production: the version holding the alias ``production`` (configurable) of its registered model, else the newest
version in the legacy ``Production`` stage. Aliases are read with ``get_registered_model`` (``search_*`` calls return
no aliases in MLflow 2.x-3.x, mlflow/mlflow#16734) and tags with ``get_model_version`` (search results lack tags on
some backends, mlflow/mlflow-export-import#244).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tasks.registry import _POWER, ManifestError, ModelManifest, _validate, is_valid_name

__all__ = [
    "CARD_OPT_IN_TAG",
    "DP_PREFIX",
    "FRAMEWORK_PARAMS",
    "NotAuditable",
    "RegistryVersion",
    "description_to_manifest",
    "error_line",
    "lake_model_name",
    "mlflow_registry_label",
    "public_uri",
    "read_mlflow_registry",
    "unreadable_reason",
]

DP_PREFIX = "dp."
CARD_OPT_IN_TAG = "gdp_audit.card"
FRAMEWORK_PARAMS: dict[str, str] = {
    "noise_multiplier": "dp.noise_multiplier",
    "sample_rate": "dp.sampling_rate",
    "batch_size": "dp.batch_size",
    "epochs": "dp.epochs",
    "target_delta": "dp.delta",
    "poisson_sampling": "dp.sampler",
}
"""Unprefixed run-param names (Opacus / TF-Privacy) read as the ``dp.*`` key they mean; see the module table."""

_SCALARS = (
    "noise_multiplier",
    "sampling_rate",
    "batch_size",
    "dataset_size",
    "steps",
    "epochs",
    "delta",
    "neighbouring",
    "sampler",
    "privacy_unit",
    "epsilon",
    "accountant",
    "claim_delta",
    "source",
    "description",
)
_JSON_FORMS = ("opacus_history", "dp_event", "tf_privacy", "phases", "gdpcore")
DP_KEYS: tuple[str, ...] = tuple(DP_PREFIX + k for k in (*_SCALARS, *_JSON_FORMS, "tuning"))


MAX_JSON_CHARS = 1_000_000
"""Longest JSON description read (MLflow caps tag values at 5,000 and params at 6,000 characters on most backends)."""


class NotAuditable(ValueError):
    """A description gdp-audit cannot audit; ``keys`` names the missing or invalid ``dp.*`` key(s)."""

    def __init__(self, keys: Sequence[str], message: str):
        self.keys = list(keys)
        self.message = message
        super().__init__(message)


# -- parsing --------------------------------------------------------------------------------------------------------
_INT = re.compile(r"^[+]?\d+$")


def _int(key: str, text: str) -> int:
    t = text.strip()
    if not _INT.match(t):
        raise NotAuditable([key], f"{key}={_brief(text)} is not an integer")
    return int(t)


def _float(key: str, text: str) -> float:
    try:
        x = float(text.strip())
    except ValueError:
        raise NotAuditable([key], f"{key}={_brief(text)} is not a number") from None
    if not math.isfinite(x):
        raise NotAuditable([key], f"{key}={_brief(text)} is not a finite number")
    return x


def _brief(text: str) -> str:
    """A tag value (any size) for an error message, bounded."""
    from gdpcore._validation import bounded_repr  # only on the error path: importing gdpcore takes seconds

    return bounded_repr(text)


def _json(key: str, text: str) -> Any:
    if len(text) > MAX_JSON_CHARS:
        raise NotAuditable([key], f"{key} has {len(text):,} characters (at most {MAX_JSON_CHARS:,})")
    try:
        return json.loads(text)
    except ValueError as exc:
        raise NotAuditable([key], f"{key} is not valid JSON ({exc})") from None
    except RecursionError:
        raise NotAuditable([key], f"{key} is nested too deeply") from None


def _delta(key: str, text: str) -> Any:
    t = text.strip()
    return t if "N" in t else _float(key, t)


def _sampler(key: str, text: str) -> str:
    t = text.strip().lower()
    if key == "poisson_sampling":  # Opacus' flag, mapped by gdpcore.adapters.opacus_sampler
        if t not in ("true", "1", "false", "0"):
            raise NotAuditable(["poisson_sampling"], f"poisson_sampling={text!r} is neither True nor False")
        from gdpcore.adapters import opacus_sampler  # here: gdpcore takes seconds to import

        return opacus_sampler(t in ("true", "1"))
    from gdpcore.adapters import SAMPLERS

    if t not in SAMPLERS:
        raise NotAuditable([key], f"{key}={text!r}: give one of {', '.join(SAMPLERS)}")
    return t


# manifest field path (as tasks.registry names it) -> the dp.* key a user fixes
_FIELD_TO_KEY = {
    "mechanism.dpsgd.noise_multiplier": "dp.noise_multiplier",
    "mechanism.dpsgd.sampling_rate": "dp.sampling_rate",
    "mechanism.dpsgd.batch_size": "dp.batch_size",
    "mechanism.dpsgd.steps": "dp.steps",
    "mechanism.dpsgd.epochs": "dp.epochs",
    "mechanism.dpsgd": "dp.noise_multiplier",
    "mechanism.opacus_history": "dp.opacus_history",
    "mechanism.dp_event": "dp.dp_event",
    "mechanism.tf_privacy": "dp.tf_privacy",
    "mechanism.phases": "dp.phases",
    "mechanism.gdpcore": "dp.gdpcore",
    "dataset_size": "dp.dataset_size",
    "delta": "dp.delta",
    "neighbouring": "dp.neighbouring",
    "privacy_unit": "dp.privacy_unit",
    "claimed.epsilon": "dp.epsilon",
    "claimed.delta": "dp.claim_delta",
    "claimed.accountant": "dp.accountant",
    "sampler": "dp.sampler",
    "tuning": "dp.tuning",
}


def _key_of(field: str) -> str:
    for prefix in sorted(_FIELD_TO_KEY, key=len, reverse=True):
        if field == prefix or field.startswith(prefix + ".") or field.startswith(prefix + "["):
            return _FIELD_TO_KEY[prefix]
    return field


def description_to_manifest(
    description: dict[str, str], *, name: str, version: int, where: str = "mlflow"
) -> ModelManifest:
    """The manifest a ``dp.*`` description (already merged, values as MLflow strings) stands for.

    Raises :class:`NotAuditable` naming every missing key, or the invalid key and value. Validation is
    :mod:`tasks.registry`'s own (the same checks and mechanism build as a YAML manifest)."""
    d = {k.removeprefix(DP_PREFIX): v for k, v in description.items() if k.startswith(DP_PREFIX)}
    forms = [f for f in _JSON_FORMS if f in d]
    if len(forms) > 1:
        raise NotAuditable(
            [DP_PREFIX + f for f in forms], f"give one of {', '.join(DP_PREFIX + f for f in forms)}, not several"
        )
    missing: list[str] = []
    if not forms:
        if "noise_multiplier" not in d:
            missing.append("dp.noise_multiplier")
        if "sampling_rate" not in d and "batch_size" not in d:
            missing.append("dp.sampling_rate (or dp.batch_size with dp.dataset_size)")
        if "steps" not in d and "epochs" not in d:
            missing.append("dp.steps (or dp.epochs)")
    if "dataset_size" not in d and (("N" in d.get("delta", "")) or (not forms and "batch_size" in d)):
        needs = "delta" if "N" in d.get("delta", "") else "batch_size"
        missing.append(f"dp.dataset_size (needed by dp.{needs}={_brief(d[needs])})")
    if "delta" not in d:
        missing.append("dp.delta")
    if missing:
        what = "no DP description" if not d else "incomplete DP description"
        raise NotAuditable([m.split(" ")[0] for m in missing], f"{what}: missing {', '.join(missing)}")

    data: dict[str, Any] = {
        "name": name,
        "version": version,
        "delta": _delta("dp.delta", d["delta"]),
    }
    if "dataset_size" in d:
        data["dataset_size"] = _int("dp.dataset_size", d["dataset_size"])
    for key in ("privacy_unit", "neighbouring", "source", "description"):
        if key in d:
            data[key] = d[key].strip()
    if forms:
        form = forms[0]
        data["mechanism"] = {form: _json(DP_PREFIX + form, d[form])}
    else:
        sgd: dict[str, Any] = {"noise_multiplier": _float("dp.noise_multiplier", d["noise_multiplier"])}
        if "sampling_rate" in d:
            sgd["sampling_rate"] = _float("dp.sampling_rate", d["sampling_rate"])
        if "batch_size" in d:
            sgd["batch_size"] = _int("dp.batch_size", d["batch_size"])
        if "steps" in d:
            sgd["steps"] = _int("dp.steps", d["steps"])
        if "epochs" in d:
            sgd["epochs"] = _float("dp.epochs", d["epochs"])
        data["mechanism"] = {"dpsgd": sgd}
    if "sampler" in d:
        data["sampler"] = _sampler("dp.sampler", d["sampler"])
    if "tuning" in d:  # best of K runs: the manifest's tuning block
        data["tuning"] = _json("dp.tuning", d["tuning"])
    if "epsilon" in d:
        claim_delta = _float("dp.claim_delta", d["claim_delta"]) if "claim_delta" in d else None
        data["claimed"] = {
            "epsilon": _float("dp.epsilon", d["epsilon"]),
            "accountant": d.get("accountant", "unspecified"),
        }
        if claim_delta is not None:
            data["claimed"]["delta"] = claim_delta
    elif "accountant" in d or "claim_delta" in d:
        raise NotAuditable(["dp.epsilon"], "dp.accountant / dp.claim_delta without dp.epsilon: missing dp.epsilon")
    if "claimed" in data and "delta" not in data["claimed"]:  # the claim is at the declared delta
        pol = data["delta"]
        if isinstance(pol, str):
            m = _POWER.match(pol)
            if not m:
                raise NotAuditable(["dp.delta"], f"dp.delta={pol!r}: give a number or '1/N^c'")
            pol = float(data["dataset_size"]) ** (-float(m.group(1)))
        data["claimed"]["delta"] = pol
    try:
        return _validate(data, Path(where), "")
    except ManifestError as exc:
        key = _key_of(exc.field)
        raise NotAuditable([key], f"{key}: {exc.message}") from None
    except RecursionError:
        raise NotAuditable(
            [DP_PREFIX + (forms or ["noise_multiplier"])[0]], "the mechanism is nested too deeply"
        ) from None


# -- names ----------------------------------------------------------------------------------------------------------
def lake_model_name(mlflow_name: str) -> str:
    """The model's name in the lake and the report: the MLflow name when it is a valid path component, else a slug of
    it plus 8 hex digits of its hash (two names never share a slug)."""
    if is_valid_name(mlflow_name):
        return mlflow_name
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", mlflow_name).strip("._-")[:100] or "model"
    return f"{slug}-{hashlib.sha256(mlflow_name.encode()).hexdigest()[:8]}"


def public_uri(uri: str) -> str:
    """The tracking URI without credentials or query (``https://user:token@host`` -> ``https://host``)."""
    p = urllib.parse.urlsplit(uri)
    if not p.hostname:  # sqlite:///path, file:///path, databricks: nothing secret before the path
        return uri.split("?", 1)[0]
    netloc = p.hostname
    if p.port:
        netloc += f":{p.port}"
    return urllib.parse.urlunsplit((p.scheme, netloc, p.path, "", ""))


def mlflow_registry_label(uri: str) -> str:
    """The registry's name in the lake (``registry=<label>``): ``mlflow-`` and the tracking server's address."""
    p = urllib.parse.urlsplit(public_uri(uri))
    raw = (p.netloc + p.path) or p.scheme
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", raw).strip("._-")[:100]
    return f"mlflow-{slug}" if slug else "mlflow"


# -- reading the registry -------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class RegistryVersion:
    """One registered model version as the audit sees it (manifest set, or the reason it is not auditable)."""

    model: str  # lake name (see lake_model_name)
    version: int
    mlflow_model: str
    mlflow_version: str
    production: bool
    description_source: str  # "mlflow:<uri>#<model>/<version>"
    description_from: str  # e.g. "model-version tags", "run <id> params", "model-version tags + run <id> params"
    manifest: ModelManifest | None
    not_auditable: str | None = None
    missing_keys: tuple[str, ...] = ()
    card_opt_in: bool = False
    existing_tags: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.model}:{self.version}"


def _is_true(v: str | None) -> bool:
    return v is not None and v.strip().lower() in ("true", "1", "yes")


def merge_description(
    version_tags: dict[str, str], run_params: dict[str, str], run_tags: dict[str, str]
) -> tuple[dict[str, str], list[str], str | None]:
    """(dp.* description, where it came from, reason unprefixed names were refused or None): version tags, then run
    params (``dp.*`` and :data:`FRAMEWORK_PARAMS`), then run tags, first hit per key."""
    desc: dict[str, str] = {}
    origin: dict[str, str] = {}
    for place, items in (("model-version tags", version_tags), ("run params", run_params), ("run tags", run_tags)):
        for k, v in items.items():
            if k.startswith(DP_PREFIX) and k not in desc:
                desc[k] = v
                origin[k] = place
    refused = None
    framework = {dp: (name, run_params[name]) for name, dp in FRAMEWORK_PARAMS.items() if name in run_params}
    if framework:
        mb, bs = run_params.get("num_microbatches"), run_params.get("batch_size")
        if "sample_rate" in run_params and "noise_multiplier" not in run_params and "dp.noise_multiplier" not in desc:
            framework.pop("dp.sampling_rate")  # not a DP-SGD run's sampling rate (e.g. audio sample_rate)
        if mb is not None and mb.strip() not in ("", "None", "none") and mb.strip() != (bs or "").strip():
            refused = (
                f"num_microbatches={mb} (batch_size={bs}): TF-Privacy microbatching is not read from unprefixed "
                "params; describe the run with dp.tf_privacy (used_microbatching)"
            )
        else:
            for dp, (_name, value) in framework.items():
                if dp in desc or (dp == "dp.sampling_rate" and "dp.batch_size" in desc):
                    continue
                if dp == "dp.batch_size" and "dp.sampling_rate" in desc:
                    continue
                if dp == "dp.sampling_rate":
                    try:
                        q = float(value)
                    except ValueError:
                        q = -1.0
                    if not 0 < q <= 1:
                        refused = f"sample_rate={value} is not a sampling rate in (0, 1]; give dp.sampling_rate"
                        continue
                if dp == "dp.sampler":
                    value = _sampler("poisson_sampling", value)
                desc[dp] = value
                origin[dp] = "run params"
    places = sorted(set(origin.values()), key=lambda p: (not p.startswith("model"), p))
    return desc, places, refused


def _production_versions(rm: Any, versions: Sequence[Any], alias: str) -> set[str]:
    aliases = getattr(rm, "aliases", None) or {}
    if alias in aliases:
        return {str(aliases[alias])}
    staged = [mv for mv in versions if (getattr(mv, "current_stage", "") or "").lower() == "production"]
    return {str(max(staged, key=lambda mv: int(mv.version)).version)} if staged else set()


def _version(
    client: Any,
    tracking_uri: str,
    desc: dict[str, str],
    refused: str | None,
    run_id: str | None,
    where: str,
    common: dict[str, Any],
) -> RegistryVersion:
    """One version's :class:`RegistryVersion`: its manifest, or why it is not auditable. Everything done for one
    version happens under this guard, so one hostile description (a ``dp.dp_event`` nested 400 levels, which
    validates but cannot be hashed) is that version's reason, one line, and never stops the registry's audit."""
    try:
        manifest = description_to_manifest(desc, name=common["model"], version=common["version"], where=where)
        from tasks.evidence_mlflow import with_mlflow_evidence  # canary scores artifact -> evidence

        manifest = with_mlflow_evidence(client, manifest, run_id, desc, tracking_uri)
        manifest.spec_hash()  # the audit keys the version by it (tasks.audit.audit_key): keyable here, or not auditable
    except NotAuditable as exc:
        reason = exc.message + (f"; {refused}" if refused else "")
        return RegistryVersion(manifest=None, not_auditable=reason, missing_keys=tuple(exc.keys), **common)
    except Exception as exc:  # one unreadable description must not stop the registry's audit
        return RegistryVersion(manifest=None, not_auditable=unreadable_reason(exc), **common)
    return RegistryVersion(manifest=manifest, **common)


def error_line(exc: BaseException, limit: int = 300) -> str:
    """``exc`` as one bounded line: its type, then its message with every run of whitespace made one space."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:limit]}"


def unreadable_reason(exc: BaseException) -> str:
    """The one-line not-auditable reason of a description that failed with ``exc``."""
    return f"the description cannot be read: {error_line(exc)}"


def read_mlflow_registry(
    tracking_uri: str, *, models: Sequence[str] | None = None, production_alias: str = "production"
) -> list[RegistryVersion]:
    """Every version of the registered models at ``tracking_uri`` (or of ``models`` only), description read and
    turned into a manifest, or marked not auditable with the key(s) missing. Raises ``ValueError`` for a model
    named in ``models`` that is not registered."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    if models:
        registered = []
        for name in dict.fromkeys(models):
            try:
                registered.append(client.get_registered_model(name))
            except MlflowException as exc:
                raise ValueError(f"--model {name!r}: not a registered model at {public_uri(tracking_uri)}") from exc
    else:
        registered, token = [], None
        while True:
            page = client.search_registered_models(max_results=1000, page_token=token)
            registered.extend(client.get_registered_model(rm.name) for rm in page)  # aliases: get, not search
            token = page.token
            if not token:
                break
    uri_pub = public_uri(tracking_uri)
    runs: dict[str, Any] = {}
    out: list[RegistryVersion] = []
    for rm in sorted(registered, key=lambda r: r.name):
        listed: list[Any] = []
        token = None
        safe = rm.name.replace("'", "\\'")
        while True:
            versions_page = client.search_model_versions(f"name='{safe}'", max_results=10000, page_token=token)
            listed.extend(versions_page)
            token = versions_page.token
            if not token:
                break
        versions = [client.get_model_version(rm.name, mv.version) for mv in listed]  # tags, reliably
        prod = _production_versions(rm, versions, production_alias)
        rm_opt_in = _is_true((getattr(rm, "tags", None) or {}).get(CARD_OPT_IN_TAG))
        lake_name = lake_model_name(rm.name)
        for mv in sorted(versions, key=lambda v: int(v.version)):
            vtags = dict(mv.tags or {})
            params: dict[str, str] = {}
            rtags: dict[str, str] = {}
            if mv.run_id:
                if mv.run_id not in runs:
                    try:
                        runs[mv.run_id] = client.get_run(mv.run_id)
                    except MlflowException:
                        runs[mv.run_id] = None  # deleted run: the version tags alone describe it
                run = runs[mv.run_id]
                if run is not None:
                    params, rtags = dict(run.data.params), dict(run.data.tags)
            try:
                desc, places, refused = merge_description(vtags, params, rtags)
            except NotAuditable as exc:  # e.g. an Opacus poisson_sampling flag that is neither True nor False
                desc, places, refused = {}, [], exc.message
            where = " + ".join(p.replace("run ", f"run {mv.run_id} ", 1) if p.startswith("run") else p for p in places)
            common = dict(
                model=lake_name,
                version=int(mv.version),
                mlflow_model=rm.name,
                mlflow_version=str(mv.version),
                production=str(mv.version) in prod,
                description_source=f"mlflow:{uri_pub}#{rm.name}/{mv.version}",
                description_from=where or "nothing (no dp.* key, no accepted framework param)",
                card_opt_in=_is_true(vtags.get(CARD_OPT_IN_TAG)) or rm_opt_in,
                existing_tags=vtags,
            )
            out.append(_version(client, tracking_uri, desc, refused, mv.run_id, where, common))
    return out
