"""The report's schema in one place: every view's columns and what they mean.

:func:`tasks.publish.publish_lake` writes these texts as DuckDB column comments (``COMMENT ON COLUMN``), so
``SELECT column_name, comment FROM duckdb_columns() WHERE table_name = 'cells'`` answers from the file itself;
:func:`schema_markdown` renders the same table for PIPELINE.md (``tests/pipeline/test_portable_report.py`` checks
that PIPELINE.md, this table and the published views agree column for column).
"""

from __future__ import annotations

from gdpcore import kinds as _kinds
from tasks.evidence_schema import (  # evidence view docs
    EVIDENCE_COLUMNS,
    EVIDENCE_DOCS,
    MODEL_PRIVACY_EVIDENCE_COLUMNS,
    MODEL_PRIVACY_EVIDENCE_DOCS,
)

__all__ = [
    "COLUMN_DOCS",
    "COMPLETE_CELLS_SQL",
    "VIEW_ORDER",
    "cell_columns",
    "column_docs",
    "is_complete_status",
    "schema_markdown",
]

BRACKET_OF_BOUNDS = "bracket_of_bounds:"
"""Status prefix of a cell whose two ends bound different mechanisms (the batch samplers,
:func:`gdpcore.kinds.ends_notes`): its numbers are as complete as an ``ok`` cell's, its bracket the mechanisms' own."""

COMPLETE_CELLS_SQL = f"(status = 'ok' OR starts_with(status, '{BRACKET_OF_BOUNDS}'))"
"""The cells whose numbers are complete (heat maps, regret maps, a chunk's mu range): ``ok``, or a bracket of two
proven bounds of different mechanisms. One predicate, here; :func:`is_complete_status` is the same test in Python."""


def is_complete_status(status: str) -> bool:
    """:data:`COMPLETE_CELLS_SQL` for one status string."""
    return status == "ok" or status.startswith(BRACKET_OF_BOUNDS)


# Columns shared by several views (a view-specific entry below overrides these).
_COMMON: dict[str, str] = {
    "spec": "name of the grid / calibration spec (hive partition); (spec, cell_id) is the key",
    "mechanism": "mechanism kind of the cell (hive partition)",
    "cell_id": "content hash of the cell's mechanism (same mechanism, same id in every spec)",
    "eval_key": "hash of what the numbers depend on besides the mechanism (deltas, FPR grid, discretisation, gdpcore)",
    "noise_multiplier": "noise multiplier sigma (noise std / sensitivity)",
    "sampling_rate": "Poisson sampling rate q per step",
    "steps": "number of composed steps T",
    "status": "'ok', or why the numbers are partial / missing (see PIPELINE.md, 'What a status row means')",
    "accountant": "accountant that produced the numbers (e.g. pld:connect_the_dots, closed_form)",
    "discretization": "PLD discretisation step (NULL: exact, no discretisation)",
    "alpha_min": "smallest FPR the mu search considers",
    "gdpcore_version": "gdpcore release that computed the row",
    "code_version": "hash of gdpcore's source that computed the row",
    "run_id": "Prefect flow run id of the computing run",
    "computed_at": "when the row was computed (UTC)",
    "grid_index": "position of the cell in its spec's grid (expansion order)",
    "mu": "tightest pessimistic mu of mu-GDP (upper bound unless mu_bound says otherwise)",
    "mu_lower": "lower end of the mu bracket",
    "mu_bound": "bound label of mu: upper / lower / estimate / exact",
    "gdp_regret": "GDP regret: how much the mu-GDP curve overstates the risk (< 0.01: mu-GDP is a complete description)",
    "gdp_regret_bound": "bound label of gdp_regret",
    "advantage": "membership advantage: max over FPR of TPR - FPR (upper bound)",
    "advantage_lower": "lower end of the advantage bracket",
    "advantage_bound": "bound label of advantage",
    "bayes_security": "Bayes security 1 - advantage (lower bound)",
    "bayes_security_bound": "bound label of bayes_security",
    "epsilon_bound": "bound label of every epsilon of the row",
    "fnr_bound": "bound label of the trade-off curve's FNR values (lower: attacks do no better)",
    "neighbouring": "neighbouring relation: add_remove or replace_one",
    "mechanism_json": "the mechanism as gdpcore JSON (mechanism_from_dict reads it back)",
    "mechanism_form": "how the manifest gave the mechanism: dpsgd, phases, opacus_history, opacus, tf_privacy, "
    "dp_event, gdpcore",
    "sampler": "how the training batches were drawn: poisson, shuffle, fixed, cyclic or balls_in_bins (NULL: not "
    "stated; cyclic and balls_in_bins are accounted by their own kinds)",
    "estimate_reason": "NULL when the numbers are bounds as labelled; else why they are only estimates (e.g. shuffled "
    "batches accounted as Poisson sampling), and every *_bound column of the row says 'estimate'",
    "shuffle_epsilon_lower": "sampler shuffle, accounted as Poisson with q = 1/T (T batches per epoch): epsilon at "
    "delta of the shuffled run is at least this (proven lower bound, Chua et al. 2024); NULL otherwise",
    "shuffle_mu_lower": "the same shuffled run's mu-GDP is at least this (proven lower bound, Chua et al. 2024)",
    "shuffle_label": "what shuffle_epsilon_lower and shuffle_mu_lower are: 'lower (proven, Chua et al. 2024)' (NULL: "
    "not computed)",
    "shuffle_analysis": "the analysis behind the shuffle_* lower bounds (Chua et al. 2024)",
    "tuning_epsilon": "the version is the best of K tuning runs (manifest tuning): epsilon at delta of the whole "
    "procedure (upper bound; NULL: no tuning stated)",
    "tuning_bound": "bound label of tuning_epsilon: upper (estimate when the single run's numbers are estimates)",
    "tuning_analysis": "the analysis behind tuning_epsilon (K-fold composition for fixed K; Papernot & Steinke 2022 "
    "Thm 2 / Thm 6 for a random K)",
    "tuning_distribution": "the law of K as JSON (gdpcore.tuning.RepetitionDistribution.to_dict)",
    "tuning_expected_runs": "E[K], the expected number of tuning runs",
    "epsilon_single_run": "epsilon at delta of one run (the same as epsilon), beside tuning_epsilon",
    "mechanism_detail": "how the mechanism was derived from the manifest (adapter conventions, e.g. TF-Privacy's step "
    "count)",
    "delta": "delta of (epsilon, delta)-DP",
    "epsilon": "epsilon at delta (upper bound unless the bound column says otherwise)",
    "epsilon_lower": "lower end of the epsilon bracket",
    "bound": "bound label of this row's numbers: upper / lower / estimate / exact",
    "model": "registered model name",
    "version": "model version (integer)",
    "audit_key": "hash of the manifest's privacy-relevant content and gdpcore's source: identifies an audit",
    "registry": "registry folder or file the model version was listed in (mlflow-<server> for an MLflow registry)",
    "production": "true for the production version (manifest: production: true; MLflow: the production alias, "
    "else the Production stage)",
    "description_source": "where the training description was read: manifest:<file> or "
    "mlflow:<tracking URI>#<registered model>/<version>",
    "privacy_unit": "what one neighbouring change adds or removes (example, user, ...)",
    "dataset_size": "N, the number of privacy units in the training set",
    "description": "free text from the manifest",
    "source": "where the manifest's numbers come from (paper, run, URL)",
    "tpr_fprs": "FPRs of the tpr list",
    "target": "calibration target metric (mu, epsilon, tpr, advantage)",
}

_VIEW_SPECIFIC: dict[str, dict[str, str]] = {
    "cells": {
        "sensitivity": "sensitivity of the noise mechanism (where it has one)",
        "scale": "Laplace scale b (laplace cells)",
        "sigma": "noise standard deviation (gaussian / discrete_gaussian cells)",
        "rr_epsilon": "epsilon of randomized response (randomized_response cells)",
        "mu_bound": "bound label of mu: upper / lower / estimate / exact",
        "engine": "how the cell was accounted: gdpcore.pld (gdpcore's PLD composition; accountant names where the single "
        "steps came from), closed_form (exact mu, nothing composed), or rdp_fallback (over the memory budget)",
        "mechanism_kind": "gdpcore kind of the mechanism",
        "neighbouring": "neighbouring relation: add_remove or replace_one (a composition: the one all its parts share)",
        "mechanism_json": "the mechanism as gdpcore JSON (mechanism_from_dict reads it back); a composition's "
        "parameters are here and its swept values in the axes view (typed parameter columns are NULL for it)",
        "chunk_key": "content hash of the chunk (Prefect task) that computed the cell",
    },
    "epsilons": {},
    "curves": {
        "fpr": "false-positive rate (type I error) of a membership-inference test",
        "fnr": "lowest false-negative rate any test reaches at that FPR (pessimistic trade-off curve f; TPR = 1 - fnr)",
    },
    "axes": {
        "axis": "grid key of the spec: a parameter name (flat kinds, e.g. noise_multiplier) or a path into the spec's "
        "mechanism template (compositions: '.' steps into a nested mechanism, [i] picks a list item, e.g. "
        "mechanisms[0].noise_multiplier, mechanism.scale, count)",
        "value": "the cell's value of the axis as a number (NULL for a text value such as a neighbouring relation)",
        "value_text": "the cell's value of the axis as JSON text (numbers and text alike)",
    },
    "regrets": {
        "representation": "gdp, epsilon_delta, zcdp, rdp or pure_dp",
        "delta": "delta of the epsilon_delta representation (NULL for the others)",
        "regret": "regret of representing the curve by this representation (0: exact)",
    },
    "calibrations": {
        "cell_id": "content hash of the calibration cell",
        "target_value": "value the target metric must not exceed",
        "fpr": "FPR of a tpr target (NULL otherwise)",
        "delta": "delta of an epsilon target (NULL otherwise)",
        "status": "'ok'; 'at_search_limit: ...' when the smallest noise multiplier searched already meets the target "
        "(an upper bound on the answer); 'no solution: ...' when none meets it",
        "noise_multiplier": "smallest noise multiplier meeting the target (NULL when none exists)",
        "achieved": "the target metric re-evaluated at noise_multiplier (pessimistic accountant)",
        "rejected": "the nearest noise multiplier found not to meet the target (brackets the answer)",
        "at_limit": "true when the answer sits at the search limit (the true value may lie beyond it)",
        "bound_types": "bound labels of the calibrated quantities (JSON)",
    },
    "runs": {
        "flow": "flow name (grid-sweep, regret-map, calibration-sweep)",
        "spec_hash": "hash of the spec the run swept",
        "spec_json": "the spec as JSON",
        "cells": "cells in the spec's grid",
        "cells_computed": "cells computed by this run (the rest were already in the lake)",
        "chunks_computed": "chunks (Prefect tasks) computed",
        "chunks_failed": "chunks that failed (their cells have an error status)",
        "task_runner": "Prefect task runner (process, thread, dask@address)",
        "started_at": "run start (UTC)",
        "finished_at": "run end (UTC)",
    },
    "models": {
        "manifest_path": "the manifest file, relative to its registry (NULL: described in MLflow)",
        "description_from": "which part of the source described it: manifest, model-version tags, run <id> params, "
        "run <id> tags (joined by +)",
        "status": "'audited', or 'not auditable' (no usable DP description; the numbers are NULL)",
        "not_auditable": "why the version is not auditable, naming the missing or invalid dp.* key(s)",
        "mlflow_model": "MLflow registered-model name to tag (NULL: not in MLflow)",
        "mlflow_version": "MLflow model version to tag",
    },
    "model_privacy": {
        "spec_hash": "hash of the manifest's privacy-relevant content",
        "mu_cutoff": "mu certifies the Gaussian curve only where FPR and FNR are >= this (0: no cut-off)",
        "gdp_complete": "gdp_regret < 0.01",
        "verdict": "'GDP is a complete description' or 'GDP is not a complete description: read the full trade-off curve'",
        "delta": "declared delta (from delta_policy)",
        "delta_policy": "the manifest's delta policy, e.g. 1e-5 or 1/N^1.1",
        "epsilon": "epsilon at the declared delta (upper bound unless epsilon_bound says estimate)",
        "eps_deltas": "deltas of eps_values (declared delta, 1e-5, 1e-6, 1e-9)",
        "eps_values": "epsilon at each of eps_deltas",
        "tpr": "highest attack TPR at each of tpr_fprs (upper bound unless tpr_bound says estimate)",
        "tpr_bound": "bound label of tpr",
        "mechanism_hash": "content hash of mechanism_json",
        "claimed_epsilon": "the published claim's epsilon (NULL: no claim)",
        "claimed_delta": "the published claim's delta",
        "claimed_accountant": "the accountant the claim names (RDP, PLD/PRV, GDP/CLT)",
        "claim_reproduced_epsilon": "the claim's epsilon recomputed with the named accountant",
        "claim_reproduced_bound": "bound label of claim_reproduced_epsilon",
        "claim_reproduction": "how the claim was reproduced (accountant and settings)",
        "claim_status": "reproduced / claim looser than its accountant / not reproduced / accountant not reproducible",
        "claim_tight_epsilon": "the tight pessimistic epsilon at the claimed delta (upper bound)",
        "claim_certified": "claim_tight_epsilon <= claimed_epsilon (no tolerance)",
        "audited_at": "when the audit was computed (UTC)",
        "compute_seconds": "wall time of the audit",
        **MODEL_PRIVACY_EVIDENCE_DOCS,  # evidence columns
    },
    "model_comparisons": {
        "against": "previous or production: which version this row compares with",
        "other_version": "the version compared with",
        "other_audit_key": "audit_key of the version compared with",
        "divergence_new_over_old": "Delta-divergence of this version's curve over the other's (0: at least as private)",
        "divergence_old_over_new": "Delta-divergence of the other version's curve over this one's",
        "divergence_bound": "bound label of the divergences",
        "at_least_as_private": "Blackwell order: this version is at least as private as the other (NULL: undecided)",
        "blackwell_verdict": "the Blackwell comparison in words",
        "less_private": "this version is less private than the other (flagged in the run summary)",
        "mu_change": "mu of this version minus mu of the other",
        "tpr_change": "TPR change at each of tpr_fprs",
        "gdpcore_version": "gdpcore release that compared them",
        "compared_at": "when the comparison was computed (UTC)",
    },
    "evidence": EVIDENCE_DOCS,  # evidence view
    "report_info": {
        "published_at": "when the report was published (UTC)",
        "lake": "the lake, relative to the report's folder (NULL in an exported, self-contained file)",
        "snapshot": "curated lake snapshot the views read",
        "lake_schema_version": "lake layout version",
        "publisher_code_version": "hash of the code that published the report",
        "row_counts": "rows per view at publish time (JSON)",
        "storage_version": "DuckDB storage format of the file (every duckdb the project allows reads it)",
    },
}

_LEADING_PARAMS = ("noise_multiplier", "sampling_rate", "steps")


def _param_columns() -> list[str]:
    """The typed mechanism-parameter columns of ``cells`` after the leading three, in the kind registry's order
    (:func:`gdpcore.kinds.param_columns`): a kind registered later gets its columns and their docs with no edit."""
    return [c for c in _kinds.param_columns() if c not in _LEADING_PARAMS]


def _param_docs() -> dict[str, str]:
    """Docs of parameter columns nobody wrote one for: the parameter's own declaration and the kinds that have it."""
    docs: dict[str, str] = {}
    owners: dict[str, list[str]] = {}
    for kind in _kinds.flat_kinds():
        for p in _kinds.get(kind).params:
            docs.setdefault(p.lake_column, p.doc)
            owners.setdefault(p.lake_column, []).append(kind)
    return {c: f"{docs[c]} ({', '.join(owners[c])} cells)" for c in docs}


def cell_columns() -> list[str]:
    """The ``cells`` view's columns before ``spec, mechanism`` (what :mod:`tasks.publish` selects)."""
    return [c for c in _COLUMNS["cells"] if c not in ("mechanism", "spec")]


# Views in the order the schema is documented; each view's columns in the order DuckDB shows them.
_COLUMNS: dict[str, list[str]] = {
    "cells": [
        *"cell_id noise_multiplier sampling_rate steps mu gdp_regret advantage bayes_security status".split(),
        *_param_columns(),
        *(
            "mu_lower advantage_lower mu_bound gdp_regret_bound advantage_bound bayes_security_bound epsilon_bound "
            "fnr_bound accountant discretization alpha_min engine mechanism_kind mechanism_json grid_index eval_key "
            "chunk_key gdpcore_version code_version run_id computed_at mechanism spec"
        ).split(),
    ],
    "epsilons": "cell_id delta epsilon epsilon_lower bound mechanism spec".split(),
    "curves": "cell_id fpr fnr bound mechanism spec".split(),
    "regrets": "cell_id representation delta regret bound mechanism spec".split(),
    "axes": "cell_id axis value value_text mechanism spec".split(),
    "calibrations": (
        "cell_id eval_key sampling_rate steps target target_value fpr delta status noise_multiplier achieved "
        "rejected at_limit accountant discretization bound_types gdpcore_version code_version run_id computed_at "
        "grid_index spec"
    ).split(),
    "runs": (
        "run_id flow spec_hash spec_json cells cells_computed chunks_computed chunks_failed gdpcore_version "
        "code_version task_runner started_at finished_at spec"
    ).split(),
    "models": (
        "registry model version production manifest_path mlflow_model mlflow_version audit_key privacy_unit "
        "neighbouring sampler dataset_size description source mechanism_form description_source description_from status "
        "not_auditable"
    ).split(),
    "model_privacy": (
        "registry model version audit_key spec_hash mu mu_lower mu_bound mu_cutoff gdp_regret gdp_regret_bound "
        "gdp_complete verdict delta delta_policy epsilon epsilon_lower epsilon_bound eps_deltas eps_values tpr_fprs "
        "tpr tpr_bound advantage advantage_lower advantage_bound bayes_security bayes_security_bound accountant "
        "discretization alpha_min mechanism_form mechanism_json mechanism_hash mechanism_detail privacy_unit "
        "neighbouring sampler estimate_reason shuffle_epsilon_lower shuffle_mu_lower shuffle_label shuffle_analysis "
        "tuning_epsilon tuning_bound tuning_analysis tuning_distribution tuning_expected_runs epsilon_single_run "
        "dataset_size "
        "claimed_epsilon claimed_delta claimed_accountant claim_reproduced_epsilon claim_reproduced_bound "
        "claim_reproduction claim_status claim_tight_epsilon claim_certified description source gdpcore_version "
        "audited_at run_id compute_seconds production description_source"
    ).split()
    + MODEL_PRIVACY_EVIDENCE_COLUMNS,  # evidence columns
    "model_comparisons": (
        "model version against other_version audit_key other_audit_key divergence_new_over_old "
        "divergence_old_over_new divergence_bound at_least_as_private blackwell_verdict less_private mu_change "
        "tpr_fprs tpr_change gdpcore_version compared_at"
    ).split(),
    "evidence": EVIDENCE_COLUMNS,  # evidence view
    "report_info": (
        "published_at lake snapshot lake_schema_version publisher_code_version row_counts storage_version"
    ).split(),
}
VIEW_ORDER: tuple[str, ...] = tuple(_COLUMNS)


def column_docs(view: str) -> dict[str, str]:
    """{column: meaning} of one view (or of the ``report_info`` table), in column order."""
    specific = _VIEW_SPECIFIC[view]
    derived = _param_docs() if view == "cells" else {}
    return {c: specific.get(c) or _COMMON.get(c) or derived[c] for c in _COLUMNS[view]}


COLUMN_DOCS: dict[str, dict[str, str]] = {view: column_docs(view) for view in VIEW_ORDER}


def schema_markdown() -> str:
    """The schema section of PIPELINE.md (between the ``<!-- schema -->`` markers), generated from COLUMN_DOCS."""
    out = []
    for view in VIEW_ORDER:
        out += [f"**`{view}`**", "", "| column | meaning |", "|---|---|"]
        out += [f"| `{c}` | {doc.replace('|', '/')} |" for c, doc in COLUMN_DOCS[view].items()]
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def _write_pipeline_md(path: str = "PIPELINE.md") -> None:
    """Regenerate the schema section of PIPELINE.md in place (``python -m tasks.schema``)."""
    import re
    from pathlib import Path

    file = Path(path)
    text = file.read_text(encoding="utf-8")
    new, n = re.subn(
        r"(<!-- schema:begin[^>]*-->\n).*?(<!-- schema:end -->)",
        lambda m: m.group(1) + schema_markdown() + m.group(2),
        text,
        flags=re.DOTALL,
    )
    if n != 1:
        raise SystemExit(f"{path}: expected one '<!-- schema:begin -->' ... '<!-- schema:end -->' section")
    file.write_text(new, encoding="utf-8")


if __name__ == "__main__":
    _write_pipeline_md()
