"""Lake row and report columns of evidence audits; imported by :mod:`tasks.schema`
(column docs) and :mod:`tasks.evidence` (lake rows). No heavy imports: pyarrow only."""

from __future__ import annotations

import pyarrow as pa

__all__ = [
    "EVIDENCE_COLUMNS",
    "EVIDENCE_DOCS",
    "EVIDENCE_SCHEMA",
    "EVIDENCE_VIEW_COMMENT",
    "MODEL_PRIVACY_EVIDENCE_COLUMNS",
    "MODEL_PRIVACY_EVIDENCE_DOCS",
]

_LIST = pa.list_(pa.float64())
EVIDENCE_SCHEMA = pa.schema(
    [
        pa.field("model", pa.string(), nullable=False),
        pa.field("version", pa.int64(), nullable=False),
        pa.field("evidence_key", pa.string(), nullable=False),
        pa.field("audit_key", pa.string(), nullable=False),
        pa.field("method", pa.string()),
        pa.field("method_id", pa.string()),
        pa.field("confidence", pa.float64()),
        pa.field("declared_confidence", pa.float64()),
        pa.field("family_level", pa.float64()),
        pa.field("family_size", pa.int64()),
        pa.field("n_members", pa.int64()),
        pa.field("n_non_members", pa.int64()),
        pa.field("mu_lower", pa.float64()),
        pa.field("certified_mu", pa.float64()),
        pa.field("eps_deltas", _LIST),
        pa.field("epsilon_lower", _LIST),
        pa.field("detectable_mu", pa.float64()),
        pa.field("verdict", pa.string()),
        pa.field("verdict_basis", pa.string()),
        pa.field("tightness", pa.float64()),
        pa.field("strongest_fpr", pa.float64()),
        pa.field("one_run_epsilon_lower", pa.float64()),
        pa.field("threat_model", pa.string()),
        pa.field("synthetic", pa.bool_()),
        pa.field("scores_file", pa.string()),
        pa.field("scores_sha256", pa.string()),
        pa.field("evidence_description", pa.string()),
        pa.field("points_fpr", _LIST),
        pa.field("points_tpr", _LIST),
        pa.field("box_fpr_lo", _LIST),
        pa.field("box_fpr_hi", _LIST),
        pa.field("box_tpr_lo", _LIST),
        pa.field("box_tpr_hi", _LIST),
        pa.field("evidence_json", pa.string()),
        pa.field("gdpcore_version", pa.string()),
        pa.field("computed_at", pa.timestamp("us", tz="UTC")),
        pa.field("run_id", pa.string()),
    ]
)

EVIDENCE_MEMBERS_SCHEMA = pa.schema(
    [
        pa.field("registry", pa.string(), nullable=False),
        pa.field("model", pa.string(), nullable=False),
        pa.field("version", pa.int64(), nullable=False),
        pa.field("evidence_key", pa.string(), nullable=False),
    ]
)

EVIDENCE_VIEW_COMMENT = (
    "One row per model version with canary-score evidence: a lower bound on its privacy loss from a membership-"
    "inference audit (mu_lower, epsilon_lower at eps_deltas) at the stated confidence (family-wise: "
    "confidence = max(declared, 1 - family_level / family_size)), checked against the certified curve: verdict "
    "'consistent' (no evidence of a violation, not proof of privacy) or 'violates_claim'."
)

# Columns of the ``evidence`` view, in order (the lists of points / boxes stay in the lake row, for the card plot).
EVIDENCE_COLUMNS: list[str] = (
    "registry model version evidence_key audit_key method method_id confidence declared_confidence family_level family_size "
    "n_members n_non_members mu_lower certified_mu eps_deltas epsilon_lower detectable_mu verdict verdict_basis tightness "
    "strongest_fpr one_run_epsilon_lower threat_model synthetic scores_file scores_sha256 evidence_description "
    "gdpcore_version computed_at run_id"
).split()

EVIDENCE_DOCS: dict[str, str] = {
    "evidence_key": "hash of the scores file's content, the declared mechanism's spec, the confidence, the "
    "family-wise level and the code version: identifies an evidence audit",
    "method": "how the lower bounds were computed (gdpcore.evidence: order-statistic thresholds, exact "
    "Clopper-Pearson intervals, Bonferroni over the thresholds)",
    "method_id": "short id of the method (cp-orderstat-bonferroni: gdpcore.evidence.evidence_from_scores)",
    "confidence": "confidence at which mu_lower and epsilon_lower hold (after family-wise correction)",
    "declared_confidence": "the confidence the manifest asked for",
    "family_level": "audit-wide false-alarm level (probability that any consistent version is flagged)",
    "family_size": "number of model versions audited with evidence in the run (N of the Bonferroni correction)",
    "n_members": "canaries included in training (member scores)",
    "n_non_members": "canaries held out (non-member scores)",
    "mu_lower": "lower bound on mu of any mu-GDP description of the trained model (0: no evidence)",
    "certified_mu": "the audit's certified (upper-bound) mu of the declared mechanism",
    "eps_deltas": "deltas of epsilon_lower (the report's deltas: declared delta, 1e-5, 1e-6, 1e-9)",
    "epsilon_lower": "lower bound on epsilon at each of eps_deltas",
    "detectable_mu": "an audit of this size can only flag a model whose true mu exceeds this (Gaussian scores)",
    "verdict": "consistent (no evidence of a violation, not proof of privacy) or violates_claim",
    "verdict_basis": "certified: the verdict is against a proven upper bound on the ROC; estimate: the audit's curve "
    "is itself only an estimate (estimate_reason, e.g. a shuffled sampler accounted as Poisson), so is the verdict",
    "tightness": "mu_lower / certified_mu (1: the certified bound is attained by the attack)",
    "strongest_fpr": "FPR (upper bound) where the evidence comes closest to the certified curve (consistent) or "
    "furthest above it (violates_claim), measured as Phi^-1(TPR lower bound) - Phi^-1(certified TPR), the mu scale "
    "(NULL: no point with a positive TPR lower bound)",
    "one_run_epsilon_lower": "epsilon lower bound of the one-run audit at the declared delta (NULL: none declared)",
    "threat_model": "what the attacker saw (manifest evidence.threat_model)",
    "synthetic": "true when the scores are simulated, not measured on a trained model",
    "scores_file": "the scores file, as the manifest names it",
    "scores_sha256": "sha256 of the scores file's content",
    "evidence_description": "free text from the manifest's evidence block",
    "computed_at": "when the evidence audit was computed (UTC)",
}

MODEL_PRIVACY_EVIDENCE_COLUMNS: list[str] = (
    "evidence_verdict evidence_mu_lower evidence_confidence evidence_method evidence_tightness evidence_synthetic "
    "evidence_method_id evidence_verdict_basis"
).split()
MODEL_PRIVACY_EVIDENCE_DOCS: dict[str, str] = {
    "evidence_verdict": "verdict of the evidence audit (view evidence): consistent / violates_claim; NULL: no evidence",
    "evidence_mu_lower": "mu lower bound from the canary scores (view evidence)",
    "evidence_confidence": "confidence of evidence_mu_lower (family-wise corrected)",
    "evidence_method": "method of the evidence audit",
    "evidence_tightness": "evidence_mu_lower / mu",
    "evidence_synthetic": "true when the evidence scores are simulated",
    "evidence_method_id": "short id of evidence_method (e.g. cp-orderstat-bonferroni)",
    "evidence_verdict_basis": "certified / estimate: whether evidence_verdict is against a proven or an estimated "
    "curve",
}
