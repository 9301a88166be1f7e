"""Audits with evidence (pipeline): score files, the manifest's evidence block through the audit flow, the evidence
view and model_privacy columns, the card section, nothing recomputed on a re-run, CLI exit codes for bad files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks.evidence import EvidenceError, family_confidence, read_scores
from tasks.publish import query_report
from tasks.registry import ManifestError, load_manifest_file

from .conftest import SAMPLE_REGISTRY

EVIDENCE_DIR = SAMPLE_REGISTRY / "evidence"

MANIFEST = """\
name: canary
version: {version}
dataset_size: 60000
delta: 1.0e-5
mechanism:
  dpsgd: {{noise_multiplier: 1.0, sampling_rate: 0.02, steps: 100}}
evidence: {{scores: {scores}, synthetic: true}}
"""


def _scores_registry(tmp_path: Path) -> Path:
    reg = tmp_path / "registry"
    (reg / "scores").mkdir(parents=True)
    for v in (1, 2):
        shutil.copy(EVIDENCE_DIR / f"canary-mlp-v{v}.npz", reg / "scores" / f"v{v}.npz")
        (reg / f"v{v}.yaml").write_text(MANIFEST.format(version=v, scores=f"scores/v{v}.npz"))
    return reg


# -- score files --------------------------------------------------------------------------------------------------
def _parquet(path: Path, score, member) -> Path:
    pq.write_table(pa.table({"score": score, "is_member": member}), path)
    return path


def test_reads_parquet_csv_and_npz_alike(tmp_path):
    rng = np.random.default_rng(0)
    s, m = rng.normal(size=100), rng.random(100) < 0.5
    a = read_scores(_parquet(tmp_path / "s.parquet", s, m))
    (tmp_path / "s.csv").write_text(
        "score,is_member\n" + "".join(f"{float(x)!r},{int(y)}\n" for x, y in zip(s, m, strict=True))
    )
    b = read_scores(tmp_path / "s.csv")
    np.savez(tmp_path / "s.npz", member_scores=s[m], non_member_scores=s[~m])
    c = read_scores(tmp_path / "s.npz")
    for x in (b, c):
        assert np.array_equal(x.member, a.member) and np.array_equal(x.non_member, a.non_member)
    assert len(a.sha256) == 64


@pytest.mark.parametrize(
    ("make", "field", "words"),
    [
        (lambda p: _parquet(p / "x.parquet", [1.0, float("nan")], [True, False]), "score", "NaN or infinite"),
        (lambda p: _parquet(p / "x.parquet", [1.0, float("inf")], [True, False]), "score", "NaN or infinite"),
        (lambda p: _parquet(p / "x.parquet", [1.0, 2.0], [True, True]), "is_member", "one class only"),
        (lambda p: _parquet(p / "x.parquet", ["a", "b"], [True, False]), "score", "numeric"),
        (lambda p: _parquet(p / "x.parquet", [1.0, 2.0], [2, 0]), "is_member", "0/1"),
        (
            lambda p: pq.write_table(pa.table({"score": [1.0]}), p / "x.parquet") or p / "x.parquet",
            "is_member",
            "missing",
        ),
        (
            lambda p: _parquet(p / "x.parquet", pa.array([], pa.float64()), pa.array([], pa.bool_())),
            "score",
            "no scores",
        ),
        (lambda p: (p / "x.csv").write_text("score,is_member\n1.0,1\n,0\n") and p / "x.csv", "score", "empty value"),
        (lambda p: np.savez(p / "x.npz", member_scores=[1.0]) or p / "x.npz", "non_member_scores", "missing array"),
        (
            lambda p: np.savez(p / "x.npz", member_scores=np.zeros((2, 2)), non_member_scores=[1.0]) or p / "x.npz",
            "member_scores",
            "one-dimensional",
        ),
        (lambda p: (p / "x.npz").write_bytes(b"junk") and p / "x.npz", "", "not a readable NPZ"),
    ],
)
def test_bad_score_files_name_file_and_field(tmp_path, make, field, words):
    path = make(tmp_path)
    with pytest.raises(EvidenceError) as exc:
        read_scores(path)
    assert exc.value.field == field and words in exc.value.message and str(path) in str(exc.value)


def test_row_cap_is_checked_before_loading(tmp_path):
    path = _parquet(tmp_path / "x.parquet", np.arange(11.0), [True] * 5 + [False] * 6)
    with pytest.raises(EvidenceError, match="11 scores, more than the 10 allowed"):
        read_scores(path, max_scores=10)
    np.savez(tmp_path / "x.npz", member_scores=np.zeros(6), non_member_scores=np.ones(6))
    with pytest.raises(EvidenceError, match="12 scores"):
        read_scores(tmp_path / "x.npz", max_scores=10)


def test_manifest_scores_path_must_stay_in_the_manifest_folder(tmp_path):
    reg = _scores_registry(tmp_path)
    (reg / "v1.yaml").write_text(MANIFEST.format(version=1, scores="../outside.npz"))
    with pytest.raises(ManifestError) as exc:
        load_manifest_file(reg / "v1.yaml")
    assert exc.value.field == "evidence.scores" and "outside the manifest's folder" in exc.value.message
    (reg / "v1.yaml").write_text(MANIFEST.format(version=1, scores="scores/none.npz"))
    with pytest.raises(ManifestError, match="no such file"):
        load_manifest_file(reg / "v1.yaml")
    (reg / "v1.yaml").write_text(MANIFEST.format(version=1, scores="scores/v1.txt"))
    with pytest.raises(ManifestError, match="evidence.scores"):
        load_manifest_file(reg / "v1.yaml")


def test_evidence_does_not_change_the_audit_key(tmp_path):
    from tasks.audit import audit_key

    reg = _scores_registry(tmp_path)
    (with_ev,) = load_manifest_file(reg / "v1.yaml")
    (reg / "plain.yaml").write_text(MANIFEST.format(version=1, scores="x").split("evidence:")[0])
    (plain,) = load_manifest_file(reg / "plain.yaml")
    assert audit_key(with_ev) == audit_key(plain)


def test_family_confidence_is_bonferroni():
    assert family_confidence(0.95, 0.05, 1) == 0.95
    assert family_confidence(0.95, 0.05, 5) == pytest.approx(0.99)
    assert family_confidence(0.999, 0.05, 5) == 0.999


# -- through the audit flow ---------------------------------------------------------------------------------------
@pytest.mark.slow  # three audit runs, about 50 s on 2 cores
@pytest.mark.usefixtures("prefect_server")
def test_audit_flags_the_violation_and_recomputes_nothing(tmp_path, capsys):
    from flows.privacy_audit import privacy_audit

    reg = _scores_registry(tmp_path)
    kw = dict(registry=str(reg), lake=str(tmp_path / "lake"), report=str(tmp_path / "r.duckdb"))
    s1 = privacy_audit(**kw)
    assert s1.failed == {} and s1.evidence_checked == ["canary:1", "canary:2"]
    assert len(s1.evidence_violations) == 1 and s1.evidence_violations[0].startswith("canary:2: canary scores give")
    files = {p: p.stat().st_mtime_ns for p in (tmp_path / "lake" / "registry" / "evidence").rglob("*.parquet")}
    assert len(files) == 2

    _, rows = query_report(
        tmp_path / "r.duckdb",
        "SELECT version, verdict, confidence, family_level, family_size, n_members, n_non_members, mu_lower, "
        "certified_mu, detectable_mu, tightness, strongest_fpr, synthetic, method, method_id, verdict_basis "
        "FROM evidence ORDER BY version",
    )
    (v1, v2) = rows
    assert v1[1] == "consistent" and v2[1] == "violates_claim"
    for r in rows:
        assert r[2] == pytest.approx(0.975) and r[3] == 0.05 and r[4] == 2  # Bonferroni over the two versions
        assert r[5] == r[6] == 20_000 and r[12] is True
        assert r[14] == "cp-orderstat-bonferroni" and r[15] == "certified" and 0 < r[11] < 0.9
    assert v2[7] > v2[8] and v2[10] > 1 and 0 < v1[7] < v1[8]
    _, mp = query_report(
        tmp_path / "r.duckdb",
        "SELECT version, evidence_verdict, evidence_mu_lower, evidence_confidence, evidence_synthetic, "
        "evidence_method_id, evidence_verdict_basis FROM model_privacy ORDER BY version",
    )
    assert {(r[5], r[6]) for r in mp} == {("cp-orderstat-bonferroni", "certified")}
    assert [(r[0], r[1]) for r in mp] == [(1, "consistent"), (2, "violates_claim")]
    assert mp[1][2] == v2[7] and mp[1][3] == pytest.approx(0.975) and mp[1][4] is True

    md = (Path(s1.cards_dir) / "canary" / "v2" / "card.md").read_text()
    assert "## Evidence (SYNTHETIC scores" in md and "VIOLATES THE CLAIM" in md
    assert "can only flag a model whose true mu exceeds" in md
    md1 = (Path(s1.cards_dir) / "canary" / "v1" / "card.md").read_text()
    assert "no evidence of a violation, which is not proof of privacy" in md1

    from flows.cli import main

    assert main(["card", "canary:2", "--report", str(tmp_path / "r.duckdb")]) == 0  # gdp card shows it too
    assert "## Evidence (SYNTHETIC scores" in capsys.readouterr().out

    s2 = privacy_audit(**kw)  # same scores, same declaration: nothing recomputed or rewritten
    assert s2.computed == [] and s2.cards_written == [] and s2.evidence_violations == s1.evidence_violations
    assert {p: p.stat().st_mtime_ns for p in files} == files
    assert len(list((tmp_path / "lake" / "registry" / "evidence").rglob("*.parquet"))) == 2

    # a bad scores file fails that version's evidence only, naming the file and field; nothing written for it
    np.savez(reg / "scores" / "v2.npz", member_scores=np.array([1.0, np.nan]), non_member_scores=np.zeros(3))
    s3 = privacy_audit(**kw)
    (msg,) = s3.failed.values()
    assert "v2.npz: member_scores: 1 value(s) are NaN" in msg and s3.evidence_checked == ["canary:1"]
    assert len(list((tmp_path / "lake" / "registry" / "evidence").rglob("*.parquet"))) == 2


# -- CLI ------------------------------------------------------------------------------------------------------------
KIND = ["subsampled_gaussian", "--noise-multiplier", "1", "--sampling-rate", "0.02", "--steps", "100"]


def test_cli_verdicts_and_labels(capsys):
    from flows.cli import main

    assert main(["evidence", "--scores", str(EVIDENCE_DIR / "canary-mlp-v2.npz"), *KIND]) == 3
    out = capsys.readouterr().out
    assert "mu lower bound (from the scores, 95% confidence)" in out and "mu upper bound (certified" in out
    assert "method: order-statistic" in out and out.rstrip().endswith("allows") and "VIOLATES THE CLAIM" in out
    assert "[cp-orderstat-bonferroni]" in out and "furthest above the certified curve at FPR" in out
    assert main(["evidence", "--scores", str(EVIDENCE_DIR / "canary-mlp-v1.npz"), "--json", *KIND]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "consistent" and data["mu_lower_bound"] == "lower" and data["confidence"] == 0.95


def test_cli_bad_files_exit_2_naming_file_and_field(tmp_path, capsys):
    from flows.cli import main

    bad = _parquet(tmp_path / "bad.parquet", [1.0, float("nan")], [True, False])
    assert main(["evidence", "--scores", str(bad), *KIND]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"gdp evidence: error: --scores: {bad}: score: 1 value(s) are NaN or infinite (first at index 1)"]
    assert main(["evidence", "--scores", str(tmp_path / "none.npz"), *KIND]) == 2
    assert "none.npz: no such file" in capsys.readouterr().err
    assert main(["evidence", *KIND]) == 2
    assert "--scores FILE is required" in capsys.readouterr().err
    assert main(["evidence", "--scores", str(bad), "--confidence", "1.5", *KIND]) == 2
    assert "--confidence" in capsys.readouterr().err


def test_one_run_block_and_estimate_caveat_reach_the_card(tmp_path):
    import gdpcore
    from tasks.audit import compute_audit_row
    from tasks.cards import render_markdown
    from tasks.evidence import compute_evidence_row

    reg = _scores_registry(tmp_path)
    text = MANIFEST.format(version=1, scores="scores/v1.npz").replace(
        "synthetic: true}", "synthetic: true, one_run: {canaries: 1000, guesses: 100, correct: 90}}"
    )
    (reg / "v1.yaml").write_text(text + "sampler: shuffle\n")
    (m,) = load_manifest_file(reg / "v1.yaml")
    audit = compute_audit_row(m, "t")
    row = compute_evidence_row(
        m, audit, read_scores(reg / "scores" / "v1.npz"), confidence=0.95, family_level=0.05, family_size=1, run_id="t"
    )
    want = gdpcore.one_run_epsilon_lower(canaries=1000, guesses=100, correct=90, delta=1e-5, confidence=0.95)
    assert row["one_run_epsilon_lower"] == want > 0
    md = render_markdown({**audit, "evidence": row})
    assert "one-run audit" in md and "Against an estimate" in md and "Validity." in md
    # the verdict stays, flagged as one against an estimate: column, evidence JSON, card verdict line
    assert audit["estimate_reason"] and row["verdict_basis"] == "estimate" and row["verdict"] == "consistent"
    assert "ESTIMATE" in json.loads(row["evidence_json"])["check"]["explanation"]
    assert "(against an ESTIMATE of the curve, not a certified bound)" in md


def test_evidence_uses_the_rows_stored_curve_not_a_reanalysis(tmp_path, monkeypatch):
    """The audit row's stored pessimistic curve (samples, bounded by convexity between them) gives the verdict: no
    second accountant run, same verdicts as the exact report, certified TPR never below the exact curve's."""
    import gdpcore
    from tasks.audit import compute_audit_row
    from tasks.evidence import certified_report, evaluate

    reg = _scores_registry(tmp_path)
    for v in (1, 2):
        (m,) = load_manifest_file(reg / f"v{v}.yaml")
        audit = compute_audit_row(m, "t")
        assert audit["estimate_reason"] is None
        scores = read_scores(reg / "scores" / f"v{v}.npz")
        exact = evaluate(scores, audit, confidence=0.95, report=certified_report(audit))
        with monkeypatch.context() as mp:
            mp.setattr(gdpcore, "analyze", lambda *a, **k: pytest.fail("re-ran the accountant"))
            nums = evaluate(scores, audit, confidence=0.95)
        assert nums["verdict"] == exact["verdict"] == ("consistent" if v == 1 else "violates_claim")
        assert nums["verdict_basis"] == "certified" and nums["certified_mu"] == audit["mu"]
        a = json.loads(nums["evidence_json"])["check"]["points"]
        b = json.loads(exact["evidence_json"])["check"]["points"]
        assert all(x["certified_tpr"] >= y["certified_tpr"] - 1e-12 for x, y in zip(a, b, strict=True))


def test_hf_card_and_tags_carry_the_evidence_block(tmp_path):
    import yaml

    from tasks.audit import compute_audit_row
    from tasks.cards import hf_card_metadata, hf_record, hf_yaml_block
    from tasks.evidence import compute_evidence_row
    from tasks.evidence_card import evidence_tags

    reg = _scores_registry(tmp_path)
    (m,) = load_manifest_file(reg / "v2.yaml")
    audit = compute_audit_row(m, "t")
    ev = compute_evidence_row(
        m, audit, read_scores(reg / "scores" / "v2.npz"), confidence=0.975, family_level=0.05, family_size=2, run_id="t"
    )
    assert "evidence" not in hf_record(audit)  # no evidence, no block
    row = {**audit, "evidence": ev}
    block = hf_card_metadata(row)["differential_privacy"]["evidence"]
    assert block == {
        "verdict": "violates_claim",
        "verdict_basis": "certified",
        "mu_lower": {"value": round(ev["mu_lower"], 6), "bound": "lower"},
        "confidence": 0.975,
        "method_id": "cp-orderstat-bonferroni",
        "synthetic": True,
    }
    front = yaml.safe_load(hf_yaml_block(row).split("---")[1])
    assert front["differential_privacy"]["evidence"]["verdict"] == "violates_claim"
    tags = evidence_tags(row)
    assert tags["privacy.evidence.method_id"] == "cp-orderstat-bonferroni"
    assert tags["privacy.evidence.verdict_basis"] == "certified" and tags["privacy.evidence.method"].startswith("order")
