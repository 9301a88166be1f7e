"""Registry audits: one model version -> one labelled lake row; version comparisons; registry snapshot.

Lake layout (under the lake root, next to the grid-sweep tables)::

    registry/audits/model=<name>/version=<v>/audit-<audit_key>.parquet   one row per computed audit (immutable)
    registry/comparisons/cmp-<key_new>-<key_old>-<against>.parquet       one row per compared pair (immutable)
    registry/members/registry=<label>/members.parquet                    the registry's current model versions
    registry/published/<snapshot>/{models,model_privacy,model_comparisons}.parquet   what the report's views read

``audit_key`` hashes the manifest's spec (:meth:`tasks.registry.ModelManifest.spec_hash`) together with gdpcore's
version *and source hash* (:func:`tasks.lake.code_version`): an audit whose file exists is never recomputed, so a
re-run with nothing changed computes nothing and editing one manifest recomputes that model version only.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tasks.lake import atomic_write_parquet, code_version, read_model_row, safe_join, write_model_row
from tasks.plan import CURVE_FPRS
from tasks.registry import STANDARD_DELTAS, STANDARD_FPRS, ModelManifest, is_valid_name

__all__ = [
    "AUDIT_SCHEMA",
    "COMPARISON_SCHEMA",
    "GDP_COMPLETE_VERDICT",
    "audit_key",
    "audit_path",
    "compute_audit_row",
    "compute_comparison_row",
    "estimate_flags",
    "read_audit",
]

GDP_COMPLETE_VERDICT = "GDP is a complete description"
GDP_INCOMPLETE_VERDICT = "GDP is not a complete description: read the full trade-off curve"

_LIST = pa.list_(pa.float64())
AUDIT_SCHEMA = pa.schema(
    [
        pa.field("model", pa.string(), nullable=False),
        pa.field("version", pa.int64(), nullable=False),
        pa.field("audit_key", pa.string(), nullable=False),
        pa.field("spec_hash", pa.string(), nullable=False),
        pa.field("mu", pa.float64()),
        pa.field("mu_lower", pa.float64()),
        pa.field("mu_bound", pa.string()),
        pa.field("mu_cutoff", pa.float64()),
        pa.field("gdp_regret", pa.float64()),
        pa.field("gdp_regret_bound", pa.string()),
        pa.field("gdp_complete", pa.bool_()),
        pa.field("verdict", pa.string()),
        pa.field("delta", pa.float64()),
        pa.field("delta_policy", pa.string()),
        pa.field("epsilon", pa.float64()),
        pa.field("epsilon_lower", pa.float64()),
        pa.field("epsilon_bound", pa.string()),
        pa.field("eps_deltas", _LIST),
        pa.field("eps_values", _LIST),
        pa.field("tpr_fprs", _LIST),
        pa.field("tpr", _LIST),
        pa.field("tpr_bound", pa.string()),
        pa.field("advantage", pa.float64()),
        pa.field("advantage_lower", pa.float64()),
        pa.field("advantage_bound", pa.string()),
        pa.field("bayes_security", pa.float64()),
        pa.field("bayes_security_bound", pa.string()),
        pa.field("curve_fpr", _LIST),
        pa.field("curve_fnr", _LIST),
        pa.field("accountant", pa.string()),
        pa.field("discretization", pa.float64()),
        pa.field("alpha_min", pa.float64()),
        pa.field("mechanism_form", pa.string()),
        pa.field("mechanism_json", pa.string()),
        pa.field("mechanism_hash", pa.string()),
        pa.field("mechanism_detail", pa.string()),
        pa.field("privacy_unit", pa.string()),
        pa.field("neighbouring", pa.string()),
        # How the batches were drawn (poisson / shuffle / fixed; NULL: not stated) and, when the accounted mechanism
        # is not what the sampler did, the one-sentence reason every *_bound of the row says "estimate".
        pa.field("sampler", pa.string()),
        pa.field("estimate_reason", pa.string()),
        # A shuffled run (sampler: shuffle) accounted as Poisson with q = 1/T: the proven lower bound of the shuffled
        # run it stands for (gdpcore.kinds.samplers.shuffled_counterpart; Chua et al. 2024), NULL otherwise.
        pa.field("shuffle_epsilon_lower", pa.float64()),
        pa.field("shuffle_mu_lower", pa.float64()),
        pa.field("shuffle_label", pa.string()),  # not a *_bound column: those all say "estimate" for such a run
        pa.field("shuffle_analysis", pa.string()),
        # Best of K runs (manifest ``tuning``; gdpcore.tuning, Papernot & Steinke 2022): the procedure's epsilon at
        # the declared delta (upper), the analysis, the law of K and E[K], and the single run's epsilon beside it.
        pa.field("tuning_epsilon", pa.float64()),
        pa.field("tuning_bound", pa.string()),
        pa.field("tuning_analysis", pa.string()),
        pa.field("tuning_distribution", pa.string()),
        pa.field("tuning_expected_runs", pa.float64()),
        pa.field("epsilon_single_run", pa.float64()),
        pa.field("dataset_size", pa.int64()),
        pa.field("claimed_epsilon", pa.float64()),
        pa.field("claimed_delta", pa.float64()),
        pa.field("claimed_accountant", pa.string()),
        # The claim re-checked (gdpcore.claims): eps with the named accountant, its label and status, and whether
        # the tight pessimistic eps at the claimed delta certifies it.
        pa.field("claim_reproduced_epsilon", pa.float64()),
        pa.field("claim_reproduced_bound", pa.string()),
        pa.field("claim_reproduction", pa.string()),
        pa.field("claim_status", pa.string()),
        pa.field("claim_tight_epsilon", pa.float64()),
        pa.field("claim_certified", pa.bool_()),
        pa.field("description", pa.string()),
        pa.field("source", pa.string()),
        pa.field("manifest_json", pa.string()),
        pa.field("gdpcore_version", pa.string()),
        pa.field("audited_at", pa.timestamp("us", tz="UTC")),
        pa.field("run_id", pa.string()),
        pa.field("compute_seconds", pa.float64()),
    ]
)

MEMBERS_SCHEMA = pa.schema(
    [
        pa.field("registry", pa.string(), nullable=False),
        pa.field("model", pa.string(), nullable=False),
        pa.field("version", pa.int64(), nullable=False),
        pa.field("audit_key", pa.string(), nullable=False),
        pa.field("manifest_path", pa.string()),
        pa.field("production", pa.bool_()),
        pa.field("mlflow_model", pa.string()),
        pa.field("mlflow_version", pa.string()),
        # Where the training description was read ("manifest:<file>" or "mlflow:<uri>#<model>/<version>"),
        # which part of it ("manifest", "model-version tags", "run <id> params", ...), and the audit status:
        # "audited", or "not auditable" with the reason naming the missing dp.* key(s) (audit_key then '').
        pa.field("description_source", pa.string()),
        pa.field("description_from", pa.string()),
        pa.field("status", pa.string()),
        pa.field("not_auditable", pa.string()),
    ]
)

COMPARISON_SCHEMA = pa.schema(
    [
        pa.field("model", pa.string(), nullable=False),
        pa.field("version", pa.int64(), nullable=False),
        pa.field("against", pa.string(), nullable=False),  # 'previous' | 'production'
        pa.field("other_version", pa.int64(), nullable=False),
        pa.field("audit_key", pa.string()),
        pa.field("other_audit_key", pa.string()),
        pa.field("divergence_new_over_old", pa.float64()),  # Delta(old || new): how much more vulnerable new can be
        pa.field("divergence_old_over_new", pa.float64()),  # Delta(new || old)
        pa.field("divergence_bound", pa.string()),
        pa.field("at_least_as_private", pa.bool_()),  # Blackwell (seed 002 Thm 1); null = undecided
        pa.field("blackwell_verdict", pa.string()),
        pa.field("less_private", pa.bool_()),
        pa.field("mu_change", pa.float64()),
        pa.field("tpr_fprs", _LIST),
        pa.field("tpr_change", _LIST),
        pa.field("gdpcore_version", pa.string()),
        pa.field("compared_at", pa.timestamp("us", tz="UTC")),
    ]
)


def _h(*parts: str) -> str:
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:24]


def audit_key(manifest: ModelManifest) -> str:
    return _h("audit", manifest.spec_hash(), code_version())


def audit_path(lake: Path, model: str, version: int, key: str) -> Path:
    """Where one audit row lives; ``model`` must be a valid name (a Parquet row of a crafted lake may say anything)."""
    if not is_valid_name(model) or isinstance(version, bool) or not isinstance(version, int):
        from gdpcore._validation import bounded_repr  # the error path only: gdpcore takes seconds to import

        raise ValueError(f"not a model version: {bounded_repr(model)}:{bounded_repr(version)}")
    return safe_join(lake, "registry", "audits", f"model={model}", f"version={version}", f"audit-{key}.parquet")


def comparison_path(lake: Path, key_new: str, key_old: str, against: str) -> Path:
    return safe_join(lake, "registry", "comparisons", f"cmp-{key_new}-{key_old}-{against}.parquet")


def members_path(lake: Path, registry_label: str) -> Path:
    return safe_join(lake, "registry", "members", f"registry={registry_label}", "members.parquet")


def _f(x: Any) -> float | None:
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) else x


SHUFFLE_ANALYSIS = "Chua et al. 2024"
"""The analysis behind ``shuffle_epsilon_lower`` / ``shuffle_mu_lower`` (gdpcore.kinds.samplers, ShuffledGaussian)."""


def shuffle_lower_fields(manifest: ModelManifest, mech: Any, delta: float) -> dict[str, Any]:
    """The proven lower bound of the shuffled run a ``sampler: shuffle`` manifest's Poisson description stands for
    (:func:`gdpcore.kinds.samplers.shuffled_counterpart`: q = 1/T, T batches per epoch, as Opacus records
    ``1 / len(data_loader)``): epsilon at ``delta`` and mu, both labelled lower (Chua et al. 2024). All None when the
    run did not shuffle or its description has no shuffled counterpart (q not 1/integer)."""
    import gdpcore
    from gdpcore.kinds import samplers

    none: dict[str, Any] = dict.fromkeys(
        ("shuffle_epsilon_lower", "shuffle_mu_lower", "shuffle_label", "shuffle_analysis")
    )
    if manifest.sampler_value != "shuffle":
        return none
    counterpart = samplers.shuffled_counterpart(mech)
    if counterpart is None:
        return none
    rep = gdpcore.analyze(
        counterpart,
        discretization=manifest.accounting.discretization,
        alpha_min=manifest.accounting.alpha_min,
        deltas=[delta],
    )
    return {
        "shuffle_epsilon_lower": float(rep.epsilon(delta, side="optimistic")),
        "shuffle_mu_lower": _f(rep.mu_lower),
        "shuffle_label": samplers.LOWER_LABEL["shuffled_gaussian"],
        "shuffle_analysis": SHUFFLE_ANALYSIS,
    }


def tuning_fields(manifest: ModelManifest, rep: Any, delta: float, estimate: bool) -> dict[str, Any]:
    """The best-of-K bound of a manifest's ``tuning`` block (:func:`gdpcore.tuning.get_tuned_report_bound` of the single
    run's report ``rep``) at ``delta``: labelled upper, or estimate when the single run's numbers are. All None
    without tuning."""
    keys = (
        "tuning_epsilon",
        "tuning_bound",
        "tuning_analysis",
        "tuning_distribution",
        "tuning_expected_runs",
        "epsilon_single_run",
    )
    if manifest.tuning is None:
        return dict.fromkeys(keys)
    from gdpcore.tuning import get_tuned_report_bound

    bound = get_tuned_report_bound(rep, distribution=manifest.tuning, deltas=[delta])
    return {
        "tuning_epsilon": float(bound.epsilon(delta)),
        "tuning_bound": "estimate" if estimate else bound.bound,
        "tuning_analysis": bound.analysis,
        "tuning_distribution": json.dumps(bound.distribution.to_dict(), sort_keys=True),
        "tuning_expected_runs": float(bound.expected_k),
        "epsilon_single_run": float(rep.epsilon(delta)),
    }


def compute_audit_row(manifest: ModelManifest, run_id: str) -> dict[str, Any]:
    """Analyse the manifest's mechanism with gdpcore and return one :data:`AUDIT_SCHEMA` row."""
    import time

    import gdpcore

    t0 = time.perf_counter()
    mech = manifest.build_mechanism()
    delta = manifest.delta_value
    rep = gdpcore.analyze(
        mech,
        discretization=manifest.accounting.discretization,
        alpha_min=manifest.accounting.alpha_min,
        deltas=sorted({*gdpcore.engine.DEFAULT_DELTAS, delta}),
    )
    # Sampler honesty (gdpcore.adapters): numbers accounted for a sampler the run did not use are estimates.
    reason = manifest.estimate_reason
    labels = {k: "estimate" for k in rep.bound_types} if reason else rep.bound_types
    eps_deltas = sorted({delta, *STANDARD_DELTAS}, reverse=True)
    eps_values = [float(rep.epsilon(d)) for d in eps_deltas]
    fprs = list(STANDARD_FPRS)
    fnr = np.asarray(rep.fnr(np.asarray(CURVE_FPRS)), dtype=float)
    regret = float(rep.gdp_regret)
    eps_lower = (
        float(rep.epsilon(delta, side="optimistic"))
        if rep.has_optimistic and not rep.exact
        else (float(rep.epsilon(delta)) if rep.exact else None)
    )
    claimed = manifest.claimed
    check = None
    if claimed is not None:
        check = gdpcore.check_claim(
            mech,
            epsilon=claimed.epsilon,
            delta=claimed.delta,
            accountant=claimed.accountant,
            tight_epsilon=float(rep.epsilon(claimed.delta)),
        )
    return {
        "model": manifest.name,
        "version": manifest.version,
        "audit_key": audit_key(manifest),
        "spec_hash": manifest.spec_hash(),
        "mu": float(rep.mu),
        "mu_lower": _f(rep.mu_lower),
        "mu_bound": labels["mu"],
        "mu_cutoff": float(rep.mu_cutoff),
        "gdp_regret": regret,
        "gdp_regret_bound": labels["gdp_regret"],
        "gdp_complete": bool(regret < gdpcore.GDP_COMPLETE_REGRET),
        "verdict": GDP_COMPLETE_VERDICT if regret < gdpcore.GDP_COMPLETE_REGRET else GDP_INCOMPLETE_VERDICT,
        "delta": delta,
        "delta_policy": manifest.delta.describe(),
        "epsilon": float(rep.epsilon(delta)),
        "epsilon_lower": eps_lower,
        "epsilon_bound": labels["epsilon"],
        "eps_deltas": eps_deltas,
        "eps_values": eps_values,
        "tpr_fprs": fprs,
        "tpr": [float(rep.tpr(a)) for a in fprs],
        "tpr_bound": labels["tpr"],
        "advantage": float(rep.advantage),
        "advantage_lower": _f(rep.advantage_lower),
        "advantage_bound": labels["advantage"],
        "bayes_security": float(rep.bayes_security),
        "bayes_security_bound": labels["bayes_security"],
        "curve_fpr": list(CURVE_FPRS),
        "curve_fnr": fnr.tolist(),
        "accountant": rep.accountant,
        "discretization": rep.discretization,
        "alpha_min": rep.alpha_min,
        "mechanism_form": manifest.mechanism.form,
        "mechanism_json": json.dumps(mech.to_dict(), sort_keys=True),
        "mechanism_hash": mech.content_hash,
        "mechanism_detail": manifest.source_detail,
        "privacy_unit": manifest.privacy_unit,
        "neighbouring": manifest.neighbouring,
        "sampler": manifest.sampler_value,
        "estimate_reason": reason,
        **shuffle_lower_fields(manifest, mech, delta),
        **tuning_fields(manifest, rep, delta, bool(reason)),
        "dataset_size": manifest.dataset_size,
        "claimed_epsilon": claimed.epsilon if claimed else None,
        "claimed_delta": claimed.delta if claimed else None,
        "claimed_accountant": claimed.accountant if claimed else None,
        "claim_reproduced_epsilon": check.reproduced_epsilon if check else None,
        "claim_reproduced_bound": (("estimate" if reason else check.reproduction.bound) if check else None),
        "claim_reproduction": check.reproduction.detail if check else None,
        "claim_status": check.status if check else None,
        "claim_tight_epsilon": check.tight_epsilon if check else None,
        "claim_certified": check.certified if check else None,
        "description": manifest.description,
        "source": manifest.source,
        "manifest_json": manifest.model_dump_json(exclude={"manifest_path"}),
        "gdpcore_version": code_version(),
        "audited_at": dt.datetime.now(dt.UTC),
        "run_id": run_id,
        "compute_seconds": time.perf_counter() - t0,
    }


def estimate_flags(rows: dict[str, dict[str, Any]]) -> list[str]:
    """``"name:version (sampler): reason"`` for every audited model whose numbers are estimates (run summary)."""
    return [
        f"{key} ({rows[key].get('sampler')}): {rows[key]['estimate_reason']}"
        for key in sorted(rows)
        if rows[key].get("estimate_reason")
    ]


def write_audit(lake: Path, row: dict[str, Any]) -> Path:
    return write_model_row(audit_path(lake, row["model"], row["version"], row["audit_key"]), row, AUDIT_SCHEMA)


def read_audit(path: Path) -> dict[str, Any]:
    return read_model_row(path)


def read_members(lake: Path, registry_label: str) -> list[dict[str, Any]]:
    """The stored members rows of one registry (without the ``registry`` column); [] when there are none."""
    path = members_path(lake, registry_label)
    if not path.exists():
        return []
    rows = pq.read_table(path).to_pylist()
    return [{k: r.get(k) for k in MEMBERS_SCHEMA.names if k != "registry"} for r in rows]


def write_members(lake: Path, registry_label: str, rows: Sequence[dict[str, Any]]) -> bool:
    """The registry's current model versions; returns False (and writes nothing) when unchanged."""
    table = pa.Table.from_pylist([{"registry": registry_label, **r} for r in rows], schema=MEMBERS_SCHEMA)
    path = members_path(lake, registry_label)
    if path.exists():
        old = pq.read_table(path)
        if old.replace_schema_metadata(None).equals(table):
            return False
    atomic_write_parquet(table, path, {"registry": registry_label})
    return True


# -- comparisons ----------------------------------------------------------------------------------------------------
def compute_comparison_row(
    new: dict[str, Any], old: dict[str, Any], against: str, cache: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Delta-divergence both ways and the Blackwell verdict of ``new`` vs ``old`` (seed 002 Thm 1/2)."""
    import gdpcore
    from gdpcore.divergence import blackwell_verdict, get_delta_divergence

    cache = {} if cache is None else cache

    def report(row: dict[str, Any]) -> Any:
        key = row["audit_key"]
        if key not in cache:
            mech = gdpcore.mechanism_from_dict(json.loads(row["mechanism_json"]))
            cache[key] = gdpcore.analyze(mech)
        return cache[key]

    r_new, r_old = report(new), report(old)
    fwd = get_delta_divergence(r_old, r_new)  # Delta(old || new): > 0 where new is more vulnerable than old
    back = get_delta_divergence(r_new, r_old)
    # The Blackwell verdict of gdpcore.is_at_least_as_private(new, old), read off Delta(old || new) computed above.
    at_least = blackwell_verdict(fwd)
    if at_least is True:
        verdict = "uniformly at least as private"
    elif at_least is False:
        verdict = "not uniformly at least as private"
    else:
        verdict = "undecided within the accountant's resolution"
    return {
        "model": new["model"],
        "version": new["version"],
        "against": against,
        "other_version": old["version"],
        "audit_key": new["audit_key"],
        "other_audit_key": old["audit_key"],
        "divergence_new_over_old": float(fwd.value),
        "divergence_old_over_new": float(back.value),
        "divergence_bound": fwd.bound,
        "at_least_as_private": at_least,
        "blackwell_verdict": verdict,
        "less_private": at_least is False,
        "mu_change": float(new["mu"] - old["mu"]),
        "tpr_fprs": list(new["tpr_fprs"]),
        "tpr_change": [float(a - b) for a, b in zip(new["tpr"], old["tpr"], strict=True)],
        "gdpcore_version": code_version(),
        "compared_at": dt.datetime.now(dt.UTC),
    }


def write_comparison(lake: Path, row: dict[str, Any]) -> Path:
    path = comparison_path(lake, row["audit_key"], row["other_audit_key"], row["against"])
    atomic_write_parquet(pa.Table.from_pylist([row], schema=COMPARISON_SCHEMA), path, {"model": row["model"]})
    return path
