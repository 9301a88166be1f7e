"""The chunk task's pure parts: rows and regrets equal gdpcore's, writes are atomic (no Prefect server needed)."""

from __future__ import annotations

import math

import pyarrow.parquet as pq
import pytest

import gdpcore
from tasks import lake as lake_mod
from tasks.evaluate import Chunk, EvalSettings, compute_chunk_table
from tasks.lake import STAGING_SCHEMA, atomic_write_parquet, code_version


def _chunk(mechs, representations=("gdp",)) -> Chunk:
    settings = EvalSettings(
        deltas=(1e-5, 1e-6),
        fprs=(0.0, 0.01, 0.5, 1.0),
        representations=representations,
        discretization=None,
        alpha_min=1e-10,
        code_version=code_version(),
    )
    return Chunk(spec_name="unit", kind=mechs[0].kind, mechanisms=tuple(m.to_json() for m in mechs), settings=settings)


def test_gaussian_rows_are_closed_form_and_regrets_come_from_the_report():
    mechs = [gdpcore.Gaussian(noise_multiplier=s) for s in (0.5, 2.0)]
    table = compute_chunk_table(_chunk(mechs, ("gdp", "epsilon_delta", "zcdp")), "run-x")
    assert table.schema.equals(STAGING_SCHEMA)
    for row, m in zip(table.to_pylist(), mechs, strict=True):
        assert row["cell_id"] == m.content_hash and row["status"] == "ok"
        assert row["mu"] == pytest.approx(1 / m.noise_multiplier, rel=1e-12) and row["mu_bound"] == "exact"
        assert row["curve_fnr"] == pytest.approx(
            list(gdpcore.get_beta_from_gdp(mu=1 / m.noise_multiplier, alpha=row["curve_fpr"])), abs=1e-12
        )
        report = gdpcore.analyze(m)
        expected = [("gdp", None, report.regret("gdp"))]
        expected += [("epsilon_delta", d, report.regret("epsilon_delta", delta=d)) for d in (1e-5, 1e-6)]
        expected += [("zcdp", None, report.regret("zcdp"))]
        got = list(zip(row["regret_representation"], row["regret_delta"], row["regret"], strict=True))
        assert [(r, d) for r, d, _ in got] == [(r, d) for r, d, _ in expected]
        for (_, _, v), (_, _, e) in zip(got, expected, strict=True):
            assert v == pytest.approx(float(e.regret if hasattr(e, "regret") else e), abs=1e-12)
        assert row["run_id"] == "run-x" and row["gdpcore_version"] == gdpcore.__version__


def test_failed_write_leaves_no_file(tmp_path, monkeypatch):
    table = compute_chunk_table(_chunk([gdpcore.Gaussian(noise_multiplier=1.0)]), "run-y")
    target = tmp_path / "staging" / "chunk-x.parquet"

    def broken(table, where, **kw):  # `where`: the open temporary (tasks.safe_write) or a path
        if hasattr(where, "write"):
            where.write(b"PAR1 half a file")
        else:
            with open(where, "wb") as fh:
                fh.write(b"PAR1 half a file")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(lake_mod.pq, "write_table", broken)
    with pytest.raises(OSError):
        atomic_write_parquet(table, target, {"run_id": "run-y"})
    assert list(target.parent.iterdir()) == []  # neither the target nor the temporary survives
    monkeypatch.undo()
    atomic_write_parquet(table, target, {"run_id": "run-y"})
    meta = pq.read_schema(target).metadata
    assert meta[b"gdp.lake_schema_version"] == b"1" and b"run-y" in meta[b"gdp.provenance"]
    assert math.isclose(pq.read_table(target).column("mu")[0].as_py(), 1.0)


def test_code_version_hashes_subpackages(tmp_path):
    """Cache invalidation must see every gdpcore file, including subpackages (gdpcore/engine/, kinds/, pld/)."""
    from tasks.lake import source_hash

    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "pkg" / "sub" / "b.py").write_text("y = 1\n")
    before = source_hash(tmp_path / "pkg")
    (tmp_path / "pkg" / "sub" / "b.py").write_text("y = 2\n")
    assert source_hash(tmp_path / "pkg") != before
    # Moving a file between packages changes the hash too (its relative path is hashed).
    (tmp_path / "pkg" / "sub" / "b.py").rename(tmp_path / "pkg" / "b.py")
    assert source_hash(tmp_path / "pkg") not in (before,)
