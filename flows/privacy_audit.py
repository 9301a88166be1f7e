"""``privacy_audit``: audit a model registry -> lake rows, privacy cards, DuckDB views, MLflow tags.

The registry is a folder of YAML manifests (``source="manifests"``, the default) or a live MLflow Model Registry
(``source="mlflow"``: every registered version's ``dp.*`` description, read from the version's tags or its
source run, becomes a manifest - see :mod:`tasks.mlflow_registry` for the table of keys). Both go through the same
steps below, the same lake rows, cards and views; the ``models`` view names where each description came from
(``description_source``) and lists MLflow versions that are *not auditable* with the missing key.

1. Load the registry's manifests (:mod:`tasks.registry`); an invalid file fails *its* models only, with a message
   naming file and field in the run summary and artifact; everything else is audited and published. An MLflow
   version without a usable description is reported *not auditable* (not a failure).
2. For each model version, compute its audit only when no audit exists for its ``audit_key`` (manifest spec hash +
   gdpcore version and source hash): a re-run with nothing changed computes nothing.
3. Compare each version with the previous version of the same model and with the production version (Delta-divergence
   both ways, Blackwell verdict); pairs already compared are reused. Less-private versions are flagged.
4. Write the privacy cards (Markdown, PNG, HF YAML) of versions whose card is missing or stale.
5. Republish the DuckDB report (views ``models``, ``model_privacy``, ``model_comparisons`` next to the sweep views)
   and its static site (``index.html`` beside the report: :mod:`tasks.site`).
6. Optionally tag the registered model versions in MLflow.

Size: just over 600 lines: the flow and the private helpers of its steps above, kept in one module so that the flow
reads top to bottom in the order of its steps.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact
from prefect.runtime import flow_run

from flows.naming import run_name
from flows.publish import compact_and_publish
from flows.runners import runner_from_env
from tasks.audit import (
    audit_key,
    audit_path,
    comparison_path,
    compute_audit_row,
    compute_comparison_row,
    estimate_flags,
    read_audit,
    read_members,
    write_audit,
    write_comparison,
    write_members,
)
from tasks.evaluate import transient_io_error
from tasks.evidence import DEFAULT_FAMILY_LEVEL, audit_evidence, evidence_for_version
from tasks.lake import default_lake, default_report
from tasks.registry import DEFAULT_REGISTRY, MANIFEST_DEADLINE, ModelManifest, load_registry
from tasks.safe_yaml import shown

__all__ = ["AuditSummary", "privacy_audit"]


@dataclasses.dataclass
class AuditSummary:
    registry: str
    lake: str
    report: str
    cards_dir: str
    models: list[str]  # "name:version" audited and published
    computed: list[str]
    reused: list[str]
    failed: dict[str, str]  # manifest file (or name:version) -> message
    comparisons_computed: int
    less_private: list[str]  # "name:v vs previous|production:v"
    cards_written: list[str]
    # "name:v: claimed eps=... (acct) ..." for published claims the audit cannot reproduce or certify
    claim_flags: list[str] = dataclasses.field(default_factory=list)
    # "name:v (sampler): reason" for models whose numbers are estimates (batches not drawn as accounted)
    estimates: list[str] = dataclasses.field(default_factory=list)
    mlflow_tagged: list[str] = dataclasses.field(default_factory=list)
    mlflow_missing: list[str] = dataclasses.field(default_factory=list)
    source: str = "manifests"  # or "mlflow"
    # "name:version" -> why it cannot be audited, naming the missing dp.* key(s) (MLflow source)
    not_auditable: dict[str, str] = dataclasses.field(default_factory=dict)
    mlflow_tags_written: int = 0  # tag values changed in MLflow by this run (unchanged values are not rewritten)
    # versions whose canary scores violate the declared mechanism (tasks.evidence); versions with evidence
    evidence_violations: list[str] = dataclasses.field(default_factory=list)
    evidence_checked: list[str] = dataclasses.field(default_factory=list)
    site: str = ""  # the report site's index.html (tasks.site), when the report was published


AUDIT_DEADLINE = float(os.environ.get("GDP_AUDIT_DEADLINE", "1800"))
"""Seconds one model version's accounting (or one comparison) may take; past it, that version fails alone."""


@task(
    name="audit-model-version",
    task_run_name="audit-{manifest.name}-v{manifest.version}",
    timeout_seconds=AUDIT_DEADLINE,
)
def audit_model_version(manifest: ModelManifest, lake: str, run_id: str) -> dict[str, Any]:
    row = compute_audit_row(manifest, run_id)
    write_audit(Path(lake), row)
    return row


evidence_model_version = task(
    name="evidence-model-version",
    task_run_name="evidence-{manifest.name}-v{manifest.version}",
    timeout_seconds=AUDIT_DEADLINE,
)(evidence_for_version)
"""One version's canary scores held against its audit row's certified curve (:func:`tasks.evidence.evidence_for_version`)."""


@task(name="compare-versions", timeout_seconds=AUDIT_DEADLINE)
def compare_versions(new: dict[str, Any], old: dict[str, Any], against: str, lake: str) -> dict[str, Any]:
    row = compute_comparison_row(new, old, against)
    write_comparison(Path(lake), row)
    return row


def _registry_label(registry: Path) -> str:
    """The registry's name in the lake (``registry=<label>``): its folder name (file stem), made a safe name."""
    import re

    raw = registry.resolve().stem if registry.is_file() else registry.resolve().name
    label = re.sub(r"[^A-Za-z0-9._-]+", "_", raw).lstrip("._-")[:128]
    return label or "registry"


class EmptyRegistryError(ValueError):
    """A registry with no valid model version: refused unless the caller says an empty registry is intended."""


def _transient(task: Any, task_run: Any, state: Any) -> bool:
    """Retry reading the registry on a server or network error, not on a user error (an unknown --model)."""
    try:
        state.result()
    except ValueError:
        return False
    except Exception:
        return True
    return False


@task(name="read-mlflow-registry", retries=2, retry_delay_seconds=10, retry_condition_fn=_transient)
def read_mlflow(tracking_uri: str, models: list[str] | None, production_alias: str) -> list[Any]:
    """Every registered version's description (tasks.mlflow_registry), retried on a transient server error."""
    from tasks.mlflow_registry import read_mlflow_registry

    return read_mlflow_registry(tracking_uri, models=models, production_alias=production_alias)


AUDIT_WORKERS = 2
"""Threads of the audit flow's runner. Its runner is ``GDP_AUDIT_TASK_RUNNER`` (:func:`flows.runners.runner_from_env`),
by default threads: model versions are few and each is one accounting, threads start at once, and deployments'
``GDP_TASK_RUNNER=process`` (meant for sweeps) does not move audits into processes."""


@task(name="build-report-site")
def build_site(report: str, cards: str) -> str:
    """The report's static site (:mod:`tasks.site`): ``index.html`` beside the report, pages under ``site/``, linked
    from the run's artifacts."""
    from tasks.site import write_site

    index = write_site(report, cards)
    create_link_artifact(
        key="privacy-report-site",
        link=index.as_uri(),
        link_text=f"Privacy report site: {index}",
        description="Every model version, its card and the SQL behind each table (static HTML, opens offline)",
    )
    return str(index)


@task(name="record-registry-members", retries=2, retry_delay_seconds=1, retry_condition_fn=transient_io_error)
def record_members(lake: str, label: str, member_rows: list[dict[str, Any]]) -> None:
    """The registry's current model versions (audited or not auditable), what the report's views select."""
    write_members(Path(lake), label, member_rows)


@flow(
    name="privacy-audit",
    task_runner=runner_from_env(variable="GDP_AUDIT_TASK_RUNNER", default="thread", max_workers=AUDIT_WORKERS),
    flow_run_name=run_name("audit", "registry"),
)
def privacy_audit(
    registry: str | None = None,
    lake: str | None = None,
    report: str | None = None,
    cards_dir: str | None = None,
    mlflow_uri: str | None = None,
    publish: bool = True,
    allow_empty: bool = False,
    report_uri: str | None = None,
    progress: bool = False,
    source: str = "manifests",
    models: list[str] | None = None,
    production_alias: str = "production",
    evidence_level: float = DEFAULT_FAMILY_LEVEL,
) -> AuditSummary:
    """Audit ``registry`` (a folder of YAML manifests or one file; default the sample registry in data/registry), or
    with ``source="mlflow"`` the MLflow Model Registry at ``mlflow_uri`` (default ``$MLFLOW_TRACKING_URI``), all its
    registered models or ``models`` only; its production version is the one with alias ``production_alias`` (else
    the legacy ``Production`` stage).

    A registry with no valid model version (an empty or unmounted folder, every file invalid, no registered version)
    raises :class:`EmptyRegistryError` and writes nothing, unless ``allow_empty``: then the registry's models are
    removed from the report (that is what auditing an empty registry means). ``report_uri``: where readers find the
    report (s3://..., https://...; default ``$GDP_REPORT_URI``): cards and MLflow tags name it only when configured,
    never a local path of the auditing machine. ``evidence_level``: the audit-wide false-alarm level of the evidence
    checks (each of the N versions with canary scores is checked at confidence 1 - level/N; tasks.evidence)."""
    mlflow_uri = _check_source(source, registry, mlflow_uri, models)
    lake_p = Path(lake or default_lake()).resolve()
    report_p = Path(report or default_report())
    report_p = report_p.parent.resolve() / report_p.name  # its folder resolved; a link at the report is refused
    cards = Path(cards_dir).resolve() if cards_dir else report_p.parent / "cards"
    report_uri = report_uri or os.environ.get("GDP_REPORT_URI") or None

    reg = _load_registry(source, registry, mlflow_uri, models, production_alias, allow_empty)  # step 1
    rows, computed, reused = _audit_versions(reg, lake_p, progress)  # step 2
    audited = [m for m in reg.manifests if m.key in rows]
    record_members(str(lake_p), reg.label, _member_rows(reg, audited, rows, lake_p, models))
    n_cmp, less_private = _compare_versions(audited, reg.production, rows, lake_p)  # step 3
    run_id = str(flow_run.id or "local")
    evidence = audit_evidence(
        audited, rows, lake_p, reg.label, run_id, family_level=evidence_level, submit=evidence_model_version.submit
    )
    reg.failed.update(evidence.failed)
    evidence.attach(rows)  # step 4: canary scores vs the certified curve; rows[k]["evidence"] feeds cards and tags
    card_paths, written = _write_cards(reg, audited, rows, cards, report_uri)  # step 5
    site = ""
    if publish:
        compact_and_publish(str(lake_p), str(report_p))  # step 6
        site = build_site(str(report_p), str(cards))  # and its static site (index.html beside the report)
    summary = AuditSummary(
        registry=reg.name,
        lake=str(lake_p),
        report=str(report_p),
        cards_dir=str(cards),
        models=[m.key for m in audited],
        computed=computed,
        reused=reused,
        failed=reg.failed,
        comparisons_computed=n_cmp,
        less_private=less_private,
        cards_written=written,
        claim_flags=_claim_flags(rows),
        estimates=estimate_flags(rows),
        source=source,
        not_auditable=reg.not_auditable,
        evidence_violations=evidence.violations(),
        evidence_checked=sorted(evidence.rows),
        site=site,
    )
    if mlflow_uri:
        _tag_mlflow(summary, reg, rows, card_paths, mlflow_uri, report_uri)  # step 7
    _artifacts(summary, rows)
    get_run_logger().info(
        "privacy audit: %d model versions (%d computed, %d reused), %d not auditable, %d failed",
        len(summary.models),
        len(computed),
        len(reused),
        len(reg.not_auditable),
        len(reg.failed),
    )
    return summary


@dataclasses.dataclass
class _Registry:
    """The model versions one run audits, keyed by ``name:version``, and where each description came from."""

    label: str  # the registry's name in the lake (registry=<label>)
    name: str  # its name in the summary
    source: str
    manifests: list[ModelManifest]
    failed: dict[str, str]  # invalid manifest file (or name:version) -> message; audits that fail are added
    production: dict[str, bool]
    provenance: dict[str, dict[str, Any]]  # the members row's provenance columns
    not_auditable: dict[str, str] = dataclasses.field(default_factory=dict)
    mlflow_versions: list[Any] = dataclasses.field(default_factory=list)


def _check_source(source: str, registry: str | None, mlflow_uri: str | None, models: list[str] | None) -> str | None:
    """The tracking URI the run reads (source 'mlflow') or tags (with a manifest registry); ValueError naming the
    argument that does not fit the source."""
    if source not in ("manifests", "mlflow"):
        raise ValueError(f"source must be 'manifests' or 'mlflow', got {shown(source)}")
    if source == "mlflow":
        mlflow_uri = mlflow_uri or os.environ.get("MLFLOW_TRACKING_URI") or None
        if not mlflow_uri:
            raise ValueError("source='mlflow' needs mlflow_uri (or $MLFLOW_TRACKING_URI): the tracking server to read")
        if registry:
            raise ValueError("source='mlflow' reads the MLflow registry: give no manifest registry")
    elif models:
        raise ValueError("models selects registered models of an MLflow registry (source='mlflow')")
    return mlflow_uri


def _load_registry(
    source: str,
    registry: str | None,
    mlflow_uri: str | None,
    models: list[str] | None,
    production_alias: str,
    allow_empty: bool,
) -> _Registry:
    """Step 1: the registry's model versions; an invalid manifest file fails its models only (``failed``), an MLflow
    version without a usable description is *not auditable*; no valid version at all raises EmptyRegistryError
    unless ``allow_empty``."""
    logger = get_run_logger()
    if source == "mlflow":
        assert mlflow_uri is not None  # _check_source
        reg = _mlflow_registry(mlflow_uri, models, production_alias, allow_empty)
        for key, why in reg.not_auditable.items():
            logger.warning("not auditable: %s (%s): %s", key, reg.provenance[key]["description_source"], why)
    else:
        reg = _manifest_registry(Path(registry) if registry else DEFAULT_REGISTRY, allow_empty)
    for msg in reg.failed.values():
        logger.warning("invalid manifest: %s", msg)  # also in the run summary and artifact
    return reg


def _mlflow_registry(uri: str, models: list[str] | None, production_alias: str, allow_empty: bool) -> _Registry:
    from tasks.mlflow_registry import mlflow_registry_label, public_uri

    versions = read_mlflow(uri, list(models) if models else None, production_alias)
    name = f"mlflow:{public_uri(uri)}"
    if not versions and not allow_empty:
        raise EmptyRegistryError(
            f"MLflow registry {name} has no registered model version; nothing was written. If it is meant to "
            "be empty (its models removed from the report), pass --allow-empty"
        )
    reg = _Registry(mlflow_registry_label(uri), name, "mlflow", [], {}, {}, {}, mlflow_versions=versions)
    for v in versions:
        reg.provenance[v.key] = {
            "description_source": v.description_source,
            "description_from": v.description_from,
            "manifest_path": None,
            "mlflow_model": v.mlflow_model,
            "mlflow_version": v.mlflow_version,
        }
        reg.production[v.key] = v.production
        if v.manifest is None:
            reg.not_auditable[v.key] = v.not_auditable
        else:
            reg.manifests.append(v.manifest)
    return reg


def _manifest_registry(path: Path, allow_empty: bool) -> _Registry:
    manifests, errors = load_registry(path, deadline=MANIFEST_DEADLINE)  # each file in isolation, with a deadline
    if not manifests and not allow_empty:
        why = f"{len(errors)} invalid file(s), e.g. {errors[0]}" if errors else "no .yaml/.yml file"
        raise EmptyRegistryError(
            f"registry {path} has no valid model version ({why}); nothing was written. If the registry is meant "
            "to be empty (its models removed from the report), pass --allow-empty"
        )
    failed = {e.file + (f" ({e.field})" if e.field else ""): str(e) for e in errors}
    reg = _Registry(_registry_label(path), str(path), "manifests", manifests, failed, {}, {})
    for m in manifests:
        reg.production[m.key] = m.production
        reg.provenance[m.key] = {
            "description_source": f"manifest:{m.manifest_path}",
            "description_from": "manifest",
            "manifest_path": m.manifest_path,
            "mlflow_model": m.mlflow_target()[0],
            "mlflow_version": m.mlflow_target()[1],
        }
    return reg


def _audit_versions(
    reg: _Registry, lake: Path, progress: bool
) -> tuple[dict[str, dict[str, Any]], list[str], list[str]]:
    """Step 2: each version's audit row, computed only when no audit exists for its ``audit_key``; a version whose
    audit fails (or passes its deadline) is added to ``reg.failed`` and the others go on. Returns (rows by key,
    computed keys, reused keys)."""
    from flows.progress import ProgressBar

    run_id = str(flow_run.id or "local")
    rows: dict[str, dict[str, Any]] = {}
    computed: list[str] = []
    reused: list[str] = []
    futures = {}
    for m in reg.manifests:
        try:  # everything done for one version is guarded: it fails alone (keyed by a hash its manifest must give)
            row = _read_or_quarantine(lake, audit_path(lake, m.name, m.version, audit_key(m)), read_audit)
        except Exception as exc:
            _version_failed(reg, m.key, "cannot be audited", exc)
            continue
        if row is not None:
            rows[m.key] = row
            reused.append(m.key)
        else:
            futures[m.key] = audit_model_version.submit(m, str(lake), run_id)
    bar = ProgressBar(len(futures), label="model versions", enabled=progress)
    for k, fut in futures.items():
        try:
            rows[k] = fut.result()
            computed.append(k)
        except Exception as exc:  # one model's accounting failure must not stop the others
            reg.failed[k] = f"{k}: audit failed: {type(exc).__name__}: {exc}"
            get_run_logger().error("audit of %s failed: %s", k, exc)
        bar.update(1)
    bar.close()
    return rows, computed, reused


def _version_failed(reg: _Registry, key: str, what: str, exc: BaseException) -> None:
    """Record that one version failed at a step (one line naming it and the error), the others going on: an MLflow
    version becomes *not auditable* (listed in the models view and tagged ``privacy.status`` in MLflow), a manifest
    version *failed*."""
    from tasks.mlflow_registry import error_line, unreadable_reason

    if reg.source == "mlflow" and what == "cannot be audited":
        reg.not_auditable[key] = unreadable_reason(exc)
        get_run_logger().warning("not auditable: %s: %s", key, reg.not_auditable[key])
    else:
        reg.failed[key] = f"{key}: {what}: {error_line(exc)}"
        get_run_logger().error("%s", reg.failed[key])


def _member_rows(
    reg: _Registry,
    audited: list[ModelManifest],
    rows: dict[str, dict[str, Any]],
    lake: Path,
    models: list[str] | None,
) -> list[dict[str, Any]]:
    """The registry's members: audited versions, then not-auditable MLflow versions; a partial MLflow audit
    (``models``) keeps the other registered models' members."""
    member_rows = [
        {
            "model": m.name,
            "version": m.version,
            "audit_key": rows[m.key]["audit_key"],
            "production": reg.production[m.key],
            "status": "audited",
            "not_auditable": None,
            **reg.provenance[m.key],
        }
        for m in audited
    ]
    member_rows += [
        {
            "model": v.model,
            "version": v.version,
            "audit_key": "",
            "production": v.production,
            "status": "not auditable",
            "not_auditable": reg.not_auditable[v.key],
            **reg.provenance[v.key],
        }
        for v in reg.mlflow_versions
        if v.key in reg.not_auditable
    ]
    if models:
        member_rows += [r for r in read_members(lake, reg.label) if r["mlflow_model"] not in set(models)]
    return sorted(member_rows, key=lambda r: (r["model"], r["version"]))


def _compare_versions(
    audited: list[ModelManifest], production: dict[str, bool], rows: dict[str, dict[str, Any]], lake: Path
) -> tuple[int, list[str]]:
    """Step 3: each version against the previous version of its model and against the production version (pairs
    already compared are read back). Returns (comparisons computed, less-private lines)."""
    import pyarrow.parquet as pq

    logger = get_run_logger()
    by_model: dict[str, list[ModelManifest]] = {}
    for m in audited:
        by_model.setdefault(m.name, []).append(m)
    pairs: list[tuple[dict[str, Any], dict[str, Any], str]] = []
    for versions in by_model.values():
        versions.sort(key=lambda m: m.version)
        prod = [m for m in versions if production[m.key]]
        if len(prod) > 1:
            logger.warning("%s: %d versions marked production; comparing with the newest", versions[0].name, len(prod))
        prod_m = prod[-1] if prod else None
        for i, m in enumerate(versions):
            if i > 0:
                pairs.append((rows[m.key], rows[versions[i - 1].key], "previous"))
            if prod_m is not None and prod_m.version != m.version:
                pairs.append((rows[m.key], rows[prod_m.key], "production"))
    cmp_rows, futures = [], []
    for new, old, against in pairs:
        path = comparison_path(lake, new["audit_key"], old["audit_key"], against)
        row = _read_or_quarantine(lake, path, lambda f: pq.read_table(f).to_pylist()[0])
        if row is not None:
            cmp_rows.append(row)
        else:
            futures.append(compare_versions.submit(new, old, against, str(lake)))
    n_computed = 0
    for fut in futures:
        try:
            cmp_rows.append(fut.result())
            n_computed += 1
        except Exception as exc:
            logger.error("comparison failed: %s", exc)
    less_private = [
        f"{r['model']}:{r['version']} vs {r['against']} v{r['other_version']} (mu {r['mu_change']:+.3g})"
        for r in cmp_rows
        if r["less_private"]
    ]
    return n_computed, less_private


def _write_cards(
    reg: _Registry, audited: list[ModelManifest], rows: dict[str, dict[str, Any]], cards: Path, report_uri: str | None
) -> tuple[dict[str, dict[str, str]], list[str]]:
    """Step 5: the privacy card of every audited version, rewritten only when missing or stale. Returns (card files
    by key, keys whose card was written); a card that cannot be written (e.g. a symbolic link planted in its folder)
    fails its version alone (``reg.failed``), which is then tagged without a card."""
    from tasks.cards import card_dir, card_stamp, write_card

    card_paths: dict[str, dict[str, str]] = {}
    written = []
    for m in audited:
        row = rows[m.key]
        d = card_dir(cards, m.name, m.version)
        stamp = d / "audit_key"
        files = {"markdown": str(d / "card.md"), "png": str(d / "curve.png"), "hf_yaml": str(d / "model_card.yaml")}
        try:
            if (
                stamp.is_file()
                and not stamp.is_symlink()
                and stamp.read_text() == card_stamp(row, report_uri)
                and all(Path(f).is_file() and not Path(f).is_symlink() for f in files.values())
            ):
                card_paths[m.key] = files
            else:
                card_paths[m.key] = write_card(row, cards, report_uri=report_uri)
                written.append(m.key)
        except (OSError, ValueError) as exc:
            _version_failed(reg, m.key, "card not written", exc)
    return card_paths, written


def _tag_mlflow(
    summary: AuditSummary,
    reg: _Registry,
    rows: dict[str, dict[str, Any]],
    card_paths: dict[str, dict[str, str]],
    mlflow_uri: str,
    report_uri: str | None,
) -> None:
    """Step 7: the privacy.* tags of every audited version (and the not-auditable MLflow versions) in MLflow; records
    what was tagged in ``summary``."""
    from tasks.mlflow_tags import publish_to_mlflow

    if reg.source == "mlflow":  # the card goes into MLflow only where the owner opted in (tasks.mlflow_registry)
        opted = {v.key: v.card_opt_in for v in reg.mlflow_versions}
        targets = [
            (
                reg.provenance[k]["mlflow_model"],
                reg.provenance[k]["mlflow_version"],
                rows[k],
                card_paths.get(k) if opted[k] else None,
            )
            for k in summary.models
        ]
        unaudited = [
            (v.mlflow_model, v.mlflow_version, reg.not_auditable[v.key])
            for v in reg.mlflow_versions
            if v.key in reg.not_auditable
        ]
    else:
        by_key = {m.key: m for m in reg.manifests}
        targets = [(*by_key[k].mlflow_target(), rows[k], card_paths.get(k)) for k in summary.models]
        unaudited = []
    res = publish_to_mlflow(
        mlflow_uri, targets, report_uri=report_uri, flow_run=_flow_run_link(), not_auditable=unaudited
    )
    summary.mlflow_tagged, summary.mlflow_missing = res.tagged, res.missing
    summary.mlflow_tags_written = res.tags_written
    for key, why in res.failed.items():  # a version that could not be tagged failed alone; the others are tagged
        summary.failed[key] = f"{key}: MLflow tags not written: {why}"
        get_run_logger().error("%s", summary.failed[key])


def _read_or_quarantine(lake: Path, path: Path, read: Any) -> dict[str, Any] | None:
    """The stored row at ``path``, or None when there is none - or when the file is damaged: it is then moved to
    ``_quarantine/`` and the row recomputed (a truncated audit file used to fail every later audit)."""
    if not path.exists():
        return None
    try:
        return read(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, IndexError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        from tasks.lake import quarantine

        quarantine(lake, path, f"unreadable stored row: {type(exc).__name__}: {exc}"[:500])
        return None


def _claim_flags(rows: dict[str, dict[str, Any]]) -> list[str]:
    """Published claims that the tight accountant does not certify, or that their own accountant does not give."""
    flags = []
    for key in sorted(rows):
        r = rows[key]
        status = r.get("claim_status")
        if status is None or (r["claim_certified"] and status != "not reproduced"):
            continue
        what = [] if r["claim_certified"] else [f"not certified: tight upper bound {r['claim_tight_epsilon']:.4g}"]
        if status != "reproduced":
            repro = r["claim_reproduced_epsilon"]
            what.append(status + ("" if repro is None else f" ({r['claimed_accountant']} gives {repro:.4g})"))
        flags.append(f"{key}: claimed eps={r['claimed_epsilon']:g} at delta={r['claimed_delta']:g}: " + "; ".join(what))
    return flags


def _flow_run_link() -> str | None:
    """The flow run's page on a persistent Prefect UI the user configured ($PREFECT_UI_URL), else None: a link into
    the temporary server a CLI run starts would point nowhere once the run ends."""
    ui = os.environ.get("PREFECT_UI_URL")
    if not ui or flow_run.id is None:
        return None
    return f"{ui.rstrip('/')}/runs/flow-run/{flow_run.id}"


def _artifacts(s: AuditSummary, rows: dict[str, dict[str, Any]]) -> None:
    md = [
        f"# Privacy audit of `{s.registry}`",
        "",
        f"- model versions audited: {len(s.models)} ({len(s.computed)} computed, {len(s.reused)} unchanged); "
        f"not auditable: {len(s.not_auditable)}",
        f"- comparisons computed: {s.comparisons_computed}",
        f"- report: `{s.report}` (views `models`, `model_privacy`, `model_comparisons`, `evidence`); cards: `{s.cards_dir}`",
        *([f"- site: [{s.site}]({Path(s.site).as_uri()}) (open in a browser)"] if s.site else []),
        f"- at {dt.datetime.now(dt.UTC).isoformat()}",
    ]
    if s.evidence_violations:  # violations first
        md[1:1] = ["", "## Evidence of a privacy violation", ""] + [f"- **{x}**" for x in s.evidence_violations]
    if s.failed:
        md += ["", "## Failed (not audited)", ""] + [f"- {msg}" for msg in s.failed.values()]
    if s.not_auditable:
        md += ["", "## Not auditable (no usable DP description)", ""]
        md += [f"- {k}: {why}" for k, why in sorted(s.not_auditable.items())]
    if s.less_private:
        md += ["", "## Less private than the version compared against", ""] + [f"- **{x}**" for x in s.less_private]
    if s.claim_flags:
        md += ["", "## Published claims not certified or not reproduced", ""] + [f"- **{x}**" for x in s.claim_flags]
    if s.estimates:
        md += ["", "## Numbers are estimates, not bounds (batches not drawn as accounted)", ""]
        md += [f"- **{x}**" for x in s.estimates]
    if s.mlflow_missing:
        md += ["", "## Not found in MLflow", ""] + [f"- {x}" for x in s.mlflow_missing]
    create_markdown_artifact(key="privacy-audit", markdown="\n".join(md), description="Registry privacy audit")
    table = [
        {
            "model": r["model"],
            "version": r["version"],
            "mu": round(r["mu"], 4),
            "gdp_regret": f"{r['gdp_regret']:.2g}",
            f"eps@delta ({r['epsilon_bound']})": round(r["epsilon"], 3),
            "delta": f"{r['delta']:.1e}",
            "verdict": r["verdict"],
            "numbers": "estimate" if r.get("estimate_reason") else "bounds",
        }
        for r in sorted(rows.values(), key=lambda r: (r["model"], r["version"]))
    ]
    if table:
        create_table_artifact(key="privacy-audit-models", table=table, description="Audited model versions")
