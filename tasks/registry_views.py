"""The report's registry views (``models``, ``model_privacy``, ``model_comparisons``, ``evidence``) over a fixed
registry snapshot.

``registry/published/<snapshot>/{models,model_privacy,model_comparisons}.parquet`` is built from the registry's
current members, their audits and comparisons (:mod:`tasks.audit`) with the snapshot lifecycle of
:mod:`tasks.snapshots`; :mod:`tasks.publish` creates one view per table over it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from tasks.audit import AUDIT_SCHEMA, COMPARISON_SCHEMA, MEMBERS_SCHEMA, audit_path
from tasks.duckdb_access import lake_connection, relative_posix, sql_literal
from tasks.evidence import add_evidence_views, evidence_snapshot_fingerprint
from tasks.evidence_schema import EVIDENCE_VIEW_COMMENT
from tasks.snapshots import KEEP_SNAPSHOTS, gc_snapshots, is_complete, mark_used, write_snapshot

__all__ = ["VIEW_COMMENTS", "registry_views"]

VIEW_COMMENTS: dict[str, str] = {
    "models": "One row per model version in the audited registries: model, version, registry, manifest, production "
    "flag, MLflow target, audit_key (the audit its numbers come from), description_source (the manifest file or the "
    "MLflow URI/model/version the training description was read from), status ('audited' or 'not auditable', with "
    "the missing dp.* key in not_auditable).",
    "model_privacy": "One row per model version: mu (tightest pessimistic mu-GDP, upper bound unless mu_bound says "
    "estimate: see estimate_reason), gdp_regret, verdict "
    "('GDP is a complete description' when regret < 0.01), epsilon at the declared delta, TPR@FPR lists, advantage, "
    "bayes_security, each with its bound label, the accountant and discretization, audited_at, gdpcore_version; "
    "for a published claim: claim_reproduced_epsilon (labelled by claim_reproduced_bound), claim_status, "
    "claim_tight_epsilon (upper bound at the claimed delta) and claim_certified; sampler (how the batches were drawn: "
    "poisson, shuffle, fixed, cyclic, balls_in_bins; estimate_reason when the numbers are estimates for it), "
    "mu_lower / epsilon_lower (the lower end: for balls_in_bins a proven lower bound, for cyclic the exact value), "
    "shuffle_epsilon_lower / shuffle_mu_lower (a shuffled run's proven lower bound, labelled by shuffle_label, "
    "analysis shuffle_analysis, beside the Poisson estimate), tuning_epsilon (best of K runs, labelled by "
    "tuning_bound, analysis tuning_analysis, law tuning_distribution) beside epsilon_single_run.",
    "model_comparisons": "Each model version vs its previous version and the production version: Delta-divergence "
    "both ways, Blackwell verdict, less_private flag, change in mu and TPR@FPR.",
    "evidence": EVIDENCE_VIEW_COMMENT,
}


def _registry_snapshot_id(lake: Path) -> str:
    h = hashlib.sha256(b"registry-views-v1")
    for path in sorted((lake / "registry" / "members").glob("registry=*/members.parquet")):
        h.update(str(path.relative_to(lake)).encode())
        h.update(hashlib.sha256(path.read_bytes()).digest())
    for path in sorted((lake / "registry" / "comparisons").glob("cmp-*.parquet")):
        h.update(path.name.encode())
    h.update(evidence_snapshot_fingerprint(lake))  # the evidence rows the views join are part of the snapshot
    return h.hexdigest()[:20]


def _fill_registry_snapshot(lake: Path, tmp: Path) -> None:
    """Write the registry tables (models, model_privacy, model_comparisons, evidence) of the current members, their audits and comparisons into ``tmp``."""
    con = lake_connection(lake)
    try:
        con.register("empty_members", MEMBERS_SCHEMA.empty_table())  # replacement scans are off (confined)
        con.register("empty_audits", AUDIT_SCHEMA.empty_table())
        con.register("empty_cmp", COMPARISON_SCHEMA.empty_table())
        member_files = sorted((lake / "registry" / "members").glob("registry=*/members.parquet"))
        if member_files:
            con.execute(
                f"CREATE TEMP TABLE m AS SELECT * FROM read_parquet({[str(p) for p in member_files]!r}, "
                "union_by_name = true)"
            )
        else:
            con.execute("CREATE TEMP TABLE m AS SELECT * FROM empty_members")
        keys = con.execute("SELECT DISTINCT model, version, audit_key FROM m").fetchall()
        audit_files = [str(audit_path(lake, mo, v, k)) for mo, v, k in keys if audit_path(lake, mo, v, k).exists()]
        if audit_files:
            con.execute(f"CREATE TEMP TABLE a AS SELECT * FROM read_parquet({audit_files!r}, union_by_name = true)")
        else:
            con.execute("CREATE TEMP TABLE a AS SELECT * FROM empty_audits")
        cmp_files = sorted(str(p) for p in (lake / "registry" / "comparisons").glob("cmp-*.parquet"))
        if cmp_files:
            con.execute(f"CREATE TEMP TABLE c AS SELECT * FROM read_parquet({cmp_files!r}, union_by_name = true)")
        else:
            con.execute("CREATE TEMP TABLE c AS SELECT * FROM empty_cmp")
        selects = {
            "models": "SELECT m.registry, m.model, m.version, m.production, m.manifest_path, m.mlflow_model, "
            "m.mlflow_version, m.audit_key, a.privacy_unit, a.neighbouring, a.sampler, a.dataset_size, a.description, "
            "a.source, a.mechanism_form, m.description_source, m.description_from, "
            "coalesce(m.status, 'audited') AS status, m.not_auditable "
            "FROM m LEFT JOIN a ON a.audit_key = m.audit_key AND a.model = m.model AND a.version = m.version "
            "ORDER BY m.model, m.version, m.registry",
            "model_privacy": "SELECT m.registry, a.* EXCLUDE (curve_fpr, curve_fnr, manifest_json), "
            "m.production, m.description_source FROM m JOIN a ON a.audit_key = m.audit_key AND a.model = m.model "
            "AND a.version = m.version ORDER BY a.model, a.version, m.registry",
            "model_comparisons": "SELECT c.* FROM c JOIN m ON c.audit_key = m.audit_key "
            "JOIN (SELECT audit_key AS other_audit_key FROM m) o USING (other_audit_key) "
            "ORDER BY c.model, c.version, c.against",
        }
        selects = add_evidence_views(con, lake, selects)  # the evidence view and model_privacy's evidence columns
        for name, sel in selects.items():
            con.execute(f"COPY ({sel}) TO {sql_literal(tmp / (name + '.parquet'))} (FORMAT parquet, COMPRESSION zstd)")
    finally:
        con.close()


def registry_views(
    lake: str | Path,
    keep: int = KEEP_SNAPSHOTS,
    *,
    relative_to: str | Path | None = None,
    path_sql: Callable[[str], str] | None = None,
) -> dict[str, tuple[str, str]]:
    """{view: (SELECT over a fixed registry snapshot, comment)} for :mod:`tasks.publish` (every view of VIEW_COMMENTS).

    ``relative_to``: name the snapshot files relative to this folder (the report's; see tasks.publish);
    ``path_sql``: turns that relative path into the SQL expression the view reads (tasks.publish.report_path_sql),
    else it is a plain string literal."""
    lake = Path(lake).resolve()
    published = lake / "registry" / "published"
    published.mkdir(parents=True, exist_ok=True)
    snap = published / _registry_snapshot_id(lake)
    if is_complete(snap):
        mark_used(snap)
    else:
        write_snapshot(snap, lambda tmp: _fill_registry_snapshot(lake, tmp))
    gc_snapshots(published, keep=snap, n=keep)

    def where(name: str) -> str:
        path = snap / (name + ".parquet")
        return str(path) if relative_to is None else relative_posix(path, Path(relative_to))

    return {
        name: (f"SELECT * FROM read_parquet({(path_sql or sql_literal)(where(name))})", comment)
        for name, comment in VIEW_COMMENTS.items()
    }
