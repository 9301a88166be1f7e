"""privacy_audit flow on tiny registries: caching by audit key, one-model recomputation, failures isolated, cards
equal to gdpcore.analyze, report views."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import gdpcore
from tasks.publish import query_report

from .conftest import TINY_A

pytestmark = pytest.mark.usefixtures("prefect_server")


def _audit(reg: Path, root: Path, **kw):
    from flows.privacy_audit import privacy_audit

    return privacy_audit(registry=str(reg), lake=str(root / "lake"), report=str(root / "r.duckdb"), **kw)


def _audit_files(root: Path) -> dict[str, float]:
    return {str(p): p.stat().st_mtime_ns for p in (root / "lake" / "registry" / "audits").rglob("*.parquet")}


@pytest.mark.slow  # three audit runs, about 13 s on 2 cores
def test_rerun_recomputes_nothing_and_an_edit_recomputes_one_model(tiny_registry, tmp_path):
    reg, write = tiny_registry
    s1 = _audit(reg, tmp_path)
    assert sorted(s1.computed) == ["tiny-a:1", "tiny-b:1"] and s1.failed == {}
    files1 = _audit_files(tmp_path)
    assert len(files1) == 2
    _, rows1 = query_report(
        tmp_path / "r.duckdb", "SELECT model, audited_at, audit_key FROM model_privacy ORDER BY model"
    )

    s2 = _audit(reg, tmp_path)
    assert s2.computed == [] and sorted(s2.reused) == ["tiny-a:1", "tiny-b:1"]
    assert s2.cards_written == [] and s2.comparisons_computed == 0
    assert _audit_files(tmp_path) == files1  # no file rewritten
    _, rows2 = query_report(
        tmp_path / "r.duckdb", "SELECT model, audited_at, audit_key FROM model_privacy ORDER BY model"
    )
    assert rows2 == rows1

    write("a.yaml", TINY_A.format(version=1, sigma=1.3))  # only tiny-a changes
    s3 = _audit(reg, tmp_path)
    assert s3.computed == ["tiny-a:1"] and s3.reused == ["tiny-b:1"] and s3.cards_written == ["tiny-a:1"]
    _, rows3 = query_report(
        tmp_path / "r.duckdb", "SELECT model, audited_at, audit_key FROM model_privacy ORDER BY model"
    )
    assert rows3[1] == rows1[1]  # tiny-b untouched
    assert rows3[0][2] != rows1[0][2] and rows3[0][1] > rows1[0][1]
    _, n = query_report(tmp_path / "r.duckdb", "SELECT count(*) FROM model_privacy")
    assert n == [(2,)]  # one row per model version, the current audit only


def test_invalid_manifest_fails_alone_and_writes_nothing(tiny_registry, tmp_path):
    reg, write = tiny_registry
    bad = write(
        "c.yaml",
        "name: tiny-c\nversion: 1\ndataset_size: 100\ndelta: 1.0e-5\n"
        "mechanism: {dpsgd: {noise_multiplier: 1.0, batch_size: 10, epochs: -2}}\n",
    )
    s = _audit(reg, tmp_path)
    assert sorted(s.models) == ["tiny-a:1", "tiny-b:1"]
    (msg,) = s.failed.values()
    assert msg == f"{bad}: mechanism.dpsgd.epochs: Input should be greater than 0"
    assert not list((tmp_path / "lake" / "registry" / "audits").glob("model=tiny-c"))
    assert not (Path(s.cards_dir) / "tiny-c").exists()
    _, rows = query_report(tmp_path / "r.duckdb", "SELECT DISTINCT model FROM models ORDER BY model")
    assert rows == [("tiny-a",), ("tiny-b",)]


def test_cards_and_rows_equal_gdpcore_analyze_with_bound_labels(tiny_registry, tmp_path):
    reg, _ = tiny_registry
    s = _audit(reg, tmp_path)
    mech = gdpcore.SubsampledGaussian(noise_multiplier=1.0, sampling_rate=100 / 10000, steps=50)
    rep = gdpcore.analyze(mech)  # the audit row is this report: the engine's default, refined step
    _, rows = query_report(
        tmp_path / "r.duckdb",
        "SELECT mu, mu_bound, gdp_regret, gdp_regret_bound, epsilon, epsilon_bound, delta, tpr_fprs, "
        "tpr, tpr_bound, advantage, advantage_bound, bayes_security, bayes_security_bound, verdict, "
        "accountant, discretization, gdpcore_version, mechanism_hash "
        "FROM model_privacy WHERE model = 'tiny-a'",
    )
    (r,) = rows
    assert r[0] == rep.mu and r[1] == "upper"
    assert r[2] == rep.gdp_regret and r[3] == "estimate"
    assert r[4] == float(rep.epsilon(1e-5)) and r[5] == "upper" and r[6] == 1e-5
    assert r[8] == [float(rep.tpr(a)) for a in r[7]] and r[9] == "upper"
    assert r[10] == rep.advantage and r[11] == "upper" and r[12] == rep.bayes_security and r[13] == "lower"
    assert r[14] == ("GDP is a complete description" if rep.gdp_regret < 0.01 else r[14])
    assert r[15] == rep.accountant and r[16] == rep.discretization and r[18] == mech.content_hash
    from tasks.lake import code_version

    assert r[17] == code_version()

    card = Path(s.cards_dir) / "tiny-a" / "v1"
    md = (card / "card.md").read_text()
    assert f"| mu (mu-GDP) | {rep.mu:.4g} (bracket [{rep.mu_lower:.4g}, {rep.mu:.4g}]) | upper |" in md
    assert f"| epsilon at declared delta = 1e-05 (fixed 1e-05) | {float(rep.epsilon(1e-5)):.4g} | upper |" in md
    assert f"| Bayes security (1 - advantage) | {rep.bayes_security:.4g} | lower |" in md
    for caveat in (
        "Tail cut-off",
        "Adjacency",
        "Poisson subsampling",
        "delta policy",
        rep.accountant,
        f"discretization {rep.discretization:g}",
    ):
        assert caveat in md, caveat
    assert (card / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    hf = (card / "model_card.yaml").read_text()
    assert hf.startswith("---\n") and hf.endswith("---\n")
    dp = yaml.safe_load(hf.strip("-\n"))["differential_privacy"]
    assert dp["mu"] == round(rep.mu, 6) and dp["mu_bound"] == "upper" and dp["neighboring_relation"] == "add_remove"
    assert dp["epsilon_delta"][0] == {"epsilon": round(float(rep.epsilon(1e-5)), 6), "delta": 1e-5, "bound": "upper"}
    assert dp["sampling"] == "poisson"

    # tiny-b: 4 Gaussians with sigma 4 are (1/4)-GDP each and compose exactly to sqrt(4)/4 = 0.5 (closed form: exact)
    _, rows = query_report(
        tmp_path / "r.duckdb",
        "SELECT mu, mu_bound, gdp_regret, epsilon_bound, delta, delta_policy, discretization "
        "FROM model_privacy WHERE model = 'tiny-b'",
    )
    assert rows == [(0.5, "exact", 0.0, "exact", pytest.approx(1000**-1.1), "1/N^1.1", None)]
    assert "discretization exact (closed form)" in (Path(s.cards_dir) / "tiny-b" / "v1" / "card.md").read_text()


@pytest.mark.slow  # about 15 s: three Delta-divergence pairs on 2 cores
def test_version_comparisons_previous_and_production(tiny_registry, tmp_path):
    reg, write = tiny_registry
    text = TINY_A.format(version=2, sigma=0.8) + "production: true\n"
    write("a2.yaml", text)  # v2 has less noise (sigma 0.8 < 1.0): less private than v1
    write("a3.yaml", TINY_A.format(version=3, sigma=1.5))  # more private than v2 and than production
    s = _audit(reg, tmp_path)
    assert sorted(s.less_private) == [f"tiny-a:2 vs previous v1 (mu +{_mu_change(tmp_path, 2, 'previous'):.3g})"]
    _, rows = query_report(
        tmp_path / "r.duckdb",
        "SELECT version, against, other_version, at_least_as_private, blackwell_verdict, less_private, "
        "divergence_new_over_old, divergence_old_over_new FROM model_comparisons ORDER BY version, against",
    )
    got = {(r[0], r[1], r[2]): r for r in rows}
    assert set(got) == {(1, "production", 2), (2, "previous", 1), (3, "previous", 2), (3, "production", 2)}
    assert got[(2, "previous", 1)][3:6] == (False, "not uniformly at least as private", True)
    assert got[(2, "previous", 1)][6] > 1e-3 and got[(2, "previous", 1)][7] < 1e-6
    for k in ((1, "production", 2), (3, "previous", 2), (3, "production", 2)):
        assert got[k][3:6] == (True, "uniformly at least as private", False)
    # independent check of the divergence against gdpcore directly
    m = {s_: gdpcore.SubsampledGaussian(noise_multiplier=s_, sampling_rate=0.01, steps=50) for s_ in (1.0, 0.8)}
    d = gdpcore.get_delta_divergence(m[1.0], m[0.8])
    assert got[(2, "previous", 1)][6] == pytest.approx(d.value, rel=1e-6)


def _mu_change(root, version, against):
    _, rows = query_report(
        root / "r.duckdb",
        f"SELECT mu_change FROM model_comparisons WHERE version = {version} AND against = '{against}'",
    )
    return rows[0][0]


def test_gdp_audit_and_card_cli(tiny_registry, tmp_path, capsys):
    from flows.cli import main

    reg, write = tiny_registry
    write("c.yaml", "name: tiny-c\nversion: 1\n")
    rc = main(["audit", str(reg), "--lake", str(tmp_path / "lake"), "--report", str(tmp_path / "r.duckdb")])
    out, err = capsys.readouterr()
    assert rc == 1  # one manifest failed; the others were published
    assert "2 model versions (2 computed, 0 unchanged)" in out and "c.yaml: delta: Field required" in err
    assert (
        main(
            [
                "sql",
                "SELECT model, version, mu_bound FROM model_privacy ORDER BY model",
                "--format",
                "json",
                "--report",
                str(tmp_path / "r.duckdb"),
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out) == [
        {"model": "tiny-a", "version": 1, "mu_bound": "upper"},
        {"model": "tiny-b", "version": 1, "mu_bound": "exact"},
    ]
    assert main(["card", "tiny-b:1", "--report", str(tmp_path / "r.duckdb")]) == 0
    assert "# Privacy card: tiny-b v1" in capsys.readouterr().out
    assert main(["card", "tiny-a", "--format", "yaml", "--report", str(tmp_path / "r.duckdb")]) == 0
    assert "differential_privacy:" in capsys.readouterr().out


@pytest.mark.slow  # two audit runs, about 12 s on 2 cores
def test_a_gdpcore_change_recomputes_every_model(tiny_registry, tmp_path, monkeypatch):
    import tasks.audit

    reg, _ = tiny_registry
    s1 = _audit(reg, tmp_path)
    assert len(s1.computed) == 2
    real = tasks.audit.code_version()
    monkeypatch.setattr(tasks.audit, "code_version", lambda: real + ".edited")  # as if gdpcore's source changed
    s2 = _audit(reg, tmp_path)
    assert sorted(s2.computed) == ["tiny-a:1", "tiny-b:1"] and s2.reused == []
    _, rows = query_report(tmp_path / "r.duckdb", "SELECT DISTINCT gdpcore_version FROM model_privacy")
    assert rows == [(real + ".edited",)]


def test_published_claims_are_reproduced_and_uncertified_ones_flagged(tiny_registry, tmp_path, capsys):
    """A CLT ("GDP" accountant) claim is reproduced by the CLT but not certified by the tight accountant; an RDP
    claim below what RDP gives is 'not reproduced'. Both reach the run summary, the rows and the card."""
    from flows.cli import main

    reg, write = tiny_registry
    mech = gdpcore.SubsampledGaussian(noise_multiplier=1.0, sampling_rate=100 / 10000, steps=50)
    clt = gdpcore.get_epsilon_from_named_accountant(mech, delta=1e-5, accountant="clt").epsilon
    rdp = gdpcore.get_epsilon_from_named_accountant(mech, delta=1e-5, accountant="rdp").epsilon
    tight = float(gdpcore.analyze(mech).epsilon(1e-5))
    assert clt < tight < rdp  # 0.314 < 0.583 < 1.136: the CLT estimate understates eps by half
    write(
        "a.yaml",
        TINY_A.format(version=1, sigma=1.0) + f"claimed: {{epsilon: {clt:.4f}, delta: 1.0e-5, accountant: GDP}}\n",
    )
    write("a2.yaml", TINY_A.format(version=2, sigma=1.0) + "claimed: {epsilon: 1.0, delta: 1.0e-5, accountant: RDP}\n")
    rc = main(
        [
            "audit",
            str(reg),
            "--lake",
            str(tmp_path / "lake"),
            "--report",
            str(tmp_path / "r.duckdb"),
            "--cards",
            str(tmp_path / "cards"),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert (
        f"published claim: tiny-a:1: claimed eps={float(f'{clt:.4f}'):g} at delta=1e-05: not certified: "
        f"tight upper bound {tight:.4g}" in out
    )
    assert f"published claim: tiny-a:2: claimed eps=1 at delta=1e-05: not reproduced (RDP gives {rdp:.4g})" in out
    _, rows = query_report(
        tmp_path / "r.duckdb",
        "SELECT version, claim_status, claim_certified, claim_reproduced_bound, "
        "claim_reproduced_epsilon, claim_tight_epsilon FROM model_privacy WHERE model = 'tiny-a' "
        "ORDER BY version",
    )
    assert rows[0][:4] == (1, "reproduced", False, "estimate") and rows[0][4] == pytest.approx(clt)
    assert rows[1][:4] == (2, "not reproduced", True, "upper") and rows[1][4] == pytest.approx(rdp)
    assert rows[0][5] == pytest.approx(tight) and rows[1][5] == pytest.approx(tight)
    card = (tmp_path / "cards" / "tiny-a" / "v1" / "card.md").read_text()
    assert "**The claim is not certified**" in card and "(estimate; central-limit mu" in card
    hf = yaml.safe_load((tmp_path / "cards" / "tiny-a" / "v1" / "model_card.yaml").read_text().strip("-\n"))
    claim = hf["differential_privacy"]["published_claim"]
    assert claim["certified_by_tight_accountant"] is False and claim["reproduced_bound"] == "estimate"
