"""``gdp audit`` and ``card``: registry audits (manifests or a live MLflow Model Registry) and privacy cards."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from flows.command_common import (
    REPORT_URI_HELP,
    Command,
    _add_store_args,
    _prefect_env,
    _preflight,
    _start_api,
)
from flows.mechanism_args import _probability

__all__ = ["REGISTRY_COMMANDS"]


def _print_outputs(s: Any) -> None:
    """Where the audit's outputs are: the report (its views), the cards and, when published, the site."""
    print(f"report: {s.report}   (views: models, model_privacy, model_comparisons, evidence)\ncards: {s.cards_dir}")
    if s.site:
        print(f"site: {s.site}   (open in a browser; works offline)")


def _print_flags(s: Any) -> None:
    """What both audit summaries (manifest registry, MLflow registry) list under their count line: evidence of a
    violation first."""
    for x in s.evidence_violations:
        print(f"  EVIDENCE OF A VIOLATION: {x}")
    for msg in s.failed.values():
        print(f"  FAILED {msg}", file=sys.stderr)
    for x in s.less_private:
        print(f"  less private: {x}")
    for x in s.claim_flags:
        print(f"  published claim: {x}")
    for x in s.estimates:
        print(f"  estimate, not a bound: {x}")


def _audit(args: argparse.Namespace) -> int:
    """``gdp audit [REGISTRY]``: the manifests of REGISTRY (tagging their MLflow versions with --mlflow-uri); without
    REGISTRY and with --mlflow-uri, the MLflow Model Registry itself (tasks.mlflow_registry)."""
    from tasks.registry import DEFAULT_REGISTRY, MANIFEST_DEADLINE, load_registry, registry_files

    if args.registry is None and args.mlflow_uri:
        return _audit_mlflow(args)
    if args.model:
        raise ValueError("--model selects registered models of the MLflow registry: give --mlflow-uri and no REGISTRY")
    registry = args.registry or str(DEFAULT_REGISTRY)
    if not args.allow_empty:  # a missing or empty registry fails here, before Prefect starts and without a traceback
        if not registry_files(registry):
            raise ValueError(
                f"registry {registry} has no .yaml/.yml file (not mounted?); nothing was written. If it is meant to "
                "be empty (its models removed from the report), pass --allow-empty"
            )
        good, errors = load_registry(registry, deadline=MANIFEST_DEADLINE)
        if not good:
            raise ValueError(
                f"registry {registry} has no valid model version ({len(errors)} invalid file(s), e.g. {errors[0]}); "
                "nothing was written. If it is meant to be empty, pass --allow-empty"
            )
    s = _run_audit(args, registry=registry, mlflow_uri=args.mlflow_uri)
    print(
        f"audit {s.registry}: {len(s.models)} model versions ({len(s.computed)} computed, {len(s.reused)} "
        f"unchanged), {s.comparisons_computed} comparisons computed, {len(s.failed)} failed"
    )
    _print_flags(s)
    if args.mlflow_uri:
        print(f"MLflow: tagged {len(s.mlflow_tagged)}, not registered: {', '.join(s.mlflow_missing) or 'none'}")
    _print_outputs(s)
    return 1 if s.failed else 0


def _run_audit(args: argparse.Namespace, **source: Any) -> Any:
    """The privacy-audit flow with the options both audit sources share (``source``: where the models come from)."""
    _preflight(args)
    _prefect_env(args.verbose)
    _start_api()  # boots while the flow is imported; waited for below with gdp's start-up timeout
    from flows.privacy_audit import privacy_audit
    from flows.runners import share_api_with_workers

    share_api_with_workers("thread")

    return privacy_audit(
        **source,
        lake=args.lake,
        report=args.report,
        cards_dir=args.cards,
        allow_empty=args.allow_empty,
        report_uri=args.report_uri,
        progress=not args.no_progress,
        evidence_level=args.evidence_level,
    )


def _audit_mlflow(args: argparse.Namespace) -> int:
    from tasks.mlflow_registry import public_uri
    from tasks.safe_yaml import bounded_message

    try:
        from mlflow import MlflowClient
        from mlflow.exceptions import MlflowException
    except ImportError:
        raise ValueError("--mlflow-uri needs MLflow: pip install 'gdp-audit[mlflow]'") from None

    # Before Prefect starts: an unreachable server or an unknown --model is a one-line error, exit 2. The probe retries
    # once (MLflow's default backs off for minutes); the audit itself keeps MLflow's and its task's retries.
    probe_env = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}
    saved = {k: os.environ.get(k) for k in probe_env}
    os.environ.update({k: v for k, v in probe_env.items() if saved[k] is None})
    try:
        client = MlflowClient(tracking_uri=args.mlflow_uri, registry_uri=args.mlflow_uri)
        client.search_registered_models(max_results=1)
        for name in args.model or ():
            client.get_registered_model(name)
    except MlflowException as exc:
        uri = bounded_message(public_uri(args.mlflow_uri), 300)
        raise ValueError(f"--mlflow-uri {uri}: {bounded_message(str(exc).splitlines()[0], 300)}") from None
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
    s = _run_audit(
        args,
        source="mlflow",
        mlflow_uri=args.mlflow_uri,
        models=args.model or None,
        production_alias=args.production_alias,
    )
    print(
        f"audit mlflow:{public_uri(args.mlflow_uri)}: {len(s.models) + len(s.not_auditable)} model versions: "
        f"{len(s.computed)} audited, {len(s.reused)} reused (unchanged), {len(s.not_auditable)} not auditable, "
        f"{len(s.failed)} failed; {s.comparisons_computed} comparisons computed"
    )
    for key, why in sorted(s.not_auditable.items()):
        print(f"  not auditable {key}: {why}")
    _print_flags(s)
    print(f"MLflow: {s.mlflow_tags_written} tag value(s) written on {len(s.mlflow_tagged)} audited version(s)")
    _print_outputs(s)
    return 1 if s.failed else 0


def _card(args: argparse.Namespace) -> int:
    from tasks.audit import audit_path, read_audit
    from tasks.cards import hf_yaml_block, merge_into_readme, render_markdown, write_card
    from tasks.evidence import attach_from_report
    from tasks.lake import default_report
    from tasks.report_query import query_report
    from tasks.safe_yaml import shown

    report = Path(args.report or default_report())
    model, _, version = args.model.partition(":")
    where = "model = ?" if not version else "model = ? AND version = ?"
    sql = f"SELECT model, version, audit_key FROM model_privacy WHERE {where} ORDER BY version DESC LIMIT 1"
    sql = sql.replace("?", "'" + model.replace("'", "''") + "'", 1)
    if version:
        if not version.isdigit():
            raise ValueError(f"VERSION must be an integer, got {shown(version)}")
        sql = sql.replace("?", version, 1)
    _, rows = query_report(report, sql)
    if not rows:
        raise ValueError(f"no audited model version {shown(args.model)} in {report}: run 'gdp audit' first")
    _, lake_rows = query_report(report, "SELECT lake FROM report_info")
    if lake_rows[0][0] is None:
        raise ValueError(f"{report} is an exported report without its lake: run 'gdp card' on the published report")
    m, v, key = rows[0]
    lake = report.resolve().parent / lake_rows[0][0]  # relative to the report's folder (absolute in old reports)
    row = attach_from_report(read_audit(audit_path(lake, m, v, key)), report, lake)  # the card's Evidence section
    uri = args.report_uri or os.environ.get("GDP_REPORT_URI") or None  # never a local path by default
    if args.hf_readme:
        print(merge_into_readme(args.hf_readme, row, report_uri=uri))
    elif args.out:
        paths = write_card(row, args.out, report_uri=uri)
        print("\n".join(paths.values()))
    elif args.format == "yaml":
        print(hf_yaml_block(row, report_uri=uri), end="")
    else:
        print(render_markdown(row, report_uri=uri, png_name=None), end="")
    return 0


def _audit_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "registry",
        nargs="?",
        metavar="REGISTRY",
        help="folder of YAML manifests or one YAML file (default: the sample registry data/registry)",
    )
    p.add_argument(
        "--mlflow-uri",
        help="tracking URI. Without REGISTRY: audit this MLflow Model Registry itself (each version's dp.* "
        "description from its tags or its run; see README 'Audit my MLflow registry'); with REGISTRY: tag the "
        "versions its manifests name (needs gdp-audit[mlflow])",
    )
    p.add_argument(
        "--model",
        action="append",
        metavar="NAME",
        help="with --mlflow-uri and no REGISTRY: audit this registered model only (repeatable; default all)",
    )
    p.add_argument(
        "--production-alias",
        default="production",
        help="MLflow alias of the production version (default 'production'; else the legacy Production stage)",
    )
    p.add_argument("--cards", help="where privacy cards go (default: cards/ next to the report)")
    p.add_argument(
        "--allow-empty",
        action="store_true",
        help="accept a registry with no valid model version (removes its models from the report)",
    )
    p.add_argument("--report-uri", help=REPORT_URI_HELP)
    p.add_argument(
        "--evidence-level",
        type=_probability("--evidence-level", open_low=True, open_high=True),
        default=0.05,
        help="audit-wide false-alarm level of the evidence checks: each of the N versions with canary scores is "
        "checked at confidence 1 - level/N (Bonferroni; default 0.05)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("-v", "--verbose", action="store_true", help="show Prefect's INFO logs")
    _add_store_args(p)


def _card_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL[:VERSION]", help="model name, optionally :version (default newest)")
    p.add_argument("--format", choices=("md", "yaml"), default="md", help="Markdown card or HF model-card YAML")
    p.add_argument("--out", help="write card.md, curve.png and model_card.yaml under OUT/MODEL/vVERSION/")
    p.add_argument(
        "--hf-readme",
        metavar="README.md",
        help="merge the privacy metadata into this Hugging Face model card's front matter (keeps its keys; "
        "needs gdp-audit[hf])",
    )
    p.add_argument("--report-uri", help=REPORT_URI_HELP)
    _add_store_args(p, lake=False)


REGISTRY_COMMANDS: dict[str, Command] = {
    "audit": Command("audit a model registry: privacy cards, DuckDB rows, MLflow tags", _audit_args, _audit),
    "card": Command("print or write the privacy card of MODEL[:VERSION] from the report", _card_args, _card),
}
