"""MLflow registry integration (optional extra ``gdp-audit[mlflow]``).

Given a tracking URI, set flat ``privacy.*`` model-version tags (docs/references.md C-3) on the registered model versions the manifests point
at, put the privacy card in its own marked section of the version's description, and log the card files as artifacts
of the version's source run (when it has one). Tag values are strings (MLflow's contract); every number tag has a
``.bound`` companion tag saying upper / lower / estimate / exact.

Non-destructive: what the owner wrote in the description stays; only the section the tool wrote - whole
:data:`CARD_BEGIN` / :data:`CARD_END` lines paired by an id that is the hash of the text between them - is replaced
on the next audit. The vocabulary is the HF block's (tasks.cards:
``definition``, ``neighboring_relation`` as the manifests spell it). No local path of the auditing machine is tagged:
``privacy.report_uri`` only when the user gives one (``--report-uri`` / ``$GDP_REPORT_URI``), and
``privacy.audit_flow_run`` only when ``$PREFECT_UI_URL`` names a persistent Prefect UI.

A nightly re-audit rewrites no tag whose value is unchanged (an unchanged registry sees no writes). A version the audit
cannot describe (no usable ``dp.*`` description) gets ``privacy.status = not auditable: <missing key>`` and
loses the ``privacy.*`` tags and the card section an earlier audit wrote (they no longer describe anything the audit
checked); the owner's text and the owner's own ``privacy.*`` tags (any key outside :func:`is_tool_tag`'s vocabulary)
stay. Each version is tagged under its own guard: one that fails is reported in ``failed``, the others are tagged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "CARD_BEGIN",
    "CARD_END",
    "MlflowPublishResult",
    "card_block",
    "is_tool_tag",
    "merge_description",
    "privacy_tags",
    "publish_to_mlflow",
    "strip_card",
]

_DESCRIPTION_LIMIT = 4000  # keep well under backend limits; the full card is an artifact
# The card's section is delimited by two whole lines carrying the same id: 16 hex digits of the SHA-256 of the text
# between them. A section is the tool's only when both lines are whole lines, paired by that id, and the text between
# still hashes to it: an owner quoting a marker in a sentence, writing an END line alone, or writing BEGIN ... END
# around their own text never has their text taken for the card (it is kept as written, the card added after it).
CARD_BEGIN = "<!-- gdp-audit privacy card: begin"  # + " <id> (replaced by each audit; write above or below) -->"
CARD_END = "<!-- gdp-audit privacy card: end"  # + " <id> -->"
_BEGIN_LINE = re.compile(
    re.escape(CARD_BEGIN) + r" ([0-9a-f]{16}) \(replaced by each audit; write above or below\) -->"
)
_TRUNCATED = "\n\n(truncated: see the privacy/ artifacts of the source run)"


def _block_id(body_lines: Sequence[str]) -> str:
    """The id of a card section: the SHA-256 (16 hex digits) of its lines, line endings normalised."""
    return hashlib.sha256("\n".join(line.rstrip("\r\n") for line in body_lines).encode()).hexdigest()[:16]


def card_block(card: str) -> str:
    """The card as the marked section the tool writes into a description (no newline before or after)."""
    body = card.rstrip().split("\n")
    block_id = _block_id(body)
    return "\n".join(
        [
            f"{CARD_BEGIN} {block_id} (replaced by each audit; write above or below) -->",
            *body,
            f"{CARD_END} {block_id} -->",
        ]
    )


def _find_card(text: str) -> tuple[int, int] | None:
    """(start, end) of the first section of ``text`` the tool wrote (see :data:`CARD_BEGIN`), else None; ``end`` is
    the end of its END line, before that line's newline."""
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    for i, line in enumerate(lines):
        m = _BEGIN_LINE.fullmatch(line.rstrip("\r\n"))
        if m is None:
            continue
        end_line = f"{CARD_END} {m.group(1)} -->"
        j = next((j for j in range(i + 1, len(lines)) if lines[j].rstrip("\r\n") == end_line), None)
        if j is not None and _block_id(lines[i + 1 : j]) == m.group(1):
            return offsets[i], offsets[j] + len(lines[j].rstrip("\r\n"))
    return None


def merge_description(existing: str | None, card: str, limit: int = _DESCRIPTION_LIMIT) -> str:
    """The owner's description with the card in its marked section (the tool's own section replaced if present,
    else appended after the owner's text).

    The owner's text is never cut: when it leaves too little room the card is truncated, and when it alone fills the
    limit the description is returned unchanged (the tags and artifacts still carry everything)."""
    owner = existing or ""
    found = _find_card(owner)
    if found is not None:
        before, after = owner[: found[0]], owner[found[1] :]
    else:
        before, after = (owner.rstrip() + "\n\n" if owner.strip() else ""), ""
    room = limit - len(before) - len(after) - len(card_block("")) - 2
    if room < 200:
        return owner
    if len(card) > room:
        card = card[: room - len(_TRUNCATED)] + _TRUNCATED
    return f"{before}{card_block(card)}{after}"


def strip_card(existing: str | None) -> str:
    """The description without the tool's marked card section (the owner's text before and after it kept)."""
    owner = existing or ""
    found = _find_card(owner)
    if found is None:
        return owner
    before, after = owner[: found[0]].rstrip(), owner[found[1] :].lstrip("\n")
    return before + ("\n\n" + after if before and after else after)


def privacy_tags(row: dict[str, Any], *, report_uri: str | None = None, flow_run: str | None = None) -> dict[str, str]:
    from tasks.cards import DEFINITION, _sampling
    from tasks.evidence_card import evidence_tags

    tags = {
        "privacy.status": "audited",
        "privacy.definition": DEFINITION,
        "privacy.mu": f"{row['mu']:.6g}",
        "privacy.mu.bound": row["mu_bound"],
        "privacy.mu_cutoff": f"{row['mu_cutoff']:.3g}",
        "privacy.gdp_regret": f"{row['gdp_regret']:.3g}",
        "privacy.gdp_regret.bound": row["gdp_regret_bound"],
        "privacy.verdict": row["verdict"],
        "privacy.epsilon": f"{row['epsilon']:.6g}",
        "privacy.epsilon.bound": row["epsilon_bound"],
        "privacy.delta": f"{row['delta']:.3e}",
        "privacy.delta_policy": row["delta_policy"],
        "privacy.tpr_at_fpr": ",".join(f"{a:g}:{t:.4g}" for a, t in zip(row["tpr_fprs"], row["tpr"], strict=True)),
        "privacy.tpr.bound": row["tpr_bound"],
        "privacy.advantage": f"{row['advantage']:.6g}",
        "privacy.advantage.bound": row["advantage_bound"],
        "privacy.bayes_security": f"{row['bayes_security']:.6g}",
        "privacy.bayes_security.bound": row["bayes_security_bound"],
        "privacy.accountant": row["accountant"][:250],
        "privacy.discretization": "exact" if row["discretization"] is None else f"{row['discretization']:g}",
        **_claim_tags(row),
        **evidence_tags(row),  # tasks.evidence_card: privacy.evidence.*, {} without evidence
        "privacy.unit": row["privacy_unit"],
        "privacy.neighboring_relation": row["neighbouring"],
        "privacy.sampling": _sampling(row),
        **({"privacy.estimate_reason": row["estimate_reason"]} if row.get("estimate_reason") else {}),
        **_sampler_and_tuning_tags(row),
        "privacy.gdpcore_version": row["gdpcore_version"],
        "privacy.audit_key": row["audit_key"],
        "privacy.audited_at": str(row["audited_at"]),
    }
    if report_uri:
        tags["privacy.report_uri"] = report_uri
    if flow_run:
        tags["privacy.audit_flow_run"] = flow_run
    return tags


def _sampler_and_tuning_tags(row: dict[str, Any]) -> dict[str, str]:
    """``privacy.sampling.kind`` and the lower end of a sampler accounted by its own kind (gdpcore.kinds.samplers),
    ``privacy.shuffle.*`` (a shuffled run's proven lower bound, tasks.audit.shuffle_lower_fields) and
    ``privacy.tuning.*`` (the best-of-K bound, tasks.audit.tuning_fields), each number with its ``.bound``; {} when
    the row has none of them."""
    from gdpcore.kinds.samplers import LOWER_LABEL
    from tasks.manifest import SAMPLER_KINDS

    tags: dict[str, str] = {}
    kind = SAMPLER_KINDS.get(str(row.get("sampler")))
    if kind is not None:
        tags["privacy.sampling.kind"] = kind
        if row.get("mu_bound") != "exact":  # cyclic is exact: its lower end is its value
            tags["privacy.mu.lower"] = f"{row['mu_lower']:.6g}"
            tags["privacy.epsilon.lower"] = f"{row['epsilon_lower']:.6g}"
            tags["privacy.mu.lower.bound"] = tags["privacy.epsilon.lower.bound"] = LOWER_LABEL[kind]
    if row.get("shuffle_epsilon_lower") is not None:
        tags["privacy.shuffle.epsilon_lower"] = f"{row['shuffle_epsilon_lower']:.6g}"
        tags["privacy.shuffle.epsilon_lower.bound"] = "lower"
        if row.get("shuffle_mu_lower") is not None:
            tags["privacy.shuffle.mu_lower"] = f"{row['shuffle_mu_lower']:.6g}"
            tags["privacy.shuffle.mu_lower.bound"] = "lower"
        tags["privacy.shuffle.label"] = str(row["shuffle_label"])
        tags["privacy.shuffle.analysis"] = str(row.get("shuffle_analysis") or "")[:250]
    if row.get("tuning_epsilon") is not None:
        tags["privacy.tuning.epsilon"] = f"{row['tuning_epsilon']:.6g}"
        tags["privacy.tuning.bound"] = tags["privacy.tuning.epsilon.bound"] = str(row["tuning_bound"])
        tags["privacy.tuning.analysis"] = str(row["tuning_analysis"])[:250]
        tags["privacy.tuning.expected_runs"] = f"{row['tuning_expected_runs']:.6g}"
        tags["privacy.tuning.epsilon_single_run"] = f"{row['epsilon_single_run']:.6g}"
        tags["privacy.tuning.epsilon_single_run.bound"] = str(row["epsilon_bound"])
    return tags


def _claim_tags(row: dict[str, Any]) -> dict[str, str]:
    """``privacy.claim.*``: the published claim and its re-check (absent when the manifest declares no claim)."""
    if row.get("claimed_epsilon") is None:
        return {}
    tags = {
        "privacy.claim.epsilon": f"{row['claimed_epsilon']:.6g}",
        "privacy.claim.delta": f"{row['claimed_delta']:.3e}",
        "privacy.claim.accountant": str(row["claimed_accountant"])[:250],
    }
    if row.get("claim_status") is not None:
        repro = row["claim_reproduced_epsilon"]
        tags.update(
            {
                "privacy.claim.status": row["claim_status"],
                "privacy.claim.reproduced_epsilon": "none" if repro is None else f"{repro:.6g}",
                "privacy.claim.reproduced_epsilon.bound": row["claim_reproduced_bound"] or "none",
                "privacy.claim.certified": "true" if row["claim_certified"] else "false",
            }
        )
    return tags


# Every tag key privacy_tags (with _claim_tags and tasks.evidence_card.evidence_tags) and publish_to_mlflow can write:
# only these are ever deleted (a not-auditable version loses them); any other privacy.* tag is the owner's and stays.
_TOOL_TAGS = frozenset(
    {
        "privacy.status",
        "privacy.definition",
        "privacy.mu",
        "privacy.mu.bound",
        "privacy.mu_cutoff",
        "privacy.gdp_regret",
        "privacy.gdp_regret.bound",
        "privacy.verdict",
        "privacy.epsilon",
        "privacy.epsilon.bound",
        "privacy.delta",
        "privacy.delta_policy",
        "privacy.tpr_at_fpr",
        "privacy.tpr.bound",
        "privacy.advantage",
        "privacy.advantage.bound",
        "privacy.bayes_security",
        "privacy.bayes_security.bound",
        "privacy.accountant",
        "privacy.discretization",
        "privacy.claim.epsilon",
        "privacy.claim.delta",
        "privacy.claim.accountant",
        "privacy.claim.status",
        "privacy.claim.reproduced_epsilon",
        "privacy.claim.reproduced_epsilon.bound",
        "privacy.claim.certified",
        "privacy.unit",
        "privacy.neighboring_relation",
        "privacy.sampling",
        "privacy.estimate_reason",
        "privacy.sampling.kind",
        "privacy.mu.lower",
        "privacy.mu.lower.bound",
        "privacy.epsilon.lower",
        "privacy.epsilon.lower.bound",
        "privacy.shuffle.epsilon_lower",
        "privacy.shuffle.epsilon_lower.bound",
        "privacy.shuffle.mu_lower",
        "privacy.shuffle.mu_lower.bound",
        "privacy.shuffle.label",
        "privacy.shuffle.analysis",
        "privacy.tuning.epsilon",
        "privacy.tuning.epsilon.bound",
        "privacy.tuning.bound",
        "privacy.tuning.analysis",
        "privacy.tuning.expected_runs",
        "privacy.tuning.epsilon_single_run",
        "privacy.tuning.epsilon_single_run.bound",
        "privacy.gdpcore_version",
        "privacy.audit_key",
        "privacy.audited_at",
        "privacy.report_uri",
        "privacy.audit_flow_run",
        "privacy.card",
    }
)


def is_tool_tag(key: str) -> bool:
    """Whether ``key`` is a tag gdp-audit writes (its fixed vocabulary, :data:`tasks.evidence_card.EVIDENCE_TAGS`
    included); the only tags it ever deletes."""
    from tasks.evidence_card import EVIDENCE_TAGS

    return key in _TOOL_TAGS or key in EVIDENCE_TAGS


@dataclasses.dataclass
class MlflowPublishResult:
    tagged: list[str] = dataclasses.field(default_factory=list)  # "name:version"
    missing: list[str] = dataclasses.field(default_factory=list)  # not registered in MLflow
    artifacts: list[str] = dataclasses.field(default_factory=list)
    not_auditable: list[str] = dataclasses.field(default_factory=list)  # "name:version" marked not auditable
    tags_written: int = 0  # tag values set or deleted (unchanged values are not rewritten)
    failed: dict[str, str] = dataclasses.field(default_factory=dict)  # "name:version" -> why it was not tagged


def publish_to_mlflow(
    tracking_uri: str,
    targets: list[tuple[str, str, dict[str, Any], dict[str, str] | None]],
    *,
    report_uri: str | None = None,
    flow_run: str | None = None,
    not_auditable: Sequence[tuple[str, str, str]] = (),
) -> MlflowPublishResult:
    """``targets``: (registered model name, version, audit row, card paths or None) per model version;
    ``not_auditable``: (registered model name, version, reason) per version the audit could not describe."""
    try:
        from mlflow import MlflowClient
        from mlflow.exceptions import MlflowException
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise RuntimeError("MLflow is not installed: pip install 'gdp-audit[mlflow]'") from exc

    client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    out = MlflowPublishResult()
    for name, version, row, card in targets:
        with _one_version(out, name, version):
            try:
                mv = client.get_model_version(name, version)
            except MlflowException:
                out.missing.append(f"{name}:{version}")
                continue
            _tag_audited(client, out, mv, name, version, row, card, report_uri, flow_run)
            out.tagged.append(f"{name}:{version}")
    for name, version, reason in not_auditable:
        with _one_version(out, name, version):
            try:
                mv = client.get_model_version(name, version)
            except MlflowException:
                out.missing.append(f"{name}:{version}")
                continue
            _tag_not_auditable(client, out, mv, name, version, reason)
            out.not_auditable.append(f"{name}:{version}")
    return out


@contextlib.contextmanager
def _one_version(out: MlflowPublishResult, name: str, version: str) -> Iterator[None]:
    """Everything done for one version: an error (a tag the server refuses, a row it cannot format) is that version's
    one-line failure in ``out.failed``, and the other versions are tagged."""
    try:
        yield
    except Exception as exc:
        from tasks.mlflow_registry import error_line

        out.failed[f"{name}:{version}"] = error_line(exc)


def _tag_audited(
    client: Any,
    out: MlflowPublishResult,
    mv: Any,
    name: str,
    version: str,
    row: dict[str, Any],
    card: dict[str, str] | None,
    report_uri: str | None,
    flow_run: str | None,
) -> None:
    from tasks.evidence_card import stale_evidence_tags

    tags = privacy_tags(row, report_uri=report_uri, flow_run=flow_run)
    if card:
        tags["privacy.card"] = Path(card["markdown"]).name
    existing = dict(mv.tags or {})
    for key, value in tags.items():
        if existing.get(key) != value[:5000]:
            client.set_model_version_tag(name, version, key, value[:5000])
            out.tags_written += 1
    for key in stale_evidence_tags(existing, tags):  # tasks.evidence_card: evidence removed since
        client.delete_model_version_tag(name, version, key)
        out.tags_written += 1
    if card:
        text = merge_description(mv.description, Path(card["markdown"]).read_text(encoding="utf-8"))
        if text != (mv.description or ""):
            client.update_model_version(name, version, description=text)
        if mv.run_id and existing.get("privacy.audit_key") != row["audit_key"]:  # a new audit's card files
            for path in card.values():
                client.log_artifact(mv.run_id, path, artifact_path=f"privacy/v{version}")
                out.artifacts.append(f"{mv.run_id}/privacy/v{version}/{Path(path).name}")


def _tag_not_auditable(client: Any, out: MlflowPublishResult, mv: Any, name: str, version: str, reason: str) -> None:
    existing = dict(mv.tags or {})
    status = f"not auditable: {reason}"[:5000]
    if existing.get("privacy.status") != status:
        client.set_model_version_tag(name, version, "privacy.status", status)
        out.tags_written += 1
    for key in existing:  # the numbers an earlier audit wrote; an owner's own privacy.* tag stays
        if key != "privacy.status" and is_tool_tag(key):
            client.delete_model_version_tag(name, version, key)
            out.tags_written += 1
    stripped = strip_card(mv.description)
    if stripped != (mv.description or ""):  # an earlier audit's card no longer describes this version
        client.update_model_version(name, version, description=stripped)
