"""Privacy cards: Markdown statement, PNG trade-off curve and Hugging Face model-card YAML per model version.

Cards are rendered from an audit row (:data:`tasks.audit.AUDIT_SCHEMA`), never recomputed: what the card says is
exactly what the report's ``model_privacy`` view holds. Every number carries its bound label (upper / lower /
estimate / exact), the accountant and its discretisation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tasks.evidence_card import add_evidence_panel, evidence_section, evidence_stamp, hf_evidence  # evidence
from tasks.formatting import format_number
from tasks.safe_write import atomic_write_text

__all__ = [
    "DEFINITION",
    "card_dir",
    "card_stamp",
    "hf_card_metadata",
    "hf_yaml_block",
    "merge_into_readme",
    "render_markdown",
    "write_card",
]

# One vocabulary for MLflow tags (tasks.mlflow_tags) and the HF ``differential_privacy`` block: the definition below,
# neighbouring relations as the manifests spell them (add_remove / replace_one), the same bound labels.
DEFINITION = "mu-GDP"

_NEIGHBOURING_TEXT = {
    "add_remove": "adding or removing one {unit} (add/remove adjacency)",
    "replace_one": "replacing one {unit} by another (replace-one adjacency)",
}


def _g(x: Any, digits: int = 4) -> str:
    return format_number(x, digits)


def _disc(row: dict[str, Any]) -> str:
    return "exact (closed form)" if row["discretization"] is None else f"{row['discretization']:g}"


def card_dir(root: str | Path, model: str, version: int) -> Path:
    """``root/MODEL/vVERSION``; the model name comes from a lake row, so it is checked and the path kept under root."""
    from tasks.lake import safe_join
    from tasks.registry import is_valid_name

    if not is_valid_name(model) or isinstance(version, bool) or not isinstance(version, int):
        from gdpcore._validation import bounded_repr  # the error path only: gdpcore takes seconds to import

        raise ValueError(f"not a model version: {bounded_repr(model)}:{bounded_repr(version)}")
    return safe_join(root, model, f"v{version}")


def render_markdown(row: dict[str, Any], *, report_uri: str | None = None, png_name: str | None = "curve.png") -> str:
    unit = row["privacy_unit"]
    adj = _NEIGHBOURING_TEXT.get(row["neighbouring"], row["neighbouring"]).format(unit=unit)
    mu, regret, delta, eps = row["mu"], row["gdp_regret"], row["delta"], row["epsilon"]
    tprs = list(zip(row["tpr_fprs"], row["tpr"], strict=True))
    tpr_1pct = next((t for a, t in tprs if abs(a - 1e-2) < 1e-12), None)
    complete = row["gdp_complete"]
    lines = [
        f"# Privacy card: {row['model']} v{row['version']}",
        "",
        f"**Statement.** The training mechanism of {row['model']} v{row['version']} "
        f"{'is estimated (not proven) to be' if row.get('estimate_reason') else 'is'} {_g(mu)}-GDP (Gaussian differential privacy) with respect to "
        f"{adj}. Equivalently, any membership-inference attack on one {unit} behaves no better than telling apart two "
        f"unit-variance Gaussians {_g(mu)} standard deviations apart"
        + (
            f": at a 1% false-positive rate it succeeds at most {_g(100 * tpr_1pct, 3)}% of the time."
            if tpr_1pct is not None
            else "."
        )
        + (
            f" mu-GDP describes this mechanism essentially completely (regret {_g(regret, 2)} < 0.01)."
            if complete
            else f" mu-GDP is **not** a complete description here (regret {_g(regret, 2)} >= 0.01): rely on the (eps, delta)"
            " and TPR numbers below, which come from the full trade-off curve."
        )
        + (
            f" That is one training run's guarantee: this version is the best of K runs, and the procedure's epsilon at "
            f"delta = {delta:.3g} is <= {_g(row['tuning_epsilon'])} ({row['tuning_bound']}; hyper-parameter tuning below)."
            if row.get("tuning_epsilon") is not None
            else ""
        ),
        "",
        *_estimate_paragraph(row),
        f"- Verdict: **{row['verdict']}**",
        f"- Accountant: {row['accountant']}; discretization {_disc(row)}; gdpcore {row['gdpcore_version']}",
        f"- Audited at {row['audited_at']} (audit key `{row['audit_key']}`)",
        "",
        "| quantity | value | bound |",
        "|---|---|---|",
        f"| mu (mu-GDP) | {_g(mu)} (bracket [{_g(row['mu_lower'])}, {_g(mu)}]) | {row['mu_bound']} |",
        f"| GDP regret | {_g(regret, 3)} | {row['gdp_regret_bound']} |",
        f"| epsilon at declared delta = {delta:.3g} ({row['delta_policy']}) | {_g(eps)} | {row['epsilon_bound']} |",
        *_sampler_and_tuning_rows(row, delta),
    ]
    for d, e in zip(row["eps_deltas"], row["eps_values"], strict=True):
        if d != delta:
            lines.append(f"| epsilon at delta = {d:.0e} | {_g(e)} | {row['epsilon_bound']} |")
    for a, t in tprs:
        lines.append(f"| attack TPR at FPR = {a:.0e} | {_g(t)} | {row['tpr_bound']} |")
    lines += [
        f"| membership advantage (TPR - FPR, max) | {_g(row['advantage'])} | {row['advantage_bound']} |",
        f"| Bayes security (1 - advantage) | {_g(row['bayes_security'])} | {row['bayes_security_bound']} |",
    ]
    if row.get("claimed_epsilon") is not None:
        lines += ["", *_claim_paragraph(row)]
    lines += evidence_section(row)  # tasks.evidence_card: the Evidence section, [] without evidence
    mech = json.loads(row["mechanism_json"])
    lines += [
        "",
        "## Caveats",
        "",
        f"- **Tail cut-off.** mu certifies the Gaussian trade-off curve only where FPR and FNR are both >= "
        f"{row['mu_cutoff']:.1e}"
        + (" (exact, no cut-off)." if row["mu_cutoff"] == 0 else "; below it read the curve/epsilon values, not mu."),
        f"- **Adjacency.** The guarantee protects one {unit} under {row['neighbouring']} neighbouring datasets; it says "
        "nothing about groups of records or about users contributing several records unless the unit is the user.",
    ]
    sampler = row.get("sampler")
    if row.get("estimate_reason"):
        lines.append(
            f"- **Sampling.** Batches drawn by {_SAMPLER_TEXT.get(sampler or '', sampler)}; {row['estimate_reason']}."
            + (" The shuffled run's proven lower bound is stated above." if row.get("shuffle_epsilon_lower") else "")
            + (_NO_SHUFFLE_LOWER if sampler == "shuffle" and row.get("shuffle_epsilon_lower") is None else "")
        )
    elif sampler == "poisson":
        lines.append(
            "- **Sampling.** Accounted as Poisson subsampling (each record independently with probability q per step), "
            "which is how the batches were drawn (sampler: poisson). Had they been shuffled instead, these numbers would "
            "only be estimates."
        )
    elif sampler == "fixed":
        lines.append(
            "- **Sampling.** Fixed-size batches drawn without replacement, accounted as such under replace-one adjacency."
        )
    elif sampler == "cyclic":
        lines.append(
            f"- **Sampling.** Batches drawn in {_SAMPLER_TEXT['cyclic']}, accounted as such: the epochs compose "
            "Gaussian mechanisms exactly (cyclic_gaussian)."
        )
    elif sampler == "balls_in_bins":
        lines.append(
            f"- **Sampling.** Batches drawn by {_SAMPLER_TEXT['balls_in_bins']}, accounted as such "
            "(balls_in_bins_gaussian): the upper numbers are proven, the smaller of the deterministic-batch guarantee "
            "and the random-allocation bound (Feldman and Shenfeld 2025)."
        )
    elif "subsampled" in row["mechanism_json"]:
        lines.append(
            "- **Sampling assumption.** Accounted as Poisson subsampling at rate q = batch size / dataset size. Training "
            "with shuffled fixed-size batches is not covered by this analysis; the true guarantee may then differ."
        )
    lines += [
        f"- **delta policy.** delta = {delta:.3g} from the declared policy {row['delta_policy']}"
        + (f" (N = {row['dataset_size']:,})" if row.get("dataset_size") is not None else "")
        + ". epsilon values depend on this choice; mu does not.",
        *_tuning_lines(row, delta),
        "- **Scope.** Only the training mechanism is accounted (mechanism below)"
        + ("" if row.get("tuning_epsilon") is not None else "; hyper-parameter tuning")
        + ", data-dependent preprocessing and any non-private release are outside this statement.",
        "",
        f"Mechanism ({row['mechanism_form']}): `{json.dumps(mech, sort_keys=True)[:1500]}`",
    ]
    if row.get("mechanism_detail"):
        lines.append(f"\nDerived as: {row['mechanism_detail']}.")
    if row.get("source"):
        lines.append(f"\nSource: {row['source']}")
    query = f"SELECT * FROM model_privacy WHERE model = '{row['model']}' AND version = {row['version']}"
    if report_uri:
        lines.append(f"\nFull report (SQL): `{report_uri}` — `{query}`")
    else:
        lines.append(f"\nFull report: the gdp-audit DuckDB report — `{query}`")
    if png_name:
        lines.append(f"\n![trade-off curve]({png_name})")
    return "\n".join(lines) + "\n"


_NO_SHUFFLE_LOWER = (
    " No proven lower bound is given for this run: the shuffled-batch lower bound (Chua et al. 2024) needs every epoch"
    " cut into T batches of one size (q = 1/T, as Opacus records 1/len(data_loader); for TF-Privacy / Keras, a batch"
    " size dividing the dataset size) and at least one whole epoch."
)

_SAMPLER_TEXT = {
    "poisson": "Poisson sampling",
    "shuffle": "shuffling (fixed-size batches, one pass per epoch)",
    "fixed": "fixed-size sampling without replacement",
    "cyclic": "a fixed order (each record in exactly one batch per epoch, the same batches every epoch)",
    "balls_in_bins": "balls-in-bins (each record in one uniformly chosen step per epoch)",
}


def _shuffle_lower_text(row: dict[str, Any], delta: float) -> str:
    """The shuffled run's proven lower bound beside the Poisson estimate (tasks.audit.shuffle_lower_fields), or ''."""
    low = row.get("shuffle_epsilon_lower")
    if low is None:
        return ""
    est = row["epsilon"]
    text = (
        f" This run's epsilon at delta = {delta:.3g} is at least {_g(low)} (proven lower bound, "
        f"{row.get('shuffle_analysis') or 'Chua et al. 2024'}); the Poisson figure {_g(est)} is an estimate"
    )
    if row.get("shuffle_mu_lower") is not None:
        text += f"; its mu is at least {_g(row['shuffle_mu_lower'])} (lower bound)"
    text += "."
    if low > est:
        text += " The Poisson figure understates the risk."
    return text


def _tuning_lines(row: dict[str, Any], delta: float) -> list[str]:
    """The best-of-K caveat (tasks.audit.tuning_fields), or [] without tuning."""
    if row.get("tuning_epsilon") is None:
        return []
    return [
        f"- **Hyper-parameter tuning.** This version is the best of K runs ({_runs(row)}; {row['tuning_analysis']}): "
        f"epsilon at delta = {delta:.3g} is <= {_g(row['tuning_epsilon'])} ({row['tuning_bound']}); one run: "
        f"{_g(row['epsilon_single_run'])}. The table's other rows are one run's guarantee."
    ]


def _sampler_and_tuning_rows(row: dict[str, Any], delta: float) -> list[str]:
    """Table rows beside the declared-delta epsilon: a shuffled run's proven lower bound (tasks.audit.
    shuffle_lower_fields) and a tuned version's best-of-K bound (tasks.audit.tuning_fields), each with its label."""
    rows = []
    low = row.get("shuffle_epsilon_lower")
    if low is not None:
        label = row.get("shuffle_label") or "lower"
        rows.append(f"| epsilon at declared delta = {delta:.3g}, the shuffled run itself | {_g(low)} | {label} |")
        if row.get("shuffle_mu_lower") is not None:
            rows.append(f"| mu, the shuffled run itself | {_g(row['shuffle_mu_lower'])} | {label} |")
    if row.get("tuning_epsilon") is not None:
        analysis = str(row.get("tuning_analysis") or "").split(" (")[0]
        rows.append(
            f"| epsilon at declared delta = {delta:.3g}, best of K runs ({_runs(row)}; {analysis}) | "
            f"{_g(row['tuning_epsilon'])} | {row['tuning_bound']} |"
        )
    return rows


def _runs(row: dict[str, Any]) -> str:
    """``K = 10`` or ``K random, E[K] = 10`` from a tuned row's distribution."""
    law = json.loads(row["tuning_distribution"])
    if law["distribution"] == "fixed":
        return f"K = {law['count']}"
    return f"K random, E[K] = {row['tuning_expected_runs']:.3g}"


def _estimate_paragraph(row: dict[str, Any]) -> list[str]:
    """The card's first caveat when its numbers are estimates (sampler honesty, gdpcore.adapters), with a shuffled
    run's proven lower bound (the Poisson figure beside it)."""
    if not row.get("estimate_reason"):
        return []
    return [
        f"**Estimate, not a guarantee.** Every number on this card is an *estimate*: {row['estimate_reason']}."
        + _shuffle_lower_text(row, row["delta"]),
        "",
    ]


def _sampling(row: dict[str, Any]) -> str:
    """The HF / MLflow ``sampling`` value: the manifest's sampler, else what the mechanism accounts."""
    if row.get("sampler"):
        return str(row["sampler"])
    text = row["mechanism_json"]
    if "sampled_without_replacement" in text:
        return "fixed"
    return "poisson" if "subsampled" in text else "none"


def hf_record(row: dict[str, Any], *, report_uri: str | None = None) -> dict[str, Any]:
    """The nested ``differential_privacy`` record (docs/references.md C-3 field set)."""
    return {
        "definition": DEFINITION,
        "dp_flavor": "other (f-DP / Gaussian DP)",
        "mu": round(float(row["mu"]), 6),
        "mu_bound": row["mu_bound"],
        "mu_certified_for_fpr_at_least": float(row["mu_cutoff"]),
        "gdp_regret": float(f"{row['gdp_regret']:.3g}"),
        "gdp_regret_bound": row["gdp_regret_bound"],
        "verdict": row["verdict"],
        "epsilon_delta": [
            {"epsilon": round(float(e), 6), "delta": float(d), "bound": row["epsilon_bound"]}
            for d, e in zip(row["eps_deltas"], row["eps_values"], strict=True)
        ],
        "declared_delta": float(row["delta"]),
        "delta_policy": row["delta_policy"],
        "tpr_at_fpr": [
            {"fpr": float(a), "tpr": round(float(t), 6), "bound": row["tpr_bound"]}
            for a, t in zip(row["tpr_fprs"], row["tpr"], strict=True)
        ],
        "advantage": {"value": round(float(row["advantage"]), 6), "bound": row["advantage_bound"]},
        "bayes_security": {"value": round(float(row["bayes_security"]), 6), "bound": row["bayes_security_bound"]},
        "privacy_unit": row["privacy_unit"],
        "neighboring_relation": row["neighbouring"],
        "sampling": _sampling(row),
        **({"estimate_reason": row["estimate_reason"]} if row.get("estimate_reason") else {}),
        **_hf_shuffle_and_tuning(row),
        "accountant": row["accountant"],
        "discretization": row["discretization"],
        "gdpcore_version": row["gdpcore_version"],
        "audited_at": str(row["audited_at"]),
        **({"published_claim": _hf_claim(row)} if row.get("claimed_epsilon") is not None else {}),
        **({"report": report_uri} if report_uri else {}),
        **({"evidence": hf_evidence(row)} if row.get("evidence") else {}),  # tasks.evidence_card
    }


def _hf_shuffle_and_tuning(row: dict[str, Any]) -> dict[str, Any]:
    """The HF record's entries beside the Poisson numbers: a shuffled run's proven lower bound
    (``shuffled_run_lower_bound``, tasks.audit.shuffle_lower_fields) and a tuned version's best-of-K bound
    (``hyperparameter_tuning``, tasks.audit.tuning_fields), each labelled and naming its analysis; {} without them."""
    out: dict[str, Any] = {}
    delta = float(row["delta"])
    low = row.get("shuffle_epsilon_lower")
    if low is not None:
        label = row.get("shuffle_label") or "lower"
        shuffled: dict[str, Any] = {"epsilon": round(float(low), 6), "delta": delta, "bound": label}
        if row.get("shuffle_mu_lower") is not None:
            shuffled["mu"] = round(float(row["shuffle_mu_lower"]), 6)
            shuffled["mu_bound"] = label
        shuffled["analysis"] = row.get("shuffle_analysis") or "Chua et al. 2024"
        shuffled["poisson_epsilon"] = {"epsilon": round(float(row["epsilon"]), 6), "bound": row["epsilon_bound"]}
        shuffled["poisson_understates_risk"] = bool(float(low) > float(row["epsilon"]))
        out["shuffled_run_lower_bound"] = shuffled
    if row.get("tuning_epsilon") is not None:
        out["hyperparameter_tuning"] = {
            "epsilon": round(float(row["tuning_epsilon"]), 6),
            "delta": delta,
            "bound": row["tuning_bound"],
            "analysis": row["tuning_analysis"],
            "distribution": json.loads(row["tuning_distribution"]),
            "expected_runs": float(row["tuning_expected_runs"]),
            "single_run": {"epsilon": round(float(row["epsilon_single_run"]), 6), "bound": row["epsilon_bound"]},
        }
    return out


def _hf_claim(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "epsilon": float(row["claimed_epsilon"]),
        "delta": float(row["claimed_delta"]),
        "accountant": row["claimed_accountant"],
    }
    if row.get("claim_status") is not None:
        repro = row["claim_reproduced_epsilon"]
        out.update(
            {
                "reproduced_epsilon": None if repro is None else round(float(repro), 6),
                "reproduced_bound": row["claim_reproduced_bound"],
                "reproduction": row["claim_status"],
                "certified_by_tight_accountant": bool(row["claim_certified"]),
                "tight_epsilon_upper_bound": round(float(row["claim_tight_epsilon"]), 6),
            }
        )
    return out


def hf_card_metadata(row: dict[str, Any], *, report_uri: str | None = None) -> dict[str, Any]:
    """Model-card metadata: the ``differential-privacy`` tag and the ``differential_privacy`` record."""
    return {"tags": ["differential-privacy"], "differential_privacy": hf_record(row, report_uri=report_uri)}


def hf_yaml_block(row: dict[str, Any], *, report_uri: str | None = None) -> str:
    """A model-card YAML header to paste, rendered by huggingface_hub's ``ModelCardData`` when the ``hf`` extra is
    installed (plain PyYAML with the same keys otherwise)."""
    meta = hf_card_metadata(row, report_uri=report_uri)
    try:
        from huggingface_hub import ModelCardData
    except ImportError:
        body = yaml.safe_dump(meta, sort_keys=False, default_flow_style=False)
    else:
        body = ModelCardData(**meta).to_yaml() + "\n"
    return f"---\n{body}---\n"


def merge_into_readme(readme: str | Path, row: dict[str, Any], *, report_uri: str | None = None) -> Path:
    """Merge the privacy metadata into a Hugging Face ``README.md`` (model card) with huggingface_hub's card classes.

    The front matter keeps every key it had (``tags`` gains ``differential-privacy``; ``differential_privacy`` is
    replaced), the card text is kept as it is; a missing README is created. The result is parsed back with
    ``ModelCard`` and checked before it replaces the file (atomically, never through a symbolic link). Needs ``pip install 'gdp-audit[hf]'``.
    """
    try:
        from huggingface_hub import ModelCard, ModelCardData
    except ImportError:
        raise ValueError("--hf-readme needs huggingface_hub: pip install 'gdp-audit[hf]'") from None

    readme = Path(readme)
    if readme.exists():
        card = ModelCard.load(readme)
        data = card.data.to_dict()
        text = card.text
    else:
        data, text = {}, f"\n# {row['model']}\n"
    meta = hf_card_metadata(row, report_uri=report_uri)
    tags = list(data.get("tags") or [])
    data["tags"] = tags + [t for t in meta["tags"] if t not in tags]
    data["differential_privacy"] = meta["differential_privacy"]
    new = ModelCard(f"---\n{ModelCardData(**data).to_yaml()}\n---\n{text}")
    expected = ModelCardData(**data).to_dict()
    content = str(new)  # what ModelCard.save writes
    back = ModelCard(content)
    if back.data.to_dict() != expected or back.text != text:
        raise RuntimeError(f"{readme}: the merged model card does not load back as written")
    atomic_write_text(readme, content)  # tasks.safe_write: never through a symbolic link
    return readme


def plot_card_curve(row: dict[str, Any], path: Path, root: Path | None = None) -> Path:
    """The audited trade-off curve (attack TPR vs FPR, linear and log-log, as every gdp-audit plot) with its mu-GDP
    curve, the (eps, delta) curve at the declared delta and, for a published claim, the region the claim allows."""
    from tasks.plots import _save, tradeoff_figure

    claimed = None
    if row.get("claimed_epsilon") is not None:
        claimed = (float(row["claimed_epsilon"]), float(row["claimed_delta"]), str(row["claimed_accountant"]))
    fig = tradeoff_figure(
        f"{row['model']} v{row['version']}: one {row['privacy_unit']}, {row['neighbouring']}; "
        f"accountant {row['accountant'].split(' (')[0]}, discretization {_disc(row)}",
        row["curve_fpr"],
        row["curve_fnr"],
        curve_label=f"audited curve ({row['mu_bound']} bound on attack TPR)",
        mu=float(row["mu"]),
        eps_deltas=[(float(row["epsilon"]), float(row["delta"]))],
        claimed=claimed,
        mu_cutoff=float(row["mu_cutoff"]) or None,
    )
    add_evidence_panel(fig, row)  # tasks.evidence_card: log-log evidence panel, no-op without evidence
    import matplotlib.pyplot as plt

    try:
        _save(fig, path, root)
    finally:
        plt.close(fig)
    return path


CARD_FORMAT = "card-v5"  # bump when the card's layout changes: existing cards are then rewritten


def card_stamp(row: dict[str, Any], report_uri: str | None) -> str:
    """What a written card depends on besides the audit row's content: audit key, layout, report URI."""
    return " ".join(x for x in (row["audit_key"], CARD_FORMAT, report_uri, evidence_stamp(row)) if x)  # evidence


def write_card(row: dict[str, Any], root: str | Path, *, report_uri: str | None = None) -> dict[str, str]:
    """Write card.md, curve.png and model_card.yaml under ``root/<model>/v<version>/``; returns their paths."""
    out = card_dir(root, row["model"], row["version"])
    # tasks.safe_write: each file atomic, and a symbolic link planted at it or at a folder below ``root`` refused
    png = plot_card_curve(row, out / "curve.png", Path(root))
    md = atomic_write_text(out / "card.md", render_markdown(row, report_uri=report_uri), root=root)
    hf = atomic_write_text(out / "model_card.yaml", hf_yaml_block(row, report_uri=report_uri), root=root)
    atomic_write_text(out / "audit_key", card_stamp(row, report_uri), root=root)  # last: the card is complete
    return {"markdown": str(md), "png": str(png), "hf_yaml": str(hf)}


def _claim_paragraph(row: dict[str, Any]) -> list[str]:
    """The published claim, re-checked: reproduced with its own accountant, then held against the tight bound."""
    c_eps, c_delta, acc = row["claimed_epsilon"], row["claimed_delta"], row["claimed_accountant"]
    out = [f"Published claim: (eps = {_g(c_eps)}, delta = {c_delta:.3g}) with the {acc} accountant."]
    status, repro = row.get("claim_status"), row.get("claim_reproduced_epsilon")
    if status is None:  # rows audited before claims were re-checked
        return out
    if repro is None:
        out.append(f"It could not be reproduced: {row['claim_reproduction']}.")
    else:
        out.append(
            f"Reproduced with the named accountant: eps = {_g(repro)} ({row['claim_reproduced_bound']}; "
            f"{row['claim_reproduction']}) - {status}."
        )
    tight = row["claim_tight_epsilon"]
    if row.get("estimate_reason"):  # sampler honesty: nothing about this run is certified
        out.append(
            f"The tight accountant's value at that delta, {_g(tight)}, is an estimate for this run (see above), so the "
            "claim can be neither certified nor refuted by it."
        )
        return out
    if row["claim_certified"]:
        out.append(
            f"The tight pessimistic accountant gives eps <= {_g(tight)} at that delta, so the claim holds"
            + (f" with {_g(c_eps - tight, 3)} to spare." if tight < c_eps else ".")
        )
    else:
        out.append(
            f"**The claim is not certified**: the tight pessimistic accountant's upper bound at that delta is "
            f"{_g(tight)} > {_g(c_eps)}. Report {_g(tight)} (or mu) instead."
        )
    return out
