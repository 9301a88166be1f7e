"""The privacy card's *Evidence* section, its log-log evidence panel, the ``privacy.evidence.*`` MLflow tags and the
audit summary's violation lines - all rendered from an evidence row (:data:`tasks.evidence_schema.EVIDENCE_SCHEMA`)
attached to the audit row under ``"evidence"`` (:meth:`tasks.evidence.EvidenceResult.attach`)."""

from __future__ import annotations

import math
from typing import Any

from tasks.formatting import format_number

__all__ = [
    "EVIDENCE_TAGS",
    "add_evidence_panel",
    "evidence_section",
    "evidence_stamp",
    "evidence_tags",
    "stale_evidence_tags",
    "violation_line",
]

_VERDICT_TEXT = {
    "consistent": "consistent with the claim - no evidence of a violation, which is not proof of privacy",
    "violates_claim": "VIOLATES THE CLAIM - the attack does better than the declared mechanism allows",
}


def _g(x: Any, digits: int = 4) -> str:
    return format_number(x, digits)


def _conf(e: dict[str, Any]) -> str:
    return f"{100 * e['confidence']:.4g}%"


def violation_line(key: str, e: dict[str, Any]) -> str:
    """``name:v: mu >= X at C% (method) > certified mu Y`` (audit summary, CLI)."""
    syn = " [synthetic scores]" if e.get("synthetic") else ""
    return (
        f"{key}: canary scores give mu >= {_g(e['mu_lower'])} (lower bound, {_conf(e)} confidence), above the "
        f"certified curve of the declared mechanism (mu {_g(e['certified_mu'])}){syn}"
    )


def evidence_stamp(row: dict[str, Any]) -> str:
    """What the card depends on beyond the audit row: the evidence key (empty without evidence)."""
    e = row.get("evidence")
    return f"evidence-{e['evidence_key']}" if e else ""


def _threat_model() -> str:
    from gdpcore.evidence import THREAT_MODEL_INDEPENDENT

    return THREAT_MODEL_INDEPENDENT


def _basis(row: dict[str, Any]) -> str:
    """The evidence row's ``verdict_basis`` (rows before it existed: from the audit row's ``estimate_reason``)."""
    e = row.get("evidence") or {}
    return str(e.get("verdict_basis") or ("estimate" if row.get("estimate_reason") else "certified"))


def evidence_section(row: dict[str, Any]) -> list[str]:
    """Markdown lines of the card's *Evidence* section ([] when the version has no evidence)."""
    e = row.get("evidence")
    if not e:
        return []
    label = " (SYNTHETIC scores: simulated, not measured on a trained model)" if e.get("synthetic") else ""
    eps = dict(zip(e["eps_deltas"], e["epsilon_lower"], strict=True))
    d = row["delta"]
    lines = [
        "",
        f"## Evidence{label}",
        "",
        f"A membership-inference audit with {e['n_members']:,} member and {e['n_non_members']:,} non-member canaries "
        f"(threat model: {e['threat_model']}) gives a **lower bound** on this model's privacy loss, at "
        f"{_conf(e)} confidence (audit-wide false-alarm level {e['family_level']:g} over {e['family_size']} "
        f"version(s) with evidence, Bonferroni; declared {100 * e['declared_confidence']:.4g}%).",
        "",
        f"- Verdict: **{_VERDICT_TEXT.get(e['verdict'], e['verdict'])}**"
        + (" (against an ESTIMATE of the curve, not a certified bound)." if _basis(row) == "estimate" else "."),
        "",
        "| quantity | value | bound |",
        "|---|---|---|",
        f"| mu from the canary scores | {_g(e['mu_lower'])} | lower ({_conf(e)}, {e.get('method_id') or e['method']}) |",
        f"| certified mu of the declared mechanism | {_g(e['certified_mu'])} | {row['mu_bound']} |",
        f"| tightness (lower / certified mu) | {_g(e['tightness'], 3)} | - |",
        f"| epsilon at delta = {d:.3g} from the canary scores | {_g(eps.get(d))} | lower ({_conf(e)}) |",
    ]
    if e.get("one_run_epsilon_lower") is not None:
        lines.append(f"| epsilon at delta = {d:.3g}, one-run audit | {_g(e['one_run_epsilon_lower'])} | lower |")
    if e.get("strongest_fpr") is not None:
        where = "furthest above" if e["verdict"] == "violates_claim" else "closest to"
        lines.append(f"| FPR where the evidence comes {where} the certified curve | {e['strongest_fpr']:.2e} | - |")
    det = e.get("detectable_mu")
    lines += [
        "",
        (
            f"- **Power.** An audit of this size can only flag a model whose true mu exceeds {_g(det, 3)} (scores "
            "shaped like Gaussians); a smaller violation would go unseen."
            if det is not None and math.isfinite(det)
            else "- **Power.** This audit is too small to flag any violation of the certified curve."
        ),
        "- **What this is.** The certified numbers above bound every attack; this section is one attack's measured "
        "success. `consistent` means no evidence of a violation, not proof of privacy.",
        *(
            [
                "- **Against an estimate.** The certified curve of this run is itself only an estimate (see above), so "
                "the verdict compares the attack with an estimate, not with a proven bound."
            ]
            if _basis(row) == "estimate"
            else []
        ),
        f"- **Validity.** The lower bounds hold under gdpcore's threat model for score evidence: {_threat_model()}",
        f"- Scores: `{e['scores_file']}` (sha256 {e['scores_sha256'][:16]}...)"
        + (f"; {e['evidence_description']}" if e.get("evidence_description") else ""),
    ]
    return lines


def add_evidence_panel(fig: Any, row: dict[str, Any]) -> None:
    """Give the card's figure a third, log-log panel: empirical points with their confidence boxes against the
    certified curve (no-op without evidence)."""
    e = row.get("evidence")
    if not e:
        return
    import numpy as np
    from matplotlib.patches import Rectangle

    axes = fig.axes[:2]
    fig.set_size_inches(15, 4.8)
    gs = fig.add_gridspec(1, 3)
    for ax, spec in zip(axes, (gs[0], gs[1]), strict=True):
        ax.set_subplotspec(spec)
    ax = fig.add_subplot(gs[2])
    fpr = np.asarray(row["curve_fpr"], dtype=float)
    tpr = 1.0 - np.asarray(row["curve_fnr"], dtype=float)
    ax.plot(fpr, tpr, "k-", lw=2, label=f"certified curve (mu {e['certified_mu']:.3g})")
    for x0, x1, y0, y1 in zip(e["box_fpr_lo"], e["box_fpr_hi"], e["box_tpr_lo"], e["box_tpr_hi"], strict=True):
        x0, y0 = max(x0, 1e-7), max(y0, 1e-7)
        ax.add_patch(Rectangle((x0, y0), max(x1 - x0, 0), max(y1 - y0, 0), color="C3", alpha=0.18, lw=0))
    pts = [(f, t) for f, t in zip(e["points_fpr"], e["points_tpr"], strict=True) if f > 0 and t > 0]
    if pts:
        ax.plot(*zip(*pts, strict=True), "o", color="C3", ms=3, label="canary attack (points)")
    ax.plot(
        [], [], "s", color="C3", alpha=0.3, label=f"point to its {100 * e['confidence']:.4g}% bounds (FPR up, TPR down)"
    )
    if e.get("mu_lower", 0) > 0:
        import gdpcore

        grid = np.logspace(-7, 0, 200)
        ax.plot(
            grid,
            1 - np.asarray(gdpcore.get_beta_from_gdp(mu=float(e["mu_lower"]), alpha=grid)),
            "C3--",
            lw=1,
            label=f"evidence: mu >= {e['mu_lower']:.3g}",
        )
    ax.plot([1e-7, 1], [1e-7, 1], color="0.6", lw=0.8)
    lo = max(1e-7, 0.3 / max(e["n_non_members"], 1))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, 1)
    ax.set_ylim(lo, 1.05)
    ax.set_xlabel("attack FPR")
    ax.set_ylabel("attack TPR")
    syn = ", SYNTHETIC scores" if e.get("synthetic") else ""
    ax.set_title(f"evidence: {e['verdict']}{syn}", fontsize=9, color="C3" if e["verdict"] == "violates_claim" else "k")
    ax.legend(fontsize=7, loc="lower right")


def evidence_tags(row: dict[str, Any]) -> dict[str, str]:
    """``privacy.evidence.*`` MLflow tags ({} without evidence)."""
    e = row.get("evidence")
    if not e:
        return {}
    return {
        "privacy.evidence.verdict": e["verdict"],
        "privacy.evidence.mu_lower": f"{e['mu_lower']:.6g}",
        "privacy.evidence.mu_lower.bound": "lower",
        "privacy.evidence.confidence": f"{e['confidence']:.6g}",
        "privacy.evidence.method": str(e["method"]),
        **({"privacy.evidence.method_id": str(e["method_id"])} if e.get("method_id") else {}),
        "privacy.evidence.verdict_basis": _basis(row),
        "privacy.evidence.synthetic": "true" if e.get("synthetic") else "false",
        "privacy.evidence.key": e["evidence_key"],
    }


def hf_evidence(row: dict[str, Any]) -> dict[str, Any] | None:
    """The ``evidence`` block of the Hugging Face ``differential_privacy`` record (None without evidence)."""
    e = row.get("evidence")
    if not e:
        return None
    return {
        "verdict": e["verdict"],
        "verdict_basis": _basis(row),
        "mu_lower": {"value": round(float(e["mu_lower"]), 6), "bound": "lower"},
        "confidence": float(e["confidence"]),
        "method_id": str(e.get("method_id") or e["method"]),
        "synthetic": bool(e.get("synthetic")),
    }


EVIDENCE_TAGS = frozenset(
    {
        "privacy.evidence.verdict",
        "privacy.evidence.mu_lower",
        "privacy.evidence.mu_lower.bound",
        "privacy.evidence.confidence",
        "privacy.evidence.method",
        "privacy.evidence.method_id",
        "privacy.evidence.verdict_basis",
        "privacy.evidence.synthetic",
        "privacy.evidence.key",
    }
)
"""Every key :func:`evidence_tags` can write (tasks.mlflow_tags deletes only the tags it writes)."""


def stale_evidence_tags(existing: dict[str, str], tags: dict[str, str]) -> list[str]:
    """``privacy.evidence.*`` tags an earlier audit wrote that this one does not (the evidence was removed)."""
    return sorted(k for k in existing if k in EVIDENCE_TAGS and k not in tags)
